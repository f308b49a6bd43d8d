"""Static membership through the prefix machine (S5 removal by instanceId, S6 describe). Pure:
the machine is driven synchronously like tests/test_prefix_operations.py."""

from __future__ import annotations

from rsc.actors.core.group import GroupSettings
from rsc.actors.core.prefix import PrefixMachine
from rsc.actors.core.prefix_io import LagRead
from rsc.actors.redis_io.shard_ops import ShardLag
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.routing import stream_key
from rsc.protocol.vocabulary import TEMPORARY_LEAVE_EPOCH, MemberState

PREFIX, GROUP = "orders", "billing"
SETTINGS = GroupSettings(heartbeat_interval_ms=200, lease_ttl_ms=1000, revoke_timeout_ms=5000,
                         static_session_timeout_ms=60_000)
STREAMS = tuple(stream_key(PREFIX, 1, i) for i in range(2))


def handle(machine: PrefixMachine, request: m.Request, now: int = 0) -> m.Response:
    answer = machine.handle(request, now)
    machine.committed(machine.checkpoint())
    return machine.resolve(answer, durable=True)


def beat(member_id: str, epoch: int, instance: str | None = None,
         owned: tuple[str, ...] | None = ()) -> m.Heartbeat:
    return m.Heartbeat(request_id=2, stream_prefix=PREFIX, consumer_group=GROUP,
                       member_id=member_id, member_epoch=epoch, instance_id=instance,
                       owned_shards=owned)


def remove(member_id: str | None = None, instance: str | None = None) -> m.RemoveMember:
    return m.RemoveMember(request_id=3, stream_prefix=PREFIX, consumer_group=GROUP,
                          member_id=member_id, instance_id=instance)


def static_group() -> PrefixMachine:
    """Static member m1 (pod-0) holding both shards, then AWAY (S2)."""
    machine = PrefixMachine(PREFIX, SETTINGS)
    handle(machine, m.SetShardCount(request_id=1, stream_prefix=PREFIX, consumer_group=GROUP,
                                    shard_count=2))
    joined = handle(machine, beat("m1", 0, "pod-0"))
    assert isinstance(joined, m.HeartbeatResponse) and joined.member_epoch is not None
    handle(machine, beat("m1", joined.member_epoch, owned=STREAMS))
    assert set(machine.groups[GROUP].owners) == set(STREAMS)
    left = handle(machine, beat("m1", TEMPORARY_LEAVE_EPOCH))
    assert left.status == Status.OK
    return machine


def test_s5_remove_member_by_instance_id_removes_an_away_member_and_names_its_member_id():
    machine = static_group()
    epoch = machine.groups[GROUP].group_epoch
    response = handle(machine, remove(instance="pod-0"), 100)
    assert isinstance(response, m.MemberRemoved)
    assert (response.status, response.member_id) == (Status.OK, "m1")
    assert response.group_epoch == epoch + 1  # its shards move: the epoch grows
    assert not machine.groups[GROUP].members and not machine.groups[GROUP].instances


def test_s5_remove_member_by_an_unknown_instance_id_is_unknown_member_id_naming_it():
    machine = static_group()
    before = machine.groups[GROUP].group_epoch
    response = handle(machine, remove(instance="pod-9"), 100)
    assert response.status == Status.UNKNOWN_MEMBER_ID
    assert "'pod-9'" in (response.error or "")
    assert machine.groups[GROUP].group_epoch == before and "m1" in machine.groups[GROUP].members


def test_s5_remove_member_by_member_id_still_works_for_an_away_member():
    machine = static_group()
    response = handle(machine, remove(member_id="m1"), 100)
    assert (response.status, getattr(response, "member_id", None)) == (Status.OK, "m1")


def test_s6_describe_shows_an_away_member_not_overdue_and_its_shards_owned_by_nobody():
    machine = static_group()
    answer = machine.handle(m.DescribeGroup(request_id=5, stream_prefix=PREFIX,
                                            consumer_group=GROUP), 5000)
    machine.committed(machine.checkpoint())
    machine.lag_measured(LagRead(GROUP, STREAMS), [ShardLag(s, 3, "0-0", 3, 0, None)
                                                   for s in STREAMS])
    response = machine.resolve(answer, durable=True)
    assert isinstance(response, m.GroupDescription)
    [member] = response.members
    assert (member.member_id, member.instance_id, member.state) == ("m1", "pod-0", MemberState.AWAY)
    assert member.away_ms == 5000 and member.overdue is False  # 5000 ms > 300 ms, but away
    assert set(member.target_shards) == set(STREAMS)
    assert [shard.owner for shard in response.shards] == [None, None]
