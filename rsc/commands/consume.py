"""`rsc consume PREFIX GROUP`: run members of a group, one JSON line per processed message
(docs/protocol.md, Command line: the output is a contract); `--peek` is rsc/commands/peek.py.

Fails loudly (D3): every expected failure is one line on stderr, said when it starts,
again every 15 s while it lasts, and when it is over; it never exits for what a retry
can fix. The first Ctrl-C (or SIGTERM) drains and says "draining"; a second one exits
at once. The runner's imports are made only when the command runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING

from rsc.commands.arg_types import positive
from rsc.commands.member_tool import add_endpoint_flags, dispatch_signals, run_tool
from rsc.common.env_config import own_argument
from rsc.common.logs import add_logging_arguments
from rsc.member.redis_io.unrecoverable import redis_unrecoverable

if TYPE_CHECKING:
    import trio

    from rsc.member.shells.tool_config import Endpoints


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "consume", help="run members of a group, printing one JSON line per processed message")
    parser.add_argument("prefix", help="stream prefix")
    parser.add_argument("group", nargs="?", default=None,
                        help="consumer group (not with --peek)")
    add_endpoint_flags(parser)
    parser.add_argument("--max-messages", type=positive, default=None, metavar="N",
                        help="stop after N messages handled and acked (then leave, exit 0), "
                             "reading no more entries than that (none left pending); "
                             "with --peek: print at most N")
    own_argument(parser.add_argument("--peek", action="store_true",
                        help="print what the shards hold (XRANGE over the current routing) "
                             "without joining a group or acking anything"))
    parser.add_argument("--no-output", action="store_true",
                        help="handle and ack messages without printing them (the counts stay in "
                             "the metrics): a deployed example keeps payloads out of its logs")
    parser.add_argument("--concurrency", type=positive, default=1,
                        help="members to run (default 1)")
    parser.add_argument("--workers", type=positive, default=4,
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
    add_logging_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rsc.common import gc_policy as gc_control
    from rsc.member.listener import member_instance_ids
    from rsc.member.redis_io.unrecoverable import EXIT_UNRECOVERABLE, Unrecoverable
    from rsc.member.shells.tool_config import BadConfig, endpoints
    from rsc.protocol.messages import FieldValueError, check_name
    from rsc.tools.tool_output import line_writer, setup_logging

    setup_logging("consume", args.log_level, args.log_format)
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
        line_writer("consume")(str(exc), level=logging.ERROR)
        return 1
    except Unrecoverable as exc:
        line_writer("consume")(str(exc), level=logging.ERROR)
        return EXIT_UNRECOVERABLE
    if args.peek:
        if args.group is not None:
            line_writer("consume")("--peek joins no group: give PREFIX alone", level=logging.ERROR)
            return EXIT_UNRECOVERABLE
        from rsc.commands import peek

        return peek.run(args, urls)
    if args.group is None:
        line_writer("consume")("a consumer GROUP is needed (or --peek to look without one)",
                               level=logging.ERROR)
        return EXIT_UNRECOVERABLE
    gc_control.install()  # the coordinator's GC policy for this member process (RSC_GC)
    return run_tool("consume", _consume, args, urls)


async def _consume(args: argparse.Namespace, urls: Endpoints) -> int:
    import redis
    import trio

    from rsc.common.backoff import MEMBERS_RESTART
    from rsc.common.errors import unwrap_single
    from rsc.member.listener import Listener
    from rsc.member.notices import Notices, redis_problem, then
    from rsc.member.pure.budget import ReadBudget
    from rsc.member.pure.reconcile import Event
    from rsc.member.redis_io.unrecoverable import (
        redis_error_is_permanent,
    )
    from rsc.member.shells.consume_watch import ConsumeWatch
    from rsc.member.shells.runtime import Message
    from rsc.tools.output_lines import StdoutLines, event_line, message_line
    from rsc.tools.peek import MessageQuota, QuotaReached
    from rsc.tools.probes import env_port, health_routes, metrics_route, serve_probes
    from rsc.tools.tool_output import exit_now, line_writer

    say = line_writer("consume")
    notices = Notices(say)
    stopping = trio.Event()
    out = StdoutLines(on_closed=stopping.set)
    member_ids: list[str] | None = None
    instance_id = args.instance_id or os.environ.get("RSC_INSTANCE_ID") or None  # S1
    quota = MessageQuota(args.max_messages)
    budget = ReadBudget(args.max_messages) if args.max_messages is not None else None

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
        if not args.no_output:
            out.write(message_line(message), flush=False)  # flushed before its ack batch
        if quota.reached:  # the last one: leave once it (and every other printed one) is acked
            stopping.set()

    def make_listener() -> Listener:
        if budget is not None:  # new members: only what was handled is out of the budget
            budget.restart(quota.taken)
        return Listener(
            handle, stream_prefix=args.prefix, consumer_group=args.group,
            coordinator_url=urls.coordinator_url, redis_url=urls.redis_url, token=urls.token,
            concurrency=args.concurrency, runtime_max_concurrency=args.workers,
            member_ids=member_ids, on_event=on_event if args.events else None,
            check_store_id=False, ca_file=urls.ca_file,  # ConsumeWatch checked the store
            # one line per problem, whoever of the watch and members sees it
            notices=notices, instance_id=instance_id,
            read_budget=budget)  # --max-messages N: read no more than N (nothing left pending)

    def make_consumers() -> Listener:
        made = make_listener()
        if not args.no_output:  # a line is flushed before its ack: once per ack batch
            for member in made.members:
                member.core.observers.before_ack = out.flush
        return made

    consumers = make_consumers()
    member_ids = [member.member_id for member in consumers.members]
    health_port = args.health_port if args.health_port is not None else env_port("RSC_HEALTH_PORT")

    def on_signal(signum: int) -> None:
        if stopping.is_set():
            exit_now(say, "exiting at once without draining (the coordinator frees the "
                      "shards when the lease runs out)")
        leaving = ("leaving the group" if instance_id is None or args.leave_on_exit else
                   f"leaving the group for a while (instance id {instance_id!r} keeps its "
                   "shards until it is back)")
        say(f"draining: finishing in-flight messages and {leaving} "
            "(Ctrl-C again to exit at once)")
        stopping.set()

    async def run_members() -> None:
        nonlocal consumers
        backoff = MEMBERS_RESTART.start()
        while True:
            try:
                await consumers.run()
                return
            except* redis.RedisError as group:  # Redis went away while the members started
                first = group.exceptions[0]
                if redis_error_is_permanent(first):  # D3: a bad db index never heals
                    raise redis_unrecoverable(first, urls.redis_url) from first
                notices.say("redis", then(redis_problem(first, urls.redis_url), "retrying"))
            await trio.sleep(backoff.next())
            if stopping.is_set():
                return
            consumers = make_consumers()

    watch = ConsumeWatch(urls, args.prefix, notices)
    try:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                probes = health_routes(lambda: consumers.status())
                if args.metrics_port is not None:
                    await serve_probes(nursery, {**probes, "/metrics": metrics_route(
                        lambda: consumers)}, args.metrics_host, args.metrics_port, "metrics")
                if health_port is not None:
                    await serve_probes(nursery, probes, args.health_host, health_port, "health")
                nursery.start_soon(dispatch_signals, signals, on_signal)
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
    import trio

    async with trio.open_nursery() as nursery:
        for event in events:
            async def wait(event: trio.Event = event) -> None:
                await event.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(wait)
