"""Resharding with the data plane running (R1..R5): producers write the whole time, members consume.

Real redis-server, real coordinator, the member runtime and producer of member/.
Every produced message must be processed at least once (R5), nothing may stay
pending, no write may land in a version after its seal, and old streams go away.
"""

from __future__ import annotations

import signal
from collections import defaultdict
from typing import Any

import attrs
import redis
import trio

from rsc.member.listener import Listener
from rsc.member.producer import open_producer
from rsc.member.session import open_session
from rsc.member.shells.runtime import Message
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import Cutover
from tests.processes import spawn_coordinator

PREFIX, GROUP = "orders", "billing"
KEYS = [f"key-{i}" for i in range(60)]


@attrs.define
class Record:
    """What the handlers saw and what the producer wrote."""

    processed: list[tuple[str, str, str, str]] = attrs.field(factory=list)  # shard, id, key, value
    produced: list[tuple[str, str, str, str]] = attrs.field(factory=list)  # stream, id, key, value
    sealed_at: dict[str, tuple[int, int]] = attrs.field(factory=dict)  # old stream -> last id at seal

    async def handle(self, message: Message) -> None:
        self.processed.append((message.shard, message.id, message.key or "", message.value))


def parse_id(text: str) -> tuple[int, int]:
    milliseconds, _, sequence = text.partition("-")
    return int(milliseconds), int(sequence)


async def admin(url: str, request: m.Message) -> Any:
    """One admin request; an answer COORDINATOR_NOT_AVAILABLE (the store did not answer within
    its deadline on a busy machine, D4) is retried with backoff, as the answer asks."""
    pause = 0.05
    with trio.fail_after(30):
        while True:
            async with open_session(url, "admin") as session:
                answer = await session.request(request)
            if getattr(answer, "status", None) != Status.COORDINATOR_NOT_AVAILABLE:
                return answer
            await trio.sleep(pause)
            pause = min(1.0, pause * 2)


async def current_streams(url: str) -> tuple[str, ...]:
    async with open_session(url, "member") as session:
        routing = await session.request(m.GetRouting(request_id=0, stream_prefix=PREFIX))
    assert isinstance(routing, m.Routing) and routing.streams is not None, routing
    return routing.streams


async def reshard(url: str, count: int, cutover: str, record: Record, client: redis.Redis) -> None:
    """setShardCount, then note where each sealed stream ended (nothing may come after)."""
    response = await admin(url, m.SetShardCount(request_id=0, stream_prefix=PREFIX, consumer_group=GROUP,
                                                shard_count=count, cutover=Cutover(cutover)))
    assert response.status == "OK", response
    if response.migration is None:
        return
    pipe = client.pipeline(transaction=False)
    for stream in response.migration.remaining_shards:
        pipe.xinfo_stream(stream)
    for stream, info in zip(response.migration.remaining_shards,
                            pipe.execute(raise_on_error=False), strict=True):
        assert not isinstance(info, Exception), info  # undrained: it must still exist
        record.sealed_at[stream] = parse_id(info["last-generated-id"])


async def wait_migration_done(url: str, timeout: float = 60) -> None:
    with trio.fail_after(timeout):
        while True:
            described = await admin(url, m.DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                                         consumer_group=GROUP))
            if described.migration is None and described.state == "STABLE":
                return
            await trio.sleep(0.05)


async def produce_until(url: str, redis_url: str, record: Record, stop: trio.Event,
                        *, subscribe: bool = True) -> None:
    """Write keyed messages in small batches until `stop`; each value is a global sequence."""
    sequence = 0
    async with open_producer(url, redis_url, PREFIX, subscribe=subscribe) as producer:
        while not stop.is_set():
            batch = [(KEYS[(sequence + i) % len(KEYS)], str(sequence + i)) for i in range(20)]
            sequence += len(batch)
            located = await producer.send_batch_located(batch)
            record.produced.extend((stream, entry_id, key, value)
                                   for (stream, entry_id), (key, value) in zip(located, batch, strict=True))
            await trio.sleep(0.005)  # pace: a steady stream, not a burst


async def wait_until(predicate, timeout: float) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.05)


def check_no_loss_and_sealed(record: Record, client: redis.Redis, live_streams: tuple[str, ...]) -> None:
    produced_values = {value for _, _, _, value in record.produced}
    processed_values = {value for _, _, _, value in record.processed}
    assert produced_values - processed_values == set(), "messages lost"
    for stream, entry_id, _, _ in record.produced:
        if stream in record.sealed_at:
            assert parse_id(entry_id) <= record.sealed_at[stream], f"write to {stream} after its seal"
    for shard, entry_id, _, _ in record.processed:
        if shard in record.sealed_at:
            assert parse_id(entry_id) <= record.sealed_at[shard]
    assert client.exists(*record.sealed_at) == 0, "old streams were not retired"
    assert sum(int(client.xpending(s, GROUP)["pending"]) for s in live_streams) == 0


async def run_scenario(coordinator, nursery, cutover: str) -> Record:
    client = redis.Redis.from_url(coordinator.redis_url, decode_responses=True)
    record = Record()
    await reshard(coordinator.url, 4, cutover, record, client)
    listener = Listener(record.handle, stream_prefix=PREFIX, consumer_group=GROUP,
                        coordinator_url=coordinator.url, redis_url=coordinator.redis_url,
                        concurrency=3, runtime_max_concurrency=4, block_ms=100)
    await nursery.start(listener.run)
    stop = trio.Event()
    producer_done = trio.Event()

    async def producer() -> None:
        try:
            await produce_until(coordinator.url, coordinator.redis_url, record, stop)
        finally:
            producer_done.set()

    nursery.start_soon(producer)
    await wait_until(lambda: len(record.produced) >= 600, 30)
    await reshard(coordinator.url, 8, cutover, record, client)
    await wait_until(lambda: len(record.produced) >= 1500, 30)
    await wait_migration_done(coordinator.url)
    await reshard(coordinator.url, 3, cutover, record, client)
    await wait_until(lambda: len(record.produced) >= 2500, 30)
    await wait_migration_done(coordinator.url)
    stop.set()
    with trio.fail_after(10):
        await producer_done.wait()
    produced_values = {value for _, _, _, value in record.produced}
    await wait_until(lambda: produced_values <= {v for _, _, _, v in record.processed}, 30)
    listener.stop()
    check_no_loss_and_sealed(record, client, await current_streams(coordinator.url))
    assert len(record.sealed_at) == 4 + 8
    client.close()
    return record


async def test_r5_parallel_cutover_4_to_8_to_3_loses_nothing_while_producing(coordinator, nursery):
    await run_scenario(coordinator, nursery, "parallel")


async def test_r3_ordered_cutover_keeps_per_key_order_across_reshardings(coordinator, nursery):
    record = await run_scenario(coordinator, nursery, "ordered")
    first_seen: dict[str, list[int]] = defaultdict(list)
    seen: set[str] = set()
    for _, _, key, value in record.processed:
        if value not in seen:  # at-least-once: judge each message by its first processing
            seen.add(value)
            first_seen[key].append(int(value))
    for key, values in first_seen.items():
        assert values == sorted(values), f"{key} processed out of production order"


async def test_r5_stale_producer_without_subscription_loses_nothing(coordinator, nursery):
    client = redis.Redis.from_url(coordinator.redis_url, decode_responses=True)
    record = Record()
    await reshard(coordinator.url, 2, "parallel", record, client)
    listener = Listener(record.handle, stream_prefix=PREFIX, consumer_group=GROUP,
                        coordinator_url=coordinator.url, redis_url=coordinator.redis_url,
                        concurrency=2, block_ms=100)
    await nursery.start(listener.run)
    async with open_producer(coordinator.url, coordinator.redis_url, PREFIX, subscribe=False) as stale:
        first = await stale.send_batch_located([(k, f"a-{k}") for k in KEYS])
        assert stale.routing.version == 1
        await reshard(coordinator.url, 5, "parallel", record, client)
        assert stale.routing.version == 1  # never pushed: it does not know yet
        second = await stale.send_batch_located([(k, f"b-{k}") for k in KEYS])
        assert stale.rerouted > 0 and stale.routing.version == 2
    record.produced = [(s, i, k, v) for (s, i), (k, v) in
                       zip(first + second, [(k, f"a-{k}") for k in KEYS] + [(k, f"b-{k}") for k in KEYS],
                           strict=True)]
    assert all("v2" in stream for stream, _ in second)
    await wait_migration_done(coordinator.url)
    produced_values = {value for _, _, _, value in record.produced}
    await wait_until(lambda: produced_values <= {v for _, _, _, v in record.processed}, 30)
    listener.stop()
    check_no_loss_and_sealed(record, client, await current_streams(coordinator.url))
    client.close()


async def test_r2_sigkill_coordinator_while_draining_then_migration_completes(redis_url, nursery):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    record = Record()
    process, url = await spawn_coordinator(redis_url)
    try:
        await reshard(url, 2, "parallel", record, client)
        async with open_producer(url, redis_url, PREFIX) as producer:
            located = await producer.send_batch_located([(k, f"v1-{k}") for k in KEYS])
        record.produced += [(s, i, k, f"v1-{k}") for (s, i), k in zip(located, KEYS, strict=True)]
        await reshard(url, 3, "parallel", record, client)  # v1 holds undelivered data: draining
        described = await admin(url, m.DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                                     consumer_group=GROUP))
        assert described.migration.state == "DRAINING"
        process.send_signal(signal.SIGKILL)
        with trio.fail_after(10):
            await process.wait()
        process, url = await spawn_coordinator(redis_url)
        listener = Listener(record.handle, stream_prefix=PREFIX, consumer_group=GROUP,
                            coordinator_url=url, redis_url=redis_url, concurrency=2, block_ms=100)
        await nursery.start(listener.run)
        await wait_migration_done(url)
        produced_values = {value for _, _, _, value in record.produced}
        await wait_until(lambda: produced_values <= {v for _, _, _, v in record.processed}, 30)
        listener.stop()
        streams = await current_streams(url)
        assert all(":v2:" in stream for stream in streams)
        check_no_loss_and_sealed(record, client, streams)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            with trio.fail_after(10):
                await process.wait()
        client.close()
