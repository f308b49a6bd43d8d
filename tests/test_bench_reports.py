"""The bench children's GC report must stay cheap: it is taken at the edges of the windows it
measures (a walk of the frozen generation there stalled a 10,000-member coordinator 183 ms).
The steady scenario's `--wss` rows, targets and table line, from made-up runs."""

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
    policy = SimpleNamespace(mode=gc_control.TUNED, full_collections=0, deferred=0)  # process-wide
    before = report(recorder.snapshot(reset_max=True), policy)
    after = report(recorder.snapshot(reset_max=True), policy)
    figures = window(before, after, 1.0)
    assert figures["heapBlocks"] > 0
    assert figures["collections"] == [0, 0, 0]


def _run(per_second: float, cores: float, p99: float = 2.0, rss: float = 60.0) -> dict:
    """A steady run as bench/membership.py's `_steady_run` returns it (only what the rows read)."""
    gc_figures = {"collectionsPerMinute": 1.0, "gcSeconds": 0.01, "gcCpuSeconds": 0.01,
                  "gcShare": 0.001, "maxPauseMs": [0.1, 0.2, 0.0], "fullCollections": 0,
                  "seconds": 15.0}
    return {"saturated": {"perSecond": per_second}, "saturatedCpu": {"server": {"cpuCores": cores}},
            "window": {"p50Ms": 0.5, "p99Ms": p99, "serverP99Ms": 1.0, "loopLagP99Ms": 0.3,
                       "count": 5000},
            "cpu": {"server": {"cpuCores": 0.2, "peakRssMb": rss}, "load": {"cpuCores": 0.3}},
            "gc": {"server": gc_figures, "load": gc_figures}, "expiredTotal": 0}


def test_steady_with_wss_adds_a_wss_row_its_ratios_and_its_table_line() -> None:
    from bench import membership, tables
    from bench.report import ScenarioResult

    result = ScenarioResult("steady", "steady")
    sizes = membership.FULL
    coordinator, bare, wss = _run(9000, 1.0), _run(6000, 1.0), _run(8100, 1.0, p99=3.0, rss=80)
    membership._steady_rows(result, sizes, 10000, "tuned", coordinator, bare, wss)
    membership._steady_targets(result, sizes)
    assert [row[0] for row in result.rows] == ["coordinator", "coordinator wss://", "bare websocket"]
    assert wss["wssPerWsPerCore"] == pytest.approx(0.9) and wss["perCoreRatio"] == pytest.approx(1.35)
    measured = {target.name: target.measured for target in result.targets}
    assert measured["wss / ws rps per CPU-second @10,000 (GC tuned)"] == "0.90x"
    assert measured["wss:// p99 heartbeat latency, RSS @10,000 (GC tuned)"] == \
        "3.0 ms (ws:// 2.0 ms), 80 MB (ws:// 60 MB)"
    markdown = tables.steady_markdown({"data": result.data})
    assert [line.split(" | ")[0] for line in markdown.splitlines()[2:]] == [
        "| coordinator", "| coordinator wss://", "| bare websocket"]
    plain = ScenarioResult("steady", "steady")
    membership._steady_rows(plain, sizes, 10000, "tuned", _run(9000, 1.0), _run(6000, 1.0))
    assert [row[0] for row in plain.rows] == ["coordinator", "bare websocket"]
    assert "wss" not in tables.steady_markdown({"data": plain.data})
