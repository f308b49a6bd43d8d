"""Coordinator metrics: the registry, the exposition and the /metrics HTTP server."""

from __future__ import annotations

from types import SimpleNamespace

import trio
from prometheus_client.parser import text_string_to_metric_families

from rsc.actors.ops.metrics import CoordinatorMetrics, routes, serve_metrics
from rsc.common.http_server import render_http_response
from tests.helpers.http import http_get

GROUP = ("orders", "billing")


def sample(metrics: CoordinatorMetrics, name: str, **labels: str) -> float | None:
    """Value of one sample in the exposition text, as a scraper would read it."""
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for item in family.samples:
            if item.name == name and item.labels == labels:
                return item.value
    return None


def test_membership_events_move_their_counters():
    metrics = CoordinatorMetrics()
    for kind in ("joined", "rejoined", "left", "expired", "removed", "fenced", "epoch"):
        metrics.observe_event(GROUP, kind)
    labels = {"prefix": "orders", "group": "billing"}
    assert sample(metrics, "rsc_member_joins_total", **labels) == 2
    assert sample(metrics, "rsc_member_leaves_total", **labels) == 1
    assert sample(metrics, "rsc_member_expirations_total", **labels) == 1
    assert sample(metrics, "rsc_member_removals_total", **labels) == 1
    assert sample(metrics, "rsc_heartbeats_fenced_total", **labels) == 1
    assert sample(metrics, "rsc_rebalances_total", **labels) == 1


def test_group_machine_event_kinds_map_to_counters():
    metrics = CoordinatorMetrics()
    for kind in ("joined", "left", "expired", "removed", "revoke_timeout", "fenced", "epoch",
                 "revoked"):
        metrics.observe_event(GROUP, kind)
    labels = {"prefix": "orders", "group": "billing"}
    assert sample(metrics, "rsc_member_removals_total", **labels) == 2
    assert sample(metrics, "rsc_rebalances_total", **labels) == 1


def test_s2_s3_s5_away_and_returned_are_counted_and_a_session_timeout_is_an_expiry():
    metrics = CoordinatorMetrics()
    away = SimpleNamespace(kind="away", fields={"instanceId": "pod-0", "reason": "temporary_leave"})
    back = SimpleNamespace(kind="returned", fields={"instanceId": "pod-0", "replaced": "m1"})
    gone = SimpleNamespace(kind="expired", fields={"instanceId": "pod-0", "reason": "session_timeout"})
    for event in (away, away, back, gone):
        metrics.group_event("orders", "billing", event)
    labels = {"prefix": "orders", "group": "billing"}
    assert sample(metrics, "rsc_member_away_total", **labels) == 2
    assert sample(metrics, "rsc_member_returns_total", **labels) == 1
    assert sample(metrics, "rsc_member_expirations_total", **labels) == 1


def test_group_machine_events_count_and_time_revokes():
    metrics = CoordinatorMetrics()
    metrics.group_event("orders", "billing", SimpleNamespace(kind="joined", fields={}))
    metrics.group_event("orders", "billing", SimpleNamespace(kind="rejoined", fields={}))
    metrics.group_event("orders", "billing", SimpleNamespace(kind="revoked", fields={
        "shards": ["s1"], "ms": 1500}))
    assert sample(metrics, "rsc_member_joins_total", prefix="orders", group="billing") == 2
    assert sample(metrics, "rsc_revoke_duration_seconds_sum") == 1.5


def test_group_keys_may_be_objects_with_prefix_and_group():
    class Key:
        stream_prefix = "orders"
        consumer_group = "audit"

    metrics = CoordinatorMetrics()
    metrics.observe_event(Key(), "joined")
    assert sample(metrics, "rsc_member_joins_total", prefix="orders", group="audit") == 1


def test_group_state_gauges_and_group_count():
    metrics = CoordinatorMetrics()
    metrics.set_group_gauges(GROUP, members=3, group_epoch=7, assignment_epoch=6, shards=8)
    metrics.set_group_gauges(("orders", "audit"), members=1, group_epoch=2, assignment_epoch=2,
                             shards=8)
    metrics.set_group_state("orders", "billing", SimpleNamespace(
        members={"m1": None, "m2": None}, group_epoch=8, assignment_epoch=8,
        shards=tuple(f"s{i}" for i in range(8))))
    labels = {"prefix": "orders", "group": "billing"}
    assert sample(metrics, "rsc_groups") == 2
    assert sample(metrics, "rsc_group_members", **labels) == 2
    assert sample(metrics, "rsc_group_epoch", **labels) == 8
    assert sample(metrics, "rsc_assignment_epoch", **labels) == 8
    assert sample(metrics, "rsc_group_shards", **labels) == 8
    metrics.group_forgotten(GROUP)
    assert sample(metrics, "rsc_groups") == 1
    assert sample(metrics, "rsc_group_members", **labels) is None


def test_histograms_and_migration_progress():
    metrics = CoordinatorMetrics()
    metrics.observe_heartbeat_seconds(0.0004)
    metrics.observe_checkpoint_seconds(0.002)
    metrics.observe_revoke_seconds(1.5)
    metrics.set_migration_progress("orders", drained=3, total=8)
    assert sample(metrics, "rsc_heartbeat_handling_seconds_count") == 1
    assert sample(metrics, "rsc_heartbeat_handling_seconds_bucket", le="0.0005") == 1
    assert sample(metrics, "rsc_checkpoint_write_seconds_count") == 1
    assert sample(metrics, "rsc_revoke_duration_seconds_sum") == 1.5
    assert sample(metrics, "rsc_migration_drained_shards", prefix="orders") == 3
    assert sample(metrics, "rsc_migration_shards", prefix="orders") == 8
    metrics.migration_finished("orders")
    metrics.migration_finished("orders")
    assert sample(metrics, "rsc_migration_shards", prefix="orders") is None


def test_two_instances_do_not_share_series():
    first, second = CoordinatorMetrics(), CoordinatorMetrics()
    first.observe_event(GROUP, "joined")
    assert sample(second, "rsc_member_joins_total", prefix="orders", group="billing") is None


def test_http_response_routes_and_statuses():
    def body() -> bytes:
        return b"rsc_groups 1.0\n"

    ok = render_http_response(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", routes(body))
    assert ok.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"Content-Type: text/plain; version=0.0.4" in ok
    assert ok.endswith(b"\r\n\r\nrsc_groups 1.0\n")
    assert render_http_response(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n", routes(body)).startswith(
        b"HTTP/1.1 200")
    head = render_http_response(b"HEAD /metrics HTTP/1.1\r\n\r\n", routes(body))
    assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n")
    assert b"Content-Length: 15" in head
    assert render_http_response(b"GET / HTTP/1.1\r\n\r\n", routes(body)).startswith(b"HTTP/1.1 404")
    assert render_http_response(b"POST /metrics HTTP/1.1\r\n\r\n", routes(body)).startswith(
        b"HTTP/1.1 405")
    assert render_http_response(b"garbage\r\n\r\n", routes(body)).startswith(b"HTTP/1.1 400")


async def test_served_metrics_follow_the_registry(nursery):
    metrics = CoordinatorMetrics()
    port = await nursery.start(serve_metrics, metrics, "127.0.0.1", 0)
    with trio.fail_after(10):
        before = (await http_get(port, "/metrics")).raw
        metrics.observe_event(GROUP, "joined")
        after = (await http_get(port, "/metrics")).raw
        missing = (await http_get(port, "/nope")).raw
    assert before.startswith(b"HTTP/1.1 200")
    assert b'rsc_member_joins_total{group="billing",prefix="orders"} 1.0' not in before
    assert b'rsc_member_joins_total{group="billing",prefix="orders"} 1.0' in after
    assert missing.startswith(b"HTTP/1.1 404")


async def test_a_scraper_that_hangs_up_does_not_stop_the_server(nursery):
    metrics = CoordinatorMetrics()
    port = await nursery.start(serve_metrics, metrics, "127.0.0.1", 0)
    with trio.fail_after(10):
        rude = await trio.open_tcp_stream("127.0.0.1", port)
        await rude.send_all(b"GET /met")
        await rude.aclose()
        assert (await http_get(port, "/metrics")).status == 200


def test_the_coordinator_exports_its_process_and_its_build():
    from rsc import __version__

    text = CoordinatorMetrics().exposition().decode()
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines()
             if line and not line.startswith("#")}
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes",
            "process_open_fds", "process_start_time_seconds"} <= names
    assert 'rsc_build_info{python="' in text and f'version="{__version__}"' in text
