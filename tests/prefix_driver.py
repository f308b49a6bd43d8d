"""Drive a PrefixMachine the way its shell does, synchronously: handle each request, then run
every I/O request its `flush` yields against a fake Redis and send the outcome back."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import attrs

from rsc.actors.core.group import GroupSettings
from rsc.actors.core.prefix import PrefixMachine
from rsc.actors.core.prefix_io import (
    DONE,
    RUNS_BESIDE,
    AwaitRetention,
    Checkpoint,
    Committed,
    Deliver,
    DrainQuery,
    DrainReport,
    IORequest,
    LagRead,
    MoveOffsets,
    Outcome,
    RetentionPass,
)
from rsc.actors.core.records import encode, replay
from rsc.actors.core.shard_reports import ShardLag
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
        self.queries: list[DrainQuery | None] = []  # the drain query of each batch, if any
        self.steps: list[IORequest] = []  # the I/O requests of the last batch, in order
        self.moves_fail = False
        self.retention_running = False  # a pass runs past the store deadline (T1's wait stalls)
        self.passes_beside = False  # retention passes go on beside the batches (RUNS_BESIDE)
        self.abandon: type | None = None  # the I/O request of this kind passes its deadline (D4)

    def batch(self, requests: Sequence[m.Request], *, durable: bool = True,
              drained: Iterable[str] | None = None, report: DrainReport | None = None,
              tick: bool = False, stalled: bool = False,
              lags: Mapping[str, list[ShardLag]] | None = None) -> Batch:
        """Run one batch through `flush`, the machine's own I/O order, answering each I/O
        request as Redis would; `report` (or `drained`: those streams are empty for every
        group, the others have one undelivered entry each) answers the drain query (without
        either it fails, `stalled` when the store stalled), `durable` the checkpoint write,
        `lags` the describes' lag reads (without it they fail)."""
        machine = self.machine
        if self.retention_running:
            machine.retention_started()
        if tick:
            machine.tick(self.now)
        answers = [machine.handle(request, self.now) for request in requests]
        query: DrainQuery | None = None
        delivered: Deliver | None = None
        self.steps = []
        flush = machine.flush(self.now)
        step = next(flush, None)
        while step is not None:
            self.steps.append(step)
            outcome = self._outcome(step, query_report=(drained, report), durable=durable,
                                    stalled=stalled, lags=lags)
            if isinstance(step, DrainQuery):
                query = step
            if isinstance(step, Deliver):
                delivered = step
            try:
                step = flush.send(outcome)
            except StopIteration:
                step = None
        self.queries.append(query)
        assert delivered is not None and machine.last_checkpoint is not None
        return Batch([machine.resolve(answer, durable=delivered.durable) for answer in answers],
                     machine.last_checkpoint, delivered.committed)

    def _outcome(self, step: IORequest, *, query_report: tuple[Iterable[str] | None,
                                                               DrainReport | None],
                 durable: bool, stalled: bool,
                 lags: Mapping[str, list[ShardLag]] | None) -> Outcome:
        """What Redis answers to one I/O request of the machine (a fake hash takes checkpoints)."""
        if self.abandon is not None and isinstance(step, self.abandon):  # the shell's D4 deadline
            self.machine.call_abandoned(step if isinstance(step, Checkpoint) else type(step).__name__)
            return Outcome(error="abandoned at the store deadline", stalled=True, now_ms=self.now)
        if isinstance(step, DrainQuery):
            drained, report = query_report
            if drained is not None:
                done = set(drained)
                report = {stream: {group: (0 if stream in done else 1, 0) for group in step.groups}
                          for stream in step.streams}
            if report is None:
                return Outcome(error="not measured", stalled=stalled, now_ms=self.now)
            return Outcome(report)
        if isinstance(step, Checkpoint):
            if not durable:
                return Outcome(error="the store is down", now_ms=self.now)
            for field, value in encode(step.changes).items():
                if value is None:
                    self.hash.pop(field, None)
                else:
                    self.hash[field] = value
            return DONE
        if isinstance(step, MoveOffsets):  # the Redis side of G3, as a fake: ids by stream order
            if self.moves_fail:
                return Outcome(error="the move failed", now_ms=self.now)
            return Outcome({stream: f"{index}-0" for index, stream in enumerate(step.streams)})
        if isinstance(step, LagRead):
            if lags is None or step.group not in lags:
                return Outcome(error="not read", now_ms=self.now)
            return Outcome(lags[step.group])
        if isinstance(step, AwaitRetention) and self.retention_running:
            return Outcome(error="a pass still runs", stalled=True, now_ms=self.now)
        if isinstance(step, RetentionPass) and self.passes_beside:
            return Outcome(RUNS_BESIDE)
        return DONE  # cleanup, totals, retention passes, delivery

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
