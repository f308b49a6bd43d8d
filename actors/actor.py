"""Prefix actors: the trio shell around the pure prefix machine of one stream prefix.

One actor task per stream prefix (the unit of metadata: one Redis hash, one
check-and-set). It drains its mailbox in batches and runs each as one loop:
hand every request to the machine, then run each I/O request the machine's
`flush` yields (actors/prefix_io.py: drain count, wait for the running
retention pass, checkpoint write, offset moves, cleanup, lag and totals reads,
the retention pass) and send its outcome back; when the machine says
`Deliver`, answer and push. The order, and every decision (which requests
create state, the T1 wait, what a stalled call means, which heartbeat moves a
member's push target, which describe starts a watch), are the machine's
(actors/prefix.py and its parts). Sessions, subscribers and watches (where to
push) live here. Reads and trims of the shard streams (lag, drain, retention)
go through actors/shard_ops.py, one pipelined round trip per call.

D4 (Redis stalls are not member failures): the store I/O of one batch (the
drain check, the checkpoint, offset moves, cleanup, and each shard read) has a deadline of a
third of the lease TTL. Past it the worker thread is abandoned (it finishes in
the background) and its outcome is `stalled`; the machine answers the batch as a failed write
(COORDINATOR_NOT_AVAILABLE for what would reveal new state) and the machine
rolls back. Until the abandoned call returns, later batches do not touch the
store: one that must write is answered the same way at once, one that writes
nothing new is answered as usual (no member expires meanwhile: the expiry is a
write that fails and rolls back, H12). When it returns, the next batch starts
by adopting it if it landed after all (Redis holds it; nothing of it was
revealed), else the machine writes every field of it again (its repair). The
next write goes out after that, on a pooled connection; the store's sequence
number in the check-and-set refuses an abandoned write that Redis runs after
a later one (a timed-out command still queued in Redis).
Why a trio deadline around an abandonable thread rather than a per-call
redis-py `socket_timeout`: one checkpoint is several round trips (create,
seal, retire, hash), so a per-call timeout does not bound the batch; a
timeout shorter than a slow but healthy big write would fail it for good;
and the pool's fixed timeout is shared with the lease renewal and loads.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import attrs
import trio

from rsc.actors import shard_ops
from rsc.actors.group import GroupMachine, GroupSettings
from rsc.actors.logs import log_event
from rsc.actors.prefix import PrefixMachine
from rsc.actors.prefix_admission import REFUSALS, GroupBudget
from rsc.actors.prefix_io import (
    DONE,
    Answer,
    AwaitRetention,
    Checkpoint,
    Committed,
    Deliver,
    DestroyConsumerGroups,
    DrainQuery,
    IORequest,
    LagRead,
    MoveOffsets,
    Outcome,
    RetentionPass,
    TotalsRead,
)
from rsc.actors.prefix_schedule import Activity, Schedule
from rsc.actors.records import PrefixSnapshot
from rsc.actors.shard_work import ShardWork
from rsc.actors.store import STORE_IO_ERRORS, MetadataStore, StoreError, StoreFenced, StreamAdmin
from rsc.actors.watch import Watch
from rsc.protocol import messages as m

log = logging.getLogger("rsc.coordinator")

MAX_BATCH = 1024
MIN_BATCH = 32
# The requests of one batch are handled without a yield (their answers wait for its one
# checkpoint anyway); keeping that part near this budget keeps the event loop free for the
# sessions' reads and writes: a pack of a thousand heartbeats goes out in slices, not in one
# 60 ms block. The limit follows the measured cost per request (joins cost more than beats).
BATCH_BUDGET_S = 0.005
# A retention pass goes over the shards in slices of this many, one round trip each, with a
# pause between slices when it runs beside the batches: a pass over 4,096 shards in one
# round trip held the GIL and Redis for 160 ms, long enough to show in the p99 of heartbeats.
RETENTION_SLICE = 256
RETENTION_PAUSE_S = 0.01


class StoreStalled(StoreError):
    """A store call passed its D4 deadline and was abandoned (or one abandoned earlier still runs)."""


class _Call:
    """One store call on a worker thread; `done` is set by the thread when it returns."""

    def __init__(self, what: str, checkpoint: Checkpoint | None = None) -> None:
        self.what = what
        self.checkpoint = checkpoint  # a metadata write: adopted if it finishes after all
        self.ok = False
        self.done = threading.Event()


class Outbox(Protocol):
    """Where an actor sends pushes for a session (see server.Session)."""

    def push(self, message: m.Message) -> None: ...


class ReplyOwner(Protocol):
    """The session a reply belongs to: told when one of its replies is ready."""

    def wake(self) -> None: ...


@attrs.define(eq=False, slots=True)
class Reply:
    """A response slot: the session writes responses in request order as they resolve."""

    owner: ReplyOwner
    message: m.Message | None = None
    is_push: bool = False
    received: float = 0.0  # perf_counter when its request arrived (0: a push)

    def resolve(self, message: m.Message) -> None:
        self.message = message
        self.owner.wake()


@attrs.frozen
class Envelope:
    request: Any  # a protocol request, SummariesRequest or Tick
    reply: Reply | Collect | None  # a session's reply slot, or one inside the coordinator
    session: Outbox | None


@attrs.frozen
class Tick:
    now_ms: int
    retention: bool | None = None  # the schedule says the pass is due (None: count ticks)


@attrs.frozen
class SummariesRequest:
    """listGroups asks each prefix actor for its groups, answered after the batch's checkpoint."""


class Collect:
    """A reply slot for a request from inside the coordinator: awaited, not sent."""

    def __init__(self) -> None:
        self.message: Any = None
        self.done = trio.Event()

    def resolve(self, message: Any) -> None:
        self.message = message
        self.done.set()


def now_ms() -> int:
    return math.floor(trio.current_time() * 1000)


@attrs.define
class StoreIdentity:
    """The coordinator's `rsc:store-id` (shard_ops.ensure_store_id), shared by every actor."""

    value: str | None = None


class PrefixActor:
    """Runs one stream prefix's machine: batches, the store, sessions and subscribers."""

    def __init__(self, prefix: str, store: MetadataStore, settings: GroupSettings,
                 *, push_enabled: bool = True, metrics: Any = None,
                 keep_drained_streams: bool = False,
                 identity: StoreIdentity | None = None, budget: GroupBudget | None = None,
                 max_group_size: int | None = None, store_deadline_ms: float | None = None,
                 background: trio.Nursery | None = None,
                 shard_work: ShardWork | None = None) -> None:
        self.prefix = prefix
        self.store = store
        self.identity = identity or StoreIdentity()
        self.streams = StreamAdmin(store.client)
        self.machine = PrefixMachine(prefix, settings, keep_drained_streams=keep_drained_streams,
                                     budget=budget, max_group_size=max_group_size)
        # D4: the store I/O of one batch gets a third of the lease
        self.store_deadline_s = (settings.lease_ttl_ms / 3 if store_deadline_ms is None
                                 else store_deadline_ms) / 1000
        self._abandoned: _Call | None = None  # a store call past its deadline, still running
        self.abandoned_calls = 0
        self.push_enabled = push_enabled
        self.metrics = metrics
        # where to push each member (H10), and the reverse, to forget a closed session fast
        self.sessions: dict[tuple[str, str], Outbox] = {}
        self.session_members: dict[Outbox, set[tuple[str, str]]] = {}
        self.subscribers: set[Outbox] = set()
        self.watches: dict[Outbox, list[Watch]] = {}  # describeGroup with watch: true
        self.shards_readable = True  # the last shard_ops call worked (to log outages once)
        self.send_channel, self.receive_channel = trio.open_memory_channel[Envelope](4096)
        self.healthy = True
        self.batch_limit = MAX_BATCH  # requests per batch, from the cost of the last ones
        # retention passes run here, beside the batches (None: inline, as the last step of one)
        self.background = background
        # set unless a pass runs beside the batches; a reloaded actor takes its predecessor's
        # (`take_over`), so a pass outlives neither the T1 wait nor the skip
        self.trim_done = trio.Event()
        self.trim_done.set()
        # the coordinator-wide pipelines for retention passes and listGroups' totals (None: the
        # actor runs its own), and the schedule told after each batch what it left behind
        self.shard_work = shard_work
        self.schedule: Schedule | None = None
        self._pass_skipped = False

    @property
    def groups(self) -> dict[str, GroupMachine]:
        return self.machine.groups

    def restore(self, snapshot: PrefixSnapshot, now: int) -> None:
        """Load the replayed records after a coordinator restart (members get fresh leases)."""
        self.machine.restore(snapshot, now)

    # --- the loop ------------------------------------------------------------------

    async def run(self) -> None:
        async with self.receive_channel:
            async for first in self.receive_channel:
                batch = [first]
                while len(batch) < self.batch_limit:
                    try:
                        batch.append(self.receive_channel.receive_nowait())
                    except trio.WouldBlock:
                        break
                await self._handle_batch(batch)

    async def drain(self) -> None:
        """Run batches while the mailbox holds requests; return once it is empty (the router
        starts this again when the next request or tick arrives)."""
        receive = self.receive_channel
        while True:
            batch: list[Envelope] = []
            while len(batch) < self.batch_limit:
                try:
                    batch.append(receive.receive_nowait())
                except trio.WouldBlock:
                    break
            if not batch:
                return
            await self._handle_batch(batch)

    def activity(self, *, changed: bool = False) -> Activity:
        """What the schedule needs to know of this prefix now (actors/prefix_schedule.py)."""
        activity = self.machine.activity(watched=bool(self.watches),
                                         repairing=self._abandoned is not None)
        if self._pass_skipped:
            self._pass_skipped, changed = False, True
        return attrs.evolve(activity, changed=True) if changed else activity

    async def _handle_batch(self, batch: list[Envelope]) -> None:
        now = now_ms()
        machine = self.machine
        abandoned = self._abandoned
        if abandoned is not None and abandoned.done.is_set():  # the stalled call returned
            self._abandoned = None
            if abandoned.ok and abandoned.checkpoint is not None:
                machine.adopt(abandoned.checkpoint, now)  # it landed: Redis holds it
                log_event(log, "store.write_landed_late", level=logging.WARNING, prefix=self.prefix)
        machine.store_id = self.identity.value
        answers: list[tuple[Reply | Collect | None, Answer, Outbox | None]] = []
        summaries: list[Collect] = []
        handling_started = time.perf_counter()
        for envelope in batch:
            request = envelope.request
            if isinstance(request, Tick):
                machine.tick(request.now_ms, request.retention)
                continue
            if isinstance(request, SummariesRequest):
                if isinstance(envelope.reply, Collect):
                    summaries.append(envelope.reply)
                continue
            started = trio.current_time()
            answers.append((envelope.reply, machine.handle(request, now), envelope.session))
            if isinstance(request, m.Heartbeat):
                self._track_session((request.consumer_group, request.member_id),
                                    envelope.session if machine.pushes_to_session(request)
                                    else None)
                if self.metrics is not None:
                    self.metrics.observe_heartbeat_seconds(trio.current_time() - started)
            elif isinstance(request, m.GetRouting) and request.subscribe and envelope.session:
                self.subscribers.add(envelope.session)
        per_request = (time.perf_counter() - handling_started) / len(batch)
        self.batch_limit = max(MIN_BATCH, min(MAX_BATCH, int(BATCH_BUDGET_S / max(per_request, 1e-7))))

        # the machine's I/O, in the batch order it owns (actors/prefix.py); each outcome goes back
        deadline = trio.current_time() + self.store_deadline_s
        flush = machine.flush(now, summaries=bool(summaries))
        step: IORequest | None = next(flush, None)
        while step is not None:
            if isinstance(step, Deliver):
                self._deliver(step, answers, summaries)
                outcome = DONE
            else:
                outcome = await self._run(step, deadline)
            try:
                step = flush.send(outcome)
            except StopIteration:
                step = None
        self._mark_watches()
        await self._refresh_watches()
        if self.metrics is not None and machine.migration is not None:
            self.metrics.set_migration_progress(self.prefix, len(machine.migration.drained),
                                                len(machine.migration.from_streams))
        if self.schedule is not None:
            self.schedule.report(self.prefix, self.activity(), now_ms())

    def _deliver(self, deliver: Deliver,
                 answers: list[tuple[Reply | Collect | None, Answer, Outbox | None]],
                 summaries: list[Collect]) -> None:
        """Answer the batch (H12: as the machine resolves each), then push what committed."""
        machine = self.machine
        durable = deliver.durable
        for reply, answer, session in answers:
            response = machine.resolve(answer, durable=durable)
            if reply is not None:
                reply.resolve(response)
            refused = REFUSALS.get(response.status)
            if refused is not None and self.metrics is not None:
                self.metrics.join_refused(refused)
            if session is not None and machine.starts_watch(answer.request, response):
                request = answer.request
                assert isinstance(request, m.DescribeGroup) and isinstance(response, m.GroupDescription)
                self.watches.setdefault(session, []).append(Watch(request, response, now_ms()))
        for collect in summaries:
            collect.resolve(machine.summaries(deliver.totals))
        if deliver.committed is not None:
            self._after_commit(deliver.committed)

    async def _run(self, step: IORequest, deadline: float) -> Outcome:
        """Run one of the machine's I/O requests; its outcome (failures too) goes back."""
        if isinstance(step, LagRead):
            return _read_outcome(await self._read(shard_ops.shard_lag, step.streams, step.group,
                                                  deadline=deadline))
        if isinstance(step, TotalsRead):
            if self.shard_work is not None:  # one pipeline for many prefixes' listGroups reads
                return _read_outcome(await self.shard_work.totals(step.streams, step.groups,
                                                                  deadline))
            return _read_outcome(await self._read(shard_ops.group_totals, step.streams,
                                                  step.groups, deadline=deadline))
        if isinstance(step, RetentionPass):
            await self._retention(step)
            return DONE
        if isinstance(step, AwaitRetention):
            return await self._await_retention(deadline)
        try:
            if isinstance(step, Checkpoint):
                await self._write(step, deadline)
                return DONE
            if isinstance(step, DrainQuery):
                counts = await self._store_call(deadline, "drain check", shard_ops.drain_counts,
                                                self.store.client, step.streams, step.groups)
                return Outcome(shard_ops.drain_report(counts))
            if isinstance(step, MoveOffsets):
                moved = await self._store_call(deadline, "offset move", self.streams.move_offsets,
                                               step.streams, step.group, step.to, step.timestamp_ms)
                log_event(log, "group.offsets_reset", prefix=self.prefix, group=step.group,
                          to=step.to, shards=len(moved))
                return Outcome(moved)
            if isinstance(step, DestroyConsumerGroups):
                await self._store_call(deadline, "consumer group cleanup",
                                       self.streams.destroy_consumer_groups, step.streams,
                                       step.groups)
                return DONE
        except StoreFenced:
            raise
        except StoreError as exc:
            self._log_failure(step, exc)
            return Outcome(error=str(exc), stalled=isinstance(exc, StoreStalled), now_ms=now_ms())
        raise TypeError(f"not an I/O request of the prefix machine: {step!r}")

    def _log_failure(self, step: IORequest, exc: StoreError) -> None:
        if isinstance(step, Checkpoint):
            # the outage itself is logged once for the whole coordinator (app.Readiness)
            if self.healthy:
                log_event(log, "prefix.write_failed", level=logging.DEBUG, prefix=self.prefix,
                          error=str(exc))
            self.healthy = False
        elif isinstance(step, DrainQuery):
            log.warning("migration of prefix %s waits: %s", self.prefix, exc)
        elif isinstance(step, MoveOffsets):
            log.warning("offsets of %s in %s not moved: %s", step.group, self.prefix, exc)
        else:
            log.warning("consumer groups of deleted groups of %s stay for now: %s", self.prefix, exc)

    def _mark_watches(self) -> None:
        """Tell the watches of the groups this batch changed (the others wait for REFRESH_MS)."""
        self.machine.mark_watches(watch for watches in self.watches.values() for watch in watches)

    # --- I/O -----------------------------------------------------------------------

    async def _store_call(self, deadline: float, what: str, fn: Callable[..., Any],
                          *args: Any, checkpoint: Checkpoint | None = None) -> Any:
        """`fn(*args)` on a worker thread, abandoned at `deadline` (D4): StoreStalled then.

        Every I/O failure comes back as a StoreError. While an abandoned call
        still runs, nothing else is sent (StoreStalled at once): the store is
        stalled, and this keeps one prefix's calls in order.
        """
        abandoned = self._abandoned
        if abandoned is not None:  # cleared (and a landed write adopted) at the next batch start
            raise StoreStalled(f"the store has not answered the {abandoned.what} abandoned "
                               "earlier; retry with backoff")
        call = _Call(what, checkpoint)

        def run() -> Any:
            try:
                result = fn(*args)
                call.ok = True
                return result
            except StoreError:
                raise
            except STORE_IO_ERRORS as exc:  # any I/O failure the store did not convert
                raise StoreError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
            finally:
                call.done.set()

        with trio.move_on_at(deadline):
            return await trio.to_thread.run_sync(run, abandon_on_cancel=True)
        self._abandoned = call
        self.abandoned_calls += 1
        self.store.stalled(f"the {what} of {self.prefix!r} was abandoned after "
                           f"{round(self.store_deadline_s * 1000)} ms")
        if self.metrics is not None and hasattr(self.metrics, "store_call_abandoned"):
            self.metrics.store_call_abandoned(what)
        log_event(log, "store.call_abandoned", level=logging.WARNING, prefix=self.prefix, call=what,
                  deadline_ms=round(self.store_deadline_s * 1000))
        raise StoreStalled(f"the {what} took longer than {round(self.store_deadline_s * 1000)} ms "
                           "(a third of the lease) and was abandoned; retry with backoff")

    async def _read(self, operation: Any, *args: Any, deadline: float | None = None) -> Any:
        """A shard_ops call in a worker thread; None when Redis failed (logged once per outage).

        Bounded like every store call (D4): by the batch's deadline, or a third of
        the lease from now.
        """
        if deadline is None:
            deadline = trio.current_time() + self.store_deadline_s
        try:
            result = await self._store_call(deadline, getattr(operation, "__name__", "shard read"),
                                            operation, self.store.client, *args)
        except StoreError as exc:
            if self.shards_readable:
                log_event(log, "shards.unreadable", level=logging.WARNING, prefix=self.prefix,
                          error=str(exc))
            self.shards_readable = False
            return None
        if not self.shards_readable:
            log_event(log, "shards.readable", prefix=self.prefix)
        self.shards_readable = True
        return result

    async def _retention(self, retention_pass: RetentionPass) -> None:
        """T1..T3, the pass the machine says is due: trim, then count what went.

        A pass over thousands of shards takes tens of milliseconds of Redis time, so with
        a `background` nursery it runs there and the batches go on meanwhile (a pass due
        while the last one still runs is skipped: the next one comes ten ticks later).
        The one interleaving that could break T1, a consumer group created at id 0 or an
        offset moved back while a pass computed without it is under way, is closed by the
        machine: such a checkpoint first asks to wait for the running pass (AwaitRetention).
        """
        if self.shard_work is not None:  # batched with other prefixes' passes, beside the batches
            if self.trim_done.is_set():
                self.trim_done = self.shard_work.retention(self.prefix, retention_pass)
            else:  # the last one still runs: this one is due again (T1, reported after the batch)
                self._pass_skipped = True
            return
        if self.background is None:
            await self._trim(retention_pass)
            return
        if not self.trim_done.is_set():
            return
        self.trim_done = trio.Event()
        self.background.start_soon(self._trim_beside, retention_pass, self.trim_done)

    async def _await_retention(self, deadline: float) -> Outcome:
        """T1: wait for the running retention pass, if one runs, until the store deadline."""
        trimming = self.trim_done
        if not trimming.is_set():
            with trio.move_on_at(deadline):
                await trimming.wait()
            if not trimming.is_set():
                return Outcome(error="a retention pass still runs past the store deadline; "
                                     "retry with backoff", stalled=True, now_ms=now_ms())
        return DONE

    async def _trim_beside(self, retention_pass: RetentionPass, done: trio.Event) -> None:
        try:
            await self._trim(retention_pass)
        except Exception as exc:  # noqa: BLE001 - a failed pass is logged; the next one retries
            log_event(log, "retention.failed", level=logging.ERROR, prefix=self.prefix,
                      error=f"{type(exc).__name__}: {exc}")
        finally:
            done.set()

    async def _trim(self, retention_pass: RetentionPass) -> None:
        trim = functools.partial(shard_ops.apply_retention, acked=retention_pass.acked,
                                 max_length=retention_pass.max_length,
                                 max_age_ms=retention_pass.max_age_ms,
                                 now_ms=int(time.time() * 1000))  # stream ids are wall-clock ms
        streams, results = retention_pass.streams, []
        for start in range(0, len(streams), RETENTION_SLICE):
            if start and self.background is not None:
                # beside the batches: Redis runs the scripts of a slice, then the event loop
                # has the cores (and the GIL) to itself for a moment
                await trio.sleep(RETENTION_PAUSE_S)
            done = await self._read(trim, streams[start:start + RETENTION_SLICE],
                                    retention_pass.groups)
            if done is None:  # Redis failed (logged once): the next pass tries again
                break
            results.extend(done)
        if results and self.metrics is not None:
            self.metrics.observe_retention(self.prefix, results)

    async def _refresh_watches(self) -> None:
        """Push to every due watch whose description changed (the rules: actors/watch.py)."""
        if not self.watches:
            return
        streams = self.machine.live_streams()
        for session, watches in list(self.watches.items()):
            for watch in list(watches):
                now = now_ms()
                if not watch.due(now):
                    continue
                group = watch.request.consumer_group
                lags = None
                if group in self.groups:
                    lags = await self._read(shard_ops.shard_lag, streams, group)
                push = watch.offer(self.machine.describe(watch.request, now, lags), now)
                if push is not None:
                    session.push(push)
                if watch.over:
                    watches.remove(watch)
            if not watches:
                self.watches.pop(session, None)

    async def _write(self, checkpoint: Checkpoint, deadline: float) -> None:
        """Write the checkpoint (the streams, then the hash); StoreError when it failed or stalled."""
        started = trio.current_time()
        await self._store_call(deadline, "metadata write", self._write_blocking, checkpoint,
                               checkpoint=checkpoint)
        if not self.healthy:
            log_event(log, "prefix.write_recovered", level=logging.DEBUG, prefix=self.prefix)
        self.healthy = True
        if self.metrics is not None:
            self.metrics.observe_checkpoint_seconds(trio.current_time() - started)

    def _write_blocking(self, checkpoint: Checkpoint) -> None:
        for create in checkpoint.create:
            self.store.create_consumer_groups(create.streams, create.groups)
        if checkpoint.unseal:
            self.streams.unseal(checkpoint.unseal)
        if checkpoint.seal:
            self.streams.seal(checkpoint.seal)
        if checkpoint.retire is not None:
            self.streams.retire(checkpoint.retire.streams, checkpoint.retire.groups)
        self.store.write(self.prefix, checkpoint.changes, checkpoint.owners)

    def _after_commit(self, committed: Committed) -> None:
        """Pushes (H10), routing notifications, logs and metrics, once the state is durable."""
        for event in committed.prefix_events:
            log_event(log, event.kind, prefix=self.prefix, **event.fields)
        if committed.migration_retired and self.metrics is not None:
            self.metrics.migration_finished(self.prefix)
        for name, group_event in committed.events:
            _log_event(self.prefix, name, group_event)
            if self.metrics is not None:
                self.metrics.group_event(self.prefix, name, group_event)
        if self.metrics is not None:
            for name in committed.groups:
                group = self.groups.get(name)
                if group is not None:
                    self.metrics.set_group_state(self.prefix, name, group)
            for name in committed.deleted:
                self.metrics.group_forgotten((self.prefix, name))
        if self.push_enabled:
            for push in committed.pushes:
                session = self.sessions.get((push.consumer_group, push.member_id))
                if session is not None:
                    session.push(push)
        if committed.routing is not None:
            for session in list(self.subscribers):
                session.push(committed.routing)

    # --- sessions ------------------------------------------------------------------

    def _track_session(self, key: tuple[str, str], session: Outbox | None) -> None:
        old = self.sessions.get(key)
        if old is session:
            return
        if old is not None:
            self.session_members[old].discard(key)
            del self.sessions[key]
        if session is not None:
            self.sessions[key] = session
            self.session_members.setdefault(session, set()).add(key)

    def subscribe(self, *sessions: Outbox) -> None:
        """These sessions get every routing change of the prefix (getRouting with subscribe)."""
        self.subscribers.update(sessions)

    def take_over(self, old: PrefixActor) -> None:
        """Replace `old` (a reload): push targets survive, so members keep getting hints,
        subscribers their routing and watchers their descriptions; and a retention pass
        the old one started is still waited for (T1)."""
        self.subscribers.update(old.subscribers)
        self.trim_done = old.trim_done
        for session, watches in old.watches.items():
            self.watches.setdefault(session, []).extend(watches)
        for key, session in old.sessions.items():
            self.sessions.setdefault(key, session)
            self.session_members.setdefault(session, set()).add(key)

    def forget_session(self, session: Outbox) -> None:
        self.subscribers.discard(session)
        self.watches.pop(session, None)
        for key in self.session_members.pop(session, ()):
            del self.sessions[key]


_EVENT_NAMES = {"epoch": "group.epoch", "joined": "member.joined", "rejoined": "member.rejoined",
                "left": "member.left", "expired": "member.expired", "removed": "member.removed",
                "revoke_timeout": "member.removed", "fenced": "member.fenced",
                "revoked": "member.revoked", "away": "member.away", "returned": "member.returned"}


def _read_outcome(value: Any) -> Outcome:
    """A shard read's outcome: None is a failed read (already logged by `_read`)."""
    return Outcome(value) if value is not None else Outcome(error="the shards could not be read")


def _log_event(prefix: str, group: str, event: Any) -> None:
    fields: dict[str, Any] = {"prefix": prefix, "group": group}
    if event.member_id:
        fields["member"] = event.member_id
    if event.kind == "revoke_timeout":
        fields["reason"] = "revoke_timeout"
    log_event(log, _EVENT_NAMES.get(event.kind, event.kind), **fields, **event.fields)
