"""Serializers (`codec=`, rsc/member/codecs.py): the pure parts, then typed handlers against a
real redis-server and coordinator, on the trio host and the asyncio host.

A value that does not decode reaches the dead-letter stream with its error named, after one
attempt (the same bytes would fail again), and the handler never sees it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import msgspec
import pydantic
import pytest
import trio

from rsc.common.extras import MissingExtra, require
from rsc.member import aio
from rsc.member.codecs import (
    JSON,
    DecodeFailed,
    JsonCodec,
    MsgspecCodec,
    PydanticCodec,
    codec_for,
    encode_records,
    typed_handler,
    wants_message,
)
from rsc.member.listener import Listener
from rsc.member.message import Message
from rsc.member.policies import RetryPolicy
from rsc.member.producer import open_producer
from rsc.member.pure.attempts import CallHandler, DeadLetterNow, next_step
from rsc.member.redis_io.streams import connect
from tests.test_member_support import pending_count, set_shards

GROUP = "billing"


class Order(pydantic.BaseModel):
    id: int
    amount: float


class Refund(msgspec.Struct):
    order: int
    reason: str


def message(value: bytes) -> Message:
    return Message("{orders:v1:0}", "1-0", b"k", value, "member-a")


# --- pure ------------------------------------------------------------------------------------

def test_json_codec_round_trips_and_is_compact_utf8():
    data = JSON.encode({"name": "Zoë", "items": [1, 2]})
    assert data == '{"name":"Zoë","items":[1,2]}'.encode()
    assert JSON.decode(data) == {"name": "Zoë", "items": [1, 2]}


def test_codec_for_names_each_kind_and_refuses_the_rest():
    assert codec_for("json") is JSON
    assert isinstance(codec_for(Order), PydanticCodec)
    assert isinstance(codec_for(Refund), MsgspecCodec)
    custom = JsonCodec()
    assert codec_for(custom) is custom
    with pytest.raises(TypeError, match="only codec named by a string is 'json'"):
        codec_for("yaml")
    with pytest.raises(TypeError, match="expected 'json', a pydantic model class"):
        codec_for(dict)
    with pytest.raises(TypeError, match="needs a `name`"):
        codec_for(type("Nameless", (), {"encode": lambda self, v: b"", "decode": lambda self, d: d})())


def test_pydantic_and_msgspec_codecs_round_trip_models():
    orders = codec_for(Order)
    assert orders.decode(orders.encode(Order(id=7, amount=9.5))) == Order(id=7, amount=9.5)
    assert orders.encode({"id": 1, "amount": 2}) == b'{"id":1,"amount":2.0}'  # validated first
    refunds = codec_for(Refund)
    assert refunds.decode(refunds.encode(Refund(order=7, reason="late"))) == Refund(7, "late")


def test_a_value_that_does_not_decode_names_the_message_and_the_codec_error():
    run = typed_handler(lambda order: None, codec_for(Order))
    with pytest.raises(DecodeFailed) as caught:
        run(message(b'{"id": "seven"}'))
    text = str(caught.value)
    assert "{orders:v1:0} 1-0 does not decode as pydantic Order: ValidationError:" in text
    assert "id" in text and "\n" not in text
    with pytest.raises(DecodeFailed, match="as json: JSONDecodeError"):
        typed_handler(lambda value: None, JSON)(message(b"not json"))


def test_a_handler_with_two_parameters_gets_the_message_too():
    got: list[Any] = []
    typed_handler(lambda value: got.append(value), JSON)(message(b"[1]"))
    typed_handler(lambda value, msg: got.append((value, msg.id)), JSON)(message(b"2"))
    assert got == [[1], (2, "1-0")]
    assert not wants_message(lambda value, *, flag=False: None)
    assert wants_message(lambda *args: None)


def test_an_async_handler_stays_async_and_a_plain_one_plain():
    async def handle(order: Order) -> None: ...

    import inspect
    assert inspect.iscoroutinefunction(typed_handler(handle, JSON))
    assert not inspect.iscoroutinefunction(typed_handler(lambda order: None, JSON))


def test_a_permanent_failure_skips_the_retries_in_place():
    assert next_step(1, 5, permanent=True) == DeadLetterNow(deliveries=1)
    assert next_step(2, 5, permanent=True) == DeadLetterNow(deliveries=2)
    assert next_step(2, 5) == CallHandler(record=3, attempt=3)


def test_the_producer_encodes_values_and_names_a_record_it_cannot_encode():
    encoded = encode_records(JSON, [("k", {"a": 1}), ("k", [2], {"h": "x"})])
    assert encoded == [("k", b'{"a":1}'), ("k", b"[2]", {"h": "x"})]
    with pytest.raises(TypeError, match=r"record 1: value does not encode as json: TypeError"):
        encode_records(JSON, [("k", 1), ("k", object())])


def test_a_missing_extra_is_named_with_its_install_command():
    with pytest.raises(MissingExtra) as caught:
        require("rsc_no_such_module.sub", extra="otel", feature="tracing=True")
    assert str(caught.value) == ("tracing=True needs the 'rsc_no_such_module' package, which the "
                                 "[otel] extra installs: pip install "
                                 "'redis-stream-coordinator[otel]'")


# --- against a real redis-server and coordinator --------------------------------------------

async def run_until(listener: Listener, condition, timeout: float = 30) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        with trio.fail_after(timeout):
            while not condition():
                await trio.sleep(0.02)
        listener.stop()


async def test_a_pydantic_typed_handler_gets_models_and_a_malformed_value_is_dead_lettered(
        coordinator):
    streams = await set_shards(coordinator.url, "orders", GROUP, 2)
    async with open_producer(coordinator.url, coordinator.redis_url, "orders",
                             codec=Order) as producer:
        await producer.send_batch([(f"c{n}", Order(id=n, amount=n * 1.5)) for n in range(10)])
    # what another producer wrote: no codec, a value that is not an Order
    async with open_producer(coordinator.url, coordinator.redis_url, "orders") as raw:
        await raw.send("c3", json.dumps({"id": "three", "amount": 1}), {"source": "legacy"})
    received: list[Order] = []

    async def handle(order: Order) -> None:
        received.append(order)

    listener = Listener(handle, stream_prefix="orders", consumer_group=GROUP,
                        coordinator_url=coordinator.url, redis_url=coordinator.redis_url,
                        codec=Order, retry=RetryPolicy(max_deliveries=3,
                                                       dead_letter_stream="orders-dead",
                                                       backoff_ms=0))
    client = connect(coordinator.redis_url)
    try:
        await run_until(listener, lambda: len(received) == 10 and client.xlen("orders-dead") == 1
                        and pending_count(coordinator.redis_url, streams, GROUP) == 0)
        (_, fields), = client.xrange("orders-dead")
    finally:
        client.close()
    assert all(type(order) is Order for order in received)
    assert sorted(order.id for order in received) == list(range(10))
    assert fields["value"] == '{"id": "three", "amount": 1}' and fields["h:source"] == "legacy"
    assert fields["rsc-deliveries"] == "1", "no retry in place for a value that cannot decode"
    assert fields["rsc-error"].startswith("DecodeFailed: ")
    assert "does not decode as pydantic Order: ValidationError" in fields["rsc-error"]
    stats = listener.members[0].stats
    assert (stats.processed, stats.failed, stats.dead_lettered) == (10, 1, 1)


async def test_the_asyncio_host_hands_msgspec_structs_with_their_messages(coordinator):
    url, redis_url = coordinator.url, coordinator.redis_url
    await set_shards(url, "refunds", GROUP, 2)

    async def main() -> list[tuple[Refund, str, dict[str, bytes]]]:
        seen: list[tuple[Refund, str, dict[str, bytes]]] = []

        @aio.listener("refunds", GROUP, coordinator_url=url, redis_url=redis_url, codec=Refund)
        async def handle(refund: Refund, message: Message) -> None:
            seen.append((refund, message.key or "", dict(message.headers)))

        async with aio.open_producer(url, redis_url, "refunds", codec=Refund) as producer:
            await producer.send_batch([(f"o{n}", Refund(order=n, reason="late"), {"n": str(n)})
                                       for n in range(6)])
        async with handle.running():
            async with asyncio.timeout(30):
                while len(seen) < 6:
                    await asyncio.sleep(0.02)
        return seen

    seen = await trio.to_thread.run_sync(lambda: asyncio.run(main()))
    assert sorted((refund.order, key, headers["n"]) for refund, key, headers in seen) == [
        (n, f"o{n}", str(n).encode()) for n in range(6)]
    assert all(type(refund) is Refund and refund.reason == "late" for refund, _, _ in seen)


async def test_the_testing_kit_sends_models_to_a_typed_handler(rsc_kit):
    prefix = rsc_kit.unique("kitorders")
    received: list[Order] = []

    async def handle(order: Order) -> None:
        received.append(order)

    listener = Listener(handle, stream_prefix=prefix, consumer_group=GROUP,
                        coordinator_url=rsc_kit.coordinator_url, redis_url=rsc_kit.redis_url,
                        codec=Order)
    await rsc_kit.create_prefix(prefix, shards=2)
    await rsc_kit.send(prefix, [("c1", Order(id=1, amount=5)), ("c2", {"id": 2, "amount": 6})],
                       codec=Order)
    await rsc_kit.run_until(listener, handled=2)
    assert sorted(received, key=lambda order: order.id) == [Order(id=1, amount=5),
                                                            Order(id=2, amount=6)]
