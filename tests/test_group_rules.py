"""Pure tests of the group state machine: one named test (or more) per rule H1..H14.

In the manner of Kafka's CurrentAssignmentBuilderTest: small transitions driven
synchronously, each named after the rule of docs/protocol.md it checks. No I/O, no
trio; `now_ms` is passed in. Rejected events must leave the state unchanged,
which the tests check by comparing `to_record()` before and after.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from rsc.actors.core.group import GroupMachine, GroupSettings
from rsc.actors.core.records import PrefixSnapshot, changes_of, encode, replay
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import JOIN_EPOCH, LEAVE_EPOCH, GroupState, MemberState
from tests.helpers.groups import (
    GROUP,
    PREFIX,
    assigned,
    pending,
    report,
    routing_of,
    send,
    settle,
    target_of,
    unchanged_by,
)

SETTINGS = GroupSettings(heartbeat_interval_ms=3000, lease_ttl_ms=10_000, revoke_timeout_ms=60_000)
LEASE = SETTINGS.lease_ttl_ms
REVOKE_TIMEOUT = SETTINGS.revoke_timeout_ms


def shard_ids(count: int, version: int = 1) -> list[str]:
    return [f"{PREFIX}:v{version}:{index}" for index in range(count)]


SHARDS = shard_ids(4)


def new_group(shards: Iterable[str] = SHARDS) -> GroupMachine:
    return GroupMachine(PREFIX, GROUP, SETTINGS, tuple(shards))


def join(group: GroupMachine, member_id: str, now: int = 0, capacity: int | None = None):
    return send(group, member_id, JOIN_EPOCH, now, owned=(), capacity=capacity)


def epoch_of(group: GroupMachine, member_id: str) -> int:
    return group.members[member_id].member_epoch


def stable_group(*member_ids: str, shards: Iterable[str] = SHARDS, now: int = 0) -> GroupMachine:
    group = new_group(shards)
    for member_id in member_ids:
        join(group, member_id, now)
    settle(group, now)
    group.take_effects()
    return group


def a_holds_all_then_b_joins() -> tuple[GroupMachine, set[str], set[str]]:
    """`a` reads every shard; `b` joins; returns (group, a's kept shards, shards moving to b)."""
    group = new_group()
    response = join(group, "a")
    assert response.status == Status.OK and assigned(response) == set(SHARDS)
    join(group, "b")
    kept, moving = target_of(group, "a"), target_of(group, "b")
    assert kept and moving and kept | moving == set(SHARDS)
    group.take_effects()
    return group, kept, moving


# --- malformed and rejected events ---------------------------------------------------


def test_join_with_non_empty_owned_shards_is_invalid_request_and_changes_nothing():
    group = stable_group("a")
    response = unchanged_by(group, lambda: send(group, "b", JOIN_EPOCH, owned=[SHARDS[0]]))
    assert response.status == Status.INVALID_REQUEST
    assert "ownedShards" in response.error
    response = unchanged_by(group, lambda: send(group, "a", JOIN_EPOCH, owned=[SHARDS[0]]))
    assert response.status == Status.INVALID_REQUEST


def test_join_with_null_owned_shards_is_a_join():
    group = new_group()
    response = send(group, "a", JOIN_EPOCH, owned=None)
    assert response.status == Status.OK and response.member_epoch == 1


def test_heartbeat_from_a_member_never_seen_is_unknown_and_changes_nothing():
    group = stable_group("a")
    response = unchanged_by(group, lambda: send(group, "ghost", 3, owned=[]))
    assert response.status == Status.UNKNOWN_MEMBER_ID
    assert "ghost" not in group.members


def test_removing_an_unknown_member_is_refused_and_changes_nothing():
    group = stable_group("a")
    assert unchanged_by(group, lambda: group.remove_member("ghost", 0)) is False


def test_setting_the_same_values_again_changes_nothing():
    group = stable_group("a", "b")
    group.set_max_concurrency(3)
    group.take_effects()
    unchanged_by(group, lambda: group.set_max_concurrency(3))
    unchanged_by(group, lambda: group.set_shards(SHARDS))


# --- H1 epochs ---------------------------------------------------------------------


def test_h1_group_epoch_grows_on_join_leave_expiry_removal_capacity_routing_max_concurrency():
    group = new_group()
    steps = [
        ("join", lambda: join(group, "a", now=0)),
        ("join with capacity", lambda: join(group, "b", now=0, capacity=4)),
        ("capacity change", lambda: send(group, "a", epoch_of(group, "a"), 0, capacity=2)),
        ("max concurrency", lambda: group.set_max_concurrency(3)),
        ("max concurrency cleared", lambda: group.set_max_concurrency(None)),
        ("routing created", lambda: group.set_shards(SHARDS + shard_ids(2, version=2))),
        ("resharding ends", lambda: group.set_shards(shard_ids(2, version=2))),
        ("removal", lambda: group.remove_member("b", 0)),
        ("join", lambda: join(group, "c", now=0)),
        ("expiry", lambda: (send(group, "a", epoch_of(group, "a"), LEASE), group.tick(LEASE + 1))),
        ("leave", lambda: send(group, "a", LEAVE_EPOCH, LEASE + 1)),
    ]
    for reason, step in steps:
        before = group.group_epoch
        step()
        assert group.group_epoch == before + 1, reason
        assert group.assignment_epoch == group.group_epoch, reason
    assert not group.members


def test_h1_unchanged_capacity_does_not_grow_the_epoch():
    group = stable_group("a", "b")
    join(group, "c", capacity=4)
    before = group.group_epoch
    send(group, "c", epoch_of(group, "c"), capacity=4)
    send(group, "c", epoch_of(group, "c"))  # absent capacity = unchanged
    assert group.group_epoch == before


def test_h1_target_is_recomputed_at_each_growth():
    group = stable_group("a", "b")
    join(group, "c")
    assert group.assignment_epoch == group.group_epoch
    assert all(len(target_of(group, mid)) in (1, 2) for mid in "abc")
    group.set_shards(shard_ids(6))
    assert group.assignment_epoch == group.group_epoch
    assert [len(target_of(group, mid)) for mid in "abc"] == [2, 2, 2]


def test_h1_live_member_rejoining_releases_what_it_held_and_is_answered_like_a_join():
    group = stable_group("a", "b")
    before = group.group_epoch
    held = group.members["a"].held
    response = join(group, "a")
    effects = group.take_effects()
    assert group.group_epoch == before
    assert response.status == Status.OK
    assert response.member_epoch == group.assignment_epoch
    # released and (being its target) handed straight back
    assert assigned(response) == target_of(group, "a") == held
    assert effects.dirty


def test_h1_live_member_rejoining_with_new_capacity_grows_the_epoch():
    group = stable_group("a", "b")
    before = group.group_epoch
    response = join(group, "a", capacity=7)
    assert group.group_epoch == before + 1
    assert response.member_epoch == group.assignment_epoch == before + 1
    assert response.max_concurrency == 7


def test_h1_rejoin_releases_revoking_shards_to_their_new_owner():
    group, kept, moving = a_holds_all_then_b_joins()
    assert send(group, "a", 1).status == Status.REVOKE_PENDING
    assert pending(send(group, "b", epoch_of(group, "b"))) == moving
    join(group, "a")  # a restarted: it holds nothing any more
    assert "b" in group.take_effects().pushes
    response = send(group, "b", epoch_of(group, "b"))
    assert assigned(response) == moving


# --- H2 target ---------------------------------------------------------------------


def test_h2_target_spreads_all_shards_with_counts_differing_by_at_most_one():
    group = stable_group("a", "b", "c", shards=shard_ids(7))
    targets = [target_of(group, mid) for mid in "abc"]
    assert sorted(len(t) for t in targets) == [2, 2, 3]
    assert set().union(*targets) == set(shard_ids(7))


def test_h2_target_is_sticky_when_a_member_joins():
    group = stable_group("a", "b", shards=shard_ids(6))
    before = {mid: target_of(group, mid) for mid in "ab"}
    join(group, "c")
    for member_id in "ab":
        assert target_of(group, member_id) <= before[member_id]
    assert len(target_of(group, "c")) == 2


def test_h2_capacity_and_max_concurrency_are_not_weights():
    group = new_group(shard_ids(6))
    join(group, "a", capacity=1)
    join(group, "b", capacity=100)
    group.set_max_concurrency(1)
    assert len(target_of(group, "a")) == len(target_of(group, "b")) == 3


def test_h2_target_covers_the_shards_of_every_live_version():
    group = stable_group("a", "b")
    group.set_shards(SHARDS + shard_ids(4, version=2))
    targets = [target_of(group, mid) for mid in "ab"]
    assert targets[0] | targets[1] == set(SHARDS + shard_ids(4, version=2))
    assert len(targets[0]) == len(targets[1]) == 4


# --- H3 never two owners ------------------------------------------------------------


def test_h3_shard_goes_to_new_owner_only_after_revoked():
    group, kept, moving = a_holds_all_then_b_joins()
    first, second = sorted(moving)
    # b sees its target pending while a holds it
    response = send(group, "b", epoch_of(group, "b"))
    assert response.status == Status.OK
    assert assigned(response) == set() and pending(response) == moving
    # a is asked to revoke and still drains both
    assert send(group, "a", 1).status == Status.REVOKE_PENDING
    send(group, "a", 1, revoking=[first, second])
    assert pending(send(group, "b", epoch_of(group, "b"))) == moving
    # one released: only that one moves
    assert send(group, "a", 1, revoked=[first], revoking=[second]).status == Status.REVOKE_PENDING
    response = send(group, "b", epoch_of(group, "b"))
    assert assigned(response) == {first} and pending(response) == {second}
    assert group.owners[first] == "b" and group.owners[second] == "a"
    # the other released
    assert send(group, "a", 1, revoked=[first, second]).status == Status.OK
    assert assigned(send(group, "b", epoch_of(group, "b"))) == moving


def test_h3_full_owned_shards_without_a_revoking_shard_releases_it():
    group, kept, moving = a_holds_all_then_b_joins()
    send(group, "a", 1)
    response = send(group, "a", 1, owned=sorted(kept))
    assert response.status == Status.OK
    assert not group.members["a"].revoking
    assert assigned(send(group, "b", epoch_of(group, "b"))) == moving


def test_h3_revoking_report_keeps_the_shard_with_its_holder():
    group, kept, moving = a_holds_all_then_b_joins()
    send(group, "a", 1)
    send(group, "a", 1, owned=SHARDS, revoking=sorted(moving))
    assert {group.owners[shard] for shard in moving} == {"a"}
    assert assigned(send(group, "b", epoch_of(group, "b"))) == set()


def test_h3_shard_coming_back_to_the_target_while_another_is_revoked_stays_with_its_holder():
    group = new_group(shard_ids(3))
    join(group, "a")
    join(group, "b")
    join(group, "c")
    assert send(group, "a", 1).status == Status.REVOKE_PENDING
    revoking = set(group.members["a"].revoking)
    assert len(revoking) == 2
    send(group, "b", LEAVE_EPOCH)  # b's target shard may go back to a, which is still draining it
    back = target_of(group, "a") & revoking
    assert back, "the scenario needs a revoked shard that returns to a's target"
    response = send(group, "a", 1)
    assert response.status == Status.REVOKE_PENDING
    # a was told to stop reading it: it stays a's (revoking) until a releases it
    assert group.members["a"].held == set(shard_ids(3))
    assert back <= group.members["a"].revoking
    assert group.owners == {shard: "a" for shard in shard_ids(3)}
    response = send(group, "a", 1, revoked=sorted(revoking))
    assert response.status == Status.OK and back <= assigned(response)
    settle(group)
    assert {shard for mid in "ac" for shard in group.members[mid].assigned} == set(shard_ids(3))


@pytest.mark.parametrize("how", ["leave", "expiry", "removal", "revoke_timeout", "rejoin"])
def test_h3_shard_goes_to_new_owner_at_once_when_the_holder_is_gone(how):
    group, kept, moving = a_holds_all_then_b_joins()
    assert send(group, "a", 1).status == Status.REVOKE_PENDING
    later = REVOKE_TIMEOUT + 1 if how == "revoke_timeout" else LEASE + 1
    if how == "leave":
        send(group, "a", LEAVE_EPOCH)
    elif how == "expiry":
        send(group, "b", epoch_of(group, "b"), LEASE)
        group.tick(LEASE + 1)
    elif how == "removal":
        assert group.remove_member("a", 0)
    elif how == "revoke_timeout":
        for now in range(5000, later, 5000):  # both stay live; a never finishes draining
            send(group, "a", 1, now, revoking=sorted(moving))
            send(group, "b", epoch_of(group, "b"), now)
        send(group, "a", 1, later - 1, revoking=sorted(moving))
        send(group, "b", epoch_of(group, "b"), later - 1)
        group.tick(later)
    else:
        join(group, "a")
    response = send(group, "b", epoch_of(group, "b"), later)
    assert response.status == Status.OK
    assert moving <= assigned(response)
    assert all(group.owners[shard] == "b" for shard in moving)


# --- H4 member epoch and states -----------------------------------------------------


def test_h4_joining_member_gets_the_assignment_epoch():
    group = stable_group("a", "b")
    response = join(group, "c")
    assert response.member_epoch == response.assignment_epoch == group.assignment_epoch
    assert response.group_epoch == group.group_epoch


def test_h4_member_with_nothing_to_revoke_moves_to_the_new_epoch_free_assigned_rest_pending():
    group, kept, moving = a_holds_all_then_b_joins()
    send(group, "a", 1)
    send(group, "a", 1, revoked=[min(moving)], revoking=[max(moving)])
    group.set_max_concurrency(5)  # new epoch, same target
    response = send(group, "b", 2)
    assert response.status == Status.OK
    assert response.member_epoch == group.assignment_epoch == 3
    assert assigned(response) == {min(moving)} and pending(response) == {max(moving)}


def test_h4_member_with_something_to_revoke_stays_at_its_epoch_until_its_last_release():
    group, kept, moving = a_holds_all_then_b_joins()
    first, second = sorted(moving)
    response = send(group, "a", 1)
    assert response.status == Status.REVOKE_PENDING
    assert response.member_epoch == 1 and response.assignment_epoch == 2
    assert assigned(response) == kept  # the owned shards it keeps
    response = send(group, "a", 1, revoked=[first], revoking=[second])
    assert response.status == Status.REVOKE_PENDING and response.member_epoch == 1
    response = send(group, "a", 1, revoked=[first, second])
    assert response.status == Status.OK and response.member_epoch == 2
    assert assigned(response) == kept and pending(response) == set()


def test_h4_member_states_unrevoked_then_unreleased_then_stable():
    group, kept, moving = a_holds_all_then_b_joins()
    a, b = group.members["a"], group.members["b"]
    assert group.member_state(a) == MemberState.UNREVOKED_SHARDS
    send(group, "b", 2)
    assert group.member_state(b) == MemberState.UNRELEASED_SHARDS
    send(group, "a", 1)
    assert group.member_state(a) == MemberState.UNREVOKED_SHARDS
    send(group, "a", 1, revoked=sorted(moving))
    assert group.member_state(a) == MemberState.STABLE
    assert group.member_state(b) == MemberState.UNRELEASED_SHARDS
    send(group, "b", 2)
    assert group.member_state(b) == MemberState.STABLE


def test_h4_group_states_empty_reconciling_stable():
    group = new_group()
    assert group.state == GroupState.EMPTY
    join(group, "a")
    assert group.state == GroupState.STABLE
    join(group, "b")
    assert group.state == GroupState.RECONCILING
    settle(group)
    assert group.state == GroupState.STABLE
    group.set_max_concurrency(2)  # members not yet at the new assignment epoch
    assert group.state == GroupState.RECONCILING
    settle(group)
    assert group.state == GroupState.STABLE
    send(group, "a", LEAVE_EPOCH)
    send(group, "b", LEAVE_EPOCH)
    assert group.state == GroupState.EMPTY


def test_h4_description_shows_member_states_and_current_assignment():
    group, kept, moving = a_holds_all_then_b_joins()
    send(group, "a", 1)
    description = group.describe(0, routing_of(group), None)
    assert description.state == GroupState.RECONCILING
    members = {d.member_id: d for d in description.members}
    assert members["a"].state == MemberState.UNREVOKED_SHARDS
    assert set(members["a"].revoking_shards) == moving
    assert set(description.current_assignment["a"]) == set(SHARDS)
    assert members["b"].state == MemberState.UNRELEASED_SHARDS
    assert set(members["b"].pending_shards) == set(description.target_assignment["b"]) == moving


# --- H5 undisturbed --------------------------------------------------------------------


def test_h5_undisturbed_member_never_loses_a_shard_in_any_response_during_a_rebalance():
    group = stable_group("a", "b", shards=shard_ids(5))
    before = {mid: target_of(group, mid) for mid in "ab"}
    join(group, "c")
    undisturbed = [mid for mid in "ab" if before[mid] <= target_of(group, mid)]
    assert undisturbed, "the scenario needs a member whose shards all stay"
    responses: dict[str, list[m.HeartbeatResponse]] = {"a": [], "b": []}
    for _ in range(4):
        for member_id in "ab":
            responses[member_id].append(send(group, member_id, epoch_of(group, member_id)))
            responses[member_id].append(report(group, member_id))
        send(group, "c", epoch_of(group, "c"))
    assert group.state == GroupState.STABLE
    for member_id in "ab":
        stays = before[member_id] & target_of(group, member_id)
        for response in responses[member_id]:
            assert stays <= assigned(response), (member_id, response)


# --- H6 lease -------------------------------------------------------------------------


def test_h6_tick_expires_a_member_after_its_lease_and_reassigns_at_once():
    group = stable_group("a", "b")
    b_shards = target_of(group, "b")
    send(group, "a", epoch_of(group, "a"), 6000)
    group.tick(LEASE)  # exactly the lease: still live
    assert set(group.members) == {"a", "b"}
    before = group.group_epoch
    group.tick(LEASE + 1)
    assert set(group.members) == {"a"}
    assert group.group_epoch == before + 1
    assert ("expired", "b") in [(e.kind, e.member_id) for e in group.take_effects().events]
    response = send(group, "a", epoch_of(group, "a"), LEASE + 1)
    assert response.status == Status.OK and assigned(response) == set(SHARDS)
    assert b_shards <= assigned(response)


def test_h6_expired_member_heartbeat_gets_unknown_member_id():
    group = stable_group("a", "b")
    epoch = epoch_of(group, "b")
    send(group, "a", epoch_of(group, "a"), LEASE)
    group.tick(LEASE + 1)
    response = unchanged_by(group, lambda: send(group, "b", epoch, LEASE + 2))
    assert response.status == Status.UNKNOWN_MEMBER_ID
    assert response.member_id == "b"


def test_h6_rejected_heartbeat_does_not_renew_the_lease():
    group = stable_group("a", "b")
    send(group, "a", epoch_of(group, "a"), 9000)
    assert send(group, "b", 99, 9000).status == Status.FENCED_MEMBER_EPOCH
    assert send(group, "b", epoch_of(group, "b"), 9000,
                owned=["orders:v9:0"]).status == Status.FENCED_MEMBER_EPOCH
    group.tick(LEASE + 1)
    assert set(group.members) == {"a"}


def test_h6_accepted_heartbeat_renews_the_lease():
    group = stable_group("a")
    send(group, "a", epoch_of(group, "a"), 9000)
    group.tick(LEASE + 1)
    assert set(group.members) == {"a"}


# --- H7 fencing -------------------------------------------------------------------------


def lost_ok_after_revocation() -> tuple[GroupMachine, set[str], set[str]]:
    """`a` released what it had to and got OK at epoch 2, but that OK was lost."""
    group, kept, moving = a_holds_all_then_b_joins()
    send(group, "a", 1)
    assert send(group, "a", 1, owned=sorted(kept), revoked=sorted(moving)).member_epoch == 2
    group.take_effects()
    return group, kept, moving


def test_h7_current_epoch_is_accepted():
    group = stable_group("a")
    response = send(group, "a", epoch_of(group, "a"), owned=SHARDS)
    assert response.status == Status.OK and assigned(response) == set(SHARDS)


def test_h7_previous_epoch_with_full_subset_is_accepted():
    group, kept, moving = lost_ok_after_revocation()
    record = group.to_record()
    response = send(group, "a", 1, 500, owned=sorted(kept), revoked=sorted(moving))
    assert response.status == Status.OK
    assert response.member_epoch == 2 and assigned(response) == kept
    assert group.to_record() == record
    assert group.members["a"].last_heartbeat_ms == 500
    # a strict subset (a shard not started yet) is a subset too
    response = send(group, "a", 1, owned=[min(kept)])
    assert response.status == Status.OK and assigned(response) == kept


def test_h7_previous_epoch_with_a_lost_assignment_is_answered_with_it_again():
    group = stable_group("a", "b")
    a_epoch, a_had = epoch_of(group, "a"), sorted(group.members["a"].held)
    send(group, "b", LEAVE_EPOCH)
    lost = send(group, "a", a_epoch)  # OK handing a b's shards: lost
    assert lost.status == Status.OK and assigned(lost) == set(SHARDS)
    response = send(group, "a", a_epoch, owned=a_had)
    assert response.status == Status.OK
    assert response.member_epoch == lost.member_epoch and assigned(response) == set(SHARDS)


def test_h7_previous_epoch_without_owned_gets_sync_metadata():
    group, kept, moving = lost_ok_after_revocation()
    record = group.to_record()
    response = send(group, "a", 1, 700)
    assert response.status == Status.SYNC_METADATA
    assert response.member_epoch == 2 and assigned(response) == kept
    assert group.to_record() == record
    assert group.members["a"].last_heartbeat_ms == 700
    # the full heartbeat that follows is accepted
    response = send(group, "a", 2, owned=sorted(kept))
    assert response.status == Status.OK and response.member_epoch == 2


def test_h7_previous_epoch_with_shards_not_held_is_fenced():
    group, kept, moving = lost_ok_after_revocation()
    response = unchanged_by(group, lambda: send(group, "a", 1, owned=SHARDS))
    assert response.status == Status.FENCED_MEMBER_EPOCH


def test_h7_any_other_epoch_is_fenced():
    group, kept, moving = lost_ok_after_revocation()
    group.set_max_concurrency(2)
    assert send(group, "a", 2).member_epoch == 3  # previous epoch now 2
    for epoch in (1, 4, 17):
        response = unchanged_by(group, lambda epoch=epoch: send(group, "a", epoch, owned=sorted(kept)))
        assert response.status == Status.FENCED_MEMBER_EPOCH, epoch


def test_h7_fenced_member_keeps_its_shards_until_it_rejoins():
    group, kept, moving = a_holds_all_then_b_joins()
    send(group, "a", 1)
    assert send(group, "a", 9).status == Status.FENCED_MEMBER_EPOCH
    assert group.members["a"].held == set(SHARDS)
    assert assigned(send(group, "b", 2)) == set()
    join(group, "a")
    assert assigned(send(group, "b", 2)) == moving


def test_h7_fenced_member_keeps_its_shards_until_its_lease_runs_out():
    group, kept, moving = a_holds_all_then_b_joins()
    send(group, "a", 1, 1000)
    assert send(group, "a", 9, 9000).status == Status.FENCED_MEMBER_EPOCH
    send(group, "b", 2, 9000)
    group.tick(1000 + LEASE)
    assert "a" in group.members and assigned(send(group, "b", 2, 9000)) == set()
    group.tick(1000 + LEASE + 1)
    assert "a" not in group.members
    assert assigned(send(group, "b", epoch_of(group, "b"), 1000 + LEASE + 1)) == set(SHARDS)


def test_h7_lost_assignment_moved_away_is_released_by_the_full_report():
    group = stable_group("a", "b")
    b_epoch = epoch_of(group, "b")
    a_epoch = epoch_of(group, "a")
    a_had = set(group.members["a"].held)
    send(group, "b", LEAVE_EPOCH, 0)
    lost = send(group, "a", a_epoch, 0)  # OK handing a every shard: lost
    assert assigned(lost) == set(SHARDS) and b_epoch
    join(group, "c", 0)
    moving = target_of(group, "c")
    assert moving - a_had, "the scenario needs a lost shard that now goes to c"
    # a retries at its previous epoch with what it really holds: accepted
    response = send(group, "a", a_epoch, 0, owned=sorted(a_had))
    assert response.status in (Status.OK, Status.REVOKE_PENDING)
    # a holds nothing to revoke, so its holding is unchanged and it sends null from now on
    now = 0
    for now in range(3000, 2 * REVOKE_TIMEOUT, 3000):
        response = send(group, "a", response.member_epoch, now)
        send(group, "c", epoch_of(group, "c"), now)
        group.tick(now)
        assert response.status in (Status.OK, Status.REVOKE_PENDING)
    assert "a" in group.members
    assert assigned(send(group, "c", epoch_of(group, "c"), now)) == moving


# --- H8 stale ownership ------------------------------------------------------------------


def test_h8_owning_a_pending_shard_is_fenced():
    group, kept, moving = a_holds_all_then_b_joins()
    send(group, "b", 2)
    response = unchanged_by(group, lambda: send(group, "b", 2, owned=[min(moving)]))
    assert response.status == Status.FENCED_MEMBER_EPOCH


def test_h8_owning_a_shard_held_by_another_live_member_is_fenced():
    group = stable_group("a", "b")
    theirs = sorted(group.members["b"].held)
    response = unchanged_by(group, lambda: send(group, "a", epoch_of(group, "a"), owned=theirs))
    assert response.status == Status.FENCED_MEMBER_EPOCH


def test_h8_owning_an_unknown_shard_is_fenced():
    group = stable_group("a")
    response = unchanged_by(group, lambda: send(group, "a", epoch_of(group, "a"),
                                                owned=SHARDS + ["orders:v7:0"]))
    assert response.status == Status.FENCED_MEMBER_EPOCH


def test_h8_owning_a_shard_no_longer_the_members_is_fenced():
    group, kept, moving = a_holds_all_then_b_joins()
    send(group, "a", 1)
    send(group, "a", 1, revoked=[min(moving)], revoking=[max(moving)])
    response = unchanged_by(group, lambda: send(group, "a", 1, owned=SHARDS, revoking=[max(moving)]))
    assert response.status == Status.FENCED_MEMBER_EPOCH


def test_h8_repeated_revoked_is_ignored_not_fenced():
    group, kept, moving = a_holds_all_then_b_joins()
    first, second = sorted(moving)
    send(group, "a", 1)
    send(group, "a", 1, revoked=[first], revoking=[second])
    assert first in assigned(send(group, "b", 2))  # already someone else's
    # REVOKED repeats until an OK answers it
    response = send(group, "a", 1, owned=sorted(kept | {second}), revoked=[first], revoking=[second])
    assert response.status == Status.REVOKE_PENDING
    assert group.owners[first] == "b"
    response = send(group, "a", 1, owned=sorted(kept), revoked=[first, second])
    assert response.status == Status.OK
    # a REVOKED repeated once more after the OK is still harmless
    response = unchanged_by(group, lambda: send(group, "a", 2, revoked=[first, second]))
    assert response.status == Status.OK and assigned(response) == kept


def test_h8_revoked_for_a_shard_the_member_is_not_revoking_is_ignored():
    group = stable_group("a", "b")
    mine = sorted(group.members["a"].held)
    response = unchanged_by(group, lambda: send(group, "a", epoch_of(group, "a"), revoked=mine))
    assert response.status == Status.OK and assigned(response) == set(mine)


def test_h8_revoked_shard_is_released_even_if_owned_still_names_it():
    group, kept, moving = a_holds_all_then_b_joins()
    send(group, "a", 1)
    response = send(group, "a", 1, owned=SHARDS, revoked=sorted(moving))
    assert response.status == Status.OK
    assert group.members["a"].held == kept


# --- H9 leave -------------------------------------------------------------------------------


def test_h9_leave_frees_shards_at_once_and_answers_ok_with_epoch_minus_one():
    group = stable_group("a", "b")
    before = group.group_epoch
    response = send(group, "a", LEAVE_EPOCH)
    assert response.status == Status.OK and response.member_epoch == LEAVE_EPOCH
    assert "a" not in group.members
    assert group.group_epoch == before + 1
    assert not any(owner == "a" for owner in group.owners.values())
    assert assigned(send(group, "b", epoch_of(group, "b"))) == set(SHARDS)


def test_h9_leave_while_revoking_frees_everything_at_once():
    group, kept, moving = a_holds_all_then_b_joins()
    send(group, "a", 1)
    assert send(group, "a", LEAVE_EPOCH).status == Status.OK
    assert assigned(send(group, "b", epoch_of(group, "b"))) == set(SHARDS)


def test_h9_leave_of_a_member_the_coordinator_no_longer_knows_is_ok_minus_one():
    group = stable_group("a")
    send(group, "b", LEAVE_EPOCH)  # never joined
    response = unchanged_by(group, lambda: send(group, "b", LEAVE_EPOCH))
    assert response.status == Status.OK and response.member_epoch == LEAVE_EPOCH
    join(group, "c")
    send(group, "c", LEAVE_EPOCH)
    response = unchanged_by(group, lambda: send(group, "c", LEAVE_EPOCH))  # a retried leave
    assert response.status == Status.OK and response.member_epoch == LEAVE_EPOCH


# --- H10 push ---------------------------------------------------------------------------------


def targets(group):
    return {mid: target_of(group, mid) for mid in group.members}


def changed_targets(before, after):
    return {mid for mid in after if before.get(mid, set()) != after[mid]}


# H10 reading: a push goes to every member whose next answer changes in substance: its
# target, a pending shard freed, its maxConcurrency or the routing. A member whose target
# an epoch bump leaves alone is not pushed at the bump; pushing all N members on every join
# or leave would make each one cost N heartbeats. It moves to the new epoch on its next
# regular heartbeat (H4), unless it is a newcomer (joined less than two heartbeat intervals
# ago): once the epoch has settled, the catch-up pushes newcomers still behind it.


def test_h10_join_pushes_the_members_whose_target_changes_not_the_joiner():
    group = new_group(shard_ids(6))
    join(group, "a")
    assert group.take_effects().pushes == set()
    join(group, "b")
    assert group.take_effects().pushes == {"a"}
    send(group, "a", epoch_of(group, "a"))  # the heartbeat the push brings
    send(group, "b", epoch_of(group, "b"))
    before = targets(group)
    join(group, "c")
    pushed = group.take_effects().pushes
    assert pushed == changed_targets(before, targets(group)) - {"c"}
    assert pushed and "c" not in pushed


def test_h10_a_member_is_not_pushed_again_before_it_answers_its_last_push():
    group = new_group(shard_ids(12))
    join(group, "a")
    join(group, "b")
    assert group.take_effects().pushes == {"a"}
    before = targets(group)
    join(group, "c")  # a's target shrinks again before its heartbeat
    assert "a" in changed_targets(before, targets(group))
    assert group.take_effects().pushes == {"b"}  # a's own heartbeat will carry it
    response = send(group, "a", epoch_of(group, "a"))
    assert set(response.assignment.assigned_shards) | set(response.assignment.pending_shards) \
        <= target_of(group, "a")  # that heartbeat is told the latest target
    send(group, "b", epoch_of(group, "b"))
    before = targets(group)
    join(group, "d")  # both answered: pushed again
    assert group.take_effects().pushes == changed_targets(before, targets(group)) - {"d"}
    assert {"a", "b"} <= changed_targets(before, targets(group))


def test_h10_a_push_is_dropped_when_the_member_heartbeats_later_in_the_same_batch():
    group = new_group(shard_ids(6))
    join(group, "a")
    group.take_effects()
    join(group, "b")  # a's target changes: a push is queued for a
    send(group, "a", epoch_of(group, "a"))  # a's answer, in the same batch, already says so
    assert group.take_effects().pushes == set()
    join(group, "c")
    assert "a" in group.take_effects().pushes  # answered: the next change is pushed again


def test_h10_join_does_not_push_members_whose_target_stays():
    group = stable_group("a", "b", "c")  # 4 shards: one member holds only one
    before = targets(group)
    join(group, "d")
    pushed = group.take_effects().pushes
    untouched = {mid for mid in before if before[mid] == target_of(group, mid)}
    assert untouched, "the scenario needs a member the join leaves alone"
    assert not pushed & untouched
    assert pushed == changed_targets(before, targets(group)) - {"d"}


def lagging(group: GroupMachine) -> set[str]:
    """Members behind the assignment epoch that hold their target: only their next
    heartbeat, regular or brought by a catch-up push, moves them to it."""
    return {mid for mid, member in group.members.items()
            if member.member_epoch != group.assignment_epoch
            and group.member_state(member) == MemberState.STABLE}


def finish_moves(group: GroupMachine, now: int) -> None:
    """The members that revoke or wait for a shard report until they are done; the others
    do not beat."""
    for _ in range(5):
        moving = [mid for mid, member in sorted(group.members.items())
                  if group.member_state(member) != MemberState.STABLE]
        if not moving:
            return
        for member_id in moving:
            report(group, member_id, now)
    raise AssertionError("the moves did not finish")


def storm_then_one_more(now: int) -> GroupMachine:
    """a, b, c join and settle at `now`; d joins at `now` + 1, one of them gives d a shard,
    and the others are left behind the epoch with their targets unchanged."""
    group = stable_group("a", "b", "c", now=now)  # 4 shards: a holds 2, b and c 1
    join(group, "d", now=now + 1)
    finish_moves(group, now + 1)
    group.take_effects()
    assert lagging(group), "the scenario needs a member the join leaves alone"
    return group


def catch_up_at(group: GroupMachine, now: int) -> set[str]:
    group.tick(now)  # the machine's clock, as a tick sets it
    group.catch_up()
    return group.take_effects().pushes


def test_h10_catch_up_pushes_newcomers_a_settled_epoch_left_behind():
    group = storm_then_one_more(now=1000)
    settle_ms = group.catch_up_settle_ms
    assert settle_ms == 250  # a quarter of the 3 s interval, at most 250 ms
    behind = lagging(group)
    assert catch_up_at(group, 1001 + settle_ms - 1) == set()  # not settled long enough
    assert catch_up_at(group, 1001 + settle_ms) == behind
    assert not group.newcomers  # each is pushed once at most
    assert catch_up_at(group, 1001 + 3 * settle_ms) == set()
    for member_id in behind:  # the heartbeat the push brings moves it to the epoch
        response = send(group, member_id, epoch_of(group, member_id), 1001 + 3 * settle_ms)
        assert response.status == Status.OK and response.member_epoch == group.assignment_epoch
    assert lagging(group) == set()
    assert catch_up_at(group, 1001 + 5 * settle_ms) == set()


def test_h10_catch_up_waits_while_newcomers_still_move_shards():
    group = stable_group("a", "b", "c", now=1000)
    join(group, "d", now=1001)  # a revokes a shard for d, which waits for it
    group.take_effects()
    behind = lagging(group)
    assert behind
    settle_ms = group.catch_up_settle_ms
    assert catch_up_at(group, 1001 + settle_ms) == set()
    finish_moves(group, 1001 + settle_ms)
    group.take_effects()
    assert catch_up_at(group, 1001 + 2 * settle_ms - 1) == set()  # a settle time after a look
    assert catch_up_at(group, 1001 + 2 * settle_ms) == behind == lagging(group)


def test_h10_catch_up_waits_while_the_epoch_keeps_moving():
    group = storm_then_one_more(now=1000)
    settle_ms = group.catch_up_settle_ms
    join(group, "e", now=1001 + settle_ms - 1)  # the epoch moves again
    group.take_effects()
    assert catch_up_at(group, 1001 + settle_ms) == set()
    assert catch_up_at(group, 1001 + 2 * settle_ms - 1) == lagging(group) != set()


def test_h10_catch_up_pushes_a_newcomer_once_and_leaves_established_members_alone():
    group = stable_group("a", "b", "c", now=1000)
    settle_ms = group.catch_up_settle_ms
    assert catch_up_at(group, 1000 + settle_ms) == set()  # all at the epoch: newcomers no more
    assert not group.newcomers
    join(group, "d", now=2000)
    finish_moves(group, 2000)
    group.take_effects()
    behind = lagging(group)
    assert behind and "d" not in behind
    assert catch_up_at(group, 2000 + settle_ms) == set()
    # pushing them would line their heartbeat phases up into one burst (docs/architecture.md);
    # they reach the epoch with their next regular heartbeat
    for member_id in behind:
        response = send(group, member_id, epoch_of(group, member_id), 2000 + 3000)
        assert response.member_epoch == group.assignment_epoch


def test_h10_catch_up_leaves_out_members_with_something_else_to_do():
    group, kept, moving = a_holds_all_then_b_joins()  # a revokes, b waits for the shards
    assert "a" not in lagging(group)
    pushed = catch_up_at(group, 9_000)
    assert "a" not in pushed  # asked to revoke, it heartbeats to release anyway
    assert group.members["a"].member_epoch != group.assignment_epoch
    assert send(group, "a", epoch_of(group, "a"), 9_000).status == Status.REVOKE_PENDING
    done = send(group, "a", epoch_of(group, "a"), 9_000, revoked=sorted(moving))
    assert done.status == Status.OK and done.member_epoch == group.assignment_epoch


def test_h10_catch_up_forgets_members_that_left_and_restored_ones_are_not_newcomers():
    group = storm_then_one_more(now=1000)
    behind = sorted(lagging(group))
    send(group, behind[0], LEAVE_EPOCH, 1002)
    assert behind[0] not in group.newcomers
    restored = GroupMachine.from_record(PREFIX, GROUP, SETTINGS, group.to_record(),
                                        SHARDS, 5000)
    assert not restored.newcomers  # a restart: they beat at their own phases already
    assert catch_up_at(restored, 5000 + restored.catch_up_settle_ms) == set()


def test_h10_catch_up_settle_is_a_quarter_interval_at_most_250_ms():
    fast = GroupMachine(PREFIX, GROUP, GroupSettings(heartbeat_interval_ms=200), SHARDS)
    assert fast.catch_up_settle_ms == 50
    assert new_group().catch_up_settle_ms == 250


def test_h10_release_pushes_the_member_waiting_for_the_shard_not_the_releaser():
    group, kept, moving = a_holds_all_then_b_joins()
    send(group, "b", 2)
    send(group, "a", 1)
    assert group.take_effects().pushes == set()  # asking a to revoke changes nobody else's answer
    send(group, "a", 1, revoked=[min(moving)], revoking=[max(moving)])
    assert group.take_effects().pushes == {"b"}


def test_h10_heartbeat_that_changes_nothing_pushes_nobody():
    group = stable_group("a", "b")
    send(group, "a", epoch_of(group, "a"))
    send(group, "a", epoch_of(group, "a"), owned=sorted(group.members["a"].held))
    assert group.take_effects().pushes == set()


def test_h10_capacity_change_grows_the_epoch_but_changes_no_one_elses_answer():
    group = stable_group("a", "b", "c")
    epoch = group.group_epoch
    send(group, "a", epoch_of(group, "a"), capacity=3)
    assert group.group_epoch == epoch + 1
    assert group.take_effects().pushes == set()


@pytest.mark.parametrize("change", ["max_concurrency", "routing"])
def test_h10_routing_and_max_concurrency_changes_push_every_member(change):
    group = stable_group("a", "b", "c")
    if change == "max_concurrency":
        group.set_max_concurrency(2)
    else:
        group.set_shards(shard_ids(8, version=2))
    assert group.take_effects().pushes == {"a", "b", "c"}


@pytest.mark.parametrize("change", ["removal", "expiry", "leave"])
def test_h10_a_departure_pushes_the_members_that_take_over_its_shards(change):
    group = stable_group("a", "b", "c")
    before = targets(group)
    if change == "removal":
        group.remove_member("c", 0)
    elif change == "expiry":
        send(group, "a", epoch_of(group, "a"), LEASE)
        send(group, "b", epoch_of(group, "b"), LEASE)
        group.tick(LEASE + 1)
    else:
        send(group, "c", LEAVE_EPOCH)
    pushed = group.take_effects().pushes
    gainers = {mid for mid in group.members if target_of(group, mid) - before[mid]}
    assert gainers and pushed == gainers
    assert "c" not in pushed


# --- H11 concurrency ----------------------------------------------------------------------------


def test_h11_max_concurrency_is_the_min_of_group_setting_and_capacity():
    group = new_group()
    assert join(group, "a").max_concurrency is None
    assert join(group, "b", capacity=8).max_concurrency == 8
    group.set_max_concurrency(4)
    assert send(group, "a", epoch_of(group, "a")).max_concurrency == 4
    assert send(group, "b", epoch_of(group, "b")).max_concurrency == 4
    assert send(group, "b", epoch_of(group, "b"), capacity=2).max_concurrency == 2
    group.set_max_concurrency(None)
    assert send(group, "a", epoch_of(group, "a")).max_concurrency is None
    assert send(group, "b", epoch_of(group, "b")).max_concurrency == 2


def test_h11_describe_shows_the_group_setting_not_the_effective_value():
    group = new_group()
    join(group, "a", capacity=2)
    assert group.describe(0, routing_of(group), None).max_concurrency is None
    group.set_max_concurrency(5)
    assert group.describe(0, routing_of(group), None).max_concurrency == 5


# --- H12 durable first -------------------------------------------------------------------------


def mid_rebalance_group() -> GroupMachine:
    group, kept, moving = a_holds_all_then_b_joins()
    send(group, "a", 1, capacity=3)
    send(group, "a", 1, revoked=[min(moving)], revoking=[max(moving)])
    send(group, "b", epoch_of(group, "b"))
    group.set_max_concurrency(2)
    group.take_effects()
    return group


def reload(group: GroupMachine, now: int) -> GroupMachine:
    """The group as a restarted coordinator restores it from its records."""
    return GroupMachine.from_record(PREFIX, GROUP, SETTINGS, group.to_record(), group.shards, now)


def test_h12_record_round_trips_through_the_hash_and_from_record():
    group = mid_rebalance_group()
    record = group.to_record()
    snapshot = replay({k: v for k, v in encode(changes_of(
        PrefixSnapshot(groups={GROUP: record}))).items() if v is not None})
    assert snapshot.groups[GROUP] == record
    restored = GroupMachine.from_record(PREFIX, GROUP, SETTINGS, snapshot.groups[GROUP],
                                        group.shards, 5000)
    assert restored.to_record() == record
    assert restored.owners == group.owners
    assert restored.state == group.state


def test_h12_restart_members_get_sync_metadata_until_a_full_report():
    group = mid_rebalance_group()
    a, b = group.members["a"], group.members["b"]
    a_epoch, a_assigned, b_epoch = a.member_epoch, set(a.assigned), b.member_epoch
    group = reload(group, 1000)
    for _ in range(2):
        response = unchanged_by(group, lambda: send(group, "a", a_epoch, 1000))
        assert response.status == Status.SYNC_METADATA
        assert response.member_epoch == a_epoch and assigned(response) == a_assigned
    response = send(group, "a", a_epoch, 1000, owned=sorted(group.members["a"].held))
    assert response.status in (Status.OK, Status.REVOKE_PENDING)
    assert send(group, "a", response.member_epoch, 1000).status == response.status
    # b is still owed its full report
    assert send(group, "b", b_epoch, 1000).status == Status.SYNC_METADATA


def test_h12_restart_members_carry_on_with_their_epochs_without_rejoining():
    group = stable_group("a", "b")
    epochs = {mid: epoch_of(group, mid) for mid in "ab"}
    group_epoch = group.group_epoch
    group = reload(group, 1000)
    for member_id in "ab":
        response = send(group, member_id, epochs[member_id], 1000,
                        owned=sorted(group.members[member_id].held))
        assert response.status == Status.OK and response.member_epoch == epochs[member_id]
    assert group.group_epoch == group_epoch and group.state == GroupState.STABLE


def test_h12_restart_gives_every_member_a_fresh_lease():
    group = stable_group("a", "b", now=0)
    group = reload(group, 9000)
    group.tick(LEASE + 1)
    assert set(group.members) == {"a", "b"}
    group.tick(9000 + LEASE + 1)
    assert not group.members


def test_h12_restart_restarts_the_revoke_clock():
    group, kept, moving = a_holds_all_then_b_joins()
    send(group, "a", 1, 0)  # revoke clock starts at 0
    group = reload(group, 50_000)
    for now in range(55_000, 50_000 + REVOKE_TIMEOUT + 1, 5000):
        send(group, "a", 1, now, owned=SHARDS, revoking=sorted(moving))
        send(group, "b", 2, now)
        group.tick(now)
    assert "a" in group.members
    group.tick(50_000 + REVOKE_TIMEOUT + 1)
    assert "a" not in group.members


def test_h12_rollback_restores_the_record_and_keeps_liveness():
    group = stable_group("a", "b")
    send(group, "a", epoch_of(group, "a"), 1000)
    send(group, "b", epoch_of(group, "b"), 8000)
    record = group.to_record()
    send(group, "b", LEAVE_EPOCH, 8000)  # its write fails: roll back
    join(group, "c", 8000)
    group.restore(record, group.shards, 8000, restart=False)
    assert group.to_record() == record
    assert set(group.members) == {"a", "b"}
    assert group.members["a"].last_heartbeat_ms == 1000
    assert group.owners == {shard: mid for mid, mb in group.members.items() for shard in mb.held}
    # no SYNC_METADATA after a rollback: liveness and reports are kept
    assert send(group, "b", epoch_of(group, "b"), 8000).status == Status.OK
    group.tick(1000 + LEASE + 1)
    assert set(group.members) == {"b"}


def test_h12_every_revealed_change_asks_the_shell_to_persist():
    group = new_group()

    def persisted(action) -> None:
        before = group.to_record()
        group.take_effects()
        action()
        if group.to_record() != before:
            assert group.take_effects().dirty

    persisted(lambda: join(group, "a"))
    persisted(lambda: join(group, "b"))
    persisted(lambda: send(group, "a", 1))
    persisted(lambda: send(group, "a", 1, revoked=sorted(target_of(group, "b"))))
    persisted(lambda: send(group, "b", 2))
    persisted(lambda: group.set_max_concurrency(3))
    persisted(lambda: group.set_shards(shard_ids(6)))
    persisted(lambda: group.remove_member("b", 0))
    persisted(lambda: group.tick(LEASE + 1))


# --- H13 groups appear on first join -------------------------------------------------------------


def test_h13_join_before_routing_gets_ok_with_no_shards():
    group = new_group(shards=())
    response = join(group, "a")
    assert response.status == Status.OK and response.member_epoch == 1
    assert response.routing is None
    assert assigned(response) == set() and pending(response) == set()
    assert group.state == GroupState.STABLE
    assert send(group, "a", 1, owned=[]).status == Status.OK


def test_h13_shards_that_appear_later_are_assigned():
    group = new_group(shards=())
    join(group, "a")
    join(group, "b")
    group.take_effects()
    group.set_shards(SHARDS)
    assert group.take_effects().pushes == {"a", "b"}
    responses = [send(group, mid, epoch_of(group, mid)) for mid in "ab"]
    assert all(r.status == Status.OK and r.routing is not None for r in responses)
    assert assigned(responses[0]) | assigned(responses[1]) == set(SHARDS)
    assert len(assigned(responses[0])) == len(assigned(responses[1])) == 2


# --- H14 revoke timeout ----------------------------------------------------------------------------


def test_h14_revoke_timeout_removes_member_and_next_heartbeat_is_fenced():
    group, kept, moving = a_holds_all_then_b_joins()
    started = 5000
    assert send(group, "a", 1, started).status == Status.REVOKE_PENDING  # the clock starts here
    deadline = started + REVOKE_TIMEOUT
    for now in range(started + 5000, deadline + 1, 5000):
        send(group, "a", 1, now, revoking=sorted(moving))
        send(group, "b", 2, now)
        group.tick(now)
    assert "a" in group.members  # at the timeout exactly: still in
    group.take_effects()
    before = group.group_epoch
    group.tick(deadline + 1)
    effects = group.take_effects()
    assert "a" not in group.members
    assert group.group_epoch == before + 1
    assert ("revoke_timeout", "a") in [(e.kind, e.member_id) for e in effects.events]
    assert assigned(send(group, "b", epoch_of(group, "b"), deadline + 1)) == set(SHARDS)
    response = unchanged_by(group, lambda: send(group, "a", 1, deadline + 2, revoking=sorted(moving)))
    assert response.status == Status.FENCED_MEMBER_EPOCH
    # it may rejoin
    assert join(group, "a", deadline + 3).status == Status.OK


def test_h14_revoke_clock_starts_with_the_first_response_asking_to_revoke_not_the_target_change():
    group, kept, moving = a_holds_all_then_b_joins()  # target changed at 0
    send(group, "a", 1, 9000)  # first REVOKE_PENDING at 9000
    for now in range(14_000, 9000 + REVOKE_TIMEOUT + 1, 5000):
        send(group, "a", 1, now)
        group.tick(now)
    assert "a" in group.members


def test_h14_finishing_the_revocation_stops_the_clock():
    group, kept, moving = a_holds_all_then_b_joins()
    send(group, "a", 1, 0)
    send(group, "a", 1, 1000, revoked=sorted(moving))
    for now in range(5000, 3 * REVOKE_TIMEOUT, 5000):
        send(group, "a", 2, now)
        send(group, "b", 2, now)
        group.tick(now)
    assert set(group.members) == {"a", "b"}


def test_h14_a_partial_release_keeps_the_clock_running():
    group, kept, moving = a_holds_all_then_b_joins()
    first, second = sorted(moving)
    send(group, "a", 1, 0)
    send(group, "a", 1, 1000, revoked=[first], revoking=[second])
    for now in range(5000, REVOKE_TIMEOUT + 1, 5000):
        send(group, "a", 1, now, revoking=[second])
        send(group, "b", 2, now)
        group.tick(now)
    group.tick(REVOKE_TIMEOUT + 1)
    assert "a" not in group.members
