"""Pure tests of the member side of static membership (S1..S5): the ledger and reconciliation
decide; nothing here awaits. One named test (or more) per member obligation."""

from __future__ import annotations

import pytest

from rsc.member.listener import member_instance_ids
from rsc.member.pure.ledger import Ledger
from rsc.member.pure.pacing import HeartbeatPacing
from rsc.member.pure.reconcile import JOIN_EPOCH, LEAVE_EPOCH, NO_ACTIONS, TEMPORARY_LEAVE_EPOCH, EventName
from rsc.member.shells.heartbeat import join_refused_line
from rsc.protocol import Assignment, HeartbeatResponse, Status

PREFIX, GROUP, MEMBER, INSTANCE = "orders", "billing", "10.0.0.7-42-0-abcd", "pod-0"


def respond(status: Status = Status.OK, epoch: int = 5, assigned=()) -> HeartbeatResponse:
    if status not in (Status.OK, Status.REVOKE_PENDING, Status.SYNC_METADATA):
        return HeartbeatResponse(request_id=1, status=status, member_id=MEMBER, error="nope")
    return HeartbeatResponse(
        request_id=1, status=status, member_id=MEMBER, member_epoch=epoch, group_epoch=epoch,
        assignment_epoch=epoch, heartbeat_interval_ms=200, lease_ttl_ms=1000,
        assignment=Assignment(assigned_shards=tuple(assigned), pending_shards=()))


def send(ledger: Ledger, at: float = 0.0):
    request, sent, actions = ledger.heartbeat(at, capacity=4, stream_prefix=PREFIX,
                                              consumer_group=GROUP)
    assert actions is NO_ACTIONS
    return request, sent


def exchange(ledger: Ledger, response: HeartbeatResponse, at: float = 0.0):
    return ledger.on_response(send(ledger, at)[1], response)


def static(*shards: str, instance: str | None = INSTANCE) -> Ledger:
    ledger = Ledger(MEMBER, capacity=4, instance_id=instance)
    exchange(ledger, respond(assigned=shards))
    exchange(ledger, respond(assigned=shards))  # full ownership reported
    return ledger


def test_s1_a_static_member_sends_its_instance_id_on_the_join_and_after():
    ledger = Ledger(MEMBER, capacity=4, instance_id=INSTANCE)
    join, _ = send(ledger)
    assert (join.member_epoch, join.instance_id) == (JOIN_EPOCH, INSTANCE)
    exchange(ledger, respond(assigned=["a"]))
    later, _ = send(ledger, 10)
    assert later.member_epoch == 5 and later.instance_id == INSTANCE  # repeated, never changed
    assert send(Ledger(MEMBER, capacity=4))[0].instance_id is None  # a dynamic member sends none


def test_s1_with_several_members_member_i_uses_id_dash_i():
    assert member_instance_ids("pod-0", 1) == ["pod-0"]
    assert member_instance_ids("pod-0", 3) == ["pod-0-0", "pod-0-1", "pod-0-2"]
    assert member_instance_ids(None, 2) == [None, None]


def test_s2_a_static_member_stops_reading_drains_then_leaves_with_minus_two_holding_nothing():
    ledger = static("a", "b")
    ledger.started("a")  # one entry of a in flight
    actions = ledger.on_leave_requested()
    assert actions.revoke == {"a", "b"}  # no new reads
    request, _ = send(ledger, 50)
    assert request.member_epoch == 5, "still draining a: no leave yet"
    ledger.finished("a")
    assert not ledger.state.holds
    request, sent = send(ledger, 60)
    assert request.member_epoch == TEMPORARY_LEAVE_EPOCH
    assert not request.owned_shards and request.revoking_shards == ()
    assert request.instance_id == INSTANCE
    actions = ledger.on_response(sent, respond(epoch=TEMPORARY_LEAVE_EPOCH))
    assert ledger.left and ledger.state.member_epoch == TEMPORARY_LEAVE_EPOCH
    [left] = actions.events
    assert left.name is EventName.LEFT and left.member_epoch == TEMPORARY_LEAVE_EPOCH


def test_s2_a_static_member_asked_to_leave_for_good_sends_minus_one():
    ledger = static("a")
    ledger.on_leave_requested(for_good=True)
    request, sent = send(ledger, 10)
    assert request.member_epoch == LEAVE_EPOCH
    ledger.on_response(sent, respond(epoch=LEAVE_EPOCH))
    assert ledger.left


def test_s2_a_dynamic_member_always_leaves_with_minus_one():
    ledger = static("a", instance=None)
    ledger.on_leave_requested()
    assert send(ledger, 10)[0].member_epoch == LEAVE_EPOCH


@pytest.mark.parametrize("status", [Status.UNKNOWN_MEMBER_ID, Status.FENCED_INSTANCE_ID])
def test_s2_a_temporary_leave_the_coordinator_no_longer_takes_still_counts(status):
    ledger = static("a")
    ledger.on_leave_requested()
    _, sent = send(ledger, 10)
    ledger.on_response(sent, respond(status))
    assert ledger.left and not ledger.state.holds


def test_s3_a_replaced_member_stops_for_good_holding_nothing_and_never_rejoins():
    ledger = static("a", "b")
    ledger.started("a")
    actions = exchange(ledger, respond(Status.FENCED_INSTANCE_ID), 10)
    assert actions.abandon == {"a", "b"} and not ledger.state.holds
    assert ledger.left, "nothing more to send: no rejoin"
    assert ledger.state.instance_fenced is not None and "'pod-0'" in ledger.state.instance_fenced
    [event] = actions.events
    assert event.name is EventName.INSTANCE_FENCED and set(event.shards) == {"a", "b"}
    assert not actions.heartbeat_now


def test_s4_a_duplicate_holds_nothing_retries_the_join_with_backoff_and_says_so_once():
    ledger = Ledger(MEMBER, capacity=4, instance_id=INSTANCE)
    actions = exchange(ledger, respond(Status.UNRELEASED_INSTANCE_ID))
    assert not ledger.state.holds and not ledger.left
    assert ledger.state.join_refused is Status.UNRELEASED_INSTANCE_ID
    assert [event.name for event in actions.events] == [EventName.JOIN_REFUSED]
    pacing = HeartbeatPacing(default_interval_ms=200, jitter=0.0, join_retry_initial_s=0.5,
                             join_retry_max_s=15.0, draw=lambda: 0.0)
    first = pacing.next_beat(ledger, 0)
    assert first.join_refused is Status.UNRELEASED_INSTANCE_ID and first.wait_ms >= 250
    join, _ = send(ledger, 600)
    assert join.member_epoch == JOIN_EPOCH and join.instance_id == INSTANCE  # the retry
    again = exchange(ledger, respond(Status.UNRELEASED_INSTANCE_ID), 600)
    assert again.events == (), "said once while it lasts"
    assert pacing.next_beat(ledger, 600).wait_ms >= first.wait_ms, "backing off"
    exchange(ledger, respond(assigned=["a"]), 2000)
    assert ledger.state.joined and ledger.state.join_refused is None


def test_s4_the_duplicate_line_names_the_instance_id_and_the_likely_cause():
    line = join_refused_line("ws://c:1", MEMBER, PREFIX, GROUP, Status.UNRELEASED_INSTANCE_ID,
                             INSTANCE)
    assert "UNRELEASED_INSTANCE_ID" in line and "instanceId 'pod-0'" in line
    assert "same instance id" in line and "retrying the join with backoff" in line


def test_s5_a_static_member_whose_lease_ran_out_rejoins_with_its_instance_id():
    ledger = static("a")
    actions = ledger.check_lease(5000)  # D1: the lease ran out
    assert actions.abandon == {"a"}
    join, _ = send(ledger, 5000)
    assert (join.member_epoch, join.instance_id) == (JOIN_EPOCH, INSTANCE)  # S3's return


def test_s1_the_listener_gives_each_member_its_instance_id_and_refuses_a_bad_one():
    from rsc.member.listener import Listener

    async def handle(message) -> None:
        return None

    options = {"stream_prefix": PREFIX, "consumer_group": GROUP,
               "coordinator_url": "ws://127.0.0.1:1", "redis_url": "redis://127.0.0.1:1/0"}
    several = Listener(handle, concurrency=2, instance_id="pod-0", **options)
    assert [m.config.instance_id for m in several.members] == ["pod-0-0", "pod-0-1"]
    assert Listener(handle, instance_id="pod-0", **options).members[0].config.instance_id == "pod-0"
    assert Listener(handle, **options).members[0].config.instance_id is None
    with pytest.raises(ValueError, match="instance_id 'pod\\\\n0'.*control character"):
        Listener(handle, instance_id="pod\n0", **options)
