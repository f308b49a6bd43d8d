"""Runs a prefix's retention passes (T1..T3) and its T1 wait; when they run is the machine's.

A pass over thousands of shards takes tens of milliseconds of Redis time, so it runs
beside the batches: in the coordinator-wide pipelines (actors/redis_io/shard_work.py), or with a
`background` nursery as a task of its own; without either (tests) inline, as the last
step of its batch. Beside the batches it goes over the shards in slices of
RETENTION_SLICE, one round trip each, pausing between them (a pass over 4,096 shards in
one round trip held the GIL and Redis for 160 ms, long enough to show in the p99 of
heartbeats). `done` is set while no pass runs; a reloaded actor takes its predecessor's,
so a pass outlives neither the T1 wait nor the hold (actors/core/prefix_retention.py).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable

import trio

from rsc.actors.core.prefix_io import DONE, RUNS_BESIDE, Outcome, RetentionPass
from rsc.actors.core.shard_reports import RetentionResult
from rsc.actors.logs import log_event
from rsc.actors.ports import RetentionMetrics
from rsc.actors.redis_io import shard_ops
from rsc.actors.redis_io.shard_work import ShardWork
from rsc.actors.redis_io.store_calls import StoreCalls

log = logging.getLogger("rsc.coordinator")

RETENTION_SLICE = 256
RETENTION_PAUSE_S = 0.01
PASS_STILL_RUNS = "a retention pass still runs past the store deadline; retry with backoff"


class RetentionRunner:
    """Where and how one prefix's passes run (module docstring)."""

    def __init__(self, prefix: str, calls: StoreCalls, *, store_open: Callable[[], bool],
                 background: trio.Nursery | None = None, shard_work: ShardWork | None = None,
                 metrics: RetentionMetrics | None = None) -> None:
        self.prefix = prefix
        self.calls = calls
        self.store_open = store_open  # D4: the machine says whether anything may be sent
        self.background = background
        self.shard_work = shard_work
        self.metrics = metrics
        self.done = trio.Event()  # set while no pass runs
        self.done.set()
        self._beside = False  # a pass was started beside the batches, its end not told yet

    @property
    def running(self) -> bool:
        return not self.done.is_set()

    def ended(self) -> bool:
        """True once when a pass started beside the batches is over (to tell the machine)."""
        if self._beside and self.done.is_set():
            self._beside = False
            return True
        return False

    def take_over(self, old: RetentionRunner) -> None:
        """A reload: the pass the replaced actor started is still waited for (T1)."""
        self.done = old.done
        self._beside = not old.done.is_set()

    async def run(self, retention_pass: RetentionPass) -> Outcome:
        """Start the pass: RUNS_BESIDE when it goes on beside the batches, DONE when over."""
        if self.shard_work is not None:
            self.done = self.shard_work.retention(self.prefix, retention_pass)
            self._beside = True
            return Outcome(RUNS_BESIDE)
        if self.background is None:
            await self._trim(retention_pass)
            return DONE
        self.done = trio.Event()
        self._beside = True
        self.background.start_soon(self._trim_beside, retention_pass, self.done)
        return Outcome(RUNS_BESIDE)

    async def wait(self, deadline: float, now_ms: Callable[[], int]) -> Outcome:
        """T1: wait for the running pass, if one runs, until the store deadline (stalled then)."""
        done = self.done
        if not done.is_set():
            with trio.move_on_at(deadline):
                await done.wait()
            if not done.is_set():
                return Outcome(error=PASS_STILL_RUNS, stalled=True, now_ms=now_ms())
        return DONE

    async def _trim_beside(self, retention_pass: RetentionPass, done: trio.Event) -> None:
        try:
            await self._trim(retention_pass)
        except Exception as exc:  # noqa: BLE001 - a failed pass is logged; the next one retries
            log_event(log, "retention.failed", level=logging.ERROR, prefix=self.prefix,
                      error=f"{type(exc).__name__}: {exc}")
        finally:
            done.set()

    async def _trim(self, retention_pass: RetentionPass) -> None:
        trim = functools.partial(shard_ops.apply_retention, acked=retention_pass.acked,
                                 max_length=retention_pass.max_length,
                                 max_age_ms=retention_pass.max_age_ms,
                                 now_ms=int(time.time() * 1000))  # stream ids are wall-clock ms
        streams, results = retention_pass.streams, []
        for start in range(0, len(streams), RETENTION_SLICE):
            if start and self.background is not None:
                # beside the batches: Redis runs the scripts of a slice, then the event loop
                # has the cores (and the GIL) to itself for a moment
                await trio.sleep(RETENTION_PAUSE_S)
            if not self.store_open():  # D4: an abandoned call still runs
                break
            done: list[RetentionResult] | None = await self.calls.read(
                trim, streams[start:start + RETENTION_SLICE], retention_pass.groups)
            if done is None:  # Redis failed (logged once): the next pass tries again
                break
            results.extend(done)
        if results and self.metrics is not None:
            self.metrics.observe_retention(self.prefix, results)
