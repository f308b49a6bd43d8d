"""D7, the coordinator's side: `rsc_group_unowned_shards` counts the shards of a group's target
that nobody has held for longer than one lease TTL while the group has live members, leaving
out the target of AWAY static members (S2) and a v+1 held back for an `ordered` cutover (R3).

Pure: the group machine with `now_ms` passed in.
"""

from __future__ import annotations

from rsc.actors.core.group import GroupMachine
from rsc.protocol.vocabulary import TEMPORARY_LEAVE_EPOCH
from tests.helpers.groups import GROUP, PREFIX, report, send, target_of
from tests.test_group_rules import LEASE, SETTINGS, SHARDS, a_holds_all_then_b_joins, join, stable_group


def test_d7_a_stable_group_has_no_unowned_shards_however_long_it_runs():
    group = stable_group("a", "b")
    for now in (0, LEASE, 10 * LEASE):
        group.tick(now)
        assert group.unowned_shards(now) == 0


def test_d7_a_freed_shard_nobody_takes_counts_once_it_was_free_for_a_lease():
    group, _kept, moving = a_holds_all_then_b_joins()
    report(group, "a", now=100)  # asked to revoke what moves to b
    report(group, "a", now=100)  # drained and released; b does not heartbeat
    assert not moving & set(group.owners)
    group.tick(100)
    assert group.unowned_shards(100 + LEASE) == 0  # exactly a lease: not longer than one
    assert group.unowned_shards(101 + LEASE) == len(moving)
    epoch = group.members["b"].member_epoch
    send(group, "b", epoch, now=101 + LEASE, owned=())  # b takes them
    assert group.unowned_shards(102 + LEASE) == 0


def test_d7_shards_free_from_the_start_count_from_when_the_coordinator_first_saw_them():
    group = GroupMachine(PREFIX, GROUP, SETTINGS, tuple(SHARDS))
    join(group, "a", now=0)  # a is assigned everything at once: nothing is free
    group.set_shards((*SHARDS, f"{PREFIX}:v1:9"))  # one more assignable shard (a reshard)
    group.tick(1_000)
    assert group.unowned_shards(1_000 + LEASE) == 0
    assert group.unowned_shards(1_001 + LEASE) == 1


def test_d7_an_away_static_members_target_is_not_unowned():
    group = GroupMachine(PREFIX, GROUP, SETTINGS, tuple(SHARDS))
    for member_id, instance in (("a", "pod-0"), ("b", "pod-1")):
        group.heartbeat(_join(member_id, instance), 0, None)
    for _ in range(3):
        for member_id in ("a", "b"):
            report(group, member_id)
    mine = target_of(group, "b")
    away = group.heartbeat(_leave_for_a_while("b"), 10, None)
    assert away.member_epoch == TEMPORARY_LEAVE_EPOCH and group.members["b"].away
    assert not mine & set(group.owners)
    group.tick(10)
    assert group.unowned_shards(10 * LEASE) == 0


def test_d7_a_group_without_live_members_counts_nothing():
    group = GroupMachine(PREFIX, GROUP, SETTINGS, tuple(SHARDS))
    group.tick(0)
    assert group.unowned_shards(10 * LEASE) == 0
    group.heartbeat(_join("a", "pod-0"), 0, None)
    group.heartbeat(_leave_for_a_while("a"), 1, None)  # the only member is AWAY
    assert group.unowned_shards(10 * LEASE) == 0


def _join(member_id: str, instance: str):
    from rsc.protocol import messages as m

    return m.Heartbeat(request_id=1, stream_prefix=PREFIX, consumer_group=GROUP,
                       member_id=member_id, member_epoch=0, owned_shards=(), instance_id=instance)


def _leave_for_a_while(member_id: str):
    from rsc.protocol import messages as m

    return m.Heartbeat(request_id=1, stream_prefix=PREFIX, consumer_group=GROUP,
                       member_id=member_id, member_epoch=TEMPORARY_LEAVE_EPOCH, owned_shards=())
