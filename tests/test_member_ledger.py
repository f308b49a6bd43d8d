"""Pure tests of the member ledger: one named test per decision (no Redis, no trio).

D1 (docs/protocol.md, Data plane rules): no handler call and no ack unless the
shard is held at the current epoch and the last accepted heartbeat was sent
less than a lease TTL ago, both checked in one step.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from rsc.member.pure.ledger import (
    DEFAULT_LEASE_TTL_MS,
    AckFlushRule,
    Ledger,
    Verdict,
    acks_delete,
    retention_mode,
    worker_count,
)
from rsc.member.pure.reconcile import JOIN_EPOCH, LEAVE_EPOCH, NO_ACTIONS
from rsc.protocol import Assignment, HeartbeatResponse, RoutingSummary, Status
from rsc.protocol.messages import Retention
from rsc.protocol.vocabulary import RetentionMode

PREFIX, GROUP, MEMBER = "orders", "billing", "10.0.0.7-42-0-abcd"
LEASE_MS = 1000


ROUTED = RoutingSummary(version=1, shard_count=4)  # K8: a prefix with routing (else not ready)


def respond(status: Status = Status.OK, epoch: int = 5, assigned=(),
            max_concurrency: int | None = None,
            routing: RoutingSummary | None = ROUTED) -> HeartbeatResponse:
    if status not in (Status.OK, Status.REVOKE_PENDING, Status.SYNC_METADATA):
        return HeartbeatResponse(request_id=1, status=status, member_id=MEMBER, error="nope")
    return HeartbeatResponse(
        request_id=1, status=status, member_id=MEMBER, member_epoch=epoch, group_epoch=epoch,
        assignment_epoch=epoch, heartbeat_interval_ms=200, lease_ttl_ms=LEASE_MS,
        max_concurrency=max_concurrency, routing=routing,
        assignment=Assignment(assigned_shards=tuple(assigned), pending_shards=()))


def exchange(ledger: Ledger, response: HeartbeatResponse, sent_at: float):
    """A heartbeat sent at `sent_at` (ms) and its answer (whenever it arrives)."""
    _, sent, actions = ledger.heartbeat(sent_at, capacity=4, stream_prefix=PREFIX,
                                        consumer_group=GROUP)
    assert actions is NO_ACTIONS
    return ledger.on_response(sent, response)


def joined(*shards: str, at: float = 0.0, capacity: int = 4) -> Ledger:
    ledger = Ledger(MEMBER, capacity=capacity)
    exchange(ledger, respond(assigned=shards), at)
    exchange(ledger, respond(assigned=shards), at)  # reports full ownership
    return ledger


def revoke(ledger: Ledger, *keep: str, at: float = 0.0):
    return exchange(ledger, respond(Status.REVOKE_PENDING, assigned=keep), at)


# --- drained -> REVOKED -------------------------------------------------------------------


def test_revoked_shard_with_nothing_in_flight_is_reported_revoked_at_once():
    ledger = joined("a", "b")
    actions = revoke(ledger, "a")
    assert actions.revoke == {"b"}
    assert "b" in ledger.state.revoked and "b" not in ledger.state.holds
    assert [e.name for e in actions.events] == ["revoking", "revoked"]
    assert actions.heartbeat_now


def test_revoked_shard_is_drained_only_when_its_last_in_flight_entry_finishes():
    ledger = joined("a", "b")
    ledger.started("b", 2)
    revoke(ledger, "a")
    assert "b" in ledger.state.revoking()
    assert ledger.finished("b") is NO_ACTIONS
    assert "b" in ledger.state.revoking()
    actions = ledger.finished("b")
    assert [e.name for e in actions.events] == ["revoked"] and actions.heartbeat_now
    assert ledger.state.revoked == {"b"}


def test_revoked_shard_waits_for_the_reads_in_progress_that_may_deliver_it():
    ledger = joined("a", "b")
    ledger.reads_in_progress({"a", "b"})
    revoke(ledger, "a")
    assert "b" in ledger.state.revoking(), "a read in flight may still deliver entries of b"
    actions = ledger.reads_in_progress({"a"})
    assert ledger.state.revoked == {"b"} and actions.heartbeat_now


def test_entries_read_under_a_revoked_generation_are_not_queued():
    ledger = joined("a", "b")
    generation = ledger.generation("b")
    assert ledger.still_reading("b", generation)
    ledger.started("b")
    revoke(ledger, "a")
    assert not ledger.still_reading("b", generation)


# --- claim gating and recovery cursors ------------------------------------------------------


def test_a_started_shard_is_claimed_before_it_is_read():
    ledger = Ledger(MEMBER, capacity=4)
    actions = exchange(ledger, respond(assigned=["a", "b"]), 0)
    assert actions.start == {"a", "b"}
    assert ledger.recoverable() == ["a", "b"] and ledger.readable() == []
    assert ledger.claim_cursor("a") == "0-0"


def test_claim_cursor_moves_on_and_the_shard_is_read_once_the_scan_ends():
    ledger = Ledger(MEMBER, capacity=4)
    exchange(ledger, respond(assigned=["a"]), 0)
    generation = ledger.generation("a")
    assert ledger.claimed("a", generation, "5-0")
    assert ledger.claim_cursor("a") == "5-0" and ledger.readable() == []
    assert ledger.claimed("a", generation, "0-0")
    assert ledger.claim_cursor("a") is None and ledger.readable() == ["a"]
    assert not ledger.recovering()


def test_a_fresh_claim_waits_until_the_shards_earlier_work_is_done():
    ledger = joined("a")
    generation = ledger.generation("a")
    ledger.claimed("a", generation, "0-0")
    ledger.started("a")
    ledger.read_failed()  # what the broken read delivered is pending: claim it again
    assert ledger.claim_cursor("a") == "0-0"
    assert ledger.recoverable() == [], "a claim now could hand out what a worker still runs"
    ledger.finished("a")
    assert ledger.recoverable() == ["a"]


def test_a_continued_claim_is_not_gated_by_in_flight_work():
    ledger = Ledger(MEMBER, capacity=4)
    exchange(ledger, respond(assigned=["a"]), 0)
    ledger.claimed("a", ledger.generation("a"), "7-0")
    ledger.started("a")
    assert ledger.recoverable() == ["a"]


def test_what_a_claim_got_after_the_shard_was_revoked_is_not_queued():
    ledger = Ledger(MEMBER, capacity=4)
    exchange(ledger, respond(assigned=["a", "b"]), 0)
    generation = ledger.generation("b")
    revoke(ledger, "a")
    assert not ledger.claimed("b", generation, "0-0")


# --- ack flushing ---------------------------------------------------------------------------


def test_ack_flush_sends_a_full_batch_at_once():
    rule = AckFlushRule(batch=500, linger_ms=5)
    assert rule.due(500, awaited=0, busy=3, queued=100)
    assert not rule.due(499, awaited=0, busy=3, queued=100), "lingers for more"


def test_ack_flush_sends_at_once_what_a_worker_waits_for():
    assert AckFlushRule(batch=500, linger_ms=5).due(1, awaited=1, busy=3, queued=100)


def test_ack_flush_sends_everything_once_no_work_is_left_to_add_to_the_batch():
    rule = AckFlushRule(batch=500, linger_ms=5)
    assert rule.due(3, awaited=0, busy=0, queued=0)
    assert not rule.due(3, awaited=0, busy=1, queued=0)
    assert not rule.due(3, awaited=0, busy=0, queued=1)


def test_ack_flush_wakes_the_acker_for_the_first_entry_a_full_batch_or_idle_workers():
    rule = AckFlushRule(batch=500, linger_ms=5)
    assert rule.wake_acker(1, busy=3, queued=10)  # starts the linger
    assert not rule.wake_acker(2, busy=3, queued=10)
    assert rule.wake_acker(500, busy=3, queued=10)
    assert rule.wake_acker(2, busy=0, queued=0)


# --- worker count -------------------------------------------------------------------------


def test_worker_count_follows_max_concurrency_else_the_capacity():
    assert worker_count(None, 8) == 8
    assert worker_count(2, 8) == 2
    assert worker_count(16, 8) == 16, "the heartbeat's maxConcurrency is what is used"
    ledger = joined("a", capacity=8)
    assert ledger.workers() == 8
    exchange(ledger, respond(assigned=["a"], max_concurrency=3), 0)
    assert ledger.workers() == 3


# --- D1: ownership and lease in one step ----------------------------------------------------


def test_d1_admit_allows_a_held_shard_at_its_generation_within_the_lease():
    ledger = joined("a", at=1000)
    assert ledger.admit("a", ledger.generation("a"), 1999) == (Verdict.ALLOWED, NO_ACTIONS)


def test_d1_lease_counts_from_when_the_heartbeat_was_sent_not_when_it_was_answered():
    ledger = joined("a", at=0)
    _, sent, _ = ledger.heartbeat(1000, capacity=4, stream_prefix=PREFIX, consumer_group=GROUP)
    # the answer arrives 800 ms later: the lease still runs from 1000, not from 1800
    ledger.on_response(sent, respond(assigned=["a"]))
    assert ledger.lease_deadline() == 1000 + LEASE_MS
    assert ledger.admit("a", ledger.generation("a"), 1999)[0] is Verdict.ALLOWED
    assert ledger.admit("a", ledger.generation("a"), 2000)[0] is Verdict.LEASE_EXPIRED


def test_d1_frozen_past_the_lease_no_handler_and_no_ack_although_the_shard_is_still_held():
    ledger = joined("a", "b", at=0)
    generation = ledger.generation("a")
    assert "a" in ledger.state.holds, "nothing told the ledger about the freeze"
    verdict, actions = ledger.admit("a", generation, 3000)  # woken 3 s later
    assert verdict is Verdict.LEASE_EXPIRED
    assert actions.abandon == {"a", "b"} and actions.heartbeat_now
    assert [e.name for e in actions.events] == ["fenced"]
    # fenced in that same call: every later handler call or ack of any shard is refused
    assert ledger.admit("b", ledger.generation("b"), 3000) == (Verdict.NOT_HELD, NO_ACTIONS)
    assert ledger.state.member_epoch == JOIN_EPOCH and not ledger.state.holds


def test_d1_an_answer_received_after_a_freeze_does_not_renew_the_lease():
    ledger = joined("a", at=0)
    _, sent, _ = ledger.heartbeat(500, capacity=4, stream_prefix=PREFIX, consumer_group=GROUP)
    ledger.on_response(sent, respond(assigned=["a"]))  # read only after waking at 3000
    assert ledger.admit("a", ledger.generation("a"), 3000)[0] is Verdict.LEASE_EXPIRED


def test_d1_a_heartbeat_after_the_lease_ran_out_fences_first_and_rejoins():
    ledger = joined("a", at=0)
    request, sent, actions = ledger.heartbeat(LEASE_MS, capacity=4, stream_prefix=PREFIX,
                                              consumer_group=GROUP)
    assert actions.abandon == {"a"}
    assert request.member_epoch == JOIN_EPOCH and sent.member_epoch == JOIN_EPOCH


def test_d1_reads_stop_once_the_lease_ran_out():
    ledger = joined("a", at=0)
    ledger.claimed("a", ledger.generation("a"), "0-0")
    assert ledger.check_lease(LEASE_MS - 1) is NO_ACTIONS and ledger.readable() == ["a"]
    assert ledger.check_lease(LEASE_MS).abandon == {"a"}
    assert ledger.readable() == [] and ledger.recoverable() == []


def test_d1_epoch_change_refuses_entries_of_the_old_generation():
    ledger = joined("a", at=0)
    old = ledger.generation("a")
    exchange(ledger, respond(Status.FENCED_MEMBER_EPOCH), 100)
    assert ledger.admit("a", old, 100)[0] is Verdict.NOT_HELD
    exchange(ledger, respond(epoch=9, assigned=["a"]), 200)
    assert ledger.state.member_epoch == 9 and ledger.generation("a") != old
    assert ledger.admit("a", old, 300)[0] is Verdict.NOT_HELD, "read before the rejoin"
    assert ledger.admit("a", ledger.generation("a"), 300)[0] is Verdict.ALLOWED


def test_d1_a_draining_shard_may_still_finish_and_ack_until_it_is_drained():
    ledger = joined("a", "b", at=0)
    generation = ledger.generation("b")
    ledger.started("b")
    revoke(ledger, "a", at=100)
    assert ledger.state.revoking() == {"b"}
    assert ledger.admit("b", generation, 200) == (Verdict.ALLOWED, NO_ACTIONS)
    ledger.finished("b")  # drained: reported REVOKED, no longer held
    assert ledger.admit("b", generation, 200) == (Verdict.NOT_HELD, NO_ACTIONS)


def test_d1_an_unnamed_lease_ttl_counts_as_the_protocols_default():
    ledger = Ledger(MEMBER, capacity=4)
    unnamed = attrs.evolve(respond(assigned=["a"]), lease_ttl_ms=None)
    exchange(ledger, unnamed, 0)
    exchange(ledger, unnamed, 0)
    assert ledger.state.lease_ttl_ms is None
    assert ledger.lease_deadline() == DEFAULT_LEASE_TTL_MS
    generation = ledger.generation("a")
    assert ledger.admit("a", generation, DEFAULT_LEASE_TTL_MS - 1)[0] is Verdict.ALLOWED
    assert ledger.check_lease(DEFAULT_LEASE_TTL_MS - 1) is NO_ACTIONS
    assert ledger.admit("a", generation, DEFAULT_LEASE_TTL_MS)[0] is Verdict.LEASE_EXPIRED


def test_d1_a_member_without_shards_never_fences_itself():
    ledger = joined(at=0)
    assert ledger.lease_deadline() is None
    assert ledger.check_lease(100 * LEASE_MS) is NO_ACTIONS
    assert ledger.state.joined and ledger.state.member_epoch == 5


def test_d1_sync_metadata_does_not_renew_the_lease():
    ledger = joined("a", at=0)
    exchange(ledger, respond(Status.SYNC_METADATA, assigned=["a"]), 500)
    assert ledger.lease_deadline() == LEASE_MS
    assert ledger.admit("a", ledger.generation("a"), LEASE_MS)[0] is Verdict.LEASE_EXPIRED


def test_a_shard_not_held_is_refused_without_fencing():
    ledger = joined("a", at=0)
    assert ledger.admit("z", 1, 10) == (Verdict.NOT_HELD, NO_ACTIONS)
    assert ledger.state.holds.keys() == {"a"}


def test_a_handler_start_is_counted_in_flight_only_when_admitted():
    ledger = joined("a", at=0)
    generation = ledger.generation("a")
    assert ledger.start_handler("a", generation, 10)[0] is Verdict.ALLOWED
    assert ledger.in_flight == {"a": 1}
    assert ledger.start_handler("a", generation + 100, 10)[0] is Verdict.NOT_HELD
    assert ledger.start_handler("a", generation, LEASE_MS)[0] is Verdict.LEASE_EXPIRED
    assert ledger.in_flight == {"a": 1}, "refused starts are not in flight"


# --- what a heartbeat's routing tells: storeId and retention ---------------------------------


def routing(store_id: str | None = None, mode: str | None = None) -> RoutingSummary:
    """A heartbeat's routing carrying `storeId` / `retention.mode`."""
    retention = None if mode is None else Retention(mode=RetentionMode(mode))
    return RoutingSummary(version=1, shard_count=2, store_id=store_id, retention=retention)


def routed(ledger: Ledger, route: Any, at: float = 0.0) -> None:
    exchange(ledger, attrs.evolve(respond(assigned=("a",)), routing=route), at)


def test_retention_mode_is_the_routings_enum_member_or_none():
    assert retention_mode(routing(mode="acked")) is RetentionMode.ACKED
    assert retention_mode(routing(mode="none")) is RetentionMode.NONE
    assert retention_mode(routing()) is None
    assert retention_mode(RoutingSummary(version=1, shard_count=2)) is None
    assert retention_mode(None) is None


def test_t1_acks_delete_only_with_retention_acked_on_a_server_with_xackdel():
    assert acks_delete(RetentionMode.ACKED, True)
    assert not acks_delete(RetentionMode.ACKED, False)
    assert not acks_delete(RetentionMode.NONE, True)  # T3
    assert not acks_delete(None, True)  # a coordinator that names no retention: plain XACK


def test_ledger_follows_the_retention_of_the_latest_routing_and_keeps_it_when_absent():
    ledger = Ledger(MEMBER, capacity=4)
    assert not ledger.acks_delete(True)
    routed(ledger, routing(mode="acked"))
    assert ledger.acks_delete(True) and not ledger.acks_delete(False)
    routed(ledger, routing())  # no retention named: the last one stands
    assert ledger.acks_delete(True)
    routed(ledger, routing(mode="none"))
    assert not ledger.acks_delete(True)


def test_ledger_keeps_the_first_store_id_a_routing_carries():
    ledger = Ledger(MEMBER, capacity=4)
    exchange(ledger, respond(assigned=("a",), routing=None), 0.0)  # no routing yet
    assert not ledger.routed and ledger.store_id is None
    routed(ledger, routing())
    assert ledger.routed and ledger.store_id is None  # a coordinator that sends no storeId
    routed(ledger, routing(store_id="s-1"))
    routed(ledger, routing(store_id="s-2"))
    assert ledger.store_id == "s-1"


# --- H9: when the member is done ---------------------------------------------------------------


def leave_drained(ledger: Ledger, at: float) -> Any:
    """Ask for the leave, drain, and send the leave heartbeat (epoch -1)."""
    ledger.on_leave_requested()
    request, sent, _ = ledger.heartbeat(at, capacity=4, stream_prefix=PREFIX, consumer_group=GROUP)
    assert request.member_epoch == LEAVE_EPOCH
    return sent


def test_h9_the_member_has_left_once_its_leave_is_answered():
    ledger = joined("a", at=0)
    sent = leave_drained(ledger, 100)
    assert not ledger.left, "sent, not yet answered"
    ledger.on_response(sent, respond(Status.COORDINATOR_NOT_AVAILABLE))
    assert not ledger.left, "an unavailable coordinator has not taken the leave"
    ledger.on_response(sent, respond(epoch=LEAVE_EPOCH))
    assert ledger.left


@pytest.mark.parametrize("status", [Status.UNKNOWN_MEMBER_ID, Status.FENCED_MEMBER_EPOCH,
                                    Status.GROUP_MAX_SIZE_REACHED])
def test_h9_a_retried_leave_the_coordinator_no_longer_knows_still_counts(status):
    ledger = joined("a", at=0)
    ledger.on_response(leave_drained(ledger, 100), respond(status))
    assert ledger.left


def test_a_refused_join_is_not_a_leave():
    ledger = Ledger(MEMBER, capacity=4)
    exchange(ledger, respond(Status.GROUP_MAX_SIZE_REACHED), 0)
    assert not ledger.left and ledger.state.member_epoch == JOIN_EPOCH


def test_h6_a_stopping_member_holding_nothing_is_done_without_a_session():
    ledger = joined("a", at=0)
    ledger.started("a")
    assert not ledger.done_without_session(stopping=False)
    assert not ledger.done_without_session(stopping=True), "it holds a shard: leave first"
    ledger.on_leave_requested()
    assert not ledger.done_without_session(stopping=True), "still draining"
    ledger.finished("a")  # drained
    assert not ledger.state.holds
    assert ledger.done_without_session(stopping=True)
    assert not ledger.done_without_session(stopping=False), "a running member reconnects"
