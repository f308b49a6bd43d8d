"""Idle prefixes cost nothing per tick: no shard I/O, no task (actors/core/prefix_schedule.py).

A real redis-server and a real coordinator in this process (short ticks). What
the coordinator sends to Redis is counted by Redis itself (`INFO commandstats`
counts the commands scripts run too): the retention script ends with an XLEN
of its shard, the lease renewal with a PEXPIRE, so renewals count ticks.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
import trio

from rsc.actors.redis_io.store import LEASE_KEY
from rsc.common.redis_server import EmbeddedRedis
from rsc.member.session import open_session
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import RetentionMode
from tests.conftest import start_coordinator
from tests.conftest_cluster import server_binary

PREFIXES = 20


def calls(client: Any, command: str) -> int:
    stats = client.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


def shard_calls(client: Any) -> tuple[int, ...]:
    return tuple(calls(client, name) for name in ("xlen", "xinfo|groups", "xinfo|stream",
                                                  "xrange", "exists", "xtrim"))


async def wait_until(check: Any, timeout: float = 10) -> None:
    with trio.fail_after(timeout):
        while not check():
            await trio.sleep(0.02)


async def ticks(client: Any, count: int) -> None:
    """Wait for `count` lease renewals (one per tick)."""
    renewals = calls(client, "pexpire")
    await wait_until(lambda: calls(client, "pexpire") >= renewals + count)


def count_tasks() -> int:
    def walk(task: Any) -> int:
        return 1 + sum(walk(child) for nursery in task.child_nurseries for child in nursery.child_tasks)
    return walk(trio.lowlevel.current_root_task())


async def create_prefixes(url: str, count: int) -> list[str]:
    streams = []
    async with open_session(url, "admin") as session:
        for index in range(count):
            changed: Any = await session.request(m.SetShardCount(
                request_id=0, stream_prefix=f"idle{index}", consumer_group="g", shard_count=1))
            assert changed.status == Status.OK
            streams.extend(changed.routing.streams)
    return streams


async def capped_prefix(url: str) -> str:
    """One prefix `idle0` of one shard, capped at 2 entries (T2); its shard."""
    [shard] = await create_prefixes(url, 1)
    async with open_session(url, "admin") as session:
        changed: Any = await session.request(m.SetRetention(
            request_id=0, stream_prefix="idle0",
            retention=m.Retention(mode=RetentionMode.NONE, max_length=2)))
        assert changed.status == Status.OK
    return shard


@pytest.fixture
def own_redis() -> Iterator[str]:
    """A redis-server of this test's own: its command counts are this coordinator's alone (the
    session's server may still see late calls of earlier tests' abandoned threads)."""
    server = EmbeddedRedis()
    server.binary = server_binary()
    with server:
        yield server.url


async def test_t1_an_idle_prefix_does_no_shard_io_on_its_ticks(own_redis, nursery):
    # a long lease: its third, the store deadline (D4), outlasts a slow moment of a busy machine
    coordinator = await start_coordinator(nursery, own_redis, lease_ttl_ms=30_000)
    client = redis.Redis.from_url(own_redis, decode_responses=True)
    try:
        await create_prefixes(coordinator.url, PREFIXES)
        # T1: each prefix changed (a group registered): one pass each within ten ticks
        await wait_until(lambda: calls(client, "xlen") >= PREFIXES)
        # a pass queued as the last prefix came may still run: wait until ten ticks move nothing
        before = shard_calls(client)
        await ticks(client, 10)
        while shard_calls(client) != before:
            before = shard_calls(client)
            await ticks(client, 10)
        await ticks(client, 30)
        assert shard_calls(client) == before, "idle prefixes read or trimmed their shards"
    finally:
        client.close()


async def test_t2_a_capped_idle_prefix_is_still_trimmed_every_ten_ticks(coordinator, redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        shard = await capped_prefix(coordinator.url)
        for _ in range(3):  # producers write beside the coordinator: it sees no change
            for n in range(10):
                client.xadd(shard, {"n": str(n)})
            await wait_until(lambda: client.xlen(shard) <= 2)
    finally:
        client.close()


async def test_d5_after_a_lapse_taken_back_retention_goes_on_while_nobody_expires(
        own_redis, nursery):
    # a lease key gone (a wall-clock step expires it in Redis): the coordinator takes it back
    # and expires nobody for a member lease TTL (30 s here), but still trims its capped shards
    coordinator = await start_coordinator(nursery, own_redis, lease_ttl_ms=30_000)
    client = redis.Redis.from_url(own_redis, decode_responses=True)
    try:
        shard = await capped_prefix(coordinator.url)
        holder = client.get(LEASE_KEY)
        assert holder is not None
        client.delete(LEASE_KEY)
        await wait_until(lambda: client.get(LEASE_KEY) == holder)  # taken back, not restarted
        for n in range(10):
            client.xadd(shard, {"n": str(n)})
        await wait_until(lambda: client.xlen(shard) <= 2)
    finally:
        client.close()


async def test_an_idle_prefix_holds_no_task(coordinator):
    with trio.fail_after(10):
        await trio.testing.wait_all_tasks_blocked()
    baseline = count_tasks()
    await create_prefixes(coordinator.url, PREFIXES)
    # the admin session's tasks end with it; each prefix's actor ran only while it had requests
    await wait_until(lambda: count_tasks() <= baseline)
