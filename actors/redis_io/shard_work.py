"""The coordinator-wide pipelines for the periodic shard work of many prefixes.

Retention passes (T1..T3) and listGroups' lag and pending totals of every
prefix go through one `ShardWork`: a single task that takes what is queued,
oldest first, and sends many prefixes' scripts and reads in ONE pipeline on a
worker thread (actors/redis_io/shard_ops.py's `*_many` calls), within a budget of
streams per round trip, pausing between retention pipelines so the batches of
the prefixes keep the event loop. A thousand prefixes due together cost a few
round trips, not a thousand thread hops.

D4: each round trip has the store deadline (a third of the lease); past it the
worker thread is abandoned, every job of it fails, and nothing else is sent
until that thread returns (the jobs queued meanwhile fail at once). A failed
retention pass is logged once per outage and its prefix reported changed, so the
schedule brings it again within ten ticks (actors/core/prefix_schedule.py). listGroups'
totals fail to `null` lag.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Generic, Protocol, TypeVar

import trio

from rsc.actors.core.prefix_io import RetentionPass
from rsc.actors.core.shard_reports import GroupTotals, RetentionResult
from rsc.actors.redis_io import shard_ops
from rsc.actors.redis_io.store import StoreError
from rsc.actors.redis_io.store_deadline import AbandonedCall, OutageLine, StoreStalled, run_by_deadline
from rsc.common.lua import Client

RETENTION_STREAMS_PER_ROUND_TRIP = 256  # a pass over 4,096 shards held the GIL for 160 ms
TOTALS_STREAMS_PER_ROUND_TRIP = 2048
PAUSE_S = 0.01  # between retention round trips: the event loop has the cores to itself


_Result = TypeVar("_Result")


class RetentionMetrics(Protocol):
    """What the shard work tells metrics (actors.ops.metrics.CoordinatorMetrics)."""

    def observe_retention(self, prefix: str, results: Iterable[RetentionResult]) -> None: ...


class _Job(Generic[_Result]):
    def __init__(self, streams: Sequence[str]) -> None:
        self.streams = streams
        self.done = trio.Event()
        self.result: _Result | None = None  # the call's value, or None when it failed


class _Pass:
    """One prefix's pass, in slices: done once every slice ran; failed if one did."""

    def __init__(self, prefix: str, slices: int) -> None:
        self.prefix = prefix
        self.left = slices
        self.failed = False
        self.done = trio.Event()


class _Retention(_Job[list[RetentionResult]]):
    def __init__(self, whole: _Pass, retention_pass: RetentionPass,
                 streams: Sequence[str]) -> None:
        super().__init__(streams)
        self.whole = whole
        self.prefix = whole.prefix
        self.call = shard_ops.RetentionCall(streams, retention_pass.groups, retention_pass.acked,
                                            retention_pass.max_length, retention_pass.max_age_ms)


class _Totals(_Job[dict[str, GroupTotals]]):
    def __init__(self, streams: Sequence[str], groups: Sequence[str]) -> None:
        super().__init__(streams)
        self.groups = groups


class ShardWork:
    """One task running every prefix's retention passes and listGroups reads in shared pipelines."""

    def __init__(self, client: Client, *, deadline_s: float, metrics: RetentionMetrics | None = None,
                 pause_s: float = PAUSE_S,
                 retention_streams: int = RETENTION_STREAMS_PER_ROUND_TRIP,
                 totals_streams: int = TOTALS_STREAMS_PER_ROUND_TRIP,
                 failed_pass: Callable[[str], None] | None = None) -> None:
        self.client = client
        self.failed_pass = failed_pass  # told the prefix of each pass that failed (T1: again)
        self.deadline_s = deadline_s
        self.metrics = metrics
        self.pause_s = pause_s
        self.retention_streams = retention_streams
        self.totals_streams = totals_streams
        # the queued slices of each prefix's passes; the prefixes take turns, a slice each
        self._retention: collections.OrderedDict[str, collections.deque[_Retention]] = \
            collections.OrderedDict()
        self._totals: collections.deque[_Totals] = collections.deque()
        self._queued = trio.Event()
        self._abandoned: AbandonedCall | None = None  # a round trip past its deadline, running
        self.outage = OutageLine()  # failed round trips: logged once per outage
        self.round_trips = 0
        self.passes = 0

    # --- what the prefix actors ask --------------------------------------------------

    def retention(self, prefix: str, retention_pass: RetentionPass) -> trio.Event:
        """Queue the pass; the event is set once it ran (or failed): the T1 wait waits for it.

        A pass over more shards than one round trip takes goes in slices, with the pause
        between them (a pass over 4,096 shards in one round trip held the GIL and Redis for
        160 ms, long enough to show in the p99 of heartbeats)."""
        streams = retention_pass.streams
        size = self.retention_streams
        slices = [streams[start:start + size] for start in range(0, len(streams), size)] or [()]
        whole = _Pass(prefix, len(slices))
        queue = self._retention.setdefault(prefix, collections.deque())
        queue.extend(_Retention(whole, retention_pass, part) for part in slices)
        self._queued.set()
        return whole.done

    async def totals(self, streams: Sequence[str], groups: Sequence[str],
                     deadline: float) -> dict[str, GroupTotals] | None:
        """listGroups' totals of one prefix, read with other prefixes'; None when the read failed
        or passed `deadline` (D4)."""
        [result] = await self.totals_many([(streams, groups)], deadline)
        return result

    async def totals_many(self, reads: Sequence[tuple[Sequence[str], Sequence[str]]],
                          deadline: float) -> list[dict[str, GroupTotals] | None]:
        """`totals` of many prefixes at once, (streams, groups) each, in their order."""
        jobs = [_Totals(streams, groups) for streams, groups in reads]
        self._totals.extend(jobs)
        self._queued.set()
        with trio.move_on_at(deadline):
            for job in jobs:
                if not job.done.is_set():
                    await job.done.wait()
        return [job.result if job.done.is_set() else None for job in jobs]

    # --- the task ----------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            if not self._retention and not self._totals:
                self._queued = trio.Event()
                await self._queued.wait()
            if self._totals:  # someone waits on these: they go first
                jobs = _take(self._totals, self.totals_streams)
                await self._round_trip(jobs, self._read_totals)
                continue
            retention = _take_in_turn(self._retention, self.retention_streams)
            await self._round_trip(retention, self._trim)
            self.passes += sum(1 for job in retention if job.whole.left == 1)
            for job in retention:
                whole = job.whole
                if job.result is None:
                    whole.failed = True
                elif self.metrics is not None:
                    self.metrics.observe_retention(job.prefix, job.result)
                whole.left -= 1
                if whole.left == 0:
                    whole.done.set()
                    if whole.failed and self.failed_pass is not None:
                        self.failed_pass(whole.prefix)
            if self._retention and self.pause_s:
                await trio.sleep(self.pause_s)

    def _read_totals(self, jobs: Sequence[_Job[dict[str, GroupTotals]]]
                     ) -> list[dict[str, GroupTotals] | StoreError]:
        reads = [(job.streams, job.groups) for job in jobs if isinstance(job, _Totals)]
        return list(shard_ops.group_totals_many(self.client, reads))

    def _trim(self, jobs: Sequence[_Job[list[RetentionResult]]]
              ) -> list[list[RetentionResult] | StoreError]:
        calls = [job.call for job in jobs if isinstance(job, _Retention)]
        now = int(time.time() * 1000)  # stream ids are wall-clock ms
        return list(shard_ops.apply_retention_many(self.client, calls, now))

    async def _round_trip(self, jobs: Sequence[_Job[_Result]],
                          fn: Callable[[Sequence[_Job[_Result]]], list[_Result | StoreError]]
                          ) -> None:
        """Run `fn(jobs)` on a worker thread (abandoned at the deadline, D4); finish every job."""
        results: list[_Result | StoreError] | None = None
        try:
            results = await self._call(fn, jobs)
        except StoreError as exc:
            self.outage.failed(str(exc), prefixes=len(jobs))
        else:
            self.outage.worked()
        finally:
            self.round_trips += 1
            for index, job in enumerate(jobs):
                value = None if results is None else results[index]
                job.result = None if isinstance(value, StoreError) else value
                job.done.set()

    async def _call(self, fn: Callable[[Sequence[_Job[_Result]]], list[_Result | StoreError]],
                    jobs: Sequence[_Job[_Result]]) -> list[_Result | StoreError]:
        abandoned = self._abandoned
        if abandoned is not None:
            if not abandoned.done.is_set():
                raise StoreError("the store has not answered a shard round trip abandoned earlier")
            self._abandoned = None
        try:
            return await run_by_deadline(trio.current_time() + self.deadline_s,
                                         "shard round trip", fn, jobs)
        except StoreStalled as stalled:
            self._abandoned = stalled.call
        raise StoreError(f"a shard round trip took longer than {round(self.deadline_s * 1000)} ms "
                         "and was abandoned; retry with backoff")


_Queued = TypeVar("_Queued", _Retention, _Totals)


def _take(queue: collections.deque[_Queued], streams: int) -> list[_Queued]:
    """The oldest jobs, as many as fit `streams` (at least one)."""
    jobs = [queue.popleft()]
    total = len(jobs[0].streams)
    while queue and total + len(queue[0].streams) <= streams:
        job = queue.popleft()
        total += len(job.streams)
        jobs.append(job)
    return jobs


def _take_in_turn(queues: collections.OrderedDict[str, collections.deque[_Retention]],
                  streams: int) -> list[_Retention]:
    """The oldest slice of each prefix in turn, the prefix queued longest first, as many as
    fit `streams` (at least one); a prefix with slices left goes behind the others. A small
    pass queued behind a pass over thousands of shards waits for one slice of it, not for
    all of them (the T1 wait of a quiet prefix's checkpoint is not a busy prefix's pass)."""
    jobs: list[_Retention] = []
    total = 0
    for prefix in list(queues):
        queue = queues[prefix]
        if jobs and total + len(queue[0].streams) > streams:
            break
        job = queue.popleft()
        jobs.append(job)
        total += len(job.streams)
        if queue:
            queues.move_to_end(prefix)
        else:
            del queues[prefix]
    return jobs


__all__ = ["RetentionResult", "ShardWork"]
