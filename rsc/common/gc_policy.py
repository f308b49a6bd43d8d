"""The garbage-collector policy of an rsc process (coordinator or member): freeze what lives
through a tick, collect the rest from it.

CPython's automatic full collection walks every tracked object, so at 10,000
sessions it costs more than the protocol. `RSC_GC=tuned` (the default):

- `gc.freeze()` once startup and restore are done, then on every tick (an
  O(1) list splice that also resets the young generation's count), so
  whatever lived through a tick is never walked by an automatic collection;
- young collections stay allocation-driven, but only after 200,000 net
  allocations instead of 700 (`TUNED_THRESHOLDS`), several ticks of what
  steady heartbeats at 10,000 members leave alive, so they run only in bursts. Each
  young object walked costs a few microseconds on a busy machine (its
  referents are cache misses), and a heartbeat's await chain lives for a
  whole interval, so walking it at 700 only to promote it was the waste;
- a full collection (unfreeze, collect, freeze) finds the cycles that died
  after being frozen (closed sessions). It runs from the tick, not at
  allocation time: when the heap grew by `GROWTH` since the last one (doubled,
  up to `MAX_GROWTH`, each time a full finds the growth was mostly live
  objects, back to `GROWTH` when it was mostly garbage), or
  `MAX_FULL_INTERVAL_S` passed, and never more than `FULL_BUDGET` of the wall
  time (a full that took 1 s waits 200 s before the next one; growth during
  that wait is not saved up for later). A full that is due while the process
  is saturated (the coordinator: frames waited for their turn since the last
  tick) waits for the first tick that is not, up to `MAX_FULL_INTERVAL_S`: a
  full pauses everything for as long as it walks the heap (0.66 s at 10,000
  sessions on a slow machine); in the middle of a join storm that pause is
  added to the storm, while the same collection just after it delays nothing
  that was already waiting. A coordinator near its capacity counts as
  saturated too: at 10,000 steady members on a shared 2-core machine 59 ticks
  of 60 were, so there a full set off by growth waits for the cap, as fulls
  without growth always did.

`RSC_GC=default` leaves Python's settings alone (for comparison).

The collector is process-wide, so there is one policy per process, whoever runs in it. The
process owner (`rsc coordinator` with its metrics registry, `rsc consume`, a bench child)
calls `install(registry)` at start; the runtime calls `freeze_after_startup()` once started
(the coordinator after restore, a member once joined) and `on_tick()` from a loop it already
has (the coordinator's tick, a member's heartbeat). Both hooks do nothing in a process that
did not install the policy: a library does not change its host application's collector on
its own. Pauses are recorded per generation through `gc.callbacks` (and
`rsc_gc_pause_seconds` in each registry given).
"""

from __future__ import annotations

import gc
import os
import sys
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Histogram

MODE_ENV = "RSC_GC"
TUNED, DEFAULT = "tuned", "default"
MODES = (TUNED, DEFAULT)
TUNED_THRESHOLDS = (200_000, 10, 1000)  # young collections only for bursts; the tick freezes
GROWTH = 0.10  # a full collection once the heap grew by a tenth since the last one
MAX_GROWTH = 1.0  # doubling up to this while full collections find mostly live growth
MAX_FULL_INTERVAL_S = 300.0
FULL_BUDGET = 0.005  # full collections take at most 0.5 % of the wall time
MIN_TICK_INTERVAL_S = 0.5  # ticks closer than this (several coordinators in one process) skip
PAUSE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                 0.5, 1.0, 2.5, 5.0)


def mode_from_env(environ: Mapping[str, str] = os.environ) -> str:
    """The GC mode named by `RSC_GC` (unset: tuned); a clear error for anything else."""
    mode = environ.get(MODE_ENV, TUNED).strip().lower() or TUNED
    if mode not in MODES:
        raise ValueError(f"{MODE_ENV} must be one of {', '.join(MODES)}, not {environ[MODE_ENV]!r}")
    return mode


class PauseRecorder:
    """A `gc.callbacks` callback: collections, total and longest pause per generation.

    Pauses are wall time (what a waiting peer sees); `cpu_seconds` is the
    collector's own CPU time, which a busy machine does not inflate.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter,
                 cpu_clock: Callable[[], float] = time.thread_time) -> None:
        self.clock = clock
        self.cpu_clock = cpu_clock
        self.collections = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.cpu_seconds = [0.0, 0.0, 0.0]
        self.max_seconds = [0.0, 0.0, 0.0]
        self.observers: list[Callable[[int, float], None]] = []
        self._started: float | None = None
        self._cpu_started = 0.0

    def __call__(self, phase: str, info: Mapping[str, int]) -> None:
        if phase == "start":
            self._started = self.clock()
            self._cpu_started = self.cpu_clock()
            return
        if self._started is None:
            return
        pause = self.clock() - self._started
        self._started = None
        generation = min(int(info.get("generation", 2)), 2)
        self.collections[generation] += 1
        self.seconds[generation] += pause
        self.cpu_seconds[generation] += self.cpu_clock() - self._cpu_started
        self.max_seconds[generation] = max(self.max_seconds[generation], pause)
        for observe in self.observers:
            observe(generation, pause)

    def snapshot(self, *, reset_max: bool = False) -> dict[str, Sequence[float]]:
        """Counters so far (JSON-ready); `reset_max` starts a new window for the longest pauses."""
        taken: dict[str, Sequence[float]] = {
            "collections": list(self.collections), "seconds": list(self.seconds),
            "cpuSeconds": list(self.cpu_seconds), "maxSeconds": list(self.max_seconds)}
        if reset_max:
            self.max_seconds = [0.0, 0.0, 0.0]
        return taken


class Collector(Protocol):
    """What the policy calls of the `gc` module (a test gives a fake)."""

    def set_threshold(self, threshold0: int, threshold1: int, threshold2: int, /) -> None: ...

    def freeze(self) -> None: ...

    def unfreeze(self) -> None: ...

    def collect(self) -> int: ...


class Policy:
    """What to collect when, for one process (the collector is process-wide)."""

    def __init__(self, mode: str, *, gc_module: Collector = gc, clock: Callable[[], float] = time.monotonic,
                 heap_blocks: Callable[[], int] = sys.getallocatedblocks) -> None:
        if mode not in MODES:
            raise ValueError(f"GC mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.mode = mode
        self.gc = gc_module
        self.clock = clock
        self.heap_blocks = heap_blocks
        self.applied = False
        self.frozen = False
        self.full_collections = 0
        self._last_full_at = 0.0
        self._last_full_seconds = 0.0
        self._blocks_after_full = 0
        self.growth = GROWTH
        self._last_tick_at = -MIN_TICK_INTERVAL_S
        self.deferred = 0  # ticks whose due full collection waited because the process was busy

    def apply(self) -> None:
        """Set the tuned thresholds (once; nothing in default mode)."""
        if self.mode == TUNED and not self.applied:
            self.gc.set_threshold(*TUNED_THRESHOLDS)
        self.applied = True

    def freeze_after_startup(self) -> bool:
        """Collect, then freeze what startup and restore built; only the first call does it."""
        if self.mode != TUNED or self.frozen:
            return False
        self.apply()
        self._full()
        self.frozen = True
        return True

    def on_tick(self, busy: bool = False) -> str | None:
        """One tick's collection: 'full', 'young' or None (default mode, too soon, not frozen yet).

        `busy`: the process was saturated since the last tick; a full that is due waits for a
        tick that is not (the growth is kept), unless `MAX_FULL_INTERVAL_S` has passed.
        """
        if self.mode != TUNED or not self.frozen:
            return None
        now = self.clock()
        if now - self._last_tick_at < MIN_TICK_INTERVAL_S:
            return None
        self._last_tick_at = now
        since_full = now - self._last_full_at
        grown = self.heap_blocks() > self._blocks_after_full * (1 + self.growth)
        due = grown or since_full >= MAX_FULL_INTERVAL_S
        if since_full * FULL_BUDGET >= self._last_full_seconds:
            if due and busy and since_full < MAX_FULL_INTERVAL_S:
                self.deferred += 1
            elif due:
                self._full()
                return "full"
        elif grown:
            # growth while the budget forbids a full is not saved up for later: a full that
            # fires long after the heap settled (mid steady state) would find little
            self._blocks_after_full = self.heap_blocks()
        self.gc.freeze()  # O(1): what survived the young collections since the last tick
        return "young"

    def _full(self) -> None:
        started, before = self.clock(), self.heap_blocks()
        self.gc.unfreeze()
        self.gc.collect()
        self.gc.freeze()
        self._last_full_at = self.clock()
        self._last_full_seconds = self._last_full_at - started
        after = self.heap_blocks()
        # the heap grew with live objects (sessions joining), not garbage: wait for more growth
        if self.full_collections:
            garbage = before - after >= (before - self._blocks_after_full) / 2
            self.growth = GROWTH if garbage else min(2 * self.growth, MAX_GROWTH)
        self._blocks_after_full = after
        self.full_collections += 1


recorder = PauseRecorder()
policy: Policy | None = None
_histograms: weakref.WeakKeyDictionary[CollectorRegistry, Histogram] = weakref.WeakKeyDictionary()


def install(registry: CollectorRegistry | None = None, environ: Mapping[str, str] = os.environ) -> Policy:
    """Apply the mode of `RSC_GC` to this process and record GC pauses.

    With a prometheus `CollectorRegistry` (the coordinator's metrics), pauses also feed
    the histogram `rsc_gc_pause_seconds{generation}` in it. Safe to call again (another
    coordinator or member in the same process, the same registry after a restart): the
    policy, the callback and each registry's histogram stay one.
    """
    global policy
    if policy is None:
        policy = Policy(mode_from_env(environ))
        policy.apply()
    if recorder not in gc.callbacks:
        gc.callbacks.append(recorder)
        recorder.observers.append(_observe)
    if registry is not None and registry not in _histograms:
        from prometheus_client import Histogram

        _histograms[registry] = Histogram(
            "rsc_gc_pause_seconds", "Time the cyclic garbage collector stopped the process, "
            "per collection", ("generation",), buckets=PAUSE_BUCKETS, registry=registry)
    return policy


def _observe(generation: int, pause: float) -> None:
    for histogram in list(_histograms.values()):
        histogram.labels(str(generation)).observe(pause)


def freeze_after_startup() -> bool:
    """Once started (restored, joined): freeze the heap built so far (tuned mode, once per process).

    Does nothing unless the process owner called `install()`.
    """
    return policy.freeze_after_startup() if policy is not None else False


def on_tick(busy: bool = False) -> str | None:
    """From a loop the runtime already has: freeze what survived, the full collection when due
    (and, with `busy`, once the process is no longer saturated: `Policy.on_tick`).

    Does nothing unless the process owner called `install()`.
    """
    return policy.on_tick(busy) if policy is not None else None
