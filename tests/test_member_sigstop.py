"""D1 against real processes: a consumer frozen (SIGSTOP) past its lease never starts a
handler call on the lease it lost.

A real redis-server, a real `rsc coordinator` (lease 1500 ms) and two `rsc consume`
processes with slow handlers and a full backlog. Each consumer writes every D1 decision
(handler start or ack, with its own view: epoch, lease sent-at, verdict) to a trace file
(RSC_MEMBER_TRACE, monotonic ms, comparable across processes). Each consumer in turn is
SIGSTOPped until its shards have moved to the other one, then SIGCONTed. Afterwards:

- no handler call started after a pause on the lease held before it (member's own view),
  nor at the member epoch it had before it (independent of the lease bookkeeping);
- every message written was processed (lost = 0), nothing stays pending; duplicates are
  counted and reported, as at-least-once allows them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import attrs
import pytest
import trio

from tests.processes import ROOT, spawn_coordinator
from tests.test_member_support import pending_count, set_shards, write_messages

pytestmark = pytest.mark.faults  # the fault step of .ci/run: python -m pytest -q -m faults

PREFIX, GROUP = "faults", "sigstop"
SHARDS = 4
LEASE_TTL_MS = 1500
WORK_MS = 20
BACKLOG = 1500  # written before the first pause: every consumer has a full queue
RATE_PER_S = 100  # written continuously while the pauses happen


def now_ms() -> float:
    return time.monotonic() * 1000.0


@attrs.define
class Consumer:
    """One `rsc consume` child: its processed lines, its events and the shards it holds."""

    name: str
    process: trio.Process
    trace: Path
    processed: list[dict] = attrs.field(factory=list)
    events: list[dict] = attrs.field(factory=list)
    holds: set[str] = attrs.field(factory=set)

    async def collect_stdout(self) -> None:
        assert self.process.stdout is not None
        rest = b""
        async for chunk in self.process.stdout:
            *complete, rest = (rest + chunk).split(b"\n")
            self.processed.extend(json.loads(line) for line in complete if line)

    async def collect_events(self) -> None:
        assert self.process.stderr is not None
        rest = b""
        async for chunk in self.process.stderr:
            *complete, rest = (rest + chunk).split(b"\n")
            for line in complete:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # a log line, not an event
                self.events.append(event)
                shards = set(event.get("shards") or ())
                if event["event"] == "assigned":
                    self.holds |= shards
                elif event["event"] in ("revoked", "fenced"):
                    self.holds -= shards
                elif event["event"] == "left":
                    self.holds.clear()

    def trace_lines(self) -> list[dict]:
        with self.trace.open(encoding="utf-8") as file:
            return [json.loads(line) for line in file if line.strip()]


async def wait_for(condition, timeout: float, what: str) -> None:
    """Poll `condition` until it holds (bounded)."""
    with trio.move_on_after(timeout) as scope:
        while not condition():
            await trio.sleep(0.02)
    assert not scope.cancelled_caught, f"timed out after {timeout} s waiting for {what}"


@attrs.frozen
class FrozenRun:
    """What a run of `freeze_each_consumer_in_turn` saw: the consumers, each pause as
    (victim, stopped at, continued at), and how many messages were written."""

    consumers: list[Consumer]
    pauses: list[tuple[Consumer, float, float]]
    written: int


async def freeze_each_consumer_in_turn(redis_url: str, tmp_path: Path, nursery: trio.Nursery,
                                       group: str, consumer_argv) -> FrozenRun:
    """The scenario: a coordinator (lease LEASE_TTL_MS), SHARDS shards with a BACKLOG and
    RATE_PER_S more written throughout, two consumer processes (`consumer_argv(url, redis_url)`,
    each tracing its D1 decisions); each in turn SIGSTOPped until its shards moved to the
    other, then SIGCONTed; then everything processed, nothing pending, both stopped by SIGTERM
    with exit 0."""
    coordinator, url = await spawn_coordinator(redis_url, "--lease-ttl-ms", str(LEASE_TTL_MS))
    consumers: list[Consumer] = []
    try:
        streams = await set_shards(url, PREFIX, group, SHARDS)
        written = 0

        def write(count: int) -> None:
            nonlocal written
            write_messages(redis_url, streams, [(f"k{n % 64}", str(n))
                                                for n in range(written, written + count)])
            written += count

        await trio.to_thread.run_sync(write, BACKLOG)
        for name in ("a", "b"):
            trace = tmp_path / f"trace-{name}.jsonl"
            process = await trio.lowlevel.open_process(
                consumer_argv(url, redis_url), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1", "RSC_MEMBER_TRACE": str(trace)})
            consumers.append(Consumer(name, process, trace))
            nursery.start_soon(consumers[-1].collect_stdout)
            nursery.start_soon(consumers[-1].collect_events)

        writing = trio.CancelScope()
        writer_done = trio.Event()

        async def keep_writing() -> None:
            try:
                with writing:
                    while True:
                        await trio.sleep(0.1)
                        await trio.to_thread.run_sync(write, RATE_PER_S // 10)
            finally:
                writer_done.set()

        nursery.start_soon(keep_writing)

        def both_hold_shards() -> bool:
            return (all(c.holds for c in consumers)
                    and set().union(*(c.holds for c in consumers)) == set(streams))

        pauses: list[tuple[Consumer, float, float]] = []
        for victim, survivor in ((consumers[0], consumers[1]), (consumers[1], consumers[0])):
            await wait_for(both_hold_shards, 20, "both consumers to hold shards")
            seen = len(victim.processed)
            await wait_for(lambda v=victim, n=seen: len(v.processed) > n + 20, 10,
                           f"consumer {victim.name} to be busy")
            stopped_at = now_ms()
            victim.process.send_signal(signal.SIGSTOP)
            # its last heartbeat was sent before the stop: its lease ends by stop + TTL
            await wait_for(lambda s=survivor, t=stopped_at: s.holds == set(streams)
                           and now_ms() > t + LEASE_TTL_MS + 100, 20,
                           f"consumer {victim.name}'s shards to move to {survivor.name}")
            continued_at = now_ms()
            victim.process.send_signal(signal.SIGCONT)
            pauses.append((victim, stopped_at, continued_at))
        await wait_for(both_hold_shards, 20, "the last victim to rejoin")

        writing.cancel()
        with trio.fail_after(10):
            await writer_done.wait()

        def everything_processed() -> bool:
            values = {line["value"] for c in consumers for line in c.processed}
            return len(values) >= written

        await wait_for(everything_processed, 60, "every message to be processed")
        await wait_for(lambda: pending_count(redis_url, streams, group) == 0, 20,
                       "nothing pending")
        for consumer in consumers:
            consumer.process.send_signal(signal.SIGTERM)
        with trio.fail_after(20):
            for consumer in consumers:
                assert await consumer.process.wait() == 0
    finally:
        for process in [*(c.process for c in consumers), coordinator]:
            if process.returncode is None:
                process.kill()
                with trio.move_on_after(10):
                    await process.wait()
    return FrozenRun(consumers, pauses, written)


@attrs.define
class HandlerStarts:
    """The D1 decisions of the victims after their pauses, from their traces."""

    after_lost_lease: list[dict] = attrs.field(factory=list)  # on the lease sent before the freeze
    at_old_epoch: list[dict] = attrs.field(factory=list)  # at the epoch held before it
    out_of_lease: list[dict] = attrs.field(factory=list)  # out of the member's own lease, any time
    refused_after_waking: dict[str, int] = attrs.field(factory=dict)  # by verdict
    acks_refused_after_waking: int = 0


def handler_starts_after_pauses(pauses: list[tuple[Consumer, float, float]]) -> HandlerStarts:
    found = HandlerStarts()
    for victim, stopped_at, continued_at in pauses:
        lines = victim.trace_lines()
        starts = [line for line in lines if line["what"] == "handler"]
        before = [line for line in starts if line["t"] < stopped_at and line["verdict"] == "allowed"]
        assert before, f"{victim.name} ran handlers before its pause"
        epoch_before = before[-1]["memberEpoch"]
        found.acks_refused_after_waking += sum(
            1 for line in lines if line["what"] == "ack" and line["t"] >= continued_at
            and line["verdict"] != "allowed")
        for line in starts:
            if line["t"] < continued_at:
                continue
            if line["verdict"] != "allowed":
                found.refused_after_waking[line["verdict"]] = found.refused_after_waking.get(
                    line["verdict"], 0) + 1
                continue
            if line["leaseSentAt"] is None or line["leaseSentAt"] <= stopped_at:
                found.after_lost_lease.append(line)
            if line["memberEpoch"] <= epoch_before:
                found.at_old_epoch.append(line)
        found.out_of_lease.extend(line for line in starts if line["verdict"] == "allowed"
                                  and line["t"] - line["leaseSentAt"] >= line["leaseTtlMs"])
    return found


def lost_and_duplicates(run: FrozenRun) -> tuple[set[str], int]:
    values = [line["value"] for c in run.consumers for line in c.processed]
    return {str(n) for n in range(run.written)} - set(values), len(values) - len(set(values))


async def test_d1_a_consumer_frozen_past_its_lease_starts_no_handler_on_the_lost_lease(
        redis_url, tmp_path, nursery):
    run = await freeze_each_consumer_in_turn(redis_url, tmp_path, nursery, GROUP, lambda url, redis: [
        sys.executable, "-m", "rsc", "consume", PREFIX, GROUP, "--coordinator", url,
        "--redis-url", redis, "--workers", "4", "--work-ms", str(WORK_MS), "--events"])
    found = handler_starts_after_pauses(run.pauses)
    lost, duplicates = lost_and_duplicates(run)
    print(f"\nSIGSTOP x{len(run.pauses)}: {run.written} messages, handler calls after a lost lease "
          f"{len(found.after_lost_lease)}, at the pre-pause epoch {len(found.at_old_epoch)}, out of "
          f"the member's own lease {len(found.out_of_lease)}, lost {len(lost)}, duplicates "
          f"{duplicates}, handler calls refused after waking {found.refused_after_waking}, "
          f"ack batches refused after waking {found.acks_refused_after_waking}")
    assert found.after_lost_lease == [], found.after_lost_lease[:5]
    assert found.at_old_epoch == [], found.at_old_epoch[:5]
    assert found.out_of_lease == [], found.out_of_lease[:5]
    assert not lost, sorted(lost)[:10]
