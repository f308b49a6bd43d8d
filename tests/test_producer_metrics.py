"""K11: the library's producers expose their counters to prometheus_client (rsc/member/
producer_metrics.py), against a real coordinator and Redis."""

from __future__ import annotations

import trio
from prometheus_client import REGISTRY

from rsc.member.producer import open_producer
from tests.test_member_support import set_shards


def sample(name: str, prefix: str) -> float | None:
    return REGISTRY.get_sample_value(name, {"prefix": prefix})


async def test_k11_a_producer_shows_what_it_sent_on_the_default_registry(coordinator):
    await set_shards(coordinator.url, "k11sent", "billing", 2)
    async with open_producer(coordinator.url, coordinator.redis_url, "k11sent") as producer:
        await producer.send_batch([(f"k{n}", f"v{n}") for n in range(25)])
        assert sample("rsc_producer_sent_total", "k11sent") == 25
        assert sample("rsc_producer_unconfirmed", "k11sent") == 0
        assert sample("rsc_producer_oldest_unconfirmed_seconds", "k11sent") == 0
        assert sample("rsc_replica_wait_shortfall_total", "k11sent") == 0


async def test_k11_a_stuck_producer_shows_its_unconfirmed_records_and_their_age(coordinator):
    async with open_producer(coordinator.url, coordinator.redis_url, "k11stuck") as producer:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(producer.send_batch, [("k", "waits"), ("j", "too")])  # no routing
            with trio.fail_after(10):
                while not (sample("rsc_producer_oldest_unconfirmed_seconds", "k11stuck") or 0) > 0.2:
                    await trio.sleep(0.05)
            assert sample("rsc_producer_unconfirmed", "k11stuck") == 2
            await set_shards(coordinator.url, "k11stuck", "billing", 1)  # routing: delivered
            with trio.fail_after(20):
                while sample("rsc_producer_unconfirmed", "k11stuck") != 0:
                    await trio.sleep(0.05)
        assert sample("rsc_producer_sent_total", "k11stuck") == 2
        assert sample("rsc_producer_oldest_unconfirmed_seconds", "k11stuck") == 0
