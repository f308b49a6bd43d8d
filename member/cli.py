"""`rsc produce` and `rsc consume` (PROTOCOL.md, Command line: their output is a contract)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Callable

import trio

from rsc.member.listener import Listener
from rsc.member.producer import RoutingUnavailable, open_producer
from rsc.member.reconcile import Event
from rsc.member.runtime import Message
from rsc.member.session import SessionClosed

READ_CHUNK = 1 << 16


class MalformedLine(ValueError):
    """A produce input line that is neither `key<TAB>value` nor a JSON object with both."""


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


def add_produce_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "produce", help="write stdin lines (key<TAB>value or JSON {key, value}) to a prefix")
    parser.add_argument("prefix", help="stream prefix")
    parser.add_argument("--coordinator", required=True, help="coordinator URL, ws://H:P")
    parser.add_argument("--redis-url", required=True, help="Redis URL of the shard streams")
    parser.add_argument("--token", default=None, help="member endpoint token")
    parser.set_defaults(run=run_produce)


def add_consume_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "consume", help="run members of a group, printing one JSON line per processed message")
    parser.add_argument("prefix", help="stream prefix")
    parser.add_argument("group", help="consumer group")
    parser.add_argument("--coordinator", required=True, help="coordinator URL, ws://H:P")
    parser.add_argument("--redis-url", required=True, help="Redis URL of the shard streams")
    parser.add_argument("--token", default=None, help="member endpoint token")
    parser.add_argument("--concurrency", type=_positive, default=1,
                        help="members to run (default 1)")
    parser.add_argument("--workers", type=_positive, default=4,
                        help="worker capacity of each member (default 4)")
    parser.add_argument("--work-ms", type=float, default=0.0,
                        help="simulated handler work per message, in ms")
    parser.add_argument("--metrics-port", type=int, default=None,
                        help="serve the members' Prometheus metrics on this port")
    parser.add_argument("--events", action="store_true",
                        help="write one JSON line per member event to stderr")
    parser.set_defaults(run=run_consume)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


# --- produce ---------------------------------------------------------------------------


def run_produce(args: argparse.Namespace) -> int:
    try:
        return trio.run(_produce, args)
    except (SessionClosed, RoutingUnavailable) as exc:
        print(f"rsc produce: {exc}", file=sys.stderr)
        return 1


async def _produce(args: argparse.Namespace) -> int:
    stdin = trio.wrap_file(sys.stdin.buffer)
    splitter = LineSplitter()
    line_number = 0
    malformed = 0
    async with open_producer(args.coordinator, args.redis_url, args.prefix,
                             token=args.token) as producer:
        while True:
            data = await stdin.read1(READ_CHUNK)
            raw_lines = splitter.feed(data) if data else splitter.finish()
            records = []
            for raw in raw_lines:
                line_number += 1
                try:
                    records.append(parse_line(raw.decode("utf-8").removesuffix("\r")))
                except (MalformedLine, UnicodeDecodeError) as exc:
                    malformed += 1
                    print(f"line {line_number}: malformed: {exc}", file=sys.stderr, flush=True)
            if records:
                await producer.send_batch(records)
            if not data:
                break
    return 1 if malformed else 0


# --- consume ---------------------------------------------------------------------------


def run_consume(args: argparse.Namespace) -> int:
    return trio.run(_consume, args)


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


def _printing_handler(work_ms: float) -> Callable[[Message], object]:
    async def handle(message: Message) -> None:
        if work_ms > 0:
            await trio.sleep(work_ms / 1000)
        sys.stdout.write(message_line(message) + "\n")
        sys.stdout.flush()

    return handle


async def _consume(args: argparse.Namespace) -> int:
    def on_event(member_id: str, event: Event) -> None:
        sys.stderr.write(event_line(member_id, event) + "\n")
        sys.stderr.flush()

    consumers = Listener(
        _printing_handler(args.work_ms), stream_prefix=args.prefix, consumer_group=args.group,
        coordinator_url=args.coordinator, redis_url=args.redis_url, token=args.token,
        concurrency=args.concurrency, runtime_max_concurrency=args.workers,
        on_event=on_event if args.events else None)
    if args.metrics_port is not None:
        _serve_member_metrics(consumers, args.metrics_port)
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:

        async def stop_on_signal() -> None:
            async for _ in signals:
                consumers.stop()
                return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stop_on_signal)
            await consumers.run()
            nursery.cancel_scope.cancel()
    return 0


def _serve_member_metrics(consumers: Listener, port: int) -> None:
    """Prometheus text on `port` (a daemon thread of prometheus_client), read at scrape time."""
    from prometheus_client import CollectorRegistry, start_http_server

    from rsc.member.metrics import MemberCollector

    registry = CollectorRegistry()
    registry.register(MemberCollector(lambda: [member.stats for member in consumers.members]))
    start_http_server(port, addr="127.0.0.1", registry=registry)
