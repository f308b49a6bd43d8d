"""OpenTelemetry tracing (`tracing=True`, rsc/member/shells/otel.py) across two processes.

A producer process (the sync producer inside a span `checkout`) and a consumer process (a
trio listener), each with the SDK's in-memory exporter, against a real redis-server and
coordinator: every handler call's CONSUMER span is in the producer's trace, a child of and
linked to its PRODUCER span, with the messaging attributes; the failing call records its
exception and has error status. The pure parts run in this process without an SDK.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
import trio

from rsc.member.message import Message
from rsc.member.shells.otel import SYSTEM, traced_handler, with_headers
from tests.processes import ROOT
from tests.test_member_support import set_shards

COUNT = 5


async def run_json(*args: str) -> list[dict[str, Any]]:
    done = await trio.run_process([sys.executable, "-m", "tests.otel_processes", *args],
                                  capture_stdout=True, capture_stderr=True, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    spans: list[dict[str, Any]] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return spans


async def test_consumer_spans_are_children_of_and_linked_to_the_producer_span_across_processes(
        coordinator):
    url, redis_url = coordinator.url, coordinator.redis_url
    await set_shards(url, "traced", "billing", 2)
    with trio.fail_after(60):
        produced = await run_json("produce", url, redis_url, "traced", str(COUNT))
        consumed = await run_json("consume", url, redis_url, "traced", "billing", str(COUNT))
    by_name = {span["name"]: span for span in produced}
    checkout, send = by_name["checkout"], by_name["send traced"]
    assert send["kind"] == "PRODUCER" and send["parent"]["span_id"] == checkout["span_id"]
    assert send["attributes"]["messaging.system"] == SYSTEM
    assert send["attributes"]["messaging.batch.message_count"] == COUNT
    assert len(consumed) == COUNT
    for span in consumed:
        assert span["name"] == "process traced" and span["kind"] == "CONSUMER"
        assert span["trace_id"] == checkout["trace_id"], "one trace from checkout to handler"
        assert span["parent"] == {"trace_id": send["trace_id"], "span_id": send["span_id"]}
        assert span["links"] == [span["parent"]]
        attributes = span["attributes"]
        assert attributes["messaging.system"] == "redis_streams"
        assert attributes["messaging.operation.type"] == "process"
        assert attributes["messaging.destination.name"].startswith("{traced:")
        assert attributes["messaging.consumer.group.name"] == "billing"
        assert attributes["messaging.message.id"].count("-") == 1
    failed = [span for span in consumed if span["status"] == "ERROR"]
    assert len(failed) == 1 and failed[0]["events"] == ["exception"]
    assert failed[0]["attributes"]["error.type"] == "ValueError"
    assert len({(span["attributes"]["messaging.destination.name"],
                 span["attributes"]["messaging.message.id"]) for span in consumed}) == COUNT


def test_the_trace_headers_join_a_record_s_own_and_never_replace_them():
    carrier = {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
    assert with_headers(("k", "v"), carrier) == ("k", "v", carrier)
    assert with_headers(("k", "v", {"a": "b"}), carrier) == ("k", "v", {**carrier, "a": "b"})
    own = {"traceparent": "mine"}
    assert with_headers(("k", "v", own), carrier) == ("k", "v", own)
    assert with_headers("not a record", carrier) == "not a record"


def test_without_an_sdk_a_traced_handler_runs_and_reraises(tmp_path):
    calls: list[str] = []

    def handle(message: Message) -> None:
        calls.append(message.id)
        raise KeyError("x")

    run = traced_handler(handle, stream_prefix="p", consumer_group="g", tracing=True)
    with pytest.raises(KeyError):
        run(Message("{p:v1:0}", "1-0", None, b"v", "m", {"traceparent": b"garbage"}))
    assert calls == ["1-0"]


def test_tracing_without_the_extra_names_it():
    code = ("import sys; sys.modules['opentelemetry'] = None\n"
            "from rsc.member.listener import Listener\n"
            "try:\n"
            "    Listener(lambda m: None, stream_prefix='p', consumer_group='g',\n"
            "             coordinator_url='ws://127.0.0.1:1', redis_url='redis://127.0.0.1:1',\n"
            "             tracing=True)\n"
            "except ImportError as exc:\n"
            "    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert "pip install 'redis-stream-coordinator[otel]'" in done.stdout, done.stderr


async def test_the_asyncio_host_traces_with_a_provider_of_its_own(coordinator):
    """`tracing=<provider>` (not the global one), the asyncio producer and listener: the
    caller's span is the producer span's parent, the consumer span its child and link."""
    import asyncio

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from rsc.member import aio

    url, redis_url = coordinator.url, coordinator.redis_url
    await set_shards(url, "aiotraced", "billing", 2)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    async def main() -> None:
        seen: list[str] = []

        @aio.listener("aiotraced", "billing", coordinator_url=url, redis_url=redis_url,
                      codec="json", tracing=provider)
        async def handle(value: dict[str, int]) -> None:
            seen.append(str(value["n"]))

        async with aio.open_producer(url, redis_url, "aiotraced", codec="json",
                                     tracing=provider) as producer:
            with provider.get_tracer("shop").start_as_current_span("checkout"):
                await producer.send_batch([(f"k{n}", {"n": n}) for n in range(3)])
        async with handle.running():
            async with asyncio.timeout(30):
                while len(seen) < 3:
                    await asyncio.sleep(0.02)

    await trio.to_thread.run_sync(lambda: asyncio.run(main()))
    spans = exporter.get_finished_spans()
    checkout = next(span for span in spans if span.name == "checkout")
    send = next(span for span in spans if span.name == "send aiotraced")
    consumed = [span for span in spans if span.name == "process aiotraced"]
    assert send.parent is not None and send.parent.span_id == checkout.context.span_id
    assert len(consumed) == 3
    for span in consumed:
        assert span.context.trace_id == checkout.context.trace_id
        assert span.parent is not None and span.parent.span_id == send.context.span_id
        assert [link.context.span_id for link in span.links] == [send.context.span_id]
