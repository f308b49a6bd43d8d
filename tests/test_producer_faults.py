"""D2: `rsc produce` never drops a line it accepted, with faults injected into real processes.

Each test feeds a real `rsc produce` through its stdin while a real coordinator
(a child process, SIGKILLed and restarted on the same port) or a real
redis-server (SIGSTOPped, or SIGKILLed and restarted on its AOF) fails under
it; at EOF the producer must exit 0 and every line fed must be in some shard
stream of some routing version (the coordinators keep drained streams, so
nothing is counted twice or missed through a reshard). Lost must be 0;
duplicates (a write retried after a timeout that had landed) are reported.

Set RSC_FAULTS_OUT=path to append one JSON row per scenario (the README table).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
import trio

from rsc.common.redis_server import find_redis_server, free_port
from tests.processes import ROOT
from tests.test_console_failures import Tool, tool_env
from tests.test_member_support import set_shards

pytestmark = pytest.mark.faults  # the fault step of .ci/run: python -m pytest -q -m faults

PREFIX = "faults"
GROUP = "billing"


class CoordinatorProcess:
    """`rsc coordinator` as a child process on a fixed port, so it can come back there."""

    def __init__(self, redis_url: str, *, lease_ttl_ms: int = 3000) -> None:
        self.redis_url = redis_url
        self.port = free_port()
        self.url = f"ws://127.0.0.1:{self.port}"
        self.lease_ttl_ms = lease_ttl_ms
        self.process: trio.Process | None = None

    async def start(self) -> None:
        self.process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "rsc", "coordinator", "--redis-url", self.redis_url,
             "--port", str(self.port), "--tick-interval-ms", "50",
             "--lease-ttl-ms", str(self.lease_ttl_ms), "--heartbeat-interval-ms", "200",
             "--keep-drained-streams"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT, env=tool_env())
        output = b""
        stdout = self.process.stdout
        assert stdout is not None
        with trio.fail_after(20):
            while b"listening on " not in output or not output.endswith(b"\n"):
                chunk = await stdout.receive_some(4096)
                assert chunk, f"coordinator exited early: {output!r}"
                output += chunk

    async def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        with trio.fail_after(10):
            await self.process.wait()

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)
            with trio.fail_after(10):
                await self.process.wait()


class RedisProcess:
    """A redis-server of the test's own (not the session fixture's), on a fixed port."""

    def __init__(self, *, aof: bool = False) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.dir = tempfile.mkdtemp(prefix="rsc-faults-redis-")
        self.aof = aof
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        persistence = (["--appendonly", "yes", "--appendfsync", "always"] if self.aof
                       else ["--appendonly", "no"])
        self.process = subprocess.Popen(
            [find_redis_server(), "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", *persistence, "--dir", self.dir],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if redis.Redis(port=self.port, socket_timeout=0.5).ping():
                    return
            except redis.RedisError:
                time.sleep(0.05)  # a child starting up: polled, bounded
        raise AssertionError(f"redis-server did not come up on {self.port}")

    def signal(self, signum: int) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signum)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.kill()
            self.process.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


class Feeder:
    """Writes numbered lines `k<n mod 97>\\t<n>` into the producer's stdin."""

    def __init__(self, tool: Tool) -> None:
        self.tool = tool
        self.fed = 0

    async def feed(self, count: int) -> None:
        data = b"".join(b"k%d\t%d\n" % (n % 97, n) for n in range(self.fed, self.fed + count))
        await self._stdin().send_all(data)
        self.fed += count

    async def feed_for(self, seconds: float, per_second: int = 500) -> None:
        deadline = trio.current_time() + seconds
        while trio.current_time() < deadline:
            await self.feed(per_second // 20)
            await trio.sleep(0.05)

    async def close(self) -> None:
        await self._stdin().aclose()

    def _stdin(self) -> trio.abc.SendStream:
        assert self.tool.process.stdin is not None
        return self.tool.process.stdin


def stored_values(redis_url: str) -> list[str]:
    """Every value in every shard stream of every routing version of PREFIX."""
    client: Any = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        values: list[str] = []
        for key in client.scan_iter(match=f"{{{PREFIX}:v*", _type="stream"):
            values += [fields["value"] for _, fields in client.xrange(key)]
        return values
    finally:
        client.close()


async def wait_until(condition: Callable[[], bool], timeout: float = 30) -> None:
    with trio.fail_after(timeout):
        while not condition():
            await trio.sleep(0.05)


def report(fault: str, produced: int, values: list[str], summary: str) -> tuple[int, int]:
    """Lost and duplicate counts; one row for the README's Faults table."""
    unique = set(values)
    lost = sum(1 for n in range(produced) if str(n) not in unique)
    duplicates = len(values) - len(unique)
    row = {"fault": fault, "produced": produced, "lost": lost, "duplicates": duplicates,
           "summary": summary}
    print(json.dumps(row))
    out = os.environ.get("RSC_FAULTS_OUT")
    if out:
        with Path(out).open("a") as file:
            file.write(json.dumps(row) + "\n")
    return lost, duplicates


@pytest.fixture
async def cleanup():
    """Processes of a test, stopped by pid at its end whatever happened."""
    coordinators: list[CoordinatorProcess] = []
    servers: list[RedisProcess] = []
    tools: list[Tool] = []
    yield coordinators, servers, tools
    for tool in tools:
        tool.kill()
        with trio.move_on_after(10):
            await tool.process.wait()
    for coordinator in coordinators:
        await coordinator.stop()
    for server in servers:
        server.stop()


async def start_producer(url: str, redis_url: str, tools: list[Tool]) -> tuple[Tool, Feeder]:
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "rsc", "produce", PREFIX, "--coordinator", url,
         "--redis-url", redis_url],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT,
        env=tool_env())
    tool = Tool(process)
    tools.append(tool)
    return tool, Feeder(tool)


async def finish(tool: Tool, feeder: Feeder, fault: str, redis_url: str) -> None:
    await feeder.close()
    code = await tool.finish(timeout=90)
    summary = tool.lines[-1] if tool.lines else ""
    assert code == 0, tool.lines
    assert not any("Traceback" in line for line in tool.lines), tool.lines
    assert summary.startswith(f"rsc produce: sent {feeder.fed}, "), summary
    lost, _ = report(fault, feeder.fed, stored_values(redis_url), summary)
    assert lost == 0


async def test_d2_coordinator_sigkill_restart_then_reshard_loses_nothing(redis_url, cleanup):
    coordinators, _, tools = cleanup
    coordinator = CoordinatorProcess(redis_url)
    coordinators.append(coordinator)
    await coordinator.start()
    await set_shards(coordinator.url, PREFIX, GROUP, 2)
    producer, feeder = await start_producer(coordinator.url, redis_url, tools)
    await feeder.feed(300)
    await wait_until(lambda: len(stored_values(redis_url)) >= 300)
    await coordinator.kill()
    await feeder.feed(300)  # written with the routing it has, coordinator or not
    await wait_until(lambda: len(stored_values(redis_url)) >= 600)
    assert (await producer.line("rsc produce: lost the coordinator session")).endswith(
        "retrying (writing with routing version 1 meanwhile)")
    await coordinator.start()
    await producer.line("rsc produce: connected to the coordinator at")
    await feeder.feed(300)
    async with trio.open_nursery() as nursery:  # reshard while lines keep coming
        nursery.start_soon(feeder.feed_for, 2.0)
        await trio.sleep(0.5)
        await set_shards(coordinator.url, PREFIX, GROUP, 4)
    await feeder.feed(300)
    await finish(producer, feeder, "coordinator SIGKILL + restart, then reshard 2 -> 4",
                 redis_url)
    values = stored_values(redis_url)
    client = redis.Redis.from_url(redis_url)
    assert sum(client.xlen(f"{{{PREFIX}:v2:{i}}}") for i in range(4)) > 0  # re-routed
    client.close()
    assert len(values) >= feeder.fed


async def test_d2_producer_started_while_the_coordinator_is_down(redis_url, cleanup):
    coordinators, _, tools = cleanup
    coordinator = CoordinatorProcess(redis_url)
    coordinators.append(coordinator)
    producer, feeder = await start_producer(coordinator.url, redis_url, tools)
    line = await producer.line("rsc produce: connection refused")
    assert line.endswith("retrying (a producer needs routing once: waiting for it)")
    await feeder.feed(500)  # waits in the pipe: nothing is read before routing
    await coordinator.start()
    await set_shards(coordinator.url, PREFIX, GROUP, 3)
    await feeder.feed(500)
    await finish(producer, feeder, "coordinator down when the producer starts", redis_url)


async def test_d2_redis_sigstopped_for_twice_the_lease(cleanup):
    coordinators, servers, tools = cleanup
    server = RedisProcess()
    servers.append(server)
    server.start()
    coordinator = CoordinatorProcess(server.url, lease_ttl_ms=3000)
    coordinators.append(coordinator)
    await coordinator.start()
    await set_shards(coordinator.url, PREFIX, GROUP, 4)
    producer, feeder = await start_producer(coordinator.url, server.url, tools)
    await feeder.feed_for(1.0)
    await wait_until(lambda: len(stored_values(server.url)) >= feeder.fed)
    server.signal(signal.SIGSTOP)
    try:
        await feeder.feed_for(2 * coordinator.lease_ttl_ms / 1000)  # the stall is the fault
        assert (await producer.line("rsc produce: Redis at")) == (
            f"rsc produce: Redis at {server.url} does not answer (timeout): is it stopped "
            "or overloaded? retrying")
    finally:
        server.signal(signal.SIGCONT)
    await feeder.feed_for(1.0)
    await finish(producer, feeder, "redis-server SIGSTOP for 2 x lease (6 s), SIGCONT",
                 server.url)


async def test_d2_redis_restarted_on_its_aof(cleanup):
    coordinators, servers, tools = cleanup
    server = RedisProcess(aof=True)
    servers.append(server)
    server.start()
    coordinator = CoordinatorProcess(server.url)
    coordinators.append(coordinator)
    await coordinator.start()
    await set_shards(coordinator.url, PREFIX, GROUP, 4)
    producer, feeder = await start_producer(coordinator.url, server.url, tools)
    await feeder.feed_for(1.0)
    await wait_until(lambda: len(stored_values(server.url)) >= feeder.fed)
    server.kill()
    await feeder.feed_for(1.0)  # accepted while Redis is gone
    await producer.line(f"rsc produce: cannot reach Redis at {server.url}")
    server.start()
    await feeder.feed_for(1.0)
    await producer.line(f"rsc produce: Redis at {server.url} answers again")
    await finish(producer, feeder, "redis-server SIGKILL, restarted on its AOF (fsync always)",
                 server.url)
