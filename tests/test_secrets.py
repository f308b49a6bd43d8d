"""K7: no Redis password appears in any output of any tool, in success and in failure.

A real redis-server with `--requirepass` and an ACL user with a password of its own. Every
tool (coordinator with its metrics and console ports, consume, produce, admin describe and
list, consume --peek) runs with the password in the URL and, again, from RSC_REDIS_PASSWORD;
then the failures: a wrong password, a db index the server does not have, and Redis stopped
while the coordinator, a consumer and a producer run. Every byte each process wrote to stdout
and stderr is kept, with the metrics text, the admin answers and the console page: neither
password appears anywhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request

import pytest
import redis
import trio

from rsc.common.redis_server import EmbeddedRedis
from tests.processes import ROOT
from tests.redis_rigs import server_binary
from tests.test_member_support import set_shards

DEFAULT_PASSWORD = "Sup3rS3cret-K7default"
USER, USER_PASSWORD = "app", "AppS3cret-K7user"
SECRETS = (DEFAULT_PASSWORD.encode(), USER_PASSWORD.encode())
PREFIX, GROUP = "secrets", "auditors"


class Outputs:
    """Everything the tools printed, and what the test fetched from them."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bytes]] = []

    def add(self, what: str, data: bytes) -> None:
        self.seen.append((what, data))

    def leaks(self) -> list[str]:
        return [what for what, data in self.seen for secret in SECRETS if secret in data]


async def run(outputs: Outputs, what: str, *args: str, stdin: bytes = b"", env: dict[str, str] | None = None,
              timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(timeout):
        done = await trio.run_process([sys.executable, "-m", "rsc", *args], stdin=stdin, cwd=ROOT,
                                      capture_stdout=True, capture_stderr=True, check=False,
                                      env={**os.environ, **(env or {})})
    outputs.add(f"{what} stdout", done.stdout)
    outputs.add(f"{what} stderr", done.stderr)
    return done


class Background:
    """A tool left running: its output kept until it is stopped."""

    def __init__(self, outputs: Outputs, what: str) -> None:
        self.outputs, self.what = outputs, what
        self.out, self.err = bytearray(), bytearray()
        self.process: trio.Process | None = None

    async def start(self, nursery: trio.Nursery, *args: str, env: dict[str, str] | None = None,
                    stdin: int | None = subprocess.DEVNULL) -> None:
        self.process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "rsc", *args], cwd=ROOT, stdin=stdin, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
        nursery.start_soon(self._collect, self.process.stdout, self.out)
        nursery.start_soon(self._collect, self.process.stderr, self.err)

    async def _collect(self, stream, into: bytearray) -> None:
        async for chunk in stream:
            into += chunk

    async def wait_for(self, text: bytes, timeout: float = 30) -> None:
        with trio.fail_after(timeout):
            while text not in self.out + self.err:
                await trio.sleep(0.05)

    async def stop(self) -> None:
        assert self.process is not None
        if self.process.returncode is None:
            self.process.terminate()
            with trio.move_on_after(15):
                await self.process.wait()
            if self.process.returncode is None:
                self.process.kill()
                await self.process.wait()
        await trio.sleep(0.2)  # the collectors read what is left
        self.outputs.add(f"{self.what} stdout", bytes(self.out))
        self.outputs.add(f"{self.what} stderr", bytes(self.err))


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return bytes(response.read())


async def a_full_run(outputs: Outputs, nursery: trio.Nursery, label: str, redis_url: str,
                     env: dict[str, str]) -> None:
    """The coordinator, admin, produce, consume and peek on `redis_url` (`env` for each)."""
    coordinator = Background(outputs, f"{label} coordinator")
    await coordinator.start(nursery, "coordinator", "--redis-url", redis_url, "--port", "0",
                            "--metrics-port", "0", "--console-port", "0", "--tick-interval-ms", "100",
                            "--log-level", "debug", env=env)
    try:
        await coordinator.wait_for(b"console at ")
        text = (coordinator.out + coordinator.err).decode()
        url = text.split("listening on ", 1)[1].split()[0]
        console = text.split("console at ", 1)[1].split()[0]
        metrics = text.split("metrics.listening url=", 1)[1].split()[0]
        await set_shards(url, PREFIX, GROUP, 2)
        lines = "".join(f"k{n}\tv{n}\n" for n in range(20)).encode()
        done = await run(outputs, f"{label} produce", "produce", PREFIX, "--coordinator", url,
                         "--redis-url", redis_url, stdin=lines, env=env)
        assert done.returncode == 0, done.stderr
        done = await run(outputs, f"{label} consume", "consume", PREFIX, GROUP, "--coordinator", url,
                         "--redis-url", redis_url, "--max-messages", "20", "--events", env=env)
        assert done.returncode == 0, done.stderr
        done = await run(outputs, f"{label} peek", "consume", PREFIX, "--peek", "--coordinator", url,
                         "--redis-url", redis_url, env=env)
        assert done.returncode == 0, done.stderr
        for args in (["list"], ["describe", PREFIX, GROUP, "--shards", "--members", "all"],
                     ["describe", PREFIX, GROUP, "--json"], ["list", "--json"]):
            done = await run(outputs, f"{label} admin {args[0]}", "admin", "--url", url, *args, env=env)
            assert done.returncode == 0, done.stderr
        outputs.add(f"{label} metrics", await trio.to_thread.run_sync(fetch, metrics))
        outputs.add(f"{label} console", await trio.to_thread.run_sync(fetch, console))
    finally:
        await coordinator.stop()


@pytest.mark.slow  # 15 s or more: CI's slow step (README)
async def test_k7_no_password_in_any_output_of_any_tool(nursery):
    outputs = Outputs()
    args = ["--requirepass", DEFAULT_PASSWORD]
    with EmbeddedRedis(binary=server_binary(), args=args) as server:
        with redis.Redis(port=server.port, password=DEFAULT_PASSWORD) as admin:
            admin.execute_command("ACL", "SETUSER", USER, "on", f">{USER_PASSWORD}", "~*", "&*", "+@all")
        port = server.port
        in_url = f"redis://{USER}:{USER_PASSWORD}@127.0.0.1:{port}/0"
        await a_full_run(outputs, nursery, "user in url", in_url, {})
        with redis.Redis(port=port, password=DEFAULT_PASSWORD) as admin:
            admin.flushall()
        await a_full_run(outputs, nursery, "default password from env", f"redis://127.0.0.1:{port}/0",
                         {"RSC_REDIS_PASSWORD": DEFAULT_PASSWORD})

        # failures: a wrong password, a db index the server lacks (password in the URL)
        for label, url in (("wrong password", f"redis://{USER}:{USER_PASSWORD}x@127.0.0.1:{port}/0"),
                           ("bad db", f"redis://{USER}:{USER_PASSWORD}@127.0.0.1:{port}/99")):
            done = await run(outputs, f"{label} coordinator", "coordinator", "--redis-url", url,
                             "--port", "0")
            assert done.returncode == 1, done.stderr
            for tool in (["consume", PREFIX, GROUP], ["produce", PREFIX], ["consume", PREFIX, "--peek"]):
                done = await run(outputs, f"{label} {tool[0]}", *tool, "--coordinator",
                                 "ws://127.0.0.1:9", "--redis-url", url)
                assert done.returncode == 2, (label, tool, done.stderr)

        # Redis stopped under the coordinator, a consumer and a producer
        with redis.Redis(port=port, password=DEFAULT_PASSWORD) as admin:
            admin.flushall()
        coordinator = Background(outputs, "stopped coordinator")
        await coordinator.start(nursery, "coordinator", "--redis-url", in_url, "--port", "0",
                                "--tick-interval-ms", "100", "--lease-ttl-ms", "2000")
        await coordinator.wait_for(b"listening on ")
        url = (coordinator.out.decode()).split("listening on ", 1)[1].split()[0]
        await set_shards(url, PREFIX, GROUP, 2)
        consumer, producer = Background(outputs, "stopped consume"), Background(outputs, "stopped produce")
        await consumer.start(nursery, "consume", PREFIX, GROUP, "--coordinator", url, "--redis-url",
                             in_url, "--events")
        await producer.start(nursery, "produce", PREFIX, "--coordinator", url, "--redis-url", in_url,
                             stdin=subprocess.PIPE)
        assert producer.process is not None and producer.process.stdin is not None
        await producer.process.stdin.send_all(b"k\tbefore\n")
        await consumer.wait_for(b'"before"')
    # the redis-server is stopped now; the tools say so (with the URL) and keep retrying
    await producer.process.stdin.send_all(b"k\tduring\n")
    with trio.fail_after(30):
        while not all(b"127.0.0.1:" in tool.err for tool in (consumer, producer)) or \
                b"store.unavailable" not in coordinator.err:
            await trio.sleep(0.1)
    for tool in (producer, consumer, coordinator):
        await tool.stop()
    said = b"".join(data for what, data in outputs.seen if what.startswith("stopped"))
    assert b"redis://app:***@127.0.0.1" in said  # the URL is shown, its password is not
    assert len(outputs.seen) > 40
    assert outputs.leaks() == []
