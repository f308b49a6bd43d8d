"""Scenario 7: resharding under load, 4 -> 8 shards while producing 5,000 msg/s.

Measures lost messages (must be 0), duplicates and the longest producer stall
(the widest gap between two acknowledged producer writes).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import trio
from trio_websocket import open_websocket_url

from bench.procs import Redis, start_coordinator
from bench.report import Progressor, ScenarioResult

PREFIX = "reshard"
RATE = 5000
BATCH = 50


async def set_shards(url: str, count: int) -> dict[str, Any]:
    async with open_websocket_url(url + "/v1/admin") as websocket:
        await websocket.send_message(json.dumps({
            "type": "setShardCount", "requestId": 1, "streamPrefix": PREFIX, "consumerGroup": "g",
            "shardCount": count}))
        return dict(json.loads(await websocket.get_message()))


async def under_load(coordinator_url: str, redis_url: str, seconds: float) -> dict[str, Any]:
    """Produce at RATE for `seconds` with 4 consumers running; reshard 4 -> 8 a third of the way in."""
    from rsc.member.listener import Listener
    from rsc.member.producer import open_producer

    seen: dict[str, int] = {}
    produced: set[str] = set()
    stall = 0.0

    async def handle(message: Any) -> None:
        seen[message.value] = seen.get(message.value, 0) + 1

    await set_shards(coordinator_url, 4)
    listener = Listener(handle, stream_prefix=PREFIX, consumer_group="g", coordinator_url=coordinator_url,
                        redis_url=redis_url, concurrency=4, runtime_max_concurrency=8)
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        async with open_producer(coordinator_url, redis_url, PREFIX) as producer:
            started = last_ack = time.perf_counter()
            resharded = False
            sequence = 0
            while (now := time.perf_counter()) - started < seconds:
                if not resharded and now - started > seconds / 3:
                    nursery.start_soon(set_shards, coordinator_url, 8)
                    resharded = True
                records = [(f"key-{(sequence + i) % 1000}", str(sequence + i)) for i in range(BATCH)]
                await producer.send_batch(records)
                produced.update(value for _, value in records)
                sequence += BATCH
                acked = time.perf_counter()
                stall = max(stall, acked - last_ack)
                last_ack = acked
                await trio.sleep(max(0.0, started + sequence / RATE - time.perf_counter()))
        with trio.move_on_after(60):
            while not produced <= seen.keys():
                await trio.sleep(0.1)
        listener.stop()
    lost = len(produced - seen.keys())
    duplicates = sum(count - 1 for count in seen.values())
    return {"produced": len(produced), "perSecond": len(produced) / seconds, "lost": lost,
            "duplicates": duplicates, "longestStallMs": stall * 1000}


def run(progress: Progressor, quick: bool, out: Path) -> ScenarioResult:
    result = ScenarioResult("resharding", "4 -> 8 shards while producing 5,000 msg/s",
                            columns=["produced", "msg/s achieved", "lost", "duplicates",
                                     "longest producer stall ms"])
    redis_server = Redis()
    coordinator = None
    try:
        coordinator = start_coordinator(redis_server.url, heartbeat_interval_ms=1000, lease_ttl_ms=10000)
        with progress.scenario("7 resharding", steps=1):
            progress.step("producing and resharding")
            measured = trio.run(under_load, coordinator.url, redis_server.url, 6.0 if quick else 30.0)
    finally:
        if coordinator is not None:
            coordinator.stop()
        redis_server.stop()
    result.rows.append([measured["produced"], measured["perSecond"], measured["lost"], measured["duplicates"],
                        measured["longestStallMs"]])
    result.data = measured
    result.target("lost messages through resharding", "0", str(measured["lost"]), measured["lost"] == 0)
    result.target("producer rate held", f"{RATE:,} msg/s", f"{measured['perSecond']:,.0f} msg/s",
                  measured["perSecond"] >= 0.95 * RATE)
    result.target("duplicates", "(reported)", str(measured["duplicates"]), None)
    result.target("longest producer stall", "(reported)", f"{measured['longestStallMs']:.0f} ms", None)
    return result
