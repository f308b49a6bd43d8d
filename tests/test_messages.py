"""M1..M4 end to end: bytes, headers, keyless spread and the size limit through the producer and
listener APIs (trio and asyncio) with a real coordinator and redis-server; and an entry in the
layout written before headers existed, read as it always was (M5)."""

from __future__ import annotations

import asyncio
import os
import random
from collections import Counter
from collections.abc import Callable

import pytest
import redis
import trio

from rsc.member import aio
from rsc.member.listener import Listener
from rsc.member.message import Message
from rsc.member.producer import open_producer
from rsc.member.pure.entry import MessageTooLarge
from tests.test_member_support import set_shards

GROUP = "apps"


def random_records(count: int, seed: int) -> list[tuple[bytes, bytes, dict[str, bytes]]]:
    rng = random.Random(seed)
    return [(rng.randbytes(rng.randint(0, 24)), rng.randbytes(rng.randint(0, 300)),
             {"traceparent": f"00-{n:032x}-{n:016x}-01".encode(), "blob": rng.randbytes(8)})
            for n in range(count)]


def received(message: Message) -> tuple[bytes, bytes, dict[str, bytes]]:
    assert message.key_bytes is not None
    return message.key_bytes, message.value_bytes, dict(message.headers)


async def run_until(listener: Listener, done: Callable[[], bool]) -> None:
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(listener.run)
            while not done():
                await trio.sleep(0.02)
            listener.stop()


async def test_m1_m2_200_binary_values_with_headers_round_trip_through_the_trio_apis(coordinator):
    url, redis_url = coordinator.url, coordinator.redis_url
    await set_shards(url, "binary", GROUP, 4)
    records = random_records(200, seed=1)
    seen: list[tuple[bytes, bytes, dict[str, bytes]]] = []

    async def handle(message: Message) -> None:
        seen.append(received(message))

    async with open_producer(url, redis_url, "binary") as producer:
        await producer.send_batch(records)
    listener = Listener(handle, stream_prefix="binary", consumer_group=GROUP,
                        coordinator_url=url, redis_url=redis_url)
    await run_until(listener, lambda: len(seen) >= len(records))
    assert sorted(seen) == sorted(records)  # byte for byte, headers included


async def test_m1_m2_binary_values_with_headers_round_trip_through_the_asyncio_apis(coordinator):
    url, redis_url = coordinator.url, coordinator.redis_url
    await set_shards(url, "binary-aio", GROUP, 4)
    records = random_records(200, seed=2)
    seen: list[tuple[bytes, bytes, dict[str, bytes]]] = []

    async def main() -> None:
        @aio.listener("binary-aio", GROUP, coordinator_url=url, redis_url=redis_url)
        async def handle(message: Message) -> None:
            seen.append(received(message))

        async with aio.open_producer(url, redis_url, "binary-aio") as producer:
            await producer.send_batch(records)
        async with handle.running():
            while len(seen) < len(records):
                await asyncio.sleep(0.02)

    await trio.to_thread.run_sync(asyncio.run, main())
    assert sorted(seen) == sorted(records)


async def test_m3_400_keyless_messages_spread_over_4_shards(coordinator):
    url, redis_url = coordinator.url, coordinator.redis_url
    streams = await set_shards(url, "keyless", GROUP, 4)
    keys: Counter[str | None] = Counter()
    shards: Counter[str] = Counter()

    async def handle(message: Message) -> None:
        keys[message.key] += 1
        shards[message.shard] += 1

    async with open_producer(url, redis_url, "keyless") as producer:
        for start in range(0, 400, 50):
            await producer.send_batch([(None, f"v{n}") for n in range(start, start + 50)])
        await producer.send(None, "one more", {"kind": "single"})
    client = redis.Redis.from_url(redis_url)
    try:  # read before consuming: acked entries may be trimmed by retention (T1) afterwards
        entry = client.xrange(streams[0], count=1)[0][1]
        assert b"key" not in entry and b"value" in entry  # stored without a key field
    finally:
        client.close()
    listener = Listener(handle, stream_prefix="keyless", consumer_group=GROUP,
                        coordinator_url=url, redis_url=redis_url)
    await run_until(listener, lambda: sum(shards.values()) >= 401)
    assert keys == {None: 401}
    assert set(shards) == set(streams)
    assert min(shards.values()) >= 40, shards  # each shard at least 10 % of the 400


async def test_m4_a_2_mib_message_is_refused_by_name_before_anything_is_sent(coordinator):
    url, redis_url = coordinator.url, coordinator.redis_url
    streams = await set_shards(url, "big", GROUP, 2)
    async with open_producer(url, redis_url, "big") as producer:
        with pytest.raises(MessageTooLarge, match=r"record 1: message of 2,097,\d+ bytes .* over "
                                                  r"the limit of 1,048,576 bytes"):
            await producer.send_batch([("small", "fine"), ("big", os.urandom(2 << 20))])
        assert producer.sent == 0
        await producer.send("small", "fine")  # nothing else is held back
    client = redis.Redis.from_url(redis_url)
    try:
        assert sum(client.xlen(stream) for stream in streams) == 1
    finally:
        client.close()


async def test_m5_entries_in_the_layout_written_before_headers_existed_read_as_before(coordinator):
    url, redis_url = coordinator.url, coordinator.redis_url
    streams = await set_shards(url, "legacy", GROUP, 1)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        client.xadd(streams[0], {"key": "customer-7", "value": "paid"})  # as round 3 wrote them
    finally:
        client.close()
    seen: list[tuple[str | None, str, dict[str, bytes]]] = []

    async def handle(message: Message) -> None:
        seen.append((message.key, message.value, dict(message.headers)))

    listener = Listener(handle, stream_prefix="legacy", consumer_group=GROUP,
                        coordinator_url=url, redis_url=redis_url)
    await run_until(listener, lambda: bool(seen))
    assert seen == [("customer-7", "paid", {})]
