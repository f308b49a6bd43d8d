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


async def test_k11_rsc_produce_serves_metrics_healthz_and_readyz(coordinator):
    import subprocess
    import sys

    from rsc.common.redis_server import free_port
    from tests.helpers.http import http_get
    from tests.processes import ROOT

    await set_shards(coordinator.url, "k11tool", "billing", 2)
    port = free_port()
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "rsc", "produce", "k11tool", "--coordinator", coordinator.url,
         "--redis-url", coordinator.redis_url, "--metrics-port", str(port)],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        assert process.stdin is not None
        await process.stdin.send_all(b"".join(f"k{n}\tv{n}\n".encode() for n in range(10)))
        with trio.fail_after(20):
            while True:
                try:
                    metrics = (await http_get(port, "/metrics")).body.decode()
                except OSError:
                    metrics = ""
                if 'rsc_producer_sent_total{prefix="k11tool"} 10.0' in metrics:
                    break
                await trio.sleep(0.05)
        assert 'rsc_producer_unconfirmed{prefix="k11tool"} 0.0' in metrics
        assert "rsc_replica_wait_shortfall_total" in metrics
        assert (await http_get(port, "/healthz")).status == 200
        ready = await http_get(port, "/readyz")
        assert ready.status == 200, ready.body
        await process.stdin.aclose()
        with trio.fail_after(20):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def test_k11_the_coordinator_counts_replica_shortfalls(redis_url):
    import pytest

    from rsc.actors.ops.metrics import CoordinatorMetrics
    from rsc.actors.redis_io.store import MetadataStore, StoreError

    store = MetadataStore(redis_url, lease_ms=1000, min_replicas=1, wait_timeout_ms=10)
    metrics = CoordinatorMetrics()
    metrics.report_replica_shortfalls(lambda: store.replica_shortfalls)
    try:
        assert metrics.registry.get_sample_value("rsc_replica_wait_shortfall_total") == 0
        waited = store.client.execute_command("WAIT", 1, 10)  # this Redis has no replica
        with pytest.raises(StoreError, match="only 0 of the 1 replicas"):
            store._check_replicas(waited)
        assert metrics.registry.get_sample_value("rsc_replica_wait_shortfall_total") == 1
    finally:
        store.close()


def test_k11_produce_readyz_is_503_without_routing_or_with_a_record_waiting_past_a_lease():
    import attrs

    from rsc.tools.probes import producer_routes

    @attrs.define
    class Figures:  # what the routes read of a producer
        routing: object = None
        waited: float = 0.0
        stream_prefix: str = "orders"

        def oldest_unconfirmed_seconds(self) -> float:
            return self.waited

    figures = Figures()
    routes = producer_routes(figures, wait_limit_s=10)  # type: ignore[arg-type]
    first = routes["/readyz"]()
    assert first.status == 503 and b"no routing" in first.body
    figures.routing = object()
    assert routes["/readyz"]().status == 200
    figures.waited = 10.5
    late = routes["/readyz"]()
    assert late.status == 503 and b"10.5 s" in late.body
    assert routes["/healthz"]().status == 200
