"""Scenario `hosts`: the same messages through the trio host and the asyncio host, one run.

Each host runs one member (`rsc.member.listener` under `trio.run`, `rsc.member.aio`
under `asyncio.run`) with the same worker count, in a fresh child process
(`python -m bench.hosts HOST MODE ...`), against one redis-server and one
coordinator, alternating trio and asyncio rounds. Two handler shapes:

- `io`: each handler awaits a few ms (`trio.sleep` / `asyncio.sleep`), as a handler
  waiting for a reply does;
- `noop`: the handler returns at once (the host's own cost per message).

Per host and shape: msg/s over a backlog (written first, the member joined and
settled behind a gate, the clock from the gate opening to the ack of the last
entry, as in the data-plane scenario), and handler-start latency (p50, p99:
from the XADD to the handler's first line, one monotonic clock, entries written
at a steady rate below capacity by a thread of the child).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import redis
import trio

from bench.dataplane import GATE_KEY, READ_COUNT, _close_gate, _fill, _open_gate, _set_shards
from bench.procs import Redis, start_coordinator
from bench.report import Progressor, ScenarioResult

SHARDS = 4
HOSTS = ("trio", "aio")


@attrs.frozen
class Sizes:
    workers: int = 32
    work_ms: float = 3.0
    io_messages: int = 20_000
    noop_messages: int = 100_000
    latency_seconds: float = 4.0
    io_rate: int = 2_000  # msg/s written in the latency phase (capacity: workers / work)
    noop_rate: int = 5_000
    rounds: int = 3


FULL = Sizes()
QUICK = Sizes(io_messages=2_000, noop_messages=10_000, latency_seconds=1.0, rounds=1)


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


class Probe:
    """What one child's handlers saw: a count, and start latencies in the latency phase."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.acked = 0
        self.finished = 0.0
        self.latencies: list[float] = []
        self.timing = False
        self.on_all_acked: Callable[[], None] = lambda: None
        self.settled = False
        self.on_settled: Callable[[], None] = lambda: None

    def started(self, value: str) -> None:
        """The handler's first line."""
        if self.timing and value != "x" * 64:
            self.latencies.append(time.monotonic() * 1000 - float(value))

    def acked_some(self, member_id: str, count: int) -> None:
        self.acked += count
        if self.acked >= self.expected and not self.finished:
            self.finished = time.monotonic()
            self.on_all_acked()

    def event(self, listener: Any, streams: list[str]) -> None:
        if listener is None or self.settled:
            return
        member = listener.members[0]
        if sorted(member.state.reading()) == sorted(streams) and not member.state.revoking():
            self.settled = True
            self.on_settled()


def _write_paced(redis_url: str, streams: list[str], rate: int, seconds: float) -> int:
    """XADD `rate` entries a second for `seconds`, in 10 ms batches; the value is the
    monotonic ms of the write."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    per_batch = max(1, rate // 100)
    written = 0
    started = time.monotonic()
    batches = int(seconds * 100)
    for batch in range(batches):
        pause = started + batch * 0.01 - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        pipe = client.pipeline(transaction=False)
        stamp = f"{time.monotonic() * 1000:.3f}"
        for _ in range(per_batch):
            pipe.xadd(streams[written % len(streams)], {"key": f"t{written}", "value": stamp})
            written += 1
        pipe.execute()
    client.close()
    return written


def child(host: str, mode: str, options: dict[str, Any]) -> dict[str, Any]:
    """One member of `host` through both phases; its figures as a dict."""
    url, redis_url, streams = options["url"], options["redis_url"], options["streams"]
    work_s = options["work_ms"] / 1000 if mode == "io" else 0.0
    probe = Probe(options["messages"] + len(streams))
    listener: Any = None
    kwargs = dict(stream_prefix=options["prefix"], consumer_group="g", coordinator_url=url,
                  redis_url=redis_url, runtime_max_concurrency=options["workers"],
                  read_count=READ_COUNT, check_store_id=False,
                  on_event=lambda member_id, event: probe.event(listener, streams),
                  ack_observer=probe.acked_some)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    spans: dict[str, float] = {}

    def latency_phase_writes() -> int:
        return _write_paced(redis_url, streams, options["rate"], options["latency_seconds"])

    if host == "trio":
        from rsc.member.listener import Listener

        async def trio_handle(message: Any) -> None:
            probe.started(message.value)
            if work_s and message.key != GATE_KEY:
                await trio.sleep(work_s)

        listener = Listener(trio_handle, **kwargs)  # type: ignore[arg-type]

        async def trio_main() -> None:
            settled, all_acked = trio.Event(), trio.Event()
            probe.on_settled, probe.on_all_acked = settled.set, all_acked.set
            async with trio.open_nursery() as nursery:
                await nursery.start(listener.run)
                with trio.fail_after(60):
                    await settled.wait()
                spans["start"] = time.monotonic()
                await trio.to_thread.run_sync(_open_gate, client, streams)
                with trio.fail_after(600):
                    await all_acked.wait()
                spans["end"] = probe.finished
                all_acked = trio.Event()
                probe.on_all_acked = all_acked.set
                probe.timing = True
                written = await trio.to_thread.run_sync(latency_phase_writes)
                probe.expected += written
                if probe.acked < probe.expected:
                    probe.finished = 0.0
                    with trio.fail_after(60):
                        await all_acked.wait()
                listener.stop()

        trio.run(trio_main)
    else:
        import asyncio

        from rsc.member.aio import AioListener

        async def aio_handle(message: Any) -> None:
            probe.started(message.value)
            if work_s and message.key != GATE_KEY:
                await asyncio.sleep(work_s)

        listener = AioListener(aio_handle, **kwargs)

        async def aio_main() -> None:
            loop = asyncio.get_running_loop()
            settled, all_acked = asyncio.Event(), asyncio.Event()
            probe.on_settled, probe.on_all_acked = settled.set, all_acked.set
            async with listener.running():
                async with asyncio.timeout(60):
                    await settled.wait()
                spans["start"] = time.monotonic()
                await loop.run_in_executor(None, _open_gate, client, streams)
                async with asyncio.timeout(600):
                    await all_acked.wait()
                spans["end"] = probe.finished
                all_acked = asyncio.Event()
                probe.on_all_acked = all_acked.set
                probe.timing = True
                written = await loop.run_in_executor(None, latency_phase_writes)
                probe.expected += written
                if probe.acked < probe.expected:
                    probe.finished = 0.0
                    async with asyncio.timeout(60):
                        await all_acked.wait()

        asyncio.run(aio_main())
    client.close()
    return {"seconds": spans["end"] - spans["start"], "latencies": len(probe.latencies),
            "p50Ms": _percentile(probe.latencies, 0.5), "p99Ms": _percentile(probe.latencies, 0.99)}


def _child_run(host: str, mode: str, options: dict[str, Any], timeout: float) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "bench.hosts", host, mode, json.dumps(options)],
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{host} {mode} child failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(progress: Progressor, quick: bool, out: Path) -> ScenarioResult:
    sizes = QUICK if quick else FULL
    result = ScenarioResult(
        "hosts", "the trio host vs the asyncio host: same messages, same workers, one run",
        columns=["handler", "host", "messages", "msg/s", "aio/trio", "start p50 ms",
                 "start p99 ms"])
    redis_server = Redis()
    coordinator = None
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    try:
        coordinator = start_coordinator(redis_server.url, heartbeat_interval_ms=1000,
                                        lease_ttl_ms=10000)
        steps = 2 * sizes.rounds * len(HOSTS)
        with progress.scenario("hosts", steps=steps):
            for mode in ("io", "noop"):
                messages = sizes.io_messages if mode == "io" else sizes.noop_messages
                for round_ in range(sizes.rounds):
                    for host in HOSTS:
                        progress.step(f"{mode}, {host}, round {round_ + 1}")
                        prefix = f"hosts-{mode}-{host}-{round_}"
                        streams = trio.run(_set_shards, coordinator.url, prefix, SHARDS)
                        client = redis.Redis.from_url(redis_server.url, decode_responses=True)
                        _fill(client, streams, messages)
                        _close_gate(client, streams)
                        client.close()
                        options = {"url": coordinator.url, "redis_url": redis_server.url,
                                   "prefix": prefix, "streams": streams, "messages": messages,
                                   "workers": sizes.workers, "work_ms": sizes.work_ms,
                                   "rate": sizes.io_rate if mode == "io" else sizes.noop_rate,
                                   "latency_seconds": sizes.latency_seconds}
                        figures = _child_run(host, mode, options, timeout=900)
                        figures["perSecond"] = (messages + SHARDS) / figures["seconds"]
                        runs.setdefault((mode, host), []).append(figures)
    finally:
        if coordinator is not None:
            coordinator.stop()
        redis_server.stop()
    summary: dict[str, Any] = {}
    for mode in ("io", "noop"):
        best = {host: max(runs[(mode, host)], key=lambda f: f["perSecond"]) for host in HOSTS}
        ratio = best["aio"]["perSecond"] / best["trio"]["perSecond"]
        messages = sizes.io_messages if mode == "io" else sizes.noop_messages
        shape = f"awaits {sizes.work_ms:g} ms" if mode == "io" else "no-op"
        for host in HOSTS:
            figures = best[host]
            result.rows.append([shape, host, messages, figures["perSecond"],
                                ratio if host == "aio" else None,
                                min(f["p50Ms"] for f in runs[(mode, host)]),
                                min(f["p99Ms"] for f in runs[(mode, host)])])
        summary[mode] = {"ratio": ratio, "runs": {host: runs[(mode, host)] for host in HOSTS}}
        result.target(f"asyncio host vs trio host, handler {shape}",
                      ">= 0.8x" if mode == "io" else "(info)", f"{ratio:.2f}x",
                      ratio >= 0.8 if mode == "io" else None)
    result.data = {"sizes": attrs.asdict(sizes), **summary}
    result.notes.append(f"1 member, {sizes.workers} workers, {SHARDS} shards, read batch "
                        f"{READ_COUNT}; msg/s: best of {sizes.rounds} rounds (trio, then aio, "
                        "alternating), each in a fresh process")
    result.notes.append(f"start latency: XADD to the handler's first line, "
                        f"{sizes.io_rate}/{sizes.noop_rate} msg/s (io/no-op) for "
                        f"{sizes.latency_seconds:g} s after the backlog; best of the rounds (a stall of this "
                        "shared machine only adds)")
    return result


if __name__ == "__main__":
    figures = child(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
    print(json.dumps(figures))
