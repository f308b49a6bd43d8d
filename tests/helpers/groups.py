"""Drive a group machine synchronously, as the pure group rule tests do (H1..H14, S1..S6).

Heartbeats of one prefix and group; `send` answers with the group's routing; `report` is
a correct full heartbeat; `settle` reports until the group is STABLE; `unchanged_by`
checks that a rejected event left the state, the leases and the effects as they were.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from rsc.actors.core.group import GroupMachine
from rsc.protocol import messages as m
from rsc.protocol.vocabulary import GroupState, RevokeState

PREFIX, GROUP = "orders", "billing"


def routing_of(group: GroupMachine) -> m.RoutingSummary | None:
    return m.RoutingSummary(version=1, shard_count=len(group.shards)) if group.shards else None


def heartbeat(member_id: str, epoch: int, *, owned: Iterable[str] | None = None,
              revoking: Iterable[str] = (), revoked: Iterable[str] = (),
              capacity: int | None = None, instance: str | None = None) -> m.Heartbeat:
    entries = [m.RevokingShard(shard=s, state=RevokeState.REVOKING) for s in revoking]
    entries += [m.RevokingShard(shard=s, state=RevokeState.REVOKED) for s in revoked]
    return m.Heartbeat(
        request_id=1, stream_prefix=PREFIX, consumer_group=GROUP, member_id=member_id,
        member_epoch=epoch, capacity=capacity, instance_id=instance,
        owned_shards=None if owned is None else tuple(owned), revoking_shards=tuple(entries))


def send(group: GroupMachine, member_id: str, epoch: int, now: int = 0,
         **fields: Any) -> m.HeartbeatResponse:
    return group.heartbeat(heartbeat(member_id, epoch, **fields), now, routing_of(group))


def report(group: GroupMachine, member_id: str, now: int = 0) -> m.HeartbeatResponse:
    """A correct full heartbeat from a member that has drained everything it was asked to."""
    member = group.members[member_id]
    return send(group, member_id, member.member_epoch, now,
                owned=sorted(member.held - member.revoking), revoked=sorted(member.revoking))


def settle(group: GroupMachine, now: int = 0) -> None:
    """Let every live (not AWAY) member report correctly until the group is STABLE."""
    for _ in range(10):
        for member_id in sorted(group.members):
            if not group.members[member_id].away:
                report(group, member_id, now)
        if group.state == GroupState.STABLE:
            return
    raise AssertionError("group did not settle")


def target_of(group: GroupMachine, member_id: str) -> set[str]:
    return set(group.target.of(member_id))


def assigned(response: m.HeartbeatResponse) -> set[str]:
    assert response.assignment is not None
    return set(response.assignment.assigned_shards)


def pending(response: m.HeartbeatResponse) -> set[str]:
    assert response.assignment is not None
    return set(response.assignment.pending_shards)


def unchanged_by(group: GroupMachine, action: Callable[[], object]) -> object:
    """Run `action`; assert it changed no persisted state, no lease and asked for no write or push."""
    record = group.to_record()
    leases = {mid: mb.last_heartbeat_ms for mid, mb in group.members.items()}
    group.take_effects()
    result = action()
    assert group.to_record() == record
    assert {mid: mb.last_heartbeat_ms for mid, mb in group.members.items()} == leases
    effects = group.take_effects()
    assert not effects.dirty and not effects.pushes and not effects.owner_changes
    return result
