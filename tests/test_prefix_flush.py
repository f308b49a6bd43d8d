"""Named rule tests of the prefix machine's batch loop (`PrefixMachine.flush`): the order of its
I/O requests, what a failed or stalled one means (D4, H12), the T1 wait, and the decisions the
shell only carries out (push targets, watches, a retired migration). Pure: tests/prefix_driver.py
answers every I/O request as Redis would."""

from __future__ import annotations

from rsc.actors.core.prefix import PrefixMachine
from rsc.actors.core.prefix_io import (
    AwaitRetention,
    Checkpoint,
    Deliver,
    DestroyConsumerGroups,
    DrainQuery,
    LagRead,
    MoveOffsets,
    Outcome,
    RetentionPass,
)
from rsc.actors.core.prefix_retention import RETENTION_EVERY_TICKS
from rsc.actors.core.shard_reports import ShardLag
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import LEAVE_EPOCH, MigrationState
from tests.prefix_driver import (
    GROUP,
    Driver,
    delete_group,
    describe,
    heartbeat,
    ok,
    reset_offsets,
    set_shards,
    streams,
)


def kinds(driver: Driver) -> list[type]:
    return [type(step) for step in driver.steps]


def migrating(driver: Driver) -> None:
    """Routing v1 of two shards, member a settled, then v2: v1 drains."""
    ok(driver.one(set_shards(2)))
    ok(driver.join("a"))
    driver.settle()
    ok(driver.one(set_shards(3)))
    assert driver.machine.migration is not None


def test_h12_the_batch_order_is_drain_wait_write_moves_cleanup_lag_deliver_then_retention():
    driver = Driver()
    migrating(driver)
    for _ in range(RETENTION_EVERY_TICKS - 1):
        driver.machine.tick(driver.now)
    driver.machine.retention_started()  # a pass runs beside the batches (T1: the wait)
    # one batch with everything: a drain check is due (tick), a new group (create), a describe
    # (lag), and the tenth tick (retention, once the wait saw the running pass end)
    driver.batch([heartbeat("x", 0, owned=(), group="audit"), describe()], tick=True,
                 report={stream: {GROUP: (1, 0), "audit": (1, 0)} for stream in streams(1, 2)},
                 lags={GROUP: []})
    assert kinds(driver) == [DrainQuery, AwaitRetention, Checkpoint, LagRead, Deliver,
                             RetentionPass]


def test_g1_g3_moves_and_cleanup_follow_the_checkpoint_that_landed():
    driver = Driver()
    ok(driver.one(set_shards(2)))
    ok(driver.join("a"))
    ok(driver.one(heartbeat("a", LEAVE_EPOCH)))
    driver.machine.retention_started()
    batch = driver.batch([reset_offsets(), delete_group()])
    assert kinds(driver) == [AwaitRetention, Checkpoint, MoveOffsets, DestroyConsumerGroups,
                             Deliver]
    assert [response.status for response in batch.responses] == [Status.OK, Status.OK]


def test_g1_g3_a_failed_checkpoint_moves_nothing_and_drops_no_consumer_group():
    driver = Driver()
    ok(driver.one(set_shards(2)))
    ok(driver.join("a"))
    ok(driver.one(heartbeat("a", LEAVE_EPOCH)))
    batch = driver.batch([reset_offsets(), delete_group()], durable=False)
    assert MoveOffsets not in kinds(driver) and DestroyConsumerGroups not in kinds(driver)
    assert [response.status for response in batch.responses] == [
        Status.COORDINATOR_NOT_AVAILABLE, Status.COORDINATOR_NOT_AVAILABLE]
    assert GROUP in driver.machine.groups  # rolled back: still there


def test_d4_a_stalled_drain_count_fails_the_batch_without_writing():
    driver = Driver()
    migrating(driver)
    batch = driver.batch([heartbeat("b", 0, owned=())], tick=True, stalled=True)
    assert kinds(driver) == [DrainQuery, Deliver]  # the store is stalled: no write is sent
    assert batch.responses[0].status == Status.COORDINATOR_NOT_AVAILABLE
    assert batch.committed is None and "b" not in driver.machine.groups[GROUP].members


def test_d4_r2_a_drain_count_that_failed_otherwise_only_delays_the_drain():
    driver = Driver()
    migrating(driver)
    batch = driver.batch([heartbeat("b", 0, owned=())], tick=True)  # the count fails, not stalled
    assert kinds(driver) == [DrainQuery, Checkpoint, Deliver]
    assert batch.responses[0].status == Status.OK and batch.committed is not None
    migration = driver.machine.migration
    assert migration is not None and migration.state == MigrationState.DRAINING
    assert not migration.drained  # measured again with the next tick
    driver.tick(drained=streams(1, 2))
    assert driver.machine.migration is not None
    assert driver.machine.migration.state == MigrationState.COMPLETE


def test_t1_a_checkpoint_that_creates_consumer_groups_waits_for_the_running_pass():
    driver = Driver()
    ok(driver.one(set_shards(2)))
    driver.machine.retention_started()
    ok(driver.join("x", group="audit"))  # a new group: its consumer groups start at id 0
    assert kinds(driver) == [AwaitRetention, Checkpoint, Deliver]
    ok(driver.join("y", group="search"))  # the wait saw it end: no pass runs, none is waited for
    assert kinds(driver) == [Checkpoint, Deliver]


def test_t1_a_checkpoint_that_moves_offsets_waits_for_the_running_pass():
    driver = Driver()
    ok(driver.one(set_shards(2)))
    driver.machine.retention_started()
    driver.one(reset_offsets())
    assert kinds(driver)[:2] == [AwaitRetention, Checkpoint]


def test_t1_a_checkpoint_that_neither_creates_nor_moves_does_not_wait():
    driver = Driver()
    ok(driver.one(set_shards(2)))
    a = ok(driver.join("a"))
    assert isinstance(a, m.HeartbeatResponse)
    ok(driver.one(m.SetMaxConcurrency(request_id=1, stream_prefix="orders", consumer_group=GROUP,
                                      max_concurrency=3)))
    assert kinds(driver) == [Checkpoint, Deliver]
    driver.batch([])  # nothing to write: nothing is waited for or written
    assert kinds(driver) == [Deliver]


def test_t1_d4_a_pass_that_still_runs_at_the_deadline_fails_the_write():
    driver = Driver()
    ok(driver.one(set_shards(2)))
    driver.retention_running = True
    batch = driver.batch([heartbeat("x", 0, owned=(), group="audit")])
    assert kinds(driver) == [AwaitRetention, Deliver]  # the write is never sent
    assert batch.responses[0].status == Status.COORDINATOR_NOT_AVAILABLE
    assert "audit" not in driver.machine.groups  # rolled back
    driver.retention_running = False
    ok(driver.join("x", group="audit"))


def test_h12_deliver_carries_what_committed_and_nothing_when_the_write_failed():
    driver = Driver()
    ok(driver.one(set_shards(2)))
    landed = driver.batch([heartbeat("a", 0, owned=())])
    assert landed.committed is not None and landed.committed.groups == (GROUP,)
    failed = driver.batch([heartbeat("b", 0, owned=())], durable=False)
    assert failed.committed is None


def test_describe_lag_is_read_after_the_checkpoint_and_shown_in_the_answer():
    driver = Driver()
    ok(driver.one(set_shards(1)))
    ok(driver.join("a"))
    (shard,) = streams(1, 1)
    batch = driver.batch([describe()], lags={GROUP: [ShardLag(shard, 5, "1-0", 2, 1, 30)]})
    assert kinds(driver) == [LagRead, Deliver]
    description = batch.responses[0]
    assert isinstance(description, m.GroupDescription)
    assert [(s.shard, s.lag, s.pending) for s in description.shards] == [(shard, 2, 1)]


def test_h10_a_heartbeat_makes_its_session_the_push_target_and_a_leave_forgets_it():
    assert PrefixMachine.pushes_to_session(heartbeat("a", 0, owned=()))
    assert PrefixMachine.pushes_to_session(heartbeat("a", 7))
    assert not PrefixMachine.pushes_to_session(heartbeat("a", LEAVE_EPOCH))


def test_a_watch_starts_only_from_a_describe_with_watch_answered_ok():
    watch = m.DescribeGroup(request_id=1, stream_prefix="orders", consumer_group=GROUP, watch=True)
    plain = m.DescribeGroup(request_id=1, stream_prefix="orders", consumer_group=GROUP)
    described = m.GroupDescription(request_id=1, status=Status.OK, stream_prefix="orders",
                                   consumer_group=GROUP)
    assert PrefixMachine.starts_watch(watch, described)
    assert not PrefixMachine.starts_watch(plain, described)
    assert not PrefixMachine.starts_watch(watch, watch.unknown_group())
    assert not PrefixMachine.starts_watch(
        watch, watch.error(Status.COORDINATOR_NOT_AVAILABLE, "the store is down"))


def test_r4_a_retired_migration_is_said_by_what_committed():
    driver = Driver()
    migrating(driver)
    driver.tick(drained=streams(1, 2))
    driver.settle()
    retired = [driver.tick() for _ in range(3)]
    assert driver.machine.migration is None
    flags = [batch.committed.migration_retired for batch in retired if batch.committed]
    assert flags.count(True) == 1


# --- T1: one retention pass at a time --------------------------------------------------------


def pass_due(driver: Driver) -> None:
    for _ in range(RETENTION_EVERY_TICKS - 1):
        driver.machine.tick(driver.now)


def test_t1_a_pass_due_while_the_last_one_runs_beside_is_held_until_it_is_over():
    driver = Driver()
    driver.passes_beside = True
    ok(driver.one(set_shards(2)))
    pass_due(driver)
    driver.tick()
    assert kinds(driver)[-1] is RetentionPass  # it runs beside the batches now
    pass_due(driver)
    driver.tick()
    assert RetentionPass not in kinds(driver)  # due, but the last one still runs: held
    assert driver.machine.activity().changed  # T1: the schedule brings it back
    driver.batch([])
    assert RetentionPass not in kinds(driver)
    driver.machine.retention_finished()
    driver.batch([])  # the held pass goes at once, without waiting for ten more ticks
    assert kinds(driver) == [Deliver, RetentionPass]
    driver.passes_beside = False
    driver.batch([])
    assert kinds(driver) == [Deliver]


def test_t1_a_checkpoint_waits_only_while_a_pass_runs():
    driver = Driver()
    driver.passes_beside = True
    ok(driver.one(set_shards(2)))
    pass_due(driver)
    driver.tick()  # a pass starts beside the batches
    ok(driver.join("x", group="audit"))
    assert kinds(driver) == [AwaitRetention, Checkpoint, Deliver]
    ok(driver.join("y", group="search"))
    assert kinds(driver) == [Checkpoint, Deliver]


# --- D4: the gate of an abandoned call ------------------------------------------------------


def test_d4_nothing_is_sent_for_the_prefix_while_an_abandoned_call_runs():
    driver = Driver()
    ok(driver.one(set_shards(2)))
    ok(driver.join("a"))
    driver.machine.call_abandoned("drain check")
    assert not driver.machine.store_open
    refused = driver.batch([heartbeat("b", 0, owned=())])
    assert kinds(driver) == [Deliver]  # the write is never sent
    assert refused.responses[0].status == Status.COORDINATOR_NOT_AVAILABLE
    answered = driver.batch([m.GetRouting(request_id=5, stream_prefix="orders"), describe()],
                            lags={GROUP: []})
    assert kinds(driver) == [Deliver]  # no lag read either: the describe shows no shards
    assert [r.status for r in answered.responses] == [Status.OK, Status.OK]
    assert driver.machine.activity().repairing  # woken every tick until the call returns
    assert not driver.machine.abandoned_call_returned(landed=True, now_ms=driver.now)
    assert driver.machine.store_open
    ok(driver.join("b"))
    assert kinds(driver) == [Checkpoint, Deliver]


def test_d4_a_late_write_that_landed_is_adopted_not_reverted():
    driver = Driver()
    ok(driver.one(set_shards(2)))
    driver.abandon = Checkpoint
    refused = driver.batch([heartbeat("a", 0, owned=())])
    assert refused.responses[0].status == Status.COORDINATOR_NOT_AVAILABLE
    assert "a" not in driver.machine.groups[GROUP].members  # rolled back meanwhile
    driver.abandon = None
    assert driver.machine.abandoned_call_returned(landed=True, now_ms=driver.now)
    assert "a" in driver.machine.groups[GROUP].members  # Redis holds it: memory takes it
    written = driver.batch([]).checkpoint  # the repair writes memory's values: the same
    assert (GROUP, "a") in written.changes.members
    assert written.changes.members[(GROUP, "a")] is not None


def test_d4_a_late_write_that_did_not_land_is_written_again_by_the_next_checkpoint():
    driver = Driver()
    ok(driver.one(set_shards(2)))
    driver.abandon = Checkpoint
    driver.batch([heartbeat("a", 0, owned=())])
    driver.abandon = None
    assert not driver.machine.abandoned_call_returned(landed=False, now_ms=driver.now)
    assert driver.machine.repair_pending and "a" not in driver.machine.groups[GROUP].members
    driver.batch([])
    assert kinds(driver) == [Checkpoint, Deliver]
    assert not driver.machine.repair_pending


def test_t1_d4_a_pass_not_sent_while_the_store_is_stalled_is_held():
    driver = Driver()
    ok(driver.one(set_shards(2)))
    pass_due(driver)
    driver.machine.call_abandoned("drain check")
    driver.tick()
    assert kinds(driver) == [Deliver]
    driver.machine.abandoned_call_returned(landed=False, now_ms=driver.now)
    driver.batch([])
    assert kinds(driver) == [Deliver, RetentionPass]


def test_d4_a_watch_or_expiry_lag_read_is_an_io_request_through_the_same_gate():
    driver = Driver()
    ok(driver.one(set_shards(2)))
    ok(driver.join("a"))
    reads = driver.machine.lag_read(GROUP, driver.now)
    assert next(reads) == LagRead(GROUP, driver.machine.live_streams())
    lags: list[ShardLag] = []
    try:
        reads.send(Outcome(lags))
        raise AssertionError("one read, then the lags")
    except StopIteration as done:
        assert done.value is lags
    failed = driver.machine.lag_read(GROUP, driver.now)
    next(failed)
    try:
        failed.send(Outcome(error="the shards could not be read"))
    except StopIteration as done:
        assert done.value is None
    driver.machine.call_abandoned("drain check")
    gated = driver.machine.lag_read(GROUP, driver.now)
    try:
        next(gated)
        raise AssertionError("a lag read was sent while an abandoned call runs")
    except StopIteration as done:
        assert done.value is None
