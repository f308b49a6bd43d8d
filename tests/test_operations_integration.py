"""Operating the coordinator end to end: lag, overdue, retention T1/T2, drain, watch, storeId.

A real redis-server, a real coordinator, real websockets. Consumers are
played by plain XREADGROUP / XACK calls on the shard streams (groups are
registered by a join and a leave, so they have no live member), and every
number the coordinator reports is compared with what Redis itself says.
Waits are conditions under `trio.fail_after`, never fixed sleeps.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import redis
import trio

from rsc.actors.app import serve
from rsc.actors.config import CoordinatorConfig
from rsc.actors.ops.metrics import CoordinatorMetrics
from rsc.actors.redis_io.shard_ops import STORE_ID_KEY
from rsc.member.session import Session, open_session
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import MigrationState, RetentionMode
from tests.conftest import FAST

PREFIX, GROUP = "orders", "billing"


@pytest.fixture
def client(redis_url: str) -> Iterator[Any]:
    connection = redis.Redis.from_url(redis_url, decode_responses=True)
    yield connection
    connection.close()


async def admin(url: str, request: m.Message) -> Any:
    async with open_session(url, "admin") as session:
        return await session.request(request)


def heartbeat(member_id: str, epoch: int, group: str = GROUP) -> m.Heartbeat:
    return m.Heartbeat(request_id=0, stream_prefix=PREFIX, consumer_group=group,
                       member_id=member_id, member_epoch=epoch, capacity=1,
                       owned_shards=None if epoch else ())


async def register_empty_group(url: str, group: str) -> None:
    """A group with no live member: one join (H13), then a leave (H9)."""
    async with open_session(url, "member") as session:
        joined: Any = await session.request(heartbeat(f"{group}-m", 0, group))
        assert joined.status == Status.OK
        left: Any = await session.request(heartbeat(f"{group}-m", -1, group))
        assert left.status == Status.OK


async def set_shards(url: str, count: int, group: str | None = None) -> m.ShardCountChanged:
    response = await admin(url, m.SetShardCount(request_id=0, stream_prefix=PREFIX,
                                                consumer_group=group, shard_count=count))
    assert response.status == Status.OK, response
    return response


async def describe(url: str, group: str = GROUP) -> m.GroupDescription:
    response = await admin(url, m.DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                                consumer_group=group))
    assert isinstance(response, m.GroupDescription)
    return response


def produce(client: Any, stream: str, count: int) -> list[str]:
    return [client.xadd(stream, {"key": str(i), "value": "v"}) for i in range(count)]


def read(client: Any, stream: str, group: str, count: int) -> list[str]:
    reply = client.xreadgroup(group, "c", {stream: ">"}, count=count)
    return [entry_id for _, entries in reply for entry_id, _ in entries]


def group_info(client: Any, stream: str, group: str) -> dict[str, Any]:
    return next(g for g in client.xinfo_groups(stream) if g["name"] == group)


async def wait_until(check: Any, timeout: float = 10) -> Any:
    with trio.fail_after(timeout):
        while True:
            result = await check()
            if result:
                return result
            await trio.sleep(0.02)


@asynccontextmanager
async def coordinator_with_metrics(redis_url: str) -> AsyncIterator[tuple[str, CoordinatorMetrics]]:
    metrics = CoordinatorMetrics()
    fast: dict[str, Any] = dict(FAST)
    config = CoordinatorConfig(redis_url=redis_url, port=0, **fast)
    async with trio.open_nursery() as nursery:
        url = await nursery.start(lambda task_status: serve(config, metrics=metrics,
                                                            task_status=task_status))
        yield url, metrics
        nursery.cancel_scope.cancel()


# --- lag in describe and list ----------------------------------------------------------------


async def test_describe_lag_equals_xinfo_groups_and_xpending(coordinator, client):
    routing = await set_shards(coordinator.url, 2, GROUP)
    first, second = routing.routing.streams
    produce(client, first, 7)
    produce(client, second, 3)
    client.xack(first, GROUP, *read(client, first, GROUP, 4)[:1])

    description = await describe(coordinator.url)
    assert [s.shard for s in description.shards] == [first, second]
    for shard in description.shards:
        info = group_info(client, shard.shard, GROUP)
        summary = client.xpending(shard.shard, GROUP)
        assert shard.version == 1 and shard.owner is None
        assert shard.length == client.xlen(shard.shard)
        assert shard.last_delivered_id == info["last-delivered-id"]
        assert shard.lag == info["lag"]
        assert shard.pending == info["pending"] == summary["pending"]
        assert (shard.oldest_pending_ms is None) == (summary["pending"] == 0)
    assert [(s.length, s.lag, s.pending) for s in description.shards] == [(7, 3, 3), (3, 3, 0)]

    listed = await admin(coordinator.url, m.ListGroups(request_id=0))
    [summary] = listed.groups
    assert (summary.lag, summary.pending) == (6, 3)


async def test_a_member_that_stopped_heartbeating_is_overdue_before_it_expires(coordinator):
    await set_shards(coordinator.url, 1, GROUP)
    async with open_session(coordinator.url, "member") as member:
        await member.request(heartbeat("silent", 0))

        async def overdue() -> Any:
            description = await describe(coordinator.url)
            return description.members and description.members[0].overdue

        await wait_until(overdue, timeout=FAST["lease_ttl_ms"] / 1000)
        assert (await describe(coordinator.url)).members[0].member_id == "silent"


# --- retention -------------------------------------------------------------------------------


async def test_t1_acked_trims_to_what_some_group_still_needs(coordinator, client):
    routing = await set_shards(coordinator.url, 1, GROUP)
    await register_empty_group(coordinator.url, "audit")
    [shard] = routing.routing.streams
    ids = produce(client, shard, 10)
    client.xack(shard, GROUP, *read(client, shard, GROUP, 10))
    client.xack(shard, "audit", *read(client, shard, "audit", 6)[:4])  # ids[4], ids[5] pending

    async def trimmed() -> Any:
        await trio.sleep(0)
        return client.xlen(shard) == 6

    await wait_until(trimmed)
    assert [entry for entry, _ in client.xrange(shard)] == ids[4:]  # the unacked entry survives
    description = await describe(coordinator.url)
    assert description.retention == m.Retention(mode=RetentionMode.ACKED)
    assert description.shards[0].length == 6


async def test_t2_a_length_cap_removes_entries_and_counts_the_unconsumed(redis_url, client):
    async with coordinator_with_metrics(redis_url) as (url, metrics):
        routing = await set_shards(url, 1, GROUP)
        [shard] = routing.routing.streams
        changed = await admin(url, m.SetRetention(request_id=0, stream_prefix=PREFIX,
                                                  retention=m.Retention(mode=RetentionMode.NONE,
                                                                        max_length=3)))
        assert changed.status == Status.OK and changed.retention.max_length == 3
        produce(client, shard, 10)
        client.xack(shard, GROUP, *read(client, shard, GROUP, 2))  # 2 consumed, 8 not

        async def capped() -> Any:
            await trio.sleep(0)
            return metrics.registry.get_sample_value(
                "rsc_retention_unconsumed_removed_total", {"prefix": PREFIX}) == 5

        await wait_until(capped)
        assert client.xlen(shard) == 3
        assert metrics.registry.get_sample_value(
            "rsc_shard_length", {"prefix": PREFIX, "shard": shard}) == 3
        assert metrics.registry.get_sample_value(
            "rsc_retention_removed_total", {"prefix": PREFIX, "reason": "cap"}) == 7
        assert (await describe(url)).retention == m.Retention(mode=RetentionMode.NONE,
                                                              max_length=3)


async def test_r2_entries_a_cap_removed_count_as_delivered_and_the_migration_completes(
        coordinator, client):
    routing = await set_shards(coordinator.url, 1, GROUP)
    [old] = routing.routing.streams
    produce(client, old, 6)
    await set_shards(coordinator.url, 2)  # seals v1: billing never read its 6 entries

    async def blocked() -> Any:
        migration = (await describe(coordinator.url)).migration
        return migration is not None and migration.blocking_groups == (
            m.BlockingGroup(consumer_group=GROUP, undelivered=6, pending=0),)

    await wait_until(blocked)
    changed = await admin(coordinator.url, m.SetRetention(
        request_id=0, stream_prefix=PREFIX, retention=m.Retention(max_age_ms=1)))
    assert changed.status == Status.OK

    async def complete() -> Any:
        migration = (await describe(coordinator.url)).migration
        return migration is None or migration.state == MigrationState.COMPLETE

    await wait_until(complete)


async def test_set_retention_on_a_prefix_without_routing_is_unknown_stream(coordinator):
    response = await admin(coordinator.url, m.SetRetention(request_id=0, stream_prefix="nothing",
                                                           retention=m.Retention()))
    assert response.status == Status.UNKNOWN_STREAM


# --- watch -----------------------------------------------------------------------------------


async def next_push(session: Session, timeout: float = 5) -> m.GroupDescription:
    with trio.fail_after(timeout):
        push = await session.pushes.receive()
    assert isinstance(push, m.GroupDescription) and push.request_id is None
    return push


async def test_watch_pushes_changes_and_ends_with_unknown_group_on_delete(coordinator, client):
    routing = await set_shards(coordinator.url, 1, GROUP)
    [shard] = routing.routing.streams
    async with open_session(coordinator.url, "admin") as watcher:
        first = await watcher.request(m.DescribeGroup(request_id=1, stream_prefix=PREFIX,
                                                      consumer_group=GROUP, watch=True))
        assert first.status == Status.OK and first.request_id == 1 and first.members == ()

        async with open_session(coordinator.url, "member") as member:
            joined = await member.request(heartbeat("a", 0))
            while not (push := await next_push(watcher)).members:
                pass
            assert push.members[0].member_id == "a"

            produce(client, shard, 3)
            while (push := await next_push(watcher)).shards[0].length != 3:
                pass
            await member.request(heartbeat("a", -1))
            assert joined.status == Status.OK

        with trio.move_on_after(0.5):  # at most 10 pushes a second, however much changes
            started, pushes = trio.current_time(), 0
            while True:
                client.xadd(shard, {"n": "x"})
                await next_push(watcher)
                pushes += 1
        assert pushes <= 10 * (trio.current_time() - started) + 1

        deleted = await admin(coordinator.url, m.DeleteGroup(request_id=0, stream_prefix=PREFIX,
                                                             consumer_group=GROUP))
        assert deleted.status == Status.OK
        while (push := await next_push(watcher)).status != Status.UNKNOWN_GROUP:
            pass
        with trio.move_on_after(0.3):
            await watcher.pushes.receive()
            pytest.fail("a push after the watch ended")


# --- storeId ---------------------------------------------------------------------------------


async def test_store_id_is_in_routing_and_written_again_when_missing(coordinator, client):
    routing = await set_shards(coordinator.url, 1, GROUP)
    stored = client.get(STORE_ID_KEY)
    assert stored
    async with open_session(coordinator.url, "member") as member:
        answer = await member.request(m.GetRouting(request_id=0, stream_prefix=PREFIX))
        assert answer.store_id == stored and answer.retention == m.Retention()
        joined = await member.request(heartbeat("a", 0))
        assert joined.routing.store_id == stored
    assert routing.routing is not None
    client.delete(STORE_ID_KEY)

    async def rewritten() -> Any:
        await trio.sleep(0)
        return client.get(STORE_ID_KEY) == stored

    await wait_until(rewritten)
