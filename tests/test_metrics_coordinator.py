"""Scrape a real coordinator's /metrics while members join, leave and get fenced."""

from __future__ import annotations

import trio
from prometheus_client.parser import text_string_to_metric_families

from rsc.actors.app import serve
from rsc.actors.config import CoordinatorConfig
from rsc.actors.metrics import CoordinatorMetrics
from rsc.embedded_redis import free_port
from rsc.member.session import open_session
from rsc.protocol import Heartbeat, HeartbeatResponse, Status

LABELS = {"prefix": "orders", "group": "billing"}


async def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """GET /metrics like Prometheus does; every sample by (name, sorted labels)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        response = b""
        while chunk := await stream.receive_some(65536):
            response += chunk
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    return {(item.name, tuple(sorted(item.labels.items()))): item.value
            for family in text_string_to_metric_families(body.decode())
            for item in family.samples}


def value(samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def wait_for_sample(port: int, name: str, expected: float, **labels: str):
    """Scrape until `name{labels}` reaches `expected` (metrics follow the commit)."""
    while True:
        samples = await scrape(port)
        if value(samples, name, **labels) == expected:
            return samples
        await trio.sleep(0.02)


async def heartbeat(url: str, member_id: str, epoch: int) -> HeartbeatResponse:
    async with open_session(url, "member") as session:
        response = await session.request(Heartbeat(
            request_id=0, stream_prefix="orders", consumer_group="billing",
            member_id=member_id, member_epoch=epoch, capacity=1))
    assert isinstance(response, HeartbeatResponse)
    return response


async def test_counters_move_when_members_join_and_leave(redis_url, nursery):
    metrics = CoordinatorMetrics()
    metrics_port = free_port()
    config = CoordinatorConfig(redis_url=redis_url, port=0, metrics_port=metrics_port,
                               tick_interval_ms=50, lease_ttl_ms=60_000,
                               heartbeat_interval_ms=200)
    url = await nursery.start(lambda task_status: serve(config, metrics=metrics,
                                                        task_status=task_status))
    with trio.fail_after(20):
        before = await scrape(metrics_port)
        assert value(before, "rsc_member_joins_total", **LABELS) == 0

        first = await heartbeat(url, "member-a", 0)
        await heartbeat(url, "member-b", 0)
        samples = await wait_for_sample(metrics_port, "rsc_member_joins_total", 2, **LABELS)
        assert value(samples, "rsc_group_members", **LABELS) == 2
        assert value(samples, "rsc_groups") == 1
        assert value(samples, "rsc_group_epoch", **LABELS) >= 2
        assert value(samples, "rsc_rebalances_total", **LABELS) >= 2
        assert value(samples, "rsc_heartbeat_handling_seconds_count") >= 2
        assert value(samples, "rsc_checkpoint_write_seconds_count") >= 1

        stale = await heartbeat(url, "member-a", first.member_epoch + 7)
        assert stale.status == Status.FENCED_MEMBER_EPOCH
        await wait_for_sample(metrics_port, "rsc_heartbeats_fenced_total", 1, **LABELS)

        left = await heartbeat(url, "member-b", -1)
        assert left.status == Status.OK
        samples = await wait_for_sample(metrics_port, "rsc_member_leaves_total", 1, **LABELS)
        assert value(samples, "rsc_group_members", **LABELS) == 1
