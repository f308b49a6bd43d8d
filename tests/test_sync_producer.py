"""The producer for threaded code (rsc.member.sync) against a real coordinator and redis-server."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
import trio

from rsc.member.sync import ProducerClosed, open_producer
from tests.test_member_support import set_shards

PREFIX, GROUP = "sync", "billing"


def entries(redis_url: str, streams: tuple[str, ...]) -> list[tuple[str, str]]:
    client: Any = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        return [(fields["key"], fields["value"]) for stream in streams
                for _, fields in client.xrange(stream)]
    finally:
        client.close()


async def test_d2_eight_threads_share_one_producer_and_lose_nothing(coordinator):
    streams = await set_shards(coordinator.url, PREFIX, GROUP, 4)

    def produce() -> tuple[list[str], int]:
        with open_producer(coordinator.url, coordinator.redis_url, PREFIX) as producer:
            def worker(thread: int) -> list[str]:
                ids = []
                for n in range(50):
                    ids.append(producer.send(f"t{thread}-k{n % 5}", f"{thread}-{n}"))
                ids += producer.send_batch([(f"t{thread}", f"{thread}-batch-{n}") for n in range(20)])
                return ids

            with ThreadPoolExecutor(8) as pool:
                ids = [entry for result in pool.map(worker, range(8)) for entry in result]
            return ids, producer.producer.sent

    with trio.fail_after(60):
        ids, sent = await trio.to_thread.run_sync(produce)
    written = entries(coordinator.redis_url, streams)
    expected = {f"{t}-{n}" for t in range(8) for n in range(50)} | {
        f"{t}-batch-{n}" for t in range(8) for n in range(20)}
    assert len(ids) == 8 * 70 == sent  # an entry id is unique within its shard only
    assert {value for _, value in written} == expected  # 0 lost
    assert len(written) == len(expected)  # nothing written twice


async def test_a_closed_producer_refuses_by_name(coordinator):
    await set_shards(coordinator.url, PREFIX, GROUP, 2)

    def use_after_close() -> None:
        producer = open_producer(coordinator.url, coordinator.redis_url, PREFIX)
        producer.send("k", "v")
        producer.close()
        producer.close()  # idempotent
        with pytest.raises(ProducerClosed, match="'sync' is closed"):
            producer.send("k", "again")

    with trio.fail_after(30):
        await trio.to_thread.run_sync(use_after_close)
