"""Pure tests of the heartbeat pacing: the interval, the join backoff (A1) and the lease (D1)."""

from __future__ import annotations

import pytest

from rsc.member.pure.ledger import Ledger
from rsc.member.pure.pacing import HeartbeatPacing, jittered
from rsc.protocol import Assignment, HeartbeatResponse, Status

PREFIX, GROUP, MEMBER = "orders", "billing", "10.0.0.7-42-0-abcd"
CAPS = [Status.GROUP_MAX_SIZE_REACHED, Status.GROUP_LIMIT_REACHED]


def respond(status: Status = Status.OK, assigned=(), interval_ms: int = 200,
            lease_ms: int = 1000) -> HeartbeatResponse:
    if status is not Status.OK:
        return HeartbeatResponse(request_id=1, status=status, member_id=MEMBER, error="cap")
    return HeartbeatResponse(
        request_id=1, status=status, member_id=MEMBER, member_epoch=5, group_epoch=5,
        assignment_epoch=5, heartbeat_interval_ms=interval_ms, lease_ttl_ms=lease_ms,
        assignment=Assignment(assigned_shards=tuple(assigned)))


def exchange(ledger: Ledger, response: HeartbeatResponse, sent_at: float = 0.0) -> None:
    _, sent, _ = ledger.heartbeat(sent_at, capacity=4, stream_prefix=PREFIX, consumer_group=GROUP)
    ledger.on_response(sent, response)


def pacing(*, jitter: float = 0.0, draw: float = 1.0, initial_s: float = 0.2,
           maximum_s: float = 0.8) -> HeartbeatPacing:
    return HeartbeatPacing(default_interval_ms=1000, jitter=jitter, join_retry_initial_s=initial_s,
                           join_retry_max_s=maximum_s, draw=lambda: draw)


def test_a_jittered_heartbeat_is_never_later_than_the_interval():
    assert jittered(3000, 0.2, lambda: 0.0) == 3000
    assert 2400 < jittered(3000, 0.2, lambda: 0.999999) < 2401
    assert jittered(3000, 0.0, lambda: 0.7) == 3000


def test_the_wait_is_the_coordinators_interval_else_the_members_default():
    ledger = Ledger(MEMBER, capacity=4)
    assert pacing().next_beat(ledger, 0).wait_ms == 1000, "nothing heard yet: the default"
    exchange(ledger, respond(interval_ms=300))
    beat = pacing().next_beat(ledger, 0)
    assert beat.wait_ms == 300 and beat.join_refused is None and not beat.join_taken
    assert pacing(jitter=0.5, draw=0.5).next_beat(ledger, 0).wait_ms == 225


def test_d1_the_wait_ends_at_the_lease_deadline():
    ledger = Ledger(MEMBER, capacity=4)
    exchange(ledger, respond(assigned=["a"], interval_ms=3000, lease_ms=1000), sent_at=100)
    exchange(ledger, respond(assigned=["a"], interval_ms=3000, lease_ms=1000), sent_at=100)
    assert pacing().next_beat(ledger, 400).wait_ms == 700, "wake at 1100: fence, then rejoin"
    assert pacing().next_beat(ledger, 1500).wait_ms == 0, "past it: at once"


@pytest.mark.parametrize("status", CAPS)
def test_a1_a_refused_join_waits_a_doubling_backoff_and_is_said_each_time(status):
    ledger, pace = Ledger(MEMBER, capacity=4), pacing(initial_s=0.2, maximum_s=0.5)
    waits = []
    for _ in range(4):
        exchange(ledger, respond(status))
        beat = pace.next_beat(ledger, 0)
        assert beat.join_refused is status and not beat.join_taken
        waits.append(beat.wait_ms)
    assert waits == [200, 400, 500, 500], "not the 1 s interval: the join backoff, capped"


@pytest.mark.parametrize("status", CAPS)
def test_a1_the_join_taken_after_refusals_is_said_once_and_resets_the_backoff(status):
    ledger, pace = Ledger(MEMBER, capacity=4), pacing(initial_s=0.2, maximum_s=0.8)
    for _ in range(2):
        exchange(ledger, respond(status))
        pace.next_beat(ledger, 0)
    exchange(ledger, respond(assigned=["a"]))
    taken = pace.next_beat(ledger, 0)
    assert taken.join_taken and taken.join_refused is None and taken.wait_ms == 200
    assert not pace.next_beat(ledger, 0).join_taken, "said once"
    exchange(ledger, respond(status))  # refused again later: from the first delay again
    assert pace.next_beat(ledger, 0).wait_ms == 200


def test_a_join_taken_without_refusals_says_nothing():
    ledger, pace = Ledger(MEMBER, capacity=4), pacing()
    exchange(ledger, respond(assigned=["a"]))
    assert not pace.next_beat(ledger, 0).join_taken


# --- how long the shell waits on the coordinator (D5, D6) --------------------------------


def ledger_with(interval_ms: int, lease_ms: int) -> Ledger:
    """A member whose coordinator named these timings (its join answered)."""
    ledger = Ledger(MEMBER, capacity=4)
    exchange(ledger, respond(interval_ms=interval_ms, lease_ms=lease_ms))
    return ledger


def test_d6_a_session_that_does_not_open_is_given_up_within_two_intervals_and_10_s():
    beat = pacing()
    assert beat.connect_timeout_s(ledger_with(3000, 10_000)) == 6.0  # the shipped defaults
    assert beat.connect_timeout_s(ledger_with(200, 1000)) == 1.0
    assert beat.connect_timeout_s(ledger_with(30_000, 100_000)) == 10.0


@pytest.mark.parametrize(("interval", "lease"), [(3000, 10_000), (200, 1000), (300, 2000),
                                                 (500, 3000), (1000, 3000)])
def test_d6_one_lost_answer_never_costs_the_lease(interval, lease):
    """The last accepted heartbeat was sent at 0, the next at one interval (never later);
    its answer is lost: the shell gives the session up, and the retry on a new session
    (a reconnect delay never past an interval, a round trip) still lands inside the lease."""
    ledger, beat = ledger_with(interval, lease), pacing()
    given_up = interval + beat.answer_timeout_s(ledger, 10.0) * 1000
    retried = given_up + beat.reconnect_delay_s(ledger) * 1000
    assert retried < lease
    assert beat.answer_timeout_s(ledger, 10.0) * 1000 >= min(interval, lease / 3), \
        "a metadata write the coordinator abandons (D4) is answered before the member gives up"


def test_d5_reconnects_are_never_more_than_an_interval_apart():
    beat, ledger = pacing(), ledger_with(300, 2000)
    delays = [beat.reconnect_delay_s(ledger) for _ in range(12)]
    assert delays[0] < delays[3] and max(delays) <= 0.3
    beat.session_opened()
    assert beat.reconnect_delay_s(ledger) == delays[0]
