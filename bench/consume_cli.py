"""Scenario `consume-cli`: `rsc consume` run as users run it, two processes sharing a group.

A prefix of 8 shards holds N waiting messages (50,000; 10,000 with --quick), written
before the consumers start. Two `python -m rsc consume PREFIX g --max-messages N/2`
processes are spawned at once, their stdout read line by line (one JSON line per
message, the CLI's contract). Reported:

- messages per second, from the first message line of either process to the last
  line of both (the processes' spawn and exit are outside this clock);
- spawn to first message (import, connecting, joining, the first assignment, the
  first read), the slower of the two processes;
- CPU per message of the consumer processes (user + system, from the kernel's
  accounting of each exited child, start-up included), and the same without the
  start-up: the CPU of `rsc consume PREFIX g --max-messages 1` is measured first and
  taken off.

`python -m bench --only consume-cli --profile-coordinator` also runs the consumers
under cProfile (one .prof file each in --out).
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis
import trio

from bench import procs
from bench.dataplane import _fill, _set_shards
from bench.procs import BenchError, Redis, _child_env, start_coordinator
from bench.report import Progressor, ScenarioResult

SHARDS = 8
PROCESSES = 2
FULL_MESSAGES = 50_000
QUICK_MESSAGES = 10_000
TIMEOUT_S = 180.0


class Consumer:
    """One `rsc consume` process whose stdout lines are counted as they come."""

    def __init__(self, coordinator_url: str, redis_url: str, prefix: str, max_messages: int,
                 profile: str | None) -> None:
        cprofile = ["-m", "cProfile", "-o", profile] if profile else []
        self.argv = [sys.executable, *cprofile, "-m", "rsc", "consume", prefix, "g",
                     "--coordinator", coordinator_url, "--redis-url", redis_url,
                     "--max-messages", str(max_messages)]
        env = _child_env()
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: imports from cached bytecode
        self.spawned = time.perf_counter()
        self.process = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        assert self.process.stdout is not None
        os.set_blocking(self.process.stdout.fileno(), False)
        self.lines = 0
        self.first: float | None = None
        self.last: float | None = None
        self.cpu_seconds: float | None = None
        self._partial = b""

    def read_some(self) -> bool:
        """Count the lines that arrived; False at the end of stdout."""
        assert self.process.stdout is not None
        chunk = self.process.stdout.read(1 << 20)
        if chunk is None:
            return True
        if not chunk:
            return False
        now = time.perf_counter()
        data = self._partial + chunk
        complete = data.count(b"\n")
        self._partial = data[data.rfind(b"\n") + 1:]
        if complete:
            if self.first is None:
                self.first = now
            self.last = now
            self.lines += complete
        return True

    def reap(self) -> int:
        """Wait for the exit; its status, and its CPU from the kernel (os.wait4)."""
        _pid, status, usage = os.wait4(self.process.pid, 0)
        self.process.returncode = os.waitstatus_to_exitcode(status)
        self.cpu_seconds = usage.ru_utime + usage.ru_stime
        return self.process.returncode

    def stderr(self) -> str:
        assert self.process.stderr is not None
        return self.process.stderr.read().decode(errors="replace")[-2000:]

    def kill(self) -> None:
        if self.process.returncode is None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def consume(coordinator_url: str, redis_url: str, prefix: str, per_process: int, count: int,
            profile_dir: str | None) -> dict[str, Any]:
    """`count` consumers of `per_process` messages each, to their exit."""
    consumers = [Consumer(coordinator_url, redis_url, prefix, per_process,
                          os.path.join(profile_dir, f"consume-{prefix}-{index}.prof")
                          if profile_dir else None) for index in range(count)]
    try:
        selector = selectors.DefaultSelector()
        for consumer in consumers:
            assert consumer.process.stdout is not None
            selector.register(consumer.process.stdout, selectors.EVENT_READ, consumer)
        deadline = time.monotonic() + TIMEOUT_S
        open_pipes = len(consumers)
        while open_pipes:
            if time.monotonic() > deadline:
                raise BenchError(f"rsc consume: not done within {TIMEOUT_S:.0f} s "
                                 f"({sum(c.lines for c in consumers)} lines)")
            for key, _events in selector.select(0.5):
                consumer = key.data
                if not consumer.read_some():
                    selector.unregister(key.fileobj)
                    open_pipes -= 1
        for consumer in consumers:
            if consumer.reap() != 0:
                raise BenchError(f"rsc consume exited {consumer.process.returncode}: "
                                 f"{consumer.stderr()}")
    finally:
        for consumer in consumers:
            consumer.kill()
    firsts = [c.first for c in consumers if c.first is not None]
    lasts = [c.last for c in consumers if c.last is not None]
    lines = sum(c.lines for c in consumers)
    return {"lines": lines, "perProcess": [c.lines for c in consumers],
            "seconds": (max(lasts) - min(firsts)) if firsts else None,
            "spawnToFirstS": max((c.first or c.spawned) - c.spawned for c in consumers),
            "cpuSeconds": [c.cpu_seconds for c in consumers],
            # per process: spawn to its first and to its last line, in seconds
            "spans": [[round((c.first or c.spawned) - c.spawned, 3),
                       round((c.last or c.spawned) - c.spawned, 3)] for c in consumers]}


def run(progress: Progressor, quick: bool, out: Path) -> ScenarioResult:
    messages = QUICK_MESSAGES if quick else FULL_MESSAGES
    result = ScenarioResult("consume-cli", "`rsc consume` as users run it: 2 processes, "
                            f"{messages:,} waiting messages on {SHARDS} shards",
                            columns=["case", "messages", "msg/s", "spawn to first s",
                                     "CPU ms/msg", "CPU ms/msg after start-up"])
    redis_server = Redis()
    coordinator = None
    try:
        coordinator = start_coordinator(redis_server.url, heartbeat_interval_ms=1000,
                                        lease_ttl_ms=10000)
        with progress.scenario("consume-cli", steps=2):
            progress.step("start-up: one consumer of one message")
            streams = trio.run(_set_shards, coordinator.url, "cli1", 1)
            client = redis.Redis.from_url(redis_server.url)
            _fill(client, streams, 1)
            startup = consume(coordinator.url, redis_server.url, "cli1", 1, 1, None)
            progress.step(f"{PROCESSES} consumers, {messages:,} messages")
            streams = trio.run(_set_shards, coordinator.url, "peer", SHARDS)
            _fill(client, streams, messages)
            client.close()
            peers = consume(coordinator.url, redis_server.url, "peer", messages // PROCESSES,
                            PROCESSES, procs.PROFILE_DIR)
    finally:
        if coordinator is not None:
            coordinator.stop()
        redis_server.stop()
    if peers["lines"] != messages:
        raise BenchError(f"rsc consume printed {peers['lines']} lines for {messages} messages")
    rate = messages / peers["seconds"]
    cpu = sum(peers["cpuSeconds"])
    startup_cpu = startup["cpuSeconds"][0]
    per_message_ms = 1000 * cpu / messages
    net_ms = 1000 * (cpu - PROCESSES * startup_cpu) / messages
    result.rows.append([f"{PROCESSES} x rsc consume, {SHARDS} shards", messages, rate,
                        peers["spawnToFirstS"], per_message_ms, net_ms])
    result.rows.append(["1 x rsc consume --max-messages 1 (start-up)", 1, None,
                        startup["spawnToFirstS"], 1000 * startup_cpu, None])
    result.data = {"peers": peers, "startup": startup, "messages": messages}
    result.target("rsc consume, 2 processes (round 3: 119.6k)", ">= 119.6k msg/s",
                  f"{rate / 1000:.1f}k msg/s", rate >= 119_600)
    result.target("rsc consume CPU per message, start-up taken off (round 3: 0.02)", "(info)",
                  f"{net_ms:.3f} ms", None)
    result.target("rsc consume spawn to first message (round 3: 0.29 s)", "(info)",
                  f"{peers['spawnToFirstS']:.2f} s", None)
    own = [count / (last - first) for count, (first, last) in zip(peers["perProcess"], peers["spans"],
                                                                  strict=True) if last > first]
    result.target("each process's own rate (its first to its last line)", "(info)",
                  ", ".join(f"{rate / 1000:.1f}k msg/s" for rate in own) or "-", None)
    result.notes.append("msg/s: first message line of either process to the last line of both; "
                        "CPU: user + system of the exited processes (os.wait4), start-up included "
                        "in 'CPU ms/msg'; the consumers import from cached bytecode, as an "
                        "installed package does (with PYTHONDONTWRITEBYTECODE=1 and no cache, "
                        "each process compiles ~7.7 MB of sources first: about 1 s more CPU)")
    return result
