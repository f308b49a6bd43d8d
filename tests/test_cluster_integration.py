"""The coordinator, members and producer on a real local Redis Cluster (three masters).

Every --redis-url below names ONE node of the cluster; the tools find the rest.

- members join, consume and ack; a reshard 4 -> 8 while producing loses nothing;
- a SIGKILLed `rsc consume` process: its shards are consumed again, nothing lost;
- the coordinator process is SIGKILLed and restarted on the same port: members carry on;
- a manual CLUSTER FAILOVER of a master (three masters with a replica each) while
  producing and consuming: no acked write is lost, nothing crashes; the time
  until consumption resumed on that master's shards is printed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import trio

from rsc.member.listener import Listener
from rsc.protocol import messages as m
from tests.conftest import RunningCoordinator, start_coordinator
from tests.processes import spawn_coordinator
from tests.redis_rigs import LocalCluster, free_cluster_port
from tests.test_member_integration import ConsumerProcess
from tests.test_member_support import pending_count, set_shards, write_messages
from tests.test_resharding_data import (
    GROUP,
    PREFIX,
    Record,
    admin,
    check_no_loss_and_sealed,
    current_streams,
    produce_until,
    reshard,
    wait_migration_done,
    wait_until,
)

pytestmark = pytest.mark.cluster
RSC = [sys.executable, "-m", "rsc"]


@pytest.fixture
async def cluster_coordinator(cluster_url: str, nursery: trio.Nursery) -> RunningCoordinator:
    """A coordinator (short ticks and leases) whose --redis-url is one node of the cluster."""
    return await start_coordinator(nursery, cluster_url)


@pytest.fixture
def cluster_client(cluster_url: str) -> Iterator[Any]:
    client = redis.RedisCluster.from_url(cluster_url, decode_responses=True)
    yield client
    client.close()


def listener(record: Record, coordinator_url: str, redis_url: str, **options: object) -> Listener:
    return Listener(record.handle, stream_prefix=PREFIX, consumer_group=GROUP,
                    coordinator_url=coordinator_url, redis_url=redis_url,
                    concurrency=2, block_ms=100, **options)  # type: ignore[arg-type]


def processed_values(record: Record) -> set[str]:
    return {value for _, _, _, value in record.processed}


async def stop_producing(stop: trio.Event, done: trio.Event) -> None:
    stop.set()
    with trio.fail_after(15):
        await done.wait()


async def start_producing(nursery: trio.Nursery, url: str, redis_url: str, record: Record
                          ) -> tuple[trio.Event, trio.Event]:
    stop, done = trio.Event(), trio.Event()

    async def run() -> None:
        try:
            await produce_until(url, redis_url, record, stop)
        finally:
            done.set()

    nursery.start_soon(run)
    return stop, done


async def wait_for_members(url: str, count: int, timeout: float = 30) -> None:
    """Until `count` members are STABLE, each with shards."""
    with trio.fail_after(timeout):
        while True:
            described = await admin(url, m.DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                                         consumer_group=GROUP))
            members = getattr(described, "members", ())
            if (len(members) == count and all(member.state == "STABLE" and member.assigned_shards
                                              for member in members)):
                return
            await trio.sleep(0.05)


async def test_join_consume_ack_and_reshard_while_producing_loses_nothing(
        cluster_coordinator: RunningCoordinator, cluster_client: Any,
        redis_cluster: LocalCluster, nursery: trio.Nursery) -> None:
    url, redis_url = cluster_coordinator.url, cluster_coordinator.redis_url
    record = Record()
    await reshard(url, 4, "parallel", record, cluster_client)
    for _ in range(2):
        await nursery.start(listener(record, url, redis_url).run)
    stop, done = await start_producing(nursery, url, redis_url, record)
    await wait_until(lambda: len(record.produced) >= 600, 30)
    await reshard(url, 8, "parallel", record, cluster_client)
    await wait_until(lambda: len(record.produced) >= 1500, 30)
    await wait_migration_done(url)
    await stop_producing(stop, done)
    produced = {value for _, _, _, value in record.produced}
    await wait_until(lambda: produced <= processed_values(record), 30)
    streams = await current_streams(url)
    assert len(streams) == 8 and len(record.sealed_at) == 4
    check_no_loss_and_sealed(record, cluster_client, streams)
    homes = {redis_cluster.node_of(stream).port for stream in streams}
    assert len(homes) == 3, "the 8 shards live on all three masters"
    assert {shard for shard, _, _, _ in record.processed} >= set(streams)


async def test_sigkilled_consumer_process_its_shards_are_consumed_again(
        cluster_coordinator: RunningCoordinator, nursery: trio.Nursery) -> None:
    url, redis_url = cluster_coordinator.url, cluster_coordinator.redis_url
    streams = await set_shards(url, PREFIX, GROUP, 6)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    consume = [*RSC, "consume", PREFIX, GROUP, "--coordinator", url, "--redis-url", redis_url,
               "--workers", "2"]
    consumers = []
    for name in ("a", "b"):
        process = await trio.lowlevel.open_process(consume, stdout=subprocess.PIPE,
                                                   stderr=subprocess.DEVNULL, env=env)
        consumers.append(ConsumerProcess(name, process))
        nursery.start_soon(consumers[-1].collect)
    victim, survivor = consumers
    children = [c.process for c in consumers]
    total = 3000
    try:
        await wait_for_members(url, 2)  # both hold shards before anything is written
        producer = await trio.lowlevel.open_process(  # `rsc produce`, keyed lines on stdin
            [*RSC, "produce", PREFIX, "--coordinator", url, "--redis-url", redis_url],
            stdin=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        children.append(producer)
        assert producer.stdin is not None
        lines = [f"k{i % 40}\t{i}\n" for i in range(total)]
        await producer.stdin.send_all("".join(lines[:total // 2]).encode())
        await wait_until(lambda: len(victim.lines) >= 100, 30)
        victim.process.send_signal(signal.SIGKILL)
        await producer.stdin.send_all("".join(lines[total // 2:]).encode())
        await producer.stdin.aclose()
        with trio.fail_after(30):
            assert await producer.wait() == 0

        def seen() -> set[int]:
            return {int(line["value"]) for c in consumers for line in c.lines}

        await wait_until(lambda: len(seen()) >= total, 45)
        await wait_until(lambda: pending_count(redis_url, streams, GROUP) == 0, 15)
        survivor.process.send_signal(signal.SIGTERM)
        with trio.fail_after(15):
            assert await survivor.process.wait() == 0
    finally:
        for child in children:
            if child.returncode is None:
                child.kill()
    assert seen() == set(range(total))
    assert victim.process.returncode == -signal.SIGKILL


async def test_coordinator_sigkilled_and_restarted_members_carry_on(
        cluster_url: str, cluster_client: Any, nursery: trio.Nursery) -> None:
    port = free_cluster_port(set())
    process, url = await spawn_coordinator(cluster_url, "--port", str(port))
    record = Record()
    try:
        await reshard(url, 6, "parallel", record, cluster_client)
        listeners = [listener(record, url, cluster_url) for _ in range(2)]
        for one in listeners:
            await nursery.start(one.run)
        stop, done = await start_producing(nursery, url, cluster_url, record)
        await wait_until(lambda: len(record.processed) >= 300, 30)
        process.send_signal(signal.SIGKILL)
        with trio.fail_after(10):
            await process.wait()
        before = len(record.processed)
        # the data plane does not need the coordinator: members go on reading their shards
        await wait_until(lambda: len(record.processed) >= before + 200, 30)
        process, url2 = await spawn_coordinator(cluster_url, "--port", str(port))
        assert url2 == url
        await wait_until(lambda: len(record.processed) >= before + 600, 30)
        await stop_producing(stop, done)
        produced = {value for _, _, _, value in record.produced}
        await wait_until(lambda: produced <= processed_values(record), 30)
        streams = await current_streams(url)
        check_no_loss_and_sealed(record, cluster_client, streams)
        member_ids = {member.config.member_id for one in listeners for member in one.members}
        described = await admin(url, m.DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                                     consumer_group=GROUP))
        assert isinstance(described, m.GroupDescription), described
        assert set(described.current_assignment) == member_ids, "the same members, no rejoin"
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            with trio.fail_after(10):
                await process.wait()


class TimedRecord(Record):
    """A Record that also notes when each message was processed."""

    def __init__(self) -> None:
        super().__init__()
        self.processed_at: list[float] = []

    async def handle(self, message) -> None:  # type: ignore[no-untyped-def]
        await super().handle(message)
        self.processed_at.append(time.monotonic())


def replica_of(cluster: LocalCluster, master_id: str):  # type: ignore[no-untyped-def]
    with cluster.nodes[0].client() as client:
        rows = [line.split() for line in str(client.execute_command("CLUSTER", "NODES")).splitlines()]
    replica_id = next(row[0] for row in rows if "slave" in row[2] and row[3] == master_id)
    return next(node for node in cluster.nodes if node.node_id == replica_id)


async def test_manual_failover_of_a_master_while_producing_and_consuming(
        redis_cluster_replicas: LocalCluster, nursery: trio.Nursery) -> None:
    cluster = redis_cluster_replicas
    cluster.flush()
    redis_url = cluster.masters()[0].url
    coordinator = await start_coordinator(nursery, redis_url)
    url = coordinator.url
    client: Any = redis.RedisCluster.from_url(redis_url, decode_responses=True)
    record = TimedRecord()
    try:
        await reshard(url, 6, "parallel", record, client)
        streams = await current_streams(url)
        for _ in range(2):
            await nursery.start(listener(record, url, redis_url).run)
        stop, done = await start_producing(nursery, url, redis_url, record)
        await wait_until(lambda: len(record.processed) >= 300, 30)
        master = cluster.node_of(streams[0])
        affected = {stream for stream in streams if cluster.node_of(stream) is master}
        replica = replica_of(cluster, master.node_id)
        produced_before = len(record.produced)
        started, started_ms = time.monotonic(), int(time.time() * 1000)
        with replica.client() as promote:
            assert promote.execute_command("CLUSTER", "FAILOVER") in ("OK", b"OK", True)
        with trio.fail_after(30):
            while replica.client().execute_command("ROLE")[0] != "master":
                await trio.sleep(0.02)
        promoted = time.monotonic() - started

        def resumed() -> float | None:
            """Seconds from the failover to the first message consumed from a shard of the
            failed-over master that the server wrote after the failover began (entry ids
            are the server's clock in ms, the same machine's)."""
            for (shard, entry_id, _, _), at in zip(record.processed, record.processed_at, strict=False):
                if shard in affected and int(entry_id.partition("-")[0]) >= started_ms:
                    return at - started
            return None

        await wait_until(lambda: resumed() is not None, 30)
        resumed_after = resumed()
        await wait_until(lambda: len(record.produced) >= produced_before + 600, 30)
        await stop_producing(stop, done)
        produced = {value for _, _, _, value in record.produced}
        await wait_until(lambda: produced <= processed_values(record), 30)
        assert cluster.node_of(streams[0]) is replica
        # handled is not yet acked: acks are batched (and retried across the failover)
        await wait_until(lambda: sum(int(client.xpending(s, GROUP)["pending"])
                                     for s in streams) == 0, 30)
        print(f"\nfailover: replica promoted after {promoted:.2f}s, consumption of its "
              f"{len(affected)} shards resumed after {resumed_after:.2f}s")
    finally:
        client.close()
        await coordinator.stop()


async def test_reset_offsets_and_delete_group_reach_every_master(
        cluster_url: str, nursery: trio.Nursery, cluster_client: Any,
        redis_cluster: LocalCluster) -> None:
    # no lease is timed here: a 6 s lease gives each store write 2 s (D4), so creating the
    # shards on three masters of a loaded machine is not COORDINATOR_NOT_AVAILABLE
    coordinator = await start_coordinator(nursery, cluster_url, lease_ttl_ms=6000)
    url, redis_url = coordinator.url, coordinator.redis_url
    streams = await set_shards(url, PREFIX, GROUP, 6)
    assert len({redis_cluster.node_of(stream).port for stream in streams}) > 1
    write_messages(redis_url, streams, [(f"k{i}", str(i)) for i in range(120)])
    latest = await admin(url, m.ResetOffsets(request_id=0, stream_prefix=PREFIX, consumer_group=GROUP,
                                             to="latest"))
    assert isinstance(latest, m.OffsetsReset) and latest.status == "OK", latest
    last_ids = {s: cluster_client.xinfo_stream(s)["last-generated-id"] for s in streams}
    assert {o.shard: o.last_delivered_id for o in latest.shards} == last_ids
    earliest = await admin(url, m.ResetOffsets(request_id=0, stream_prefix=PREFIX, consumer_group=GROUP,
                                               to="earliest"))
    assert isinstance(earliest, m.OffsetsReset) and earliest.status == "OK", earliest
    assert {cluster_client.xinfo_groups(s)[0]["last-delivered-id"] for s in streams} == {"0-0"}
    deleted = await admin(url, m.DeleteGroup(request_id=0, stream_prefix=PREFIX, consumer_group=GROUP))
    assert isinstance(deleted, m.GroupDeleted) and deleted.status == "OK", deleted
    with trio.fail_after(10):  # the consumer groups go after the records
        while any(cluster_client.xinfo_groups(s) for s in streams):
            await trio.sleep(0.05)
