"""Pure tests of static membership in the group machine: one named test (or more) per rule S1..S6,
and the H1/H4/H6 variants for static members.

Driven synchronously like tests/test_group_rules.py: `now_ms` is passed in, and a rejected event
must leave the persisted state, the leases and the effects unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable

from rsc.actors.core.group import GroupMachine, GroupSettings, malformed_join
from rsc.actors.core.records import MemberRecord, PrefixSnapshot, changes_of, encode, member_value, replay
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    TEMPORARY_LEAVE_EPOCH,
    GroupState,
    MemberState,
)
from tests.helpers.groups import (
    GROUP,
    PREFIX,
    assigned,
    heartbeat,
    report,
    send,
    settle,
    target_of,
    unchanged_by,
)

SESSION = 45_000
SETTINGS = GroupSettings(heartbeat_interval_ms=3000, lease_ttl_ms=10_000, revoke_timeout_ms=60_000,
                         static_session_timeout_ms=SESSION)
LEASE = SETTINGS.lease_ttl_ms
SHARDS = [f"{PREFIX}:v1:{index}" for index in range(6)]


def new_group(shards: Iterable[str] = SHARDS) -> GroupMachine:
    return GroupMachine(PREFIX, GROUP, SETTINGS, tuple(shards))


def join(group: GroupMachine, member_id: str, instance: str | None = None, now: int = 0,
         capacity: int | None = None) -> m.HeartbeatResponse:
    return send(group, member_id, JOIN_EPOCH, now, instance=instance, owned=(), capacity=capacity)


def away(group: GroupMachine, member_id: str, now: int = 0, **fields) -> m.HeartbeatResponse:
    return send(group, member_id, TEMPORARY_LEAVE_EPOCH, now, owned=(), **fields)


def static_group(now: int = 0) -> GroupMachine:
    """`a` (instance `pod-0`), `b` (instance `pod-1`) and dynamic `d`, settled, effects taken."""
    group = new_group()
    join(group, "a", "pod-0", now)
    join(group, "b", "pod-1", now)
    join(group, "d", None, now)
    settle(group, now)
    group.take_effects()
    return group


def assert_one_owner(group: GroupMachine) -> None:
    """H3 in the books, and S2: an AWAY member holds nothing."""
    holders: dict[str, str] = {}
    for member_id, member in group.members.items():
        for shard in member.held:
            assert shard not in holders, f"{shard} held by {holders[shard]} and {member_id}"
            holders[shard] = member_id
        if member.away:
            assert not member.held
    assert holders == group.owners


# --- S1 instance id ----------------------------------------------------------------------------


def test_s1_instance_id_is_read_on_the_join_and_may_be_omitted_or_repeated_later():
    group = new_group()
    response = join(group, "a", "pod-0")
    assert response.status == Status.OK
    assert group.members["a"].instance_id == "pod-0" and group.instances == {"pod-0": "a"}
    epoch = response.member_epoch
    assert send(group, "a", epoch, owned=sorted(assigned(response))).status == Status.OK
    assert send(group, "a", epoch, instance="pod-0").status == Status.OK
    assert group.members["a"].instance_id == "pod-0"


def test_s1_a_later_heartbeat_never_changes_or_adds_an_instance_id():
    group = static_group()
    a_epoch, d_epoch = group.members["a"].member_epoch, group.members["d"].member_epoch
    for member_id, epoch, instance in (("a", a_epoch, "pod-9"), ("d", d_epoch, "pod-9"),
                                       ("a", JOIN_EPOCH, "pod-9"), ("d", JOIN_EPOCH, "pod-9"),
                                       ("a", LEAVE_EPOCH, "pod-9"), ("a", TEMPORARY_LEAVE_EPOCH, "pod-9")):
        response = unchanged_by(group, lambda mid=member_id, e=epoch, i=instance: send(
            group, mid, e, instance=i, owned=() if e <= 0 else None))
        assert response.status == Status.INVALID_REQUEST, (member_id, epoch)
        assert "instanceId" in response.error
    assert group.members["d"].instance_id is None and group.instances["pod-0"] == "a"


def test_s1_at_most_one_member_holds_an_instance_id():
    group = static_group()
    response = unchanged_by(group, lambda: join(group, "c", "pod-0"))
    assert response.status == Status.UNRELEASED_INSTANCE_ID
    assert list(group.instances.values()).count("a") == 1 and "c" not in group.members


# --- S2 temporary leave -----------------------------------------------------------------------


def test_s2_temporary_leave_keeps_the_target_for_the_member_held_by_nobody():
    group = static_group()
    before = {mid: target_of(group, mid) for mid in group.members}
    epoch = group.group_epoch
    response = away(group, "a", now=500)
    effects = group.take_effects()
    assert response.status == Status.OK and response.member_epoch == TEMPORARY_LEAVE_EPOCH
    assert response.assignment is None
    a = group.members["a"]
    assert a.away and not a.held and a.last_heartbeat_ms == 500
    assert {mid: target_of(group, mid) for mid in group.members} == before
    assert not any(group.owners.get(shard) for shard in before["a"])
    assert group.group_epoch == epoch and not effects.pushes
    assert effects.members_dirty == {"a"} and not effects.group_dirty
    assert all(effects.owner_changes[shard] is None for shard in before["a"])
    # the others keep going and never get a's shards
    for member_id in ("b", "d"):
        assert assigned(report(group, member_id, 600)) == before[member_id]
    assert_one_owner(group)
    assert group.member_state(a) == MemberState.AWAY


def test_s2_repeated_or_unknown_temporary_leave_is_answered_the_same():
    group = static_group()
    away(group, "a", now=500)
    repeated = unchanged_by(group, lambda: away(group, "a", now=900))
    assert repeated.status == Status.OK and repeated.member_epoch == TEMPORARY_LEAVE_EPOCH
    ghost = unchanged_by(group, lambda: away(group, "ghost", instance="pod-7"))
    assert ghost.status == Status.OK and ghost.member_epoch == TEMPORARY_LEAVE_EPOCH
    assert m.Heartbeat.unknown_group(heartbeat("x", TEMPORARY_LEAVE_EPOCH)).status == Status.OK


def test_s2_temporary_leave_from_a_dynamic_member_or_naming_shards_is_invalid():
    group = static_group()
    dynamic = unchanged_by(group, lambda: away(group, "d"))
    assert dynamic.status == Status.INVALID_REQUEST and "instanceId" in dynamic.error
    held = sorted(group.members["a"].assigned)
    listing = unchanged_by(group, lambda: send(group, "a", TEMPORARY_LEAVE_EPOCH, owned=held))
    assert listing.status == Status.INVALID_REQUEST and "ownedShards" in listing.error
    assert not group.members["a"].away
    unknown_group = m.Heartbeat.unknown_group(heartbeat("x", TEMPORARY_LEAVE_EPOCH, owned=held))
    assert unknown_group.status == Status.INVALID_REQUEST


def test_s2_a_temporary_leave_naming_shards_is_refused_before_any_lookup():
    assert malformed_join(heartbeat("a", TEMPORARY_LEAVE_EPOCH, owned=[SHARDS[0]])) == (
        m.OWNED_ON_TEMPORARY_LEAVE)
    assert malformed_join(heartbeat("a", TEMPORARY_LEAVE_EPOCH, owned=())) is None
    assert malformed_join(heartbeat("a", TEMPORARY_LEAVE_EPOCH)) is None
    assert malformed_join(heartbeat("a", LEAVE_EPOCH, owned=[SHARDS[0]])) is None


def test_s2_temporary_leave_releases_a_revoking_shard_to_its_waiting_member():
    group = new_group()
    join(group, "a", "pod-0")  # a reads every shard
    join(group, "b")
    group.take_effects()
    report(group, "a")  # REVOKE_PENDING: a drains what b gets
    moving = target_of(group, "b")
    assert group.members["a"].revoking == moving
    group.take_effects()
    away(group, "a")
    effects = group.take_effects()
    assert effects.pushes == {"b"}  # H10: a pending shard of b's was freed
    assert assigned(report(group, "b")) == moving
    assert_one_owner(group)


# --- S3 return --------------------------------------------------------------------------------


def test_s3_return_under_a_new_member_id_gets_the_same_target_at_once():
    group = static_group()
    target = target_of(group, "a")
    away(group, "a", now=100)
    group.take_effects()
    epoch, assignment_epoch = group.group_epoch, group.assignment_epoch
    response = join(group, "a2", "pod-0", now=2000)
    effects = group.take_effects()
    assert response.status == Status.OK
    assert assigned(response) == target and not response.assignment.pending_shards
    assert response.member_epoch == assignment_epoch
    assert group.group_epoch == epoch and not effects.pushes
    assert "a" not in group.members and group.instances["pod-0"] == "a2"
    assert effects.members_removed == {"a"} and "a2" in effects.members_dirty
    assert {shard: group.owners[shard] for shard in target} == dict.fromkeys(target, "a2")
    assert group.state == GroupState.STABLE
    assert_one_owner(group)


def test_s3_the_replaced_member_id_is_fenced_for_good():
    group = static_group()
    epoch = group.members["a"].member_epoch
    away(group, "a")
    join(group, "a2", "pod-0")
    group.take_effects()
    for sent in (epoch, TEMPORARY_LEAVE_EPOCH, LEAVE_EPOCH):
        response = unchanged_by(group, lambda e=sent: send(group, "a", e,
                                                           owned=() if e < 0 else None))
        assert response.status == Status.FENCED_INSTANCE_ID, sent
        assert "pod-0" in response.error
    duplicate = unchanged_by(group, lambda: join(group, "a", "pod-0"))  # its join is S4's duplicate
    assert duplicate.status == Status.UNRELEASED_INSTANCE_ID


def test_s3_an_away_members_own_heartbeat_is_unknown_and_its_rejoin_is_the_return():
    group = static_group()
    target, epoch = target_of(group, "a"), group.members["a"].member_epoch
    away(group, "a")
    group.take_effects()
    response = unchanged_by(group, lambda: send(group, "a", epoch, owned=[]))
    assert response.status == Status.UNKNOWN_MEMBER_ID
    back = join(group, "a", "pod-0", now=50)
    assert back.status == Status.OK and assigned(back) == target
    assert not group.members["a"].away and group.members["a"].last_heartbeat_ms == 50
    assert not group.take_effects().pushes


def test_s3_return_grows_the_epoch_only_when_its_capacity_changed():
    group = new_group()
    join(group, "a", "pod-0", capacity=2)
    join(group, "b", "pod-1", capacity=2)
    settle(group)
    away(group, "a")
    epoch = group.group_epoch
    join(group, "a2", "pod-0", capacity=2)
    assert group.group_epoch == epoch
    away(group, "a2")
    response = join(group, "a3", "pod-0", capacity=4)
    assert group.group_epoch == epoch + 1 and response.member_epoch == epoch + 1
    assert group.members["a3"].capacity == 4 and response.max_concurrency == 4


# --- S4 duplicate -----------------------------------------------------------------------------


def test_s4_duplicate_join_is_unreleased_and_the_incumbent_is_undisturbed():
    group = static_group()
    a = group.members["a"]
    held, epoch = a.held, a.member_epoch
    response = unchanged_by(group, lambda: join(group, "a-new", "pod-0", now=5))
    assert response.status == Status.UNRELEASED_INSTANCE_ID
    assert "pod-0" in response.error and "a-new" not in group.members
    assert group.members["a"].held == held
    assert report(group, "a").status == Status.OK and group.members["a"].member_epoch == epoch


def test_s4_the_same_member_id_joining_again_is_a_rejoin_not_a_duplicate():
    group = static_group()
    epoch = group.group_epoch
    response = join(group, "a", "pod-0")
    assert response.status == Status.OK and group.group_epoch == epoch
    assert assigned(response) == target_of(group, "a")


# --- S5 session timeout -----------------------------------------------------------------------


def test_s5_lease_expiry_makes_a_static_member_away_without_an_epoch_bump():
    group = static_group()
    target, epoch = target_of(group, "a"), group.group_epoch
    for member_id in ("b", "d"):
        report(group, member_id, LEASE)
    group.take_effects()
    group.tick(LEASE + 1)
    effects = group.take_effects()
    a = group.members["a"]
    assert a.away and not a.held and a.last_heartbeat_ms == 0
    assert group.group_epoch == epoch and not effects.pushes
    assert target_of(group, "a") == target and all(s not in group.owners for s in target)
    assert [e.kind for e in effects.events] == ["away"]


def test_s5_an_away_member_is_removed_after_the_static_session_timeout():
    group = static_group()
    target, epoch = target_of(group, "a"), group.group_epoch
    away(group, "a", now=1000)
    for now in range(LEASE, 1000 + SESSION + 1, LEASE):
        for member_id in ("b", "d"):
            report(group, member_id, now)
        group.tick(now)
    assert "a" in group.members and group.group_epoch == epoch
    report(group, "b", 1000 + SESSION)
    report(group, "d", 1000 + SESSION)
    group.take_effects()
    group.tick(1000 + SESSION + 1)
    effects = group.take_effects()
    assert "a" not in group.members and "pod-0" not in group.instances
    assert group.group_epoch == epoch + 1 and effects.members_removed == {"a"}
    assert target <= target_of(group, "b") | target_of(group, "d") and effects.pushes
    assert any(e.kind == "expired" and e.fields.get("reason") == "session_timeout"
               for e in effects.events)


def test_s5_a_session_timeout_shorter_than_the_lease_never_cuts_a_lease_short():
    group = GroupMachine(PREFIX, GROUP, GroupSettings(lease_ttl_ms=10_000,
                                                      static_session_timeout_ms=2_000), SHARDS)
    join(group, "a", "pod-0")
    group.tick(5_000)
    assert not group.members["a"].away and group.members["a"].held == frozenset(SHARDS)
    group.tick(10_001)  # the lease is over, and so is the session: removed at once
    assert "a" not in group.members


def test_s5_leave_from_a_static_member_is_a_real_leave():
    group = static_group()
    target, epoch = target_of(group, "a"), group.group_epoch
    response = send(group, "a", LEAVE_EPOCH, owned=())
    assert response.status == Status.OK and response.member_epoch == LEAVE_EPOCH
    assert "a" not in group.members and "pod-0" not in group.instances
    assert group.group_epoch == epoch + 1
    assert target <= target_of(group, "b") | target_of(group, "d")
    assert join(group, "a9", "pod-0").status == Status.OK  # the instanceId is free again


def test_s5_remove_by_instance_id_removes_an_away_member_too():
    group = static_group()
    epoch = group.group_epoch
    assert group.remove_instance("pod-404", 0) is None
    away(group, "a")
    assert group.remove_instance("pod-0", 0) == "a"
    assert "a" not in group.members and group.group_epoch == epoch + 1
    assert group.remove_member("b", 0) is True and "pod-1" not in group.instances
    assert group.remove_member(None, 0) is False


def test_s5_join_adds_member_says_whether_a_join_grows_the_group():
    group = static_group()
    away(group, "a")
    assert not group.join_adds_member(heartbeat("a2", JOIN_EPOCH, instance="pod-0"))  # return
    assert not group.join_adds_member(heartbeat("b2", JOIN_EPOCH, instance="pod-1"))  # duplicate
    assert not group.join_adds_member(heartbeat("d", JOIN_EPOCH))  # rejoin
    assert group.join_adds_member(heartbeat("e", JOIN_EPOCH, instance="pod-2"))
    assert group.join_adds_member(heartbeat("f", JOIN_EPOCH))


# --- S6 seen by operators ---------------------------------------------------------------------


def test_s6_describe_shows_instance_id_away_and_away_ms():
    group = static_group()
    away(group, "a", now=1000)
    description = group.describe(4000, None, None)
    members = {d.member_id: d for d in description.members}
    assert members["a"].state == MemberState.AWAY and members["a"].away_ms == 3000
    assert members["a"].instance_id == "pod-0" and members["a"].assigned_shards == ()
    assert set(members["a"].target_shards) == target_of(group, "a")
    assert members["d"].instance_id is None and members["d"].away_ms is None
    assert members["b"].away_ms is None and members["b"].state == MemberState.STABLE
    assert description.current_assignment["a"] == ()


def test_s6_a_watch_does_not_push_for_the_away_clock_alone():
    from rsc.actors.core.watch import significant

    group = static_group()
    away(group, "a", now=1000)
    while_away = significant(group.describe(2000, None, None))
    assert significant(group.describe(9000, None, None)) == while_away
    join(group, "a2", "pod-0", now=9000)
    assert significant(group.describe(9000, None, None)) != while_away  # the return is a change


def test_s6_away_members_do_not_make_the_group_reconciling():
    group = static_group()
    away(group, "a")
    assert group.state == GroupState.STABLE
    away(group, "b")
    send(group, "d", LEAVE_EPOCH, owned=())
    assert group.state == GroupState.STABLE and len(group.members) == 2


# --- H variants for static members --------------------------------------------------------------


def test_h1_a_static_join_grows_the_epoch_and_temporary_leave_and_return_do_not():
    group = new_group()
    join(group, "a", "pod-0")
    assert group.group_epoch == 1
    away(group, "a")
    join(group, "a2", "pod-0")
    assert group.group_epoch == 1
    away(group, "a2")
    join(group, "a2", "pod-0")
    assert group.group_epoch == 1


def test_h2_away_members_keep_their_share_of_the_target():
    group = static_group()
    away(group, "a")
    join(group, "e")
    counts = [len(target_of(group, mid)) for mid in group.members]
    assert sum(counts) == len(SHARDS) and max(counts) - min(counts) <= 1
    assert target_of(group, "a")  # a still has its share while away
    settle(group)
    assert_one_owner(group)


def test_h6_an_away_members_later_heartbeat_is_unknown_and_does_not_renew():
    group = static_group()
    epoch = group.members["a"].member_epoch
    for member_id in ("b", "d"):
        report(group, member_id, LEASE)
    group.tick(LEASE + 1)
    assert group.members["a"].away
    response = send(group, "a", epoch, LEASE + 2, owned=sorted(target_of(group, "a")))
    assert response.status == Status.UNKNOWN_MEMBER_ID
    assert group.members["a"].last_heartbeat_ms == 0
    back = join(group, "a", "pod-0", LEASE + 3)
    assert back.status == Status.OK and assigned(back) == target_of(group, "a")


# --- records (H12) ----------------------------------------------------------------------------


def test_h12_static_members_survive_a_restart_with_a_fresh_away_clock():
    group = static_group()
    away(group, "a", now=1000)
    snapshot = PrefixSnapshot(groups={GROUP: group.to_record()})
    loaded = replay({k: v for k, v in encode(changes_of(snapshot)).items() if v is not None})
    record = loaded.groups[GROUP]
    assert record.members["a"].instance_id == "pod-0" and record.members["a"].away
    assert record.members["d"].instance_id is None and not record.members["d"].away
    restored = GroupMachine.from_record(PREFIX, GROUP, SETTINGS, record, SHARDS, 30_000)
    a = restored.members["a"]
    assert a.away and a.last_heartbeat_ms == 30_000 and not a.needs_full_report
    assert restored.instances == {"pod-0": "a", "pod-1": "b"}
    assert target_of(restored, "a") == target_of(group, "a")
    restored.tick(30_000 + SESSION)
    assert "a" in restored.members  # the away clock restarted with the coordinator
    assert "d" not in restored.members and restored.members["b"].away  # their leases ran out
    back = join(restored, "a2", "pod-0", 30_000 + SESSION)
    assert back.status == Status.OK and assigned(back) == target_of(restored, "a2")
    assert target_of(group, "a") <= assigned(back)  # its own shards, plus the expired d's


def test_h12_a_dynamic_members_record_is_unchanged_and_old_records_load():
    dynamic = MemberRecord(epoch=3, previous_epoch=2, capacity=None)
    assert set(member_value(dynamic)) == {"epoch", "previousEpoch", "capacity", "assigned",
                                          "revoking", "target"}
    old = ('{"epoch":3,"previousEpoch":2,"capacity":null,"assigned":[],"revoking":[],'
           '"target":["orders:v1:0"]}')
    loaded = replay({"group:billing": '{"groupEpoch":3,"assignmentEpoch":3,"maxConcurrency":null}',
                     "member:7:billing:m1": old})
    member = loaded.groups["billing"].members["m1"]
    assert member.instance_id is None and member.away is False


def test_h12_a_rolled_back_return_brings_the_away_member_back():
    group = static_group()
    away(group, "a")
    group.take_effects()
    committed = group.to_record()
    join(group, "a2", "pod-0")
    group.restore(committed, SHARDS, 10, restart=False)  # the write failed
    assert "a2" not in group.members and group.members["a"].away
    assert "a" not in group.replaced and group.instances["pod-0"] == "a"
    response = join(group, "a2", "pod-0", 20)
    assert response.status == Status.OK and assigned(response) == target_of(group, "a2")


def test_s5_the_static_session_timeout_flag_reaches_the_config(capsys):
    import argparse

    import pytest

    from rsc.actors.config import CoordinatorConfig
    from rsc.commands.coordinator import add_parser, config_from_args

    parser = argparse.ArgumentParser(prog="rsc")
    add_parser(parser.add_subparsers(dest="command"))
    config = config_from_args(parser.parse_args(["coordinator", "--static-session-timeout-ms",
                                                 "9000"]))
    assert config.static_session_timeout_ms == 9000
    defaults = config_from_args(parser.parse_args(["coordinator"]))
    assert defaults.static_session_timeout_ms == GroupSettings().static_session_timeout_ms == 45_000
    with pytest.raises(SystemExit):
        parser.parse_args(["coordinator", "--static-session-timeout-ms", "0"])
    assert "--static-session-timeout-ms: must be >= 1, got 0" in capsys.readouterr().err
    with pytest.raises(ValueError, match="static-session-timeout-ms must be positive"):
        CoordinatorConfig(static_session_timeout_ms=0)
