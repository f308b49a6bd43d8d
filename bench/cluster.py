"""Scenario 8: the data plane on Redis Cluster, 1 master against 3 masters, in one run.

- aggregate consume throughput: the same shards (12) and the same messages,
  consumed by member processes (separate OS processes, one member each, no-op
  handler), on a 1-master cluster and on a 3-master cluster: messages/s and
  the speed-up ratio. Both are clusters, so the member's code path is the same
  (one XREADGROUP per shard, pipelined per node); only the number of masters
  differs. Timed as scenario 6: messages are written first, the members join
  and settle behind a gate (the group's last-delivered id past every entry),
  the clock runs from the gate opening to the last ack (each member process
  reports the wall time of its acks);
- resharding 4 -> 8 on the 3-master cluster while producing (scenario 7's
  load): lost messages must be 0.

`python -m bench.cluster member ...` is the member process (used by the scenario).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import redis
import trio
from redis.crc import key_slot

from bench.procs import BenchError, Child, Redis, _drain_stderr_forever, start_coordinator
from bench.report import Progressor, ScenarioResult
from rsc.common.redis_connect import connect
from rsc.protocol.routing import stream_key
from tests.redis_rigs import SLOTS, LocalCluster

GROUP, SHARDS, ROUNDS = "g", 12, 2
GATE_KEY = "gate"
READ_COUNT = 500


def balanced_prefix(masters: int = 3) -> str:
    """A prefix whose SHARDS version-1 streams fall evenly on `masters` masters that split
    the slots evenly (as LocalCluster does): the speed-up is then not capped by one master
    holding more shards (with other names the layout is whatever CRC16 gives)."""
    per = SLOTS // masters
    for n in range(10_000):
        prefix = f"bcluster{n}"
        counts = [0] * masters
        for index in range(SHARDS):
            counts[min(key_slot(stream_key(prefix, 1, index).encode()) // per, masters - 1)] += 1
        if len(set(counts)) == 1:
            return prefix
    raise RuntimeError("no balanced prefix found")


PREFIX = balanced_prefix()

# --- the member process ------------------------------------------------------------------

async def _member_main(coordinator_url: str, redis_url: str, members: int, workers: int) -> None:
    """Run `members` members; print {"acked": n, "at": wall time of the last ack} as acks land."""
    from rsc.member.listener import Listener

    acked, last_at, printed = 0, 0.0, -1

    async def handle(message: Any) -> None:
        return None

    def on_acked(member_id: str, count: int) -> None:
        nonlocal acked, last_at
        acked += count
        last_at = time.time()

    listener = Listener(handle, stream_prefix=PREFIX, consumer_group=GROUP,
                        coordinator_url=coordinator_url, redis_url=redis_url, concurrency=members,
                        runtime_max_concurrency=workers, read_count=READ_COUNT, ack_observer=on_acked)
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        print(json.dumps({"ready": [m.config.member_id for m in listener.members]}), flush=True)

        async def stop_on_stdin() -> None:
            await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
            listener.stop()
            nursery.cancel_scope.cancel()

        nursery.start_soon(stop_on_stdin)
        while True:
            if acked != printed:
                print(json.dumps({"acked": acked, "at": last_at}), flush=True)
                printed = acked
            await trio.sleep(0.05)


class MemberProcess(Child):
    def __init__(self, coordinator_url: str, redis_url: str, workers: int) -> None:
        super().__init__([sys.executable, "-m", "bench.cluster", "member", coordinator_url, redis_url,
                          "--workers", str(workers)], stdin=True)
        _drain_stderr_forever(self)
        self.acked, self.last_at = 0, 0.0
        ready = json.loads(self.readline(60))
        self.member_ids = ready["ready"]

    def poll(self) -> None:
        """Take in every report printed so far."""
        while True:
            if self.process.poll() is not None:
                raise BenchError(f"member process exited ({self.process.returncode}): "
                                 f"{self.stderr_tail()}")
            try:
                line = self.readline(0.005)
            except BenchError:  # no complete line yet
                return
            report = json.loads(line)
            self.acked, self.last_at = report["acked"], report["at"]

    def stderr_tail(self) -> str:
        return self._stderr_tail.decode(errors="replace")


# --- the scenario --------------------------------------------------------------------------

async def _admin(url: str, request: Any) -> Any:
    from rsc.member.session import open_session

    async with open_session(url, "admin") as session:
        return await session.request(request)


def set_shards(url: str, count: int) -> list[str]:
    from rsc.protocol import messages as m

    reply = trio.run(_admin, url, m.SetShardCount(request_id=0, stream_prefix=PREFIX, consumer_group=GROUP,
                                                 shard_count=count))
    if reply.status != "OK" or reply.routing is None:
        raise RuntimeError(f"setShardCount: {reply}")
    return list(reply.routing.streams)


def settled(url: str, members: int) -> bool:
    from rsc.protocol import messages as m

    described = trio.run(_admin, url, m.DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                                      consumer_group=GROUP))
    rows = getattr(described, "members", ())
    return (len(rows) == members and sum(len(r.assigned_shards) for r in rows) == SHARDS
            and all(r.state == "STABLE" and not r.revoking_shards and not r.pending_shards for r in rows))


def consume_throughput(server: LocalCluster | Redis, processes: int, workers: int, messages: int
                       ) -> dict[str, Any]:
    """Fill the shards, settle `processes` member processes behind the gate, time the drain."""
    coordinator = start_coordinator(server.url, heartbeat_interval_ms=1000, lease_ttl_ms=10000)
    members: list[MemberProcess] = []
    client: Any = connect(server.url, decode_responses=True)
    try:
        streams = set_shards(coordinator.url, SHARDS)
        pipe = client.pipeline(transaction=False)
        for index in range(messages):
            pipe.xadd(streams[index % SHARDS], {"key": f"k{index}", "value": "x" * 64})
            if index % 2000 == 1999:
                pipe.execute()
        pipe.execute()
        pipe = client.pipeline(transaction=False)
        for stream in streams:  # the gate: nothing deliverable while the members settle
            pipe.xgroup_setid(stream, GROUP, "$")
        pipe.execute()
        members = [MemberProcess(coordinator.url, server.url, workers) for _ in range(processes)]
        deadline = time.monotonic() + 60
        while not settled(coordinator.url, processes):
            if time.monotonic() > deadline:
                raise RuntimeError("members did not settle in 60 s")
            time.sleep(0.1)
        expected = messages + SHARDS  # plus one gate entry per shard
        started = time.time()
        pipe = client.pipeline(transaction=False)
        for stream in streams:
            pipe.xgroup_setid(stream, GROUP, "0")
            pipe.xadd(stream, {"key": GATE_KEY, "value": "0"})
        pipe.execute()
        deadline = time.monotonic() + 300
        while sum(member.acked for member in members) < expected:
            if time.monotonic() > deadline:
                raise RuntimeError(f"acked {sum(m.acked for m in members)} of {expected} in 300 s")
            time.sleep(0.05)
            for member in members:
                member.poll()
        finished = max(member.last_at for member in members)
        pending = sum(int(client.xpending(stream, GROUP)["pending"]) for stream in streams)
        per_node = ({node.port: sum(1 for s in streams if server.node_of(s) is node)
                     for node in server.masters()} if isinstance(server, LocalCluster)
                    else {0: len(streams)})
    finally:
        for member in members:
            member.stop()
        coordinator.stop()
        client.close()
    seconds = finished - started
    return {"seconds": seconds, "perSecond": expected / seconds, "pending": pending,
            "shardsPerMaster": sorted(per_node.values())}


def run(progress: Progressor, quick: bool, out: Path) -> ScenarioResult:
    from bench import resharding

    messages = 60_000 if quick else 300_000
    processes, workers = 3, 8
    result = ScenarioResult("cluster", "Redis Cluster: 1 master vs 3 masters, resharding on 3 masters",
                            columns=["case", "messages", "msg/s", "seconds", "shards per master",
                                     "pending after"])
    runs: dict[str, list[dict[str, Any]]] = {"plain": [], "one": [], "three": []}
    plain_server = Redis()
    try:
        with progress.scenario("8 cluster", steps=3 * ROUNDS + 1), \
                LocalCluster(masters=1) as one, LocalCluster(masters=3) as three:
            servers: dict[str, LocalCluster | Redis] = {"plain": plain_server, "one": one, "three": three}
            for round_ in range(ROUNDS):  # alternated, best of each: the machine is shared and noisy
                for name, server in servers.items():
                    progress.step(f"round {round_ + 1}: {name}, consume")
                    if isinstance(server, LocalCluster):
                        server.flush()
                    else:
                        with redis.Redis.from_url(server.url) as plain_client:
                            plain_client.flushall()
                    runs[name].append(consume_throughput(server, processes, workers, messages))
            progress.step("3 masters: reshard 4 -> 8 under load")
            three.flush()
            coordinator = start_coordinator(three.url, heartbeat_interval_ms=1000, lease_ttl_ms=10000)
            try:
                reshard = trio.run(resharding.under_load, coordinator.url, three.url,
                                   6.0 if quick else 30.0)
            finally:
                coordinator.stop()
    finally:
        plain_server.stop()
    plain = max(runs["plain"], key=lambda run: run["perSecond"])
    single = max(runs["one"], key=lambda run: run["perSecond"])
    triple = max(runs["three"], key=lambda run: run["perSecond"])
    ratio = triple["perSecond"] / single["perSecond"]
    shards_text = lambda run: "/".join(map(str, run["shardsPerMaster"]))  # noqa: E731
    result.rows += [
        [f"1 master, {processes} member processes", messages, single["perSecond"], single["seconds"],
         shards_text(single), single["pending"]],
        [f"3 masters, {processes} member processes", messages, triple["perSecond"], triple["seconds"],
         shards_text(triple), triple["pending"]],
        [f"plain redis-server, {processes} member processes (info)", messages, plain["perSecond"],
         plain["seconds"], shards_text(plain), plain["pending"]],
        ["3 masters, reshard 4 -> 8 while producing", reshard["produced"], reshard["perSecond"], None,
         None, None],
    ]
    result.data = {"oneMaster": single, "threeMasters": triple, "plainServer": plain, "rounds": runs,
                   "reshard": reshard, "speedUp": ratio, "prefix": PREFIX}
    result.target("cluster consume speed-up, 3 masters vs 1", "(reported)", f"{ratio:.2f}x", None)
    result.target("lost messages through resharding on the cluster", "0", str(reshard["lost"]),
                  reshard["lost"] == 0)
    result.target("pending after the cluster drains", "0", str(single["pending"] + triple["pending"]),
                  single["pending"] + triple["pending"] == 0)
    result.target("1-master cluster vs plain redis-server (cluster-mode cost)", "(reported)",
                  f"{single['perSecond'] / plain['perSecond']:.2f}x", None)
    result.notes.append(f"{SHARDS} shards, {processes} member processes x 1 member x {workers} workers, "
                        f"no-op handler, read batch {READ_COUNT}; every server, member and the "
                        "coordinator share this machine's cores")
    result.notes.append(f"best of {ROUNDS} alternated rounds per layout; all rounds (msg/s): "
                        + "; ".join(f"{name} " + ", ".join(f"{r['perSecond']:,.0f}" for r in done)
                                    for name, done in runs.items()))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster")
    sub = parser.add_subparsers(dest="command", required=True)
    member = sub.add_parser("member", help="one member process of the scenario")
    member.add_argument("coordinator_url")
    member.add_argument("redis_url")
    member.add_argument("--members", type=int, default=1)
    member.add_argument("--workers", type=int, default=8)
    args = parser.parse_args(argv)
    trio.run(_member_main, args.coordinator_url, args.redis_url, args.members, args.workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
