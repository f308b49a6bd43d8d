"""Poison messages and dead letters (P1, P2 of docs/protocol.md) against real processes.

The headline run: a listener with `RetryPolicy(max_deliveries=3)` whose handler ends its
process (`os._exit(1)`) on one poison value among 31, restarted by the test each time it
dies, as a supervisor would. Redis counts the handler calls across the processes, so the
poison value is dead-lettered after 3 crashes, with its count and the error `crashed`, and
every good value is handled. The figures (crashes, calls, time to the dead letter,
duplicates of good values) are printed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio

from rsc.admin.describe import lag_summary
from rsc.admin.group_view import group_view
from rsc.member.listener import Listener
from rsc.member.policies import AckPolicy, RetryPolicy, default_dead_letter_stream
from rsc.member.redis_io.ops import stream_ops
from rsc.member.redis_io.streams import NOT_OWNER, NOT_PENDING, RECORDED, connect
from rsc.member.session import open_session
from rsc.protocol import messages as m
from rsc.protocol import owner_key
from rsc.protocol.codec import encode
from tests.processes import ROOT
from tests.test_member_support import pending_count, set_shards, write_messages

PREFIX, GROUP = "poison", "billing"


async def admin_request(url: str, request: m.Request) -> m.Message:
    async with open_session(url, "admin") as admin:
        return await admin.request(request)


async def supervise(command: list[str], done, max_starts: int) -> tuple[int, int, list[float]]:
    """Start `command`, start it again each time it exits, until `done()`; the starts, the
    crashes (exits with status 1) and each life's seconds. The last one gets SIGTERM."""
    starts = crashes = 0
    lives: list[float] = []
    with trio.fail_after(90):
        while not done():
            assert starts < max_starts, f"still not done after {starts} starts"
            process = await trio.lowlevel.open_process(command, cwd=ROOT,
                                                       stderr=subprocess.DEVNULL)
            starts += 1
            born = time.monotonic()
            try:
                while process.poll() is None and not done():
                    await trio.sleep(0.02)
            finally:
                if process.poll() is None:
                    process.terminate()
                    with trio.fail_after(20):
                        await process.wait()
                elif process.returncode == 1:
                    crashes += 1
                lives.append(round(time.monotonic() - born, 2))
    return starts, crashes, lives


async def test_p1_a_poison_value_that_kills_its_process_is_dead_lettered_after_three_crashes(
        coordinator, tmp_path: Path):
    streams = await set_shards(coordinator.url, PREFIX, GROUP, 2)
    values = [f"v{n}" for n in range(31)]
    poison = "v5"
    write_messages(coordinator.redis_url, streams, [(f"k{n % 4}", v) for n, v in enumerate(values)])
    calls_file = tmp_path / "calls"
    calls_file.touch()
    dead_stream = default_dead_letter_stream(PREFIX, GROUP)
    client = connect(coordinator.redis_url)
    good = set(values) - {poison}
    dead_at: list[float] = []

    def calls() -> Counter[str]:
        return Counter(line.split()[0] for line in calls_file.read_text().splitlines())

    def done() -> bool:
        if client.xlen(dead_stream) >= 1 and not dead_at:
            dead_at.append(time.monotonic())
        return (bool(dead_at) and good <= set(calls())
                and pending_count(coordinator.redis_url, streams, GROUP) == 0)

    command = [sys.executable, "-m", "tests.poison_listener", coordinator.url,
               coordinator.redis_url, PREFIX, GROUP, str(calls_file), poison, "3"]
    started = time.monotonic()
    try:
        starts, crashes, lives = await supervise(command, done, max_starts=8)
        dead: list[Any] = client.xrange(dead_stream)  # type: ignore[assignment]
    finally:
        client.close()
    handled = calls()
    attempts = [int(line.split()[1]) for line in calls_file.read_text().splitlines()
                if line.split()[0] == poison]
    duplicates = sum(count - 1 for value, count in handled.items() if value != poison)
    print(f"\npoison run: {crashes} crashes, {starts} starts, poison calls {attempts}, "
          f"dead-lettered after {dead_at[0] - started:.2f} s, "
          f"{duplicates} duplicate calls of good values; lives (s): {lives}")
    assert crashes <= 3 and handled[poison] == crashes == 3
    assert attempts == [1, 2, 3], "the call's attempt is Redis's count, across processes"
    (_, fields), = dead
    assert fields["value"] == poison and fields["key"] == "k1"
    assert fields["rsc-deliveries"] == "3" and fields["rsc-error"] == "crashed"
    assert fields["rsc-source-stream"] in streams and fields["rsc-group"] == GROUP
    assert fields["rsc-member"] == "poison-pod" and int(fields["rsc-dead-at-ms"]) > 0
    assert set(handled) == set(values), "every good value handled"

    # the fix is out (no value kills the process any more): send the dead letter back
    sent = await admin_request(coordinator.url, m.RedriveDeadLetters(
        request_id=0, stream_prefix=PREFIX, consumer_group=GROUP))
    assert isinstance(sent, m.DeadLettersRedriven) and len(sent.redriven) == 1, sent
    fixed = [*command[:-2], "no-poison-any-more", "3"]
    client = connect(coordinator.redis_url)
    try:
        starts, crashes, _ = await supervise(fixed, lambda: calls()[poison] == 4 and pending_count(
            coordinator.redis_url, streams, GROUP) == 0 and client.xlen(dead_stream) == 0,
            max_starts=2)
    finally:
        client.close()
    assert (starts, crashes) == (1, 0)
    assert calls_file.read_text().splitlines()[-1] == f"{poison} 1", \
        "handled once more after the re-drive: a fresh entry, its first call"
    assert calls()[poison] == 4


SHARD = "{poison:v1:0}"


def pending_of(client, shard: str, group: str = GROUP) -> dict[str, int]:
    return {row["message_id"]: row["times_delivered"]
            for row in client.xpending_range(shard, group, min="-", max="+", count=100)}


def test_p1_a_counted_claim_leaves_the_counts_alone_and_names_trimmed_entries(redis_url):
    client = connect(redis_url)
    client.xgroup_create(SHARD, GROUP, id="0", mkstream=True)
    ids = [client.xadd(SHARD, {"key": f"k{n}", "value": f"v{n}"}) for n in range(4)]
    client.xreadgroup(GROUP, "member-a", {SHARD: ">"}, count=4)
    client.xclaim(SHARD, GROUP, "member-a", 0, [ids[1]], retrycount=5, justid=True)
    client.xdel(SHARD, ids[2])  # trimmed while pending
    ops = stream_ops(connect(redis_url, decode=False), GROUP, "member-b", use_xackdel=False)
    claimed = ops.claim_counted(SHARD, "0-0", count=10)
    assert claimed.cursor == "0-0"
    assert [entry[0].decode() for entry in claimed.entries] == [ids[0], ids[1], ids[3]]
    assert claimed.counts == {ids[0]: 1, ids[1]: 5, ids[3]: 1}
    assert claimed.gone == [ids[2]]
    assert pending_of(client, SHARD) == {ids[0]: 1, ids[1]: 5, ids[3]: 1}, "JUSTID: unchanged"
    assert {c["name"]: c["pending"] for c in client.xinfo_consumers(SHARD, GROUP)}["member-b"] == 3
    client.close()


def test_p1_the_attempt_script_records_a_call_only_for_the_owner(redis_url):
    client = connect(redis_url)
    client.xgroup_create(SHARD, GROUP, id="0", mkstream=True)
    entry_id = client.xadd(SHARD, {"key": "k", "value": "v"})
    client.xreadgroup(GROUP, "member-a", {SHARD: ">"}, count=1)
    ops = stream_ops(client, GROUP, "member-a", use_xackdel=False)
    client.set(owner_key(SHARD, GROUP), "member-b")
    assert ops.record_attempt(SHARD, entry_id, 2) == NOT_OWNER
    assert pending_of(client, SHARD) == {entry_id: 1}, "refused: nothing recorded"
    client.set(owner_key(SHARD, GROUP), "member-a")
    assert ops.record_attempt(SHARD, entry_id, 2) == RECORDED
    assert pending_of(client, SHARD) == {entry_id: 2}
    client.xack(SHARD, GROUP, entry_id)
    assert ops.record_attempt(SHARD, entry_id, 3) == NOT_PENDING
    client.close()


async def run_listener_until(coordinator, handler, condition, **options) -> Listener:
    listener = Listener(handler, stream_prefix=PREFIX, consumer_group=GROUP,
                        coordinator_url=coordinator.url, redis_url=coordinator.redis_url,
                        member_ids=["member-b"], **options)
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        with trio.fail_after(20):
            while not condition():
                await trio.sleep(0.02)
        listener.stop()
    return listener


def earlier_life(redis_url: str, stream: str, counts: dict[str, int]) -> dict[str, str]:
    """Entries a crashed process had read (value -> id), with the delivery counts given."""
    client = connect(redis_url)
    try:
        ids: dict[str, str] = {}
        for value in counts:
            ids[value] = str(client.xadd(stream, {"key": value, "value": value}))
        client.xreadgroup(GROUP, "member-x", {stream: ">"}, count=100)
        for value, count in counts.items():
            client.xclaim(stream, GROUP, "member-x", 0, [ids[value]], retrycount=count,
                          justid=True)
        return ids
    finally:
        client.close()


async def test_p1_a_claimed_entry_at_the_limit_is_dead_lettered_and_one_below_recorded_first(
        coordinator):
    [stream] = await set_shards(coordinator.url, PREFIX, GROUP, 1)
    ids = earlier_life(coordinator.redis_url, stream, {"spent": 4, "once": 1})
    client = connect(coordinator.redis_url)
    seen: list[tuple[str, int, int]] = []

    async def handle(message) -> None:
        count = pending_of(client, stream)[message.id]  # as Redis has it during the call
        seen.append((message.value, message.attempt, count))

    dead_stream = default_dead_letter_stream(PREFIX, GROUP)
    try:
        listener = await run_listener_until(
            coordinator, handle, lambda: client.xlen(dead_stream) == 1 and len(seen) == 1
            and pending_count(coordinator.redis_url, (stream,), GROUP) == 0,
            retry=RetryPolicy(max_deliveries=4, backoff_ms=0))
        (_, fields), = client.xrange(dead_stream)
    finally:
        client.close()
    assert seen == [("once", 2, 2)], "the call after a read is recorded before it runs"
    assert fields["value"] == "spent" and fields["rsc-source-id"] == ids["spent"]
    assert (fields["rsc-deliveries"], fields["rsc-error"]) == ("4", "crashed")
    stats = listener.members[0].stats
    assert (stats.processed, stats.dead_lettered, stats.failed) == (1, 1, 0)


async def test_p1_a_raising_handler_gets_exactly_max_deliveries_calls_counted_in_redis(coordinator):
    [stream] = await set_shards(coordinator.url, PREFIX, GROUP, 1)
    write_messages(coordinator.redis_url, (stream,), [("k", "bad"), ("k", "after")])
    client = connect(coordinator.redis_url)
    seen: list[tuple[str, int, int]] = []

    async def handle(message) -> None:
        seen.append((message.value, message.attempt, pending_of(client, stream)[message.id]))
        if message.value == "bad":
            raise RuntimeError("no")

    dead_stream = default_dead_letter_stream(PREFIX, GROUP)
    try:
        await run_listener_until(
            coordinator, handle, lambda: client.xlen(dead_stream) == 1 and len(seen) == 4,
            retry=RetryPolicy(max_deliveries=3, backoff_ms=0))
        (_, fields), = client.xrange(dead_stream)
    finally:
        client.close()
    assert seen == [("bad", 1, 1), ("bad", 2, 2), ("bad", 3, 3), ("after", 1, 1)], \
        "one key: the later message waits until the failing one is dead-lettered (L4)"
    assert (fields["rsc-deliveries"], fields["rsc-error"]) == ("3", "RuntimeError: no")


async def test_p1_the_default_mode_reports_a_crash_loop_and_dead_letters_nothing(coordinator,
                                                                                 caplog):
    caplog.set_level("WARNING", logger="rsc.member")
    [stream] = await set_shards(coordinator.url, PREFIX, GROUP, 1)
    ids = earlier_life(coordinator.redis_url, stream, {"looping": 11, "fresh": 1})
    seen: list[str] = []

    async def handle(message) -> None:
        seen.append(message.value)
        if message.value == "looping":
            raise RuntimeError("still broken")

    client = connect(coordinator.redis_url)
    try:
        listener = await run_listener_until(coordinator, handle, lambda: len(seen) == 2)
        assert not client.exists(default_dead_letter_stream(PREFIX, GROUP))
        assert list(pending_of(client, stream)) == [ids["looping"]], "it stays pending"
    finally:
        client.close()
    assert listener.members[0].stats.redelivered == 1
    lines = [r.getMessage() for r in caplog.records if "claimed with delivery count" in r.getMessage()]
    assert lines == [f"member member-b: {stream} {ids['looping']} claimed with delivery count 12 "
                     "(a handler keeps failing or crashing on it; a RetryPolicy dead-letters it)"]


async def test_p1_a_pending_entry_whose_body_was_trimmed_is_acked_not_dead_lettered(coordinator):
    [stream] = await set_shards(coordinator.url, PREFIX, GROUP, 1)
    ids = earlier_life(coordinator.redis_url, stream, {"trimmed": 2, "kept": 1})
    client = connect(coordinator.redis_url)
    client.xdel(stream, ids["trimmed"])
    seen: list[str] = []

    async def handle(message) -> None:
        seen.append(message.value)

    try:
        listener = await run_listener_until(
            coordinator, handle, lambda: seen == ["kept"]
            and pending_count(coordinator.redis_url, (stream,), GROUP) == 0,
            retry=RetryPolicy(max_deliveries=2, backoff_ms=0))
        assert not client.exists(default_dead_letter_stream(PREFIX, GROUP))
    finally:
        client.close()
    assert listener.members[0].stats.gone_pending == 1


async def test_p1_describe_group_shows_each_shards_highest_pending_delivery_count(coordinator):
    streams = await set_shards(coordinator.url, PREFIX, GROUP, 2)
    earlier_life(coordinator.redis_url, streams[0], {"a": 1, "b": 12, "c": 3})
    async with open_session(coordinator.url, "admin") as admin:
        response = await admin.request(m.DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                                       consumer_group=GROUP))
    assert isinstance(response, m.GroupDescription)
    assert [(shard.pending, shard.max_delivery_count) for shard in response.shards] == [
        (3, 12), (0, None)]
    wire = encode(response)
    assert '"maxDeliveryCount":12' in wire.replace(" ", "")
    assert "; an entry was delivered 12 times" in lag_summary(group_view(response).totals).plain


async def test_p2_members_report_their_dead_letter_stream_in_their_heartbeat(coordinator):
    await set_shards(coordinator.url, PREFIX, GROUP, 1)
    descriptions: list[m.GroupDescription] = []

    async def describe() -> bool:
        async with open_session(coordinator.url, "admin") as admin:
            response = await admin.request(m.DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                                           consumer_group=GROUP))
        assert isinstance(response, m.GroupDescription)
        descriptions.append(response)
        return bool(response.members)

    listener = Listener(lambda message: None, stream_prefix=PREFIX, consumer_group=GROUP,
                        coordinator_url=coordinator.url, redis_url=coordinator.redis_url,
                        member_ids=["member-b"], retry=RetryPolicy())
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        with trio.fail_after(20):
            while not await describe():
                await trio.sleep(0.05)
        listener.stop()
    [member] = descriptions[-1].members
    assert member.dead_letter_stream == "{poison}:dead:billing"
    with pytest.raises(ValueError, match="deadLetterStream"):
        m.Heartbeat(request_id=0, stream_prefix=PREFIX, consumer_group=GROUP, member_id="x",
                    member_epoch=0, dead_letter_stream="")


async def test_p1_a_member_sigkilled_mid_message_counts_that_call(coordinator, tmp_path: Path):
    streams = await set_shards(coordinator.url, PREFIX, GROUP, 1)
    write_messages(coordinator.redis_url, streams, [("k", "slow"), ("k", "next")])
    calls_file = tmp_path / "calls"
    calls_file.touch()
    command = [sys.executable, "-m", "tests.poison_listener", coordinator.url,
               coordinator.redis_url, PREFIX, GROUP, str(calls_file), "none", "3"]

    def lines() -> list[str]:
        return calls_file.read_text().splitlines()

    hanging = await trio.lowlevel.open_process(command, cwd=ROOT, stderr=subprocess.DEVNULL,
                                               env={**os.environ, "POISON_HANG": "slow"})
    try:
        with trio.fail_after(60):
            while lines() != ["slow 1"]:
                await trio.sleep(0.02)
    finally:
        hanging.kill()  # SIGKILL, mid-message
        await hanging.wait()
    starts, crashes, _ = await supervise(command, lambda: lines()[-1:] == ["next 2"] and
                                         pending_count(coordinator.redis_url, streams, GROUP) == 0,
                                         max_starts=2)
    assert (starts, crashes) == (1, 0)
    # the killed call counted, so the next call of "slow" is its 2nd; "next" was read by the
    # killed process and never called: the read counted it once (P1), so its first call is 2 too
    assert lines() == ["slow 1", "slow 2", "next 2"]


async def test_p1_counts_survive_a_reshard_that_moves_the_pending_entry(coordinator):
    [old] = await set_shards(coordinator.url, PREFIX, GROUP, 1)
    ids = earlier_life(coordinator.redis_url, old, {"x": 2})
    new_streams = await set_shards(coordinator.url, PREFIX, GROUP, 2)  # v1 sealed, draining
    assert old not in new_streams
    client = connect(coordinator.redis_url)
    seen: list[tuple[str, int, int]] = []

    async def handle(message) -> None:
        seen.append((message.value, message.attempt, pending_of(client, message.shard)[message.id]))
        raise RuntimeError("still no")

    dead_stream = default_dead_letter_stream(PREFIX, GROUP)
    try:
        await run_listener_until(coordinator, handle, lambda: client.xlen(dead_stream) == 1,
                                 retry=RetryPolicy(max_deliveries=3, backoff_ms=0))
        (_, fields), = client.xrange(dead_stream)
    finally:
        client.close()
    assert seen == [("x", 3, 3)], "the count came along with the entry's shard"
    assert (fields["rsc-source-stream"], fields["rsc-source-id"]) == (old, ids["x"])
    assert fields["rsc-deliveries"] == "3"


async def test_l4_a_message_waiting_for_its_next_attempt_holds_no_worker_and_is_abandoned_at_once(
        coordinator):
    [stream] = await set_shards(coordinator.url, PREFIX, GROUP, 1)
    write_messages(coordinator.redis_url, (stream,), [("k", "x"), ("k", "after"), ("j", "other")])
    seen: list[str] = []

    async def handle(message) -> None:
        seen.append(message.value)
        if message.value == "x":
            raise RuntimeError("not yet")

    listener = Listener(handle, stream_prefix=PREFIX, consumer_group=GROUP,
                        coordinator_url=coordinator.url, redis_url=coordinator.redis_url,
                        member_ids=["member-b"], runtime_max_concurrency=1,  # one worker
                        retry=RetryPolicy(max_deliveries=3, backoff_ms=600_000))
    with trio.fail_after(40):
        async with trio.open_nursery() as nursery:
            await nursery.start(listener.run)
            while seen != ["x", "other"]:  # the one worker went on while "x" waits
                await trio.sleep(0.02)
            stopping = trio.current_time()
            listener.stop()
    # the member left without waiting for the 10 minutes of the backoff, nor for its drain
    # timeout (30 s): the wait was abandoned at once
    assert trio.current_time() - stopping < listener.members[0].core.config.drain_timeout_s
    client = connect(coordinator.redis_url)
    try:
        assert pending_of(client, stream) != {}
        counts = list(pending_of(client, stream).values())
    finally:
        client.close()
    assert "after" not in seen, "the later message of its key waited (L4)"
    assert counts[0] == 1, "no ack, and no call recorded that did not run"


async def test_l4_a_retry_after_its_wait_comes_back_before_later_messages_of_its_key(coordinator):
    [stream] = await set_shards(coordinator.url, PREFIX, GROUP, 1)
    write_messages(coordinator.redis_url, (stream,), [("k", "x"), ("k", "after"), ("j", "other")])
    client = connect(coordinator.redis_url)
    seen: list[tuple[str, int, int]] = []

    async def handle(message) -> None:
        seen.append((message.value, message.attempt, pending_of(client, stream)[message.id]))
        if message.value == "x" and message.attempt < 3:
            raise RuntimeError("not yet")

    try:
        await run_listener_until(
            coordinator, handle, lambda: len(seen) == 5
            and pending_count(coordinator.redis_url, (stream,), GROUP) == 0,
            runtime_max_concurrency=1, retry=RetryPolicy(max_deliveries=3, backoff_ms=50))
    finally:
        client.close()
    assert seen == [("x", 1, 1), ("other", 1, 1), ("x", 2, 2), ("x", 3, 3), ("after", 1, 1)]


async def test_p1_with_ack_before_the_calls_are_counted_in_the_process_and_acked_once(
        coordinator):
    [stream] = await set_shards(coordinator.url, PREFIX, GROUP, 1)
    write_messages(coordinator.redis_url, (stream,), [("k", "x"), ("k", "after")])
    seen: list[tuple[str, int]] = []

    async def handle(message) -> None:
        seen.append((message.value, message.attempt))
        if message.value == "x":
            raise RuntimeError("lost anyway")

    client = connect(coordinator.redis_url)
    dead_stream = default_dead_letter_stream(PREFIX, GROUP)
    try:
        listener = await run_listener_until(
            coordinator, handle, lambda: client.xlen(dead_stream) == 1 and len(seen) == 3,
            ack_policy=AckPolicy.BEFORE, retry=RetryPolicy(max_deliveries=2, backoff_ms=20))
        (_, fields), = client.xrange(dead_stream)
        assert pending_of(client, stream) == {}
    finally:
        client.close()
    assert seen == [("x", 1), ("x", 2), ("after", 1)], "acked first: nothing pending to count"
    assert fields["rsc-deliveries"] == "2"
    assert listener.members[0].stats.acked == 2, "each entry acked once, before its first call"
