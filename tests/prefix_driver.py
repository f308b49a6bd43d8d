"""Drive a PrefixMachine the way its shell does, synchronously: handle, checkpoint, outcome, resolve."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from rsc.actors.group import GroupSettings
from rsc.actors.prefix import Checkpoint, Committed, DrainQuery, DrainReport, PrefixMachine
from rsc.actors.records import encode, replay
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import JOIN_EPOCH, Cutover, GroupState, RevokeState

PREFIX, GROUP = "orders", "billing"
SETTINGS = GroupSettings(heartbeat_interval_ms=3000, lease_ttl_ms=10_000, revoke_timeout_ms=60_000)


@attrs.define
class Batch:
    """One mailbox drain: the answers, what was written, and what was pushed."""

    responses: list[m.Response]
    checkpoint: Checkpoint
    committed: Committed | None


class Driver:
    """A prefix machine with a fake hash that takes every committed checkpoint."""

    def __init__(self, *, keep_drained_streams: bool = False) -> None:
        self.machine = PrefixMachine(PREFIX, SETTINGS, keep_drained_streams=keep_drained_streams)
        self.hash: dict[str, str] = {}
        self.now = 0
        self.queries: list[DrainQuery | None] = []
        self.moves_fail = False

    def batch(self, requests: Sequence[m.Request], *, durable: bool = True,
              drained: Iterable[str] | None = None, report: DrainReport | None = None,
              tick: bool = False) -> Batch:
        """Run one batch; `report` (or `drained`: those streams are empty for every group,
        the others have one undelivered entry each) answers the machine's drain query."""
        machine = self.machine
        if tick:
            machine.tick(self.now)
        answers = [machine.handle(request, self.now) for request in requests]
        query = machine.drain_query()
        self.queries.append(query)
        if query is not None and drained is not None:
            done = set(drained)
            report = {stream: {group: (0 if stream in done else 1, 0) for group in query.groups}
                      for stream in query.streams}
        if query is not None and report is not None:
            machine.drain_measured(report)
        checkpoint = machine.checkpoint()
        committed = None
        if durable:
            for move in checkpoint.moves:  # the Redis side of G3, as a fake: ids by stream order
                if self.moves_fail:
                    continue
                machine.offsets_moved(move, {stream: f"{index}-0"
                                             for index, stream in enumerate(move.streams)})
            for field, value in encode(checkpoint.changes).items():
                if value is None:
                    self.hash.pop(field, None)
                else:
                    self.hash[field] = value
            committed = machine.committed(checkpoint)
        else:
            machine.write_failed(checkpoint, self.now)
        return Batch([machine.resolve(answer, durable=durable) for answer in answers],
                     checkpoint, committed)

    def one(self, request: m.Request, **options: object) -> m.Response:
        return self.batch([request], **options).responses[0]  # type: ignore[arg-type]

    def tick(self, drained: Iterable[str] | None = None, *, durable: bool = True,
             report: DrainReport | None = None) -> Batch:
        return self.batch([], tick=True, drained=drained, durable=durable, report=report)

    def replayed(self) -> PrefixMachine:
        """A machine restored from the fake hash, as a restarted coordinator would be."""
        restored = PrefixMachine(PREFIX, SETTINGS,
                                 keep_drained_streams=self.machine.keep_drained_streams)
        restored.restore(replay(self.hash), self.now)
        return restored

    # --- members -----------------------------------------------------------------------

    def join(self, member_id: str, group: str = GROUP, **options: object) -> m.HeartbeatResponse:
        response = self.one(heartbeat(member_id, JOIN_EPOCH, owned=(), group=group), **options)
        assert isinstance(response, m.HeartbeatResponse)
        return response

    def report(self, member_id: str, group: str = GROUP, **options: object) -> m.HeartbeatResponse:
        """A correct full heartbeat from a member that drained everything it was asked to."""
        member = self.machine.groups[group].members[member_id]
        response = self.one(heartbeat(member_id, member.member_epoch,
                                      owned=sorted(member.held - member.revoking),
                                      revoked=sorted(member.revoking), group=group), **options)
        assert isinstance(response, m.HeartbeatResponse)
        return response

    def settle(self, group: str = GROUP) -> None:
        for _ in range(10):
            machine = self.machine.groups[group]
            if machine.state in (GroupState.STABLE, GroupState.EMPTY):
                return
            for member_id in sorted(machine.members):
                self.report(member_id, group)
        raise AssertionError(f"group {group} does not settle")

    def held(self, group: str = GROUP) -> set[str]:
        return set(self.machine.groups[group].owners)


def heartbeat(member_id: str, epoch: int, *, owned: Iterable[str] | None = None,
              revoked: Iterable[str] = (), group: str = GROUP) -> m.Heartbeat:
    return m.Heartbeat(
        request_id=7, stream_prefix=PREFIX, consumer_group=group, member_id=member_id,
        member_epoch=epoch, owned_shards=None if owned is None else tuple(owned),
        revoking_shards=tuple(m.RevokingShard(shard=s, state=RevokeState.REVOKED) for s in revoked))


def set_shards(count: int, group: str | None = GROUP,
               cutover: Cutover = Cutover.PARALLEL) -> m.SetShardCount:
    return m.SetShardCount(request_id=3, stream_prefix=PREFIX, consumer_group=group,
                           shard_count=count, cutover=cutover)


def describe(group: str = GROUP) -> m.DescribeGroup:
    return m.DescribeGroup(request_id=4, stream_prefix=PREFIX, consumer_group=group)


def delete_group(group: str = GROUP) -> m.DeleteGroup:
    return m.DeleteGroup(request_id=6, stream_prefix=PREFIX, consumer_group=group)


def reset_offsets(to: m.ResetTo = "earliest", group: str = GROUP,
                  timestamp_ms: int | None = None) -> m.ResetOffsets:
    return m.ResetOffsets(request_id=11, stream_prefix=PREFIX, consumer_group=group, to=to,
                          timestamp_ms=timestamp_ms)


def get_routing() -> m.GetRouting:
    return m.GetRouting(request_id=5, stream_prefix=PREFIX)


def ok(response: m.Response) -> m.Response:
    assert response.status == Status.OK, response
    return response


def streams(version: int, count: int) -> tuple[str, ...]:
    return tuple(f"{{{PREFIX}:v{version}:{index}}}" for index in range(count))
