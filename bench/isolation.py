"""Scenario `isolation`: one busy group must not slow the others (and join storms of 5,000
and 10,000 members).

On one coordinator (its own Redis), two load-generator processes (bench/loadgen.py):

- a busy group of 5,000 simulated members (4,096 shards) and a quiet group of 100
  (200 shards), each in its own prefix, both heartbeating at the coordinator's interval;
- the quiet group's heartbeat latency is measured first without churn (a window of
  `baseline_s`), then while the busy group restarts 10 % of its members every 10 s for
  60 s (the oldest leave cleanly, memberEpoch -1, and as many new dynamic members connect
  and join), in the same run; every expiry of a quiet member (UNKNOWN_MEMBER_ID to a member
  that had joined) and the coordinator's CPU over each window are reported;
- the busy group's own join (5,000 at once, to converged) is the 5,000-member join storm;
  then, on a fresh Redis and coordinator, 10,000 members join at once.

Converged: every shard held and nothing pending as the members see it, every member
answered OK, and listGroups says the group is STABLE (asked once the members converged).
The quiet group's latency is the load generator's: request sent to response read, its
own event loop included.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import attrs

from bench.membership import shards_for
from bench.procs import LoadGen, Redis, Sampler, Server, start_coordinator
from bench.report import Progressor, ScenarioResult, check


@attrs.frozen
class Sizes:
    busy_members: int
    quiet_members: int
    storm_members: int  # the second join storm (the first is the busy group's)
    churn_fraction: float = 0.10
    churn_period_s: float = 10.0
    churn_s: float = 60.0
    baseline_s: float = 20.0
    heartbeat_ms: int = 3000
    lease_ms: int = 30000
    rolling_steps: int = 20  # the rolling window: a period's restarts in this many even steps


FULL = Sizes(busy_members=5000, quiet_members=100, storm_members=10_000)
QUICK = Sizes(busy_members=300, quiet_members=20, storm_members=600, churn_period_s=4.0,
              churn_s=8.0, baseline_s=4.0, heartbeat_ms=1000, lease_ms=10000, rolling_steps=4)

P99_TARGET_MS = 10.0
STORM_TARGET_S = 5.0
STABLE_POLL_S = 0.1


def _schedstat(pid: int) -> tuple[float, float]:
    """Seconds a process spent on a CPU and waiting in the run queue for one (Linux)."""
    try:
        with open(f"/proc/{pid}/schedstat") as stats:
            on_cpu, waiting = stats.read().split()[:2]
    except (OSError, ValueError):
        return 0.0, 0.0
    return int(on_cpu) / 1e9, int(waiting) / 1e9


class Starved:
    """How long the coordinator waited for a CPU while runnable, over a window: on a loaded
    machine that wait, not the coordinator, makes the latencies."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.started = time.perf_counter()
        self.on_cpu, self.waiting = _schedstat(pid)

    def result(self) -> dict[str, float]:
        on_cpu, waiting = _schedstat(self.pid)
        elapsed = time.perf_counter() - self.started
        return {"onCpuSeconds": on_cpu - self.on_cpu, "runQueueSeconds": waiting - self.waiting,
                "runQueueShare": (waiting - self.waiting) / max(elapsed, 1e-9)}


def _group_state(loadgen: LoadGen, prefix: str, group: str) -> str | None:
    """The group's state in listGroups (describeGroup of 10,000 members passes the client's
    1 MiB message limit)."""
    reply = loadgen.call("admin", timeout=60, message={"type": "listGroups"})["reply"]
    for summary in reply.get("groups") or ():
        if summary.get("streamPrefix") == prefix and summary.get("consumerGroup") == group:
            return str(summary.get("state"))
    return None


def _join(loadgen: LoadGen, members: int, shards: int, prefix: str,
          sampler: Sampler | None = None, stable_within_s: float = 60.0) -> dict[str, Any]:
    """Routing, `members` connected sessions, all joining at once: converged, and the group's
    state once they are."""
    reply = loadgen.call("set_shards", count=shards)["reply"]
    if reply.get("status") != "OK":
        raise RuntimeError(f"setShardCount {prefix}: {reply}")
    connected = loadgen.call("connect", count=members, timeout=600,
                             on_wait=sampler.sample if sampler else None)
    if connected["connected"] != members:
        raise RuntimeError(f"{prefix}: {connected['connected']} of {members} connected")
    started = time.perf_counter()
    joined = loadgen.call("join", wait=True, timeout=600,
                          on_wait=sampler.sample if sampler else None)
    if not joined.get("converged"):
        raise RuntimeError(f"{prefix}: {members} members did not converge: {joined.get('state')}")
    joined["groupState"] = _group_state(loadgen, prefix, "g")
    joined["stableSeconds"] = _until_stable(loadgen, prefix, started, joined["groupState"],
                                            stable_within_s)
    return joined


def _until_stable(loadgen: LoadGen, prefix: str, started: float, state: str | None,
                  within_s: float) -> float | None:
    """Seconds from the join to listGroups saying STABLE (None: not within `within_s`).
    Members whose target the last epoch bumps left alone are not pushed at the bumps (H10):
    the newcomers among them get one push once every newcomer is STABLE and the epoch has
    settled (GroupMachine.catch_up), the others reach the epoch with their next regular
    heartbeat, so STABLE comes after the members converged."""
    deadline = started + within_s
    while state != "STABLE":
        if time.perf_counter() > deadline:
            return None
        time.sleep(STABLE_POLL_S)
        state = _group_state(loadgen, prefix, "g")
    return time.perf_counter() - started


def _quiet_window(quiet: LoadGen) -> dict[str, Any]:
    stats = quiet.call("stats")
    return {key: stats.get(key) for key in ("count", "p50Ms", "p99Ms", "maxMs", "expired",
                                            "expiredTotal", "statuses", "loopLagP99Ms")}


def _churn(progress: Progressor, busy: LoadGen, sizes: Sizes, sampler: Sampler,
           steps: int = 1) -> dict[str, Any]:
    """Restart `churn_fraction` of the busy group every `churn_period_s` for `churn_s`: the
    oldest leave and as many new members connect and join, without waiting for the group to
    converge in between (restarts come on the clock); then the wait until it has. `steps` 1:
    all of a period's restarts at once; more: spread evenly over the period, as a rolling
    restart does."""
    count = max(1, int(sizes.busy_members * sizes.churn_fraction))
    periods = int(sizes.churn_s // sizes.churn_period_s)
    per_step = [count // steps + (index < count % steps) for index in range(steps)]
    started = time.perf_counter()
    rounds: list[dict[str, Any]] = []
    for period in range(periods):
        round_started = started + period * sizes.churn_period_s  # on the clock
        joined = 0
        for step, restarting in enumerate(per_step):
            step_at = started + (period + step / steps) * sizes.churn_period_s
            while (wait := step_at - time.perf_counter()) > 0:
                sampler.sample()
                time.sleep(min(0.5, wait))
            busy.call("leave", count=restarting, oldest=True, wait=False, timeout=120,
                      on_wait=sampler.sample)
            came = busy.call("add", count=restarting, wait=False, timeout=600,
                             on_wait=sampler.sample)
            joined += came.get("connected", 0)
        rounds.append({"left": count, "joined": joined,
                       "seconds": time.perf_counter() - round_started})
        progress.note(f"churn {period + 1}/{periods}: {count} left and {count} joined")
    period_end = started + periods * sizes.churn_period_s
    while (wait := period_end - time.perf_counter()) > 0:
        sampler.sample()
        time.sleep(min(0.5, wait))
    settled = busy.call("wait_converged", timeout=180, on_wait=sampler.sample)
    return {"rounds": rounds, "settled": settled}


def _stop(*processes: LoadGen | Server | Redis | None) -> None:
    for process in processes:
        if process is not None:
            process.stop()


def neighbours(progress: Progressor, sizes: Sizes) -> dict[str, Any]:
    """The busy and the quiet group on one coordinator: baseline, then churn."""
    redis = Redis()
    coordinator = busy = quiet = None
    try:
        coordinator = start_coordinator(redis.url, heartbeat_interval_ms=sizes.heartbeat_ms,
                                        lease_ttl_ms=sizes.lease_ms)
        busy = LoadGen(coordinator.url, prefix="busy")
        quiet = LoadGen(coordinator.url, prefix="quiet")
        progress.step(f"quiet group: {sizes.quiet_members} members joining")
        quiet_join = _join(quiet, sizes.quiet_members, shards_for(2 * sizes.quiet_members),
                           "quiet")
        progress.step(f"busy group: {sizes.busy_members:,} members joining at once")
        storm_sampler = Sampler(coordinator=coordinator)
        busy_join = _join(busy, sizes.busy_members, shards_for(2 * sizes.busy_members), "busy",
                          storm_sampler)
        storm_cpu = storm_sampler.result()["coordinator"]
        busy.call("desync", timeout=60)
        quiet.call("desync", timeout=60)
        progress.step(f"baseline: {sizes.baseline_s:.0f} s without churn")
        quiet.call("reset")
        sampler = Sampler(coordinator=coordinator)
        starved = Starved(coordinator.pid)
        deadline = time.perf_counter() + sizes.baseline_s
        while (wait := deadline - time.perf_counter()) > 0:
            sampler.sample()
            time.sleep(min(0.5, wait))
        baseline = _quiet_window(quiet)
        baseline_cpu = {**sampler.result()["coordinator"], **starved.result()}
        progress.step(f"churn: {sizes.churn_fraction:.0%} of the busy group every "
                      f"{sizes.churn_period_s:.0f} s for {sizes.churn_s:.0f} s")
        quiet.call("reset")
        sampler = Sampler(coordinator=coordinator)
        starved = Starved(coordinator.pid)
        churn_done = _churn(progress, busy, sizes, sampler)
        churn = _quiet_window(quiet)
        churn_cpu = {**sampler.result()["coordinator"], **starved.result()}
        rounds = churn_done["rounds"]
        busy_state = _group_state(busy, "busy", "g")
        progress.step(f"rolling: the same restarts in {sizes.rolling_steps} even steps a period")
        quiet.call("reset")
        sampler = Sampler(coordinator=coordinator)
        starved = Starved(coordinator.pid)
        _churn(progress, busy, sizes, sampler, steps=sizes.rolling_steps)
        rolling = _quiet_window(quiet)
        rolling_cpu = {**sampler.result()["coordinator"], **starved.result()}
        quiet_state = _group_state(quiet, "quiet", "g")
        return {"quietJoin": quiet_join, "busyJoin": busy_join, "stormCpu": storm_cpu,
                "baseline": baseline, "baselineCpu": baseline_cpu, "churn": churn,
                "churnCpu": churn_cpu, "rounds": rounds, "settled": churn_done["settled"],
                "busyStateAfter": busy_state, "rolling": rolling, "rollingCpu": rolling_cpu,
                "quietStateAfter": quiet_state}
    finally:
        progress.note("stopping processes")
        _stop(busy, quiet, coordinator, redis)


def storm(progress: Progressor, sizes: Sizes) -> dict[str, Any]:
    """`storm_members` members join at once on a fresh Redis and coordinator."""
    redis = Redis()
    coordinator = loadgen = None
    try:
        coordinator = start_coordinator(redis.url, heartbeat_interval_ms=sizes.heartbeat_ms,
                                        lease_ttl_ms=max(sizes.lease_ms, 60000))
        loadgen = LoadGen(coordinator.url, prefix="storm")
        progress.step(f"join storm: {sizes.storm_members:,} members")
        sampler = Sampler(coordinator=coordinator)
        joined = _join(loadgen, sizes.storm_members, shards_for(2 * sizes.storm_members), "storm",
                       sampler)
        joined["cpu"] = sampler.result()["coordinator"]
        return joined
    finally:
        _stop(loadgen, coordinator, redis)


def run(progress: Progressor, quick: bool, out: Path) -> ScenarioResult:
    sizes = QUICK if quick else FULL
    result = ScenarioResult(
        "isolation", f"a quiet group of {sizes.quiet_members} beside a busy group of "
                     f"{sizes.busy_members:,} restarting {sizes.churn_fraction:.0%} every "
                     f"{sizes.churn_period_s:.0f} s; join storms",
        columns=["window", "quiet beats", "p50 ms", "p99 ms", "max ms", "quiet expired",
                 "coordinator cores", "waiting for a CPU", "converged s", "STABLE s"])
    with progress.scenario("isolation", steps=7):
        near = neighbours(progress, sizes)
        far = storm(progress, sizes)
    baseline, churn = near["baseline"], near["churn"]
    result.rows.append([f"quiet group alone ({sizes.baseline_s:.0f} s)", baseline["count"],
                        baseline["p50Ms"], baseline["p99Ms"], baseline["maxMs"],
                        baseline["expired"], near["baselineCpu"]["cpuCores"],
                        f"{near['baselineCpu']['runQueueShare']:.0%}", None, None])
    result.rows.append([f"quiet group, busy one churning ({sizes.churn_s:.0f} s)", churn["count"],
                        churn["p50Ms"], churn["p99Ms"], churn["maxMs"], churn["expired"],
                        near["churnCpu"]["cpuCores"], f"{near['churnCpu']['runQueueShare']:.0%}",
                        None, None])
    rolling = near["rolling"]
    result.rows.append([f"quiet group, busy one restarting as a rolling restart "
                        f"({sizes.rolling_steps} steps a period, {sizes.churn_s:.0f} s)",
                        rolling["count"], rolling["p50Ms"], rolling["p99Ms"], rolling["maxMs"],
                        rolling["expired"], near["rollingCpu"]["cpuCores"],
                        f"{near['rollingCpu']['runQueueShare']:.0%}", None, None])
    busy_join = near["busyJoin"]
    result.rows.append([f"join storm {sizes.busy_members:,} (busy group)", None, None, None,
                        None, None, near["stormCpu"]["cpuCores"], None, busy_join["seconds"],
                        busy_join["stableSeconds"]])
    result.rows.append([f"join storm {sizes.storm_members:,} (fresh coordinator)", None, None,
                        None, None, None, far["cpu"]["cpuCores"], None, far["seconds"],
                        far["stableSeconds"]])
    result.data = {**near, "storm": far, "sizes": attrs.asdict(sizes)}
    p99, alone = churn["p99Ms"], baseline["p99Ms"]
    result.target("quiet group's heartbeat p99 under churn", f"<= {P99_TARGET_MS:.0f} ms",
                  "-" if p99 is None else f"{p99:.1f} ms", check(p99, lambda v: v <= P99_TARGET_MS))
    ratio = None if p99 is None or not alone else p99 / alone
    result.target("... against the quiet group alone (same run)", "<= 2x",
                  "-" if ratio is None else f"{ratio:.2f}x ({alone:.1f} ms alone)",
                  check(ratio, lambda v: v <= 2))
    rolling_p99 = rolling["p99Ms"]
    result.target("quiet group's heartbeat p99, the same restarts spread over each period",
                  "(reported)", "-" if rolling_p99 is None else
                  f"{rolling_p99:.1f} ms ({rolling_p99 / alone:.2f}x alone)" if alone else
                  f"{rolling_p99:.1f} ms", None)
    expired = (rolling["expiredTotal"] or 0)
    result.target("quiet members expired (whole run)", "0", str(expired), expired == 0)
    result.target("coordinator CPU, alone / churning", "(reported)",
                  f"{near['baselineCpu']['cpuCores']:.2f} / {near['churnCpu']['cpuCores']:.2f} "
                  "cores", None)
    settled = near["settled"]
    late = [r["seconds"] for r in near["rounds"] if r["seconds"] > sizes.churn_period_s]
    result.target("busy group after the churn: converged, STABLE", "yes",
                  f"{'yes' if settled.get('converged') else 'NO'} "
                  f"({settled.get('seconds', 0):.1f} s after the last restart), "
                  f"{near['busyStateAfter']}",
                  bool(settled.get("converged")) and near["busyStateAfter"] == "STABLE")
    result.target("restart rounds on time (leave + connect + join within the period)",
                  f"{len(near['rounds'])}", f"{len(near['rounds']) - len(late)}", not late)
    for label, joined, members in ((f"join storm {sizes.busy_members:,}", busy_join,
                                    sizes.busy_members),
                                   (f"join storm {sizes.storm_members:,}", far,
                                    sizes.storm_members)):
        stable = joined["stableSeconds"]
        goal = (f"<= {STORM_TARGET_S:.0f} s to STABLE" if members >= 10_000
                else "(reported), STABLE")
        result.target(label, goal, f"converged {joined['seconds']:.1f} s, STABLE "
                                   + ("never" if stable is None else f"{stable:.1f} s"),
                      stable is not None and (stable <= STORM_TARGET_S if members >= 10_000
                                              else True))
    result.notes.append("latency: the quiet load generator's send-to-response time (its own loop "
                        "included); expired: UNKNOWN_MEMBER_ID answers to quiet members that had "
                        "joined; churn: the oldest leave cleanly, then as many new members join, "
                        "once a period, on the clock (no wait for convergence in between); rolling: the same "
                        "restarts in even steps over each period, as a rolling restart comes")
    result.notes.append("waiting for a CPU: the share of the window the coordinator was runnable "
                        "but not running (/proc/PID/schedstat); well above a few per cent, the "
                        "machine, not the coordinator, sets the latencies: measure again quiet")
    result.notes.append(f"heartbeat interval {sizes.heartbeat_ms} ms, lease {sizes.lease_ms} ms; "
                        "join storms: clock from the moment all members join to converged (every "
                        "shard held, nothing pending, every answer OK); STABLE: listGroups asked every "
                        f"{STABLE_POLL_S:.1f} s from then on (members whose target the last "
                        "epoch bumps left alone reach the epoch with the newcomers' catch-up push "
                        "or their next regular heartbeat, H10)")
    return result
