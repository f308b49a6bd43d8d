"""D1 on the asyncio host against real processes: an asyncio consumer frozen (SIGSTOP) past
its lease never starts a handler call on the lease it lost.

As tests/test_member_sigstop.py does for `rsc consume`, with two asyncio consumer
processes (this module run as a program: `rsc.member.aio` listeners whose handlers await
`asyncio.sleep`), a real redis-server and a real `rsc coordinator` (lease 1500 ms). Each
consumer traces every D1 decision (RSC_MEMBER_TRACE); each in turn is SIGSTOPped until
its shards moved to the other, then SIGCONTed. Afterwards: no handler call started on a
lease sent before a pause, nor at the epoch held before it, nor outside the member's own
lease; every message processed (lost = 0); both leave on SIGTERM (exit 0).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import trio

from rsc.member.aio import listener
from rsc.member.cli import event_line, message_line
from rsc.member.reconcile import Event
from rsc.member.runtime import Message
from tests.processes import ROOT, spawn_coordinator
from tests.test_member_sigstop import Consumer, now_ms, wait_for
from tests.test_member_support import pending_count, set_shards, write_messages

PREFIX, GROUP = "faults", "aio-sigstop"
SHARDS = 4
LEASE_TTL_MS = 1500
WORK_MS = 20
BACKLOG = 1500
RATE_PER_S = 100


def consumer_main(url: str, redis_url: str) -> None:
    """The child: one asyncio member (4 workers) printing what it handled and its events."""

    def on_event(member_id: str, event: Event) -> None:
        sys.stderr.write(event_line(member_id, event) + "\n")
        sys.stderr.flush()

    @listener(PREFIX, GROUP, coordinator_url=url, redis_url=redis_url,
              runtime_max_concurrency=4, on_event=on_event)
    async def handle(message: Message) -> None:
        await asyncio.sleep(WORK_MS / 1000)
        sys.stdout.write(message_line(message) + "\n")
        sys.stdout.flush()

    async def main() -> None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, handle.stop)
        await handle.run()

    asyncio.run(main())


async def test_d1_an_asyncio_consumer_frozen_past_its_lease_starts_no_handler_on_the_lost_lease(
        redis_url, tmp_path, nursery):
    coordinator, url = await spawn_coordinator(redis_url, "--lease-ttl-ms", str(LEASE_TTL_MS))
    consumers: list[Consumer] = []
    try:
        streams = await set_shards(url, PREFIX, GROUP, SHARDS)
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
                [sys.executable, "-m", "tests.test_aio_sigstop", url, redis_url],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", "RSC_MEMBER_TRACE": str(trace)})
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
            return len({line["value"] for c in consumers for line in c.processed}) >= written

        await wait_for(everything_processed, 60, "every message to be processed")
        await wait_for(lambda: pending_count(redis_url, streams, GROUP) == 0, 20,
                       "nothing pending")
        for consumer in consumers:
            consumer.process.send_signal(signal.SIGTERM)
        with trio.fail_after(20):
            for consumer in consumers:
                assert await consumer.process.wait() == 0
        left = [c.name for c in consumers if any(e["event"] == "left" for e in c.events)]
        assert left == ["a", "b"], left
    finally:
        for process in [*(c.process for c in consumers), coordinator]:
            if process.returncode is None:
                process.kill()
                with trio.move_on_after(10):
                    await process.wait()

    after_lost_lease: list[dict] = []
    at_old_epoch: list[dict] = []
    out_of_lease: list[dict] = []
    fenced_on_waking = 0
    for victim, stopped_at, continued_at in pauses:
        lines = victim.trace_lines()
        starts = [line for line in lines if line["what"] == "handler"]
        before = [line for line in starts if line["t"] < stopped_at and line["verdict"] == "allowed"]
        assert before, f"{victim.name} ran handlers before its pause"
        epoch_before = before[-1]["memberEpoch"]
        for line in starts:
            if line["t"] < continued_at:
                continue
            if line["verdict"] != "allowed":
                fenced_on_waking += 1
                continue
            if line["leaseSentAt"] is None or line["leaseSentAt"] <= stopped_at:
                after_lost_lease.append(line)
            if line["memberEpoch"] <= epoch_before:
                at_old_epoch.append(line)
        out_of_lease.extend(line for line in starts if line["verdict"] == "allowed"
                            and line["t"] - line["leaseSentAt"] >= line["leaseTtlMs"])
        assert any(e["event"] == "fenced" for e in victim.events), victim.name

    values = [line["value"] for c in consumers for line in c.processed]
    lost = {str(n) for n in range(written)} - set(values)
    print(f"\nasyncio SIGSTOP x{len(pauses)}: {written} messages, handler calls after a lost "
          f"lease {len(after_lost_lease)}, at the pre-pause epoch {len(at_old_epoch)}, out of "
          f"the member's own lease {len(out_of_lease)}, lost {len(lost)}, duplicates "
          f"{len(values) - len(set(values))}, handler calls refused on waking {fenced_on_waking}")
    assert after_lost_lease == [], after_lost_lease[:5]
    assert at_old_epoch == [], at_old_epoch[:5]
    assert out_of_lease == [], out_of_lease[:5]
    assert not lost, sorted(lost)[:10]


if __name__ == "__main__":
    consumer_main(sys.argv[1], sys.argv[2])
