"""`rsc produce PREFIX`: stdin lines to a prefix's shards (docs/protocol.md, Command line).

Fails loudly (D3): every expected failure is one line on stderr, said when it starts,
again every 15 s while it lasts, and when it is over; it never exits for what a retry
can fix. The first Ctrl-C (or SIGTERM) stops reading and delivers what was accepted
for up to --flush-timeout; a second one exits at once. The runner's imports are made
only when the command runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING

from rsc.commands.arg_types import non_negative, non_negative_seconds, positive
from rsc.commands.member_tool import add_endpoint_flags, dispatch_signals, run_tool
from rsc.common.logs import add_logging_arguments
from rsc.member.pure.entry import DEFAULT_MAX_MESSAGE_BYTES

if TYPE_CHECKING:
    from rsc.member.shells.tool_config import Endpoints

BUFFER_LINES = 10_000  # accepted lines not yet in Redis, at most (plus one batch)
WRITE_BATCH = 500
FLUSH_TIMEOUT_S = 30.0  # how long a SIGTERM or Ctrl-C keeps delivering (D2)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "produce", help="write stdin lines (key<TAB>value, or JSON {key, value} with valueBase64, "
                        "keyBase64, headers) to a prefix")
    parser.add_argument("prefix", help="stream prefix")
    add_endpoint_flags(parser)
    parser.add_argument("--flush-timeout", type=non_negative_seconds, default=FLUSH_TIMEOUT_S,
                        metavar="SECONDS",
                        help="after SIGTERM or Ctrl-C, keep delivering accepted lines this long "
                             f"(default {FLUSH_TIMEOUT_S:g}), then exit 1 naming what is left")
    parser.add_argument("--min-replicas", type=non_negative, default=0, metavar="N",
                        help="a line counts as written only once N replicas hold it (Redis WAIT "
                             "on the connection that wrote it); a shortfall waits, and is said "
                             "every 15 s (default %(default)s: no wait)")
    parser.add_argument("--metrics-port", type=int, default=None,
                        help="serve the producer's Prometheus metrics on this port (/metrics), "
                             "with GET /healthz and /readyz (ready while it has routing and no "
                             "line waited for confirmation longer than a lease TTL, K11)")
    parser.add_argument("--metrics-host", default="127.0.0.1",
                        help="address of the metrics port (default 127.0.0.1)")
    parser.add_argument("--max-message-bytes", type=positive, default=DEFAULT_MAX_MESSAGE_BYTES,
                        metavar="N",
                        help="refuse a message whose key, value and headers take more than N "
                             "bytes: reported like a malformed line, and skipped "
                             "(default %(default)s: 1 MiB)")
    add_logging_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rsc.member.redis_io.unrecoverable import EXIT_UNRECOVERABLE, Unrecoverable
    from rsc.member.shells.tool_config import BadConfig, endpoints
    from rsc.tools.tool_output import line_writer, setup_logging

    setup_logging("produce", args.log_level, args.log_format)
    try:
        urls = endpoints(args, os.environ)
    except BadConfig as exc:
        line_writer("produce")(str(exc), level=logging.ERROR)
        return 1
    except Unrecoverable as exc:
        line_writer("produce")(str(exc), level=logging.ERROR)
        return EXIT_UNRECOVERABLE
    return run_tool("produce", produce, args.prefix, urls, sys.stdin.fileno(), args.flush_timeout,
                    args.min_replicas, args.max_message_bytes,
                    None if args.metrics_port is None else (args.metrics_host, args.metrics_port))


async def produce(prefix: str, urls: Endpoints, input_fd: int,
                  flush_timeout_s: float = FLUSH_TIMEOUT_S, min_replicas: int = 0,
                  max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                  metrics_at: tuple[str, int] | None = None) -> int:
    import trio

    from rsc.common.errors import unwrap_single
    from rsc.member.notices import Notices
    from rsc.member.producer import open_producer
    from rsc.tools.input_lines import Accepted, read_lines
    from rsc.tools.tool_output import exit_now, line_writer

    say = line_writer("produce")
    notices = Notices(say)
    counts = {"accepted": 0, "malformed": 0, "line": 0}
    interrupted: list[int] = []
    reading = trio.CancelScope()
    flushing = trio.CancelScope()  # D2: after a signal, delivering lasts --flush-timeout
    lines_in, lines_out = trio.open_memory_channel[Accepted](BUFFER_LINES)
    try:
        # signals from the start: one that comes while the producer opens waits here (a
        # KeyboardInterrupt raised in whatever runs then can be lost)
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with open_producer(urls.coordinator_url, urls.redis_url, prefix,
                                     token=urls.token, notices=notices, ca_file=urls.ca_file,
                                     min_replicas=min_replicas,
                                     max_message_bytes=max_message_bytes) as producer:

                async def read_input() -> None:
                    async with lines_in:
                        with reading:
                            await producer.ready()  # routing once, and the right Redis: then read
                            await read_lines(input_fd, lines_in, counts, say, limit=max_message_bytes)

                async def write_output() -> None:
                    async for first in lines_out:
                        batch = [first]
                        while len(batch) < WRITE_BATCH:
                            try:
                                batch.append(lines_out.receive_nowait())
                            except (trio.WouldBlock, trio.EndOfChannel):
                                break
                        producer.holds_input = True  # K6: from now on D2 keeps what was accepted
                        try:
                            await producer.send_batch([line.record for line in batch])
                        except (TypeError, ValueError):
                            # refused before anything was sent; read_lines checked each line as
                            # the producer does, so this is a defect: still, B3, one line must
                            # not cost the others
                            await write_one_by_one(batch)

                async def write_one_by_one(batch: list[Accepted]) -> None:
                    for line in batch:
                        try:
                            await producer.send_batch([line.record])
                        except (TypeError, ValueError) as exc:
                            counts["accepted"] -= 1
                            counts["malformed"] += 1
                            say(f"line {line.number}: malformed: {exc}")

                def on_signal(signum: int) -> None:
                    if interrupted:
                        exit_now(say, f"exiting at once: {counts['accepted'] - producer.sent} "
                                 "accepted lines not written")
                    interrupted.append(signum)
                    say(f"draining: reading no more input, {counts['accepted'] - producer.sent} "
                        f"accepted lines left to write for up to {flush_timeout_s:g} s "
                        "(Ctrl-C again to exit at once)")
                    reading.cancel()
                    flushing.deadline = trio.current_time() + flush_timeout_s

                async with trio.open_nursery() as nursery:
                    if metrics_at is not None:  # K11
                        from rsc.tools.probes import producer_routes, serve_probes

                        await serve_probes(nursery, producer_routes(producer), *metrics_at,
                                           "metrics")
                    nursery.start_soon(dispatch_signals, signals, on_signal)
                    with flushing:
                        async with trio.open_nursery() as work:
                            work.start_soon(read_input)
                            work.start_soon(write_output)
                    nursery.cancel_scope.cancel()
                if flushing.cancelled_caught:
                    left = counts["accepted"] - producer.sent
                    say(f"flush timeout: {left} accepted lines not delivered after "
                        f"{flush_timeout_s:g} s (sent {producer.sent})")
                    return 1
                summary = (f"sent {producer.sent}, retried {producer.retried}, "
                           f"rerouted {producer.rerouted}")
                if counts["malformed"]:
                    summary += f", malformed {counts['malformed']}"
                say(summary, level=logging.INFO)
    except BaseExceptionGroup as group:
        unwrap_single(group)
    if interrupted:
        return 128 + interrupted[0]
    return 1 if counts["malformed"] else 0
