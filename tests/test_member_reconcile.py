"""Pure tests of the member reconciliation: one named test per member obligation of
docs/protocol.md."""

from __future__ import annotations

import json

import attrs
import pytest

from rsc.member.pure.reconcile import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    NO_ACTIONS,
    EventName,
    Hold,
    MemberState,
    Phase,
)
from rsc.protocol import Assignment, HeartbeatResponse, RevokingShard, Status

PREFIX, GROUP, MEMBER = "orders", "billing", "10.0.0.7-42-0-abcd"


def respond(status: Status, epoch: int | None = 5, assigned=(), pending=(),
            max_concurrency: int | None = 4) -> HeartbeatResponse:
    if status not in (Status.OK, Status.REVOKE_PENDING, Status.SYNC_METADATA):
        return HeartbeatResponse(request_id=1, status=status, member_id=MEMBER, error="nope")
    return HeartbeatResponse(
        request_id=1, status=status, member_id=MEMBER, member_epoch=epoch, group_epoch=epoch,
        assignment_epoch=epoch, heartbeat_interval_ms=200, lease_ttl_ms=1000,
        max_concurrency=max_concurrency,
        assignment=Assignment(assigned_shards=tuple(assigned), pending_shards=tuple(pending)))


def beat(state: MemberState, now: float = 0.0):
    return state.heartbeat(now, capacity=8, stream_prefix=PREFIX, consumer_group=GROUP)


def exchange(state: MemberState, response: HeartbeatResponse, now: float = 0.0):
    _, sent = beat(state, now)
    return state.on_response(sent, response)


def joined_with(*shards: str, epoch: int = 5) -> MemberState:
    state, _ = exchange(MemberState(member_id=MEMBER), respond(Status.OK, epoch, shards))
    return exchange(state, respond(Status.OK, epoch, shards))[0]  # full ownership reported


# --- the heartbeat request -----------------------------------------------------------------


def test_join_sends_epoch_zero_and_empty_ownership():
    request, sent = beat(MemberState(member_id=MEMBER))
    assert request.member_epoch == JOIN_EPOCH
    assert request.owned_shards == ()
    assert request.revoking_shards == ()
    assert request.capacity == 8
    assert sent.full_ownership


def test_unchanged_holding_is_sent_as_null_ownership():
    state = joined_with("a", "b")
    request, _ = beat(state)
    assert request.member_epoch == 5
    assert request.owned_shards is None


def test_changed_holding_is_sent_in_full():
    state, _ = exchange(MemberState(member_id=MEMBER), respond(Status.OK, 5, ["a", "b"]))
    request, _ = beat(state)
    assert request.owned_shards == ("a", "b")


# --- OK --------------------------------------------------------------------------------


def test_ok_on_join_starts_every_assigned_shard_and_emits_joined():
    state, actions = exchange(MemberState(member_id=MEMBER), respond(Status.OK, 5, ["a", "b"]))
    assert actions.start == {"a", "b"}
    assert state.reading() == {"a", "b"}
    assert state.member_epoch == 5
    assert state.max_concurrency == 4
    assert [e.name for e in actions.events] == ["joined", "assigned"]


def test_ok_does_not_start_pending_shards():
    state, actions = exchange(MemberState(member_id=MEMBER),
                              respond(Status.OK, 5, ["a"], pending=["b"]))
    assert actions.start == {"a"}
    assert state.owned() == {"a"}


def test_ok_revokes_owned_shards_not_listed():
    state, actions = exchange(joined_with("a", "b"), respond(Status.OK, 6, ["a"]))
    assert actions.revoke == {"b"}
    assert state.reading() == {"a"}
    assert state.revoking() == {"b"}
    assert actions.heartbeat_now


def test_ok_keeps_generation_of_shards_it_keeps():
    before = joined_with("a", "b")
    after, actions = exchange(before, respond(Status.OK, 6, ["a", "b", "c"]))
    assert actions.start == {"c"}
    assert after.holds["a"] == before.holds["a"]


def test_ok_reassigning_a_draining_shard_resumes_it():
    state, _ = exchange(joined_with("a", "b"), respond(Status.REVOKE_PENDING, 5, ["a"]))
    state, actions = exchange(state, respond(Status.OK, 6, ["a", "b"]))
    assert actions.resume == {"b"} and actions.start == frozenset()
    assert state.reading() == {"a", "b"}


def test_ok_drops_revoked_entries_it_reported():
    state, _ = exchange(joined_with("a", "b"), respond(Status.REVOKE_PENDING, 5, ["a"]))
    state, _ = state.on_drained("b")
    request, sent = beat(state)
    assert RevokingShard(shard="b", state="REVOKED") in request.revoking_shards
    state, _ = state.on_response(sent, respond(Status.OK, 6, ["a"]))
    assert state.revoked == frozenset()
    assert beat(state)[0].revoking_shards == ()


def test_revoked_entry_drained_after_the_request_is_kept_for_the_next_heartbeat():
    state, _ = exchange(joined_with("a", "b", "c"), respond(Status.REVOKE_PENDING, 5, ["a"]))
    state, _ = state.on_drained("b")
    _, sent = beat(state)
    state, _ = state.on_drained("c")
    state, _ = state.on_response(sent, respond(Status.OK, 6, ["a"]))
    assert state.revoked == {"c"}


def test_revoked_entries_repeat_until_an_ok():
    state, _ = exchange(joined_with("a", "b"), respond(Status.REVOKE_PENDING, 5, ["a"]))
    state, _ = state.on_drained("b")
    state, _ = exchange(state, respond(Status.REVOKE_PENDING, 5, ["a"]))
    assert RevokingShard(shard="b", state="REVOKED") in beat(state)[0].revoking_shards


# --- REVOKE_PENDING and SYNC_METADATA: drain-only ---------------------------------------


def test_revoke_pending_keeps_listed_revokes_rest_starts_nothing():
    state, actions = exchange(joined_with("a", "b"), respond(Status.REVOKE_PENDING, 5, ["a", "c"]))
    assert actions.revoke == {"b"}
    assert actions.start == frozenset()
    assert state.reading() == {"a"}
    assert "c" not in state.owned()


def test_revoke_pending_reports_revoking_then_revoked_with_full_ownership():
    state, _ = exchange(joined_with("a", "b"), respond(Status.REVOKE_PENDING, 5, ["a"]))
    request, _ = beat(state)
    assert request.revoking_shards == (RevokingShard(shard="b", state="REVOKING"),)
    assert request.owned_shards == ("a", "b")
    state, actions = state.on_drained("b")
    assert actions.heartbeat_now
    request, _ = beat(state)
    assert request.revoking_shards == (RevokingShard(shard="b", state="REVOKED"),)
    assert request.owned_shards == ("a",)


def test_sync_metadata_is_drain_only_and_asks_for_a_full_heartbeat_at_once():
    state, actions = exchange(joined_with("a", "b"), respond(Status.SYNC_METADATA, 5, ["a", "c"]))
    assert actions.revoke == {"b"} and actions.start == frozenset()
    assert actions.heartbeat_now
    assert beat(state)[0].owned_shards == ("a", "b")


def test_sync_metadata_without_changes_still_sends_full_ownership():
    state, actions = exchange(joined_with("a"), respond(Status.SYNC_METADATA, 5, ["a"]))
    assert actions.heartbeat_now
    assert beat(state)[0].owned_shards == ("a",)


def test_sync_metadata_does_not_renew_the_lease():
    state = joined_with("a")
    later, _ = exchange(state, respond(Status.SYNC_METADATA, 5, ["a"]), now=500)
    assert later.last_accepted_sent_at == state.last_accepted_sent_at == 0.0


# --- UNKNOWN_MEMBER_ID and FENCED_MEMBER_EPOCH --------------------------------------------


@pytest.mark.parametrize("status", [Status.UNKNOWN_MEMBER_ID, Status.FENCED_MEMBER_EPOCH])
def test_losing_membership_abandons_everything_and_rejoins_at_epoch_zero(status):
    state, _ = exchange(joined_with("a", "b", "c"), respond(Status.REVOKE_PENDING, 5, ["a", "b"]))
    state, _ = state.on_drained("c")
    state, actions = exchange(state, respond(status))
    assert actions.abandon == {"a", "b"}
    assert actions.heartbeat_now
    assert state.owned() == frozenset() and state.revoked == frozenset()
    assert state.member_epoch == JOIN_EPOCH and "a" not in state.holds
    request, _ = beat(state)
    assert (request.member_id, request.member_epoch, request.owned_shards,
            request.revoking_shards) == (MEMBER, JOIN_EPOCH, (), ())
    assert [e.name for e in actions.events] == ["fenced"]


def test_rejoin_after_fencing_starts_shards_with_new_generations():
    before = joined_with("a")
    state, _ = exchange(before, respond(Status.FENCED_MEMBER_EPOCH))
    state, actions = exchange(state, respond(Status.OK, 9, ["a"]))
    assert actions.start == {"a"}
    assert state.holds["a"].generation != before.holds["a"].generation


def test_response_to_a_heartbeat_sent_before_fencing_is_ignored():
    state = joined_with("a")
    _, sent = beat(state, now=500)
    fenced, _ = state.on_abandon("no heartbeat accepted for a lease TTL")
    after, actions = fenced.on_response(sent, respond(Status.OK, 5, ["a"]))
    assert (after, actions) == (fenced, NO_ACTIONS)


# --- COORDINATOR_NOT_AVAILABLE and INVALID_REQUEST ------------------------------------------


@pytest.mark.parametrize("status", [Status.COORDINATOR_NOT_AVAILABLE, Status.INVALID_REQUEST])
def test_unavailable_or_invalid_changes_nothing(status):
    state = joined_with("a")
    after, actions = exchange(state, respond(status), now=500)
    assert (after, actions) == (state, NO_ACTIONS)


# --- what the heartbeat answers record: the lease clock's input (D1 itself is the ledger's) ---


def test_an_accepted_answer_records_when_its_heartbeat_was_sent():
    state, _ = exchange(MemberState(member_id=MEMBER), respond(Status.OK, 5, ["a"]), now=2000)
    assert (state.last_accepted_sent_at, state.lease_ttl_ms) == (2000, 1000)


@pytest.mark.parametrize("status", [Status.COORDINATOR_NOT_AVAILABLE, Status.INVALID_REQUEST,
                                    Status.GROUP_MAX_SIZE_REACHED])
def test_h6_a_rejected_heartbeat_records_no_send_time(status):
    state = joined_with("a")
    later, _ = exchange(state, respond(status), now=700)
    assert later.last_accepted_sent_at != 700


def test_abandon_lets_every_shard_go_and_rejoins():
    state = joined_with("a", "b")
    fenced, actions = state.on_abandon("drain timed out on leave")
    assert actions.abandon == {"a", "b"} and actions.heartbeat_now
    assert fenced.member_epoch == JOIN_EPOCH and fenced.owned() == frozenset()
    assert [(e.name, e.reason) for e in actions.events] == [(EventName.FENCED,
                                                             "drain timed out on leave")]


# --- ownership kept while draining --------------------------------------------------------------


def test_draining_shard_stays_held_at_its_generation_until_drained():
    state = joined_with("a", "b")
    generation = state.holds["b"].generation
    state, _ = exchange(state, respond(Status.REVOKE_PENDING, 5, ["a"]))
    assert state.holds["b"] == Hold(Phase.REVOKING, generation)
    state, _ = state.on_drained("b")
    assert "b" not in state.holds and "b" in state.revoked


def test_refused_ack_drops_only_that_shard_and_reports_full_ownership():
    state, actions = joined_with("a", "b").on_ack_refused("b")
    assert actions.abandon == {"b"}
    assert state.owned() == {"a"}
    assert beat(state)[0].owned_shards == ("a",)


def test_drained_is_ignored_for_a_shard_not_revoking():
    state = joined_with("a")
    assert state.on_drained("a") == (state, NO_ACTIONS)
    assert state.on_drained("zzz") == (state, NO_ACTIONS)


# --- session loss and leave -----------------------------------------------------------------


def test_new_session_reports_full_ownership():
    state = joined_with("a").on_session_lost()
    assert beat(state)[0].owned_shards == ("a",)


def test_leave_revokes_everything_then_sends_epoch_minus_one_once_drained():
    state, actions = joined_with("a", "b").on_leave_requested()
    assert actions.revoke == {"a", "b"}
    assert beat(state)[0].member_epoch == 5
    state, _ = exchange(state, respond(Status.OK, 5, ["a", "b"]))
    assert state.reading() == frozenset(), "a leaving member starts nothing"
    state, _ = state.on_drained("a")
    state, _ = state.on_drained("b")
    request, sent = beat(state)
    assert request.member_epoch == LEAVE_EPOCH
    state, actions = state.on_response(sent, attrs.evolve(respond(Status.OK, LEAVE_EPOCH)))
    assert state.member_epoch == LEAVE_EPOCH and state.left
    assert [e.name for e in actions.events] == ["left"]


def test_leave_answered_unknown_member_still_counts_as_left():
    state, _ = MemberState(member_id=MEMBER, member_epoch=5, joined=True).on_leave_requested()
    request, sent = beat(state)
    assert request.member_epoch == LEAVE_EPOCH
    state, actions = state.on_response(sent, respond(Status.UNKNOWN_MEMBER_ID))
    assert [e.name for e in actions.events] == ["left"]


def test_holds_are_tagged_with_distinct_generations():
    state = joined_with("a", "b", "c")
    generations = [hold.generation for hold in state.holds.values()]
    assert len(set(generations)) == 3
    assert all(isinstance(h, Hold) and h.phase is Phase.READING for h in state.holds.values())


# --- A1: a join refused by a cap of the coordinator -------------------------------------------

CAPS = [Status.GROUP_MAX_SIZE_REACHED, Status.GROUP_LIMIT_REACHED]


@pytest.mark.parametrize("status", CAPS)
def test_join_refused_by_a_cap_holds_nothing_and_says_so(status):
    state, actions = exchange(MemberState(member_id=MEMBER), respond(status))
    assert state.holds == {}
    assert state.member_epoch == JOIN_EPOCH
    assert not state.joined
    assert state.join_refused is status
    assert actions.start == frozenset() and actions.abandon == frozenset()
    assert not actions.heartbeat_now  # the shell waits its backoff first
    assert [(e.name, e.reason) for e in actions.events] == [("join refused", f"{status.value}: nope")]


@pytest.mark.parametrize("status", CAPS)
def test_join_refused_again_rejoins_at_epoch_zero_and_is_said_once(status):
    state, _ = exchange(MemberState(member_id=MEMBER), respond(status))
    request, _ = beat(state)
    assert request.member_epoch == JOIN_EPOCH and request.owned_shards == ()
    state, actions = exchange(state, respond(status))
    assert actions.events == ()
    assert state.join_refused is status


def test_join_refused_by_the_other_cap_is_said_again():
    state, _ = exchange(MemberState(member_id=MEMBER), respond(Status.GROUP_MAX_SIZE_REACHED))
    state, actions = exchange(state, respond(Status.GROUP_LIMIT_REACHED))
    assert [e.name for e in actions.events] == ["join refused"]
    assert state.join_refused is Status.GROUP_LIMIT_REACHED


@pytest.mark.parametrize("status", CAPS)
def test_join_taken_after_refusals_clears_the_refusal_and_joins(status):
    state, _ = exchange(MemberState(member_id=MEMBER), respond(status))
    state, actions = exchange(state, respond(Status.OK, 3, ["a"]))
    assert state.join_refused is None
    assert state.joined and state.member_epoch == 3
    assert actions.start == frozenset({"a"})
    assert [e.name for e in actions.events] == ["joined", "assigned"]


@pytest.mark.parametrize("status", CAPS)
def test_cap_answer_to_a_held_epoch_lets_everything_go(status):
    state = joined_with("a", "b")
    state, actions = exchange(state, respond(status))
    assert state.holds == {} and state.member_epoch == JOIN_EPOCH
    assert actions.abandon == frozenset({"a", "b"})
    assert [e.name for e in actions.events] == ["fenced", "join refused"]
    assert not actions.heartbeat_now


# --- events -----------------------------------------------------------------------------------


def test_events_are_named_by_the_enum_and_print_as_its_value():
    state, joined = exchange(MemberState(member_id=MEMBER), respond(Status.OK, 5, ["a"]))
    _, fenced = state.on_abandon("gone")
    events = joined.events + fenced.events
    assert [e.name for e in events] == [EventName.JOINED, EventName.ASSIGNED, EventName.FENCED]
    assert all(type(e.name) is EventName for e in events)
    assert json.dumps([e.name for e in events]) == '["joined", "assigned", "fenced"]'
