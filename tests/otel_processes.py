"""The two processes of the tracing test (tests/test_tracing.py): no tests here.

    python -m tests.otel_processes produce COORDINATOR_URL REDIS_URL PREFIX COUNT
    python -m tests.otel_processes consume COORDINATOR_URL REDIS_URL PREFIX GROUP COUNT

Each sets up the OpenTelemetry SDK with an in-memory exporter, does its part, and prints the
spans it finished as one JSON line (last on stdout). The producer sends COUNT messages
(values "0".."COUNT-1", the last one "boom") from the sync producer inside a span
`checkout`; the consumer handles until COUNT calls were made (the "boom" one fails once and
leaves its message pending).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import trio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def _exporter() -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return exporter


def _spans(exporter: InMemorySpanExporter) -> list[dict[str, Any]]:
    return [{"name": span.name, "kind": span.kind.name,
             "trace_id": f"{span.context.trace_id:032x}", "span_id": f"{span.context.span_id:016x}",
             "parent": None if span.parent is None else {
                 "trace_id": f"{span.parent.trace_id:032x}",
                 "span_id": f"{span.parent.span_id:016x}"},
             "links": [{"trace_id": f"{link.context.trace_id:032x}",
                        "span_id": f"{link.context.span_id:016x}"} for link in span.links],
             "attributes": dict(span.attributes or {}),
             "status": span.status.status_code.name,
             "events": [event.name for event in span.events]}
            for span in exporter.get_finished_spans()]


def produce(url: str, redis_url: str, prefix: str, count: int) -> None:
    from rsc.member.sync import open_producer

    exporter = _exporter()
    tracer = trace.get_tracer("shop")
    with open_producer(url, redis_url, prefix, tracing=True) as producer:
        with tracer.start_as_current_span("checkout"):
            values = [str(n) for n in range(count - 1)] + ["boom"]
            producer.send_batch([(f"k{n}", value) for n, value in enumerate(values)])
    print(json.dumps(_spans(exporter)))


def consume(url: str, redis_url: str, prefix: str, group: str, count: int) -> None:
    from rsc.member.listener import Listener
    from rsc.member.message import Message

    exporter = _exporter()
    calls: list[str] = []

    async def handle(message: Message) -> None:
        calls.append(message.value)
        if message.value == "boom":
            raise ValueError("cannot parse boom")

    listener = Listener(handle, stream_prefix=prefix, consumer_group=group, coordinator_url=url,
                        redis_url=redis_url, tracing=True)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(listener.run)
            with trio.fail_after(30):
                while len(calls) < count:
                    await trio.sleep(0.02)
            listener.stop()

    trio.run(main)
    print(json.dumps(_spans(exporter)))


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "produce":
        produce(args[0], args[1], args[2], int(args[3]))
    else:
        consume(args[0], args[1], args[2], args[3], int(args[4]))
