"""C4 lag in time: ages in describeGroup and the per-group gauges, against a real redis-server.

Entries are written with explicit ids (stream ids are times on the Redis node's clock), so
every age has a known true value: the node's TIME minus the id's milliseconds. Each check
brackets the reported age between the node's TIME read just before and just after the read,
so it is exact up to the time the read itself took, whatever the machine's load.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import redis
import trio
from prometheus_client.parser import text_string_to_metric_families

from rsc.actors.app import serve
from rsc.actors.config import CoordinatorConfig
from rsc.actors.core.shard_reports import entry_age_ms, oldest_age
from rsc.actors.core.watch import Watch
from rsc.actors.ops.group_lag import GroupLag, PrefixGroups, read_group_lag
from rsc.actors.ops.metrics import CoordinatorMetrics
from rsc.actors.redis_io import shard_ops as so
from rsc.member.session import open_session
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.routing import stream_key
from tests.conftest import FAST

PREFIX, GROUP = "orders", "billing"
SHARDS = [stream_key(PREFIX, 1, i) for i in range(2)]


@pytest.fixture
def client(redis_url: str) -> Iterator[Any]:
    connection = redis.Redis.from_url(redis_url, decode_responses=True)
    so.load_scripts(connection)
    yield connection
    connection.close()


def node_ms(client: Any) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def add_at(client: Any, stream: str, *at_ms: int) -> list[str]:
    return [client.xadd(stream, {"key": str(n), "value": "v"}, id=f"{ms}-0")
            for n, ms in enumerate(at_ms)]


def read(client: Any, stream: str, count: int) -> list[str]:
    reply = client.xreadgroup(GROUP, "c", {stream: ">"}, count=count)
    return [entry_id for _, entries in reply for entry_id, _ in entries]


# --- pure ------------------------------------------------------------------------------------


def test_c4_an_age_is_never_below_zero_and_none_without_an_entry():
    assert entry_age_ms("1000-5", 4000) == 3000
    assert entry_age_ms("9000-0", 4000) == 0  # an id ahead of the clock (another node's)
    assert entry_age_ms(None, 4000) is None and entry_age_ms("", 4000) is None
    assert oldest_age([None, 5, 3]) == 5 and oldest_age([None, None]) is None


def test_c4_watch_pushes_ignore_a_change_of_the_ages_alone():
    shard = m.ShardDescription(shard=SHARDS[0], version=1, owner=None, length=3,
                               last_delivered_id="1-0", lag=2, pending=1, oldest_pending_ms=5,
                               oldest_undelivered_age_ms=100, oldest_pending_entry_age_ms=200)
    sent = m.GroupDescription(request_id=1, status=Status.OK, stream_prefix=PREFIX,
                              consumer_group=GROUP, group_epoch=3, shards=(shard,),
                              oldest_undelivered_age_ms=100, oldest_pending_entry_age_ms=200)
    watch = Watch(request=m.DescribeGroup(request_id=1, stream_prefix=PREFIX,
                                          consumer_group=GROUP, watch=True),
                  sent=sent, looked_at_ms=0)
    older = attrs.evolve(sent, oldest_undelivered_age_ms=9100, oldest_pending_entry_age_ms=9200,
                         shards=(attrs.evolve(shard, oldest_undelivered_age_ms=9100,
                                              oldest_pending_entry_age_ms=9200),))
    assert watch.offer(older, 1000) is None
    moved = attrs.evolve(older, shards=(attrs.evolve(shard, lag=3),))
    assert watch.offer(moved, 2000) is not None  # the lag itself still counts


def test_c4_the_gauges_drop_a_group_that_is_gone():
    metrics = CoordinatorMetrics()
    metrics.set_group_lag([GroupLag(PREFIX, GROUP, 4, 2, 61_500, 3_000),
                           GroupLag(PREFIX, "audit", None, 0, 0, 0)])
    text = metrics.exposition().decode()
    assert 'rsc_group_lag_seconds{group="billing",prefix="orders"} 61.5' in text
    assert 'rsc_group_pending_age_seconds{group="billing",prefix="orders"} 3.0' in text
    assert 'rsc_group_lag_entries{group="billing",prefix="orders"} 4.0' in text
    assert 'rsc_group_lag_entries{group="audit"' not in text  # unknown count: no sample
    metrics.set_group_lag([GroupLag(PREFIX, "audit", 1, 0, 10, 0)])
    text = metrics.exposition().decode()
    assert 'group="billing"' not in text and 'rsc_group_lag_seconds{group="audit"' in text


# --- Redis -----------------------------------------------------------------------------------


def test_c4_shard_ages_are_the_node_time_minus_the_oldest_ids(client):
    stream = SHARDS[0]
    start = node_ms(client) - 120_000
    ids = add_at(client, stream, start, start + 30_000, start + 60_000, start + 90_000)
    client.xgroup_create(stream, GROUP, id="0")
    assert read(client, stream, 2) == ids[:2]
    client.xack(stream, GROUP, ids[0])  # pending: ids[1]; undelivered from ids[2]

    before = node_ms(client)
    [lag] = so.shard_lag(client, [stream], GROUP)
    after = node_ms(client)
    assert before - (start + 60_000) <= lag.oldest_undelivered_age_ms <= after - (start + 60_000)
    assert before - (start + 30_000) <= lag.oldest_pending_entry_age_ms <= after - (start + 30_000)

    ages = so.group_ages(client, [stream, SHARDS[1]], [GROUP, "ghost"])
    assert [a.shard for a in ages[GROUP]] == [stream, SHARDS[1]]
    assert ages[GROUP][1].oldest_undelivered_age_ms is None  # no stream at all
    assert [(a.oldest_undelivered_age_ms, a.oldest_pending_entry_age_ms)
            for a in ages["ghost"]] == [(None, None), (None, None)]  # no such group


def test_c4_a_group_that_is_caught_up_has_no_ages_and_a_future_id_ages_zero(client):
    stream = SHARDS[0]
    ahead = node_ms(client) + 3_600_000
    [entry] = add_at(client, stream, ahead)
    client.xgroup_create(stream, GROUP, id="0")
    [lag] = so.shard_lag(client, [stream], GROUP)
    assert (lag.oldest_undelivered_age_ms, lag.oldest_pending_entry_age_ms) == (0, None)
    read(client, stream, 1)
    client.xack(stream, GROUP, entry)
    [lag] = so.shard_lag(client, [stream], GROUP)
    assert (lag.oldest_undelivered_age_ms, lag.oldest_pending_entry_age_ms) == (None, None)


def test_c4_group_lag_reads_counts_and_the_largest_age_over_shards(client):
    start = node_ms(client) - 50_000
    add_at(client, SHARDS[0], start + 20_000, start + 30_000)
    add_at(client, SHARDS[1], start, start + 40_000)
    for stream in SHARDS:
        client.xgroup_create(stream, GROUP, id="0")
    read(client, SHARDS[1], 1)
    before = node_ms(client)
    [figures] = read_group_lag(client, [PrefixGroups(PREFIX, tuple(SHARDS), (GROUP,))])
    after = node_ms(client)
    assert (figures.lag_entries, figures.pending_entries) == (3, 1)
    assert before - (start + 20_000) <= figures.lag_ms <= after - (start + 20_000)
    assert before - start <= figures.pending_age_ms <= after - start


# --- a real coordinator ----------------------------------------------------------------------


@asynccontextmanager
async def coordinator(redis_url: str, **overrides: Any
                      ) -> AsyncIterator[tuple[str, CoordinatorMetrics]]:
    metrics = CoordinatorMetrics()
    config = CoordinatorConfig(redis_url=redis_url, port=0, **{**FAST, **overrides})
    async with trio.open_nursery() as nursery:
        url = await nursery.start(lambda task_status: serve(config, metrics=metrics,
                                                            task_status=task_status))
        yield url, metrics
        nursery.cancel_scope.cancel()


async def admin(url: str, request: m.Message) -> Any:
    async with open_session(url, "admin") as session:
        return await session.request(request)


def gauge(metrics: CoordinatorMetrics, name: str) -> float | None:
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for sample in family.samples:
            if sample.name == name and sample.labels == {"prefix": PREFIX, "group": GROUP}:
                return float(sample.value)
    return None


async def test_c4_describe_group_gives_ages_per_shard_and_for_the_group(redis_url, client):
    async with coordinator(redis_url) as (url, _):
        changed = await admin(url, m.SetShardCount(request_id=0, stream_prefix=PREFIX,
                                                   consumer_group=GROUP, shard_count=2))
        first, second = changed.routing.streams
        start = node_ms(client) - 90_000
        add_at(client, first, start + 30_000)
        add_at(client, second, start, start + 60_000)
        read(client, second, 1)
        before = node_ms(client)
        description = await admin(url, m.DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                                       consumer_group=GROUP))
        after = node_ms(client)
    ages = {s.shard: (s.oldest_undelivered_age_ms, s.oldest_pending_entry_age_ms)
            for s in description.shards}
    assert ages[first][1] is None and ages[second][0] is not None
    assert before - (start + 30_000) <= ages[first][0] <= after - (start + 30_000)
    assert before - (start + 60_000) <= ages[second][0] <= after - (start + 60_000)
    assert before - start <= ages[second][1] <= after - start
    assert description.oldest_undelivered_age_ms == ages[first][0]  # the largest
    assert description.oldest_pending_entry_age_ms == ages[second][1]


async def test_c4_the_lag_gauges_follow_a_stalled_group_and_its_recovery(redis_url, client):
    async with coordinator(redis_url, lag_metrics_interval_ms=100) as (url, metrics):
        changed = await admin(url, m.SetShardCount(request_id=0, stream_prefix=PREFIX,
                                                   consumer_group=GROUP, shard_count=1))
        [stream] = changed.routing.streams
        start = node_ms(client) - 300_000
        ids = add_at(client, stream, start, start + 100_000)
        read(client, stream, 1)  # ids[0] pending, never acked: the group is stalled
        with trio.fail_after(10):
            while (gauge(metrics, "rsc_group_pending_age_seconds") or 0) < 300:
                await trio.sleep(0.02)
        assert gauge(metrics, "rsc_group_lag_seconds") >= 200
        assert gauge(metrics, "rsc_group_lag_entries") == 1
        assert gauge(metrics, "rsc_group_pending_entries") == 1
        client.xack(stream, GROUP, ids[0])
        read(client, stream, 1)
        client.xack(stream, GROUP, ids[1])  # caught up: nothing behind is 0 seconds
        with trio.fail_after(10):
            while (gauge(metrics, "rsc_group_lag_seconds"),
                   gauge(metrics, "rsc_group_pending_age_seconds")) != (0.0, 0.0):
                await trio.sleep(0.02)
        assert gauge(metrics, "rsc_group_pending_entries") == 0
