"""B4: heartbeat latency of unrelated members while one admin session asks for watches past
its cap (100) and reshards the watched prefix.

    python -m bench.watch_flood [--members 20] [--groups 200] [--asks 3000]

Starts a private redis-server and a coordinator (lease 6 s, heartbeat 1 s), then measures the
round trip of heartbeats of `--members` members of another prefix: first alone (baseline),
then while one admin session watches 100 groups, asks `--asks` more times for watches of
others (each refused with SUBSCRIPTION_LIMIT_REACHED) and reshards the watched prefix twice.
Prints p50, p99 and max of each phase, and the refusals counted. Every process it starts is
stopped by its pid.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import trio

from bench.procs import Redis, start_coordinator
from rsc.member.session import Session, open_session
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import JOIN_EPOCH

PREFIX = "watched"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def beat_members(url: str, members: int, stop: trio.Event, rtts: list[float]) -> None:
    async def one(index: int) -> None:
        async with open_session(url, "member") as session:
            answer = await session.request(m.Heartbeat(
                request_id=0, stream_prefix="unrelated", consumer_group="g", member_id=f"u{index}",
                member_epoch=JOIN_EPOCH, owned_shards=()))
            assert isinstance(answer, m.HeartbeatResponse) and answer.member_epoch is not None
            epoch = answer.member_epoch
            while not stop.is_set():
                started = time.perf_counter()
                answer = await session.request(m.Heartbeat(
                    request_id=0, stream_prefix="unrelated", consumer_group="g",
                    member_id=f"u{index}", member_epoch=epoch, owned_shards=None))
                rtts.append(time.perf_counter() - started)
                assert isinstance(answer, m.HeartbeatResponse)
                if answer.status not in (Status.OK, Status.REVOKE_PENDING):
                    raise RuntimeError(f"member u{index}: {answer.status}")
                epoch = answer.member_epoch or epoch
                await trio.sleep(1.0)

    async with trio.open_nursery() as nursery:
        for index in range(members):
            nursery.start_soon(one, index)


async def flood(admin: Session, groups: list[str], asks: int) -> int:
    refused = 0
    for group in groups[:100]:
        await admin.request(m.DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                            consumer_group=group, watch=True))
    extra = groups[100:]
    for n in range(asks):
        answer = await admin.request(m.DescribeGroup(
            request_id=0, stream_prefix=PREFIX, consumer_group=extra[n % len(extra)], watch=True))
        refused += getattr(answer, "status", None) == Status.SUBSCRIPTION_LIMIT_REACHED
    for count in (4, 8):
        await admin.request(m.SetShardCount(request_id=0, stream_prefix=PREFIX,
                                            consumer_group=groups[0], shard_count=count))
        await trio.sleep(3)  # the resharding's pushes to every watch
    return refused


async def run(args: argparse.Namespace, url: str) -> dict[str, object]:
    groups = [f"g{n}" for n in range(args.groups)]
    async with open_session(url, "admin") as admin, open_session(url, "member") as member:
        await admin.request(m.SetShardCount(request_id=0, stream_prefix=PREFIX,
                                            consumer_group=groups[0], shard_count=2))
        for group in groups:
            await member.request(m.Heartbeat(request_id=0, stream_prefix=PREFIX,
                                             consumer_group=group, member_id=f"m-{group}",
                                             member_epoch=JOIN_EPOCH, owned_shards=()))
        result: dict[str, object] = {}
        for phase in ("baseline", "flood"):
            rtts: list[float] = []
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(beat_members, url, args.members, stop, rtts)
                if phase == "baseline":
                    await trio.sleep(args.baseline_s)
                else:
                    result["refused"] = await flood(admin, groups, args.asks)
                stop.set()
            result[phase] = {"beats": len(rtts),
                             "p50_ms": round(statistics.median(rtts) * 1000, 1),
                             "p99_ms": round(percentile(rtts, 0.99) * 1000, 1),
                             "max_ms": round(max(rtts) * 1000, 1)}
        return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", type=int, default=20)
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--asks", type=int, default=3000)
    parser.add_argument("--baseline-s", type=float, default=10.0)
    args = parser.parse_args(argv)
    redis = Redis()
    try:
        coordinator = start_coordinator(redis.url, heartbeat_interval_ms=1000, lease_ttl_ms=6000)
        try:
            print(json.dumps(trio.run(run, args, coordinator.url)))
        finally:
            coordinator.stop()
    finally:
        redis.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
