"""L3 (docs/protocol.md, "The Python library"): bounded sends, in trio, asyncio and threads.

A send with `timeout=` (or the producer's `send_timeout_s`) that Redis does not confirm in
time raises `SendTimeout`: `not_accepted` lists the records the producer never took (no
routing yet: safe to send again), `confirmed` those Redis has. Records that were accepted
are still delivered (D2) once Redis answers again. Redis is stopped for real: a
redis-server of the test's own, SIGSTOPped, then SIGCONTed.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import redis
import trio

from rsc.common.redis_server import EmbeddedRedis
from rsc.errors import RscError, SendTimeout
from rsc.member import aio, sync
from rsc.member.producer import open_producer
from tests.conftest import start_coordinator
from tests.redis_rigs import server_binary
from tests.test_member_support import set_shards

PREFIX, GROUP = "orders", "billing"


@pytest.fixture
def own_redis() -> Iterator[EmbeddedRedis]:
    """A redis-server of this test's own (it is stopped with SIGSTOP), ended by pid."""
    with EmbeddedRedis(binary=server_binary()) as server:
        yield server


def stored(redis_url: str, streams: tuple[str, ...]) -> int:
    client = redis.Redis.from_url(redis_url)
    try:
        return sum(int(client.xlen(stream)) for stream in streams)
    finally:
        client.close()


class Stopped:
    """SIGSTOP the redis-server now; SIGCONT on `resume()` (and at the latest on exit)."""

    def __init__(self, server: EmbeddedRedis) -> None:
        assert server.process is not None
        self.pid = server.process.pid
        self.stopped = False

    def __enter__(self) -> Stopped:
        os.kill(self.pid, signal.SIGSTOP)
        self.stopped = True
        return self

    def resume(self) -> None:
        if self.stopped:
            os.kill(self.pid, signal.SIGCONT)
            self.stopped = False

    def __exit__(self, *exc: object) -> None:
        self.resume()


def wait_stored(redis_url: str, streams: tuple[str, ...], count: int, timeout: float = 30) -> None:
    """Threads: poll until Redis holds `count` entries (bounded)."""
    import time

    deadline = time.monotonic() + timeout
    while stored(redis_url, streams) < count:
        assert time.monotonic() < deadline, f"{stored(redis_url, streams)} of {count} stored"
        time.sleep(0.05)


def check_timeout(exc: SendTimeout, records: int) -> None:
    assert isinstance(exc, RscError) and isinstance(exc, TimeoutError)
    assert exc.not_accepted == []  # routing was known: every record was taken (D2)
    assert set(exc.confirmed) <= set(range(records))
    assert "do not send them again" in str(exc)


async def test_l3_a_send_to_a_stopped_redis_times_out_and_is_delivered_after_trio(
        own_redis, nursery):
    coordinator = await start_coordinator(nursery, own_redis.url)
    streams = await set_shards(coordinator.url, PREFIX, GROUP, 2)
    async with open_producer(coordinator.url, own_redis.url, PREFIX) as producer:
        await producer.send("k0", "warm")  # routing and the storeId known
        with Stopped(own_redis) as stopped:
            with trio.fail_after(20), pytest.raises(SendTimeout) as caught:
                await producer.send_batch([("k1", "a"), ("k2", "b")], timeout=0.5)
            stopped.resume()
        check_timeout(caught.value, 2)
        await trio.to_thread.run_sync(wait_stored, own_redis.url, streams, 3)
    await coordinator.stop()


async def test_l3_send_timeout_s_bounds_a_thread_host_send_to_a_stopped_redis(own_redis, nursery):
    coordinator = await start_coordinator(nursery, own_redis.url)
    streams = await set_shards(coordinator.url, PREFIX, GROUP, 2)

    def produce() -> SendTimeout:
        with sync.open_producer(coordinator.url, own_redis.url, PREFIX,
                                send_timeout_s=0.5) as producer:
            producer.send("k0", "warm", timeout=20)
            with Stopped(own_redis) as stopped:
                try:
                    producer.send("k1", "a")  # the producer's send_timeout_s
                except SendTimeout as exc:
                    caught = exc
                else:
                    raise AssertionError("the send returned while Redis was stopped")
                stopped.resume()
            wait_stored(own_redis.url, streams, 2)  # D2: before close(), which ends deliveries
            return caught

    with trio.fail_after(60):
        check_timeout(await trio.to_thread.run_sync(produce), 1)
    await coordinator.stop()


async def test_l3_a_send_to_a_stopped_redis_times_out_and_is_delivered_after_asyncio(
        own_redis, nursery):
    coordinator = await start_coordinator(nursery, own_redis.url)
    streams = await set_shards(coordinator.url, PREFIX, GROUP, 2)

    async def produce() -> SendTimeout:
        async with aio.open_producer(coordinator.url, own_redis.url, PREFIX) as producer:
            await producer.send("k0", "warm")
            with Stopped(own_redis) as stopped:
                try:
                    await producer.send_batch([("k1", "a"), ("k2", "b")], timeout=0.5)
                except SendTimeout as exc:
                    caught = exc
                else:
                    raise AssertionError("the send returned while Redis was stopped")
                stopped.resume()
            await asyncio.to_thread(wait_stored, own_redis.url, streams, 3)
            return caught

    with trio.fail_after(60):
        check_timeout(await trio.to_thread.run_sync(lambda: asyncio.run(produce())), 2)
    await coordinator.stop()


async def test_l3_records_never_accepted_are_named_safe_to_send_again_in_every_host(coordinator):
    url, redis_url = coordinator.url, coordinator.redis_url  # "nowhere" has no routing
    records = [("k1", "a"), ("k2", "b"), (None, "c")]

    async def trio_send() -> Any:
        async with open_producer(url, redis_url, "nowhere") as producer:
            return await producer.send_batch(records, timeout=0.3)

    async def aio_send() -> Any:
        async with aio.open_producer(url, redis_url, "nowhere") as producer:
            return await producer.send_batch(records, timeout=0.3)

    def sync_send() -> Any:
        with sync.open_producer(url, redis_url, "nowhere", send_timeout_s=0.3) as producer:
            return producer.send_batch(records)

    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "trio": trio_send,
        "asyncio": lambda: trio.to_thread.run_sync(lambda: asyncio.run(aio_send())),
        "threads": lambda: trio.to_thread.run_sync(sync_send),
    }
    for host, call in calls.items():
        with trio.fail_after(20), pytest.raises(SendTimeout) as caught:
            await call()
        assert caught.value.not_accepted == [0, 1, 2], host
        assert caught.value.confirmed == {}, host
        assert "none was written" in str(caught.value), host


@pytest.mark.parametrize("timeout", [0, -1, "1"])
async def test_l3_a_timeout_that_is_no_positive_number_is_refused_before_sending(coordinator, timeout):
    streams = await set_shards(coordinator.url, PREFIX, GROUP, 2)
    async with open_producer(coordinator.url, coordinator.redis_url, PREFIX) as producer:
        with pytest.raises(TypeError if isinstance(timeout, str) else ValueError, match="timeout"):
            await producer.send("k", "v", timeout=timeout)
    assert stored(coordinator.redis_url, streams) == 0  # nothing was sent
