"""What TLS costs on the heartbeat path: steady heartbeats at 1,000 members, wss:// vs ws://, one run.

Two coordinators side by side, each on a fresh Redis and driven by its own load generator
(bench/wire.py speaks wss:// over a non-blocking ssl.SSLSocket, with the same syscall
pattern as ws://), one plain and one with `--tls-cert` / `--tls-key` (a certificate made by
trustme, verified by the load generator). Each gets the membership scenario's steady run
(spread heartbeats, a steady window, then closed-loop saturation), the plain one first;
then more saturations, alternating which goes first, so that each wss:// saturation has a
ws:// one next to it in time. Printed: both rows, the wss/ws ratios of latency and server
CPU, and saturated responses per CPU-second of the coordinator: each pair's ratio and the
median of them, the figure the target is judged on (the shared machine's load swings from
one saturation to the next; a pair shares it).
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path
from typing import Any

import attrs

from bench import membership
from bench.report import Progressor, ScenarioResult, check

MEMBERS = 1000
MORE_SATURATIONS = {True: 2, False: 4}  # quick, full: pairs after the steady runs' own
TARGET = 0.9  # wss / ws saturated responses per CPU-second (issue 47: the median of 5 pairs)


def run(progress: Progressor, quick: bool, out: Path) -> ScenarioResult:
    sizes = attrs.evolve(membership.QUICK if quick else membership.FULL, steady_members=(MEMBERS,))
    mode = sizes.gc_modes[0]
    more = MORE_SATURATIONS[quick]
    result = ScenarioResult("tls", f"TLS on the heartbeat path: wss vs ws @{MEMBERS:,} members, GC {mode}",
                            columns=["run", "members", "p50 ms", "p99 ms", "server p99 ms", "hb/s",
                                     "cores", "RSS MB", "sat. rps", "rps/core"])
    runs: dict[str, dict[str, Any]] = {}
    pairs: list[dict[str, float | None]] = []
    with tempfile.TemporaryDirectory(prefix="rsc-bench-tls-") as folder, \
            progress.scenario("tls", steps=4 + 2 * more):
        certificate = membership.make_certificate(folder)
        with membership.steady_setup(progress, sizes, MEMBERS, bare=False, gc_mode=mode) as plain, \
                membership.steady_setup(progress, sizes, MEMBERS, bare=False, gc_mode=mode,
                                        tls=certificate) as secure:
            servers = {"ws": plain, "wss": secure}
            for scheme, steady in servers.items():
                runs[scheme] = membership.steady_measure(progress, sizes, steady, mode)
            pairs.append({scheme: _per_core(run["saturated"], run["saturatedCpu"])
                          for scheme, run in runs.items()})
            for index in range(more):
                order = ("wss", "ws") if index % 2 == 0 else ("ws", "wss")
                pair: dict[str, float | None] = {}
                for scheme in order:
                    progress.step(f"saturation {index + 2} of {more + 1}: {scheme}://")
                    pair[scheme] = _per_core(*membership.saturate(sizes, servers[scheme]))
                pairs.append(pair)
    figures = {scheme: _figures(run, sizes.steady_window_s) for scheme, run in runs.items()}
    for scheme, row in figures.items():
        result.rows.append([f"coordinator {scheme}://", MEMBERS, *row.values()])
    ratios = {name: _ratio(figures["wss"][name], figures["ws"][name]) for name in figures["ws"]}
    result.rows.append(["ratio wss / ws", MEMBERS, *ratios.values()])
    paired = [_ratio(pair["wss"], pair["ws"]) for pair in pairs]
    measured = [ratio for ratio in paired if ratio is not None]
    median = statistics.median(measured) if measured else None
    result.data = {"members": MEMBERS, "gcMode": mode, "runs": runs, "ratios": ratios,
                   "saturations": pairs, "pairedRatios": paired, "medianRatio": median}
    result.target(f"wss / ws rps per CPU-second @{MEMBERS:,}, median of {len(pairs)} paired saturations",
                  f">= {TARGET}x", f"{_times(median)} (pairs: {', '.join(map(_times, paired))})",
                  check(median, lambda value: value >= TARGET))
    result.target(f"wss / ws coordinator cores in the steady window @{MEMBERS:,}", "(no target)",
                  _times(ratios["cores"]), None)
    result.target(f"wss / ws p99 heartbeat latency @{MEMBERS:,}", "(no target)",
                  _times(ratios["p99 ms"]), None)
    result.notes.append(
        f"heartbeat interval {sizes.heartbeat_ms} ms; the steady window is {sizes.steady_window_s:.0f} s; "
        "ratios below 1 for rps/core (above 1 for cores and latency) are the TLS cost; the TLS "
        "handshakes happen while the members connect, before the window; both coordinators run "
        f"side by side; after each one's steady run, {more} more saturations each "
        f"({min(MEMBERS, sizes.saturate_members)} members for {sizes.saturate_s:.0f} s), alternating "
        "which goes first; the rows show the first saturation of each")
    return result


def _per_core(saturated: dict[str, Any], cpu: dict[str, Any]) -> float | None:
    cores = cpu["server"]["cpuCores"]
    return saturated["perSecond"] / cores if cores else None


def _figures(run: dict[str, Any], window_s: float) -> dict[str, float | None]:
    window, server = run["window"], run["cpu"]["server"]
    cores = run["saturatedCpu"]["server"]["cpuCores"]
    rps = run["saturated"]["perSecond"]
    return {"p50 ms": window["p50Ms"], "p99 ms": window["p99Ms"], "server p99 ms": window["serverP99Ms"],
            "hb/s": window["count"] / window_s, "cores": server["cpuCores"],
            "RSS MB": server["peakRssMb"], "sat. rps": rps, "rps/core": rps / cores if cores else None}


def _ratio(wss: float | None, ws: float | None) -> float | None:
    return wss / ws if wss is not None and ws else None


def _times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"
