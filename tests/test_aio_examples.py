"""The asyncio examples of docs/examples/, run as real processes.

- fastapi_app.py under two real uvicorn servers of one group, against a real
  `rsc coordinator` and redis-server: messages written while the prefix is resharded
  (`rsc admin set-shards`) and while one server is SIGKILLed are all handled
  (lost = 0, counted in the app's own Redis hash); the health route reports the
  member; the survivor leaves the group on SIGINT;
- asyncio_consumer.py prints what it consumes and leaves on SIGTERM and on SIGINT.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import redis
import trio

from rsc.member.producer import open_producer
from rsc.member.session import open_session
from rsc.protocol import DescribeGroup, GroupDescription
from tests.processes import ROOT, spawn_coordinator
from tests.test_member_support import set_shards, write_messages

EXAMPLES = Path(ROOT) / "docs" / "examples"
PREFIX, GROUP = "orders", "billing"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def group_members(url: str) -> list[str]:
    async with open_session(url, "admin") as session:
        described = await session.request(DescribeGroup(
            request_id=0, stream_prefix=PREFIX, consumer_group=GROUP))
    assert isinstance(described, GroupDescription), described
    return [member.member_id for member in described.members]


async def until(condition, timeout: float, what: str, interval: float = 0.05) -> None:
    """Poll a (possibly async) condition until it holds, bounded."""
    with trio.move_on_after(timeout) as scope:
        while True:
            result = condition()
            if hasattr(result, "__await__"):
                result = await result
            if result:
                return
            await trio.sleep(interval)
    assert not scope.cancelled_caught, f"timed out after {timeout} s waiting for {what}"


class App:
    """One uvicorn server of docs/examples/fastapi_app.py."""

    def __init__(self, process: trio.Process, port: int) -> None:
        self.process = process
        self.base = f"http://127.0.0.1:{port}"

    async def health(self, path: str = "/health") -> tuple[int, dict] | None:
        try:
            async with httpx.AsyncClient(timeout=2) as client:
                response = await client.get(f"{self.base}{path}")
        except httpx.HTTPError:
            return None
        return response.status_code, response.json()

    async def shards(self) -> set[str]:
        answer = await self.health()
        if answer is None or answer[0] != 200:
            return set()
        return {shard for member in answer[1]["members"] for shard in member["shards"]}


async def start_app(url: str, redis_url: str, env: dict[str, str]) -> App:
    port = free_port()
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "uvicorn", "fastapi_app:app", "--app-dir", str(EXAMPLES),
         "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT,
        env={**env, "RSC_COORDINATOR_URL": url, "RSC_REDIS_URL": redis_url})
    return App(process, port)


async def test_fastapi_app_survives_a_reshard_and_a_killed_peer_and_leaves_on_sigint(redis_url):
    coordinator, url = await spawn_coordinator(redis_url)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    apps: list[App] = []
    written: list[str] = []
    try:
        streams = await set_shards(url, PREFIX, GROUP, 4)
        apps = [await start_app(url, redis_url, env) for _ in range(2)]
        survivor, victim = apps

        async def both_hold_all() -> bool:
            held = [await app.shards() for app in apps]
            return all(held) and set().union(*held) == set(streams)

        await until(both_hold_all, 30, "both servers to hold shards")

        async with open_producer(url, redis_url, PREFIX) as producer:
            async def send(count: int) -> None:
                for _ in range(count // 50):
                    batch = [(f"customer-{n % 37}", str(n))
                             for n in range(len(written), len(written) + 50)]
                    await producer.send_batch(batch)
                    written.extend(value for _, value in batch)
                    await trio.sleep(0.01)

            await send(1000)
            resharded = await trio.run_process(
                [sys.executable, "-m", "rsc", "admin", "--url", url, "set-shards", PREFIX,
                 GROUP, "8"], capture_stdout=True, capture_stderr=True, cwd=ROOT)
            assert resharded.returncode == 0, resharded.stderr
            await send(1000)
            await until(lambda: producer.routing is not None and len(producer.routing.streams)
                        == 8, 20, "the producer to follow the new routing")
            answer = await victim.health()
            assert answer is not None and answer[1]["members"][0]["processed"] > 0
            victim.process.send_signal(signal.SIGKILL)
            await send(1000)
        assert len(written) == 3000

        client = redis.Redis.from_url(redis_url, decode_responses=True)
        try:
            await until(lambda: client.hlen(f"{PREFIX}:handled") >= len(written), 60,
                        "every message to be handled")
            handled = client.hgetall(f"{PREFIX}:handled")
        finally:
            client.close()
        lost = set(written) - set(handled)
        assert not lost, sorted(lost, key=int)[:10]
        assert set(handled) == set(written)

        await until(lambda: _one_member(url), 30, "the killed server to expire")
        code, status = await survivor.health()
        assert code == 200 and status["running"] and status["failure"] is None
        member = status["members"][0]
        assert member["joined"] and member["memberEpoch"] > 0 and member["processed"] > 0
        assert len(member["shards"]) == 8  # all of the new routing's shards
        # D7 as the guide wires it: liveness and readiness probes of a member in its group
        assert await survivor.health("/healthz") == (200, {"healthy": True, "reason": None})
        assert await survivor.health("/readyz") == (200, {"ready": True, "reason": None})
        survivor.process.send_signal(signal.SIGINT)
        with trio.fail_after(20):
            code = await survivor.process.wait()
        assert code == 0
        assert await group_members(url) == []  # it left: no lease to wait for
    finally:
        for process in [*(app.process for app in apps), coordinator]:
            if process.returncode is None:
                process.kill()
                with trio.move_on_after(10):
                    await process.wait()


async def _one_member(url: str) -> bool:
    return len(await group_members(url)) == 1


async def test_asyncio_consumer_prints_what_it_consumes_and_leaves_on_sigterm_and_sigint(
        coordinator):
    url, redis_url = coordinator.url, coordinator.redis_url
    streams = await set_shards(url, PREFIX, GROUP, 2)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "RSC_COORDINATOR_URL": url,
           "RSC_REDIS_URL": redis_url}
    for signum, count in ((signal.SIGTERM, 40), (signal.SIGINT, 60)):
        first = 0 if signum == signal.SIGTERM else 40
        await trio.to_thread.run_sync(write_messages, redis_url, streams,
                                      [(f"k{n % 5}", str(n)) for n in range(first, count)])
        process = await trio.lowlevel.open_process(
            [sys.executable, str(EXAMPLES / "asyncio_consumer.py")], stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, cwd=ROOT, env=env)
        out = b""
        try:
            assert process.stdout is not None
            with trio.fail_after(30):
                while out.count(b"\n") < count - first:
                    chunk = await process.stdout.receive_some(65536)
                    assert chunk, out
                    out += chunk
            process.send_signal(signum)
            with trio.fail_after(20):
                async for chunk in process.stdout:
                    out += chunk
                assert await process.wait() == 0
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        lines = out.decode().splitlines()
        assert lines[-1] == "left the group", lines[-3:]
        values = sorted(int(line.split()[3]) for line in lines[:-1])
        assert values == list(range(first, count))
        assert await group_members(url) == []
