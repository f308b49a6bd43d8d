"""D6 and D7, the member's side, pure: when a member is in its group, and what its health and
readiness probes say when it is not (rsc/member/pure/health.py through the ledger).

The ledger of tests/test_member_ledger.py: lease 1000 ms, heartbeat interval 200 ms, so D6
allows 1200 ms out of the group while a coordinator answers and would admit the member.
"""

from __future__ import annotations

from rsc.member.pure.health import HealthVerdict, ListenerStatus, MemberStatus, combine, listener_status
from rsc.member.pure.ledger import Ledger
from rsc.member.pure.reconcile import JOIN_EPOCH
from rsc.protocol import Status
from tests.test_member_ledger import GROUP, LEASE_MS, MEMBER, PREFIX, joined, respond

INTERVAL_MS = 200
ALLOWED = LEASE_MS + INTERVAL_MS


def beat(ledger: Ledger, status: Status, at: float, answered_at: float | None = None, **kw):
    """One heartbeat at `at` and its answer (`respond(status, **kw)`); returns the request."""
    request, sent, _ = ledger.heartbeat(at, capacity=4, stream_prefix=PREFIX, consumer_group=GROUP)
    ledger.on_response(sent, respond(status, **kw), at if answered_at is None else answered_at)
    return request


def test_d7_a_member_in_its_group_is_healthy_and_ready():
    ledger = joined("s0", at=0)
    assert ledger.in_group
    assert ledger.health_verdict(100) == HealthVerdict(healthy=True, ready=True)


def test_d7_a_member_that_never_reached_a_coordinator_is_healthy_and_not_ready():
    ledger = Ledger(MEMBER, capacity=4, now=0)
    ledger.on_session_failed()
    verdict = ledger.health_verdict(60_000)  # a minute without a coordinator: no restart cures it
    assert (verdict.healthy, verdict.ready) == (True, False)
    assert "does not answer" in verdict.reason and MEMBER in verdict.reason


def test_d6_a_fenced_member_rejoins_with_epoch_0_on_its_next_heartbeat():
    ledger = joined("s0", at=0)
    beat(ledger, Status.UNKNOWN_MEMBER_ID, at=100)
    assert not ledger.in_group and ledger.state.member_epoch == JOIN_EPOCH
    request, _, _ = ledger.heartbeat(110, capacity=4, stream_prefix=PREFIX, consumer_group=GROUP)
    assert request.member_epoch == JOIN_EPOCH and request.owned_shards == ()
    assert request.member_id == MEMBER  # the same memberId


def test_d6_a_member_whose_lease_ran_out_rejoins_at_its_next_heartbeat():
    ledger = joined("s0", at=0)
    request, _, actions = ledger.heartbeat(LEASE_MS + 1, capacity=4, stream_prefix=PREFIX,
                                           consumer_group=GROUP)
    assert actions.abandon == {"s0"}  # D1 fenced it first ...
    assert request.member_epoch == JOIN_EPOCH  # ... and this heartbeat is already its rejoin


def test_d6_a_static_member_rejoins_with_its_instance_id():
    ledger = Ledger(MEMBER, capacity=4, instance_id="pod-0")
    beat(ledger, Status.OK, at=0, assigned=("s0",))
    beat(ledger, Status.FENCED_MEMBER_EPOCH, at=100)
    request, _, _ = ledger.heartbeat(110, capacity=4, stream_prefix=PREFIX, consumer_group=GROUP)
    assert (request.member_epoch, request.instance_id) == (JOIN_EPOCH, "pod-0")


def test_d7_out_of_its_group_while_the_coordinator_answers_is_healthy_for_d6s_allowance_only():
    ledger = joined("s0", at=0)
    beat(ledger, Status.UNKNOWN_MEMBER_ID, at=100)  # fenced; the coordinator answers
    joining = ledger.health_verdict(100 + ALLOWED - 1)
    assert (joining.healthy, joining.ready) == (True, False) and "joining" in joining.reason
    stuck = ledger.health_verdict(100 + ALLOWED)
    assert (stuck.healthy, stuck.ready) == (False, False)
    assert "a restart should cure it" in stuck.reason and MEMBER in stuck.reason


def test_d7_the_allowance_counts_from_when_the_coordinator_answers_again():
    ledger = joined("s0", at=0)
    ledger.heartbeat(100, capacity=4, stream_prefix=PREFIX, consumer_group=GROUP)
    ledger.on_session_failed()  # the coordinator is gone for a long time ...
    ledger.check_lease(2_000)  # ... during which D1 fences the member (its Redis: no look)
    assert not ledger.in_group and ledger.health_verdict(2_000).healthy
    assert ledger.health_verdict(60_000).healthy  # out for a minute: nobody answers
    beat(ledger, Status.UNKNOWN_MEMBER_ID, at=60_000)  # back, and its join is not taken yet
    assert ledger.health_verdict(60_000 + ALLOWED - 1).healthy
    assert not ledger.health_verdict(60_000 + ALLOWED).healthy


def test_d7_a_join_refused_by_a_cap_is_healthy_and_not_ready_with_the_reason():
    for status in (Status.GROUP_MAX_SIZE_REACHED, Status.GROUP_LIMIT_REACHED,
                   Status.UNRELEASED_INSTANCE_ID):
        ledger = Ledger(MEMBER, capacity=4, now=0)
        beat(ledger, status, at=0)
        verdict = ledger.health_verdict(10 * ALLOWED)
        assert (verdict.healthy, verdict.ready) == (True, False), status
        assert status.value in verdict.reason


def test_d7_a_heartbeat_unanswered_for_an_interval_means_no_coordinator_answers():
    ledger = joined("s0", at=0)
    beat(ledger, Status.UNKNOWN_MEMBER_ID, at=100)
    ledger.heartbeat(200, capacity=4, stream_prefix=PREFIX, consumer_group=GROUP)  # no answer
    verdict = ledger.health_verdict(200 + 10 * ALLOWED)
    assert verdict.healthy and not verdict.ready and "does not answer" in verdict.reason


def test_d7_a_coordinator_without_its_store_does_not_admit_so_no_restart_is_asked_for():
    """COORDINATOR_NOT_AVAILABLE is an answer, but not one that would admit the member (D4:
    the coordinator lost Redis): however long it lasts, a restart cures nothing, and the
    reason names the store, not the member."""
    ledger = Ledger(MEMBER, capacity=4, now=0)
    allowed = ledger.lease_ttl_ms + ledger.heartbeat_interval_ms
    beat(ledger, Status.COORDINATOR_NOT_AVAILABLE, at=0)
    verdict = ledger.health_verdict(10 * allowed)
    assert (verdict.healthy, verdict.ready) == (True, False)
    assert "COORDINATOR_NOT_AVAILABLE" in verdict.reason and "store" in verdict.reason
    beat(ledger, Status.UNKNOWN_MEMBER_ID, at=10 * allowed)  # the store is back: D6 counts now
    assert ledger.health_verdict(11 * allowed - 1).healthy
    assert not ledger.health_verdict(11 * allowed).healthy


def test_d7_a_stopping_member_is_healthy_and_not_ready():
    ledger = joined("s0", at=0)
    ledger.on_leave_requested()
    verdict = ledger.health_verdict(100)
    assert (verdict.healthy, verdict.ready) == (True, False) and "stopping" in verdict.reason


def test_d7_a_member_in_a_d5_outage_stays_in_its_group():
    ledger = joined("s0", at=0)
    ledger.heartbeat(100, capacity=4, stream_prefix=PREFIX, consumer_group=GROUP)
    ledger.on_session_failed()  # the coordinator is down; nothing fenced it
    assert ledger.in_group and ledger.health_verdict(150) == HealthVerdict(True, True)


def test_d7_a_process_is_healthy_and_ready_only_while_every_member_is():
    well, joining, stuck = (HealthVerdict(True, True), HealthVerdict(True, False, "b joining"),
                            HealthVerdict(False, False, "c stuck"))
    assert combine([well, well]) == well
    assert combine([well, joining]) == joining
    assert combine([joining, stuck, well]) == HealthVerdict(False, False, "c stuck")


def test_d7_a_listener_that_stopped_on_its_own_is_unhealthy_and_one_not_running_not_ready():
    member = MemberStatus(member_id="m", joined=True, member_epoch=3, shards=("s0",),
                          leaving=False, processed=1, failed=0, acked=1, in_flight=0,
                          verdict=HealthVerdict(True, True))
    running = listener_status([member], running=True, stopping=False, failure=None)
    assert isinstance(running, ListenerStatus) and running.healthy and running.ready
    assert running.to_json()["members"][0]["memberId"] == "m"
    idle = listener_status([member], running=False, stopping=False, failure=None)
    assert idle.healthy and not idle.ready and idle.reason == "the listener is not running"
    failed = listener_status([member], running=False, stopping=False, failure="StoreMismatch")
    assert not failed.healthy and "StoreMismatch" in failed.reason


def test_messages_are_taken_once_reached_and_the_store_is_known_to_be_the_coordinators() -> None:
    from rsc.member.pure.health import may_take_messages

    assert not may_take_messages(reached=False, store_checked=True, store_to_check=True)
    assert not may_take_messages(reached=True, store_checked=False, store_to_check=True)
    assert may_take_messages(reached=True, store_checked=True, store_to_check=True)
    assert may_take_messages(reached=True, store_checked=False, store_to_check=False)  # none named


def test_k8_a_member_whose_prefix_has_no_routing_is_not_ready():
    ledger = joined("s0", at=0)
    beat(ledger, Status.OK, 50, routing=None)  # the coordinator's answer carries no routing
    verdict = ledger.health_verdict(100)
    assert ledger.in_group
    assert (verdict.healthy, verdict.ready) == (True, False)
    assert "no routing" in verdict.reason
    beat(ledger, Status.OK, 150)  # routing again: ready again
    assert ledger.health_verdict(200) == HealthVerdict(healthy=True, ready=True)


def test_k8_a_join_carries_the_store_id_and_routing_the_member_knows():
    from rsc.protocol import KnownRouting, RoutingSummary

    ledger = Ledger(MEMBER, capacity=4, now=0)
    first = beat(ledger, Status.OK, 0, routing=RoutingSummary(version=3, shard_count=6,
                                                               store_id="abc"))
    assert first.member_epoch == JOIN_EPOCH and first.known_routing is None  # knew nothing yet
    beat(ledger, Status.UNKNOWN_MEMBER_ID, 10)  # a coordinator that lost everything: rejoin
    join = beat(ledger, Status.OK, 20)
    assert join.member_epoch == JOIN_EPOCH
    assert join.known_store_id == "abc"
    assert join.known_routing == KnownRouting(version=3, shard_count=6, hash="crc32")
    later = beat(ledger, Status.OK, 30)
    assert later.member_epoch > 0 and later.known_routing is None  # only joins carry it
