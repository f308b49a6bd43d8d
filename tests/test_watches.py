"""describeGroup watches, pure (PROTOCOL.md Admin): change detection, the 10/s limit, the end.

No I/O and no trio: `Watches` takes `now_ms`, sessions are plain strings, and the
prefix machine is driven by tests/prefix_driver.py.
"""

from __future__ import annotations

import attrs

from rsc.actors.watches import INTERVAL_MS, MAX_PER_SECOND, Watches, signature
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import GroupState, MemberState
from tests.prefix_driver import GROUP, PREFIX, Driver, delete_group, describe, ok, set_shards

WATCH = m.DescribeGroup(request_id=9, stream_prefix=PREFIX, consumer_group=GROUP, watch=True)


def member(member_id: str, ago: int = 0, epoch: int = 1) -> m.MemberDescription:
    return m.MemberDescription(member_id=member_id, member_epoch=epoch, state=MemberState.STABLE,
                               capacity=None, last_heartbeat_ms_ago=ago, assigned_shards=(),
                               pending_shards=(), revoking_shards=(), target_shards=())


def description(*members: m.MemberDescription, epoch: int = 1, group: str = GROUP,
                request_id: int | None = 9) -> m.GroupDescription:
    return m.GroupDescription(request_id=request_id, status=Status.OK, stream_prefix=PREFIX,
                              consumer_group=group, state=GroupState.STABLE, group_epoch=epoch,
                              members=members)


def watching(session: str = "s1", answer: m.GroupDescription | None = None,
             now: int = 0) -> Watches[str]:
    watches: Watches[str] = Watches()
    watches.add(session, WATCH, answer or description(member("a")), now)
    return watches


def look(watches: Watches[str], now: int,
         current: m.GroupDescription) -> list[tuple[str, m.GroupDescription]]:
    pushes = []
    for session, watch in watches.due(now):
        push = watches.offer(session, watch, current, now)
        if push is not None:
            pushes.append((session, push))
    return pushes


def test_a_change_is_pushed_once_without_request_id():
    watches = watching()
    changed = description(member("a"), member("b"), epoch=2)
    watches.changed([GROUP])
    assert watches.due(INTERVAL_MS - 1) == []  # the answer itself was the first send
    assert look(watches, INTERVAL_MS, changed) == [("s1", attrs.evolve(changed, request_id=None))]
    watches.changed([GROUP])  # the same description again: nothing to push
    assert look(watches, 2 * INTERVAL_MS, changed) == []


def test_clocks_alone_are_no_change_but_any_other_field_is():
    watches = watching()
    watches.changed([GROUP])
    assert look(watches, 1000, description(member("a", ago=450), request_id=None)) == []
    watches.changed([GROUP])
    pushed = look(watches, 2000, description(member("a", ago=10, epoch=2)))
    assert [push.members[0].member_epoch for _, push in pushed] == [2]
    assert signature(description(member("a", ago=1))) == signature(
        description(member("a", ago=99), request_id=None))


def test_unchanged_or_unwatched_groups_are_never_described():
    watches = watching()
    assert watches.due(10_000) == [] and watches.next_due_ms() is None
    watches.changed(["audit", "other"])  # groups nobody watches
    assert watches.due(10_000) == [] and watches.next_due_ms() is None
    watches.changed([GROUP])
    assert watches.next_due_ms() == INTERVAL_MS
    assert [watch.group for _, watch in watches.due(10_000)] == [GROUP]


def test_a_burst_is_pushed_at_most_ten_times_a_second_and_the_latest_state_wins():
    watches = watching()
    pushes: list[m.GroupDescription] = []
    epoch = 1
    for now in range(0, 1000, 5):  # a change every 5 ms, and a look whenever one is allowed
        epoch += 1
        watches.changed([GROUP])
        pushes.extend(push for _, push in look(watches, now, description(epoch=epoch)))
    due = watches.next_due_ms()
    assert due is not None and due <= 1000 + INTERVAL_MS  # the last change is still to come
    pushes.extend(push for _, push in look(watches, due, description(epoch=epoch)))
    assert len(pushes) <= MAX_PER_SECOND + 1
    assert all(later.group_epoch > earlier.group_epoch  # type: ignore[operator]
               for earlier, later in zip(pushes, pushes[1:], strict=False))
    assert pushes[-1].group_epoch == epoch
    assert watches.next_due_ms() is None


def test_unknown_group_is_the_last_push():
    watches = watching()
    gone = WATCH.unknown_group()
    watches.changed([GROUP])
    assert look(watches, 1000, gone) == [("s1", attrs.evolve(gone, request_id=None))]
    assert len(watches) == 0 and not watches.watched(GROUP)
    watches.changed([GROUP])
    assert watches.due(5000) == []


def test_watches_go_with_their_session_and_a_second_watch_replaces_the_first():
    watches = watching("s1")
    watches.add("s2", WATCH, description(member("a")), 0)
    watches.add("s2", WATCH, description(member("a")), 0)
    assert len(watches) == 2
    watches.changed([GROUP])
    watches.forget("s1")
    assert [session for session, _ in watches.due(1000)] == ["s2"]
    watches.forget("s2")
    assert len(watches) == 0 and not watches and watches.next_due_ms() is None


def test_carried_watches_look_again():
    old = watching("s1")
    new: Watches[str] = Watches()
    new.carry(old)
    assert [session for session, _ in new.due(1000)] == ["s1"]


# --- what the prefix machine says changed --------------------------------------------------


def test_machine_names_the_groups_a_batch_changed_and_nothing_for_a_quiet_heartbeat():
    driver = Driver()
    machine = driver.machine
    ok(driver.one(set_shards(2)))
    machine.take_described()
    driver.join("a")
    assert machine.take_described() == (False, frozenset({GROUP}))
    driver.settle()
    machine.take_described()
    driver.report("a")  # a heartbeat that changes nothing
    driver.one(describe())
    assert machine.take_described() == (False, frozenset())
    driver.join("x", group="audit")
    assert machine.take_described() == (False, frozenset({"audit"}))


def test_machine_says_every_group_on_a_reshard_or_a_rollback_and_names_a_deleted_group():
    driver = Driver()
    machine = driver.machine
    ok(driver.one(set_shards(2)))
    driver.join("a")
    driver.settle()
    machine.take_described()
    ok(driver.one(set_shards(4)))
    assert machine.take_described()[0] is True
    driver.join("b", durable=False)
    assert machine.take_described()[0] is True  # back to what Redis holds
    driver.join("x", group="audit")
    driver.one(m.RemoveMember(request_id=1, stream_prefix=PREFIX, consumer_group="audit",
                              member_id="x"))
    machine.take_described()
    ok(driver.one(delete_group("audit")))
    assert "audit" in machine.take_described()[1]
