"""Runs the prefix machine's store I/O requests against Redis, one each, its outcome back.

The checkpoint (create, unseal, seal, retire, the hash: actors/redis_io/store.py), the drain count,
offset moves, the cleanup of deleted groups' consumer groups, and the lag and totals reads
(actors/redis_io/shard_ops.py), each under the batch's D4 deadline (actors/redis_io/store_calls.py). A failure
is an `Outcome` with its error (stalled when the deadline passed), logged here; what it
means is the machine's. Retention passes and the T1 wait are actors/redis_io/retention_runner.py's.
"""

from __future__ import annotations

import functools
import logging

import trio

from rsc.actors.core.prefix_io import (
    DONE,
    Checkpoint,
    DestroyConsumerGroups,
    DrainQuery,
    LagRead,
    MoveOffsets,
    Outcome,
    TotalsRead,
)
from rsc.actors.logs import log_event
from rsc.actors.ports import PrefixMetrics
from rsc.actors.redis_io import shard_ops
from rsc.actors.redis_io.shard_work import ShardWork
from rsc.actors.redis_io.store import MetadataStore, StoreError, StoreFenced, StreamAdmin
from rsc.actors.redis_io.store_calls import StoreCalls, StoreStalled

log = logging.getLogger("rsc.coordinator")

StoreStep = Checkpoint | DrainQuery | MoveOffsets | DestroyConsumerGroups | LagRead | TotalsRead


class PrefixSteps:
    """One prefix's store I/O, step by step (module docstring)."""

    def __init__(self, prefix: str, store: MetadataStore, calls: StoreCalls, *,
                 metrics: PrefixMetrics | None = None,
                 shard_work: ShardWork | None = None) -> None:
        self.prefix = prefix
        self.store = store
        self.streams = StreamAdmin(store.client)
        self.calls = calls
        self.metrics = metrics
        self.shard_work = shard_work  # one pipeline for many prefixes' listGroups reads
        self.healthy = True  # the last checkpoint landed (its failures are a debug line)

    async def run(self, step: StoreStep, deadline: float, now_ms: int) -> Outcome:
        """Run one I/O request; its outcome (failures too) goes back to the machine."""
        if isinstance(step, LagRead):
            return _read_outcome(await self.calls.read(shard_ops.shard_lag, step.streams,
                                                       step.group, deadline=deadline))
        if isinstance(step, TotalsRead):
            if self.shard_work is not None:
                return _read_outcome(await self.shard_work.totals(step.streams, step.groups,
                                                                  deadline))
            return _read_outcome(await self.calls.read(shard_ops.group_totals, step.streams,
                                                       step.groups, deadline=deadline))
        try:
            return await self._write(step, deadline)
        except StoreFenced:
            raise
        except StoreError as exc:
            self._log_failure(step, exc)
            return Outcome(error=str(exc), stalled=isinstance(exc, StoreStalled), now_ms=now_ms)

    async def _write(self, step: Checkpoint | DrainQuery | MoveOffsets | DestroyConsumerGroups,
                     deadline: float) -> Outcome:
        calls = self.calls
        if isinstance(step, Checkpoint):
            started = trio.current_time()
            await calls.call(deadline, "metadata write", self._checkpoint, step, checkpoint=step)
            if not self.healthy:
                log_event(log, "prefix.write_recovered", level=logging.DEBUG, prefix=self.prefix)
            self.healthy = True
            if self.metrics is not None:
                self.metrics.observe_checkpoint_seconds(trio.current_time() - started)
            return DONE
        if isinstance(step, DrainQuery):
            counts = await calls.call(deadline, "drain check", shard_ops.drain_counts,
                                      self.store.client, step.streams, step.groups)
            return Outcome(shard_ops.drain_report(counts))
        if isinstance(step, MoveOffsets):
            moved = await calls.call(deadline, "offset move", functools.partial(
                self.streams.move_offsets, dry_run=step.dry_run),
                step.streams, step.group, step.to, step.timestamp_ms)
            if step.dry_run:
                return Outcome(moved)
            log_event(log, "group.offsets_reset", prefix=self.prefix, group=step.group,
                      to=step.to, shards=len(moved))
            return Outcome(moved)
        await calls.call(deadline, "consumer group cleanup", self.streams.destroy_consumer_groups,
                         step.streams, step.groups)
        return DONE

    def _checkpoint(self, checkpoint: Checkpoint) -> None:
        """The streams first (R1: they exist before routing names them), then the hash."""
        for create in checkpoint.create:
            self.store.create_consumer_groups(create.streams, create.groups)
        if checkpoint.unseal:
            self.streams.unseal(checkpoint.unseal)
        if checkpoint.seal:
            self.streams.seal(checkpoint.seal)
        if checkpoint.retire is not None:
            self.streams.retire(checkpoint.retire.streams, checkpoint.retire.groups)
        self.store.write(self.prefix, checkpoint.changes, checkpoint.owners)

    def _log_failure(self, step: StoreStep, exc: StoreError) -> None:
        if isinstance(step, Checkpoint):
            # the outage itself is logged once for the whole coordinator (actors/ops/readiness.py)
            if self.healthy:
                log_event(log, "prefix.write_failed", level=logging.DEBUG, prefix=self.prefix,
                          error=str(exc))
            self.healthy = False
        elif isinstance(step, DrainQuery):
            log.warning("migration of prefix %s waits: %s", self.prefix, exc)
        elif isinstance(step, MoveOffsets):
            log.warning("offsets of %s in %s not moved: %s", step.group, self.prefix, exc)
        else:
            log.warning("consumer groups of deleted groups of %s stay for now: %s", self.prefix, exc)


def _read_outcome(value: object) -> Outcome:
    """A shard read's outcome: None is a failed read (already logged once per outage)."""
    return Outcome(value) if value is not None else Outcome(error="the shards could not be read")
