"""`rsc produce` and `rsc consume` (docs/protocol.md, Command line: their output is a contract).

Both fail loudly (D3): every expected failure is one line on stderr, said when
it starts, again every 15 s while it lasts, and when it is over; neither exits
for what a retry can fix. A URL no retry can fix, and a Redis that is not the
coordinator's (storeId), exit 1 with one line. The first Ctrl-C (or SIGTERM)
drains and says "draining"; a second one exits at once.

URLs and the token come from the flags, else from RSC_COORDINATOR_URL (default
ws://127.0.0.1:8765), RSC_REDIS_URL and RSC_TOKEN, so they stay out of `ps`.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import math
import os
import select
import signal
import stat
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TextIO

import attrs
import redis
import trio

from rsc.common import gc_policy as gc_control
from rsc.common import probe_http
from rsc.common.errors import unwrap_single
from rsc.common.probe_http import Answer, Route
from rsc.common.redact import redact_text, redact_url
from rsc.common.redis_connect import SentinelServiceUnknown
from rsc.member.health import ListenerStatus
from rsc.member.listener import Listener, member_instance_ids
from rsc.member.notices import REPEAT_S, Notices, redis_problem, then
from rsc.member.peek import MessageQuota, QuotaReached, peek, routing_request
from rsc.member.producer import no_routing_line, open_producer
from rsc.member.reconcile import Event
from rsc.member.runtime import InstanceFenced, Message
from rsc.member.session import (
    Backoff,
    BadCoordinatorUrl,
    ResponseUndecodable,
    Session,
    SessionClosed,
    SessionRefused,
    check_coordinator_url,
    open_session,
)
from rsc.member.streams import StoreMismatch, check_store_id, connect, store_id_of
from rsc.member.unrecoverable import (
    EXIT_UNRECOVERABLE,
    Unrecoverable,
    redis_error_is_permanent,
    redis_unrecoverable_line,
    redis_url_problem,
    refusal_is_permanent,
)
from rsc.protocol import GetRouting, Routing, Status
from rsc.protocol.messages import FieldValueError, check_name

READ_CHUNK = 1 << 16
BUFFER_LINES = 10_000  # produce: accepted lines not yet in Redis, at most (plus one batch)
WRITE_BATCH = 500
DEFAULT_COORDINATOR_URL = "ws://127.0.0.1:8765"
EXIT_INTERRUPTED = 130
FLUSH_TIMEOUT_S = 30.0  # produce: how long a SIGTERM or Ctrl-C keeps delivering (D2)


class MalformedLine(ValueError):
    """A produce input line that is neither `key<TAB>value` nor a JSON object with both."""


class BadConfig(ValueError):
    """A URL or setting no retry can fix; its text is the line to print."""


def parse_line(line: str) -> tuple[str, str]:
    """(key, value) of one input line; JSON values that are not strings stay JSON text."""
    if line.lstrip().startswith("{"):
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise MalformedLine(f"invalid JSON: {exc}") from None
        if not isinstance(obj, dict) or "key" not in obj or "value" not in obj:
            raise MalformedLine("a JSON line needs an object with 'key' and 'value'")
        if not isinstance(obj["key"], str):
            raise MalformedLine("'key' must be a string")
        value = obj["value"]
        return obj["key"], value if isinstance(value, str) else json.dumps(value)
    key, tab, value = line.partition("\t")
    if not tab:
        raise MalformedLine("expected key<TAB>value or a JSON object")
    return key, value


class LineSplitter:
    """Bytes in, complete lines out (UTF-8, without their newline)."""

    def __init__(self) -> None:
        self._rest = b""

    def feed(self, data: bytes) -> list[bytes]:
        *lines, self._rest = (self._rest + data).split(b"\n")
        return lines

    def finish(self) -> list[bytes]:
        rest, self._rest = self._rest, b""
        return [rest] if rest else []


# --- configuration ---------------------------------------------------------------------


@attrs.frozen
class Endpoints:
    """Where a console tool connects, from its flags or the environment."""

    coordinator_url: str
    redis_url: str
    token: str | None
    ca_file: str | None = None  # what a wss:// coordinator is verified against, beside the system store


def endpoints(args: argparse.Namespace, environ: Mapping[str, str]) -> Endpoints:
    """Flags first, then RSC_COORDINATOR_URL / RSC_REDIS_URL / RSC_TOKEN; BadConfig if unusable."""
    coordinator = args.coordinator or environ.get("RSC_COORDINATOR_URL") or DEFAULT_COORDINATOR_URL
    try:
        coordinator = check_coordinator_url(coordinator)
    except BadCoordinatorUrl as exc:
        raise BadConfig(str(exc)) from None
    redis_url = args.redis_url or environ.get("RSC_REDIS_URL")
    if not redis_url:
        raise BadConfig("no Redis URL: pass --redis-url or set RSC_REDIS_URL "
                        "(the coordinator's Redis)")
    problem = redis_url_problem(redis_url)
    if problem is not None:  # D3: redis-py would silently use db 0
        raise Unrecoverable(problem)
    try:
        connect(redis_url).close()
    except ValueError as exc:
        raise BadConfig(f"bad Redis URL {redact_url(redis_url)!r}: {exc}") from None
    except SentinelServiceUnknown as exc:  # K1: no waiting makes the sentinels know it
        raise Unrecoverable(redis_unrecoverable_line(exc, redis_url)) from None
    return Endpoints(coordinator_url=coordinator, redis_url=redis_url,
                     token=args.token or environ.get("RSC_TOKEN") or None,
                     ca_file=args.ca_file or environ.get("RSC_CA_FILE") or None)


def _add_endpoint_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--coordinator", default=None,
                        help="coordinator URL, ws://H:P (default: $RSC_COORDINATOR_URL, "
                        f"else {DEFAULT_COORDINATOR_URL})")
    parser.add_argument("--redis-url", default=None,
                        help="Redis URL of the shard streams (default: $RSC_REDIS_URL)")
    parser.add_argument("--token", default=None,
                        help="member endpoint token (default: $RSC_TOKEN)")
    parser.add_argument("--ca-file", default=None, metavar="FILE",
                        help="CA certificates (PEM) a wss:// coordinator is verified against, beside "
                             "the system trust store (default: $RSC_CA_FILE)")


def add_produce_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "produce", help="write stdin lines (key<TAB>value or JSON {key, value}) to a prefix")
    parser.add_argument("prefix", help="stream prefix")
    _add_endpoint_flags(parser)
    parser.add_argument("--flush-timeout", type=_non_negative_seconds, default=FLUSH_TIMEOUT_S,
                        metavar="SECONDS",
                        help="after SIGTERM or Ctrl-C, keep delivering accepted lines this long "
                             f"(default {FLUSH_TIMEOUT_S:g}), then exit 1 naming what is left")
    parser.add_argument("--min-replicas", type=_non_negative, default=0, metavar="N",
                        help="a line counts as written only once N replicas hold it (Redis WAIT "
                             "on the connection that wrote it); a shortfall waits, and is said "
                             "every 15 s (default %(default)s: no wait)")
    parser.set_defaults(run=run_produce)


def add_consume_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "consume", help="run members of a group, printing one JSON line per processed message")
    parser.add_argument("prefix", help="stream prefix")
    parser.add_argument("group", nargs="?", default=None,
                        help="consumer group (not with --peek)")
    _add_endpoint_flags(parser)
    parser.add_argument("--max-messages", type=_positive, default=None, metavar="N",
                        help="stop after N messages handled and acked (then leave, exit 0); "
                             "with --peek: print at most N")
    parser.add_argument("--peek", action="store_true",
                        help="print what the shards hold (XRANGE over the current routing) "
                             "without joining a group or acking anything")
    parser.add_argument("--concurrency", type=_positive, default=1,
                        help="members to run (default 1)")
    parser.add_argument("--workers", type=_positive, default=4,
                        help="worker capacity of each member (default 4)")
    parser.add_argument("--work-ms", type=float, default=0.0,
                        help="simulated handler work per message, in ms (default 0)")
    parser.add_argument("--metrics-port", type=int, default=None,
                        help="serve the members' Prometheus metrics on this port (/metrics, "
                             "and /healthz and /readyz as --health-port does)")
    parser.add_argument("--metrics-host", default="127.0.0.1",
                        help="address of the metrics port (default 127.0.0.1)")
    parser.add_argument("--health-port", type=int, default=None,
                        help="answer GET /healthz (liveness) and /readyz (readiness) on this "
                             "port, 404 elsewhere (default $RSC_HEALTH_PORT)")
    parser.add_argument("--health-host", default="127.0.0.1",
                        help="address of the health port (default 127.0.0.1; 0.0.0.0 for a "
                             "Kubernetes probe)")
    parser.add_argument("--events", action="store_true",
                        help="write one JSON line per member event to stderr (joined, assigned, revoking, "
                             "revoked, fenced, left, join refused, instance fenced)")
    parser.add_argument("--instance-id", default=None, metavar="ID",
                        help="make the members static (default $RSC_INSTANCE_ID): the group "
                             "keeps their shards while they restart; with --concurrency N > 1 "
                             "member i uses ID-i")
    parser.add_argument("--leave-on-exit", action="store_true",
                        help="static members: leave the group for real on SIGTERM (epoch -1, "
                             "a scale-down) instead of for a while (epoch -2)")
    parser.set_defaults(run=run_consume)


def _non_negative_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value >= 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a number of seconds from 0, got {text!r}")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _line_writer(tool: str, stream: TextIO | None = None) -> Callable[[str], None]:
    """Print `rsc <tool>: <line>` on stderr, flushed (a closed stderr is ignored)."""

    def write(line: str) -> None:
        try:  # K7: the safety net, whatever the line quotes
            print(redact_text(f"rsc {tool}: {line}"), file=stream or sys.stderr, flush=True)
        except (BrokenPipeError, ValueError):
            pass

    return write


def _exit_now(say: Callable[[str], None], line: str) -> None:
    """The second Ctrl-C: say why, then end the process without unwinding anything."""
    say(line)
    os._exit(EXIT_INTERRUPTED)


def _run(tool: str, main: Callable[..., Awaitable[int]], *args: object) -> int:
    """trio.run(main, *args) with one line, not a traceback, for what stops a tool at once."""
    from rsc.common.tls import TlsFailed

    say = _line_writer(tool)
    try:
        return trio.run(main, *args)
    except KeyboardInterrupt:  # before the signal handlers were installed
        return EXIT_INTERRUPTED
    except (StoreMismatch, BadConfig, BadCoordinatorUrl, InstanceFenced) as exc:
        say(str(exc))
        return 1
    except TlsFailed as exc:  # D3: a certificate that does not verify cannot heal by waiting
        say(exc.line)
        return EXIT_UNRECOVERABLE
    except Unrecoverable as exc:  # D3: what waiting cannot heal
        say(str(exc))
        return EXIT_UNRECOVERABLE
    except BaseExceptionGroup as group:
        found = _unrecoverable_in(group)
        if found is None:
            raise
        say(str(found))
        return EXIT_UNRECOVERABLE


def _unrecoverable_in(exc: BaseException) -> Unrecoverable | None:
    """The Unrecoverable somewhere in a (nested) exception group, None when there is none."""
    if isinstance(exc, Unrecoverable):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _unrecoverable_in(inner)
            if found is not None:
                return found
    return None


# --- produce ---------------------------------------------------------------------------


def run_produce(args: argparse.Namespace) -> int:
    try:
        urls = endpoints(args, os.environ)
    except BadConfig as exc:
        _line_writer("produce")(str(exc))
        return 1
    except Unrecoverable as exc:
        _line_writer("produce")(str(exc))
        return EXIT_UNRECOVERABLE
    _quiet_repeats(logging.getLogger("rsc.member"), "produce")
    return _run("produce", _produce, args.prefix, urls, sys.stdin.fileno(), args.flush_timeout,
                args.min_replicas)


async def _produce(prefix: str, urls: Endpoints, input_fd: int,
                   flush_timeout_s: float = FLUSH_TIMEOUT_S, min_replicas: int = 0) -> int:
    say = _line_writer("produce")
    notices = Notices(say)
    counts = {"accepted": 0, "malformed": 0, "line": 0}
    interrupted: list[int] = []
    reading = trio.CancelScope()
    flushing = trio.CancelScope()  # D2: after a signal, delivering lasts --flush-timeout
    lines_in, lines_out = trio.open_memory_channel[tuple[str, str]](BUFFER_LINES)
    try:
        async with open_producer(urls.coordinator_url, urls.redis_url, prefix,
                                 token=urls.token, notices=notices, ca_file=urls.ca_file,
                                 min_replicas=min_replicas) as producer:

            async def read_input() -> None:
                async with lines_in:
                    with reading:
                        await producer.ready()  # routing once, and the right Redis: then read
                        await _read_lines(input_fd, lines_in, counts, say)

            async def write_output() -> None:
                async for first in lines_out:
                    batch = [first]
                    while len(batch) < WRITE_BATCH:
                        try:
                            batch.append(lines_out.receive_nowait())
                        except (trio.WouldBlock, trio.EndOfChannel):
                            break
                    producer.holds_input = True  # K6: from now on D2 keeps what was accepted
                    await producer.send_batch(batch)

            def on_signal(signum: int) -> None:
                if interrupted:
                    _exit_now(say, f"exiting at once: {counts['accepted'] - producer.sent} "
                              "accepted lines not written")
                interrupted.append(signum)
                say(f"draining: reading no more input, {counts['accepted'] - producer.sent} "
                    f"accepted lines left to write for up to {flush_timeout_s:g} s "
                    "(Ctrl-C again to exit at once)")
                reading.cancel()
                flushing.deadline = trio.current_time() + flush_timeout_s

            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_dispatch_signals, signals, on_signal)
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
            say(summary)
    except BaseExceptionGroup as group:
        unwrap_single(group)
    if interrupted:
        return 128 + interrupted[0]
    return 1 if counts["malformed"] else 0


async def _read_lines(fd: int, lines_in: trio.MemorySendChannel[tuple[str, str]],
                      counts: dict[str, int], say: Callable[[str], None]) -> None:
    """Parse input lines into the bounded channel: no more is read while it is full."""
    splitter = LineSplitter()
    while True:
        # a thread read that cancellation abandons, so Ctrl-C works on a terminal too
        data = await trio.to_thread.run_sync(os.read, fd, READ_CHUNK, abandon_on_cancel=True)
        for raw in splitter.feed(data) if data else splitter.finish():
            counts["line"] += 1
            try:
                record = parse_line(raw.decode("utf-8").removesuffix("\r"))
            except (MalformedLine, UnicodeDecodeError) as exc:
                counts["malformed"] += 1
                say(f"line {counts['line']}: malformed: {exc}")
                continue
            await lines_in.send(record)
            counts["accepted"] += 1
        if not data:
            return


async def _dispatch_signals(signals: AsyncIterator[int], on_signal: Callable[[int], None]
                            ) -> None:
    async for signum in signals:
        on_signal(signum)


# --- consume ---------------------------------------------------------------------------


def run_consume(args: argparse.Namespace) -> int:
    try:
        urls = endpoints(args, os.environ)
        instance_id = args.instance_id or os.environ.get("RSC_INSTANCE_ID") or None
        if instance_id is not None:  # S1: the rules of a memberId
            for instance in member_instance_ids(instance_id, args.concurrency):
                try:
                    check_name("instance_id", instance or "", allow_braces=True)
                except FieldValueError as exc:
                    raise BadConfig(f"--instance-id {instance_id!r}: {exc}") from None
    except BadConfig as exc:
        _line_writer("consume")(str(exc))
        return 1
    except Unrecoverable as exc:
        _line_writer("consume")(str(exc))
        return EXIT_UNRECOVERABLE
    if args.peek:
        if args.group is not None:
            _line_writer("consume")("--peek joins no group: give PREFIX alone")
            return EXIT_UNRECOVERABLE
        return _run("consume", _peek, args, urls)
    if args.group is None:
        _line_writer("consume")("a consumer GROUP is needed (or --peek to look without one)")
        return EXIT_UNRECOVERABLE
    _quiet_repeats(logging.getLogger("rsc.member"), "consume")
    gc_control.install()  # the coordinator's GC policy for this member process (RSC_GC)
    return _run("consume", _consume, args, urls)


async def _peek(args: argparse.Namespace, urls: Endpoints) -> int:
    """`rsc consume PREFIX --peek`: the current routing's shards, read with XRANGE."""
    say = _line_writer("consume")
    out = StdoutLines(on_closed=lambda: None)
    try:  # Redis first: refused credentials are a configuration error whatever the coordinator does
        await trio.to_thread.run_sync(_ping, urls.redis_url)
    except redis.RedisError as exc:
        if redis_error_is_permanent(exc):
            raise Unrecoverable(redis_unrecoverable_line(exc, urls.redis_url)) from exc
        say(redis_problem(exc, urls.redis_url))
        return 1
    try:
        async with open_session(urls.coordinator_url, "member", token=urls.token,
                                connect_timeout=5.0) as session:
            with trio.fail_after(10):
                routing = await session.request(routing_request(args.prefix))
    except SessionRefused as exc:
        if refusal_is_permanent(exc.status_code):
            raise Unrecoverable(exc.line) from exc
        say(exc.line)
        return 1
    except (SessionClosed, ResponseUndecodable, trio.TooSlowError) as exc:
        say(getattr(exc, "line", None) or f"the coordinator at {urls.coordinator_url} did not "
            "answer in time")
        return 1
    if not isinstance(routing, Routing) or routing.status != Status.OK:
        say(no_routing_line(args.prefix))
        return 1
    try:
        await peek(args.prefix, routing=routing, redis_url=urls.redis_url,
                   limit=args.max_messages, write=out.write)
    except PipeClosed:
        return 0
    except redis.RedisError as exc:
        if redis_error_is_permanent(exc):
            raise Unrecoverable(redis_unrecoverable_line(exc, urls.redis_url)) from exc
        say(redis_problem(exc, urls.redis_url))
        return 1
    return 0


def _ping(redis_url: str) -> None:
    client = connect(redis_url, timeout_s=5.0, retries=False)
    try:
        client.ping()
    finally:
        client.close()


def message_line(message: Message) -> str:
    """The stdout line of one processed message."""
    return json.dumps({"shard": message.shard, "id": message.id, "key": message.key,
                       "value": message.value, "memberId": message.member_id},
                      separators=(",", ":"), ensure_ascii=False)


def event_line(member_id: str, event: Event) -> str:
    """The stderr line of one member event (`--events`)."""
    return json.dumps({"event": event.name, "memberId": member_id,
                       "memberEpoch": event.member_epoch, "shards": list(event.shards),
                       "reason": event.reason}, separators=(",", ":"), ensure_ascii=False)


class PipeClosed(Exception):
    """Nobody reads stdout any more: the message was not printed, so it is not acked."""


class StdoutLines:
    """Message lines on stdout; a closed pipe (`| head -1`) stops the consumer cleanly."""

    def __init__(self, on_closed: Callable[[], None], stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.closed = False
        self._on_closed = on_closed

    def write(self, line: str) -> None:
        if self.closed:
            raise PipeClosed
        try:
            self.stream.write(line + "\n")
            self.stream.flush()
        except BrokenPipeError:
            self._close()
            raise PipeClosed from None

    def _close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:  # what is still buffered goes nowhere, quietly, instead of an error at exit
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass
        self._on_closed()

    async def watch(self, interval_s: float = 0.5) -> None:
        """Notice a pipe whose reader is gone while nothing is being written."""
        try:
            fd = self.stream.fileno()
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                return
        except (OSError, ValueError):
            return
        poller = select.poll()
        poller.register(fd, 0)  # POLLERR arrives unasked once the read end is closed
        while not self.closed:
            if any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0)):
                self._close()
                return
            await trio.sleep(interval_s)


class ConsumeWatch:
    """What `rsc consume` needs before its members start, and says while it is missing.

    Keeps its own session to the coordinator (getRouting with subscribe) and pings
    Redis, so an unreachable or refusing coordinator, a prefix with no routing, a
    down Redis or another Redis (storeId) each get their line. `ready` is set once
    Redis answers and the storeId was checked (or the prefix has routing and the
    coordinator sends no storeId): only then may members start taking messages.
    """

    def __init__(self, urls: Endpoints, stream_prefix: str, notices: Notices, *,
                 redis_interval_s: float = 2.0) -> None:
        self.urls = urls
        self.stream_prefix = stream_prefix
        self.notices = notices
        self.ready = trio.Event()
        self._redis_interval_s = redis_interval_s
        self._client = connect(urls.redis_url, timeout_s=2.0, retries=False)
        self._redis_ok = False
        self._store_checked = False
        self._routed = False

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch_redis)
                nursery.start_soon(self._watch_coordinator)
        except BaseExceptionGroup as group:
            unwrap_single(group)
        finally:
            self._client.close()

    def _check_ready(self) -> None:
        if self._redis_ok and (self._store_checked or self._routed):
            self.ready.set()

    async def _watch_redis(self) -> None:
        url = self.urls.redis_url
        while True:
            try:
                await trio.to_thread.run_sync(self._client.ping)
            except redis.RedisError as exc:
                if redis_error_is_permanent(exc):  # D3: a bad db index never heals
                    raise Unrecoverable(redis_unrecoverable_line(exc, url)) from exc
                self._redis_ok = False
                self.notices.say("redis", then(redis_problem(exc, url), "retrying"))
            else:
                self._redis_ok = True
                self.notices.clear("redis", f"Redis at {redact_url(url)} answers again")
                self._check_ready()
            await trio.sleep(self._redis_interval_s)

    async def _watch_coordinator(self) -> None:
        url = self.urls.coordinator_url
        backoff = Backoff(0.05, 2.0)
        while True:
            try:
                async with open_session(url, "member", token=self.urls.token,
                                        connect_timeout=5.0, ca_file=self.urls.ca_file) as session:
                    await self._ask(session, subscribe=True)
                    self.notices.clear("coordinator", f"connected to the coordinator at {url}")
                    backoff.reset()
                    await self._follow(session)
                    line = (f"lost the coordinator session at {url} "
                            f"({session.close_reason or 'connection closed'})")
            except SessionRefused as exc:
                if refusal_is_permanent(exc.status_code):  # D3: a wrong token never heals
                    raise Unrecoverable(exc.line) from exc
                line = exc.line
            except SessionClosed as exc:
                line = exc.line
            except (ResponseUndecodable, trio.TooSlowError):
                line = f"the coordinator at {url} did not answer a request in time"
            suffix = " (members keep their shards while their lease lasts)" \
                if self.ready.is_set() else ""
            self.notices.say("coordinator", then(line, f"retrying{suffix}"))
            await trio.sleep(backoff.next())

    async def _ask(self, session: Session, *, subscribe: bool) -> None:
        with trio.fail_after(10):
            response = await session.request(
                GetRouting(request_id=0, stream_prefix=self.stream_prefix, subscribe=subscribe))
        if isinstance(response, Routing):
            await self._adopt(response)

    async def _follow(self, session: Session) -> None:
        """Adopt routing pushes until the session ends; while there is no routing, ask
        again now and then, so the hint is repeated."""
        pushes = session.pushes
        while True:
            with trio.move_on_after(REPEAT_S / 3 if not self._routed else math.inf):
                try:
                    push = await pushes.receive()
                except (trio.EndOfChannel, trio.ClosedResourceError):
                    return
                if isinstance(push, Routing) and push.stream_prefix == self.stream_prefix:
                    await self._adopt(push)
                continue
            await self._ask(session, subscribe=False)

    async def _adopt(self, message: Routing) -> None:
        expected = store_id_of(message)
        if expected is not None and not self._store_checked:
            await self._check_store(expected)
            self._store_checked = True
        if message.status == Status.OK:
            if not self._routed and self.notices.active("routing"):
                self.notices.clear("routing", f"prefix {self.stream_prefix!r} has routing now: "
                                   f"version {message.version}, {message.shard_count} shards")
            self._routed = True
        elif message.status == Status.UNKNOWN_STREAM:
            self.notices.say("routing", no_routing_line(self.stream_prefix))
        self._check_ready()

    async def _check_store(self, expected: str) -> None:
        """StoreMismatch unless this Redis is the coordinator's (Redis errors retried)."""
        backoff = Backoff(0.05, 2.0)
        while True:
            try:
                await trio.to_thread.run_sync(lambda: check_store_id(
                    self._client, expected, redis_url=self.urls.redis_url,
                    coordinator_url=self.urls.coordinator_url))
                return
            except redis.RedisError as exc:
                if redis_error_is_permanent(exc):  # D3: a bad db index never heals
                    raise Unrecoverable(redis_unrecoverable_line(exc, self.urls.redis_url)) from exc
                self.notices.say("redis", then(redis_problem(exc, self.urls.redis_url), "retrying"))
                await trio.sleep(backoff.next())


async def _consume(args: argparse.Namespace, urls: Endpoints) -> int:
    say = _line_writer("consume")
    notices = Notices(say)
    stopping = trio.Event()
    out = StdoutLines(on_closed=stopping.set)
    member_ids: list[str] | None = None
    instance_id = args.instance_id or os.environ.get("RSC_INSTANCE_ID") or None  # S1
    quota = MessageQuota(args.max_messages)

    def on_event(member_id: str, event: Event) -> None:
        try:
            sys.stderr.write(event_line(member_id, event) + "\n")
            sys.stderr.flush()
        except (BrokenPipeError, ValueError):
            pass

    async def handle(message: Message) -> None:
        if args.work_ms > 0:
            await trio.sleep(args.work_ms / 1000)
        if not quota.take():  # --max-messages: not printed, so not acked: it stays pending
            raise QuotaReached
        out.write(message_line(message))
        if quota.reached:  # the last one: leave once it (and every other printed one) is acked
            stopping.set()

    def make_listener() -> Listener:
        return Listener(
            handle, stream_prefix=args.prefix, consumer_group=args.group,
            coordinator_url=urls.coordinator_url, redis_url=urls.redis_url, token=urls.token,
            concurrency=args.concurrency, runtime_max_concurrency=args.workers,
            member_ids=member_ids, on_event=on_event if args.events else None,
            check_store_id=False, ca_file=urls.ca_file,  # ConsumeWatch checked the store
            # one line per problem, whoever of the watch and members sees it
            notices=notices, instance_id=instance_id)

    consumers = make_listener()
    member_ids = [member.member_id for member in consumers.members]
    health_port = args.health_port if args.health_port is not None else _env_port("RSC_HEALTH_PORT")

    def on_signal(signum: int) -> None:
        if stopping.is_set():
            _exit_now(say, "exiting at once without draining (the coordinator frees the "
                      "shards when the lease runs out)")
        leaving = ("leaving the group" if instance_id is None or args.leave_on_exit else
                   f"leaving the group for a while (instance id {instance_id!r} keeps its "
                   "shards until it is back)")
        say(f"draining: finishing in-flight messages and {leaving} "
            "(Ctrl-C again to exit at once)")
        stopping.set()

    async def run_members() -> None:
        nonlocal consumers
        backoff = Backoff(0.5, 5.0)
        while True:
            try:
                await consumers.run()
                return
            except* redis.RedisError as group:  # Redis went away while the members started
                first = group.exceptions[0]
                if redis_error_is_permanent(first):  # D3: a bad db index never heals
                    raise Unrecoverable(redis_unrecoverable_line(first, urls.redis_url)) from first
                notices.say("redis", then(redis_problem(first, urls.redis_url), "retrying"))
            await trio.sleep(backoff.next())
            if stopping.is_set():
                return
            consumers = make_listener()

    watch = ConsumeWatch(urls, args.prefix, notices)
    try:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                probes = health_routes(lambda: consumers.status())
                if args.metrics_port is not None:
                    await _serve_probes(nursery, {**probes, "/metrics": _metrics_route(
                        lambda: consumers)}, args.metrics_host, args.metrics_port, "metrics")
                if health_port is not None:
                    await _serve_probes(nursery, probes, args.health_host, health_port, "health")
                nursery.start_soon(_dispatch_signals, signals, on_signal)
                nursery.start_soon(watch.run)
                nursery.start_soon(out.watch)
                await _first_of(watch.ready, stopping)
                if not stopping.is_set():
                    members_done = trio.Event()

                    async def members() -> None:
                        try:
                            await run_members()
                        finally:
                            members_done.set()

                    nursery.start_soon(members)
                    await _first_of(members_done, stopping)
                    consumers.stop(leave=args.leave_on_exit)
                    await members_done.wait()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        unwrap_single(group)
    return 0


async def _first_of(*events: trio.Event) -> None:
    """Return once any of `events` is set."""
    async with trio.open_nursery() as nursery:
        for event in events:
            async def wait(event: trio.Event = event) -> None:
                await event.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(wait)


def health_routes(status: Callable[[], ListenerStatus]) -> dict[str, Route]:
    """D7: `GET /healthz` 200 unless a restart should cure a member (503 with the reason),
    `GET /readyz` 200 while every member is in its group (503 with the reason)."""
    def healthz() -> Answer:
        verdict = status()
        return probe_http.probe(verdict.healthy, verdict.reason if not verdict.healthy else "ok")

    def readyz() -> Answer:
        verdict = status()
        return probe_http.probe(verdict.ready, verdict.reason or "ready")

    return {"/healthz": healthz, "/readyz": readyz}


def _metrics_route(consumers: Callable[[], Listener]) -> Route:
    """Prometheus text of the members' stats, read at scrape time."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

    from rsc.member.metrics import MemberCollector

    registry = CollectorRegistry()
    registry.register(MemberCollector(lambda: [member.stats for member in consumers().members]))
    return lambda: Answer(200, generate_latest(registry), CONTENT_TYPE_PLAIN_0_0_4)


async def _serve_probes(nursery: trio.Nursery, routes: dict[str, Route], host: str, port: int,
                        what: str) -> None:
    try:
        await nursery.start(functools.partial(probe_http.serve_http, routes, host, port))
    except OSError as exc:
        raise BadConfig(f"cannot serve {what} on {host}:{port}: {exc.strerror or exc} "
                        f"(pick another --{what}-port or --{what}-host)") from None


def _env_port(name: str) -> int | None:
    """A port from the environment (empty: unset); BadConfig naming the variable otherwise."""
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise BadConfig(f"{name}={text!r} is not a port (0-65535)")
    return int(text)


class _RepeatFilter(logging.Filter):
    """Lets one log line of a kind through per REPEAT_S (a retry loop says it once)."""

    def __init__(self, repeat_s: float = REPEAT_S) -> None:
        super().__init__()
        self._repeat_s = repeat_s
        self._last: dict[tuple[str, object], float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(arg, PipeClosed | QuotaReached)
                                                  for arg in record.args):
            return False  # the consumer is stopping because stdout closed: not a failure
        key = (record.name, record.msg)
        now = time.monotonic()
        if now - self._last.get(key, -self._repeat_s) < self._repeat_s:
            return False
        self._last[key] = now
        return True


def _quiet_repeats(logger: logging.Logger, tool: str) -> None:
    """Member warnings on stderr as `rsc <tool>: ...` lines, each kind at most every 15 s."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"rsc {tool}: %(message)s"))
    handler.addFilter(_RepeatFilter())
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    logger.propagate = False
