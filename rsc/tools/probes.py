"""`rsc consume`'s metrics and health ports (D7): the routes, and serving them on a port."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from rsc.common import http_server
from rsc.common.http_server import Answer, Route
from rsc.member.listener import Listener
from rsc.member.pure.health import ListenerStatus
from rsc.member.shells.tool_config import BadConfig

if TYPE_CHECKING:
    from rsc.member.producer import Producer

PRODUCER_WAIT_LIMIT_S = 10.0  # K11: a lease TTL (the coordinator's default --lease-ttl-ms)


def health_routes(status: Callable[[], ListenerStatus]) -> dict[str, Route]:
    """D7: `GET /healthz` 200 unless a restart should cure a member (503 with the reason),
    `GET /readyz` 200 while every member is in its group (503 with the reason)."""
    def healthz() -> Answer:
        verdict = status()
        return http_server.probe(verdict.healthy, verdict.reason if not verdict.healthy else "ok")

    def readyz() -> Answer:
        verdict = status()
        return http_server.probe(verdict.ready, verdict.reason or "ready")

    return {"/healthz": healthz, "/readyz": readyz}


def metrics_route(consumers: Callable[[], Listener]) -> Route:
    """Prometheus text of the members' stats, read at scrape time, with `process_*` and
    `rsc_build_info`."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

    from rsc.common.process_metrics import register_process_metrics
    from rsc.member.metrics import MemberCollector

    registry = CollectorRegistry()
    registry.register(MemberCollector(lambda: [member.stats for member in consumers().members]))
    register_process_metrics(registry, "rsc consume process")  # process_*, rsc_build_info
    return lambda: Answer(200, generate_latest(registry), CONTENT_TYPE_PLAIN_0_0_4)


def producer_routes(producer: Producer, *, wait_limit_s: float = PRODUCER_WAIT_LIMIT_S
                    ) -> dict[str, Route]:
    """K11: `rsc produce --metrics-port`: `/metrics` (the default registry: the producers'
    figures, process_* and rsc_build_info), `/healthz` (200 while it runs) and `/readyz` (200
    while it has routing and no record has waited for confirmation longer than a lease TTL)."""
    from prometheus_client import REGISTRY
    from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

    def readyz() -> Answer:
        if producer.routing is None:
            return http_server.probe(False, f"prefix {producer.stream_prefix!r} has no routing")
        waited = producer.oldest_unconfirmed_seconds()
        if waited > wait_limit_s:
            return http_server.probe(False, f"a record has waited {waited:.1f} s for confirmation "
                                    f"(more than {wait_limit_s:g} s): see the log for why")
        return http_server.probe(True, "ready")

    return {"/metrics": lambda: Answer(200, generate_latest(REGISTRY), CONTENT_TYPE_PLAIN_0_0_4),
            "/healthz": lambda: http_server.probe(True, "ok"), "/readyz": readyz}


async def serve_probes(nursery: trio.Nursery, routes: dict[str, Route], host: str, port: int,
                       what: str) -> None:
    """Serve `routes` on host:port; BadConfig naming the flags when the port cannot be had."""
    try:
        await nursery.start(functools.partial(http_server.serve_http, routes, host, port))
    except OSError as exc:
        raise BadConfig(f"cannot serve {what} on {host}:{port}: {exc.strerror or exc} "
                        f"(pick another --{what}-port or --{what}-host)") from None


def env_port(name: str) -> int | None:
    """A port from the environment (empty: unset); BadConfig naming the variable otherwise."""
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise BadConfig(f"{name}={text!r} is not a port (0-65535)")
    return int(text)
