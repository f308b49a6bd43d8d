"""Named rule tests of actors/core/prefix_lifecycle.py (G1, G3), on the part alone. Pure."""

from __future__ import annotations

from rsc.actors.core.group import GroupMachine, GroupSettings
from rsc.actors.core.prefix_io import DestroyConsumerGroups
from rsc.actors.core.prefix_lifecycle import Lifecycle
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import JOIN_EPOCH

PREFIX, GROUP = "orders", "billing"
SETTINGS = GroupSettings(heartbeat_interval_ms=3000, lease_ttl_ms=10_000, revoke_timeout_ms=60_000)
SHARDS = ("{orders:v1:0}", "{orders:v1:1}")


def groups(*, member: bool = False) -> dict[str, GroupMachine]:
    group = GroupMachine(PREFIX, GROUP, SETTINGS, SHARDS)
    if member:
        group.heartbeat(m.Heartbeat(request_id=1, stream_prefix=PREFIX, consumer_group=GROUP,
                                    member_id="a", member_epoch=JOIN_EPOCH, owned_shards=()),
                        0, None)
    return {GROUP: group}


def delete(name: str = GROUP) -> m.DeleteGroup:
    return m.DeleteGroup(request_id=1, stream_prefix=PREFIX, consumer_group=name)


def reset(name: str = GROUP) -> m.ResetOffsets:
    return m.ResetOffsets(request_id=2, stream_prefix=PREFIX, consumer_group=name, to="earliest")


def test_g1_only_an_empty_group_is_deleted():
    part, books = Lifecycle(PREFIX), groups(member=True)
    refused = part.delete(delete(), books)
    assert refused.status == Status.GROUP_NOT_EMPTY and GROUP in books
    assert part.cleanup(SHARDS) is None
    assert part.delete(delete("ghost"), books).status == Status.UNKNOWN_GROUP


def test_g1_a_deleted_group_drops_its_consumer_groups_on_every_stream():
    part, books = Lifecycle(PREFIX), groups()
    assert part.delete(delete(), books).status == Status.OK and GROUP not in books
    deleted, _ = part.take()
    assert set(deleted) == {GROUP}  # its last effects go with the checkpoint
    assert part.cleanup(SHARDS) == DestroyConsumerGroups(SHARDS, (GROUP,))


def test_g1_a_group_registered_again_before_its_cleanup_keeps_its_consumer_groups():
    part, books = Lifecycle(PREFIX), groups()
    part.delete(delete(), books)
    part.registered(GROUP)
    assert part.cleanup(SHARDS) is None


def test_g1_a_cleanup_that_failed_is_queued_again_unless_the_group_is_back():
    part = Lifecycle(PREFIX)
    part.cleanup_failed((GROUP, "audit"), {"audit": object()})
    assert part.cleanup(SHARDS) == DestroyConsumerGroups(SHARDS, (GROUP,))
    part.taken_cleanup()
    assert part.cleanup(SHARDS) is None


def test_g3_only_a_group_without_live_members_moves_its_offsets():
    part = Lifecycle(PREFIX)
    refused = part.reset_offsets(reset(), groups(member=True), SHARDS)
    assert refused.response is not None and refused.response.status == Status.GROUP_NOT_EMPTY
    unknown = part.reset_offsets(reset("ghost"), groups(), SHARDS)
    assert unknown.response is not None and unknown.response.status == Status.UNKNOWN_GROUP
    assert part.take()[1] == ()


def test_g3_the_answer_is_built_from_the_moves_outcome():
    part = Lifecycle(PREFIX)
    answer = part.reset_offsets(reset(), groups(), SHARDS)
    _, (move,) = part.take()
    assert move.streams == SHARDS and move.group == GROUP and answer.later is not None
    part.offsets_moved(move, {SHARDS[0]: "5-0", SHARDS[1]: "0-0"})
    response = answer.later()
    assert isinstance(response, m.OffsetsReset) and response.status == Status.OK
    assert [(s.shard, s.last_delivered_id) for s in response.shards] == [
        (SHARDS[0], "5-0"), (SHARDS[1], "0-0")]


def test_g3_a_move_that_failed_is_answered_coordinator_not_available():
    part = Lifecycle(PREFIX)
    answer = part.reset_offsets(reset(), groups(), SHARDS)
    part.take()
    assert answer.later is not None
    assert answer.later().status == Status.COORDINATOR_NOT_AVAILABLE
