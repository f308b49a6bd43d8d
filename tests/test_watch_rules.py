"""Pure: when a describeGroup watch looks (actors/core/watch.py) and which groups the prefix machine
says a batch changed (PrefixMachine.described). No I/O, no trio."""

from __future__ import annotations

from rsc.actors.core.watch import MIN_INTERVAL_MS, REFRESH_MS, Watch
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from tests.prefix_driver import GROUP, PREFIX, Driver, delete_group, describe, ok, set_shards

WATCH = m.DescribeGroup(request_id=9, stream_prefix=PREFIX, consumer_group=GROUP, watch=True)
ANSWER = m.GroupDescription(request_id=9, status=Status.OK, stream_prefix=PREFIX,
                            consumer_group=GROUP)


def test_a_quiet_watch_looks_only_every_refresh_interval():
    watch = Watch(WATCH, ANSWER, looked_at_ms=0)
    assert not watch.due(MIN_INTERVAL_MS) and not watch.due(REFRESH_MS - 1)
    assert watch.due(REFRESH_MS)


def test_a_changed_watch_looks_after_the_minimum_interval_and_the_look_clears_it():
    watch = Watch(WATCH, ANSWER, looked_at_ms=0)
    watch.changed = True
    assert not watch.due(MIN_INTERVAL_MS - 1) and watch.due(MIN_INTERVAL_MS)
    assert watch.offer(ANSWER, MIN_INTERVAL_MS) is None  # nothing differs: no push
    assert not watch.changed and not watch.due(2 * MIN_INTERVAL_MS)


def test_machine_names_the_groups_a_batch_changed_and_nothing_for_a_quiet_heartbeat():
    driver = Driver()
    machine = driver.machine
    ok(driver.one(set_shards(2)))
    machine.described.take()
    driver.join("a")
    assert machine.described.take() == (False, frozenset({GROUP}))
    driver.settle()
    machine.described.take()
    driver.report("a")  # a heartbeat that changes nothing
    driver.one(describe())
    assert machine.described.take() == (False, frozenset())
    driver.join("x", group="audit")
    assert machine.described.take() == (False, frozenset({"audit"}))


def test_machine_says_every_group_on_a_reshard_or_a_rollback_and_names_a_deleted_group():
    driver = Driver()
    machine = driver.machine
    ok(driver.one(set_shards(2)))
    driver.join("a")
    driver.settle()
    machine.described.take()
    ok(driver.one(set_shards(4)))
    assert machine.described.take()[0] is True
    driver.join("b", durable=False)
    assert machine.described.take()[0] is True  # back to what Redis holds
    driver.join("x", group="audit")
    driver.one(m.RemoveMember(request_id=1, stream_prefix=PREFIX, consumer_group="audit",
                              member_id="x"))
    machine.described.take()
    ok(driver.one(delete_group("audit")))
    assert "audit" in machine.described.take()[1]
