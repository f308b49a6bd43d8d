"""GC figures of the processes under test: each child reports its own, the bench takes differences.

A server child (coordinator, bare baseline) prints one line `gc {json}` on
stdout when it gets SIGUSR1: its recorder's counters so far, the longest
pause per generation since the previous report, its GC mode and heap size.
The load generator returns the same object from its `gc` command.
`window(before, after)` turns two reports into the figures of the tables.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable
from typing import Any

from rsc.actors.ops import latency

GC_LINE = "gc "


def report(snapshot: dict[str, Any], policy: Any) -> dict[str, Any]:
    """One report: the recorder's snapshot, the policy's mode, its full collections and the ticks
    that deferred a due one (the process was saturated), the heap size, and the process's
    request latency histogram (actors/ops/latency.py; servers fill it)."""
    # No gc.get_freeze_count(): it walks the whole frozen generation, 180 ms at 10,000
    # members, a stall at the very start of the window it was meant to measure
    return {**snapshot, "mode": policy.mode, "fullCollections": policy.full_collections,
            "deferredTicks": policy.deferred, "heapBlocks": sys.getallocatedblocks(),
            "requests": latency.requests.snapshot()}


def install_signal_reporter(take: Callable[[], dict[str, Any]]) -> None:
    """On SIGUSR1, print `gc {json}` with `take()` (call before trio.run, in the main thread)."""
    def handler(signum: int, frame: Any) -> None:
        sys.stdout.write(GC_LINE + json.dumps(take()) + "\n")
        sys.stdout.flush()

    signal.signal(signal.SIGUSR1, handler)


def window(before: dict[str, Any], after: dict[str, Any], seconds: float) -> dict[str, Any]:
    """Collections per minute, seconds spent collecting and the longest pause per generation."""
    collections = [a - b for a, b in zip(after["collections"], before["collections"], strict=True)]
    spent = [a - b for a, b in zip(after["seconds"], before["seconds"], strict=True)]
    cpu = [a - b for a, b in zip(after["cpuSeconds"], before["cpuSeconds"], strict=True)]
    return {"mode": after["mode"], "seconds": seconds,
            "fullCollections": after["fullCollections"] - before["fullCollections"],
            "collections": collections, "collectionsPerMinute": sum(collections) * 60 / seconds,
            "gcSeconds": sum(spent), "gcSecondsPerGeneration": spent,
            "gcShare": sum(spent) / seconds, "gcCpuSeconds": sum(cpu),
            "maxPauseMs": [s * 1000 for s in after["maxSeconds"]],
            "heapBlocks": after["heapBlocks"]}


def pauses_cell(figures: dict[str, Any] | None) -> str:
    """`g0/g1/g2` longest pauses in ms, for a table cell."""
    if not figures:
        return "-"
    return "/".join(f"{ms:.1f}" if ms < 100 else f"{ms:.0f}" for ms in figures["maxPauseMs"])
