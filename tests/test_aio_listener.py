"""The asyncio host (`rsc.member.aio`) against a real coordinator and redis-server.

Each test runs an asyncio program (`asyncio.run`, in a worker thread of the trio test)
whose listeners and producers run in trio's guest mode on its loop; the coordinator
runs in the test's own trio loop. Waits are bounded (`asyncio.timeout`), on conditions.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest
import redis
import redis.asyncio
import sniffio
import trio

from rsc.member.aio import listener, open_producer
from rsc.member.policies import AckPolicy, RetryPolicy
from rsc.member.pure.health import ListenerStatusJson
from rsc.member.redis_io.streams import StoreMismatch
from rsc.member.session import open_session
from rsc.member.shells.runtime import Message
from rsc.protocol import DescribeGroup, GroupDescription
from tests.processes import FAST_FLAGS, ROOT
from tests.test_member_support import pending_count, set_shards, write_messages

PREFIX, GROUP = "orders", "billing"
SHARDS = 4


def in_asyncio(main: Callable[[], Coroutine[Any, Any, Any]]) -> Awaitable[Any]:
    """Run `asyncio.run(main())` in a worker thread; its result (or exception) in trio."""
    return trio.to_thread.run_sync(lambda: asyncio.run(main()))


async def until(condition: Callable[[], bool], timeout: float = 30) -> None:
    """asyncio: poll `condition` until it holds (bounded)."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)


async def members_of_group(url: str) -> int:
    async with open_session(url, "admin") as session:
        described = await session.request(DescribeGroup(
            request_id=0, stream_prefix=PREFIX, consumer_group=GROUP))
    assert isinstance(described, GroupDescription), described
    return len(described.members)


def records(count: int, keys: int = 16) -> list[tuple[str, str]]:
    return [(f"k{n % keys}", str(n)) for n in range(count)]


def assert_key_order(seen: list[tuple[str, str]]) -> None:
    """Per key, values (written in increasing order) were handled in increasing order."""
    by_key: dict[str, list[int]] = defaultdict(list)
    for key, value in seen:
        by_key[key].append(int(value))
    for key, values in by_key.items():
        assert values == sorted(values), (key, values[:20])


async def test_async_handler_consumes_in_key_order_on_the_loop_and_leaves(coordinator):
    url, redis_url = coordinator.url, coordinator.redis_url
    streams = await set_shards(url, PREFIX, GROUP, SHARDS)
    total = 2000
    await trio.to_thread.run_sync(write_messages, redis_url, streams, records(total))
    seen: list[tuple[str, str]] = []
    libraries: set[str] = set()
    tasks: set[bool] = set()

    async def main() -> dict[str, Any]:
        @listener(PREFIX, GROUP, coordinator_url=url, redis_url=redis_url, concurrency=2,
                  runtime_max_concurrency=4)
        async def handle(message: Message) -> None:
            libraries.add(sniffio.current_async_library())
            tasks.add(asyncio.current_task() is not None)
            await asyncio.sleep(0)
            seen.append((message.key or "", message.value))

        async with handle.running():
            status = handle.status().to_json()
            await until(lambda: len(seen) >= total)
        return {"joined": status, "after": handle.status().to_json()}

    result = await in_asyncio(main)
    assert sorted(int(v) for _, v in seen) == list(range(total))  # each once, none lost
    assert_key_order(seen)
    assert libraries == {"asyncio"} and tasks == {True}
    assert all(m["joined"] for m in result["joined"]["members"])
    assert result["after"]["running"] is False and result["after"]["failure"] is None
    assert pending_count(redis_url, streams, GROUP) == 0  # every handled entry acked
    assert await members_of_group(url) == 0  # both left on exit


async def test_sync_handler_runs_in_a_worker_thread(coordinator):
    url, redis_url = coordinator.url, coordinator.redis_url
    streams = await set_shards(url, PREFIX, GROUP, SHARDS)
    total = 300
    await trio.to_thread.run_sync(write_messages, redis_url, streams, records(total))
    seen: list[tuple[str, str]] = []
    threads: set[int] = set()

    async def main() -> int:
        @listener(PREFIX, GROUP, coordinator_url=url, redis_url=redis_url)
        def handle(message: Message) -> None:
            threads.add(threading.get_ident())
            seen.append((message.key or "", message.value))

        async with handle.running():
            await until(lambda: len(seen) >= total)
        return threading.get_ident()

    loop_thread = await in_asyncio(main)
    assert sorted(int(v) for _, v in seen) == list(range(total))
    assert_key_order(seen)
    assert loop_thread not in threads
    assert pending_count(redis_url, streams, GROUP) == 0
    assert await members_of_group(url) == 0


async def test_handler_uses_asyncio_sleep_and_redis_asyncio(coordinator):
    url, redis_url = coordinator.url, coordinator.redis_url
    streams = await set_shards(url, PREFIX, GROUP, SHARDS)
    total = 500
    await trio.to_thread.run_sync(write_messages, redis_url, streams, records(total))

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(redis_url, decode_responses=True)

        @listener(PREFIX, GROUP, coordinator_url=url, redis_url=redis_url,
                  runtime_max_concurrency=8)
        async def handle(message: Message) -> None:
            await asyncio.sleep(0.002)
            await client.hset("written", message.value, message.key)

        async with handle.running():
            async with asyncio.timeout(30):
                while await client.hlen("written") < total:
                    await asyncio.sleep(0.05)
        await client.aclose()

    await in_asyncio(main)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    assert sorted(int(v) for v in client.hkeys("written")) == list(range(total))
    client.close()
    assert pending_count(redis_url, streams, GROUP) == 0


async def test_stop_from_a_handler_ends_run_after_draining_and_leaving(coordinator):
    url, redis_url = coordinator.url, coordinator.redis_url
    streams = await set_shards(url, PREFIX, GROUP, SHARDS)
    await trio.to_thread.run_sync(write_messages, redis_url, streams, records(400))
    handled: list[str] = []

    async def main() -> None:
        @listener(PREFIX, GROUP, coordinator_url=url, redis_url=redis_url)
        async def handle(message: Message) -> None:
            handled.append(message.value)
            if len(handled) == 50:
                handle.stop()

        async with asyncio.timeout(30):
            await handle.run()

    await in_asyncio(main)
    assert len(handled) >= 50
    client = redis.Redis.from_url(redis_url)
    acked = sum(int(info["entries-read"] or 0) - int(info["pending"]) for s in streams
                for info in client.xinfo_groups(s))
    client.close()
    assert acked == len(handled)  # drained: what ran was acked, what was not stays pending
    assert await members_of_group(url) == 0


async def test_stop_from_a_signal_handler_leaves(coordinator):
    """`stop()` from a callback outside any task (as `loop.add_signal_handler` calls it)."""
    url, redis_url = coordinator.url, coordinator.redis_url
    await set_shards(url, PREFIX, GROUP, SHARDS)

    async def main() -> list[ListenerStatusJson]:
        @listener(PREFIX, GROUP, coordinator_url=url, redis_url=redis_url)
        async def handle(message: Message) -> None:
            pass

        async with handle.running():
            joined = handle.status().to_json()
            asyncio.get_running_loop().call_soon(handle.stop)
            await until(lambda: not handle.status().to_json()["running"])  # drained and left
        with pytest.raises(RuntimeError, match="runs once"):
            async with handle.running():
                pass

        @listener(PREFIX, GROUP, coordinator_url=url, redis_url=redis_url)
        async def again(message: Message) -> None:
            pass

        async with again.running():  # a new guest run on the same loop
            rejoined = again.status().to_json()
        return [joined, rejoined]

    for status in await in_asyncio(main):
        assert all(m["joined"] and m["shards"] for m in status["members"])
    assert await members_of_group(url) == 0


async def test_a_failing_handler_never_kills_the_workers_and_dead_letters(coordinator, caplog):
    url, redis_url = coordinator.url, coordinator.redis_url
    caplog.set_level("WARNING", logger="rsc.member")
    streams = await set_shards(url, PREFIX, GROUP, SHARDS)
    total = 200
    await trio.to_thread.run_sync(write_messages, redis_url, streams, records(total, keys=10))
    good: list[str] = []
    attempts: dict[str, int] = defaultdict(int)

    async def main() -> ListenerStatusJson:
        @listener(PREFIX, GROUP, coordinator_url=url, redis_url=redis_url,
                  retry=RetryPolicy(max_deliveries=2, dead_letter_stream="dead", backoff_ms=1))
        async def handle(message: Message) -> None:
            if message.key == "k3":
                attempts[message.value] += 1
                raise ValueError(f"bad {message.value}")
            good.append(message.value)

        async with handle.running():
            await until(lambda: len(good) >= total * 9 // 10
                        and handle.members[0].stats.dead_lettered >= total // 10)
            return handle.status().to_json()

    status = await in_asyncio(main)
    bad = {str(n) for n in range(total) if n % 10 == 3}
    assert set(good) == {str(n) for n in range(total)} - bad
    assert set(attempts) == bad and set(attempts.values()) == {2}
    assert status["members"][0]["failed"] == 2 * len(bad)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    dead = client.xrange("dead")
    client.close()
    assert {fields["value"] for _, fields in dead} == bad
    assert all("bad" in fields["rsc-error"] for _, fields in dead)
    assert pending_count(redis_url, streams, GROUP) == 0
    failures = [r for r in caplog.records if "handler failed" in r.getMessage()]
    assert len(failures) == 2 * len(bad)
    assert {r.name for r in failures} == {"rsc.member.aio_workers"}  # the logger the guide names


async def test_a_failing_handler_without_retry_leaves_its_messages_pending(coordinator):
    url, redis_url = coordinator.url, coordinator.redis_url
    streams = await set_shards(url, PREFIX, GROUP, SHARDS)
    await trio.to_thread.run_sync(write_messages, redis_url, streams, records(100, keys=10))
    good: list[str] = []

    async def main() -> None:
        @listener(PREFIX, GROUP, coordinator_url=url, redis_url=redis_url)
        async def handle(message: Message) -> None:
            if message.key == "k7":
                raise RuntimeError("boom")
            good.append(message.value)

        async with handle.running():
            await until(lambda: len(good) >= 90 and handle.members[0].stats.failed >= 10)

    await in_asyncio(main)
    assert len(good) == 90
    assert pending_count(redis_url, streams, GROUP) == 10  # not acked: redelivered later


async def test_store_mismatch_is_raised_at_entry(coordinator):
    url, redis_url = coordinator.url, coordinator.redis_url
    await set_shards(url, PREFIX, GROUP, SHARDS)
    other_db = redis_url.rsplit("/", 1)[0] + "/1"  # the same server, a Redis without the storeId

    async def main() -> None:
        @listener(PREFIX, GROUP, coordinator_url=url, redis_url=other_db)
        async def handle(message: Message) -> None:
            raise AssertionError("never read")

        async with asyncio.timeout(20):
            async with handle.running():
                raise AssertionError("running() must not yield")

    with pytest.raises(StoreMismatch) as raised:
        await in_asyncio(main)
    assert other_db in str(raised.value) and url in str(raised.value)
    assert await members_of_group(url) == 0


async def test_producer_sends_and_a_listener_of_the_same_loop_consumes(coordinator):
    url, redis_url = coordinator.url, coordinator.redis_url
    streams = await set_shards(url, PREFIX, GROUP, SHARDS)
    seen: list[tuple[str, str, str, str]] = []

    async def main() -> tuple[str, list[str], list[tuple[str, str]]]:
        @listener(PREFIX, GROUP, coordinator_url=url, redis_url=redis_url)
        async def handle(message: Message) -> None:
            seen.append((message.shard, message.id, message.key or "", message.value))

        async with open_producer(url, redis_url, PREFIX) as producer, handle.running():
            solo = await producer.send("solo", "first")
            ids = await producer.send_batch(records(300))
            located = await producer.send_batch_located([(f"x{n % 3}", str(n)) for n in range(50)])
            await until(lambda: len(seen) >= 351)
        return solo, ids, located

    solo, ids, located = await in_asyncio(main)
    assert len(ids) == 300 and len(located) == 50
    batch = [(shard, entry_id) for shard, entry_id, key, _ in seen if key != "solo"]
    assert sorted(entry_id for _, entry_id in batch) == sorted(ids + [i for _, i in located])
    assert set(located) <= set(batch) and len(set(batch)) == 350
    assert [entry_id for _, entry_id, key, _ in seen if key == "solo"] == [solo]
    assert_key_order([(k, v) for _, _, k, v in seen if k != "solo"])
    assert pending_count(redis_url, streams, GROUP) == 0


async def test_ack_before_acks_first_even_when_the_handler_fails(coordinator):
    url, redis_url = coordinator.url, coordinator.redis_url
    streams = await set_shards(url, PREFIX, GROUP, SHARDS)
    total = 100
    await trio.to_thread.run_sync(write_messages, redis_url, streams, records(total))
    ran: list[str] = []

    async def main() -> None:
        @listener(PREFIX, GROUP, coordinator_url=url, redis_url=redis_url,
                  ack_policy=AckPolicy.BEFORE)
        async def handle(message: Message) -> None:
            ran.append(message.value)
            if int(message.value) % 2:
                raise ValueError("after the ack: at-most-once")

        async with handle.running():
            await until(lambda: len(ran) >= total)

    await in_asyncio(main)
    assert sorted(int(v) for v in ran) == list(range(total))
    assert pending_count(redis_url, streams, GROUP) == 0  # acked before running, failed or not


async def test_a_new_max_concurrency_changes_the_asyncio_workers(coordinator):
    url, redis_url = coordinator.url, coordinator.redis_url
    streams = await set_shards(url, PREFIX, GROUP, SHARDS)
    await trio.to_thread.run_sync(write_messages, redis_url, streams, records(64, keys=64))

    async def set_max_concurrency(value: str) -> None:
        admin = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "rsc", "admin", "--url", url, "set-max-concurrency", PREFIX,
            GROUP, value, stdout=asyncio.subprocess.DEVNULL)
        assert await admin.wait() == 0

    at_once: list[int] = []

    async def main() -> None:
        release = asyncio.Event()
        running = 0

        @listener(PREFIX, GROUP, coordinator_url=url, redis_url=redis_url,
                  runtime_max_concurrency=6)
        async def handle(message: Message) -> None:
            nonlocal running
            running += 1
            at_once.append(running)
            await release.wait()
            running -= 1

        await set_max_concurrency("2")
        async with handle.running():
            await until(lambda: running == 2)
            assert handle.members[0].stats.workers == 2
            await asyncio.sleep(0)
            assert max(at_once) == 2  # only two workers take work
            await set_max_concurrency("none")  # back to the member's capacity
            await until(lambda: running == 6)  # four more asyncio workers
            release.set()
            await until(lambda: handle.members[0].stats.processed >= 64)

    await in_asyncio(main)
    assert max(at_once) == 6


async def test_d1_a_worker_that_runs_first_after_a_freeze_refuses_the_next_entry(
        coordinator, tmp_path, monkeypatch):
    """A handler that blocks the loop past the lease freezes the whole member as a SIGSTOP
    would; the worker runs on before trio can, and D1 refuses the next entry right there."""
    url, redis_url = coordinator.url, coordinator.redis_url
    streams = await set_shards(url, PREFIX, GROUP, 1)
    total = 200
    await trio.to_thread.run_sync(write_messages, redis_url, streams, records(total, keys=50))
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv("RSC_MEMBER_TRACE", str(trace))
    lease_s = coordinator.config.lease_ttl_ms / 1000
    handled: list[str] = []

    async def main() -> int:
        @listener(PREFIX, GROUP, coordinator_url=url, redis_url=redis_url,
                  runtime_max_concurrency=1)
        async def handle(message: Message) -> None:
            handled.append(message.value)
            if len(handled) == 5:
                time.sleep(lease_s * 1.5)  # noqa: ASYNC251 - the freeze, on purpose

        async with handle.running():
            await until(lambda: len(set(handled)) >= total)
            return handle.members[0].stats.fences

    fences = await in_asyncio(main)
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    starts = [line for line in lines if line["what"] == "handler"]
    after_freeze = starts[5]  # the entry the worker took right after the frozen handler
    assert after_freeze["verdict"] == "lease expired", after_freeze
    assert fences >= 1
    allowed = [line for line in starts if line["verdict"] == "allowed"]
    assert all(line["t"] - line["leaseSentAt"] < line["leaseTtlMs"] for line in allowed)
    assert set(handled) == {str(n) for n in range(total)}


async def test_running_yields_while_the_coordinator_is_down_and_the_members_join_later(
        redis_url):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"ws://127.0.0.1:{port}"

    async def main() -> tuple[ListenerStatusJson, ListenerStatusJson]:
        @listener(PREFIX, GROUP, coordinator_url=url, redis_url=redis_url)
        async def handle(message: Message) -> None:
            pass

        coordinator = None
        try:
            async with handle.running(join_wait_s=0.2):
                before = handle.status().to_json()  # the service is up, its member still joining
                coordinator = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "rsc", "coordinator", "--redis-url", redis_url,
                    *FAST_FLAGS, "--port", str(port), cwd=ROOT,
                    stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
                await until(lambda: handle.status().to_json()["members"][0]["joined"])
                after = handle.status().to_json()
        finally:
            if coordinator is not None:
                coordinator.terminate()
                await coordinator.wait()
        return before, after

    before, after = await in_asyncio(main)
    assert before["running"] and not before["members"][0]["joined"]
    assert after["members"][0]["memberEpoch"] > 0


async def test_d3_a_redis_that_does_not_answer_is_said_with_its_url(coordinator, caplog):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead_redis = f"redis://127.0.0.1:{sock.getsockname()[1]}/0"
    url = coordinator.url

    def said() -> list[str]:
        return [record.getMessage() for record in caplog.records
                if record.levelname == "WARNING" and dead_redis in record.getMessage()]

    async def main() -> None:
        @listener(PREFIX, GROUP, coordinator_url=url, redis_url=dead_redis)
        async def handle(message: Message) -> None:
            pass

        async with handle.running(join_wait_s=0.2):
            await until(lambda: bool(said()))

    caplog.set_level("WARNING", logger="rsc.member")
    await in_asyncio(main)
    assert "connection refused" in said()[0] and "retrying" in said()[0], said()
