"""D5 against real processes: a coordinator frozen or dead for longer than a lease stops nothing.

A real redis-server, a real `rsc coordinator` (a child on a fixed port, tick 100 ms:
its own lease key lapses after 1 s; member lease 2 s, heartbeat 300 ms), two
`rsc consume` processes (`--events`) and an `rsc produce` fed steadily through its
stdin. The coordinator is SIGSTOPped for three member leases, or SIGKILLed and
restarted after three member leases. Through the outage and after it:

- messages keep flowing on every shard (handled in the part of the outage that lies
  past every member's last lease);
- no member is fenced or rejoins, the same memberIds are in the group afterwards;
- every line the producer accepted is handled (lost = 0), nothing stays pending;
  duplicates are counted and printed (at-least-once allows them).

And the frozen member: a consumer SIGSTOPped until its shards moved to the other one,
then the coordinator SIGKILLed, then the consumer woken: it handles none of the
shards Redis records as the other's (handled after a lost lease = 0).

Set RSC_FAULTS_OUT=path to append one JSON row per scenario (the README's Faults table).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest
import redis
import trio

from rsc.common.redis_server import free_port
from rsc.member.session import open_session
from rsc.protocol import DescribeGroup, GroupDescription
from tests.processes import ROOT
from tests.test_member_support import set_shards, wait_for_stable_members

pytestmark = pytest.mark.faults  # the fault step of .ci/run: python -m pytest -q -m faults

PREFIX, GROUP = "outage", "billing"
SHARDS = 4
TICK_MS = 100  # the coordinator's own lease: 3 ticks, at least 1 s
LEASE_TTL_MS = 2000
HEARTBEAT_MS = 300
OUTAGE_S = 3 * LEASE_TTL_MS / 1000
RATE_PER_S = 80
TEST_TIMING = ("--tick-interval-ms", str(TICK_MS), "--lease-ttl-ms", str(LEASE_TTL_MS),
               "--heartbeat-interval-ms", str(HEARTBEAT_MS))


def now_s() -> float:
    return time.monotonic()


class Coordinator:
    """`rsc coordinator` on a fixed port, so it can come back there; its stderr is kept."""

    def __init__(self, redis_url: str, timing: tuple[str, ...] = TEST_TIMING) -> None:
        self.redis_url = redis_url
        self.timing = timing  # no flags: the shipped defaults
        self.port = free_port()
        self.url = f"ws://127.0.0.1:{self.port}"
        self.process: trio.Process | None = None
        self.logs = bytearray()

    async def start(self, nursery: trio.Nursery) -> None:
        self.process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "rsc", "coordinator", "--redis-url", self.redis_url,
             "--port", str(self.port), *self.timing],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
        nursery.start_soon(self._collect, self.process)
        output = b""
        assert self.process.stdout is not None
        with trio.fail_after(20):
            while b"listening on " not in output:
                chunk = await self.process.stdout.receive_some(4096)
                assert chunk, f"coordinator exited early: {output!r} {bytes(self.logs)!r}"
                output += chunk

    async def _collect(self, process: trio.Process) -> None:
        assert process.stderr is not None
        async for chunk in process.stderr:
            self.logs += chunk

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    async def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        with trio.fail_after(10):
            await self.process.wait()

    async def stop(self) -> None:
        if self.process is None or self.process.returncode is not None:
            return
        self.process.send_signal(signal.SIGCONT)
        self.process.terminate()
        with trio.move_on_after(10):
            await self.process.wait()
            return
        self.process.kill()
        await self.process.wait()


@attrs.define
class Consumer:
    """One `rsc consume`: what it handled (with the time the test saw it) and its events."""

    name: str
    process: trio.Process
    handled: list[tuple[float, dict[str, Any]]] = attrs.field(factory=list)
    events: list[dict[str, Any]] = attrs.field(factory=list)

    async def collect_stdout(self) -> None:
        assert self.process.stdout is not None
        rest = b""
        async for chunk in self.process.stdout:
            *lines, rest = (rest + chunk).split(b"\n")
            seen = now_s()
            self.handled.extend((seen, json.loads(line)) for line in lines if line)

    async def collect_events(self) -> None:
        assert self.process.stderr is not None
        rest = b""
        async for chunk in self.process.stderr:
            *lines, rest = (rest + chunk).split(b"\n")
            for line in lines:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # a log line
                if isinstance(event, dict) and "event" in event:
                    self.events.append(event)

    def named(self, *names: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] in names]

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            with trio.move_on_after(15):
                await self.process.wait()
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()


async def spawn_consumer(name: str, url: str, redis_url: str, nursery: trio.Nursery,
                         *extra: str) -> Consumer:
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "rsc", "consume", PREFIX, GROUP, "--coordinator", url,
         "--redis-url", redis_url, "--workers", "2", "--events", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    consumer = Consumer(name, process)
    nursery.start_soon(consumer.collect_stdout)
    nursery.start_soon(consumer.collect_events)
    return consumer


class Producer:
    """`rsc produce` fed `RATE_PER_S` lines a second through its stdin until `finish`."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.fed = 0
        self.running = True
        self.fed_all = trio.Event()  # the feeder left its loop: nothing is being written
        self.stderr = bytearray()

    async def feed(self) -> None:
        assert self.process.stdin is not None
        try:
            while self.running:
                batch = b"".join(f"k{n % 97}\t{n}\n".encode() for n in range(self.fed, self.fed + 8))
                await self.process.stdin.send_all(batch)
                self.fed += 8
                await trio.sleep(8 / RATE_PER_S)
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
        await self.process.stdin.aclose()
        with trio.fail_after(60):
            return await self.process.wait()


async def spawn_producer(url: str, redis_url: str, nursery: trio.Nursery) -> Producer:
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "rsc", "produce", PREFIX, "--coordinator", url,
         "--redis-url", redis_url],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    producer = Producer(process)
    nursery.start_soon(producer.collect)
    nursery.start_soon(producer.feed)
    return producer


async def describe(url: str) -> GroupDescription:
    with trio.fail_after(20):
        async with open_session(url, "admin") as session:
            described = await session.request(DescribeGroup(
                request_id=0, stream_prefix=PREFIX, consumer_group=GROUP))
    assert isinstance(described, GroupDescription), described
    return described


def pending(redis_url: str, streams: tuple[str, ...]) -> int:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        return sum(int(client.xpending(s, GROUP)["pending"]) for s in streams)
    finally:
        client.close()


async def wait_for(condition, timeout: float, what: str) -> None:
    with trio.move_on_after(timeout) as scope:
        while not condition():
            await trio.sleep(0.05)
    assert not scope.cancelled_caught, f"timed out after {timeout} s waiting for {what}"


def report(scenario: str, **figures: Any) -> None:
    row = {"scenario": scenario, **figures}
    print(json.dumps(row))
    out = os.environ.get("RSC_FAULTS_OUT")
    if out:
        with open(out, "a", encoding="utf-8") as file:
            file.write(json.dumps(row) + "\n")


@attrs.define
class Rig:
    """A coordinator process, two `rsc consume` processes on SHARDS shards, one `rsc produce`."""

    coordinator: Coordinator
    streams: tuple[str, ...] = ()
    consumers: list[Consumer] = attrs.Factory(list)
    producer: Producer | None = None

    def fed_producer(self) -> Producer:
        assert self.producer is not None
        return self.producer

    async def drain(self, redis_url: str) -> tuple[Counter[str], int]:
        """End the producer, wait until every accepted line is handled and acked; how often each
        value was handled, and how many accepted lines none handled."""
        producer = self.fed_producer()
        fed = await producer.finish()
        assert fed == 0, producer.stderr.decode(errors="replace")
        fed_lines = producer.fed
        await wait_for(lambda: missing(self.consumers, fed_lines) == 0, 60,
                       "every accepted line handled")
        await wait_for(lambda: pending(redis_url, self.streams) == 0, 30, "nothing pending")
        return handled_values(self.consumers), missing(self.consumers, fed_lines)


@contextlib.asynccontextmanager
async def running_rig(redis_url: str, nursery: trio.Nursery, *,
                      timing: tuple[str, ...] = TEST_TIMING, shards: int = SHARDS,
                      static: bool = False) -> AsyncIterator[Rig]:
    """Everything started and flowing (two stable members, static ones with instance ids
    `pod-a` and `pod-b` if asked, the producer writing); stopped by pid at the end, whatever
    happened. `timing` are the coordinator's timing flags (none: the shipped defaults)."""
    coordinator = Coordinator(redis_url, timing)
    await coordinator.start(nursery)
    rig = Rig(coordinator)
    try:
        rig.streams = await set_shards(coordinator.url, PREFIX, GROUP, shards)
        for name in ("a", "b"):
            extra = ("--instance-id", f"pod-{name}") if static else ()
            rig.consumers.append(await spawn_consumer(name, coordinator.url, redis_url, nursery,
                                                      *extra))
        await wait_for_stable_members(coordinator.url, PREFIX, GROUP, 2)
        rig.producer = await spawn_producer(coordinator.url, redis_url, nursery)
        yield rig
    finally:
        if rig.producer is not None and rig.producer.process.returncode is None:
            rig.producer.process.kill()
        # shielded: a failing test cancels its nursery, and its processes must still stop
        with trio.CancelScope(shield=True):
            for consumer in rig.consumers:
                await consumer.stop()
            await coordinator.stop()


async def run_outage(redis_url: str, nursery: trio.Nursery, scenario: str) -> None:
    async with running_rig(redis_url, nursery) as rig:
        coordinator, streams, consumers = rig.coordinator, rig.streams, rig.consumers
        producer = rig.fed_producer()
        before = {m.member_id for m in (await describe(coordinator.url)).members}
        await wait_for(lambda: sum(len(c.handled) for c in consumers) >= RATE_PER_S, 30,
                       "messages flowing before the outage")
        events_before = sum(len(c.events) for c in consumers)

        outage_started = now_s()
        if scenario == "sigstop":
            coordinator.signal(signal.SIGSTOP)
            await trio.sleep(OUTAGE_S)  # the fault's length, not a wait for a condition
            outage_ended = now_s()
            coordinator.signal(signal.SIGCONT)
        else:
            await coordinator.kill()
            await trio.sleep(OUTAGE_S)
            outage_ended = now_s()
            await coordinator.start(nursery)
        # past every member's last accepted heartbeat plus its lease (D1 alone would stop here)
        past_leases = outage_started + LEASE_TTL_MS / 1000 + 0.5
        during = Counter(message["shard"] for consumer in consumers
                         for seen, message in consumer.handled if past_leases <= seen < outage_ended)

        await trio.sleep(2 * LEASE_TTL_MS / 1000)  # the coordinator back: two leases of carrying on
        handled, lost = await rig.drain(redis_url)
        after = await describe(coordinator.url)
        changes = [e for c in consumers for e in c.events[:] if e["event"] in ("fenced", "joined", "left")]
        fenced = sum(e["event"] == "fenced" for e in changes)
        joins_after = [e for c in consumers for e in c.events if e["event"] == "joined"]
        duplicates = sum(count - 1 for count in handled.values() if count > 1)
        report(f"coordinator {scenario} {OUTAGE_S:g} s (3 x lease)", accepted=producer.fed,
               handled=sum(handled.values()), lost=lost, duplicates=duplicates, fenced=fenced,
               rejoins=len(joins_after) - 2, shards_flowing_in_outage=len(during),
               handled_in_outage_past_leases=sum(during.values()),
               events_during_and_after=sum(len(c.events) for c in consumers) - events_before)
        assert sorted(during) == sorted(streams), f"a shard stopped in the outage: {during}"
        assert fenced == 0, changes
        assert len(joins_after) == 2, "no member rejoined"
        assert {m.member_id for m in after.members} == before, "the same members after"
        assert lost == 0
        assert b"coordinator.lease_lapsed" in coordinator.logs or scenario == "sigkill", \
            bytes(coordinator.logs)


def handled_values(consumers: list[Consumer]) -> Counter[str]:
    """How often each value was handled, over every consumer."""
    return Counter(message["value"] for consumer in consumers for _, message in consumer.handled)


def missing(consumers: list[Consumer], fed: int) -> int:
    """Lines fed (values 0 .. fed-1) that no consumer handled."""
    handled = handled_values(consumers)
    return sum(1 for n in range(fed) if str(n) not in handled)


async def test_d5_coordinator_sigstop_for_three_leases_stops_nothing(redis_url, nursery):
    await run_outage(redis_url, nursery, "sigstop")


async def test_d5_coordinator_sigkill_and_restart_after_three_leases_stops_nothing(redis_url, nursery):
    await run_outage(redis_url, nursery, "sigkill")


async def test_d5_a_frozen_member_whose_shards_moved_touches_none_after_the_coordinator_died(
        redis_url, nursery):
    async with running_rig(redis_url, nursery) as rig:
        coordinator, streams, consumers = rig.coordinator, rig.streams, rig.consumers
        producer = rig.fed_producer()
        frozen, other = consumers
        await wait_for(lambda: len(frozen.handled) > 10, 30, "the first consumer handling")
        frozen.process.send_signal(signal.SIGSTOP)
        # its lease runs out; the coordinator expires it and gives every shard to the other
        await wait_for_stable_members(coordinator.url, PREFIX, GROUP, 1, timeout=30)
        client = redis.Redis.from_url(redis_url, decode_responses=True)
        try:
            owners = {s: client.get(f"{s}:owner:{GROUP}") for s in streams}
        finally:
            client.close()
        other_id = other.handled[-1][1]["memberId"] if other.handled else None
        assert set(owners.values()) == {other_id}, owners
        await coordinator.kill()  # the coordinator dies: its lease key lapses within 1 s
        await trio.sleep(1.5)  # the fault's shape: the key gone before the member wakes
        handled_before_waking = len(frozen.handled)
        woke = now_s()
        frozen.process.send_signal(signal.SIGCONT)
        # it wakes past its lease; it looks, and Redis names the other member everywhere
        await wait_for(lambda: any(e.get("reason", "").startswith("no heartbeat")
                                   or "owner record" in (e.get("reason") or "")
                                   for e in frozen.named("fenced")), 20, "the woken member fenced")
        await trio.sleep(2 * LEASE_TTL_MS / 1000)  # the coordinator still dead: two leases
        after_lost_lease = [m for seen, m in frozen.handled[handled_before_waking:] if seen >= woke]
        other_went_on = Counter(m["shard"] for seen, m in other.handled if seen >= woke)
        await coordinator.start(nursery)
        handled, lost = await rig.drain(redis_url)
        report("member frozen, shards moved, then coordinator SIGKILL", accepted=producer.fed,
               handled=sum(handled.values()), lost=lost,
               duplicates=sum(c - 1 for c in handled.values() if c > 1),
               handled_after_lost_lease=len(after_lost_lease),
               shards_flowing_on_the_other=len(other_went_on))
        assert after_lost_lease == [], after_lost_lease[:5]
        assert sorted(other_went_on) == sorted(streams), "the other member went on under D5"
        assert lost == 0


def test_d5_one_look_reads_the_lease_key_and_the_owner_records_in_one_round_trip(redis_url):
    from rsc.member.pure.outage import COORDINATOR_LEASE_KEY
    from rsc.member.redis_io.streams import connect
    from rsc.member.shells.heartbeat import observe

    client = connect(redis_url)
    try:
        client.set("{s:v1:0}:owner:g", "me")
        client.delete("{s:v1:1}:owner:g", COORDINATOR_LEASE_KEY)
        assert observe(client, COORDINATOR_LEASE_KEY, ["{s:v1:0}:owner:g", "{s:v1:1}:owner:g"]) \
            == (True, ["me", None])
        client.set(COORDINATOR_LEASE_KEY, "host-1-abc", px=5000)
        assert observe(client, COORDINATOR_LEASE_KEY, []) == (False, [])
    finally:
        client.delete(COORDINATOR_LEASE_KEY, "{s:v1:0}:owner:g")
        client.close()
