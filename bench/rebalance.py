"""Scenario `rebalance`: KIP-848's anchor in our terms, a prefix resharded under 10 members.

KIP-848's headline: 10 consumers, 900 partitions added, rebalanced in 5 s with
the new protocol. Here: 10 members (one `Listener`, concurrency 10, in a child
process) consume a prefix of 100 shards with no backlog; then `setShardCount`
to 1,000; then, once that migration is complete, back to 100.

Per step, from the moment the request is sent (`time.time_ns()`, one host):

- the `setShardCount` answer;
- every new shard held (the last `assigned` event of a member naming it);
- every new shard delivered a message: right after the answer the bench's
  producer (`open_producer`, routing by key) writes one message per new shard,
  keys picked with `protocol.routing.shard_for_key` so that each shard gets one;
  the time is the last handler's first step;
- every old shard released (the last `revoked` event naming it), the end of
  the migration as the members see it.

Run at the shipped heartbeat and lease (3 s, 10 s, tick 1 s) and at the test
suite's short timings (200 ms, 1 s, tick 50 ms), each on a fresh Redis and
coordinator.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import redis
import trio
from trio_websocket import open_websocket_url

from bench.costs import ThreadHops
from bench.procs import BenchError, CommandChild, Redis, start_coordinator
from bench.report import Progressor, ScenarioResult
from rsc.protocol.routing import shard_for_key

PREFIX = "rb"
GROUP = "g"
MODULE = "bench.rebalance"
WAIT_S = 120.0


@attrs.frozen
class Timings:
    name: str
    heartbeat_interval_ms: int
    lease_ttl_ms: int
    tick_interval_ms: int


SHIPPED = Timings("shipped (heartbeat 3 s, lease 10 s, tick 1 s)", 3000, 10000, 1000)
SHORT = Timings("short (heartbeat 200 ms, lease 1 s, tick 50 ms)", 200, 1000, 50)


@attrs.frozen
class Sizes:
    members: int
    small: int
    large: int
    timings: tuple[Timings, ...]


FULL = Sizes(members=10, small=100, large=1000, timings=(SHIPPED, SHORT))
QUICK = Sizes(members=10, small=20, large=200, timings=(SHIPPED,))


def keys_for_each_shard(count: int) -> list[str]:
    """One partition key per shard index 0..count-1 (`shard_for_key`), in index order."""
    keys: dict[int, str] = {}
    candidate = 0
    while len(keys) < count:
        key = f"key-{candidate}"
        keys.setdefault(shard_for_key(key, count), key)
        candidate += 1
    return [keys[index] for index in range(count)]


# --- the members (child) ------------------------------------------------------------------

def _complete(streams: list[str], old: list[str], held: dict[str, int], delivered: dict[str, int],
              released: dict[str, int]) -> bool:
    """Every new shard held and delivered, every old one released."""
    return (all(s in held and s in delivered for s in streams)
            and all(s in released for s in old))


def _answer(payload: dict[str, Any]) -> None:
    print(json.dumps(payload), flush=True)


def members(options: dict[str, Any]) -> None:
    """`options["members"]` members of one Listener; answers `expect` commands with the times
    (time.time_ns) at which shards were held, delivered and released."""
    from rsc.member.listener import Listener
    from rsc.member.pure.reconcile import EventName

    held: dict[str, int] = {}  # shard -> when an `assigned` event last named it
    revoking: dict[str, int] = {}  # shard -> when a `revoking` event last named it
    released: dict[str, int] = {}  # shard -> when a `revoked` event last named it
    delivered: dict[str, int] = {}  # shard -> its first message's handler start
    progress = trio.Event()

    def poke() -> None:
        nonlocal progress
        progress.set()
        progress = trio.Event()

    async def handle(message: Any) -> None:
        if message.shard not in delivered:
            delivered[message.shard] = time.time_ns()
            poke()

    def on_event(member_id: str, event: Any) -> None:
        now = time.time_ns()
        if event.name is EventName.ASSIGNED:
            for shard in event.shards:
                held[shard] = now
                released.pop(shard, None)
        elif event.name is EventName.REVOKING:
            for shard in event.shards:
                revoking[shard] = now
        elif event.name is EventName.REVOKED:
            for shard in event.shards:
                released[shard] = now
                held.pop(shard, None)
        poke()

    async def until(condition: Callable[[], bool], wait_s: float) -> bool:
        with trio.move_on_after(wait_s):
            while not condition():
                await progress.wait()
            return True
        return False

    async def main() -> None:
        listener = Listener(handle, stream_prefix=PREFIX, consumer_group=GROUP,
                            coordinator_url=options["url"], redis_url=options["redis_url"],
                            concurrency=options["members"], on_event=on_event)
        first = options["streams"]
        hops = ThreadHops()
        with hops.counting():
            await serve(listener, first, hops)

    async def serve(listener: Any, first: list[str], hops: ThreadHops) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(listener.run)
            share = len(first) // len(listener.members)

            def settled() -> bool:  # every shard read, each member its share, nothing moving
                states = [member.state for member in listener.members]
                reading = [state.reading() for state in states]
                return (sorted(set().union(*reading)) == sorted(first)
                        and all(len(shards) >= share for shards in reading)
                        and not any(state.revoking() for state in states))

            if not await until(settled, 60):
                raise BenchError(f"members hold {sum(s in held for s in first)} of {len(first)} "
                                 "shards, or not evenly, after 60 s")
            _answer({"ready": True})
            hops.take()
            while True:
                line = await trio.to_thread.run_sync(sys.stdin.readline)
                command: dict[str, Any] = json.loads(line) if line else {"cmd": "exit"}
                if command["cmd"] == "exit":
                    break
                streams, old = command["streams"], command["released"]
                done = functools.partial(_complete, streams, old, held, delivered, released)
                if not await until(done, command["wait_s"]):
                    _answer({"error": f"after {command['wait_s']:.0f} s: "
                                      f"{sum(s in held for s in streams)} of {len(streams)} new shards "
                                      f"held, {sum(s in delivered for s in streams)} delivered, "
                                      f"{sum(s in released for s in old)} of {len(old)} old released"})
                    continue
                counted = hops.take()
                _answer({"claims": counted.get("claim", 0), "reads": counted.get("read", 0),
                         "revokingNs": min((revoking[s] for s in old if s in revoking), default=None),
                         "firstHeldNs": min(held[s] for s in streams),
                         "heldNs": max(held[s] for s in streams),
                         "firstDeliveredNs": min(delivered[s] for s in streams),
                         "deliveredNs": max(delivered[s] for s in streams),
                         "releasedNs": max((released[s] for s in old), default=None)})
            listener.stop()

    trio.run(main)


# --- the driver ------------------------------------------------------------------------------

async def _set_shards(url: str, count: int) -> tuple[dict[str, Any], int, int, int]:
    """setShardCount, asked again while the last migration is in progress (R4).

    Returns (answer, when the accepted request was sent, when it was answered, how many
    refusals came first), times in time.time_ns()."""
    refusals = 0
    async with open_websocket_url(url + "/v1/admin") as websocket:
        while True:
            sent = time.time_ns()
            await websocket.send_message(json.dumps({
                "type": "setShardCount", "requestId": refusals, "streamPrefix": PREFIX,
                "consumerGroup": GROUP, "shardCount": count}))
            answer = json.loads(await websocket.get_message())
            answered = time.time_ns()
            if answer.get("status") == "OK":
                return answer, sent, answered, refusals
            if answer.get("status") != "MIGRATION_IN_PROGRESS" or refusals > 10 * WAIT_S:
                raise BenchError(f"setShardCount {count}: {answer}")
            refusals += 1
            await trio.sleep(0.1)


async def _reshard(url: str, redis_url: str, child: CommandChild, old: list[str], count: int
                   ) -> dict[str, Any]:
    """One step: setShardCount, one message per new shard, wait for the members."""
    from rsc.member.producer import open_producer

    async with open_producer(url, redis_url, PREFIX) as producer:
        await producer.ready()
        answer, sent, answered, refusals = await _set_shards(url, count)
        streams: list[str] = answer["routing"]["streams"]
        keys = keys_for_each_shard(len(streams))
        located = await producer.send_batch_located([(key, "x") for key in keys])
        produced = time.time_ns()
    misplaced = sum(stream != streams[index] for index, (stream, _) in enumerate(located))
    if misplaced:
        raise BenchError(f"{misplaced} messages did not land on the shard their key names")
    times = await trio.to_thread.run_sync(
        lambda: child.call("expect", timeout=WAIT_S + 10, streams=streams, released=old,
                           wait_s=WAIT_S))
    seconds = {name: (times[f"{name}Ns"] - sent) / 1e9 if times[f"{name}Ns"] is not None else None
               for name in ("revoking", "firstHeld", "held", "firstDelivered", "delivered", "released")}
    return {"streams": streams, "answerS": (answered - sent) / 1e9, "producedS": (produced - sent) / 1e9,
            "refusalsFirst": refusals, "claims": times["claims"], "reads": times["reads"],
            **{f"{name}S": value for name, value in seconds.items()}}


def _initial(url: str, count: int) -> list[str]:
    answer, *_ = trio.run(_set_shards, url, count)
    return list(answer["routing"]["streams"])


def run_timings(sizes: Sizes, timings: Timings, progress: Progressor) -> dict[str, Any]:
    redis_server = Redis()
    coordinator = None
    child: CommandChild | None = None
    try:
        coordinator = start_coordinator(redis_server.url,
                                        heartbeat_interval_ms=timings.heartbeat_interval_ms,
                                        lease_ttl_ms=timings.lease_ttl_ms,
                                        tick_interval_ms=timings.tick_interval_ms)
        progress.step(f"{timings.name}: {sizes.members} members join {sizes.small} shards")
        first = _initial(coordinator.url, sizes.small)
        child = CommandChild(MODULE, "members", {"url": coordinator.url, "redis_url": redis_server.url,
                                                 "members": sizes.members, "streams": first})
        progress.step(f"{timings.name}: {sizes.small} -> {sizes.large}")
        up = trio.run(_reshard, coordinator.url, redis_server.url, child, first, sizes.large)
        progress.step(f"{timings.name}: {sizes.large} -> {sizes.small}")
        down = trio.run(_reshard, coordinator.url, redis_server.url, child, up["streams"], sizes.small)
        client = redis.Redis.from_url(redis_server.url)
        keys = int(client.dbsize())
        client.close()
    finally:
        if child is not None:
            child.stop()
        if coordinator is not None:
            coordinator.stop()
        redis_server.stop()
    for step in (up, down):
        del step["streams"]
    return {"up": up, "down": down, "redisKeysAtEnd": keys}


def run(progress: Progressor, quick: bool, out: Path) -> ScenarioResult:
    sizes = QUICK if quick else FULL
    result = ScenarioResult(
        "rebalance", f"{sizes.members} members, {sizes.small} -> {sizes.large} -> {sizes.small} shards, "
                     "no backlog (KIP-848's 10 consumers + 900 partitions)",
        columns=["case", "timings", "answer s", "old revoking s", "old released s", "first held s",
                 "all held s", "first delivered s", "all delivered s", "XAUTOCLAIM calls"])
    measured: dict[str, Any] = {}
    with progress.scenario("rebalance", steps=3 * len(sizes.timings)):
        for timings in sizes.timings:
            measured[timings.name] = run_timings(sizes, timings, progress)
    for timings in sizes.timings:
        for step, label in (("up", f"{sizes.small} -> {sizes.large}"),
                            ("down", f"{sizes.large} -> {sizes.small}")):
            figures = measured[timings.name][step]
            result.rows.append([label, timings.name.split(" (")[0], figures["answerS"],
                                figures["revokingS"], figures["releasedS"], figures["firstHeldS"],
                                figures["heldS"], figures["firstDeliveredS"], figures["deliveredS"],
                                figures["claims"]])
    result.data = {"sizes": attrs.asdict(sizes), "measured": measured}
    up = measured[SHIPPED.name]["up"]
    result.target(f"{sizes.small} -> {sizes.large} shards, every new shard held and delivered "
                  "(shipped timings)", "<= 2 s" if not quick else "(quick: info)",
                  f"{up['deliveredS']:.2f} s (answer {up['answerS']:.2f} s)",
                  up["deliveredS"] <= 2.0 if not quick else None)
    down = measured[SHIPPED.name]["down"]
    result.target(f"{sizes.large} -> {sizes.small} shards, every new shard held and delivered "
                  "(shipped timings)", "(reported)",
                  f"{down['deliveredS']:.2f} s (answer {down['answerS']:.2f} s)", None)
    if SHORT.name in measured:
        short = measured[SHORT.name]["up"]
        result.target(f"{sizes.small} -> {sizes.large}, short timings", "(reported)",
                      f"{short['deliveredS']:.2f} s (answer {short['answerS']:.2f} s)", None)
    result.notes.append("times from the setShardCount request; old revoking / released: the first "
                        "`revoking` and the last `revoked` event naming an old shard (a member gets "
                        "its new shards once it has released the old ones); held: the last `assigned` "
                        "event naming a new shard; delivered: one message per new shard, written by "
                        "our producer right after the answer, the last handler start; XAUTOCLAIM "
                        "calls: the members' claim round trips in the step (one thread hop each); the "
                        "next step waits for the migration to be COMPLETE (R4)")
    result.notes.append(f"{sizes.members} members in one child process (Listener concurrency "
                        f"{sizes.members}, default reads); coordinator and Redis fresh per timing")
    return result


if __name__ == "__main__":
    if sys.argv[1] != "members":
        raise SystemExit(f"unknown role {sys.argv[1]!r}")
    members(json.loads(sys.argv[2]))
