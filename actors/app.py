"""Assemble the coordinator: store, restored actors, websocket server, tick."""

from __future__ import annotations

import logging
from typing import Any

import trio
from trio_websocket import serve_websocket

from rsc.actors import gc_control
from rsc.actors.actor import PrefixActor, now_ms
from rsc.actors.config import CoordinatorConfig
from rsc.actors.group import GroupSettings
from rsc.actors.logs import log_event
from rsc.actors.server import CoordinatorServer, Router
from rsc.actors.store import MetadataStore, StoreError

log = logging.getLogger("rsc.coordinator")


def coordinator_lease_ms(config: CoordinatorConfig) -> int:
    """How long the coordinator lease lasts without renewal: three ticks, at least a second."""
    return max(3 * config.tick_interval_ms, 1000)


async def serve(config: CoordinatorConfig, *, metrics: Any = None,
                task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Run a coordinator on `config.redis_url` until cancelled; `task_status.started(url)` once it
    accepts sessions. (Starting an embedded redis-server when there is none is the caller's job.)"""
    if config.redis_url is None:
        raise ValueError("CoordinatorConfig.redis_url is required")
    await _serve(config, config.redis_url, metrics, task_status)


async def _serve(config: CoordinatorConfig, redis_url: str, metrics: Any,
                 task_status: trio.TaskStatus[str]) -> None:
    gc_control.install(getattr(metrics, "registry", None))
    lease_ms = coordinator_lease_ms(config)
    store = MetadataStore(redis_url, lease_ms=lease_ms)
    epoch = await trio.to_thread.run_sync(store.acquire, int(lease_ms * 1.5))
    log_event(log, "coordinator.started", coordinator_epoch=epoch, redis=redis_url)
    settings = GroupSettings(heartbeat_interval_ms=config.heartbeat_interval_ms,
                             lease_ttl_ms=config.lease_ttl_ms,
                             revoke_timeout_ms=config.revoke_timeout_ms)
    try:
        persisted = await trio.to_thread.run_sync(store.load_all)
        async with trio.open_nursery() as nursery:
            def make_actor(prefix: str) -> PrefixActor:
                return PrefixActor(prefix, store, settings, push_enabled=config.push, metrics=metrics,
                                   keep_drained_streams=config.keep_drained_streams)

            router = Router(nursery, make_actor)
            now = now_ms()
            for prefix, data in persisted.items():
                actor = make_actor(prefix)
                actor.restore(data, now)
                router.add(actor)
                log_event(log, "prefix.restored", prefix=prefix, groups=len(actor.groups))
            server = CoordinatorServer(router, nursery, admin_token=config.admin_token,
                                       member_token=config.member_token)
            listener = await nursery.start(lambda task_status: serve_websocket(
                server.handle, config.host, config.port, None,
                max_message_size=config.max_frame_bytes, message_queue_size=4,
                task_status=task_status))
            if metrics is not None and config.metrics_port is not None:
                from rsc.actors.metrics import serve_metrics

                metrics_port = await nursery.start(serve_metrics, metrics, config.host,
                                                   config.metrics_port)
                log_event(log, "metrics.listening", url=f"http://{config.host}:{metrics_port}/metrics")
            nursery.start_soon(_tick_loop, config, store, router)
            gc_control.freeze_after_startup()
            task_status.started(f"ws://{config.host}:{listener.port}")
    finally:
        with trio.CancelScope(shield=True):
            try:
                await trio.to_thread.run_sync(store.release)
            except Exception as exc:  # noqa: BLE001 - best effort on the way out
                log_event(log, "coordinator.lease_not_released", level=logging.WARNING, error=str(exc))
            store.close()


async def _tick_loop(config: CoordinatorConfig, store: MetadataStore, router: Router) -> None:
    """Renew the coordinator lease and send every actor its tick (H6, H14)."""
    interval = config.tick_interval_ms / 1000
    while True:
        await trio.sleep(interval)
        try:
            await trio.to_thread.run_sync(store.renew)
        except StoreError as exc:
            if type(exc) is not StoreError:
                raise  # fenced: another coordinator owns this Redis
            log_event(log, "store.unavailable", level=logging.WARNING, error=str(exc))
        await router.tick()
        gc_control.on_tick()
