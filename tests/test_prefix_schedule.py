"""The coordinator-wide schedule of prefix wakes (actors/core/prefix_schedule.py), with a fake clock."""

from __future__ import annotations

import pytest

from rsc.actors.core.prefix_retention import RETENTION_EVERY_TICKS
from rsc.actors.core.prefix_schedule import Activity, Schedule, Wake
from rsc.protocol import messages as m
from rsc.protocol.vocabulary import RetentionMode
from tests.prefix_driver import PREFIX, Driver, heartbeat, set_shards

TICK = 100
PERIOD = 10 * TICK

IDLE = Activity(routed=True)
LIVE = Activity(routed=True, live=True)
CHANGED = Activity(routed=True, changed=True)
CAPPED = Activity(routed=True, caps=True)


def run(schedule: Schedule, start: int, ticks: int) -> list[tuple[int, Wake]]:
    """Call `due` on every tick from `start` (exclusive) for `ticks` ticks; every wake with its time."""
    woken: list[tuple[int, Wake]] = []
    for n in range(1, ticks + 1):
        now = start + n * TICK
        woken.extend((now, wake) for wake in schedule.due(now))
    return woken


def passes(woken: list[tuple[int, Wake]], prefix: str = "p") -> list[int]:
    return [now for now, wake in woken if wake.prefix == prefix and wake.retention]


def test_idle_prefix_is_never_woken():
    schedule = Schedule(TICK)
    schedule.report("p", IDLE, 0)
    assert run(schedule, 0, 100) == []
    assert schedule.waiting() == 0


def test_t1_a_changed_prefix_gets_one_pass_within_ten_ticks_then_none():
    schedule = Schedule(TICK)
    schedule.report("p", CHANGED, 0)
    woken = run(schedule, 0, 40)
    assert passes(woken) == [PERIOD]
    assert [wake for _, wake in woken] == [Wake("p", retention=True)]  # no tick beside the pass
    schedule.report("p", IDLE, PERIOD)  # the batch of that pass changed nothing
    assert run(schedule, PERIOD, 40) == []


def test_t1_a_prefix_with_live_members_gets_a_pass_at_least_every_ten_ticks():
    schedule = Schedule(TICK)
    schedule.report("p", LIVE, 0)
    now = 0
    pass_times = []
    for _ in range(50):
        now += TICK
        for wake in schedule.due(now):
            schedule.report(wake.prefix, LIVE, now)  # each woken batch reports again
            if wake.retention:
                pass_times.append(now)
    assert pass_times, "a live prefix must be trimmed"
    gaps = [b - a for a, b in zip([0, *pass_times], pass_times, strict=False)]
    assert max(gaps) <= PERIOD


def test_t1_a_change_brings_the_pass_forward_never_back():
    schedule = Schedule(TICK)
    schedule.report("p", CHANGED, 0)
    schedule.report("p", CHANGED, 5 * TICK)  # a later change does not push the pass later
    assert schedule.pass_due_ms("p") == PERIOD


def test_t1_no_routing_no_pass():
    schedule = Schedule(TICK)
    schedule.report("p", Activity(changed=True), 0)
    assert run(schedule, 0, 30) == []


def test_t2_caps_get_a_pass_every_ten_ticks_without_any_change():
    schedule = Schedule(TICK)
    schedule.report("p", CAPPED, 0)
    woken = run(schedule, 0, 35)
    assert passes(woken) == [PERIOD, 2 * PERIOD, 3 * PERIOD]
    assert all(wake.retention for _, wake in woken)  # woken only for the passes


def test_t2_caps_keep_their_period_when_the_batches_report_again():
    schedule = Schedule(TICK)
    schedule.report("p", CAPPED, 0)
    now = 0
    pass_times = []
    for _ in range(35):
        now += TICK
        for wake in schedule.due(now):
            schedule.report(wake.prefix, CAPPED, now)
            pass_times.append(now)
    assert pass_times == [PERIOD, 2 * PERIOD, 3 * PERIOD]


def test_r2_a_migrating_prefix_is_woken_every_tick():
    schedule = Schedule(TICK)
    schedule.report("p", Activity(routed=True, migrating=True), 0)
    woken = run(schedule, 0, 5)
    assert [now for now, _ in woken] == [TICK * n for n in range(1, 6)]


def test_r2_the_wakes_stop_once_the_migration_is_retired():
    schedule = Schedule(TICK)
    schedule.report("p", Activity(routed=True, migrating=True), 0)
    run(schedule, 0, 2)
    schedule.report("p", IDLE, 2 * TICK)
    assert run(schedule, 2 * TICK, 30) == []


def test_h6_a_prefix_with_live_members_is_woken_every_tick():
    schedule = Schedule(TICK)
    schedule.report("p", LIVE, 0)
    woken = run(schedule, 0, 5)
    assert [now for now, _ in woken] == [TICK * n for n in range(1, 6)]


def test_d4_a_repair_wakes_the_prefix_until_it_is_done():
    schedule = Schedule(TICK)
    schedule.report("p", Activity(routed=True, repairing=True), 0)
    assert [w.prefix for w in schedule.due(TICK)] == ["p"]
    schedule.report("p", IDLE, TICK)
    assert run(schedule, TICK, 5) == []


def test_watched_prefix_is_woken_every_tick():
    schedule = Schedule(TICK)
    schedule.report("p", Activity(watched=True), 0)
    assert len(run(schedule, 0, 3)) == 3


def test_the_budget_wakes_the_oldest_due_first_and_keeps_the_rest():
    schedule = Schedule(TICK, budget=2)
    for index, prefix in enumerate("abcde"):
        schedule.report(prefix, CHANGED, index)  # due at PERIOD + index: a first
    first = schedule.due(PERIOD + 10)
    assert [w.prefix for w in first] == ["a", "b"]
    assert [w.prefix for w in schedule.due(PERIOD + 10 + TICK)] == ["c", "d"]
    schedule.report("f", CHANGED, -PERIOD)  # due long ago: older than e
    assert [w.prefix for w in schedule.due(PERIOD + 10 + 2 * TICK)] == ["f", "e"]
    assert all(w.retention for w in first)


def test_a_forgotten_prefix_is_not_woken():
    schedule = Schedule(TICK)
    schedule.report("p", LIVE, 0)
    schedule.forget("p")
    assert run(schedule, 0, 5) == [] and len(schedule) == 0


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="tick_ms"):
        Schedule(0)


# --- how a prefix learns it changed: PrefixMachine.activity after a batch -------------------


def test_t1_a_batch_that_wrote_the_prefix_records_reports_changed():
    driver = Driver()
    driver.batch([set_shards(2)])
    activity = driver.machine.activity()
    assert activity.changed and activity.routed and not activity.live
    driver.batch([])  # a tick's batch that writes nothing
    activity = driver.machine.activity()
    assert not activity.changed and not activity.every_tick and not activity.caps


def test_h6_a_prefix_with_a_member_reports_live_until_the_member_leaves():
    driver = Driver()
    driver.batch([set_shards(2), heartbeat("a", 0)])
    assert driver.machine.activity().live
    driver.batch([heartbeat("a", -1)])
    activity = driver.machine.activity()
    assert not activity.live and activity.changed  # T1: one more pass after the last acks


def test_t2_caps_are_reported():
    driver = Driver()
    driver.batch([set_shards(1)])
    driver.batch([m.SetRetention(request_id=0, stream_prefix=PREFIX,
                                 retention=m.Retention(mode=RetentionMode.ACKED, max_length=5))])
    assert driver.machine.activity().caps


def test_r2_a_migration_is_reported_until_it_is_retired():
    driver = Driver()
    driver.batch([set_shards(1)])
    driver.batch([set_shards(2)])
    assert driver.machine.activity().migrating


def test_t1_the_schedule_decides_the_pass_when_it_says_so():
    driver = Driver()
    driver.batch([set_shards(1)])
    machine = driver.machine
    machine.tick(0, retention=False)
    assert machine.retention_pass() is None
    machine.tick(0, retention=True)
    assert machine.retention_pass() is not None
    for _ in range(RETENTION_EVERY_TICKS):  # without a schedule: every ten ticks, as before
        assert machine.retention_pass() is None
        machine.tick(0)
    assert machine.retention_pass() is not None
