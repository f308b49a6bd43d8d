"""Named rule tests of actors/core/prefix_durability.py (H12, D4), on the part alone, and of
actors/core/prefix_views.py (describe's overdue, listGroups' sums). Pure."""

from __future__ import annotations

from rsc.actors.core.group import GroupMachine, GroupSettings
from rsc.actors.core.prefix_durability import UNAVAILABLE, Durability
from rsc.actors.core.prefix_io import Answer, Checkpoint
from rsc.actors.core.prefix_views import is_overdue, summaries
from rsc.actors.core.records import Changes, OwnerToken, RoutingRecord
from rsc.actors.core.shard_reports import GroupTotals
from rsc.protocol import messages as m
from rsc.protocol.errors import Status

SETTINGS = GroupSettings(heartbeat_interval_ms=3000, lease_ttl_ms=10_000, revoke_timeout_ms=60_000)
ROUTING = RoutingRecord(version=1, shard_count=1, streams=("{orders:v1:0}",))
BEAT = m.Heartbeat(request_id=1, stream_prefix="orders", consumer_group="billing", member_id="a",
                   member_epoch=3)


def answered(status: Status) -> Answer:
    return Answer(BEAT, m.HeartbeatResponse(request_id=1, status=status, member_id="a"))


def routing_checkpoint() -> Checkpoint:
    changes = Changes()
    changes.set_routing(ROUTING)
    return Checkpoint(changes=changes, owners=(OwnerToken("{orders:v1:0}", "billing", "a"),))


def test_h12_what_reveals_state_is_unavailable_when_the_write_failed():
    part = Durability()
    part.last_checkpoint = routing_checkpoint()
    for status in (Status.OK, Status.REVOKE_PENDING, Status.SYNC_METADATA):
        response = part.resolve(answered(status), durable=False)
        assert response.status == Status.COORDINATOR_NOT_AVAILABLE and response.error == UNAVAILABLE
        assert part.resolve(answered(status), durable=True).status == status
    fenced = part.resolve(answered(Status.FENCED_MEMBER_EPOCH), durable=False)
    assert fenced.status == Status.FENCED_MEMBER_EPOCH  # reveals nothing: sent as it is


def test_h12_a_batch_that_only_repaired_reveals_nothing_new_and_answers_as_usual():
    part = Durability()
    part.last_checkpoint = Checkpoint(changes=routing_checkpoint().changes, repair_only=True)
    assert part.resolve(answered(Status.OK), durable=False).status == Status.OK


def test_h12_a_later_answer_is_built_from_what_is_durable_then():
    part = Durability()
    built = m.Routing(request_id=5, status=Status.OK, stream_prefix="orders")
    answer = Answer(m.GetRouting(request_id=5, stream_prefix="orders"), later=lambda: built)
    assert part.resolve(answer, durable=False) is built


def test_d4_every_field_and_token_of_a_failed_write_is_written_again_until_one_lands():
    part = Durability()
    failed = routing_checkpoint()
    part.last_checkpoint = failed
    part.failed(failed)
    assert part.repair_pending
    changes, owners = Changes(), []
    group = GroupMachine("orders", "billing", SETTINGS, ROUTING.streams)
    part.repair(changes, owners, {"billing": group}, ROUTING, None)
    assert changes.routing_changed and changes.routing == ROUTING
    assert owners == [OwnerToken("{orders:v1:0}", "billing", None)]  # memory's value: no owner
    repair = Checkpoint(changes=changes, owners=tuple(owners))
    part.last_checkpoint = repair
    part.landed(repair)
    assert not part.repair_pending and part.persisted.routing == ROUTING


def test_d4_a_write_that_landed_late_is_adopted_as_the_rollback_point():
    part = Durability()
    late = routing_checkpoint()
    part.adopted(late)
    assert part.persisted.routing == ROUTING


def test_overdue_is_a_last_heartbeat_older_than_interval_and_a_half():
    assert is_overdue(4501, 3000) and not is_overdue(4500, 3000) and not is_overdue(None, 3000)


def test_list_groups_lag_is_zero_without_shards_and_null_when_the_read_failed():
    groups = {"billing": GroupMachine("orders", "billing", SETTINGS, ())}
    assert summaries(groups, None, has_shards=False)[0].lag == 0
    assert summaries(groups, None, has_shards=True)[0].lag is None
    (summed,) = summaries(groups, {"billing": GroupTotals(lag=7, pending=2)}, has_shards=True)
    assert (summed.lag, summed.pending) == (7, 2)
