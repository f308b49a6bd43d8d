"""Scenario `latency`: from a producer's send to the handler's first step, against plain redis-py.

One redis-server, one coordinator; 4 shards, consumed by 2 members in one child
process (`rsc.member.listener.Listener`, concurrency 2, its default reads) and
written by our producer (`open_producer(...).send_batch`) in another child. In
the same run, on the same Redis: a plain redis-py producer (XADD pipelines) and
2 plain consumer threads in one child process (XREADGROUP BLOCK on 2 streams
each, then XACK), interleaved with ours rate by rate.

Both producers are paced the same way (`Pacer`): every millisecond, the
messages due by then go out as one batch (one `send_batch`, one pipeline),
each carrying `time.time_ns()` taken right before the send; the consumer takes
`time.time_ns()` at the handler's first step (plain: right before it looks at
the entry). Same host, one clock. A warm-up second is sent first and not
counted. The rate reached is the measured messages over the measured window
(a producer that falls behind sends bigger batches; below the rate asked it
could not keep up).

With `min_replicas=` on our producer (K5: WAIT after the write), a row at
10k msg/s with a local replica (`redis-server --replicaof`) is added, against
plain XADD + WAIT 1; when the producer does not take the argument the row is
skipped with a note.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import redis
import trio

from bench.costs import RedisCalls, ThreadHops
from bench.dataplane import _set_shards
from bench.procs import BenchError, CommandChild, Redis, start_coordinator
from bench.report import Progressor, ScenarioResult, fmt

PREFIX = "lat"
GROUP = "g"
SHARDS = 4
MEMBERS = 2
TICK_S = 0.001
READ_COUNT = 100  # the listener's default, on both sides
BLOCK_MS = 200
WAIT_TIMEOUT_MS = 1000  # WAIT numreplicas timeout on the plain side's replica row
MODULE = "bench.latency"


@attrs.frozen
class Sizes:
    rates: tuple[int, ...]
    warmup_s: float
    measure_s: float
    rounds: int
    replica_rate: int | None


FULL = Sizes(rates=(1_000, 10_000, 30_000), warmup_s=1.0, measure_s=4.0, rounds=3, replica_rate=10_000)
QUICK = Sizes(rates=(1_000,), warmup_s=0.5, measure_s=3.0, rounds=1, replica_rate=None)


class Pacer:
    """Which messages are due when: `rate` a second, from `start`, warm-up first (pure)."""

    def __init__(self, rate: int, warmup_s: float, measure_s: float, start: float) -> None:
        self.rate = rate
        self.warmup_s = warmup_s
        self.end_s = warmup_s + measure_s
        self.start = start
        self.sent = 0

    def due(self, now: float) -> tuple[str, int] | None:
        """(phase, count) of the batch to send at `now` ("w" warm-up, "m" measured), None at
        the end; count is 0 while nothing is due yet."""
        elapsed = now - self.start
        if elapsed >= self.end_s:
            return None
        count = int(elapsed * self.rate) + 1 - self.sent
        return ("w" if elapsed < self.warmup_s else "m"), max(0, count)

    def records(self, phase: str, count: int, stamp: str) -> list[tuple[str, str]]:
        first = self.sent
        self.sent += count
        return [(f"{phase}{index % 4096}", stamp) for index in range(first, first + count)]

    def pause(self, now: float) -> float:
        """Seconds until the next message is due (at least one tick from `now`)."""
        next_due = self.start + self.sent / self.rate
        return max(next_due - now, TICK_S)


class Window:
    """The measured window as the producer saw it."""

    def __init__(self) -> None:
        self.sent = 0
        self.first = 0.0
        self.last = 0.0
        self.batches = 0
        self.largest = 0
        self.cpu_start = 0.0
        self.cpu_end = 0.0

    def sent_batch(self, phase: str, count: int, started: float) -> None:
        if phase != "m":
            return
        if not self.sent:
            self.first = started
            self.cpu_start = time.process_time()
        self.sent += count
        self.batches += 1
        self.largest = max(self.largest, count)
        self.last = time.monotonic()
        self.cpu_end = time.process_time()

    def result(self) -> dict[str, Any]:
        seconds = max(self.last - self.first, 1e-9)
        return {"sent": self.sent, "seconds": seconds, "perSecond": self.sent / seconds,
                "batches": self.batches, "largestBatch": self.largest,
                "cpuSeconds": self.cpu_end - self.cpu_start}


# --- producers (children) ----------------------------------------------------------------

def _command(line: str) -> dict[str, Any]:
    if not line:
        return {"cmd": "exit"}
    command: dict[str, Any] = json.loads(line)
    return command


def _answer(payload: dict[str, Any]) -> None:
    print(json.dumps(payload), flush=True)


def produce_plain(options: dict[str, Any]) -> None:
    """XADD pipelines (then WAIT with min_replicas), paced, from this process's one thread;
    one `run` command per measured row."""
    client = redis.Redis.from_url(options["redis_url"], decode_responses=True)
    client.ping()
    streams: list[str] = options["streams"]
    _answer({"ready": True})
    while (command := _command(sys.stdin.readline()))["cmd"] != "exit":
        min_replicas = int(command.get("min_replicas") or 0)
        pacer = Pacer(command["rate"], command["warmup_s"], command["measure_s"], time.monotonic())
        window = Window()
        while (step := pacer.due(time.monotonic())) is not None:
            phase, count = step
            if count:
                started = time.monotonic()
                first = pacer.sent
                records = pacer.records(phase, count, str(time.time_ns()))
                pipe = client.pipeline(transaction=False)
                for offset, (key, stamp) in enumerate(records):
                    pipe.xadd(streams[(first + offset) % len(streams)], {"key": key, "value": stamp})
                pipe.execute()
                while min_replicas and int(client.execute_command(  # K5's shape: WAIT until held
                        "WAIT", min_replicas, WAIT_TIMEOUT_MS)) < min_replicas:
                    pass
                window.sent_batch(phase, count, started)
            time.sleep(pacer.pause(time.monotonic()))
        _answer({**window.result(), "sentInAll": pacer.sent})
    client.close()


def producer_takes_min_replicas() -> bool:
    """Whether our producer has K5's `min_replicas=` (added on another branch)."""
    from rsc.member.producer import open_producer

    return "min_replicas" in inspect.signature(open_producer).parameters


def produce_ours(options: dict[str, Any]) -> None:
    """Our producer (`send_batch`: one pipeline through the seal-checking script), paced; a
    fresh producer per `run` command (its `min_replicas`), opened before the clock starts."""
    from rsc.member.producer import open_producer

    async def run_once(command: dict[str, Any]) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if command.get("min_replicas"):
            extra["min_replicas"] = int(command["min_replicas"])
        async with open_producer(options["url"], options["redis_url"], PREFIX, **extra) as producer:
            await producer.ready()
            await producer.ping()
            pacer = Pacer(command["rate"], command["warmup_s"], command["measure_s"], time.monotonic())
            window = Window()
            send = producer.send_batch
            while (step := pacer.due(time.monotonic())) is not None:
                phase, count = step
                if count:
                    started = time.monotonic()
                    await send(pacer.records(phase, count, str(time.time_ns())))
                    window.sent_batch(phase, count, started)
                await trio.sleep(pacer.pause(time.monotonic()))
            return {**window.result(), "sentInAll": pacer.sent}

    async def main() -> None:
        _answer({"ready": True})
        while (command := _command(await trio.to_thread.run_sync(sys.stdin.readline)))["cmd"] != "exit":
            _answer(await run_once(command))

    trio.run(main)


# --- consumers (children) ----------------------------------------------------------------

class Latencies:
    """Handler-start latencies (ns) of measured messages, and a wait for a count of them."""

    def __init__(self) -> None:
        self.values: list[int] = []
        self.target = 1 << 62
        self.reached: Callable[[], None] = lambda: None
        self.cpu_start = time.process_time()

    def summary(self) -> dict[str, Any]:
        ordered = sorted(self.values)
        count = len(ordered)
        cpu = time.process_time() - self.cpu_start

        def pick(fraction: float) -> float | None:
            return ordered[min(count - 1, int(fraction * count))] / 1e6 if count else None

        summary = {"count": count, "p50Ms": pick(0.5), "p99Ms": pick(0.99), "p999Ms": pick(0.999),
                   "maxMs": ordered[-1] / 1e6 if count else None, "cpuSeconds": cpu}
        self.values.clear()  # in place: the handlers hold this list
        self.cpu_start = time.process_time()
        return summary


def consume_ours(options: dict[str, Any]) -> None:
    """2 members (`Listener`, concurrency 2) in this process; answers `collect` commands."""
    from rsc.member.listener import Listener

    latencies = Latencies()
    streams = sorted(options["streams"])
    measured = latencies.values

    async def handle(message: Any) -> None:
        now = time.time_ns()  # the handler's first step
        if message.key[0] == "m":
            measured.append(now - int(message.value))
            if len(measured) >= latencies.target:
                latencies.reached()

    async def main() -> None:
        settled = trio.Event()
        listener: Any = None

        def on_event(member_id: str, event: Any) -> None:
            if listener is None:
                return
            reading = sorted(shard for member in listener.members for shard in member.state.reading())
            if reading == streams and not any(member.state.revoking() for member in listener.members):
                settled.set()

        listener = Listener(handle, stream_prefix=PREFIX, consumer_group=GROUP,
                            coordinator_url=options["url"], redis_url=options["redis_url"],
                            concurrency=MEMBERS, read_count=READ_COUNT, block_ms=BLOCK_MS,
                            on_event=on_event)
        hops = ThreadHops()
        with hops.counting():
            await serve(listener, settled, hops)

    async def serve(listener: Any, settled: trio.Event, hops: ThreadHops) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(listener.run)
            with trio.fail_after(60):
                await settled.wait()
            _answer({"ready": True})
            while (command := _command(await trio.to_thread.run_sync(sys.stdin.readline)))["cmd"] != "exit":
                reached = trio.Event()
                latencies.target, latencies.reached = command["count"], reached.set
                if len(measured) < command["count"]:
                    with trio.move_on_after(command["wait_s"]):
                        await reached.wait()
                latencies.target = 1 << 62
                counted = hops.take()
                counted.pop("other", None)  # this loop's own stdin reads
                _answer({**latencies.summary(), "threadHops": counted})
            listener.stop()

    trio.run(main)


def consume_plain(options: dict[str, Any]) -> None:
    """2 threads, each XREADGROUP BLOCK on 2 streams then XACK; answers `collect` commands."""
    latencies = Latencies()
    streams: list[str] = options["streams"]
    per = len(streams) // MEMBERS
    stop = threading.Event()
    lock = threading.Lock()
    reached = threading.Event()

    def consume(index: int) -> None:
        client = redis.Redis.from_url(options["redis_url"], decode_responses=True)
        mine: dict[Any, Any] = {stream: ">" for stream in streams[index * per:(index + 1) * per]}
        consumer = f"c{index}"
        measured = latencies.values
        while not stop.is_set():
            reply: Any = client.xreadgroup(GROUP, consumer, mine, count=READ_COUNT, block=BLOCK_MS)
            for stream, entries in reply or []:
                ids = []
                for entry_id, fields in entries:
                    now = time.time_ns()  # a handler's first step
                    if fields["key"][0] == "m":
                        measured.append(now - int(fields["value"]))
                    ids.append(entry_id)
                client.xack(stream, GROUP, *ids)
            with lock:
                if len(measured) >= latencies.target:
                    reached.set()
        client.close()

    threads = [threading.Thread(target=consume, args=(index,), daemon=True) for index in range(MEMBERS)]
    for thread in threads:
        thread.start()
    _answer({"ready": True})
    while (command := _command(sys.stdin.readline()))["cmd"] != "exit":
        with lock:
            reached.clear()
            latencies.target = command["count"]
            if len(latencies.values) >= latencies.target:
                reached.set()
        reached.wait(command["wait_s"])
        with lock:
            latencies.target = 1 << 62
            summary = latencies.summary()
        _answer(summary)
    stop.set()
    for thread in threads:
        thread.join(timeout=2 * BLOCK_MS / 1000 + 1)


# --- the scenario ------------------------------------------------------------------------

class Replica:
    """A local `redis-server --replicaof` of the scenario's Redis, stopped by its pid."""

    def __init__(self, master: Redis) -> None:
        from rsc.common.redis_server import find_redis_server, free_port

        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="rsc-bench-replica-")
        self.process = subprocess.Popen(
            [find_redis_server(), "--port", str(self.port), "--bind", "127.0.0.1",
             "--replicaof", "127.0.0.1", str(master.server.port), "--save", "", "--appendonly", "no",
             "--dir", self.dir, "--logfile", str(Path(self.dir) / "replica.log")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        client = redis.Redis(port=self.port, decode_responses=True, socket_connect_timeout=1)
        deadline = time.monotonic() + 30
        try:
            while True:
                try:
                    if client.info("replication").get("master_link_status") == "up":
                        break
                except redis.ConnectionError:
                    pass
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    raise BenchError("the replica did not sync within 30 s")
                time.sleep(0.05)
        finally:
            client.close()

    def stop(self) -> None:
        import shutil

        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def _measure(producer: CommandChild, consumer: CommandChild, row: dict[str, Any],
             sizes: Sizes, calls: RedisCalls) -> dict[str, Any]:
    before = calls.snapshot()
    produced = producer.call("run", timeout=sizes.warmup_s + sizes.measure_s + 60, **row)
    consumed = consumer.call("collect", timeout=90, count=produced["sent"], wait_s=60)
    if consumed["count"] < produced["sent"]:
        raise BenchError(f"{producer.argv[3]}: consumers handled {consumed['count']} of "
                         f"{produced['sent']} measured messages within 60 s")
    return {"producer": produced, "consumer": consumed,
            "redisCalls": RedisCalls.diff(before, calls.snapshot())}


FIGURES = ("p50Ms", "p99Ms", "p999Ms", "maxMs")
ROUND_TRIPS = ("xreadgroup", "xack")  # a consumer's round trips (our ack script runs one XACK)


def _median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the rounds (a stall of the shared machine hits one round)."""
    def median(values: list[float]) -> float:
        ordered = sorted(values)
        middle = len(ordered) // 2
        return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2

    figures: dict[str, Any] = {name: median([r["consumer"][name] for r in rounds]) for name in FIGURES}
    figures["perSecond"] = median([r["producer"]["perSecond"] for r in rounds])
    in_all = sum(r["producer"]["sentInAll"] for r in rounds)  # warm-up included, as the counts are
    for name in ROUND_TRIPS:
        figures[f"{name}Per1k"] = 1000 * sum(r["redisCalls"].get(name, 0) for r in rounds) / in_all
    hops: dict[str, int] = {}
    for r in rounds:
        for kind, count in r["consumer"].get("threadHops", {}).items():
            hops[kind] = hops.get(kind, 0) + count
    figures["threadHopsPer1k"] = {kind: round(1000 * count / in_all, 1) for kind, count in hops.items()}
    figures["messages"] = sum(r["producer"]["sent"] for r in rounds)
    for who in ("producer", "consumer"):  # CPU ms per 1,000 messages
        figures[f"{who}CpuMsPer1k"] = median([r[who]["cpuSeconds"] * 1e6 / r["producer"]["sent"]
                                              for r in rounds])
    return figures


def run(progress: Progressor, quick: bool, out: Path) -> ScenarioResult:
    sizes = QUICK if quick else FULL
    result = ScenarioResult(
        "latency", "producer send -> handler first step, ours vs plain redis-py (same Redis, same run)",
        columns=["case", "asked msg/s", "reached msg/s", "messages", "p50 ms", "p99 ms", "p99.9 ms",
                 "max ms", "p99 / plain", "producer CPU ms/1k", "consumer CPU ms/1k"])
    with_replica = sizes.replica_rate is not None and producer_takes_min_replicas()
    cases = [(rate, 0) for rate in sizes.rates]
    if with_replica and sizes.replica_rate is not None:
        cases.append((sizes.replica_rate, 1))
    redis_server = Redis()
    calls = RedisCalls(redis_server.url)
    coordinator = None
    children: list[CommandChild] = []
    replica: Replica | None = None
    rounds: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    try:
        coordinator = start_coordinator(redis_server.url, heartbeat_interval_ms=3000, lease_ttl_ms=10000)
        streams = {"ours": trio.run(_set_shards, coordinator.url, PREFIX, SHARDS),
                   "plain": [f"plain:{PREFIX}:{index}" for index in range(SHARDS)]}
        client = redis.Redis.from_url(redis_server.url, decode_responses=True)
        for stream in streams["plain"]:
            client.xgroup_create(stream, GROUP, id="$", mkstream=True)
        client.close()
        base = {"url": coordinator.url, "redis_url": redis_server.url}
        with progress.scenario("latency", steps=1 + 2 * len(cases) * sizes.rounds):
            progress.step("members joining, producers connecting")
            pairs: dict[str, tuple[CommandChild, CommandChild]] = {}
            for side in ("ours", "plain"):
                options = {**base, "streams": streams[side]}
                producer = CommandChild(MODULE, f"produce-{side}", options)
                children.append(producer)
                consumer = CommandChild(MODULE, f"consume-{side}", options)
                children.append(consumer)
                pairs[side] = (producer, consumer)
            for rate, min_replicas in cases:
                if min_replicas and replica is None:
                    replica = Replica(redis_server)
                row = {"rate": rate, "min_replicas": min_replicas, "warmup_s": sizes.warmup_s,
                       "measure_s": sizes.measure_s}
                for round_ in range(sizes.rounds):
                    for side in ("ours", "plain"):  # alternated, so both see the same machine
                        progress.step(f"{side}, {rate:,} msg/s"
                                      + (f", min-replicas {min_replicas}" if min_replicas else "")
                                      + f", round {round_ + 1}")
                        rounds.setdefault((side, rate, min_replicas), []).append(
                            _measure(*pairs[side], row, sizes, calls))
    finally:
        for child in children:
            child.stop()
        if replica is not None:
            replica.stop()
        if coordinator is not None:
            coordinator.stop()
        calls.close()
        redis_server.stop()
    figures = {key: _median_round(value) for key, value in rounds.items()}
    ratios: dict[tuple[int, int], float] = {}
    for rate, min_replicas in cases:
        plain = figures[("plain", rate, min_replicas)]
        for side in ("ours", "plain"):
            row = figures[(side, rate, min_replicas)]
            ratio = row["p99Ms"] / plain["p99Ms"] if side == "ours" else None
            if ratio is not None:
                ratios[(rate, min_replicas)] = ratio
            label = "ours (Listener + producer)" if side == "ours" else "plain redis-py"
            if min_replicas:
                label += f", min-replicas {min_replicas}" if side == "ours" else ", XADD + WAIT 1"
            result.rows.append([label, rate, row["perSecond"], int(row["messages"]), row["p50Ms"],
                                row["p99Ms"], row["p999Ms"], row["maxMs"], ratio,
                                row["producerCpuMsPer1k"], row["consumerCpuMsPer1k"]])
    for rate, min_replicas in cases:
        ours, plain = figures[("ours", rate, min_replicas)], figures[("plain", rate, min_replicas)]
        hops = ", ".join(f"{kind} {count:g}" for kind, count in sorted(ours["threadHopsPer1k"].items()))
        result.notes.append(
            f"{rate:,} msg/s{', min-replicas 1' if min_replicas else ''}, per 1,000 messages: "
            f"XREADGROUP ours {ours['xreadgroupPer1k']:.0f} / plain {plain['xreadgroupPer1k']:.0f}, "
            f"XACK ours {ours['xackPer1k']:.0f} / plain {plain['xackPer1k']:.0f}; our consumer's "
            f"thread hops ({hops}); consumer CPU ms ours {ours['consumerCpuMsPer1k']:.0f} / plain "
            f"{plain['consumerCpuMsPer1k']:.0f}")
    result.data = {"sizes": attrs.asdict(sizes),
                   "figures": {f"{side}:{rate}:{replicas}": value
                               for (side, rate, replicas), value in figures.items()},
                   "rounds": {f"{side}:{rate}:{replicas}": value
                              for (side, rate, replicas), value in rounds.items()},
                   "p99Ratios": {f"{rate}:{replicas}": value for (rate, replicas), value in ratios.items()}}
    if (10_000, 0) in ratios:
        ours, plain = figures[("ours", 10_000, 0)], figures[("plain", 10_000, 0)]
        result.target("end-to-end p99 @10k msg/s vs plain redis-py", "<= 1.5x",
                      f"{ratios[(10_000, 0)]:.2f}x ({fmt(ours['p99Ms'])} vs {fmt(plain['p99Ms'])} ms)",
                      ratios[(10_000, 0)] <= 1.5)
        result.target("end-to-end p99.9 @10k msg/s", "(reported)",
                      f"{fmt(ours['p999Ms'])} ms (plain {fmt(plain['p999Ms'])} ms)", None)
    for rate in sizes.rates:
        if rate != 10_000:
            result.target(f"end-to-end p99 @{rate:,} msg/s vs plain", "(info)",
                          f"{ratios[(rate, 0)]:.2f}x", None)
    top = max(sizes.rates)
    for side in ("ours", "plain"):
        reached = figures[(side, top, 0)]["perSecond"]
        result.target(f"rate reached at {top:,} msg/s asked, {side}", "(reported)",
                      f"{reached:,.0f} msg/s", None)
    if with_replica:
        result.target("K5: p99 @10k msg/s, min-replicas 1 vs plain XADD + WAIT 1", "(info)",
                      f"{ratios[(10_000, 1)]:.2f}x", None)
    elif sizes.replica_rate is not None:
        result.notes.append("min-replicas 1 row skipped: this branch's producer has no min_replicas= "
                            "(K5); it runs once open_producer takes it")
    result.notes.append(f"{SHARDS} shards; ours: 2 members in one process (Listener concurrency 2, "
                        f"read count {READ_COUNT}, block {BLOCK_MS} ms) and our producer in another; "
                        "plain: 2 threads x 2 streams (XREADGROUP BLOCK + XACK) in one process and "
                        "an XADD pipeline producer in another")
    result.notes.append(f"both producers send what is due every {TICK_S * 1000:g} ms as one batch, "
                        f"stamped with time.time_ns() before the send; {sizes.warmup_s:g} s warm-up, "
                        f"{sizes.measure_s:g} s measured; each figure is the median of {sizes.rounds} "
                        "rounds (ours and plain alternated); CPU: each process's own over the window")
    return result


ROLES: dict[str, Callable[[dict[str, Any]], None]] = {
    "produce-plain": produce_plain, "produce-ours": produce_ours,
    "consume-plain": consume_plain, "consume-ours": consume_ours,
}


if __name__ == "__main__":
    ROLES[sys.argv[1]](json.loads(sys.argv[2]))
