"""Named rule tests of actors/core/prefix_admission.py (A1, H13): which requests may create state on a
prefix, and the caps. Pure: no Redis, no trio."""

from __future__ import annotations

import attrs

from rsc.actors.core.group import GroupMachine, GroupSettings, malformed_join
from rsc.actors.core.prefix_admission import Caps, GroupBudget, answer_without_state, may_create
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import JOIN_EPOCH, LEAVE_EPOCH, TEMPORARY_LEAVE_EPOCH

PREFIX, GROUP = "orders", "billing"


def beat(epoch: int, member_id: str = "a", owned: tuple[str, ...] | None = ()) -> m.Heartbeat:
    return m.Heartbeat(request_id=1, stream_prefix=PREFIX, consumer_group=GROUP, member_id=member_id,
                       member_epoch=epoch, owned_shards=owned)


def set_shards(group: str | None = GROUP) -> m.SetShardCount:
    return m.SetShardCount(request_id=2, stream_prefix=PREFIX, consumer_group=group, shard_count=2)


ADMIN_GROUP_REQUESTS: tuple[m.GroupRequest, ...] = (
    m.DescribeGroup(request_id=3, stream_prefix=PREFIX, consumer_group=GROUP),
    m.SetMaxConcurrency(request_id=4, stream_prefix=PREFIX, consumer_group=GROUP, max_concurrency=2),
    m.RemoveMember(request_id=5, stream_prefix=PREFIX, consumer_group=GROUP, member_id="a"),
    m.DeleteGroup(request_id=6, stream_prefix=PREFIX, consumer_group=GROUP),
    m.ResetOffsets(request_id=7, stream_prefix=PREFIX, consumer_group=GROUP, to="earliest"),
)


def test_a1_only_a_join_and_set_shard_count_may_create_state():
    assert may_create(beat(JOIN_EPOCH))
    assert may_create(set_shards()) and may_create(set_shards(None))
    assert not may_create(beat(LEAVE_EPOCH)) and not may_create(beat(4))
    assert not may_create(m.GetRouting(request_id=1, stream_prefix=PREFIX, subscribe=True))
    assert not any(may_create(request) for request in ADMIN_GROUP_REQUESTS)


def test_h13_a_join_or_set_shard_count_on_a_prefix_without_state_starts_it():
    budget = GroupBudget(10)
    assert answer_without_state(beat(JOIN_EPOCH), budget) is None
    assert answer_without_state(set_shards(), budget) is None
    assert answer_without_state(set_shards(), None) is None
    assert budget.total == 0  # deciding counts nothing: the prefix counts its own groups


def test_h9_a_leave_on_a_prefix_without_state_is_ok_and_a_stale_epoch_unknown_member():
    leave = answer_without_state(beat(LEAVE_EPOCH), GroupBudget(10))
    assert isinstance(leave, m.HeartbeatResponse)
    assert leave.status == Status.OK and leave.member_epoch == LEAVE_EPOCH
    stale = answer_without_state(beat(5), GroupBudget(10))
    assert stale is not None and stale.status == Status.UNKNOWN_MEMBER_ID


def test_a1_admin_requests_on_a_prefix_without_state_are_answered_in_their_own_type():
    for request in ADMIN_GROUP_REQUESTS:
        response = answer_without_state(request, GroupBudget(10))
        assert response is not None and response.status == Status.UNKNOWN_GROUP
        assert type(response) is type(request.unknown_group())
    routing = answer_without_state(m.GetRouting(request_id=1, stream_prefix=PREFIX), None)
    assert isinstance(routing, m.Routing) and routing.status == Status.UNKNOWN_STREAM
    retention = answer_without_state(m.SetRetention(request_id=1, stream_prefix=PREFIX,
                                                    retention=m.Retention()), None)
    assert isinstance(retention, m.RetentionChanged) and retention.status == Status.UNKNOWN_STREAM


def test_a1_a_join_or_registration_past_max_groups_is_refused_without_state():
    budget = GroupBudget(1)
    budget.count("elsewhere", 1)
    joined = answer_without_state(beat(JOIN_EPOCH), budget)
    assert isinstance(joined, m.HeartbeatResponse)
    assert joined.status == Status.GROUP_LIMIT_REACHED and "--max-groups (1)" in (joined.error or "")
    registered = answer_without_state(set_shards(), budget)
    assert isinstance(registered, m.ShardCountChanged)
    assert registered.status == Status.GROUP_LIMIT_REACHED
    assert budget.total == 1 and budget.counts == {"elsewhere": 1}  # nothing changed


def test_a1_routing_alone_is_no_group_and_is_not_refused_by_max_groups():
    budget = GroupBudget(1)
    budget.count("elsewhere", 1)
    assert answer_without_state(set_shards(None), budget) is None


def test_a1_the_budget_counts_every_prefix_and_forgets_an_empty_one():
    budget = GroupBudget(3)
    budget.count("a", 2)
    budget.count("b", 1)
    assert budget.total == 3 and budget.full
    budget.count("a", 0)
    assert budget.total == 1 and "a" not in budget.counts and not budget.full


@attrs.define
class Members:
    """A group as `Caps.join_refused` sees it, for a dynamic group (no instanceIds)."""

    members: dict[str, object]

    def join_adds_member(self, request: m.Heartbeat) -> bool:
        return request.member_id not in self.members


def test_a1_max_group_size_refuses_only_a_join_of_a_new_member_into_a_full_group():
    caps = Caps(PREFIX, max_group_size=2)
    full = Members({"a": object(), "b": object()})
    refused = caps.join_refused(beat(JOIN_EPOCH, "c"), full)
    assert refused is not None and refused.status == Status.GROUP_MAX_SIZE_REACHED
    assert "--max-group-size (2)" in (refused.error or "")
    assert caps.join_refused(beat(JOIN_EPOCH, "a"), full) is None  # a live member rejoining
    assert caps.join_refused(beat(3, "c"), full) is None  # no join
    assert caps.join_refused(beat(JOIN_EPOCH, "c"), Members({"a": object()})) is None  # room left
    assert Caps(PREFIX).join_refused(beat(JOIN_EPOCH, "c"), full) is None  # no cap


def static_join(member_id: str, instance: str) -> m.Heartbeat:
    return m.Heartbeat(request_id=1, stream_prefix=PREFIX, consumer_group=GROUP, member_id=member_id,
                       member_epoch=JOIN_EPOCH, owned_shards=(), instance_id=instance)


def test_a1_s3_s4_max_group_size_counts_no_return_and_no_duplicate_as_a_new_member():
    group = GroupMachine(PREFIX, GROUP, GroupSettings(), (f"{PREFIX}:v1:0", f"{PREFIX}:v1:1"))
    for member_id, instance in (("a", "pod-0"), ("b", "pod-1")):
        assert group.heartbeat(static_join(member_id, instance), 0, None).status == Status.OK
    caps = Caps(PREFIX, max_group_size=2)
    # S4: a second live holder of pod-0 is a duplicate, for the group machine to answer
    assert caps.join_refused(static_join("a2", "pod-0"), group) is None
    assert group.heartbeat(static_join("a2", "pod-0"), 1, None).status == Status.UNRELEASED_INSTANCE_ID
    # S3: pod-0 away, then back under a new memberId into the full group
    leave = m.Heartbeat(request_id=2, stream_prefix=PREFIX, consumer_group=GROUP, member_id="a",
                        member_epoch=TEMPORARY_LEAVE_EPOCH, owned_shards=())
    assert group.heartbeat(leave, 2, None).status == Status.OK
    assert caps.join_refused(static_join("a3", "pod-0"), group) is None
    assert group.heartbeat(static_join("a3", "pod-0"), 3, None).status == Status.OK
    # a new instance (or a dynamic member) still finds the group full
    refused = caps.join_refused(static_join("c", "pod-2"), group)
    assert refused is not None and refused.status == Status.GROUP_MAX_SIZE_REACHED
    refused = caps.join_refused(beat(JOIN_EPOCH, "d"), group)
    assert refused is not None and refused.status == Status.GROUP_MAX_SIZE_REACHED


def test_a1_max_groups_refuses_a_new_group_while_the_budget_is_full():
    budget = GroupBudget(1)
    caps = Caps(PREFIX, budget)
    assert caps.new_group_refused(beat(JOIN_EPOCH), GROUP) is None
    caps.count(1)
    refused = caps.new_group_refused(beat(JOIN_EPOCH), "two")
    assert refused is not None and refused.status == Status.GROUP_LIMIT_REACHED
    assert Caps(PREFIX).new_group_refused(beat(JOIN_EPOCH), "two") is None  # no budget


def test_a_join_that_lists_owned_shards_is_malformed_named_by_its_field():
    assert malformed_join(beat(JOIN_EPOCH, owned=("{orders:v1:0}",))) == (
        "field 'ownedShards' must be empty on a join (memberEpoch 0)")
    assert malformed_join(beat(JOIN_EPOCH, owned=())) is None
    assert malformed_join(beat(JOIN_EPOCH, owned=None)) is None
    assert malformed_join(beat(3, owned=("{orders:v1:0}",))) is None  # only a join
