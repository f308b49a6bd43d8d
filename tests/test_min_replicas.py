"""K5, the producer half, against a real primary and replica: `min_replicas=N` makes a message
delivered only once Redis's WAIT (on the connection that wrote it) reports N replicas.

- with the replica up, `send_batch` returns and the replica holds every entry;
- with the replica stopped, `send_batch` does not return, one warning names the shortfall,
  and the messages are written once (a shortfall waits again, it does not write again);
  once the replica is back the batch is confirmed;
- `rsc produce --min-replicas 1` does the same through the command line;
- 0 (the default) and a negative number: today's behaviour, and a clear error.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import redis
import trio

from rsc.member.notices import Notices
from rsc.member.producer import open_producer
from tests.conftest import start_coordinator
from tests.processes import ROOT
from tests.redis_rigs import SentinelGroup
from tests.test_member_support import entry, set_shards

PREFIX, GROUP = "replicated", "readers"


def entries(group: SentinelGroup, node_port: int, streams: tuple[str, ...]) -> int:
    node = next(node for node in group.data_nodes if node.port == node_port)
    with group.node_client(node) as client:
        return sum(int(client.xlen(stream)) for stream in streams)


async def test_k5_min_replicas_confirms_once_the_replica_holds_the_messages(replicated_redis, nursery):
    group: SentinelGroup = replicated_redis
    url = group.primary_url()
    coordinator = await start_coordinator(nursery, url)
    streams = await set_shards(coordinator.url, PREFIX, GROUP, 2)
    replica = group.replica_nodes()[0]
    async with open_producer(coordinator.url, url, PREFIX, min_replicas=1) as producer:
        await producer.send_batch([(f"k{n}", f"v{n}") for n in range(50)])
        # confirmed: the replica holds all 50 already (WAIT said so), no waiting needed here
        assert entries(group, replica.port, streams) == 50


async def test_k5_a_stopped_replica_holds_confirmation_warns_then_confirms_when_back(
        replicated_redis, nursery):
    group: SentinelGroup = replicated_redis
    url = group.primary_url()
    primary = group.master()
    coordinator = await start_coordinator(nursery, url)
    streams = await set_shards(coordinator.url, PREFIX, GROUP, 2)
    replica = group.replica_nodes()[0]
    lines: list[str] = []
    async with open_producer(coordinator.url, url, PREFIX, min_replicas=1,
                             notices=Notices(lines.append)) as producer:
        await producer.send_batch([("k", "first")])
        replica.stop()
        confirmed = trio.Event()

        async def send() -> None:
            await producer.send_batch([(f"k{n}", f"held-{n}") for n in range(10)])
            confirmed.set()

        nursery.start_soon(send)
        with trio.fail_after(20):
            while not any("0 of the 1 replicas" in line for line in lines):
                await trio.sleep(0.05)
        assert not confirmed.is_set()  # unconfirmed while no replica holds it
        with trio.fail_after(10):  # a second WAIT at least (1 s each) before the replica is back
            while producer.sent != 1 or entries(group, primary.port, streams) != 11:
                await trio.sleep(0.05)
        await trio.sleep(1.5)  # the fault's length: more WAITs, none of which writes again
        assert entries(group, primary.port, streams) == 11
        await trio.to_thread.run_sync(group.restart, replica)
        with trio.fail_after(30):
            await confirmed.wait()
        assert producer.sent == 11 and producer.retried == 0
        assert entries(group, primary.port, streams) == 11  # written once
        assert entries(group, replica.port, streams) == 11
        assert any("acknowledge the writes again" in line for line in lines)
    warnings = [line for line in lines if "replicas asked for" in line]
    assert len(warnings) <= 3, warnings  # said once, then every 15 s, not once per WAIT


async def test_k5_rsc_produce_min_replicas_exits_0_once_the_replica_holds_every_line(
        replicated_redis, nursery):
    group: SentinelGroup = replicated_redis
    url = group.primary_url()
    coordinator = await start_coordinator(nursery, url)
    streams = await set_shards(coordinator.url, PREFIX, GROUP, 2)
    lines = "".join(f"k{n}\tv{n}\n" for n in range(100)).encode()
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, "-m", "rsc", "produce", PREFIX, "--coordinator", coordinator.url,
             "--redis-url", url, "--min-replicas", "1"],
            stdin=lines, capture_stdout=True, capture_stderr=True, check=False, cwd=ROOT,
            env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert entries(group, group.replica_nodes()[0].port, streams) == 100


async def test_k5_min_replicas_below_0_is_refused_with_a_clear_error(redis_url, coordinator):
    with pytest.raises(ValueError, match="min_replicas must be 0 or more"):
        async with open_producer(coordinator.url, redis_url, PREFIX, min_replicas=-1):
            pass
    done = subprocess.run(
        [sys.executable, "-m", "rsc", "produce", PREFIX, "--redis-url", redis_url,
         "--min-replicas", "-1"], capture_output=True, text=True, cwd=ROOT, timeout=30)
    assert done.returncode == 2 and "--min-replicas: must be >= 0, got -1" in done.stderr


async def test_k5_wait_runs_on_the_connection_that_wrote(replicated_redis):
    """WAIT counts the writes of its own connection: a shortfall is waited on there, again."""
    group: SentinelGroup = replicated_redis
    from rsc.member.redis_io.streams import ProduceOps, connect

    client = connect(group.primary_url())
    try:
        client.xgroup_create("{s}:v1:0", "g", id="0", mkstream=True)
        ops = ProduceOps(client)
        replica = group.replica_nodes()[0]
        replica.stop()
        results, waiter = ops.write_and_wait([entry("{s}:v1:0", "k", "v")], 1, 200)
        try:
            assert isinstance(results[0], str) and waiter.replicas == 0
            assert waiter.wait(1, 200) == 0  # still none: the same connection's write
        finally:
            waiter.release()
        with redis.Redis(port=group.master_port()) as other:
            assert other.execute_command("WAIT", 1, 100) == 0  # no replica attached at all
    finally:
        client.close()


async def test_k5_the_asyncio_producer_takes_min_replicas_too(replicated_redis, nursery):
    import asyncio

    from rsc.member.aio import open_producer as open_aio_producer

    group: SentinelGroup = replicated_redis
    url = group.primary_url()
    coordinator = await start_coordinator(nursery, url)
    streams = await set_shards(coordinator.url, PREFIX, GROUP, 2)

    async def main() -> int:
        async with open_aio_producer(coordinator.url, url, PREFIX, min_replicas=1) as producer:
            await producer.send_batch([(f"k{n}", f"aio-{n}") for n in range(20)])
            return int(producer.producer.min_replicas)

    assert await trio.to_thread.run_sync(lambda: asyncio.run(main())) == 1
    assert entries(group, group.replica_nodes()[0].port, streams) == 20
