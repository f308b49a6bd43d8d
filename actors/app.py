"""Assemble the coordinator: health port, store and lease, restored actors, websocket server, tick.

Start-up order is what lets a restart fit inside a member's lease: the
metrics/health port answers first (`/healthz` 200, `/readyz` 503), then the
lease is taken (at once when its holder is a dead process on this host; while
a live coordinator holds it, this one waits, D5), the metadata loaded, and
only then `listening on`. Nothing else is awaited.

D5: a coordinator that finds its lease lapsed (it was frozen, or a renewal
found the key gone or taken) expires nobody on the heartbeats it saw before.
If nobody else ran meanwhile it takes the key again and holds every expiry
for one member lease (a fresh lease each, H12), its sessions open; otherwise
it closes its sessions, waits for the lease, and restores every prefix as
after a restart under a new coordinator epoch, on the same port.

K3, K4: a store that lost writes of this coordinator (its lease key gone with the
epoch key lower or missing, or what `MetadataStore.check_went_back` reads back every
tick) is not restored from: the coordinator closes its sessions like after a lapse,
takes the lease under a new epoch above its own, writes everything it holds in memory
back (`MetadataStore.rewrite`: routing, migrations, the prefix index, group, member and
owner records, seal markers, streams and consumer groups; the store id and format
version unchanged), logs `store.went_back`, and only then listens again.
/readyz says 503 from the moment it noticed until the rewrite landed.

Those decisions are actors/core/lease.py's (`CoordinatorLifecycle`, `WriteHealth`, pure, tested
without I/O); this module runs the I/O each asks for, on one `Coordinator` context.
"""

from __future__ import annotations

import functools
import logging
import ssl
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import attrs
import trio

from rsc.actors.actor import PrefixActor, StoreIdentity, now_ms
from rsc.actors.admin.audit import AuditLog
from rsc.actors.admin.dead_letter_admin import DeadLetterAdmin
from rsc.actors.admin.format_admin import FormatVersionAdmin
from rsc.actors.admin.message_admin import MessageAdmin
from rsc.actors.config import CoordinatorConfig, is_loopback_host
from rsc.actors.core import shard_damage
from rsc.actors.core.group import GroupSettings
from rsc.actors.core.lease import (
    CoordinatorLifecycle,
    LapseVerdict,
    LeaseContinuity,
    Next,
    Renewal,
    Takeover,
    WentBack,
    lapse_verdict,
    looks_for_lost_store,
    waiting_line,
    writes_store_id,
)
from rsc.actors.core.prefix import PrefixMachine
from rsc.actors.core.prefix_admission import GroupBudget
from rsc.actors.core.prefix_retention import RETENTION_EVERY_TICKS
from rsc.actors.core.prefix_schedule import Schedule
from rsc.actors.core.records import PrefixSnapshot
from rsc.actors.logs import log_event
from rsc.actors.net.admission import (
    Admission,
    AdmissionListener,
    connection_limit,
    default_max_sessions,
    raise_fd_limit,
)
from rsc.actors.ops.group_lag import group_lag_loop
from rsc.actors.ops.readiness import OUTAGE_REMINDER_S, Readiness
from rsc.actors.redis_io import shard_ops
from rsc.actors.redis_io.shard_work import ShardWork
from rsc.actors.redis_io.store import MetadataStore, StoreError, StoreFenced, StreamAdmin
from rsc.actors.redis_io.store_deadline import StoreStalled, run_by_deadline
from rsc.actors.router import Router
from rsc.actors.server import CoordinatorServer
from rsc.common import gc_policy as gc_control
from rsc.common import tls
from rsc.common.errors import first_of

if TYPE_CHECKING:
    from rsc.actors.ops.metrics import CoordinatorMetrics

log = logging.getLogger("rsc.coordinator")

REDIS_THREADS = 16  # worker threads for blocking Redis calls: bounds Redis connections (fds)



def coordinator_lease_ms(config: CoordinatorConfig) -> int:
    """How long the coordinator lease lasts without renewal: three ticks, at least a second."""
    return max(3 * config.tick_interval_ms, 1000)


async def serve(config: CoordinatorConfig, *, metrics: CoordinatorMetrics | None = None,
                task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Run a coordinator on `config.redis_url` until cancelled; `task_status.started(url)` once it
    accepts sessions. (Starting an embedded redis-server when there is none is the caller's job.)"""
    if config.redis_url is None:
        raise ValueError("CoordinatorConfig.redis_url is required")
    await _serve(config, config.redis_url, metrics, task_status)


async def _serve(config: CoordinatorConfig, redis_url: str, metrics: CoordinatorMetrics | None,
                 task_status: trio.TaskStatus[str]) -> None:
    _warn_if_open(config, tls_served=config.tls_cert is not None)
    fd_limit = raise_fd_limit()
    max_sessions = config.max_sessions or default_max_sessions(fd_limit)
    admission = Admission(max_sessions=max_sessions,
                          max_connections=connection_limit(max_sessions, fd_limit),
                          metrics=metrics, handshake_timeout_s=config.handshake_timeout_s)
    trio.to_thread.current_default_thread_limiter().total_tokens = REDIS_THREADS
    readiness = Readiness()
    lease_ms = coordinator_lease_ms(config)
    server_tls = tls.server_context(config.tls_cert, config.tls_key) if config.tls_cert and config.tls_key \
        else None  # a bad certificate or key fails here, before anything listens
    store = MetadataStore(redis_url, lease_ms=lease_ms, min_replicas=config.min_replicas,
                          wait_timeout_ms=int(config.store_deadline_ms),  # K5 within D4
                          report=readiness)  # every metadata write says whether it worked
    failure: Exception | None = None
    async with trio.open_nursery() as outer:
        metrics_port_wanted = config.metrics_port
        if metrics_port_wanted is not None:
            if metrics is None:
                from rsc.actors.ops.metrics import CoordinatorMetrics

                metrics = admission.metrics = CoordinatorMetrics()
            from rsc.actors.ops.metrics import serve_metrics

            metrics_tls = server_tls if config.metrics_tls else None
            metrics_port = await outer.start(lambda task_status: serve_metrics(
                metrics, config.host, metrics_port_wanted, health=readiness, ssl_context=metrics_tls,
                task_status=task_status))
            scheme = "https" if metrics_tls else "http"
            log_event(log, "metrics.listening", url=f"{scheme}://{config.host}:{metrics_port}/metrics")
        if metrics is not None and hasattr(metrics, "report_replica_shortfalls"):
            metrics.report_replica_shortfalls(lambda: store.replica_shortfalls)  # K11
        gc_control.install(getattr(metrics, "registry", None))
        coordinator = Coordinator(
            config=config, store=store, readiness=readiness, admission=admission,
            metrics=metrics, server_tls=server_tls, max_sessions=max_sessions, fd_limit=fd_limit,
            life=CoordinatorLifecycle(own_id=store.instance_id, lease_ms=lease_ms,
                                      member_lease_ttl_ms=config.lease_ttl_ms))
        try:
            await _run(coordinator, task_status)
        except Exception as exc:  # raised bare, as before the health port existed (not in a group)
            failure = exc
            if isinstance(exc, ExceptionGroup):  # the real error, logged and raised (L1)
                leaf = first_of(exc)
                failure = leaf if isinstance(leaf, Exception) else exc
        finally:
            released = False
            with trio.CancelScope(shield=True):
                if store.coordinator_epoch:  # the lease was ours
                    try:
                        await trio.to_thread.run_sync(store.release)
                        released = True
                    except Exception as exc:  # noqa: BLE001 - best effort on the way out
                        log_event(log, "coordinator.lease_not_released", level=logging.WARNING,
                                  error=str(exc))
                store.close()
            log_event(log, "coordinator.stopped", coordinator_epoch=store.coordinator_epoch,
                      lease_released=released,
                      error=None if failure is None else str(failure))
            outer.cancel_scope.cancel()
    if failure is not None:
        raise failure


def _warn_if_open(config: CoordinatorConfig, *, tls_served: bool) -> None:
    """B2: at every start, a WARNING for endpoints open beyond loopback (--allow-unauthenticated)
    and for tokens sent in the clear beyond loopback (no TLS)."""
    if is_loopback_host(config.host):
        return
    open_endpoints = [path for path, token in (("/v1/admin", config.admin_token),
                                               ("/v1/member", config.member_token)) if token is None]
    if open_endpoints:
        log_event(log, "coordinator.unauthenticated", level=logging.WARNING, host=config.host,
                  open=open_endpoints,
                  line=f"--allow-unauthenticated: anyone who reaches {config.host} can use "
                       f"{' and '.join(open_endpoints)} without a token")
    if len(open_endpoints) < 2 and not tls_served:
        log_event(log, "coordinator.tokens_in_clear", level=logging.WARNING, host=config.host,
                  line="tokens travel unencrypted over ws:// beyond loopback: serve wss:// "
                       "(--tls-cert, --tls-key) or put TLS in front")


@attrs.define(eq=False)
class Coordinator:
    """One coordinator process: what its epochs and their loops share (built once by `serve`)."""

    config: CoordinatorConfig
    store: MetadataStore
    readiness: Readiness
    admission: Admission
    metrics: CoordinatorMetrics | None  # None without a metrics port
    server_tls: ssl.SSLContext | None
    max_sessions: int
    fd_limit: int
    life: CoordinatorLifecycle  # the decisions of D5, K3, K4 (actors/core/lease.py)
    identity: StoreIdentity = attrs.field(factory=StoreIdentity)  # for the process's life (K4)


async def _run(co: Coordinator, task_status: trio.TaskStatus[str]) -> None:
    """Serve under one coordinator epoch after another: each time the lease is found taken by
    another coordinator (D5), everything is restored again from Redis as after a restart, under
    a new epoch, once this one holds the lease again; after the store went back (K3) memory
    is written back instead. What each end means is `CoordinatorLifecycle`'s."""
    config, store, life = co.config, co.store, co.life
    port = config.port
    while True:
        epoch, others = await _wait_for_lease(co)
        if life.lease_taken(epoch, _monotonic_ms(), others_ran=others):
            log_event(log, "store.rewrite_dropped", level=logging.WARNING,
                      reason="another coordinator held the lease meanwhile: its state wins",
                      then="restoring every prefix from Redis")
        log_event(log, "coordinator.started", coordinator_epoch=epoch, redis=store.redis_url,
                  max_sessions=co.max_sessions, fd_limit=co.fd_limit)
        lapsed = trio.Event()
        served = EpochState()
        try:
            async with trio.open_nursery() as nursery:
                port = await nursery.start(_serve_epoch, co, lapsed, port, served)
                first = not life.served
                life.served_epoch()  # written back: the store holds it all again
                if first:
                    gc_control.freeze_after_startup()
                    task_status.started(f"{'wss' if co.server_tls else 'ws'}://{config.host}:{port}")
                await lapsed.wait()
                nursery.cancel_scope.cancel()
        except* StoreFenced as fenced:  # a newer coordinator wrote: ours lapsed long ago
            life.fenced(str(fenced.exceptions[0]))
        except* StoreError as failed:
            if not life.rewrite_failed(str(failed.exceptions[0])):
                raise  # at start (exit 1), as before; a failed write-back is tried again
        router = served.router
        end = life.epoch_ended(_monotonic_ms(), None if router is None else functools.partial(
            _memory, router))
        co.readiness.lease_held(False, end.readiness)
        log_event(log, "coordinator.lease_lapsed", level=logging.WARNING,
                  coordinator_epoch=end.epoch, reason=end.reason, verdict=end.verdict.value,
                  then=end.then)


def _memory(router: Router) -> dict[str, PrefixSnapshot]:
    """K3: what this coordinator confirmed, every prefix's rollback point (H12: every answer
    it gave revealed nothing more), to write back under a new epoch."""
    return {prefix: actor.machine.persisted for prefix, actor in router.actors.items()}


@attrs.define
class EpochState:
    """What one coordinator epoch built that outlives it: its router (its actors' memory)."""

    router: Router | None = None


async def _wait_for_lease(co: Coordinator) -> tuple[int, bool]:
    """D5: take the coordinator lease, waiting while another live coordinator holds it (not
    listening, `/readyz` 503, one line every 10 s naming the holder). A holder that stops
    marks its release (taken within a poll, well inside a tick); one that died on this host
    is dropped at once; otherwise the key must have been absent for a full lease TTL
    (actors/core/lease.py `Takeover`).

    After the store went back (K3) the new epoch is above the one it lost writes of. Once
    this coordinator served, a Redis that fails now (down, restarting, a replica after a
    failover: K2) is waited out, never an exit (`CoordinatorLifecycle.look_failed`).
    Returns the new epoch, and whether another coordinator held the lease meanwhile.
    Readiness stays 503 until the epoch restored or wrote back its prefixes.
    """
    config, store, readiness, life = co.config, co.store, co.readiness, co.life
    above = life.went_back.epoch if life.went_back is not None else None
    poll_s = min(0.25, max(0.02, config.tick_interval_ms / 4000))
    takeover = Takeover(lease_ttl_ms=config.lease_ttl_ms)
    last_said: float | None = None
    looked = False  # Redis answered this call's look
    while True:
        try:
            await trio.to_thread.run_sync(store.take_over_dead_local_holder)
        except Exception as exc:  # noqa: BLE001 - best effort: the look says what is wrong
            log_event(log, "coordinator.lease_takeover_skipped", level=logging.DEBUG,
                      error=str(exc))  # debug: during an outage it fails every poll
        try:
            holder, released = await trio.to_thread.run_sync(store.look)
            holder = life.look(holder)  # still ours: an epoch of this process that ended
            if takeover.may_take(_monotonic_ms(), holder, released):
                if above is None:
                    epoch, holder = await trio.to_thread.run_sync(store.try_acquire)
                else:
                    epoch, holder = await trio.to_thread.run_sync(store.try_acquire_above, above)
                if epoch is not None:
                    return epoch, takeover.waited_on is not None
        except StoreError as exc:
            if life.look_failed(looked=looked):
                raise  # Redis unreachable at start: exit 1 (D3)
            holder = None
            readiness.lease_held(False, str(exc))
        else:
            looked = True
        named = holder or takeover.waited_on
        state = "holds" if holder is not None else "let its lease lapse; waiting a lease TTL for"
        readiness.lease_held(False, f"waiting: coordinator {named} {state} the lease")
        now = trio.current_time()
        if last_said is None or now - last_said >= OUTAGE_REMINDER_S:
            last_said = now
            log_event(log, "coordinator.waiting", level=logging.WARNING, holder=named,
                      line=waiting_line(named, store.redis_url, life.lease_ms))
        await trio.sleep(poll_s)


def _monotonic_ms() -> float:
    return time.monotonic() * 1000.0


async def _serve_epoch(co: Coordinator, lapsed: trio.Event, port: int, served: EpochState,
                       task_status: trio.TaskStatus[int]) -> None:
    """Everything of one coordinator epoch: restored (or, after the store went back, written
    back) actors, the websocket server (on `port`), the lease, the tick, the store id.
    `lapsed` is set when the lease is found lapsed or the store went back."""
    config, store, identity, metrics = co.config, co.store, co.identity, co.metrics
    went_back = co.life.went_back
    persisted: dict[str, PrefixSnapshot] | None = None
    if looks_for_lost_store(store_id=identity.value, from_clients=identity.from_clients,
                            writes_back=went_back is not None):
        # K8: a store without a storeId and nothing in memory: it may have been lost together
        # with the coordinator; the clients present what they knew
        if await trio.to_thread.run_sync(shard_ops.read_store_id, store.client) is None:
            persisted = await trio.to_thread.run_sync(store.load_all)
            identity.from_clients = not persisted
    if writes_store_id(store_id=identity.value, from_clients=identity.from_clients):
        identity.value = await trio.to_thread.run_sync(shard_ops.ensure_store_id, store.client,
                                                       identity.value)
        identity.written = True
    await trio.to_thread.run_sync(_probe_permissions, store)  # K10: a missing one exits 1 now
    await trio.to_thread.run_sync(shard_ops.load_scripts, store.client)
    xackdel = await trio.to_thread.run_sync(shard_ops.supports_xackdel, store.client)
    log_event(log, "store.identified", store_id=identity.value, xackdel=xackdel)
    settings = GroupSettings(heartbeat_interval_ms=config.heartbeat_interval_ms,
                             lease_ttl_ms=config.lease_ttl_ms,
                             revoke_timeout_ms=config.revoke_timeout_ms,
                             static_session_timeout_ms=config.static_session_timeout_ms,
                             empty_group_retention_ms=config.empty_group_retention_ms)

    budget = GroupBudget(config.max_groups)  # A1: one count over every prefix
    background: trio.Nursery | None = None  # where retention passes run (the server's nursery)
    # periodic work by what changed: one schedule of wakes, one set of pipelines (T1, T2, R2)
    schedule = Schedule(config.tick_interval_ms)
    shard_work = ShardWork(store.client, deadline_s=config.store_deadline_s,
                           metrics=metrics)

    audit_log = AuditLog(store.client, deadline_s=config.store_deadline_s, metrics=metrics)

    def make_actor(prefix: str) -> PrefixActor:
        return PrefixActor(prefix, store, settings, push_enabled=config.push, metrics=metrics,
                           keep_drained_streams=config.keep_drained_streams, identity=identity,
                           budget=budget, max_group_size=config.max_group_size,
                           background=background, shard_work=shard_work, audit_log=audit_log)

    async def reload(prefix: str) -> PrefixActor:
        data = await trio.to_thread.run_sync(load_prefix, store, prefix)
        actor = make_actor(prefix)
        if data is not None:
            actor.restore(data, now_ms())
        return actor

    if went_back is None:
        if persisted is None:
            persisted = await trio.to_thread.run_sync(store.load_all)
    else:
        persisted = went_back.memory
        await _write_back(co, went_back)
    async with trio.open_nursery() as nursery:
        background = nursery
        router = served.router = Router(nursery, make_actor, reload=reload, metrics=metrics,
                                        budget=budget, schedule=schedule, shard_work=shard_work)
        shard_work.failed_pass = router.pass_failed
        if metrics is not None:
            metrics.report_unowned_shards(router.unowned_shards)
            metrics.report_prefixes_without_routing(router.prefixes_without_routing)
            nursery.start_soon(partial(group_lag_loop, store.client, router.group_streams, metrics,
                                       interval_s=config.lag_metrics_interval_ms / 1000,
                                       deadline_s=config.store_deadline_s))
        nursery.start_soon(shard_work.run)
        now = now_ms()  # H12: every restored member gets a fresh lease from now
        for prefix, data in persisted.items():
            actor = make_actor(prefix)
            actor.restore(data, now)
            router.add(actor)
            log_event(log, "prefix.restored", prefix=prefix, groups=len(actor.groups))
        server = CoordinatorServer(router, nursery, admin_token=config.admin_token,
                                   viewer_token=config.viewer_token, audit_log=audit_log,
                                   member_token=config.member_token, admission=co.admission,
                                   metrics=metrics,
                                   max_frame_bytes=config.max_frame_bytes,
                                   handshake_timeout_s=config.handshake_timeout_s,
                                   format_admin=FormatVersionAdmin(store, deadline_s=config.store_deadline_s,
                                                                   on_raised=router.format_raised),
                                   allowed_origins=config.allowed_origins,
                                   throttle_loopback=config.throttle_loopback,
                                   auth_metrics=metrics)
        server.dead_letters = DeadLetterAdmin(config.redis_url or "", server.ask,
                                              min_replicas=config.min_replicas,
                                              wait_timeout_ms=int(config.store_deadline_ms))
        server.messages = MessageAdmin(config.redis_url or "", server.ask,
                                       versions=router.routing_versions)
        # P2: the dead letters' own retention, on the prefixes' retention cadence
        nursery.start_soon(server.dead_letters.run_retention,
                           config.tick_interval_ms * RETENTION_EVERY_TICKS / 1000)
        bound = await nursery.start(_serve_websocket, server, config, co.admission, port,
                                    co.server_tls)
        nursery.start_soon(_lease_loop, co, lapsed)
        nursery.start_soon(_tick_loop, config, router, co.life.continuity,
                           server.turns.saturated_since_last_asked)
        nursery.start_soon(_store_id_loop, co, router)
        nursery.start_soon(_shard_check_loop, config, router, StreamAdmin(store.client), metrics)
        co.readiness.lease_held(True)  # restored (or written back): ready from here
        task_status.started(bound)


async def _write_back(co: Coordinator, went_back: WentBack) -> None:
    """K3, K4: everything memory held written back under this new epoch; one line says what."""
    store, identity = co.store, co.identity
    started = time.monotonic()
    done = await trio.to_thread.run_sync(functools.partial(
        store.rewrite, went_back.memory, retire_old=not co.config.keep_drained_streams))
    identity.went_back_at_ms = int(time.time() * 1000)
    if co.metrics is not None:
        co.metrics.observe_store_went_back()
    log_event(log, "store.went_back", level=logging.WARNING, reason=went_back.reason,
              previous_epoch=went_back.epoch, coordinator_epoch=store.coordinator_epoch,
              store_id=identity.value, **done, ms=round((time.monotonic() - started) * 1000, 1))


async def _serve_websocket(server: CoordinatorServer, config: CoordinatorConfig, admission: Admission,
                           port: int, server_tls: ssl.SSLContext | None,
                           task_status: trio.TaskStatus[int]) -> None:
    admitted = [AdmissionListener(listener, admission)
                for listener in await trio.open_tcp_listeners(port, host=config.host)]
    # with TLS each session's task runs its TLS itself (actors/net/ws_server.py): the TLS handshake
    # inside the websocket handshake timeout, frames encrypted and written in place
    listeners: list[Any] = admitted if server_tls is None else [
        tls.TlsListener(listener, server_tls) for listener in admitted]
    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, server.serve, listeners)
        task_status.started(admitted[0].port)


async def _lease_loop(co: Coordinator, lapsed: trio.Event) -> None:
    """Renew the coordinator lease every tick, on a thread of its own that nothing else can hold,
    and run the I/O `CoordinatorLifecycle` asks for after each renewal (actors/core/lease.py `Next`).

    Each renewal is a metadata write reported to `readiness` (which logs an
    outage once); one unanswered after a third of the member lease counts as
    failed (D4), so `/readyz` turns 503 that soon on a stalled Redis. A renewal
    that finds the lease lapsed or taken, or that comes after a gap longer than
    the lease (this process was frozen), breaks its continuity (D5): the lease
    is taken again in place, or `lapsed` is set and the coordinator restarts.

    K3: after each renewal that found the lease ours, the store is read back
    (`check_went_back`); a store that lost writes sets `lapsed` with the verdict
    STORE_WENT_BACK, and the coordinator writes everything back from memory.
    """
    config, store, readiness, life = co.config, co.store, co.readiness, co.life
    interval = config.tick_interval_ms / 1000
    stall_s = config.store_deadline_s  # D4: a slower renewal is a failed write
    own_thread = trio.CapacityLimiter(1)
    deadline = trio.current_time()
    while True:
        deadline += interval
        await trio.sleep_until(deadline)
        deadline = max(deadline, trio.current_time() - interval)  # never a burst after a stall
        sent_at = _monotonic_ms()
        try:
            # abandoned past the deadline: the thread ends with the socket timeout and holds
            # `own_thread` until then, so renewals never pile up on a stalled Redis
            outcome = await run_by_deadline(trio.current_time() + stall_s, "lease renewal",
                                            store.renew, limiter=own_thread)
        except StoreStalled:  # D4: unanswered within a third of the lease is a failed write
            life.renewal(sent_at, Renewal.FAILED)
            readiness.write_failed(f"Redis did not answer the lease renewal within "
                                   f"{round(stall_s * 1000)} ms")
            continue
        except StoreError as exc:
            life.renewal(sent_at, Renewal.FAILED)
            readiness.lease_held(False, str(exc))
            readiness.write_failed(str(exc))
            continue
        step = life.renewal(sent_at, outcome)
        while True:
            if step is Next.READ_LAPSE_FACTS:
                step = life.lapse_found(await _lapse_verdict(store, own_thread))
            elif step is Next.RETAKE:
                step = life.retaken(await _retake(store, own_thread), _monotonic_ms())
                if step is Next.CHECK_STORE:
                    log_event(log, "coordinator.lease_lapsed", level=logging.WARNING,
                              reason=life.taken_back, verdict=LapseVerdict.TAKE_BACK.value,
                              then=f"taken again; no member expires for {config.lease_ttl_ms} ms "
                                   "(fresh leases, H12)")
            elif step is Next.CHECK_STORE:
                step = life.store_checked(
                    await _check_went_back(store, own_thread, co.identity, stall_s))
            else:
                break
        if step is Next.STEP_DOWN:
            # another coordinator holds it or ran meanwhile, or the store went back (K3):
            # step down, wait for the lease, restore (or write back) as after a restart
            lapsed.set()
            return
        readiness.lease_held(True)
        readiness.write_succeeded()  # the renewal is a metadata write too (PROTOCOL, Command line)


async def _lapse_verdict(store: MetadataStore, limiter: trio.CapacityLimiter) -> LapseVerdict:
    """What the store says about a lapse (D5): take back, store went back, or step down."""
    try:
        holder, stored_epoch = await trio.to_thread.run_sync(store.lapse_facts, limiter=limiter)
    except StoreError:
        return LapseVerdict.STEP_DOWN  # nothing learnt: restore from Redis once it answers
    return lapse_verdict(own_epoch=store.coordinator_epoch, stored_epoch=stored_epoch,
                         holder=holder, own_id=store.instance_id)


async def _check_went_back(store: MetadataStore, limiter: trio.CapacityLimiter,
                           identity: StoreIdentity, stall_s: float) -> str | None:
    """K3: why the store lost writes of this coordinator (None: it did not, or it did not
    answer in time: the renewals report an outage)."""
    try:
        return await run_by_deadline(trio.current_time() + stall_s, "store check",
                                     store.check_went_back, identity.stored, limiter=limiter)
    except StoreStalled:
        return None
    except StoreError as exc:
        log.debug("store not checked: %s", exc)
    return None


async def _retake(store: MetadataStore, limiter: trio.CapacityLimiter) -> bool:
    try:
        return await trio.to_thread.run_sync(store.retake, limiter=limiter)
    except StoreError:
        return False


async def _tick_loop(config: CoordinatorConfig, router: Router,
                     continuity: LeaseContinuity | None,
                     saturated: Callable[[], bool]) -> None:
    """Send every actor its tick (H6, H14); never waits on any of them. Only while the lease
    is continuous (D5): after a gap, expiring members on heartbeats older than it would fence
    members that went on under D5, so the tick stops and the coordinator restarts instead.
    For a member lease TTL after a lapse it took back, the ticks expire nobody (fresh leases,
    H12) but drain, retirement and retention go on. A full collection that is due waits while
    the coordinator is `saturated` (rsc/common/gc_policy.py)."""
    assert continuity is not None, "the epoch's lease was taken"
    interval = config.tick_interval_ms / 1000
    while True:
        await trio.sleep(interval)
        now = _monotonic_ms()
        if not continuity.holds(now):
            continue  # no renewal for a lease (Redis down, or this process frozen)
        router.tick(expire=continuity.expiry_allowed(now))
        gc_control.on_tick(busy=saturated())


async def _shard_check_loop(config: CoordinatorConfig, router: Router, streams: StreamAdmin,
                            metrics: CoordinatorMetrics | None) -> None:
    """B7: once a minute, every shard of every live version of every idle prefix is checked
    for damage a Redis user could do (actors/core/shard_damage.py); the seal markers are repaired
    where the confirmed metadata makes that safe. A busy prefix is checked next time."""
    while True:
        await trio.sleep(config.shard_check_interval_s)
        for prefix in sorted(router.actors):
            await router.while_idle(prefix, functools.partial(_check_shards, prefix, streams,
                                                              metrics))


async def _check_shards(prefix: str, streams: StreamAdmin, metrics: CoordinatorMetrics | None,
                        machine: PrefixMachine) -> None:
    persisted = machine.persisted
    current, sealed = shard_damage.streams_to_check(persisted.routing, persisted.migration)
    if not current and not sealed:
        return
    try:
        facts = await trio.to_thread.run_sync(streams.stream_facts, (*current, *sealed))
        findings = shard_damage.find_damage(current, sealed, facts)
        for finding in findings:
            if finding.repair == "unseal":
                await trio.to_thread.run_sync(streams.unseal, [finding.shard])
            elif finding.repair == "seal":
                await trio.to_thread.run_sync(streams.seal, [finding.shard])
    except StoreError as exc:  # an outage: the lease loop says so; check again next time
        log.debug("shards of %s not checked: %s", prefix, exc)
        return
    damage: dict[str, str] = {}
    for finding in findings:
        damage.setdefault(finding.shard, finding.damage.value)
        log_event(log, "shard.damaged", level=logging.WARNING, prefix=prefix,
                  shard=finding.shard, kind=finding.damage.value,
                  repaired=finding.repair is not None)
        if metrics is not None:
            metrics.shard_damaged.labels(finding.damage.value).inc()
    machine.shard_damage = damage


async def _store_id_loop(co: Coordinator, router: Router) -> None:
    """Every 10 ticks, write the same `rsc:store-id` again if the key went missing (a flush).

    K8: while the coordinator has no storeId yet (a store lost with its memory), every tick:
    the one a client presented is written as soon as it is (`identity.wanted`), a fresh one
    once some prefix has routing from an admin and no client presented any."""
    config, store, identity = co.config, co.store, co.identity
    interval = 10 * config.tick_interval_ms / 1000
    while True:
        if identity.written:
            await trio.sleep(interval)
        else:
            with trio.move_on_after(config.tick_interval_ms / 1000):
                await identity.wanted.wait()
            if identity.value is None and not any(
                    actor.machine.routing is not None for actor in router.actors.values()):
                continue  # nothing to identify yet: the clients may still present theirs
        try:
            identity.value = await trio.to_thread.run_sync(shard_ops.ensure_store_id, store.client,
                                                           identity.value)
        except StoreError as exc:  # the lease loop reports the outage; try again later
            log.debug("store id not checked: %s", exc)
            await trio.sleep(config.tick_interval_ms / 1000)
            continue
        if not identity.written:
            identity.written = True
            log_event(log, "store.identified", store_id=identity.value,
                      source="presented by clients (K8)" if identity.adopted else "new")


def _probe_permissions(store: MetadataStore) -> None:
    """K10: every kind of command the coordinator needs, tried once on its probe keys; a
    missing permission is a StoreError naming it (exit 1 at start, K6)."""
    from redis.exceptions import RedisError

    from rsc.common.permission_probe import COORDINATOR_PROBES, MissingPermission, probe_permissions
    from rsc.common.redact import redact_url

    try:
        probe_permissions(store.client, COORDINATOR_PROBES, role="coordinator",
                          shown_url=redact_url(store.redis_url))
    except MissingPermission as exc:
        raise StoreError(f"configuration error: {exc}") from exc
    except RedisError as exc:
        raise StoreError(f"cannot probe the coordinator's permissions: {exc}") from exc


def load_prefix(store: MetadataStore, prefix: str) -> PrefixSnapshot | None:
    """One prefix's persisted metadata (None if it has none), to reload a failed actor."""
    return store.load_prefix(prefix)
