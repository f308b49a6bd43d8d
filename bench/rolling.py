"""Scenario `rolling`: a rolling restart of N members under load, dynamic vs static (S2, S3).

One coordinator child and one redis-server; a producer writes RATE msg/s. For each kind of
member (dynamic, then static with instance ids `pod-i`, each in its own group of the same
prefix), N members run, then each in turn is stopped (drain, then leave: -1 for a dynamic
member, -2 for a static one) and started again as a new member (new memberId, same instance
id), like a Kubernetes rollout. Measured per kind:

- shard moves: shards given during the rollout to a member other than their previous holder (a static member
  that comes back under its instance id is the same holder);
- pushes to the others: assignment or revoke events of members that were not restarting;
- group epochs bumped: group epoch after the rollout minus before;
- longest per-shard processing gap (and the longest restart, from stop to shards back);
- lost messages (must be 0).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import trio

from bench.procs import Redis, start_coordinator
from bench.report import Progressor, ScenarioResult

PREFIX = "rolling"
RATE = 200
BATCH = 10


async def _describe(url: str, group: str) -> Any:
    from rsc.member.session import open_session
    from rsc.protocol import DescribeGroup

    async with open_session(url, "admin") as session:
        return await session.request(DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                                    consumer_group=group))


async def _until_stable(url: str, group: str, members: int, shards: int, timeout: float = 60) -> Any:
    with trio.fail_after(timeout):
        while True:
            described = await _describe(url, group)
            if (str(described.state) == "STABLE" and len(described.members) == members
                    and all(str(m.state) == "STABLE" for m in described.members)
                    and sum(len(m.assigned_shards) for m in described.members) == shards):
                return described
            await trio.sleep(0.05)


async def rollout(url: str, redis_url: str, group: str, *, members: int, shards: int,
                  static: bool) -> dict[str, Any]:
    """Run `members` members of `group`, restart each in turn under load; what it did."""
    from rsc.member.listener import Listener
    from rsc.member.producer import open_producer
    from rsc.member.session import open_session
    from rsc.protocol import SetShardCount

    async with open_session(url, "admin") as session:
        await session.request(SetShardCount(request_id=0, stream_prefix=PREFIX,
                                            consumer_group=group, shard_count=shards))
    seen: set[str] = set()
    produced: set[str] = set()
    shard_times: dict[str, list[float]] = {}
    holder: dict[str, str] = {}  # shard -> who held it last (instance id, else memberId)
    restarting: set[int] = set()
    counts = {"moves": 0, "pushes": 0}
    rolling = False

    def make(slot: int) -> Listener:
        def on_event(member_id: str, event: Any) -> None:
            name = str(event.name)
            who = f"pod-{slot}" if static else member_id
            if name == "assigned":
                for shard in event.shards:
                    if rolling and shard in holder and holder[shard] != who:
                        counts["moves"] += 1
                    holder[shard] = who
            if rolling and slot not in restarting and name in ("assigned", "revoking"):
                counts["pushes"] += 1

        async def handle(message: Any) -> None:
            seen.add(message.value)
            shard_times.setdefault(message.shard, []).append(time.monotonic())

        return Listener(handle, stream_prefix=PREFIX, consumer_group=group, coordinator_url=url,
                        redis_url=redis_url, runtime_max_concurrency=2, on_event=on_event,
                        instance_id=f"pod-{slot}" if static else None)

    restarts: list[float] = []
    finished: dict[int, trio.Event] = {}

    async def run_member(listener: Listener, done: trio.Event,
                         task_status: trio.TaskStatus[Listener] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await listener.run(task_status=task_status)
        finally:
            done.set()

    async with trio.open_nursery() as nursery:
        listeners = [make(slot) for slot in range(members)]
        for listener in listeners:
            finished[id(listener)] = trio.Event()
            await nursery.start(run_member, listener, finished[id(listener)])
        before = await _until_stable(url, group, members, shards)
        producing = trio.CancelScope()

        async def produce() -> None:
            async with open_producer(url, redis_url, PREFIX) as producer:
                sequence = 0
                started = time.monotonic()
                with producing:
                    while True:
                        records = [(f"key-{(sequence + i) % 500}", f"{group}-{sequence + i}")
                                   for i in range(BATCH)]
                        await producer.send_batch(records)
                        produced.update(value for _, value in records)
                        sequence += BATCH
                        await trio.sleep(max(0.0, started + sequence / RATE - time.monotonic()))

        nursery.start_soon(produce)
        await trio.sleep(1.0)
        rolling = True
        rolled_at = time.monotonic()
        for slot in range(members):
            restarting.add(slot)
            stopped = time.monotonic()
            old = listeners[slot]
            old.stop()  # drain, then leave: -1, or -2 for a static member (S2)
            with trio.fail_after(60):
                await finished[id(old)].wait()
            new = make(slot)
            listeners[slot] = new
            finished[id(new)] = trio.Event()
            await nursery.start(run_member, new, finished[id(new)])
            await _until_stable(url, group, members, shards)
            restarts.append(time.monotonic() - stopped)
            restarting.discard(slot)
        rolling = False
        after = await _describe(url, group)
        await trio.sleep(0.5)
        producing.cancel()
        with trio.move_on_after(60):
            while not produced <= seen:
                await trio.sleep(0.1)
        for listener in listeners:
            listener.stop()
    gaps = []
    for times in shard_times.values():
        times.sort()
        gaps.append(max((b - a for a, b in zip(times, times[1:], strict=False) if b >= rolled_at),
                        default=0.0))
    return {"kind": "static" if static else "dynamic", "members": members, "shards": shards,
            "moves": counts["moves"], "pushes": counts["pushes"],
            "epochsBumped": after.group_epoch - before.group_epoch,
            "longestGapMs": max(gaps, default=0.0) * 1000,
            "longestRestartMs": max(restarts, default=0.0) * 1000,
            "produced": len(produced), "lost": len(produced - seen)}


async def _both(url: str, redis_url: str, members: int, shards: int) -> list[dict[str, Any]]:
    return [await rollout(url, redis_url, f"{kind}-group", members=members, shards=shards,
                          static=kind == "static") for kind in ("dynamic", "static")]


def run(progress: Progressor, quick: bool, out: Path) -> ScenarioResult:
    members, shards = (4, 8) if quick else (8, 32)
    result = ScenarioResult("rolling", f"rolling restart of {members} members under "
                            f"{RATE} msg/s, {shards} shards: dynamic vs static",
                            columns=["members", "shard moves", "pushes to others",
                                     "group epochs bumped", "longest shard gap ms",
                                     "longest restart ms", "produced", "lost"])
    redis_server = Redis()
    coordinator = None
    try:
        coordinator = start_coordinator(redis_server.url, heartbeat_interval_ms=200,
                                        lease_ttl_ms=3000, tick_interval_ms=100)
        with progress.scenario("rolling restart", steps=1):
            progress.step("dynamic, then static members")
            measured = trio.run(_both, coordinator.url, redis_server.url, members, shards)
    finally:
        if coordinator is not None:
            coordinator.stop()
        redis_server.stop()
    for row in measured:
        result.rows.append([f"{row['members']} {row['kind']}", row["moves"], row["pushes"],
                            row["epochsBumped"], row["longestGapMs"], row["longestRestartMs"],
                            row["produced"], row["lost"]])
    result.data = {"runs": measured}
    dynamic, static = measured
    result.target("static: shard moves in a rolling restart", "0", str(static["moves"]),
                  static["moves"] == 0)
    result.target("static: pushes to members not restarting", "0", str(static["pushes"]),
                  static["pushes"] == 0)
    result.target("static: group epochs bumped", "0", str(static["epochsBumped"]),
                  static["epochsBumped"] == 0)
    result.target("lost messages (dynamic and static)", "0",
                  f"{dynamic['lost']} / {static['lost']}", dynamic["lost"] == static["lost"] == 0)
    result.target("dynamic: shard moves (as before)", "(reported)", str(dynamic["moves"]), None)
    return result
