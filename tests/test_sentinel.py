"""K1 and K2 against real sentinels and a real primary and replica.

- K1: the coordinator, a producer and a listener all run on a `redis+sentinel://` URL; a
  SERVICE no sentinel knows is a configuration error (exit 2 for consume and produce, exit 1
  for the coordinator), one line each; sentinels that are all unreachable are an outage
  (the coordinator exits 1 at start, consume says so and keeps retrying).
- K2: a Sentinel failover (SIGKILL of the master) is followed by the coordinator, a producer
  and a listener without a restart; a plain `redis://` URL whose address now serves a
  replica (READONLY) is retried, not an error loop, and the tools go on once it is a
  master again.
"""

from __future__ import annotations

import os
import subprocess
import sys

import redis
import trio

from rsc.common.redis_connect import connect
from rsc.common.redis_server import EmbeddedRedis, free_port
from rsc.member.listener import Listener
from rsc.member.notices import Notices
from rsc.member.producer import open_producer
from tests.conftest import start_coordinator
from tests.processes import ROOT
from tests.redis_rigs import SentinelGroup, server_binary
from tests.test_member_support import set_shards

PREFIX, GROUP = "orders", "billing"


async def run_tool(*args: str, timeout: float = 30, env: dict[str, str] | None = None
                   ) -> subprocess.CompletedProcess[bytes]:
    """`rsc ARGS` as a child process, stdin closed, bounded in time."""
    with trio.fail_after(timeout):
        return await trio.run_process([sys.executable, "-m", "rsc", *args], cwd=ROOT,
                                      capture_stdout=True, capture_stderr=True, check=False,
                                      stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})


async def consume_all(coordinator_url: str, redis_url: str, expected: set[str],
                      timeout: float = 30) -> set[str]:
    """Run one listener until every value in `expected` was handled; the values seen."""
    seen: set[str] = set()

    async def handle(message) -> None:
        seen.add(message.value)

    listener = Listener(handle, stream_prefix=PREFIX, consumer_group=GROUP,
                        coordinator_url=coordinator_url, redis_url=redis_url)
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        with trio.fail_after(timeout):
            while not expected <= seen:
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    return seen


async def test_k1_coordinator_producer_and_listener_run_on_a_sentinel_url(sentinel_url, nursery):
    coordinator = await start_coordinator(nursery, sentinel_url)
    await set_shards(coordinator.url, PREFIX, GROUP, 3)
    values = [f"v{n}" for n in range(30)]
    async with open_producer(coordinator.url, sentinel_url, PREFIX) as producer:
        await producer.send_batch([(f"k{n}", value) for n, value in enumerate(values)])
    assert await consume_all(coordinator.url, sentinel_url, set(values)) >= set(values)


async def test_k1_a_password_from_rsc_redis_password_reaches_the_master(sentinel_group, sentinel_url,
                                                                         monkeypatch):
    from tests.conftest_sentinel import SENTINEL_TEST_PASSWORD

    monkeypatch.setenv("RSC_REDIS_PASSWORD", SENTINEL_TEST_PASSWORD)
    client = connect(sentinel_group.url(), decode_responses=True)
    try:
        assert client.set("k1-env", "1") and client.get("k1-env") == "1"
    finally:
        client.close()


async def test_k1_an_unknown_service_is_a_configuration_error_of_every_tool(sentinel_group):
    url = sentinel_group.url().replace("/mymaster/", "/nosuchservice/")
    for tool in (["consume", PREFIX, GROUP], ["produce", PREFIX]):
        done = await run_tool(*tool, "--coordinator", "ws://127.0.0.1:9", "--redis-url", url)
        lines = done.stderr.decode().strip().splitlines()
        assert done.returncode == 2, (tool, done.stderr)
        assert len(lines) == 1 and "knows the service 'nosuchservice'" in lines[0], lines
    done = await run_tool("coordinator", "--redis-url", url, "--port", "0")
    assert done.returncode == 1, done.stderr
    assert b"knows the service 'nosuchservice'" in done.stderr


async def test_k1_unreachable_sentinels_are_an_outage_not_a_configuration_error():
    url = f"redis+sentinel://127.0.0.1:{free_port()},127.0.0.1:{free_port()}/mymaster/0"
    done = await run_tool("coordinator", "--redis-url", url, "--port", "0")
    assert done.returncode == 1 and b"No master found for 'mymaster'" in done.stderr, done.stderr
    # a consumer says so and keeps retrying (D3) until stopped
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "rsc", "consume", PREFIX, GROUP, "--coordinator",
         f"ws://127.0.0.1:{free_port()}", "--redis-url", url],
        cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    said = bytearray()
    try:
        assert process.stderr is not None
        with trio.fail_after(20):
            while b"No master found" not in said:
                chunk = await process.stderr.receive_some(4096)
                assert chunk, said
                said += chunk
        assert process.returncode is None  # still retrying
        assert b"retrying" in said
    finally:
        process.terminate()
        with trio.fail_after(15):
            await process.wait()


async def test_k2_a_sentinel_failover_is_followed_without_a_restart(fresh_sentinel_group, nursery):
    group: SentinelGroup = fresh_sentinel_group
    url = group.url()
    coordinator = await start_coordinator(nursery, url)
    await set_shards(coordinator.url, PREFIX, GROUP, 2)
    lines: list[str] = []
    async with open_producer(coordinator.url, url, PREFIX,
                             notices=Notices(lines.append)) as producer:
        await producer.send_batch([(f"k{n}", f"before-{n}") for n in range(20)])
        group.wait_replicas_in_sync()
        old = group.kill_master().port
        new = await trio.to_thread.run_sync(group.wait_failover, old)
        assert new != old
        with trio.fail_after(30):
            await producer.send_batch([(f"k{n}", f"after-{n}") for n in range(20)])
    expected = {f"before-{n}" for n in range(20)} | {f"after-{n}" for n in range(20)}
    assert await consume_all(coordinator.url, url, expected) >= expected
    assert not coordinator.stopped.is_set()  # the coordinator went on


async def test_k2_a_plain_url_whose_server_turned_replica_is_retried_not_an_error_loop(nursery):
    binary = server_binary()
    with EmbeddedRedis(binary=binary) as first:
        with EmbeddedRedis(binary=binary, args=["--replicaof", "127.0.0.1", str(first.port)]) as second:
            coordinator = await start_coordinator(nursery, first.url)
            await set_shards(coordinator.url, PREFIX, GROUP, 2)
            lines: list[str] = []
            async with open_producer(coordinator.url, first.url, PREFIX,
                                     notices=Notices(lines.append)) as producer:
                await producer.send_batch([("k", "before")])
                a, b = (redis.Redis(port=server.port) for server in (first, second))
                await wait_linked(b)
                b.execute_command("REPLICAOF", "NO", "ONE")  # a failover promotes `second`...
                a.execute_command("REPLICAOF", "127.0.0.1", str(second.port))  # ...`first` follows
                await wait_linked(a)
                async with trio.open_nursery() as writes:
                    written = trio.Event()

                    async def write() -> None:
                        await producer.send_batch([("k", "during")])
                        written.set()

                    writes.start_soon(write)
                    with trio.fail_after(20):
                        while not any("read-only replica" in line for line in lines):
                            await trio.sleep(0.05)
                    assert not written.is_set()  # held, not dropped (D2)
                    # the address serves a master again (a managed service's DNS moved back)
                    a.execute_command("REPLICAOF", "NO", "ONE")
                    b.execute_command("REPLICAOF", "127.0.0.1", str(first.port))
                    with trio.fail_after(20):
                        await written.wait()
            assert await consume_all(coordinator.url, first.url, {"before", "during"})
            assert not coordinator.stopped.is_set()
            a.close()
            b.close()


async def wait_linked(replica: redis.Redis, timeout: float = 20) -> None:
    with trio.fail_after(timeout):
        while replica.info("replication").get("master_link_status") != "up":
            await trio.sleep(0.05)


async def test_k2_a_coordinator_whose_server_stays_a_replica_past_its_lease_waits_it_out(nursery):
    """The lease lapses while the coordinator's address serves a replica (K2 longer than a
    lease): the coordinator waits for a master again instead of exiting (D5), then serves."""
    binary = server_binary()
    with EmbeddedRedis(binary=binary) as first:
        with EmbeddedRedis(binary=binary, args=["--replicaof", "127.0.0.1", str(first.port)]) as second:
            coordinator = await start_coordinator(nursery, first.url)
            await set_shards(coordinator.url, PREFIX, GROUP, 2)
            a, b = (redis.Redis(port=server.port) for server in (first, second))
            await wait_linked(b)
            b.execute_command("REPLICAOF", "NO", "ONE")
            a.execute_command("REPLICAOF", "127.0.0.1", str(second.port))
            await wait_linked(a)
            lease_s = coordinator.config.lease_ttl_ms / 1000
            with trio.fail_after(20):  # the lease runs out while `first` is a replica
                while a.get("rsc:coordinator:lease") is not None:
                    await trio.sleep(0.05)
            await trio.sleep(lease_s)  # a lease more as a replica: the waiting coordinator's case
            assert not coordinator.stopped.is_set(), "a replica at the address is waited out"
            a.execute_command("REPLICAOF", "NO", "ONE")
            b.execute_command("REPLICAOF", "127.0.0.1", str(first.port))
            with trio.fail_after(20):
                while a.get("rsc:coordinator:lease") is None:
                    await trio.sleep(0.05)
            await set_shards(coordinator.url, PREFIX, GROUP, 3)  # serving again
            assert not coordinator.stopped.is_set()
            a.close()
            b.close()
