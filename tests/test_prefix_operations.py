"""Pure tests of the prefix machine's operations: lag and shards, overdue, retention T1..T3,
storeId, the G2 blockers from exact drain counts, and the watch rules.

No Redis, no trio: requests go into `PrefixMachine.handle`, the batch is
checkpointed and committed (or its write fails) by hand, and the records and
answers that come out are checked. Each test names the docs/protocol.md rule.
(G1 and G3 decisions are in test_prefix_rules.py.)
"""

from __future__ import annotations

from typing import Any

import attrs

from rsc.actors.core.group import GroupSettings
from rsc.actors.core.prefix import (
    RETENTION_EVERY_TICKS,
    Answer,
    Checkpoint,
    LagRead,
    PrefixMachine,
    RetentionPass,
    TotalsRead,
    is_overdue,
)
from rsc.actors.core.records import PrefixSnapshot, RetentionRecord, changes_of, encode, replay
from rsc.actors.core.watch import MIN_INTERVAL_MS, Watch, significant
from rsc.actors.redis_io.shard_ops import DrainCount, GroupTotals, ShardLag, drain_report
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.routing import stream_key
from rsc.protocol.vocabulary import MemberState, RetentionMode

PREFIX, GROUP = "orders", "billing"
SETTINGS = GroupSettings(heartbeat_interval_ms=200, lease_ttl_ms=1000, revoke_timeout_ms=5000)


def batch(machine: PrefixMachine, *requests: m.Request, now: int = 0,
          durable: bool = True) -> tuple[list[Answer], Checkpoint]:
    answers = [machine.handle(request, now) for request in requests]
    checkpoint = machine.checkpoint()
    if durable:
        machine.committed(checkpoint)
    else:
        machine.write_failed(checkpoint, now)
    return answers, checkpoint


def answer_of(machine: PrefixMachine, answer: Answer, durable: bool = True) -> m.Response:
    return machine.resolve(answer, durable=durable)


def set_shards(count: int, group: str | None = GROUP) -> m.SetShardCount:
    return m.SetShardCount(request_id=1, stream_prefix=PREFIX, consumer_group=group,
                           shard_count=count)


def join(member_id: str, group: str = GROUP) -> m.Heartbeat:
    return m.Heartbeat(request_id=2, stream_prefix=PREFIX, consumer_group=group,
                       member_id=member_id, member_epoch=0, capacity=1)


def describe(group: str = GROUP) -> m.DescribeGroup:
    return m.DescribeGroup(request_id=5, stream_prefix=PREFIX, consumer_group=group)


def with_routing(count: int = 2, *groups: str) -> PrefixMachine:
    machine = PrefixMachine(PREFIX, SETTINGS)
    batch(machine, set_shards(count))
    for group in groups:
        batch(machine, join("m-" + group, group))
    return machine


def streams(count: int, version: int = 1) -> tuple[str, ...]:
    return tuple(stream_key(PREFIX, version, i) for i in range(count))


# --- G2 / R2 from exact drain counts ---------------------------------------------------------


def test_g2_exact_drain_counts_name_the_blocker_and_drain_the_rest() -> None:
    machine = with_routing(2, "audit")
    batch(machine, set_shards(4, None))
    query = machine.drain_query()
    assert query is not None
    old = streams(2)
    counts = [DrainCount(old[0], GROUP, 0, 0), DrainCount(old[0], "audit", 0, 0),
              DrainCount(old[1], GROUP, 0, 0), DrainCount(old[1], "audit", 7, 2)]
    machine.drain_measured(drain_report(counts))
    assert machine.migration is not None and machine.migration.remaining == (old[1],)
    assert machine.blocking == (m.BlockingGroup(consumer_group="audit", undelivered=7, pending=2),)


# --- retention T1..T3 -------------------------------------------------------------------------


def set_retention(mode: RetentionMode, max_length: int | None = None,
                  max_age_ms: int | None = None) -> m.SetRetention:
    return m.SetRetention(request_id=6, stream_prefix=PREFIX, retention=m.Retention(
        mode=mode, max_length=max_length, max_age_ms=max_age_ms))


def test_new_prefixes_start_with_acked_and_no_caps() -> None:
    machine = with_routing(2)
    [answer], _ = batch(machine, describe())
    response = answer_of(machine, answer)
    assert isinstance(response, m.GroupDescription)
    assert response.retention == m.Retention(mode=RetentionMode.ACKED)


def test_set_retention_on_a_prefix_without_routing_is_unknown_stream() -> None:
    machine = PrefixMachine(PREFIX, SETTINGS)
    [answer], checkpoint = batch(machine, set_retention(RetentionMode.NONE))
    assert answer_of(machine, answer).status == Status.UNKNOWN_STREAM and checkpoint.empty


def test_t3_set_retention_replaces_the_whole_object_durably_and_tells_subscribers() -> None:
    machine = with_routing(2)
    batch(machine, set_retention(RetentionMode.ACKED, max_length=10, max_age_ms=60_000))
    answer = machine.handle(set_retention(RetentionMode.NONE, max_age_ms=5), 0)
    checkpoint = machine.checkpoint()
    assert checkpoint.changes.retention == RetentionRecord(mode=RetentionMode.NONE, max_age_ms=5)
    committed = machine.committed(checkpoint)
    assert committed.routing is not None
    assert committed.routing.retention == m.Retention(mode=RetentionMode.NONE, max_age_ms=5)
    response = answer_of(machine, answer)
    assert isinstance(response, m.RetentionChanged)
    assert response.retention == m.Retention(mode=RetentionMode.NONE, max_age_ms=5)


def test_t3_a_retention_write_that_failed_is_rolled_back() -> None:
    machine = with_routing(2)
    [answer], _ = batch(machine, set_retention(RetentionMode.NONE), durable=False)
    assert answer_of(machine, answer, durable=False).status == Status.COORDINATOR_NOT_AVAILABLE
    assert machine.retention == RetentionRecord()


def test_t1_t2_retention_runs_every_ten_ticks_on_the_live_shards() -> None:
    machine = with_routing(2)
    for tick in range(RETENTION_EVERY_TICKS - 1):
        machine.tick(tick)
        assert machine.retention_pass() is None
    machine.tick(RETENTION_EVERY_TICKS)
    assert machine.retention_pass() == RetentionPass(streams(2), (GROUP,), acked=True,
                                                     max_length=None, max_age_ms=None)
    assert machine.retention_pass() is None  # the next one is ten ticks away


def ten_ticks(machine: PrefixMachine) -> RetentionPass | None:
    for tick in range(RETENTION_EVERY_TICKS):
        machine.tick(tick)
    return machine.retention_pass()


def test_t3_none_asks_for_no_acked_trim_only_the_caps() -> None:
    machine = with_routing(2)
    batch(machine, set_retention(RetentionMode.NONE, max_length=100))
    assert ten_ticks(machine) == RetentionPass(streams(2), (GROUP,), acked=False,
                                               max_length=100, max_age_ms=None)


def test_t1_a_prefix_with_no_group_asks_for_no_acked_trim() -> None:
    machine = PrefixMachine(PREFIX, SETTINGS)
    batch(machine, set_shards(1, None))
    retention_pass = ten_ticks(machine)
    assert retention_pass is not None and not retention_pass.acked  # lengths are still measured
    assert ten_ticks(PrefixMachine(PREFIX, SETTINGS)) is None  # no routing, no shards


def test_retention_record_survives_write_and_replay() -> None:
    snapshot = PrefixSnapshot(retention=RetentionRecord(mode=RetentionMode.NONE, max_length=7))
    assert replay({k: v for k, v in encode(changes_of(snapshot)).items() if v}).retention == \
        snapshot.retention
    assert replay({}).retention == RetentionRecord()


# --- lag, overdue, storeId --------------------------------------------------------------------


def test_overdue_is_an_accepted_heartbeat_older_than_interval_and_a_half() -> None:
    assert not is_overdue(300, 200)
    assert is_overdue(301, 200)
    assert not is_overdue(None, 200)


def test_describe_shows_every_live_shard_with_owner_version_and_lag() -> None:
    machine = with_routing(2)
    batch(machine, join("a"), now=0)
    answers, _ = batch(machine, describe(), describe(), now=1000)
    answer = answers[0]
    assert machine.lag_reads() == (LagRead(GROUP, streams(2)),)  # one read for both describes
    lags = [ShardLag(streams(2)[0], 10, "1-0", 4, 2, 80), ShardLag(streams(2)[1], 0, "0-0", 0, 0, None)]
    machine.lag_measured(LagRead(GROUP, streams(2)), lags)
    response = answer_of(machine, answer)
    assert isinstance(response, m.GroupDescription)
    assert response.shards[0] == m.ShardDescription(
        shard=streams(2)[0], version=1, owner="a", length=10, last_delivered_id="1-0", lag=4,
        pending=2, oldest_pending_ms=80)
    assert response.shards[1].owner == "a" and response.shards[1].oldest_pending_ms is None
    assert [member.overdue for member in response.members] == [True]  # 1000 ms > 300 ms


def test_describe_of_old_and_new_versions_lists_old_shards_first_with_their_version() -> None:
    machine = with_routing(2)
    batch(machine, set_shards(3, None))
    [answer], _ = batch(machine, describe())
    [read] = machine.lag_reads()
    assert read.streams == streams(2) + streams(3, 2)
    machine.lag_measured(read, [ShardLag(s, 0, "0-0", 0, 0, None) for s in read.streams])
    response = answer_of(machine, answer)
    assert isinstance(response, m.GroupDescription)
    assert [shard.version for shard in response.shards] == [1, 1, 2, 2, 2]


def test_describe_without_lag_still_describes_the_group() -> None:
    machine = with_routing(2)
    [answer], _ = batch(machine, describe())
    machine.lag_reads()  # the read failed: nothing measured
    response = answer_of(machine, answer)
    assert isinstance(response, m.GroupDescription) and response.status == Status.OK
    assert response.shards == ()


def test_describe_of_an_unknown_group_reads_no_lag() -> None:
    machine = with_routing(2)
    [answer], _ = batch(machine, describe("ghost"))
    assert machine.lag_reads() == ()
    assert answer_of(machine, answer).status == Status.UNKNOWN_GROUP


def test_list_groups_sums_lag_and_pending() -> None:
    machine = with_routing(2, "audit")
    assert machine.totals_read() == TotalsRead((GROUP, "audit"), streams(2))
    summaries = machine.summaries({GROUP: GroupTotals(lag=5, pending=1),
                                   "audit": GroupTotals(lag=None, pending=0)})
    assert [(s.consumer_group, s.lag, s.pending) for s in summaries] == [
        ("audit", None, 0), (GROUP, 5, 1)]


def test_routing_answers_carry_the_store_id_and_retention() -> None:
    machine = with_routing(2)
    machine.store_id = "5f0c"
    [routing, joined], _ = batch(machine, m.GetRouting(request_id=7, stream_prefix=PREFIX),
                                 join("a"))
    response = answer_of(machine, routing)
    assert isinstance(response, m.Routing)
    assert response.store_id == "5f0c" and response.retention == m.Retention()
    heartbeat = answer_of(machine, joined)
    assert isinstance(heartbeat, m.HeartbeatResponse) and heartbeat.routing is not None
    assert heartbeat.routing.store_id == "5f0c" and heartbeat.routing.retention == m.Retention()


# --- watch ------------------------------------------------------------------------------------


def description(**changes: Any) -> m.GroupDescription:
    base = m.GroupDescription(
        request_id=5, status=Status.OK, stream_prefix=PREFIX, consumer_group=GROUP,
        members=(m.MemberDescription(member_id="a", member_epoch=1, state=MemberState.STABLE, capacity=1,
                                     last_heartbeat_ms_ago=10),),
        shards=(m.ShardDescription(shard="s", version=1, owner="a", length=3,
                                   last_delivered_id="1-0", lag=2, pending=1,
                                   oldest_pending_ms=40),))
    return attrs.evolve(base, **changes)


def test_watch_ignores_clock_fields_alone() -> None:
    ticking = description(
        members=(attrs.evolve(description().members[0], last_heartbeat_ms_ago=900),),
        shards=(attrs.evolve(description().shards[0], oldest_pending_ms=999),))
    assert significant(ticking) == significant(description())
    watch = Watch(describe(), description(), looked_at_ms=0)
    assert watch.offer(ticking, MIN_INTERVAL_MS) is None


def test_watch_pushes_any_other_change_without_request_id() -> None:
    watch = Watch(describe(), description(), looked_at_ms=0)
    changed = description(shards=(attrs.evolve(description().shards[0], lag=3),))
    push = watch.offer(changed, MIN_INTERVAL_MS)
    assert push is not None and push.request_id is None and push.shards[0].lag == 3
    assert watch.offer(changed, 2 * MIN_INTERVAL_MS) is None  # sent already


def test_watch_looks_at_most_ten_times_a_second() -> None:
    watch = Watch(describe(), description(), looked_at_ms=1000)
    watch.changed = True  # the machine changed the group (quiet ones: tests/test_watch_rules.py)
    assert not watch.due(1000 + MIN_INTERVAL_MS - 1)
    assert watch.due(1000 + MIN_INTERVAL_MS)
    assert MIN_INTERVAL_MS == 100


def test_watch_ends_with_unknown_group() -> None:
    watch = Watch(describe(), description(), looked_at_ms=0)
    gone = describe().unknown_group()
    assert isinstance(gone, m.GroupDescription)
    push = watch.offer(gone, MIN_INTERVAL_MS)
    assert push is not None and push.status == Status.UNKNOWN_GROUP and watch.over
