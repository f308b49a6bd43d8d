"""The cost of `min_replicas=1` (K5) against 0, measured in the same run on the same Redis.

A primary and one replica on loopback (tests/redis_rigs.py `SentinelGroup` without
sentinels), a coordinator process on the primary, one producer per setting in this process.
Each round writes `--messages` messages in batches of `--batch` (one `send_batch` each, the
unit a WAIT covers), with `min_replicas` 0 and 1 alternately, so drift on a shared machine
hits both; it prints messages/s per setting (median over rounds) and their ratio.

    python -m bench.min_replicas [--messages 20000] [--batch 100] [--rounds 5]
    python -m bench.min_replicas --metadata [--messages 20000] [--rounds 5]

`--metadata` measures the coordinator's side instead (`rsc coordinator --min-replicas`):
`--messages / 10` metadata writes of its store per round, 0 and 1 alternately.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import trio

from bench.dataplane import _set_shards
from bench.procs import start_coordinator
from bench.report import Progressor, ScenarioResult
from rsc.member.producer import open_producer
from tests.redis_rigs import SentinelGroup, server_binary


async def one_round(coordinator_url: str, redis_url: str, prefix: str, min_replicas: int,
                    messages: int, batch: int) -> float:
    """Messages per second of one producer writing `messages` in batches of `batch`."""
    async with open_producer(coordinator_url, redis_url, prefix, min_replicas=min_replicas) as producer:
        await producer.send_batch([("warm", "up")])
        started = time.perf_counter()
        for start in range(0, messages, batch):
            await producer.send_batch([(f"k{n}", f"value-{n}") for n in range(start, min(start + batch,
                                                                                       messages))])
        return messages / (time.perf_counter() - started)


async def measure(messages: int, batch: int, rounds: int) -> dict[str, object]:
    with SentinelGroup(sentinels=0, replicas=1, binary=server_binary()) as group:
        redis_url = group.primary_url()
        coordinator = start_coordinator(redis_url)
        try:
            await _set_shards(coordinator.url, "bench", 8)
            rates: dict[int, list[float]] = {0: [], 1: []}
            for _ in range(rounds):
                for setting in (0, 1):
                    rates[setting].append(await one_round(coordinator.url, redis_url, "bench", setting,
                                                          messages, batch))
        finally:
            coordinator.stop()
    median = {setting: statistics.median(values) for setting, values in rates.items()}
    return {"messages": messages, "batch": batch, "rounds": rounds,
            "min_replicas_0_per_s": round(median[0]), "min_replicas_1_per_s": round(median[1]),
            "ratio_1_to_0": round(median[1] / median[0], 3),
            "rounds_per_s": {str(k): [round(v) for v in values] for k, values in rates.items()}}


def metadata_round(redis_url: str, min_replicas: int, writes: int) -> float:
    """Metadata writes per second of the coordinator's store (`rsc coordinator --min-replicas`):
    one group record changed per write, as a heartbeat that moves an epoch does."""
    from rsc.actors.core.records import Changes, GroupRecord
    from rsc.actors.redis_io.store import MetadataStore

    store = MetadataStore(redis_url, lease_ms=10_000, min_replicas=min_replicas,
                          wait_timeout_ms=3000)
    try:
        store.acquire(10_000)
        started = time.perf_counter()
        for n in range(writes):
            changes = Changes()
            changes.groups["g"] = GroupRecord(group_epoch=n + 1, assignment_epoch=n + 1)
            store.write(f"meta-{min_replicas}", changes)
        rate = writes / (time.perf_counter() - started)
        store.release()
        return rate
    finally:
        store.close()


def measure_metadata(writes: int, rounds: int) -> dict[str, object]:
    """The coordinator's metadata writes with `--min-replicas` 1 against 0, alternately, on
    one primary with one replica."""
    with SentinelGroup(sentinels=0, replicas=1, binary=server_binary()) as group:
        redis_url = group.primary_url()
        rates: dict[int, list[float]] = {0: [], 1: []}
        for _ in range(rounds):
            for setting in (0, 1):
                rates[setting].append(metadata_round(redis_url, setting, writes))
    median = {setting: statistics.median(values) for setting, values in rates.items()}
    return {"writes": writes, "rounds": rounds,
            "min_replicas_0_per_s": round(median[0]), "min_replicas_1_per_s": round(median[1]),
            "ratio_1_to_0": round(median[1] / median[0], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--metadata", action="store_true",
                        help="measure the coordinator's metadata writes instead of a producer")
    args = parser.parse_args()
    if args.metadata:
        print(json.dumps(measure_metadata(args.messages // 10, args.rounds)))
        return
    print(json.dumps(trio.run(measure, args.messages, args.batch, args.rounds)))


if __name__ == "__main__":
    main()


def run(progress: Progressor, quick: bool, out: Path) -> ScenarioResult:
    """The `replicas` scenario of `python -m bench`: K5's cost, in the targets table."""
    result = ScenarioResult("replicas", "K5: producer and coordinator throughput, --min-replicas 1 / 0",
                            columns=["messages", "batch", "min-replicas 0 msg/s",
                                     "min-replicas 1 msg/s", "1 / 0"])
    messages, rounds = (4000, 3) if quick else (20000, 5)
    rows = []
    with progress.scenario("replicas", steps=3):
        for batch in (100, 1):
            progress.step(f"batch {batch}")
            count = messages if batch > 1 else messages // 10
            measured = trio.run(measure, count, batch, rounds)
            rows.append(measured)
            result.rows.append([count, batch, measured["min_replicas_0_per_s"],
                                measured["min_replicas_1_per_s"], measured["ratio_1_to_0"]])
        progress.step("coordinator metadata writes")
        metadata = measure_metadata(500 if quick else 2000, rounds)
    result.rows.append([f"{metadata['writes']} metadata writes", 1, metadata["min_replicas_0_per_s"],
                        metadata["min_replicas_1_per_s"], metadata["ratio_1_to_0"]])
    result.data = {"rows": rows, "metadata": metadata}
    for measured in rows:
        result.target(f"--min-replicas 1 / 0, batches of {measured['batch']}", "(reported)",
                      f"{measured['ratio_1_to_0']:.2f}x", None)
    result.target("rsc coordinator --min-replicas 1 / 0, metadata writes", "(reported)",
                  f"{metadata['ratio_1_to_0']:.2f}x", None)
    result.notes.append("a local replica on loopback: WAIT costs one round trip per batch here; "
                        "over a network it costs the replica's replication lag")
    return result
