"""The bench children's GC report must stay cheap: it is taken at the edges of the windows it
measures (a walk of the frozen generation there stalled a 10,000-member coordinator 183 ms)."""

from __future__ import annotations

import gc
from types import SimpleNamespace

import pytest

from bench.gcstats import report, window
from rsc.common import gc_policy as gc_control


def test_the_report_never_walks_the_frozen_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    def walk() -> int:
        raise AssertionError("gc.get_freeze_count() walks every frozen object")

    monkeypatch.setattr(gc, "get_freeze_count", walk)
    recorder = gc_control.PauseRecorder()
    policy = SimpleNamespace(mode=gc_control.TUNED, full_collections=0)  # install() is process-wide
    before = report(recorder.snapshot(reset_max=True), policy)
    after = report(recorder.snapshot(reset_max=True), policy)
    figures = window(before, after, 1.0)
    assert figures["heapBlocks"] > 0
    assert figures["collections"] == [0, 0, 0]
