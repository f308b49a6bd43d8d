"""K2 and K5 under faults, with a real primary, one replica and three sentinels.

1. SIGKILL of the master under load: a coordinator, two `rsc consume` and an `rsc produce
   --min-replicas 1` fed 200 lines a second, all on one `redis+sentinel://` URL. Here the
   master has two replicas: the sentinels promote one and point the other at it, so WAIT has
   a replica to count at once (with one replica it has none until the killed server is back
   and demoted, which Sentinel does about 10 s after it restarts). No tool is restarted:
   consumption resumes within 20 s of the kill, the producer exits 0 (every line it accepted
   was confirmed by WAIT) and nothing it confirmed is lost. Duplicates, stall length,
   fenced members and double-owner windows are counted.
2. A failover right after a burst of writes, with the replica behind (SIGSTOPped and its
   link dropped during the burst): a producer without `min_replicas` counted the burst as
   delivered and the failover takes it back (the test says how much); one with
   `min_replicas=1` had not confirmed it, writes it again on the new master and loses nothing.

Set RSC_FAULTS_OUT=path to append one JSON row per scenario (docs/faults.md).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest
import trio

from rsc.member.producer import open_producer
from tests.conftest import start_coordinator
from tests.conftest_sentinel import require_sentinel
from tests.processes import ROOT
from tests.redis_rigs import SentinelGroup
from tests.test_coordinator_outage import (
    GROUP,
    PREFIX,
    TEST_TIMING,
    Consumer,
    Coordinator,
    handled_values,
    now_s,
    report,
    spawn_consumer,
    wait_for,
)
from tests.test_member_support import set_shards, wait_for_stable_members

pytestmark = pytest.mark.faults  # the fault step of .ci/run: python -m pytest -q -m faults

RATE_PER_S = 200
RESUME_LIMIT_S = 20.0
STALL_S = 1.0  # a gap in handling longer than this after the kill is the failover's stall


class FedProducer:
    """`rsc produce --min-replicas 1` fed RATE_PER_S lines a second (values 0, 1, 2, ...)."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.fed = 0
        self.running = True
        self.stderr = bytearray()
        self.fed_all = trio.Event()  # the feeder left its loop: nothing is being written

    async def feed(self) -> None:
        assert self.process.stdin is not None
        batch_size = 10
        deadline = trio.current_time()
        try:
            while self.running:
                lines = b"".join(f"k{n % 97}\t{n}\n".encode()
                                 for n in range(self.fed, self.fed + batch_size))
                try:
                    await self.process.stdin.send_all(lines)
                except trio.BrokenResourceError:  # it exited: `finish` says how
                    self.running = False
                    return
                self.fed += batch_size
                deadline += batch_size / RATE_PER_S
                await trio.sleep_until(deadline)
        finally:
            self.fed_all.set()

    async def collect(self) -> None:
        assert self.process.stderr is not None
        async for chunk in self.process.stderr:
            self.stderr += chunk

    async def finish(self) -> int:
        self.running = False
        assert self.process.stdin is not None
        with trio.fail_after(60):  # a write in progress (the pipe full while the producer is
            await self.fed_all.wait()  # slow to read) ends whole before stdin is closed
        try:
            await self.process.stdin.aclose()
        except trio.BrokenResourceError:
            pass
        with trio.fail_after(90):
            return await self.process.wait()


def resume_after(times: list[float], killed_at: float) -> tuple[float, float]:
    """(seconds from the kill to the first handling after the failover's stall, the stall)."""
    after = sorted(t for t in times if t >= killed_at)
    previous, stall_end, stall = killed_at, killed_at, 0.0
    for moment in after:
        if moment - previous > STALL_S and moment - previous > stall:
            stall, stall_end = moment - previous, moment
        previous = moment
    return stall_end - killed_at, stall


def double_owner_windows(consumers: list[Consumer], window_s: float = 1.0) -> int:
    """Times a shard was handled by one member, then another, then the first again within
    `window_s`: two members handling one shard at once (H3)."""
    by_shard: dict[str, list[tuple[float, str]]] = {}
    for consumer in consumers:
        for seen, message in consumer.handled:
            by_shard.setdefault(message["shard"], []).append((seen, message["memberId"]))
    windows = 0
    for handled in by_shard.values():
        handled.sort()
        for (t0, a), (_, b), (t2, c) in zip(handled, handled[1:], handled[2:], strict=False):
            if a != b and a == c and t2 - t0 <= window_s:
                windows += 1
    return windows


async def test_k2_k5_sigkill_of_the_sentinel_master_under_load_loses_nothing_confirmed(nursery):
    with SentinelGroup(binary=require_sentinel(), replicas=2) as group:
        await sigkill_under_load(group, nursery)


async def sigkill_under_load(group: SentinelGroup, nursery: trio.Nursery) -> None:
    url = group.url()
    coordinator = Coordinator(url, TEST_TIMING)
    await coordinator.start(nursery)
    consumers: list[Consumer] = []
    producer: FedProducer | None = None
    try:
        await set_shards(coordinator.url, PREFIX, GROUP, 4)
        for name in ("a", "b"):
            consumers.append(await spawn_consumer(name, coordinator.url, url, nursery))
        await wait_for_stable_members(coordinator.url, PREFIX, GROUP, 2)
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "rsc", "produce", PREFIX, "--coordinator", coordinator.url,
             "--redis-url", url, "--min-replicas", "1"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
        producer = FedProducer(process)
        nursery.start_soon(producer.collect)
        nursery.start_soon(producer.feed)
        await wait_for(lambda: sum(len(c.handled) for c in consumers) >= 400, 60, "messages flowing")

        killed_at = now_s()  # the clock the consumers stamp what they handled with
        old = group.kill_master(signal.SIGKILL)
        new_port = await trio.to_thread.run_sync(group.wait_failover, old.port)
        failed_over_s = now_s() - killed_at
        with trio.move_on_after(RESUME_LIMIT_S):
            while not any(t > killed_at + failed_over_s for c in consumers for t, _ in c.handled):
                await trio.sleep(0.05)
        assert any(t > killed_at + failed_over_s for c in consumers for t, _ in c.handled), (
            f"no handling within {RESUME_LIMIT_S} s of the kill; producer: "
            f"{producer.stderr.decode(errors='replace')[-1500:]}; coordinator: "
            f"{bytes(coordinator.logs).decode(errors='replace')[-3000:]}; events: "
            f"{[[(e['event'], e.get('reason')) for e in c.events] for c in consumers]}")
        await trio.sleep(5)  # the fault's aftermath: five more seconds of load
        assert producer.process.returncode is None, producer.stderr.decode(errors="replace")
        assert all(c.process.returncode is None for c in consumers)
        assert coordinator.process is not None and coordinator.process.returncode is None
        fed_lines = producer.fed
        exit_code = await producer.finish()
        assert exit_code == 0, producer.stderr.decode(errors="replace")  # every line confirmed
        await wait_for(lambda: all(str(n) in handled_values(consumers) for n in range(fed_lines)), 60,
                       "every confirmed line handled")
        handled = handled_values(consumers)
        times = [t for c in consumers for t, _ in c.handled]
        resumed_s, stall_s = resume_after(times, killed_at)
        row: dict[str, Any] = {
            "fault": "SIGKILL of the Sentinel master at 200 msg/s, --min-replicas 1",
            "failover_s": round(failed_over_s, 1), "resumed_after_s": round(resumed_s, 1),
            "stall_s": round(stall_s, 1), "accepted": fed_lines,
            "lost": sum(1 for n in range(fed_lines) if str(n) not in handled),
            "duplicates": sum(count - 1 for count in handled.values() if count > 1),
            "double_owner_windows": double_owner_windows(consumers),
            "fenced": sum(len(c.named("fenced")) for c in consumers),
            "new_master_port_differs": new_port != old.port,
        }
        report("sentinel failover", **row)
        assert row["lost"] == 0, row
        assert row["resumed_after_s"] <= RESUME_LIMIT_S, row
        assert row["double_owner_windows"] == 0, row
    finally:
        if producer is not None and producer.process.returncode is None:
            producer.process.kill()
        for consumer in consumers:
            await consumer.stop()
        await coordinator.stop()


async def test_k5_a_failover_after_a_burst_takes_back_only_what_min_replicas_did_not_confirm(
        fresh_sentinel_group, nursery):
    group: SentinelGroup = fresh_sentinel_group
    url = group.url()
    coordinator = await start_coordinator(nursery, url, lease_ttl_ms=4000)
    streams = await set_shards(coordinator.url, "burst", "readers", 2)
    async with open_producer(coordinator.url, url, "burst") as unreplicated, \
            open_producer(coordinator.url, url, "burst", min_replicas=1) as replicated:
        await unreplicated.send_batch([("k", "warm-up")])
        await replicated.send_batch([("k", "warm-up-replicated")])
        group.wait_replicas_in_sync()
        replica = group.replica_nodes()[0]
        assert replica.process is not None
        replicated_done = trio.Event()
        burst = 300

        async def replicated_burst() -> None:
            await replicated.send_batch([(f"k{n}", f"replicated-{n}") for n in range(burst)])
            replicated_done.set()

        os.kill(replica.process.pid, signal.SIGSTOP)  # the replica falls behind: stopped, and
        with group.node_client(group.master()) as client:  # its link dropped (no bytes in flight)
            client.execute_command("CLIENT", "KILL", "TYPE", "replica")
        try:
            confirmed = await unreplicated.send_batch([(f"k{n}", f"unreplicated-{n}") for n in range(burst)])
            nursery.start_soon(replicated_burst)
            with trio.fail_after(5):  # written on the master, waiting for WAIT
                while replicated.notices.active("replicas") is False:
                    await trio.sleep(0.01)
            old = group.kill_master(signal.SIGKILL)
        finally:
            os.kill(replica.process.pid, signal.SIGCONT)
        await trio.to_thread.run_sync(group.wait_failover, old.port)
        assert not replicated_done.is_set()
        await trio.to_thread.run_sync(group.restart, old)  # a replica again: WAIT can count it
        with trio.fail_after(60):
            await replicated_done.wait()
    with group.node_client(group.master()) as client:
        values = Counter(fields["value"] for stream in streams
                         for _, fields in client.xrange(stream, "-", "+"))
    taken_back = sum(1 for n in range(burst) if values[f"unreplicated-{n}"] == 0)
    replicated_lost = sum(1 for n in range(burst) if values[f"replicated-{n}"] == 0)
    report("failover after a burst", fault="SIGSTOP the replica, a burst, SIGKILL the master",
           burst=burst, confirmed_without_min_replicas=len(confirmed),
           taken_back_without_min_replicas=taken_back, lost_with_min_replicas_1=replicated_lost,
           retried_writes_with_min_replicas_1=replicated.retried)
    assert taken_back > 0  # what a failover can take back from a producer without WAIT
    assert replicated_lost == 0  # nothing it confirmed: it had confirmed none of them
    assert not coordinator.stopped.is_set()
