"""What TLS costs on the heartbeat path: steady heartbeats at 1,000 members, wss:// vs ws://, one run.

Two coordinators, one after the other, each on a fresh Redis, driven by the same load
generator (bench/wire.py speaks wss:// over a non-blocking ssl.SSLSocket, with the same
syscall pattern as ws://): the membership scenario's steady run (spread heartbeats, a
steady window, then closed-loop saturation), once plain and once with `--tls-cert` /
`--tls-key` (a certificate made by trustme, verified by the load generator). Printed:
both rows and the wss/ws ratios of latency, server CPU and saturated responses per
CPU-second of the coordinator.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import attrs

from bench import membership
from bench.report import Progressor, ScenarioResult

MEMBERS = 1000


def run(progress: Progressor, quick: bool, out: Path) -> ScenarioResult:
    sizes = attrs.evolve(membership.QUICK if quick else membership.FULL, steady_members=(MEMBERS,))
    mode = sizes.gc_modes[0]
    result = ScenarioResult("tls", f"TLS on the heartbeat path: wss vs ws @{MEMBERS:,} members, GC {mode}",
                            columns=["run", "members", "p50 ms", "p99 ms", "server p99 ms", "hb/s",
                                     "cores", "RSS MB", "sat. rps", "rps/core"])
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="rsc-bench-tls-") as folder, \
            progress.scenario("tls", steps=4):
        certificate = membership.make_certificate(folder)
        for scheme, tls in (("ws", None), ("wss", certificate)):
            runs[scheme] = membership._steady_run(progress, sizes, MEMBERS, bare=False, gc_mode=mode,
                                                  tls=tls)
    figures = {scheme: _figures(run, sizes.steady_window_s) for scheme, run in runs.items()}
    for scheme, row in figures.items():
        result.rows.append([f"coordinator {scheme}://", MEMBERS, *row.values()])
    ratios = {name: _ratio(figures["wss"][name], figures["ws"][name]) for name in figures["ws"]}
    result.rows.append(["ratio wss / ws", MEMBERS, *ratios.values()])
    result.data = {"members": MEMBERS, "gcMode": mode, "runs": runs, "ratios": ratios}
    result.target(f"wss / ws rps per CPU-second @{MEMBERS:,}", "(no target)",
                  _times(ratios["rps/core"]), None)
    result.target(f"wss / ws coordinator cores in the steady window @{MEMBERS:,}", "(no target)",
                  _times(ratios["cores"]), None)
    result.target(f"wss / ws p99 heartbeat latency @{MEMBERS:,}", "(no target)",
                  _times(ratios["p99 ms"]), None)
    result.notes.append(
        f"heartbeat interval {sizes.heartbeat_ms} ms; the steady window is {sizes.steady_window_s:.0f} s; "
        "ratios below 1 for rps/core (above 1 for cores and latency) are the TLS cost; the TLS "
        "handshakes happen while the members connect, before the window")
    return result


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
