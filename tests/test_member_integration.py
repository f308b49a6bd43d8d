"""Members against a real coordinator and redis-server.

- three `rsc consume` processes share 20,000 messages over 8 shards while
  `rsc produce` streams them in; one consumer is SIGKILLed mid-stream: every
  message is processed, nothing stays pending, per-key order holds within
  each member's processing of a shard;
- a shard is never read by two members at once through revocations.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import defaultdict

import trio

from rsc.member.listener import Listener
from rsc.member.redis_io.streams import connect
from rsc.member.shells.runtime import Message
from tests.test_member_support import (
    pending_count,
    set_shards,
    wait_for_stable_members,
    write_messages,
)

PREFIX, GROUP = "orders", "billing"
RSC = [sys.executable, "-m", "rsc"]


class ConsumerProcess:
    """A `rsc consume` child whose stdout lines are parsed as they arrive."""

    def __init__(self, name: str, process: trio.Process) -> None:
        self.name = name
        self.process = process
        self.lines: list[dict] = []

    async def collect(self, progress: trio.Event | None = None) -> None:
        assert self.process.stdout is not None
        rest = b""
        async for chunk in self.process.stdout:
            *complete, rest = (rest + chunk).split(b"\n")
            self.lines.extend(json.loads(line) for line in complete if line)


def group_lag(redis_url: str, streams: tuple[str, ...]) -> int:
    client = connect(redis_url)
    try:
        total = 0
        for stream in streams:
            for info in client.xinfo_groups(stream):
                if info["name"] == GROUP:
                    total += int(info["lag"] or 0)
        return total
    finally:
        client.close()


async def wait_for(condition, timeout: float, interval: float = 0.05) -> None:
    """Poll `condition` (a bounded wait on a condition, not a fixed sleep)."""
    with trio.fail_after(timeout):
        while not condition():
            await trio.sleep(interval)


async def test_three_consumer_processes_one_killed_everything_processed_in_key_order(
        coordinator, nursery):
    streams = await set_shards(coordinator.url, PREFIX, GROUP, 8)
    total = 20_000
    keys = [f"customer-{n}" for n in range(200)]
    lines = [f"{keys[i % len(keys)]}\t{i}\n" for i in range(total)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    consume = [*RSC, "consume", PREFIX, GROUP, "--coordinator", coordinator.url,
               "--redis-url", coordinator.redis_url, "--workers", "4"]
    consumers = []
    for name in ("a", "b", "c"):
        process = await trio.lowlevel.open_process(
            consume, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        consumers.append(ConsumerProcess(name, process))
        nursery.start_soon(consumers[-1].collect)
    victim, survivors = consumers[0], consumers[1:]
    # all three hold their shards before anything is produced, so the victim gets its share
    await wait_for_stable_members(coordinator.url, PREFIX, GROUP, 3)
    producer = await trio.lowlevel.open_process(
        [*RSC, "produce", PREFIX, "--coordinator", coordinator.url,
         "--redis-url", coordinator.redis_url],
        stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        assert producer.stdin is not None
        half = total // 2
        await producer.stdin.send_all("".join(lines[:half]).encode())
        await wait_for(lambda: len(victim.lines) >= 1000, timeout=30)
        victim.process.send_signal(signal.SIGKILL)
        await producer.stdin.send_all("".join(lines[half:]).encode())
        await producer.stdin.aclose()
        with trio.fail_after(30):
            assert await producer.wait() == 0

        def all_seen() -> bool:
            ids = {(line["shard"], line["id"]) for c in consumers for line in c.lines}
            return len(ids) >= total

        await wait_for(all_seen, timeout=45)
        await wait_for(lambda: pending_count(coordinator.redis_url, streams, GROUP) == 0
                       and group_lag(coordinator.redis_url, streams) == 0, timeout=15)
        for survivor in survivors:
            survivor.process.send_signal(signal.SIGTERM)
        with trio.fail_after(15):
            for survivor in survivors:
                assert await survivor.process.wait() == 0
    finally:
        for process in [producer, *(c.process for c in consumers)]:
            if process.returncode is None:
                process.kill()

    values = [int(line["value"]) for c in consumers for line in c.lines]
    assert set(values) == set(range(total)), "every message processed at least once"
    assert victim.process.returncode == -signal.SIGKILL
    assert {line["memberId"] for c in survivors for line in c.lines}.isdisjoint(
        {line["memberId"] for line in victim.lines})
    for consumer in consumers:
        order: dict[tuple[str, str, str], list[int]] = defaultdict(list)
        for line in consumer.lines:
            assert line["key"] == keys[int(line["value"]) % len(keys)]
            order[(line["memberId"], line["shard"], line["key"])].append(int(line["value"]))
        for values_in_order in order.values():
            assert values_in_order == sorted(values_in_order), "per-key order within a member"


async def test_shard_is_never_read_by_two_members_at_once_through_revocations(coordinator):
    streams = await set_shards(coordinator.url, PREFIX, GROUP, 8)
    total = 6000
    write_messages(coordinator.redis_url, streams,
                   [(f"k{i % 50}", str(i)) for i in range(total)])
    reads: list[tuple[str, str, float, float]] = []
    processed: list[Message] = []

    def observe(member_id: str, shards: frozenset[str], start: float, end: float) -> None:
        reads.extend((shard, member_id, start, end) for shard in shards)

    async def handle(message: Message) -> None:
        await trio.sleep(0.001)
        processed.append(message)

    def make(index: int) -> Listener:
        return Listener(handle, stream_prefix=PREFIX, consumer_group=GROUP,
                        coordinator_url=coordinator.url, redis_url=coordinator.redis_url,
                        runtime_max_concurrency=8, member_ids=[f"member-{index}"],
                        read_count=50, read_observer=observe)

    listeners = [make(i) for i in range(4)]
    async with trio.open_nursery() as nursery:
        await nursery.start(listeners[0].run)
        await wait_for(lambda: len(processed) >= 500, timeout=15)
        await nursery.start(listeners[1].run)  # revokes half the shards of member-0
        await wait_for(lambda: len(processed) >= 2000, timeout=15)
        await nursery.start(listeners[2].run)
        await nursery.start(listeners[3].run)
        await wait_for(lambda: len(processed) >= 4000, timeout=15)
        listeners[1].stop()  # a clean leave hands its shards over
        await wait_for(lambda: len({m.value for m in processed}) >= total
                       and pending_count(coordinator.redis_url, streams, GROUP) == 0,
                       timeout=30)
        for listener in listeners:
            listener.stop()

    readers_per_shard = defaultdict(set)
    for shard, member_id, _, _ in reads:
        readers_per_shard[shard].add(member_id)
    assert any(len(members) > 1 for members in readers_per_shard.values()), "shards moved"
    by_shard: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for shard, member_id, start, end in reads:
        by_shard[shard].append((start, end, member_id))
    for shard, windows in by_shard.items():
        windows.sort()
        for (_, end_a, member_a), (start_b, _, member_b) in zip(windows, windows[1:], strict=False):
            if member_a != member_b:
                assert start_b >= end_a, f"{shard} read by {member_a} and {member_b} at once"
    assert {m.value for m in processed} == {str(i) for i in range(total)}
