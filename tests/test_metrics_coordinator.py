"""Scrape a real coordinator's /metrics while members join, leave and get fenced."""

from __future__ import annotations

import trio
from prometheus_client.parser import text_string_to_metric_families

from rsc.actors.app import serve
from rsc.actors.config import CoordinatorConfig
from rsc.actors.ops.metrics import CoordinatorMetrics
from rsc.common.redis_server import free_port
from rsc.member.session import SessionClosed, open_session
from rsc.protocol import Heartbeat, HeartbeatResponse, Status
from tests.helpers.http import http_get

LABELS = {"prefix": "orders", "group": "billing"}


async def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """GET /metrics like Prometheus does; every sample by (name, sorted labels)."""
    response = await http_get(port, "/metrics")
    assert response.status == 200
    body = response.body
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
        # the server's own latency: every answered request, from frame arrival to answer sent
        answered = value(samples, "rsc_request_seconds_count")
        assert answered >= value(before, "rsc_request_seconds_count") + 2
        assert value(samples, "rsc_request_seconds_bucket", le="+Inf") == answered
        # D7: a group with live members reports its unowned shards (none: it has no routing)
        assert (("rsc_group_unowned_shards", tuple(sorted(LABELS.items()))) in samples
                and value(samples, "rsc_group_unowned_shards", **LABELS) == 0)

        stale = await heartbeat(url, "member-a", first.member_epoch + 7)
        assert stale.status == Status.FENCED_MEMBER_EPOCH
        await wait_for_sample(metrics_port, "rsc_heartbeats_fenced_total", 1, **LABELS)

        left = await heartbeat(url, "member-b", -1)
        assert left.status == Status.OK
        samples = await wait_for_sample(metrics_port, "rsc_member_leaves_total", 1, **LABELS)
        assert value(samples, "rsc_group_members", **LABELS) == 1


async def http_status(port: int, path: str) -> int:
    return (await http_get(port, path)).status


def test_health_paths_answer_only_with_a_health_source():
    from rsc.actors.app import Readiness
    from rsc.actors.ops.metrics import routes
    from rsc.common.http_server import render_http_response

    now = [0.0]
    readiness = Readiness(clock=lambda: now[0])
    body = lambda: b"x 1\n"  # noqa: E731
    assert render_http_response(b"GET /healthz HTTP/1.1\r\n\r\n", routes(body)).startswith(
        b"HTTP/1.1 404")
    assert render_http_response(b"GET /healthz HTTP/1.1\r\n\r\n", routes(body, readiness)).startswith(
        b"HTTP/1.1 200")
    not_ready = render_http_response(b"GET /readyz HTTP/1.1\r\n\r\n", routes(body, readiness))
    assert not_ready.startswith(b"HTTP/1.1 503") and b"lease" in not_ready
    readiness.lease_held(True)
    assert render_http_response(b"GET /readyz HTTP/1.1\r\n\r\n", routes(body, readiness)).startswith(
        b"HTTP/1.1 200")
    readiness.write_failed("StoreError: Redis is down")
    failed = render_http_response(b"GET /readyz HTTP/1.1\r\n\r\n", routes(body, readiness))
    assert failed.startswith(b"HTTP/1.1 503") and b"Redis is down" in failed
    readiness.write_succeeded()
    latched = render_http_response(b"GET /readyz HTTP/1.1\r\n\r\n", routes(body, readiness))
    assert latched.startswith(b"HTTP/1.1 503") and b"(K10)" in latched  # K10: not at once
    now[0] += 10
    readiness.write_succeeded()
    head = render_http_response(b"HEAD /readyz HTTP/1.1\r\n\r\n", routes(body, readiness))
    assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n")


async def test_admission_metrics_and_health_endpoints(redis_url, nursery):
    metrics = CoordinatorMetrics()
    metrics_port = free_port()
    config = CoordinatorConfig(redis_url=redis_url, port=0, metrics_port=metrics_port,
                               tick_interval_ms=50, lease_ttl_ms=60_000, heartbeat_interval_ms=200,
                               max_sessions=1)
    url = await nursery.start(lambda task_status: serve(config, metrics=metrics,
                                                        task_status=task_status))
    with trio.fail_after(20):
        assert await http_status(metrics_port, "/healthz") == 200
        while await http_status(metrics_port, "/readyz") != 200:
            await trio.sleep(0.02)
        async with open_session(url, "member") as session:
            await session.request(Heartbeat(request_id=0, stream_prefix="orders",
                                            consumer_group="billing", member_id="a",
                                            member_epoch=0))
            samples = await wait_for_sample(metrics_port, "rsc_sessions", 1)
            try:
                async with open_session(url, "member"):
                    raise AssertionError("admitted past --max-sessions 1")
            except SessionClosed:
                pass
            samples = await wait_for_sample(metrics_port, "rsc_sessions_refused_total", 1,
                                            reason="max_sessions")
        assert value(samples, "rsc_connections") >= 1
        assert value(samples, "rsc_prefix_actor_restarts_total", prefix="orders") == 0
        assert value(samples, "rsc_handshakes_timed_out_total") == 0


async def test_readyz_recovers_with_the_next_lease_renewal_after_a_failed_write(redis_url, nursery,
                                                                                monkeypatch):
    from rsc.actors.redis_io.store import MetadataStore

    metrics = CoordinatorMetrics()
    metrics_port = free_port()
    config = CoordinatorConfig(redis_url=redis_url, port=0, metrics_port=metrics_port,
                               tick_interval_ms=50, lease_ttl_ms=60_000, heartbeat_interval_ms=200)
    url = await nursery.start(lambda task_status: serve(config, metrics=metrics,
                                                        task_status=task_status))
    original = MetadataStore.write
    failing = [True]

    def write_once_failing(self, *args, **kwargs):
        if failing:
            failing.clear()
            from rsc.actors.redis_io.store import StoreError

            raise StoreError("injected write failure")
        return original(self, *args, **kwargs)

    with trio.fail_after(20):
        while await http_status(metrics_port, "/readyz") != 200:
            await trio.sleep(0.02)
        monkeypatch.setattr(MetadataStore, "write", write_once_failing)
        response = await heartbeat(url, "member-a", 0)
        assert response.status == Status.COORDINATOR_NOT_AVAILABLE
        # no member writes again; the lease renewal (a write) makes it ready within a tick or two
        while await http_status(metrics_port, "/readyz") != 200:
            await trio.sleep(0.01)


def test_an_outage_is_logged_once_at_start_once_at_end_and_reminded_at_most_every_10s(caplog):
    import logging

    from rsc.actors.app import Readiness

    now = [0.0]
    readiness = Readiness(clock=lambda: now[0])
    readiness.lease_held(True)
    with caplog.at_level(logging.INFO, logger="rsc.coordinator"):
        for _ in range(250):  # 25 s of failures, one every 100 ms (ticks and prefix writes)
            readiness.write_failed("Connection refused")
            assert not readiness.ready
            now[0] += 0.1
        readiness.write_succeeded()
        assert not readiness.ready  # K10: writes must succeed for 10 s first
        now[0] += 10
        readiness.write_succeeded()
    events = [record.getMessage() for record in caplog.records]
    assert events == ["store.unavailable", "store.still_unavailable", "store.still_unavailable",
                      "store.available"]
    assert readiness.ready


def test_k10_readiness_that_fails_every_other_second_stays_503_and_logs_one_outage(caplog):
    """A permission or a replica shortfall that fails a write every second: /readyz does not
    flap (503 throughout), and the outage is one `store.unavailable`, reminders every 10 s,
    one `store.available` once writes succeeded for 10 s."""
    import logging

    from rsc.actors.app import Readiness

    now = [0.0]
    readiness = Readiness(clock=lambda: now[0])
    readiness.lease_held(True)
    seen = []
    with caplog.at_level(logging.INFO, logger="rsc.coordinator"):
        for _ in range(30):  # 30 s: a failed write, then a good one, each second
            readiness.write_failed("NOPERM this user has no permissions to run the 'hset' command")
            seen.append(readiness.ready)
            now[0] += 0.5
            readiness.write_succeeded()
            seen.append(readiness.ready)
            now[0] += 0.5
        while not readiness.ready:
            readiness.write_succeeded()
            now[0] += 1
    assert not any(seen)
    assert now[0] == 29.0 + 10  # ready 10 s after the last failure (at 29 s)
    events = [record.getMessage() for record in caplog.records]
    assert events == ["store.unavailable", "store.still_unavailable", "store.still_unavailable",
                      "store.available"]
