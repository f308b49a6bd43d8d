"""Scenario `prefixes`: thousands of idle prefixes beside a little real work.

For each size N: a fresh Redis and coordinator (1 s ticks); N prefixes are
created, one group and one shard each, by pipelined admin `setShardCount`
requests over a few sessions. Measured: the creation time and its rate in the
first and the last tenth; then, once the creations' retention passes are done
(T1: a prefix that changed gets one within ten ticks), the coordinator's RSS
per idle prefix (with its group), its CPU share while idle, the heartbeat
latency of one probe member beating once a second beside the idle prefixes,
and how long `listGroups` over all of them takes.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import trio

from bench.procs import Redis, Sampler, start_coordinator
from bench.report import Progressor, ScenarioResult, check
from rsc.admin.client import open_admin_client
from rsc.member.session import open_session
from rsc.protocol import messages as m
from rsc.protocol.errors import Status

FULL_SIZES = (1000, 10_000, 100_000)
QUICK_SIZES = (500,)
SESSIONS = 4
IN_FLIGHT = 64  # per session
SETTLE_TICKS = 12  # T1: every created prefix's pass is due within ten ticks
IDLE_WINDOW_S = 10.0
PROBE_INTERVAL_S = 1.0

# set from the command line (--prefixes): the sizes to run instead of the preset's
SIZES_OVERRIDE: tuple[int, ...] | None = None


async def create(url: str, count: int) -> list[float]:
    """Create `count` prefixes (one group, one shard each); the completion time of each."""
    done: list[float] = []
    queue = iter(range(count))

    async def lane(session: Any) -> None:
        for index in queue:
            response: Any = await session.request(m.SetShardCount(
                request_id=0, stream_prefix=f"tenant-{index:06d}", consumer_group="g",
                shard_count=1))
            if response.status != Status.OK:
                raise RuntimeError(f"setShardCount tenant-{index:06d}: {response.status} "
                                   f"{getattr(response, 'error', '')}")
            done.append(time.perf_counter())

    async def session_lanes() -> None:
        async with open_session(url, "admin") as session, trio.open_nursery() as lanes:
            for _ in range(IN_FLIGHT):
                lanes.start_soon(lane, session)

    async with trio.open_nursery() as nursery:
        for _ in range(SESSIONS):
            nursery.start_soon(session_lanes)
    return done


def tenth_rates(done: list[float]) -> tuple[float, float]:
    """Creations per second in the first and in the last tenth of them (from the first answer:
    the sessions' handshakes are not creations)."""
    done = sorted(done)
    tenth = max(1, len(done) // 10)
    if len(done) <= tenth:
        return 0.0, 0.0
    first = tenth / max(done[tenth] - done[0], 1e-6)
    last = tenth / max(done[-1] - done[-tenth - 1], 1e-6)
    return first, last


async def probe(url: str, seconds: float) -> list[float]:
    """One member joining a prefix of its own and beating once a second: latency of each beat."""
    latencies: list[float] = []
    async with open_session(url, "member") as session:
        epoch = 0
        owned: tuple[str, ...] | None = ()
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            sent = time.perf_counter()
            response: Any = await session.request(m.Heartbeat(
                request_id=0, stream_prefix="probe", consumer_group="p", member_id="probe-1",
                member_epoch=epoch, capacity=1, owned_shards=owned))
            latencies.append(time.perf_counter() - sent)
            if response.status == Status.OK and response.member_epoch is not None:
                epoch = response.member_epoch
                owned = None if response.assignment is None else tuple(
                    response.assignment.assigned_shards)
            await trio.sleep(max(0.0, sent + PROBE_INTERVAL_S - time.perf_counter()))
    return latencies[1:]  # the join is not a steady beat


async def list_groups(url: str) -> tuple[float, int]:
    """listGroups' answer over 10,000 groups passes 1 MiB: the admin client takes it."""
    async with open_admin_client(url) as admin:
        started = time.perf_counter()
        groups = await admin.list_groups()
        return time.perf_counter() - started, len(groups.groups)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def object_bytes(count: int = 2000) -> dict[str, float]:
    """Python heap per idle prefix actor without a group, and per group added (tracemalloc,
    in this process: the actor, its machine, its empty mailbox, after one durable batch)."""
    import gc
    import tracemalloc

    from rsc.actors.actor import PrefixActor
    from rsc.actors.core.group import GroupSettings
    from rsc.actors.redis_io.store import MetadataStore

    store = MetadataStore("redis://127.0.0.1:1", lease_ms=3000)  # never connects
    settings = GroupSettings(heartbeat_interval_ms=3000, lease_ttl_ms=30000,
                             revoke_timeout_ms=60000)

    async def build(group: str | None) -> float:
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        actors = []
        for index in range(count):
            actor = PrefixActor(f"p{index}", store, settings)
            actor.machine.handle(m.SetShardCount(request_id=1, stream_prefix=f"p{index}",
                                                 consumer_group=group, shard_count=1), 0)
            actor.machine.committed(actor.machine.checkpoint())
            actors.append(actor)
        gc.collect()
        used = (tracemalloc.get_traced_memory()[0] - before) / count
        tracemalloc.stop()
        del actors
        return used

    async def both() -> dict[str, float]:
        bare = await build(None)
        return {"bytesPerPrefix": bare, "bytesPerGroup": await build("g") - bare}

    try:
        return trio.run(both)
    finally:
        store.close()


def measure(progress: Progressor, count: int) -> dict[str, Any]:
    redis = Redis()
    coordinator = None
    try:
        coordinator = start_coordinator(redis.url, lease_ttl_ms=30000,
                                        extra=["--max-groups", str(count + 10)])
        url = coordinator.url
        rss_before = coordinator.rss_mb()
        progress.step(f"{count:,}: creating")
        started, cpu_before = time.perf_counter(), coordinator.cpu_seconds()
        done = trio.run(create, url, count)
        elapsed = time.perf_counter() - started
        create_cpu = coordinator.cpu_seconds() - cpu_before
        first, last = tenth_rates(done)
        progress.step(f"{count:,}: settling ({SETTLE_TICKS} ticks)")
        time.sleep(SETTLE_TICKS)  # the bench waits out the creations' T1 passes (ticks of 1 s)
        progress.step(f"{count:,}: idle window with a probe member")
        sampler = Sampler(coordinator=coordinator)
        latencies = trio.run(probe, url, IDLE_WINDOW_S)
        idle = sampler.result()["coordinator"]
        rss_after = coordinator.rss_mb()
        progress.step(f"{count:,}: listGroups")
        cpu_before = coordinator.cpu_seconds()
        list_s, listed = trio.run(list_groups, url)
        list_cpu = coordinator.cpu_seconds() - cpu_before
        return {
            "prefixes": count, "createSeconds": elapsed,
            # the coordinator's CPU (user + system): what a loaded machine does not hide
            "createCpuMsPerPrefix": 1000 * create_cpu / count, "listGroupsCpuSeconds": list_cpu,
            "firstTenthPerSecond": first,
            "lastTenthPerSecond": last, "rssBeforeMb": rss_before, "rssAfterMb": rss_after,
            "bytesPerIdlePrefix": (rss_after - rss_before) * 2**20 / count,
            "idleCpuCores": idle["cpuCores"],
            "probeP50Ms": (statistics.median(latencies) * 1000) if latencies else None,
            "probeP99Ms": (p99 * 1000) if (p99 := percentile(latencies, 0.99)) is not None else None,
            "probeBeats": len(latencies), "listGroupsSeconds": list_s, "listedGroups": listed,
        }
    finally:
        if coordinator is not None:
            coordinator.stop()
        redis.stop()


def run(progress: Progressor, quick: bool, out: Path) -> ScenarioResult:
    sizes = SIZES_OVERRIDE or (QUICK_SIZES if quick else FULL_SIZES)
    result = ScenarioResult(
        "prefixes", "idle prefixes: creation, memory, idle CPU, a probe member, listGroups",
        columns=["prefixes", "create s", "first 1/10 /s", "last 1/10 /s", "KB / idle prefix",
                 "RSS MB", "idle cores", "probe p50 ms", "probe p99 ms", "listGroups s",
                 "create CPU ms/prefix", "listGroups CPU s"])
    rows = []
    with progress.scenario("prefixes", steps=4 * len(sizes)):
        for count in sizes:
            row = measure(progress, count)
            rows.append(row)
            result.rows.append([row["prefixes"], row["createSeconds"], row["firstTenthPerSecond"],
                                row["lastTenthPerSecond"], row["bytesPerIdlePrefix"] / 1024,
                                row["rssAfterMb"], row["idleCpuCores"], row["probeP50Ms"],
                                row["probeP99Ms"], row["listGroupsSeconds"],
                                row["createCpuMsPerPrefix"], row["listGroupsCpuSeconds"]])
    heap = object_bytes()
    result.data = {"sizes": rows, "sessions": SESSIONS, "inFlightPerSession": IN_FLIGHT,
                   "heap": heap}
    result.target("Python heap per idle prefix, no group", "(reported)",
                  f"{heap['bytesPerPrefix'] / 1024:.1f} KB", None)
    result.target("Python heap per group of an idle prefix", "(reported)",
                  f"{heap['bytesPerGroup'] / 1024:.1f} KB", None)
    for row in rows:
        n = f"{row['prefixes']:,}"
        if row["prefixes"] == 10_000 or row is rows[-1]:
            result.target(f"{n} prefixes created (round 3: 10.0 s)",
                          "<= 12 s" if row["prefixes"] == 10_000 else "(reported)",
                          f"{row['createSeconds']:.1f} s",
                          check(row["createSeconds"], lambda v: v <= 12)
                          if row["prefixes"] == 10_000 else None)
            result.target(f"{n}: coordinator CPU per created prefix", "(reported)",
                          f"{row['createCpuMsPerPrefix']:.2f} ms", None)
            result.target(f"{n}: last tenth's creation rate", ">= half the first's",
                          f"{row['lastTenthPerSecond']:,.0f}/s vs {row['firstTenthPerSecond']:,.0f}/s",
                          row["lastTenthPerSecond"] >= row["firstTenthPerSecond"] / 2)
            result.target(f"{n}: coordinator idle", "<= 5 % of a core",
                          f"{row['idleCpuCores'] * 100:.1f} %", row["idleCpuCores"] <= 0.05)
            result.target(f"{n}: probe heartbeat p99", "<= 50 ms",
                          "-" if row["probeP99Ms"] is None else f"{row['probeP99Ms']:.1f} ms",
                          check(row["probeP99Ms"], lambda v: v <= 50))
            at_target = row["prefixes"] == 10_000  # the goal is set for 10,000 prefixes
            result.target(f"{n}: listGroups (round 3: 0.64 s)",
                          "<= 0.7 s" if at_target else "(reported)",
                          f"{row['listGroupsSeconds']:.2f} s (coordinator CPU "
                          f"{row['listGroupsCpuSeconds']:.2f} s)",
                          row["listGroupsSeconds"] <= 0.7 if at_target else None)
        result.target(f"{n}: memory per idle prefix (one group)", "(reported)",
                      f"{row['bytesPerIdlePrefix'] / 1024:.1f} KB (RSS {row['rssAfterMb']:.0f} MB)",
                      None)
    result.notes.append(f"{SESSIONS} admin sessions x {IN_FLIGHT} requests in flight; ticks of 1 s; "
                        f"idle window {IDLE_WINDOW_S:.0f} s after {SETTLE_TICKS} ticks of settling")
    return result
