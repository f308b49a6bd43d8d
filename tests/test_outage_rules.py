"""Pure tests of D5 (docs/protocol.md, Data plane rules): a coordinator outage is not a member
failure. The member ledger's allowance (member/pure/outage.py through ledger.py) and the
coordinator's lease continuity (actors/core/lease.py), with a fake clock (ms passed in)."""

from __future__ import annotations

from rsc.actors.core.lease import (
    LapseVerdict,
    LeaseContinuity,
    Renewal,
    Takeover,
    lapse_verdict,
    waiting_line,
)
from rsc.actors.redis_io.store import LEASE_KEY
from rsc.member.pure.ledger import Ledger, Verdict
from rsc.member.pure.outage import COORDINATOR_LEASE_KEY, Observation
from rsc.member.pure.reconcile import JOIN_EPOCH, NO_ACTIONS
from tests.test_member_ledger import GROUP, LEASE_MS, MEMBER, PREFIX, joined, respond

OTHER = "10.0.0.8-43-0-efgh"
INTERVAL_MS = 200  # the heartbeat interval `respond` names


def look(ledger: Ledger, at: float, *, absent: bool = True, **owners: str | None):
    """One look at Redis sent at `at`: the lease key absent or held, and the owner records
    (default: every held shard names this member)."""
    names: dict[str, str | None] = {shard: MEMBER for shard in ledger.observed_shards()}
    names.update(owners)
    return ledger.on_observation(Observation(sent_at=at, key_absent=absent, owners=names))


def admitted(ledger: Ledger, shard: str, at: float) -> Verdict:
    return ledger.admit(shard, ledger.generation(shard), at)[0]


def unanswered_heartbeat(ledger: Ledger, at: float) -> None:
    ledger.heartbeat(at, capacity=4, stream_prefix=PREFIX, consumer_group=GROUP)


# --- when the member looks ------------------------------------------------------------


def test_d5_a_heartbeat_unanswered_for_an_interval_makes_a_look_due():
    ledger = joined("a", at=0)
    unanswered_heartbeat(ledger, 100)
    assert not ledger.observation_due(100 + INTERVAL_MS - 1)
    assert ledger.observation_due(100 + INTERVAL_MS)
    look(ledger, 300)
    assert not ledger.observation_due(300 + INTERVAL_MS - 1), "at most one look per interval"
    assert ledger.observation_due(300 + INTERVAL_MS), "at least one look per interval"


def test_d5_a_session_that_cannot_be_opened_makes_a_look_due_and_an_answer_ends_it():
    ledger = joined("a", at=0)
    ledger.on_session_failed()
    assert ledger.observation_due(1)
    _, sent, _ = ledger.heartbeat(10, capacity=4, stream_prefix=PREFIX, consumer_group=GROUP)
    ledger.on_response(sent, respond(assigned=["a"]))
    assert not ledger.observation_due(10 + 5 * INTERVAL_MS)


def test_d5_answered_heartbeats_make_no_look_due():
    ledger = joined("a", at=0)
    _, sent, _ = ledger.heartbeat(100, capacity=4, stream_prefix=PREFIX, consumer_group=GROUP)
    ledger.on_response(sent, respond(assigned=["a"]))
    assert not ledger.observation_due(100 + 3 * INTERVAL_MS)


def test_d5_the_member_looks_for_the_coordinators_own_lease_key():
    assert COORDINATOR_LEASE_KEY == LEASE_KEY == "rsc:coordinator:lease"


# --- the allowance --------------------------------------------------------------------


def test_d5_key_absent_extends():
    ledger = joined("a", "b", at=0)
    look(ledger, 700)  # the coordinator's key is gone
    assert admitted(ledger, "a", LEASE_MS + 100) is Verdict.ALLOWED, "past D1, within D5"
    assert admitted(ledger, "a", 700 + LEASE_MS - 1) is Verdict.ALLOWED
    look(ledger, 1500)  # absent again: extended to a lease after this look
    assert admitted(ledger, "b", 1500 + LEASE_MS - 1) is Verdict.ALLOWED
    assert ledger.check_lease(1500 + LEASE_MS - 1) is NO_ACTIONS
    assert ledger.state.member_epoch > JOIN_EPOCH, "never fenced, never rejoined"


def test_d5_the_allowance_counts_from_when_the_look_was_sent():
    ledger = joined("a", at=0)
    look(ledger, 900)  # whenever its answer arrived
    assert admitted(ledger, "a", 900 + LEASE_MS - 1) is Verdict.ALLOWED
    assert admitted(ledger, "a", 900 + LEASE_MS) is not Verdict.ALLOWED


def test_d5_key_present_does_not_extend():
    ledger = joined("a", at=0)
    look(ledger, 500, absent=False)  # a live coordinator this member cannot reach: D1 stands
    verdict, actions = ledger.admit("a", ledger.generation("a"), LEASE_MS)
    assert verdict is Verdict.LEASE_EXPIRED and actions.abandon == {"a"}
    assert [e.name for e in actions.events] == ["fenced"]


def test_d5_key_held_again_does_not_cut_the_allowance_short():
    ledger = joined("a", at=0)
    look(ledger, 800)  # absent: allowed until 1800
    look(ledger, 1000, absent=False)  # a coordinator is back: no extension
    assert admitted(ledger, "a", 1799) is Verdict.ALLOWED
    assert ledger.check_lease(1799) is NO_ACTIONS
    assert ledger.check_lease(1800).abandon == {"a"}, "then D1 stands: fenced at the allowance's end"


def test_d5_owner_record_naming_another_member_stops_that_shard():
    ledger = joined("a", "b", at=0)
    actions = look(ledger, 700, b=OTHER)
    assert actions.abandon == {"b"}
    assert [(e.name, e.shards, e.reason) for e in actions.events] == [
        ("fenced", ("b",), f"its owner record names {OTHER}")]
    assert "b" not in ledger.state.holds
    assert admitted(ledger, "a", LEASE_MS + 100) is Verdict.ALLOWED, "the other shard goes on"


def test_d5_owner_record_cleared_stops_that_shard():
    ledger = joined("a", "b", at=0)
    actions = look(ledger, 700, a=None)
    assert actions.abandon == {"a"} and "a" not in ledger.state.holds
    assert admitted(ledger, "b", LEASE_MS + 100) is Verdict.ALLOWED


def test_d5_owner_record_naming_another_member_ends_an_allowance_already_given():
    ledger = joined("a", "b", at=0)
    look(ledger, 700)
    look(ledger, 900, a=OTHER)
    assert admitted(ledger, "a", 1000) is Verdict.NOT_HELD
    assert admitted(ledger, "b", 1000 + 500) is Verdict.ALLOWED


def test_d5_frozen_member_wakes_fenced_until_it_observes():
    ledger = joined("a", "b", at=0)
    look(ledger, 700)  # the coordinator is down; then this member is frozen for a long time
    woke = 700 + 5 * LEASE_MS
    verdict, actions = ledger.admit("a", ledger.generation("a"), woke)
    assert verdict is Verdict.LEASE_EXPIRED and actions is NO_ACTIONS, "nothing handled or acked"
    assert ledger.readable(woke) == [] and ledger.recoverable(woke) == [], "nothing read"
    assert ledger.check_lease(woke) is NO_ACTIONS, "it waits for its next look"
    assert ledger.lease_deadline(woke) is None, "no wake-up loop while it waits"
    # the look: "b" was given away before the coordinator went down; "a" is still its own
    actions = look(ledger, woke + 10, b=OTHER)
    assert actions.abandon == {"b"}
    assert admitted(ledger, "a", woke + 20) is Verdict.ALLOWED
    assert ledger.recoverable(woke + 20) == ["a"], "entries dropped while it waited are claimed again"


def test_d5_frozen_member_whose_shards_were_all_given_away_touches_none_of_them():
    ledger = joined("a", "b", at=0)
    look(ledger, 700)
    woke = 700 + 5 * LEASE_MS
    assert admitted(ledger, "a", woke) is Verdict.LEASE_EXPIRED
    actions = look(ledger, woke + 10, a=OTHER, b=OTHER)
    assert actions.abandon == {"a", "b"} and not ledger.state.holds


def test_d5_a_member_frozen_before_any_look_fences_at_its_lease_as_d1_says():
    ledger = joined("a", at=0)
    verdict, actions = ledger.admit("a", ledger.generation("a"), 3 * LEASE_MS)
    assert verdict is Verdict.LEASE_EXPIRED and actions.abandon == {"a"}


def test_d5_an_accepted_heartbeat_after_the_outage_renews_d1_and_ends_the_wait():
    ledger = joined("a", at=0)
    look(ledger, 700)
    _, sent, _ = ledger.heartbeat(1500, capacity=4, stream_prefix=PREFIX, consumer_group=GROUP)
    ledger.on_response(sent, respond(assigned=["a"]))  # the coordinator is back (H12)
    assert admitted(ledger, "a", 1500 + LEASE_MS - 1) is Verdict.ALLOWED
    assert ledger.state.member_epoch == 5, "the same epoch: no rejoin"
    assert ledger.check_lease(1500 + LEASE_MS).abandon == {"a"}, "D1 again, no waiting"


def test_d5_pacing_wakes_at_the_end_of_the_allowance_not_at_the_old_lease():
    ledger = joined("a", at=0)
    look(ledger, 700)
    assert ledger.lease_deadline(LEASE_MS + 1) == 700 + LEASE_MS


# --- the coordinator's lease continuity ------------------------------------------------------


def test_d5_lease_continuity_holds_while_renewals_find_the_lease_ours():
    lease = LeaseContinuity(lease_ms=300, confirmed_at=0)
    for sent_at in range(100, 1000, 100):
        lease.renewal(sent_at, Renewal.RENEWED)
        assert lease.holds(sent_at + 50) and lease.lapse(sent_at + 50) is None


def test_d5_lease_continuity_a_monotonic_jump_over_the_lease_is_a_lapse():
    lease = LeaseContinuity(lease_ms=300, confirmed_at=0)
    lease.renewal(100, Renewal.RENEWED)
    assert not lease.holds(400), "frozen: no expiry before the renewal even answers"
    assert lease.lapse(400) is not None
    lease.renewal(5000, Renewal.RENEWED)  # woken: the key happened to be still ours
    assert lease.broken is not None and not lease.holds(5001)


def test_d5_lease_continuity_a_renewal_that_found_the_lease_lapsed_is_a_lapse():
    lease = LeaseContinuity(lease_ms=300, confirmed_at=0)
    lease.renewal(100, Renewal.LAPSED)
    assert lease.broken == "the renewal found the lease lapsed" and not lease.holds(101)


def test_d5_lease_continuity_a_renewal_that_found_the_lease_taken_is_a_lapse():
    lease = LeaseContinuity(lease_ms=300, confirmed_at=0)
    lease.renewal(100, Renewal.TAKEN)
    assert "taken" in (lease.broken or "") and not lease.holds(101)


def test_d5_lease_continuity_failed_renewals_stop_expiry_past_the_lease_without_a_lapse():
    lease = LeaseContinuity(lease_ms=300, confirmed_at=0)
    lease.renewal(100, Renewal.FAILED)
    assert lease.holds(250)
    lease.renewal(300, Renewal.FAILED)
    assert not lease.holds(300) and lease.broken is None, "Redis down: nobody expires (H12)"
    lease.renewal(400, Renewal.LAPSED)  # Redis back, the key expired meanwhile
    assert lease.broken is not None


def test_d5_waiting_line_names_the_holder():
    line = waiting_line("host-42-abcd", "redis://r:6379/0", 3000)
    assert "host-42-abcd" in line and "redis://r:6379/0" in line and "3 s" in line


def test_d5_lease_continuity_taken_again_gives_every_member_a_fresh_lease():
    lease = LeaseContinuity(lease_ms=300, confirmed_at=0)
    lease.renewal(5000, Renewal.LAPSED)  # woken from a freeze: the key had lapsed
    assert not lease.expiry_allowed(5000)
    lease.resume(5010, member_lease_ttl_ms=2000)  # nobody else ran: taken again at once
    assert lease.holds(5010) and lease.broken is None
    for sent_at in range(5100, 7001, 100):  # renewed every tick from then on
        lease.renewal(sent_at, Renewal.RENEWED)
        assert lease.expiry_allowed(sent_at + 10) is (sent_at + 10 >= 7010), sent_at


# --- what a coordinator does after a lapse, and when a waiting one takes over ---------------


def test_d5_lapse_with_the_stored_epoch_its_own_and_the_key_absent_or_its_own_takes_back():
    for holder in (None, "me"):
        assert lapse_verdict(own_epoch=7, stored_epoch=7, holder=holder, own_id="me") \
            is LapseVerdict.TAKE_BACK


def test_d5_lapse_with_the_stored_epoch_lower_or_missing_is_a_store_that_went_back():
    for stored in (None, 6, 0):
        assert lapse_verdict(own_epoch=7, stored_epoch=stored, holder=None, own_id="me") \
            is LapseVerdict.STORE_WENT_BACK


def test_d5_lapse_with_a_newer_epoch_or_another_holder_steps_down():
    assert lapse_verdict(own_epoch=7, stored_epoch=8, holder=None, own_id="me") \
        is LapseVerdict.STEP_DOWN
    assert lapse_verdict(own_epoch=7, stored_epoch=7, holder="other", own_id="me") \
        is LapseVerdict.STEP_DOWN


def test_d5_a_coordinator_that_finds_no_holder_at_start_takes_the_lease_at_once():
    assert Takeover(lease_ttl_ms=10_000).may_take(0, holder=None, released_by=None)


def test_d5_a_waiting_coordinator_takes_over_at_once_after_its_holder_released():
    takeover = Takeover(lease_ttl_ms=10_000)
    assert not takeover.may_take(0, holder="a", released_by=None)
    assert takeover.may_take(100, holder=None, released_by="a")


def test_d5_a_waiting_coordinator_takes_over_a_lapsed_lease_only_after_a_full_ttl_of_absence():
    takeover = Takeover(lease_ttl_ms=10_000)
    assert not takeover.may_take(0, holder="a", released_by="someone-before-a")
    assert not takeover.may_take(1_000, holder=None, released_by="someone-before-a")
    assert not takeover.may_take(10_999, holder=None, released_by=None)
    assert takeover.may_take(11_000, holder=None, released_by=None)


def test_d5_a_holder_that_writes_its_key_again_restarts_the_waiters_count():
    """K3: a live holder whose store went back writes its key again within a tick."""
    takeover = Takeover(lease_ttl_ms=10_000)
    takeover.may_take(0, holder="a", released_by=None)
    assert not takeover.may_take(1_000, holder=None, released_by=None)
    assert not takeover.may_take(2_000, holder="a", released_by=None)  # back
    assert not takeover.may_take(11_500, holder=None, released_by=None)
    assert takeover.may_take(21_500, holder=None, released_by=None)
