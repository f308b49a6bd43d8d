"""A protocol-level simulated member for integration tests: follows the member table of docs/protocol.md.

It drains instantly (a revoked shard is released the moment it is asked for)
and records what it holds, so tests can check H3 across members at any time.
"""

from __future__ import annotations

import attrs

from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import RevokeState


@attrs.define
class SimMember:
    member_id: str
    stream_prefix: str
    consumer_group: str
    epoch: int = 0
    held: set[str] = attrs.field(factory=set)
    revoked_to_report: set[str] = attrs.field(factory=set)
    send_full: bool = True
    statuses: list[str] = attrs.field(factory=list)

    def request(self) -> m.Heartbeat:
        return m.Heartbeat(
            request_id=0, stream_prefix=self.stream_prefix, consumer_group=self.consumer_group,
            member_id=self.member_id, member_epoch=self.epoch,
            owned_shards=tuple(sorted(self.held)) if self.send_full or self.epoch == 0 else None,
            revoking_shards=tuple(m.RevokingShard(shard=s, state=RevokeState.REVOKED)
                                  for s in sorted(self.revoked_to_report)))

    def apply(self, sent: m.Heartbeat, response: m.HeartbeatResponse) -> None:
        """Follow the member obligations for `response` to `sent`."""
        self.statuses.append(str(response.status))
        status = response.status
        if status in (Status.UNKNOWN_MEMBER_ID, Status.FENCED_MEMBER_EPOCH):
            self.held.clear()
            self.revoked_to_report.clear()
            self.epoch = 0
            self.send_full = True
            return
        if status not in (Status.OK, Status.REVOKE_PENDING, Status.SYNC_METADATA):
            return
        assert response.assignment is not None
        assigned = set(response.assignment.assigned_shards)
        before = set(self.held)
        dropped = self.held - assigned
        self.held -= dropped
        if status == Status.OK:
            assert response.member_epoch is not None
            self.epoch = response.member_epoch
            self.held |= assigned
            # REVOKED entries are repeated until an OK answers them
            self.revoked_to_report -= {r.shard for r in sent.revoking_shards}
        self.revoked_to_report |= dropped
        self.send_full = status == Status.SYNC_METADATA or self.held != before

    async def beat(self, session) -> m.HeartbeatResponse:
        sent = self.request()
        response = await session.request(sent)
        self.apply(sent, response)
        return response


def assert_no_shard_held_twice(members: list[SimMember]) -> None:
    """H3 as the members themselves see it."""
    seen: dict[str, str] = {}
    for member in members:
        for shard in member.held:
            assert shard not in seen, f"{shard} held by {seen[shard]} and {member.member_id}"
            seen[shard] = member.member_id
