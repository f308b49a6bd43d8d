"""Shard-stream operations against a real redis-server: lag, retention, drain, store id.

The pure helpers at the top need no Redis. Everything else compares what
shard_ops reports with what Redis itself answers for the same shard.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from rsc.actors.redis_io import shard_ops as so
from rsc.actors.redis_io.store import StoreError
from rsc.protocol.routing import stream_key

PREFIX = "orders"
SHARDS = [stream_key(PREFIX, 1, i) for i in range(3)]


class CountingRedis(redis.Redis):
    """A client that counts round trips: direct commands and executed pipelines."""

    round_trips = 0

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.round_trips += 1
        return super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction=transaction, shard_hint=shard_hint)
        execute = pipe.execute

        def counted(raise_on_error: bool = True) -> Any:
            self.round_trips += 1
            return execute(raise_on_error=raise_on_error)

        pipe.execute = counted  # type: ignore[method-assign]
        return pipe


@pytest.fixture
def client(redis_url: str) -> Iterator[CountingRedis]:
    connection: CountingRedis = CountingRedis.from_url(redis_url, decode_responses=True)  # type: ignore[assignment]
    so.load_scripts(connection)
    yield connection
    connection.close()


def produce(client: Any, stream: str, count: int, *, start_ms: int | None = None) -> list[str]:
    """Append `count` entries; with `start_ms`, at ids start_ms-0, start_ms+1000-0, ..."""
    ids = []
    for index in range(count):
        entry_id = "*" if start_ms is None else f"{start_ms + 1000 * index}-0"
        ids.append(client.xadd(stream, {"n": str(index)}, id=entry_id))
    return ids


def read(client: Any, stream: str, group: str, count: int) -> list[str]:
    reply = client.xreadgroup(group, "consumer-1", {stream: ">"}, count=count)
    return [entry_id for _, entries in reply for entry_id, _ in entries]


def entry_ids(client: Any, stream: str) -> list[str]:
    return [entry_id for entry_id, _ in client.xrange(stream)]


def group_info(client: Any, stream: str, group: str) -> dict[str, Any]:
    return next(g for g in client.xinfo_groups(stream) if g["name"] == group)


# --- pure helpers --------------------------------------------------------------------------


def test_drain_report_lays_the_counts_out_per_stream_then_per_group() -> None:
    counts = [so.DrainCount("s0", "audit", 3, 1), so.DrainCount("s1", "audit", 2, 0),
              so.DrainCount("s0", "billing", 0, 0)]
    assert so.drain_report(counts) == {"s0": {"audit": (3, 1), "billing": (0, 0)},
                                           "s1": {"audit": (2, 0)}}


def test_age_cut_id() -> None:
    assert so.age_cut_id(max_age_ms=500, now_ms=10_500) == "10000-0"
    assert so.age_cut_id(max_age_ms=20_000, now_ms=10_500) is None


def test_bad_arguments_are_refused_before_any_redis_call() -> None:
    with pytest.raises(ValueError, match="max_length must be"):
        so.apply_retention(None, SHARDS, ["g"], acked=True, max_length=0,  # type: ignore[arg-type]
                           max_age_ms=None, now_ms=0)
    with pytest.raises(ValueError, match="max_age_ms must be"):
        so.apply_retention(None, SHARDS, ["g"], acked=False, max_length=None,  # type: ignore[arg-type]
                           max_age_ms=True, now_ms=0)


# --- lag -----------------------------------------------------------------------------------


def test_shard_lag_equals_xinfo_groups_and_xpending_in_one_round_trip(client: CountingRedis) -> None:
    produce(client, SHARDS[0], 10)
    produce(client, SHARDS[1], 4)
    for stream in SHARDS:
        client.xgroup_create(stream, "billing", id="0", mkstream=True)
    delivered = read(client, SHARDS[0], "billing", 6)
    client.xack(SHARDS[0], "billing", *delivered[:2])
    client.xack(SHARDS[1], "billing", *read(client, SHARDS[1], "billing", 10))
    missing = stream_key(PREFIX, 1, 9)

    client.round_trips = 0
    lags = so.shard_lag(client, [*SHARDS, missing], "billing")
    assert client.round_trips == 1

    for lag in lags[:3]:
        info = group_info(client, lag.shard, "billing")
        summary = client.xpending(lag.shard, "billing")
        assert lag.length == client.xlen(lag.shard)
        assert lag.last_delivered_id == info["last-delivered-id"]
        assert lag.lag == info["lag"]
        assert lag.pending == info["pending"] == summary["pending"]
        if summary["pending"]:
            oldest: Any = client.xpending_range(lag.shard, "billing", summary["min"], summary["min"], 1)
            assert lag.oldest_pending_ms is not None
            assert 0 <= lag.oldest_pending_ms <= oldest[0]["time_since_delivered"]
        else:
            assert lag.oldest_pending_ms is None
    assert [(x.length, x.lag, x.pending) for x in lags[:3]] == [(10, 4, 4), (4, 0, 0), (0, 0, 0)]
    assert lags[3] == so.ShardLag(missing, 0, None, None, 0, None)


def test_shard_lag_reports_none_where_redis_cannot_tell(client: CountingRedis) -> None:
    ids = produce(client, SHARDS[0], 5)
    client.xgroup_create(SHARDS[0], "billing", id=ids[2])  # mid-stream, no ENTRIESREAD: unknown
    [lag] = so.shard_lag(client, SHARDS[:1], "billing")
    assert group_info(client, SHARDS[0], "billing")["lag"] is None
    assert lag.lag is None and lag.last_delivered_id == ids[2]


def test_oldest_pending_is_the_smallest_id_even_when_a_later_one_is_older(client: CountingRedis) -> None:
    client.xgroup_create(SHARDS[0], "billing", id="0", mkstream=True)
    produce(client, SHARDS[0], 3)
    first, second, third = read(client, SHARDS[0], "billing", 3)
    client.xclaim(SHARDS[0], "billing", "consumer-1", 0, [first], idle=100)
    client.xclaim(SHARDS[0], "billing", "consumer-1", 0, [second, third], idle=60_000)
    [lag] = so.shard_lag(client, SHARDS[:1], "billing")
    assert lag.oldest_pending_ms is not None and 100 <= lag.oldest_pending_ms < 60_000


def test_group_totals_sum_every_group_from_one_xinfo_per_shard(client: CountingRedis) -> None:
    for stream in SHARDS[:2]:
        produce(client, stream, 3)
        client.xgroup_create(stream, "billing", id="0")
        client.xgroup_create(stream, "audit", id="0")
    read(client, SHARDS[0], "billing", 2)
    client.round_trips = 0
    result = so.group_totals(client, SHARDS[:2], ["billing", "audit", "ghost"])
    assert client.round_trips == 1
    assert result["billing"] == so.GroupTotals(lag=4, pending=2)
    assert result["audit"] == so.GroupTotals(lag=6, pending=0)
    assert result["ghost"] == so.GroupTotals(lag=None, pending=0)


# --- retention -----------------------------------------------------------------------------


def trim_acked(client: Any, streams: list[str], groups: list[str]) -> list[int]:
    """T1 without caps: entries removed per shard because every group acked them."""
    results = so.apply_retention(client, streams, groups, acked=True, max_length=None,
                                 max_age_ms=None, now_ms=0)
    return [r.removed_acked for r in results]


def enforce_caps(client: Any, streams: list[str], groups: list[str], max_length: int | None,
                 max_age_ms: int | None, now_ms: int) -> tuple[int, int]:
    """T2 alone: (entries removed by the caps, of which some group had not acked)."""
    results = so.apply_retention(client, streams, groups, acked=False, max_length=max_length,
                                 max_age_ms=max_age_ms, now_ms=now_ms)
    return (sum(r.removed_by_caps for r in results), sum(r.removed_unconsumed for r in results))


def two_groups_one_behind(client: Any) -> list[str]:
    """10 entries; billing read and acked all, audit read 6 and acked the first 4."""
    ids = produce(client, SHARDS[0], 10, start_ms=1000)
    for group in ("billing", "audit"):
        client.xgroup_create(SHARDS[0], group, id="0")
    client.xack(SHARDS[0], "billing", *read(client, SHARDS[0], "billing", 10))
    client.xack(SHARDS[0], "audit", *read(client, SHARDS[0], "audit", 6)[:4])
    return ids


def test_t1_acked_trims_to_what_some_group_still_needs_and_keeps_an_unacked_entry(
        client: CountingRedis) -> None:
    ids = two_groups_one_behind(client)
    client.round_trips = 0
    assert trim_acked(client, SHARDS[:1], ["billing", "audit"]) == [4]
    assert client.round_trips == 1
    assert entry_ids(client, SHARDS[0]) == ids[4:]  # audit's pending ids[4] survives
    assert trim_acked(client, SHARDS[:1], ["billing", "audit"]) == [0]

    client.xack(SHARDS[0], "audit", *ids[4:6])
    assert trim_acked(client, SHARDS[:1], ["billing", "audit"]) == [2]  # undelivered ones stay
    assert entry_ids(client, SHARDS[0]) == ids[6:]
    client.xack(SHARDS[0], "audit", *read(client, SHARDS[0], "audit", 10))
    assert trim_acked(client, SHARDS[:1], ["billing", "audit"]) == [4]
    assert client.xlen(SHARDS[0]) == 0
    [later] = produce(client, SHARDS[0], 1)
    assert read(client, SHARDS[0], "audit", 10) == [later]  # trimming left the groups intact


def test_t1_removes_nothing_without_groups_or_when_a_group_lacks_its_consumer_group(
        client: CountingRedis) -> None:
    two_groups_one_behind(client)
    assert trim_acked(client, SHARDS[:1], []) == [0]
    assert trim_acked(client, SHARDS[:1], ["billing", "audit", "new"]) == [0]
    assert client.xlen(SHARDS[0]) == 10
    assert trim_acked(client, [stream_key(PREFIX, 1, 9)], ["billing"]) == [0]


def test_t2_length_cap_removes_entries_and_counts_the_unconsumed_ones(client: CountingRedis) -> None:
    ids = two_groups_one_behind(client)  # audit needs ids[4:]
    assert enforce_caps(client, SHARDS[:1], ["billing", "audit"], 3, None, 0) == (7, 3)
    assert entry_ids(client, SHARDS[0]) == ids[7:]
    assert enforce_caps(client, SHARDS[:1], ["billing", "audit"], 3, None, 0) == (0, 0)


def test_t2_age_cap_removes_old_entries_and_counts_the_unconsumed_ones(client: CountingRedis) -> None:
    ids = two_groups_one_behind(client)  # ids are 1000-0 .. 10000-0; audit needs 5000-0 on
    removed = enforce_caps(client, SHARDS[:1], ["billing", "audit"], None, 3000, now_ms=10_500)
    assert removed == (7, 3)  # 1000..7000 are older than 7500; 5000, 6000, 7000 were unacked
    assert entry_ids(client, SHARDS[0]) == ids[7:]


def test_t2_with_acked_counts_only_what_the_cap_took_beyond_the_acks(client: CountingRedis) -> None:
    two_groups_one_behind(client)
    [result] = so.apply_retention(client, SHARDS[:1], ["billing", "audit"], acked=True,
                                  max_length=2, max_age_ms=5000, now_ms=11_500)
    # acks take 1000..4000; the age cut (6500) takes 5000, 6000; the length cap 7000, 8000
    assert result == so.RetentionResult(SHARDS[0], removed_acked=4, removed_by_caps=4,
                                        removed_unconsumed=4, length=2)
    assert client.xlen(SHARDS[0]) == 2


def test_t2_counts_everything_when_a_group_has_no_consumer_group_and_nothing_without_groups(
        client: CountingRedis) -> None:
    produce(client, SHARDS[0], 6)
    client.xgroup_create(SHARDS[0], "billing", id="$")  # billing needs nothing of these 6
    assert enforce_caps(client, SHARDS[:1], ["billing", "ghost"], 4, None, 0) == (2, 2)
    assert enforce_caps(client, SHARDS[:1], ["billing"], 2, None, 0) == (2, 0)
    assert enforce_caps(client, SHARDS[:1], [], 1, None, 0) == (1, 0)


def test_t2_count_is_exact_across_script_pages(client: CountingRedis) -> None:
    pipe: Any = client.pipeline(transaction=False)
    for index in range(1500):
        pipe.xadd(SHARDS[0], {"n": str(index)}, id=f"{index + 1}-0")
    pipe.execute()
    client.xgroup_create(SHARDS[0], "billing", id="200-0")  # 1..200 consumed
    assert enforce_caps(client, SHARDS[:1], ["billing"], None, 1, now_ms=1302) == (1300, 1100)
    client.xgroup_setid(SHARDS[0], "billing", id="1400-0")
    assert enforce_caps(client, SHARDS[:1], ["billing"], 10, None, 0) == (190, 90)


def test_t3_none_removes_nothing_because_of_acks(client: CountingRedis) -> None:
    ids = produce(client, SHARDS[0], 5)
    client.xgroup_create(SHARDS[0], "billing", id="0")
    client.xack(SHARDS[0], "billing", *read(client, SHARDS[0], "billing", 5))
    [result] = so.apply_retention(client, SHARDS[:1], ["billing"], acked=False, max_length=None,
                                  max_age_ms=None, now_ms=0)
    assert result == so.RetentionResult(SHARDS[0], 0, 0, 0, 5)
    assert entry_ids(client, SHARDS[0]) == ids


def test_scripts_are_reloaded_after_redis_forgets_them(client: CountingRedis) -> None:
    two_groups_one_behind(client)
    assert trim_acked(client, SHARDS[:1], ["billing", "audit"]) == [4]
    client.script_flush()
    client.round_trips = 0
    assert trim_acked(client, SHARDS[:1], ["billing", "audit"]) == [0]
    assert client.round_trips == 3  # NOSCRIPT, SCRIPT LOAD, the retry
    client.round_trips = 0
    trim_acked(client, SHARDS[:1], ["billing", "audit"])
    assert client.round_trips == 1


# --- drain (G2) ----------------------------------------------------------------------------


def test_drain_counts_undelivered_and_pending_per_group_and_names_the_blockers(
        client: CountingRedis) -> None:
    for stream in SHARDS[:2]:
        produce(client, stream, 5)
        for group in ("billing", "audit"):
            client.xgroup_create(stream, group, id="0")
        client.xack(stream, "billing", *read(client, stream, "billing", 5))
    client.xack(SHARDS[0], "audit", read(client, SHARDS[0], "audit", 3)[0])  # 2 undelivered, 2 pending
    retired = stream_key(PREFIX, 1, 9)
    streams = [SHARDS[0], SHARDS[1], retired]

    client.round_trips = 0
    counts = so.drain_counts(client, streams, ["billing", "audit", "x:y"])
    assert client.round_trips == 1
    by_key = {(c.shard, c.consumer_group): (c.undelivered, c.pending) for c in counts}
    assert by_key[(SHARDS[0], "billing")] == (0, 0)
    assert by_key[(SHARDS[0], "audit")] == (2, 2)
    assert by_key[(SHARDS[1], "audit")] == (5, 0)
    assert by_key[(SHARDS[0], "x:y")] == (5, 0)  # no consumer group there: nothing read
    assert by_key[(retired, "audit")] == (0, 0)


def test_drain_counts_entries_removed_by_retention_as_delivered(client: CountingRedis) -> None:
    produce(client, SHARDS[0], 6, start_ms=1000)
    client.xgroup_create(SHARDS[0], "billing", id="0")
    client.xack(SHARDS[0], "billing", *read(client, SHARDS[0], "billing", 2))
    assert so.drain_counts(client, SHARDS[:1], ["billing"])[0].undelivered == 4
    client.xtrim(SHARDS[0], maxlen=3, approximate=False)
    assert so.drain_counts(client, SHARDS[:1], ["billing"])[0].undelivered == 3
    client.xtrim(SHARDS[0], maxlen=0, approximate=False)  # a sealed shard aged out entirely is drained
    assert so.drain_counts(client, SHARDS[:1], ["billing"]) == [
        so.DrainCount(SHARDS[0], "billing", 0, 0)]


def test_drain_counts_by_range_when_redis_lag_is_unknown(client: CountingRedis) -> None:
    ids = produce(client, SHARDS[0], 8)
    client.xgroup_create(SHARDS[0], "billing", id=ids[2])
    client.xdel(SHARDS[0], ids[6])  # a tombstone after last-delivered: Redis lag is nil
    assert group_info(client, SHARDS[0], "billing")["lag"] is None
    [count] = so.drain_counts(client, SHARDS[:1], ["billing"])
    assert (count.undelivered, count.pending) == (4, 0)  # ids[3], [4], [5], [7]


# --- store identity ------------------------------------------------------------------------


def test_store_id_is_written_once_and_rewritten_the_same_when_missing(client: CountingRedis) -> None:
    first = so.ensure_store_id(client)
    assert len(first) == 32 and client.get(so.STORE_ID_KEY) == first
    assert so.ensure_store_id(client) == first
    client.delete(so.STORE_ID_KEY)
    client.round_trips = 0
    assert so.ensure_store_id(client, first) == first
    assert client.round_trips == 1
    assert client.get(so.STORE_ID_KEY) == first
    assert so.ensure_store_id(client, "some-other-id") == first  # what Redis holds wins


def test_errors_become_store_errors(client: CountingRedis) -> None:
    client.set(SHARDS[0], "not a stream")
    with pytest.raises(StoreError, match="apply retention"):
        trim_acked(client, SHARDS[:1], ["billing"])
    with pytest.raises(StoreError, match="length"):
        so.shard_lag(client, SHARDS[:1], "billing")
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    with pytest.raises(StoreError, match="store-id"):
        so.ensure_store_id(dead)


def test_a_client_without_decoded_responses_reads_the_same(redis_url: str) -> None:
    raw: Any = redis.Redis.from_url(redis_url)
    try:
        produce(raw, SHARDS[0], 3, start_ms=1000)
        raw.xgroup_create(SHARDS[0], "billing", id="0")
        read(raw, SHARDS[0], "billing", 1)
        [lag] = so.shard_lag(raw, SHARDS[:1], "billing")
        assert (lag.last_delivered_id, lag.lag, lag.pending) == ("1000-0", 2, 1)
        assert so.group_totals(raw, SHARDS[:1], ["billing"]) == {"billing": so.GroupTotals(2, 1)}
        assert so.drain_counts(raw, SHARDS[:1], ["billing"]) == [
            so.DrainCount(SHARDS[0], "billing", 2, 1)]
        assert trim_acked(raw, SHARDS[:1], ["billing"]) == [0]  # the pending one stays first
        assert isinstance(so.ensure_store_id(raw), str)
    finally:
        raw.close()


# --- lag where Redis reports none -------------------------------------------------------


def test_lag_after_an_acked_trim_is_known_where_redis_says_nil(client):
    """Redis 7.x reports nil lag once entries inside what a group has not read were trimmed:
    exactly what `acked` retention does while a slower group is behind."""
    stream = SHARDS[0]
    produce(client, stream, 10)
    client.xgroup_create(stream, "fast", id="0")
    client.xgroup_create(stream, "slow", id="0")
    entries = client.xreadgroup("fast", "c", {stream: ">"}, count=10)[0][1]
    client.xack(stream, "fast", *[entry_id for entry_id, _ in entries])
    client.xtrim(stream, minid=entries[4][0], approximate=False)  # entries the slow group never read
    infos = {info["name"]: info for info in client.xinfo_groups(stream)}
    fast, slow = so.shard_lag(client, [stream], "fast")[0], so.shard_lag(client, [stream], "slow")[0]
    assert fast.lag == 0
    assert slow.lag == 6 == client.xlen(stream)
    if infos["slow"]["lag"] is not None:  # a server that can tell agrees with us
        assert infos["slow"]["lag"] == slow.lag
    totals = so.group_totals(client, [stream], ["fast", "slow"])
    assert (totals["fast"].lag, totals["slow"].lag) == (0, 6)
