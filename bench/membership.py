"""Scenarios 1-4: the coordinator under simulated members (steady, join storm, scale, failure).

Layout on the 2-core machine: redis-server, the coordinator (one process) and
one load-generator process with every simulated member. Each scenario starts
its own Redis and coordinator and stops them by pid.

Shard counts: the protocol caps `shardCount` at 4096 (docs/protocol.md, Admin), so
"2 shards per member" becomes min(2 x members, 4096), and scale-out's "10,000
shards" is 4096; every table says which count it used.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import attrs

from bench import gcstats
from bench.gcstats import pauses_cell
from bench.procs import LoadGen, Redis, Sampler, Server, py_spy, start_bare, start_coordinator
from bench.report import Progressor, ScenarioResult, check, pyplot
from rsc.actors.ops import latency
from rsc.common import gc_policy as gc_control
from rsc.common.redis_server import ServerTls

MAX_SHARDS = 4096  # docs/protocol.md: setShardCount shardCount 1..4096


@attrs.frozen
class Sizes:
    steady_members: tuple[int, ...]
    steady_window_s: float
    saturate_members: int
    saturate_s: float
    storm_members: int
    scale_members: int
    scale_shards: int
    scale_repeats: int
    failure_members: int
    failure_lease_ms: int
    heartbeat_ms: int = 3000
    settle_intervals: float = 4  # steady: heartbeat intervals between the spread and the window
    gc_modes: tuple[str, ...] = ("tuned", "default")  # the first is the shipped one, the targets' mode
    soak_members: int = 5000
    soak_s: float = 600
    soak_churn: int = 50  # members that leave, and new ones that join, every soak_period_s
    soak_period_s: float = 10
    soak_sample_s: float = 30
    steady_wss: bool = False  # steady: also each size over wss:// (the shipped GC mode), `--wss`


FULL = Sizes(steady_members=(1000, 5000, 10000), steady_window_s=15, saturate_members=500, saturate_s=5,
             storm_members=5000, scale_members=1000, scale_shards=10000, scale_repeats=3,
             failure_members=1000, failure_lease_ms=10000)
QUICK = Sizes(steady_members=(200,), steady_window_s=6, saturate_members=100, saturate_s=3,
              storm_members=300, scale_members=100, scale_shards=400, scale_repeats=1,
              failure_members=100, failure_lease_ms=3000, heartbeat_ms=1000,
              soak_members=300, soak_s=60, soak_churn=10, soak_period_s=5, soak_sample_s=10)


def shards_for(wanted: int) -> int:
    return min(wanted, MAX_SHARDS)


def make_certificate(folder: str) -> ServerTls:
    """A CA and a certificate it signed for 127.0.0.1, as PEM files in `folder` (for wss://)."""
    import trustme

    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    root = Path(folder)
    ca.cert_pem.write_to_path(str(root / "ca.pem"))
    for index, pem in enumerate(issued.cert_chain_pems):
        pem.write_to_path(str(root / "server.pem"), append=index > 0)
    issued.private_key_pem.write_to_path(str(root / "server.key"))
    return ServerTls(str(root / "server.pem"), str(root / "server.key"), str(root / "ca.pem"))


@contextmanager
def coordinated(progress: Progressor, gc_mode: str | None = None,
                **flags: Any) -> Iterator[tuple[Redis, Server, LoadGen]]:
    """A fresh Redis, a coordinator on it and a load generator pointed at it; all stopped after."""
    redis = Redis()
    coordinator = loadgen = None
    try:
        coordinator = start_coordinator(redis.url, gc_mode=gc_mode, **flags)
        loadgen = LoadGen(coordinator.url, gc_mode=gc_mode)
        yield redis, coordinator, loadgen
    finally:
        progress.note("stopping processes")
        for process in (loadgen, coordinator, redis):
            if process is not None:
                process.stop()


def _wait(progress: Progressor, seconds: float, sampler: Sampler, label: str) -> None:
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        progress.note(f"{label} ({left:.0f}s left)")
        sampler.sample()
        time.sleep(min(0.5, left))


def _populate(progress: Progressor, loadgen: LoadGen, members: int, shards: int | None,
              sampler: Sampler | None = None) -> dict[str, Any]:
    """Routing, `members` connected sessions, all joined and converged."""
    if shards is not None:
        reply = loadgen.call("set_shards", count=shards)["reply"]
        if reply.get("status") != "OK":
            raise RuntimeError(f"setShardCount: {reply}")
    progress.note(f"connecting {members:,} websockets")
    connected = loadgen.call("connect", count=members, timeout=600,
                             on_wait=sampler.sample if sampler else None)
    if connected["connected"] != members:
        raise RuntimeError(f"only {connected['connected']} of {members} sessions connected")
    progress.note(f"{members:,} members joining")
    joined = loadgen.call("join", wait=shards is not None, timeout=600,
                          on_wait=sampler.sample if sampler else None)
    if shards is not None and not joined.get("converged"):
        raise RuntimeError(f"join did not converge: {joined}")
    return {"connectSeconds": connected["seconds"], **joined}


# --- 1. steady heartbeats ---------------------------------------------------------------

GC_DEFAULT_RPS_PER_CORE = 1919  # saturated responses per CPU-second before the GC policy (Python's defaults)


def steady(progress: Progressor, sizes: Sizes, out: Path) -> ScenarioResult:
    result = ScenarioResult("steady", "steady heartbeats, coordinator vs bare trio-websocket server, "
                            f"GC {' vs '.join(sizes.gc_modes)}",
                            columns=["run", "GC", "members", "p50 ms", "p99 ms", "server p99 ms",
                                     "loadgen lag p99 ms", "hb/s", "cores", "RSS MB",
                                     "GC/min", "GC s", "GC %", "max pause ms g0/g1/g2", "loadgen cores",
                                     "loadgen GC %", "expired", "sat. rps", "rps/core", "ratio rps/core"])
    runs = len(sizes.gc_modes) + (1 if sizes.steady_wss else 0)
    with ExitStack() as stack, progress.scenario("1 steady", steps=4 * len(sizes.steady_members) * runs):
        certificate = None
        if sizes.steady_wss:
            certificate = make_certificate(stack.enter_context(
                tempfile.TemporaryDirectory(prefix="rsc-bench-steady-")))
        for members in sizes.steady_members:
            for mode in sizes.gc_modes:
                wss_run = None
                try:
                    coordinator_run = _steady_run(progress, sizes, members, bare=False, gc_mode=mode)
                    if certificate is not None and mode == sizes.gc_modes[0]:
                        wss_run = _steady_run(progress, sizes, members, bare=False, gc_mode=mode,
                                              tls=certificate)
                    bare_run = _steady_run(progress, sizes, members, bare=True, gc_mode=mode)
                except Exception as exc:  # noqa: BLE001 - keep the sizes that did run
                    result.notes.append(f"@{members:,} GC {mode}: {type(exc).__name__}: {exc}")
                    result.error = f"@{members:,} GC {mode}: {type(exc).__name__}: {str(exc)[:200]}"
                    continue
                _steady_rows(result, sizes, members, mode, coordinator_run, bare_run, wss_run)
        if not result.data:
            return result
        _steady_targets(result, sizes)
    result.notes.append(
        f"heartbeat interval {sizes.heartbeat_ms} ms, lease 30 s; after convergence each member's next "
        "beat is spread uniformly over one interval (a population that joined over time); latency is "
        f"client-side, over a {sizes.steady_window_s:.0f} s window that starts "
        f"{sizes.settle_intervals:g} intervals after the spread ('server p99': from a frame's "
        "arrival to its answer written, inside the server; 'loadgen lag p99': how late the load "
        "generator's own event loop wakes a 5 ms sleep, which every client-side latency includes); "
        "'saturated rps' is closed-loop: "
        f"{sizes.saturate_members} members beat again as soon as answered (the rest keep beating) "
        f"for {sizes.saturate_s:.0f} s; rps/core = saturated responses per CPU-second of the server "
        "process, the capacity measure that survives a shared, oversubscribed machine (raw rps "
        "swings with whatever else runs); ratio = coordinator / bare at the same size and GC; "
        "cores, RSS = the server process's (peak RSS)")
    result.notes.append(
        "GC: tuned = gc.freeze() after startup and on every 1 s tick, young collections only after "
        f"{gc_control.TUNED_THRESHOLDS[0]:,} net allocations, a full collection from the tick after "
        f"{100 * gc_control.GROWTH:.0f} % heap growth (adaptive up to {100 * gc_control.MAX_GROWTH:.0f} %) "
        f"or {gc_control.MAX_FULL_INTERVAL_S:.0f} s, at most {100 * gc_control.FULL_BUDGET:.1f} % of wall "
        "time; default = Python's (700, 10, 10). Coordinator, bare server and load generator all run "
        "the same mode (RSC_GC). GC figures are the server's over the steady window: collections per "
        "minute, seconds spent collecting, that as a share of the window, and the longest pause per "
        "generation (gc.callbacks)")
    _plot_steady(result, out)
    return result


def _steady_rows(result: ScenarioResult, sizes: Sizes, members: int, mode: str,
                 coordinator_run: dict[str, Any], bare_run: dict[str, Any],
                 wss_run: dict[str, Any] | None = None) -> None:
    served = [coordinator_run, bare_run] + ([wss_run] if wss_run is not None else [])
    for run in served:
        cores = run["saturatedCpu"]["server"]["cpuCores"]
        run["perCore"] = run["saturated"]["perSecond"] / cores if cores else None
    for run in served:
        if run is bare_run:
            continue
        run["ratio"] = run["saturated"]["perSecond"] / bare_run["saturated"]["perSecond"]
        run["perCoreRatio"] = (run["perCore"] / bare_run["perCore"]
                               if run["perCore"] and bare_run["perCore"] else None)
    rows = [("coordinator", coordinator_run), ("bare websocket", bare_run)]
    if wss_run is not None:
        wss_run["wssPerWsPerCore"] = (wss_run["perCore"] / coordinator_run["perCore"]
                                      if wss_run["perCore"] and coordinator_run["perCore"] else None)
        rows.insert(1, ("coordinator wss://", wss_run))
    for label, run in rows:
        window, cpu, server_gc = run["window"], run["cpu"], run["gc"]["server"]
        result.rows.append([label, mode, members, window["p50Ms"], window["p99Ms"],
                            window["serverP99Ms"], window["loopLagP99Ms"],
                            window["count"] / sizes.steady_window_s,
                            cpu["server"]["cpuCores"], cpu["server"]["peakRssMb"],
                            server_gc["collectionsPerMinute"], server_gc["gcSeconds"],
                            100 * server_gc["gcShare"], pauses_cell(server_gc),
                            cpu["load"]["cpuCores"], 100 * run["gc"]["load"]["gcShare"],
                            run["expiredTotal"], run["saturated"]["perSecond"], run["perCore"],
                            run.get("perCoreRatio", 1.0)])
    runs = {"coordinator": coordinator_run, "bare": bare_run}
    if wss_run is not None:
        runs["wss"] = wss_run
    result.data.setdefault(str(members), {})[mode] = runs


def _steady_targets(result: ScenarioResult, sizes: Sizes) -> None:
    biggest = max(int(size) for size in result.data)
    runs = result.data[str(biggest)]
    shipped = sizes.gc_modes[0]
    if shipped not in runs:
        return
    run = runs[shipped]["coordinator"]
    p99, rss = run["window"]["p99Ms"], run["cpu"]["server"]["peakRssMb"]
    bare_p99 = runs[shipped]["bare"]["window"]["p99Ms"]
    result.target(f"p99 heartbeat latency @{biggest:,} (GC {shipped})",
                  "< 100 ms, or <= 1.5x the bare server's", f"{p99:.1f} ms (bare {bare_p99:.1f} ms, "
                  f"{p99 / bare_p99:.2f}x)" if bare_p99 else f"{p99:.1f} ms",
                  check(p99, lambda v: v < 100 or (bool(bare_p99) and v <= 1.5 * bare_p99)))
    inside, lag = run["window"].get("serverP99Ms"), run["window"].get("loopLagP99Ms")
    if inside is not None and lag is not None:
        result.target(f"where the p99 goes @{biggest:,} (GC {shipped})", "(no target)",
                      f"inside the coordinator {inside:.1f} ms, load generator's loop lag "
                      f"{lag:.1f} ms, client-side {p99:.1f} ms", None)
    result.target(f"expired members @{biggest:,} (GC {shipped})", "0", str(run["expiredTotal"]),
                  run["expiredTotal"] == 0)
    bare_rss = runs[shipped]["bare"]["cpu"]["server"]["peakRssMb"]
    result.target(f"coordinator RSS @{biggest:,} (GC {shipped})", "<= 250 MB",
                  f"{rss:.0f} MB (bare {bare_rss:.0f} MB)", rss <= 250)
    per_core = run["perCoreRatio"]
    result.target(f"throughput vs bare websocket @{biggest:,} (GC {shipped})", ">= 1.0x (per CPU-second)",
                  f"{per_core:.2f}x per CPU-s ({run['ratio']:.2f}x raw rps)",
                  check(per_core, lambda v: v >= 1.0))
    result.target(f"coordinator rps/core @{biggest:,} (GC {shipped})",
                  f">= 2x the {GC_DEFAULT_RPS_PER_CORE:,} before the GC policy",
                  f"{run['perCore']:,.0f} ({run['perCore'] / GC_DEFAULT_RPS_PER_CORE:.1f}x)",
                  check(run["perCore"], lambda v: v >= 2 * GC_DEFAULT_RPS_PER_CORE))
    gc_share = run["gc"]["server"]["gcShare"]
    result.target(f"coordinator time in GC @{biggest:,} (GC {shipped})", "(no target)",
                  f"{100 * gc_share:.1f} % of the window, longest pause "
                  f"{max(run['gc']['server']['maxPauseMs']):.1f} ms", None)
    for other in sizes.gc_modes[1:]:
        if other in runs and runs[other]["coordinator"]["perCore"]:
            gain = run["perCore"] / runs[other]["coordinator"]["perCore"]
            result.target(f"rps/core GC {shipped} vs {other} @{biggest:,}", "(no target)",
                          f"{gain:.2f}x", None)
    wss = runs[shipped].get("wss")
    if wss is not None:
        result.target(f"wss / ws rps per CPU-second @{biggest:,} (GC {shipped})", "(no target)",
                      "-" if wss["wssPerWsPerCore"] is None else f"{wss['wssPerWsPerCore']:.2f}x", None)
        result.target(f"wss:// p99 heartbeat latency, RSS @{biggest:,} (GC {shipped})", "(no target)",
                      f"{wss['window']['p99Ms']:.1f} ms (ws:// {p99:.1f} ms), "
                      f"{wss['cpu']['server']['peakRssMb']:.0f} MB (ws:// {rss:.0f} MB)", None)
        result.notes.append("wss:// rows (--wss): the same coordinator serving TLS with a trustme "
                            "certificate, the load generator verifying it; its ratio column is "
                            "against the bare (plain) server like the ws:// row's")
    if biggest < 10000:
        result.notes.append(f"small sizes: targets are for 10,000 members, measured at {biggest:,}")


@attrs.define
class SteadyServer:
    """A server under `members` simulated members, joined, spread and settled (`steady_setup`)."""

    label: str
    members: int
    shards: int | None
    server: Server
    loadgen: LoadGen
    populated: dict[str, Any]
    setup: Sampler
    spy_name: str | None


@contextmanager
def steady_setup(progress: Progressor, sizes: Sizes, members: int, *, bare: bool, gc_mode: str,
                 tls: ServerTls | None = None) -> Iterator[SteadyServer]:
    """A fresh Redis and server (the coordinator, over wss:// with `tls`, or the bare one) and a
    load generator with `members` members joined, their beats spread and settled; all stopped
    after."""
    label = f"{'bare' if bare else 'coordinator'}{' wss' if tls else ''} GC {gc_mode}"
    progress.step(f"{label} @{members:,}: starting")
    shards = None if bare else shards_for(2 * members)
    redis = None if bare else Redis()
    server = loadgen = None
    try:
        server = start_bare(gc_mode) if bare else start_coordinator(
            redis.url, heartbeat_interval_ms=sizes.heartbeat_ms, lease_ttl_ms=30000,  # type: ignore[union-attr]
            gc_mode=gc_mode, tls=tls)
        loadgen = LoadGen(server.url, gc_mode=gc_mode, ca_file=tls.ca_file if tls else None)
        setup = Sampler(server=server)
        populated = _populate(progress, loadgen, members, shards, setup)
        progress.note(f"{label} @{members:,}: spreading heartbeats")
        loadgen.call("desync", timeout=60)
        # the join storm's backlog drains for a few intervals after the spread; the window
        # measures the steady state after it (the same wait for the bare server)
        _wait(progress, sizes.settle_intervals * sizes.heartbeat_ms / 1000, setup,
              f"{label} @{members:,}: settling")
        yield SteadyServer(label, members, shards, server, loadgen, populated, setup,
                           None if bare else f"coordinator{'-wss' if tls else ''}-{members}-gc-{gc_mode}")
    finally:
        for process in (loadgen, server, redis):
            if process is not None:
                process.stop()


def steady_measure(progress: Progressor, sizes: Sizes, steady: SteadyServer,
                   gc_mode: str) -> dict[str, Any]:
    """The steady window (latency, CPU, GC), then one closed-loop saturation."""
    label, members, server, loadgen = steady.label, steady.members, steady.server, steady.loadgen
    gc_before = {"server": server.gc_report(), "load": loadgen.call("gc")}
    loadgen.call("reset")
    sampler = Sampler(server=server, load=loadgen)
    spy = None if steady.spy_name is None else py_spy(server.pid, sizes.steady_window_s,
                                                      steady.spy_name)
    _wait(progress, sizes.steady_window_s, sampler, f"{label} @{members:,}: steady window")
    if spy is not None:
        spy.wait(timeout=60)
    window = loadgen.call("stats")
    cpu = sampler.result()
    elapsed = time.perf_counter() - sampler.started
    server_after = server.gc_report()
    inside = latency.window(gc_before["server"]["requests"], server_after["requests"])
    window["serverP50Ms"], window["serverP99Ms"] = (_ms(latency.quantile(inside, q))
                                                    for q in (0.5, 0.99))
    gc = {"server": gcstats.window(gc_before["server"], server_after, elapsed),
          "load": gcstats.window(gc_before["load"], loadgen.call("gc"), elapsed)}
    progress.note(f"{label} @{members:,}: saturating")
    saturated, saturated_cpu = saturate(sizes, steady)
    saturated_gc = gcstats.window(gc_before["server"], server.gc_report(),
                                  time.perf_counter() - sampler.started)
    final = loadgen.call("stats")
    progress.step(f"{label} @{members:,}: done")
    return {"shards": steady.shards, "gcMode": gc_mode, "setup": steady.populated,
            "setupServer": steady.setup.result()["server"], "window": window, "cpu": cpu, "gc": gc,
            "saturated": saturated, "saturatedCpu": saturated_cpu,
            "gcThroughSaturation": saturated_gc, "expiredTotal": final["expiredTotal"],
            "latencies": None}


def saturate(sizes: Sizes, steady: SteadyServer) -> tuple[dict[str, Any], dict[str, Any]]:
    """One closed-loop saturation: what the load generator got and the CPU the processes used."""
    sampler = Sampler(server=steady.server, load=steady.loadgen)
    saturated = steady.loadgen.call("saturate", members=min(steady.members, sizes.saturate_members),
                                    seconds=sizes.saturate_s, timeout=120)
    return saturated, sampler.result()


def _steady_run(progress: Progressor, sizes: Sizes, members: int, *, bare: bool,
                gc_mode: str, tls: ServerTls | None = None) -> dict[str, Any]:
    with steady_setup(progress, sizes, members, bare=bare, gc_mode=gc_mode, tls=tls) as steady:
        return steady_measure(progress, sizes, steady, gc_mode)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def _plot_steady(result: ScenarioResult, out: Path) -> None:
    plt = pyplot()
    if plt is None or not result.data:
        return
    sizes = sorted(int(k) for k in result.data)
    modes = sorted({mode for runs in result.data.values() for mode in runs})
    figure, (latency, throughput) = plt.subplots(1, 2, figsize=(11, 4))
    for mode in modes:
        for run, style in (("coordinator", "o-"), ("bare", "s--")):
            shown = [n for n in sizes if mode in result.data[str(n)]]
            runs = [result.data[str(n)][mode][run] for n in shown]
            label = f"{run} GC {mode}"
            latency.plot(shown, [r["window"]["p99Ms"] for r in runs], style, label=f"{label} p99")
            throughput.plot(shown, [r["perCore"] for r in runs], style, label=label)
    latency.axhline(100, color="red", linewidth=0.8, label="target p99")
    latency.set(xlabel="members", ylabel="heartbeat latency (ms)", title="steady heartbeats")
    latency.set_yscale("log")
    throughput.set(xlabel="members", ylabel="saturated responses per server CPU-second",
                   title="capacity")
    latency.legend()
    throughput.legend()
    figure.tight_layout()
    path = out / "steady.png"
    figure.savefig(path, dpi=100)
    plt.close(figure)
    result.plots.append(str(path))


# --- 2. join storm ----------------------------------------------------------------------


def join_storm(progress: Progressor, sizes: Sizes, out: Path) -> ScenarioResult:
    members = sizes.storm_members
    shards = shards_for(2 * members)
    result = ScenarioResult("join-storm", f"{members:,} members join at once ({shards:,} shards)",
                            columns=["members", "shards", "seconds to converge", "heartbeats", "pushes",
                                     "coordinator cores", "peak RSS MB"])
    with progress.scenario("2 join storm", steps=2), coordinated(
            progress, heartbeat_interval_ms=sizes.heartbeat_ms,
            lease_ttl_ms=60000) as (_, coordinator, loadgen):
        loadgen.call("set_shards", count=shards)
        progress.step(f"connecting {members:,} websockets")
        loadgen.call("connect", count=members, timeout=600)
        sampler = Sampler(server=coordinator)
        progress.step(f"{members:,} members joining at once")
        joined = loadgen.call("join", wait=True, timeout=600, on_wait=sampler.sample)
        cpu = sampler.result()["server"]
        if not joined.get("converged"):
            result.error = f"did not converge: {joined.get('state')}"
        result.rows.append([members, shards, joined["seconds"], joined.get("heartbeats"),
                            joined.get("pushes"), cpu["cpuCores"], cpu["peakRssMb"]])
        result.data = {"join": joined, "cpu": cpu}
        result.target(f"join storm {members:,} -> converged", "(no target)",
                      f"{joined['seconds']:.1f} s", None)
    result.notes.append("converged = every shard held, nothing pending, every member answered OK, as "
                        "the members see it (members a join leaves alone catch up with the epoch later, "
                        "H10); clock starts when all join")
    return result


# --- 3. scale out / in ------------------------------------------------------------------


def scale(progress: Progressor, sizes: Sizes, out: Path) -> ScenarioResult:
    members = sizes.scale_members
    shards = shards_for(sizes.scale_shards)
    result = ScenarioResult("scale", f"{members:,} stable members, {shards:,} shards: add 1, remove 1",
                            columns=["run", "members", "shards", "add 1: s", "remove 1: s",
                                     "add heartbeats", "remove heartbeats"])
    runs: dict[str, dict[str, Any]] = {}
    with progress.scenario("3 scale out/in", steps=2 * (1 + 2 * sizes.scale_repeats)):
        for push in (True, False):
            label = "pushes" if push else "pull only"
            with coordinated(progress, heartbeat_interval_ms=sizes.heartbeat_ms, lease_ttl_ms=60000,
                             push=push) as (_, _, loadgen):
                progress.step(f"{label}: {members:,} members joining")
                _populate(progress, loadgen, members, shards)
                loadgen.call("desync", timeout=60)
                adds, removes = [], []
                for attempt in range(sizes.scale_repeats):
                    progress.step(f"{label}: add 1 member (#{attempt + 1})")
                    adds.append(loadgen.call("add", count=1, timeout=120))
                    progress.step(f"{label}: remove 1 member (#{attempt + 1})")
                    removes.append(loadgen.call("leave", count=1, timeout=120))
            runs[label] = {
                "add": statistics.median(a["seconds"] for a in adds),
                "remove": statistics.median(r["seconds"] for r in removes),
                "addHeartbeats": statistics.median(a.get("heartbeats", 0) for a in adds),
                "removeHeartbeats": statistics.median(r.get("heartbeats", 0) for r in removes),
                "adds": adds, "removes": removes,
            }
            result.rows.append([label, members, shards, runs[label]["add"], runs[label]["remove"],
                                runs[label]["addHeartbeats"], runs[label]["removeHeartbeats"]])
    push_run, pull_run = runs["pushes"], runs["pull only"]
    speedup = min(pull_run["add"] / push_run["add"], pull_run["remove"] / push_run["remove"])
    worst = max(push_run["add"], push_run["remove"])
    result.data = {"runs": runs, "speedup": speedup}
    result.target("scale-out speed-up, pushes vs pull only", ">= 5x",
                  f"{speedup:.1f}x (add {pull_run['add'] / push_run['add']:.1f}x, "
                  f"remove {pull_run['remove'] / push_run['remove']:.1f}x)", speedup >= 5)
    result.target(f"convergence with pushes @{members:,}", "< 1 s", f"{worst * 1000:.0f} ms", worst < 1)
    result.notes.append(f"median of {sizes.scale_repeats}; heartbeat interval {sizes.heartbeat_ms} ms; "
                        "remove = clean leave (memberEpoch -1); the issue's 10,000 shards exceed the "
                        "protocol's 4,096 cap")
    return result


# --- 4. failure -------------------------------------------------------------------------


def failure(progress: Progressor, sizes: Sizes, out: Path) -> ScenarioResult:
    members = sizes.failure_members
    shards = shards_for(2 * members)
    lease_ms, tick_ms = sizes.failure_lease_ms, 1000
    result = ScenarioResult("failure", f"{members:,} members, 10% stop silently",
                            columns=["members", "shards", "killed", "orphaned shards", "lease ms",
                                     "seconds to re-owned", "beyond lease s"])
    with progress.scenario("4 failure", steps=2), coordinated(
            progress, heartbeat_interval_ms=sizes.heartbeat_ms, lease_ttl_ms=lease_ms,
            tick_interval_ms=tick_ms) as (_, _, loadgen):
        progress.step(f"{members:,} members joining")
        _populate(progress, loadgen, members, shards)
        loadgen.call("desync", timeout=60)
        progress.step(f"stopping {members // 10:,} members; waiting for the lease ({lease_ms} ms)")
        killed = loadgen.call("kill", fraction=0.1, timeout=lease_ms / 1000 + 120)
        beyond = killed["seconds"] - lease_ms / 1000
        result.rows.append([members, shards, killed["killed"], killed["orphanedShards"], lease_ms,
                            killed["seconds"], beyond])
        result.data = killed
        if not killed.get("converged"):
            result.error = f"did not converge: {killed.get('state')}"
        result.target("failed members' shards owned again", f"~ lease {lease_ms / 1000:.0f} s + tick",
                      f"{killed['seconds']:.2f} s (lease + {beyond:.2f} s)",
                      None if killed.get("converged") else False)
    result.notes.append(f"tick {tick_ms} ms; detection is bounded by the lease TTL by design (H6); "
                        "'beyond lease' is the coordinator's own reaction time")
    return result


# --- 5. soak ----------------------------------------------------------------------------


def soak(progress: Progressor, sizes: Sizes, out: Path) -> ScenarioResult:
    members, mode = sizes.soak_members, sizes.gc_modes[0]
    shards = shards_for(2 * members)
    minutes = sizes.soak_s / 60
    result = ScenarioResult("soak", f"{members:,} members for {minutes:.0f} min, {sizes.soak_churn} leave "
                            f"and {sizes.soak_churn} join every {sizes.soak_period_s:.0f} s, GC {mode}",
                            columns=["GC", "members", "minutes", "left", "joined", "RSS start MB",
                                     "RSS end MB", "RSS peak MB", "GC/min", "full GCs", "GC s", "GC %",
                                     "max pause ms g0/g1/g2", "p50 ms", "p99 ms", "max ms", "expired",
                                     "churn converge s (median)"])
    periods = int(sizes.soak_s // sizes.soak_period_s)
    with progress.scenario("5 soak", steps=2 + periods), coordinated(
            progress, gc_mode=mode, heartbeat_interval_ms=sizes.heartbeat_ms,
            lease_ttl_ms=30000) as (_, coordinator, loadgen):
        progress.step(f"{members:,} members joining")
        _populate(progress, loadgen, members, shards)
        loadgen.call("desync", timeout=60)
        gc_start = coordinator.gc_report()
        loadgen.call("reset")
        started = time.perf_counter()
        rss_start = coordinator.rss_mb()
        samples = [{"seconds": 0.0, "rssMb": rss_start, "heapBlocks": gc_start["heapBlocks"],
                    "collections": sum(gc_start["collections"])}]
        sampler = Sampler(server=coordinator)
        converge: list[float] = []
        longest = [0.0, 0.0, 0.0]  # each report starts a new max-pause window: keep the soak's
        left = joined = 0
        for period in range(periods):
            if time.perf_counter() - started >= sizes.soak_s:
                break  # churn slower than its period: the soak still ends on time
            period_end = started + (period + 1) * sizes.soak_period_s
            gone = loadgen.call("leave", count=sizes.soak_churn, oldest=True, timeout=120)
            came = loadgen.call("add", count=sizes.soak_churn, timeout=120)
            left += sizes.soak_churn
            joined += came.get("connected", 0)
            converge.append(gone["seconds"] + came["seconds"])
            if not (gone.get("converged") and came.get("converged")):
                result.notes.append(f"period {period}: did not converge ({gone.get('state')}, "
                                    f"{came.get('state')})")
            progress.step(f"churn {period + 1}/{periods}: {left:,} left, {joined:,} joined, "
                          f"RSS {coordinator.rss_mb():.0f} MB")
            while (wait := period_end - time.perf_counter()) > 0:
                sampler.sample()
                time.sleep(min(0.5, wait))
            elapsed = time.perf_counter() - started
            if elapsed - samples[-1]["seconds"] >= sizes.soak_sample_s or elapsed >= sizes.soak_s:
                report = coordinator.gc_report()
                longest = [max(pair) for pair in zip(longest, report["maxSeconds"], strict=True)]
                samples.append({"seconds": elapsed, "rssMb": coordinator.rss_mb(),
                                "heapBlocks": report["heapBlocks"],
                                "collections": sum(report["collections"])})
        elapsed = time.perf_counter() - started
        window = loadgen.call("stats")
        report = coordinator.gc_report()
        report["maxSeconds"] = [max(pair) for pair in zip(longest, report["maxSeconds"], strict=True)]
        gc = gcstats.window(gc_start, report, elapsed)
        cpu = sampler.result()["server"]
        rss_end = coordinator.rss_mb()
        result.rows.append([mode, members, elapsed / 60, left, joined, rss_start, rss_end, cpu["peakRssMb"],
                            gc["collectionsPerMinute"], gc["fullCollections"], gc["gcSeconds"],
                            100 * gc["gcShare"], pauses_cell(gc), window["p50Ms"], window["p99Ms"],
                            window["maxMs"], window["expiredTotal"],
                            statistics.median(converge) if converge else None])
        result.data = {"gc": gc, "window": window, "samples": samples, "cpu": cpu,
                       "rssStartMb": rss_start, "rssEndMb": rss_end, "convergeSeconds": converge}
        growth = (rss_end - rss_start) / rss_start
        result.target(f"coordinator RSS over {minutes:.0f} min of churn @{members:,}", "flat (< 10 % growth)",
                      f"{rss_start:.0f} -> {rss_end:.0f} MB ({100 * growth:+.1f} %)", growth < 0.10)
        result.target(f"collections per minute @{members:,}", "(no target)",
                      f"{gc['collectionsPerMinute']:.0f}/min, {gc['fullCollections']} full, "
                      f"{100 * gc['gcShare']:.1f} % of the time", None)
    result.notes.append("members leave cleanly (memberEpoch -1), the oldest first, and as many new "
                        "sessions connect and join; RSS is the coordinator process's; GC figures over "
                        "the churn (gc.callbacks); 'full GCs' = the policy's full collections "
                        "(unfreeze, collect, freeze) from the tick")
    _plot_soak(result, out)
    return result


def _plot_soak(result: ScenarioResult, out: Path) -> None:
    plt = pyplot()
    if plt is None or not result.data.get("samples"):
        return
    samples = result.data["samples"]
    figure, rss = plt.subplots(figsize=(7, 4))
    rss.plot([s["seconds"] / 60 for s in samples], [s["rssMb"] for s in samples], "o-")
    rss.set(xlabel="minutes", ylabel="coordinator RSS (MB)", title=result.title)
    rss.set_ylim(bottom=0)
    figure.tight_layout()
    path = out / "soak.png"
    figure.savefig(path, dpi=100)
    plt.close(figure)
    result.plots.append(str(path))
