"""The router: finds each stream prefix's actor, supervises it, and ticks them all.

- Supervision (triotp's model): every prefix actor runs under its own
  supervisor task. An actor that raises is logged, counted
  (`rsc_prefix_actor_restarts_total`) and replaced by a fresh one reloaded
  from Redis; the requests it held are answered COORDINATOR_NOT_AVAILABLE
  (members retry), its sessions and subscribers carry over, and no other
  prefix notices. Only a fenced store (another coordinator owns Redis) ends
  the process.
- No task per prefix: an actor runs (in a task of the router's nursery) only
  while its mailbox holds something, woken by a request or by a tick; an idle
  prefix is its machine and an empty mailbox.
- Ticks never block: each actor gets a tick only when its mailbox has room;
  a backed-up prefix skips a tick (the next one carries a later `now`), so it
  can never delay the others (the lease is renewed by its own task, app.py).
  With a `schedule` (actors/core/prefix_schedule.py) only the prefixes it says are
  due get a tick (H6, H14, R2, T1, T2): idle prefixes cost nothing per tick.
- Requests that name a prefix without an actor create nothing unless the
  request may (A1, H13; actors/core/prefix_admission.py decides, `route` asks):
  a `getRouting` subscription on an unknown prefix is kept here, only as long
  as its session.
- The server asks, never reads: `route` a request, `list_groups`
  (actors/listing.py), `forget` a closed session.
"""

from __future__ import annotations

import collections
import logging
import time
import traceback
from collections.abc import Awaitable, Callable

import trio

from rsc.actors.actor import PrefixActor, now_ms
from rsc.actors.core.prefix import PrefixMachine
from rsc.actors.core.prefix_admission import GroupBudget, answer_without_state
from rsc.actors.core.prefix_schedule import Schedule
from rsc.actors.listing import list_groups
from rsc.actors.logs import log_event
from rsc.actors.mailbox import Envelope, Tick
from rsc.actors.ops.group_lag import PrefixGroups
from rsc.actors.ports import Outbox, ReplySlot, RouterMetrics
from rsc.actors.redis_io.shard_work import ShardWork
from rsc.actors.redis_io.store import StoreFenced
from rsc.common.backoff import Backoff, no_jitter
from rsc.protocol import messages as m
from rsc.protocol.errors import Status

log = logging.getLogger("rsc.coordinator")

ASKED_WINDOW_S = 60.0  # K8: a prefix asked for this recently counts as waited for
ASKED_MAX = 1000  # K8: at most this many such prefixes remembered
RESTART_BACKOFF_START_S = 0.05
RESTART_BACKOFF_MAX_S = 5.0
STABLE_AFTER_S = 10.0  # an actor that ran this long without failing resets the backoff
UNAVAILABLE = "the stream prefix is being reloaded from the metadata store; retry with backoff"


def unavailable_response(request: object, error: str = UNAVAILABLE) -> m.Response:
    """COORDINATOR_NOT_AVAILABLE in `request`'s own response type (its `error()`); nothing
    is revealed. Only what is no protocol request gets an untyped `error` frame."""
    if isinstance(request, m.Request):
        return request.error(Status.COORDINATOR_NOT_AVAILABLE, error)
    return m.ErrorResponse(request_id=getattr(request, "request_id", None),
                           status=Status.COORDINATOR_NOT_AVAILABLE, error=error)


class Router:
    """Owns the prefix actors: creation, dispatch, supervision, ticks, session forgetting."""

    def __init__(self, nursery: trio.Nursery, make_actor: Callable[[str], PrefixActor], *,
                 reload: Callable[[str], Awaitable[PrefixActor]] | None = None,
                 metrics: RouterMetrics | None = None, budget: GroupBudget | None = None,
                 schedule: Schedule | None = None, shard_work: ShardWork | None = None) -> None:
        self.nursery = nursery
        self.shard_work = shard_work  # listGroups reads idle prefixes' totals in its pipelines
        self.schedule = schedule  # which prefixes a tick wakes (None: every one)
        self.make_actor = make_actor
        self.budget = budget  # A1: the coordinator's --max-groups count, shared with its actors
        self.reload = reload
        self.metrics = metrics
        self.actors: dict[str, PrefixActor] = {}
        self._asked: dict[str, float] = {}  # K8: prefixes without an actor asked for, and when
        self.restarts = 0
        self.ticks_skipped = 0
        # requests handed to each actor and not answered yet: what a failure must answer
        self._in_flight: dict[str, collections.deque[Envelope]] = {}
        self._live: set[str] = set()  # prefixes whose actor is serving (not being reloaded)
        self._running: set[str] = set()  # prefixes whose actor has a task draining its mailbox
        self._backoff: dict[str, Backoff] = {}  # restart backoff of prefixes that failed lately
        self._addresses = SessionIndex()

    # --- actors ----------------------------------------------------------------------

    def add(self, actor: PrefixActor) -> None:
        """Serve `actor`'s prefix; it runs (supervised) whenever its mailbox holds something."""
        self._install(actor)
        self._report(actor)

    def actor(self, prefix: str, *, create: bool) -> PrefixActor | None:
        actor = self.actors.get(prefix)
        if actor is None and create:
            actor = self.make_actor(prefix)
            self.add(actor)
        return actor

    def _install(self, actor: PrefixActor) -> None:
        self.actors[actor.prefix] = actor
        self._in_flight.setdefault(actor.prefix, collections.deque())
        self._live.add(actor.prefix)
        waiting = self._addresses.take_waiting(actor.prefix)
        if waiting:
            actor.subscribe(*waiting)

    def group_streams(self) -> list[PrefixGroups]:
        """C4: every prefix's live streams and groups (what the lag metrics read)."""
        return [PrefixGroups(prefix, actor.machine.live_streams(), tuple(sorted(actor.groups)))
                for prefix, actor in self.actors.items() if prefix in self._live]

    def routing_versions(self, prefix: str) -> tuple[tuple[str, ...], ...]:
        """C2: the prefix's routing versions still present, newest first (() for a prefix
        this coordinator has no actor for)."""
        actor = self.actors.get(prefix)
        return actor.machine.routing_versions() if actor is not None else ()

    def unowned_shards(self) -> list[tuple[str, str, int]]:
        """D7: `(prefix, group, count)` of every group with live members (the metric's source)."""
        now = now_ms()
        return [(prefix, group, count) for prefix, actor in self.actors.items()
                for group, count in actor.machine.unowned_shards(now).items()]

    def prefixes_without_routing(self) -> list[str]:
        """K8: every prefix that clients asked for and that has no routing (the metric's
        source): an actor's, or one asked for in the last ASKED_WINDOW_S that has none."""
        now = time.monotonic()
        asked = {prefix for prefix, at in list(self._asked.items())
                 if now - at < ASKED_WINDOW_S and prefix not in self.actors}
        return sorted(asked | {prefix for prefix, actor in list(self.actors.items())
                               if actor.machine.routing is None
                               and actor.machine.asked_without_routing})

    def _asked_unknown(self, prefix: str) -> None:
        """A getRouting for a prefix without an actor: remembered (bounded) for the metric."""
        asked = self._asked
        asked.pop(prefix, None)
        asked[prefix] = time.monotonic()
        while len(asked) > ASKED_MAX:
            del asked[next(iter(asked))]

    async def send(self, prefix: str, envelope: Envelope) -> None:
        """Hand a request to the prefix's actor (waits while its mailbox is full)."""
        actor = self.actors[prefix]
        if prefix not in self._live:
            envelope.fail(unavailable_response(envelope.request))
            return
        in_flight = self._in_flight[prefix]
        while in_flight and in_flight[0].answered:
            in_flight.popleft()
        in_flight.append(envelope)
        if envelope.session is not None:
            self._addresses.sent(envelope.session, prefix)
        channel = actor.send_channel
        try:
            try:
                channel.send_nowait(envelope)
            except trio.WouldBlock:
                await channel.send(envelope)  # a full mailbox: the session waits for room
                self._wake(prefix)
                return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return  # the actor failed meanwhile: its supervisor answers what it held
        # woken before this task yields: the actor's batch runs in the next scheduler pass,
        # not the one after (the common case, a mailbox with room, costs one pass less)
        self._wake(prefix)
        await trio.lowlevel.cancel_shielded_checkpoint()

    async def route(self, request: m.Request, reply: ReplySlot, session: Outbox | None) -> None:
        """Hand a request naming a stream prefix to its actor; A1, H13: a prefix without an
        actor holds nothing, and only a join or setShardCount within --max-groups starts one
        (actors/core/prefix_admission.py), anything else is answered here."""
        prefix = getattr(request, "stream_prefix")  # noqa: B009 - every request routed has one
        if prefix not in self.actors:
            if isinstance(request, m.GetRouting):
                self._asked_unknown(prefix)  # K8: rsc_prefix_without_routing
            if isinstance(request, m.GetRouting) and request.subscribe and session is not None:
                self.subscribe_unknown(prefix, session)  # lives as long as its session
            answered = answer_without_state(request, self.budget)
            if answered is not None:
                reply.resolve(answered)
                return
        self.actor(prefix, create=True)
        await self.send(prefix, Envelope(request, reply, session))

    async def list_groups(self) -> tuple[m.GroupSummary, ...]:
        """Every prefix's groups, in prefix order (actors/listing.py: an idle prefix is read
        where it stands, a busy one answers after its current batch is durable)."""
        return await list_groups(sorted(self.actors), self.idle_machine, self.send,
                                 self.shard_work)

    async def while_idle(self, prefix: str,
                         work: Callable[[PrefixMachine], Awaitable[None]]) -> bool:
        """Run `work` on the prefix's machine while no batch of it can run (B7: its persisted
        metadata is then what Redis holds, and no checkpoint is in flight); requests queue
        meanwhile and run after. False (nothing run) when the prefix is not idle now."""
        machine = self.idle_machine(prefix)
        if machine is None:
            return False
        self._running.add(prefix)
        try:
            await work(machine)
        finally:
            self._running.discard(prefix)
            actor = self.actors.get(prefix)
            if actor is not None and actor.mailbox.queued:
                self._wake(prefix)
        return True

    def format_raised(self, format_version: int) -> None:
        """B6: the store now takes what a newer format adds (emptySinceMs from format 2): every
        prefix with an empty group writes its groups' records again with its next batch, which
        is scheduled like any other change of its records."""
        now = now_ms()
        for prefix, actor in self.actors.items():
            if actor.machine.rewrite_empty_groups() and self.schedule is not None:
                self.schedule.report(prefix, actor.activity(changed=True), now)

    def idle_machine(self, prefix: str) -> PrefixMachine | None:
        """The prefix's machine when its actor is idle: serving, no batch running, nothing
        queued. Its state is then what Redis holds (a failed write rolled it back, H12), so
        it may be read without a batch (listGroups)."""
        actor = self.actors.get(prefix)
        if (actor is None or prefix not in self._live or prefix in self._running
                or actor.mailbox.queued):
            return None
        return actor.machine

    def subscribe_unknown(self, prefix: str, session: Outbox) -> None:
        """Keep a routing subscription for a prefix with no actor yet (lives with the session)."""
        self._addresses.sent(session, prefix)
        actor = self.actors.get(prefix)
        if actor is not None:
            actor.subscribe(session)
        else:
            self._addresses.wait(prefix, session)

    # --- supervision -----------------------------------------------------------------

    def _wake(self, prefix: str) -> None:
        """Start the prefix's actor draining its mailbox, unless it runs or is being reloaded."""
        if prefix in self._running or prefix not in self._live:
            return
        self._running.add(prefix)
        self.nursery.start_soon(self._supervise, prefix)

    async def _supervise(self, prefix: str) -> None:
        """Drain the actor's mailbox; on a failure, replace it (reloaded, with backoff)."""
        actor = self.actors[prefix]
        started = trio.current_time()
        try:
            await actor.drain()
        except StoreFenced:
            raise  # another coordinator owns Redis: this whole process must stop
        except Exception as exc:  # noqa: BLE001 - one prefix's failure is contained here
            failure: Exception | None = exc
        else:
            failure = None
        if failure is None:
            self._running.discard(prefix)
            in_flight = self._in_flight[prefix]  # an idle prefix keeps no answered request
            while in_flight and in_flight[0].answered:
                in_flight.popleft()
            if trio.current_time() - started >= STABLE_AFTER_S:
                self._backoff.pop(prefix, None)
            return
        self._live.discard(prefix)
        self.restarts += 1
        if self.metrics is not None:
            self.metrics.prefix_actor_restarted(prefix)
        log_event(log, "prefix.actor_failed", level=logging.ERROR, prefix=prefix,
                  error=f"{type(failure).__name__}: {failure}",
                  traceback="".join(traceback.format_exception(failure)))
        self._fail_in_flight(prefix, actor)
        backoff = self._backoff.get(prefix)
        if backoff is None:
            backoff = self._backoff[prefix] = Backoff(RESTART_BACKOFF_START_S, RESTART_BACKOFF_MAX_S,
                                                      jitter=no_jitter)
        replacement = await self._reload_until_loaded(prefix, backoff)
        replacement.take_over(actor)
        self._install(replacement)
        self._report(replacement)
        log_event(log, "prefix.reloaded", level=logging.WARNING, prefix=prefix,
                  groups=len(replacement.groups))
        self._running.discard(prefix)

    def pass_failed(self, prefix: str) -> None:
        """A retention pass of `prefix` failed in Redis: T1, it is due again (as after a change)."""
        actor = self.actors.get(prefix)
        if actor is not None and self.schedule is not None:
            self.schedule.report(prefix, actor.activity(changed=True), now_ms())

    def _report(self, actor: PrefixActor) -> None:
        """A new or reloaded actor tells the schedule what it holds (restored members expire,
        a restored migration drains: H6, R2), and reports after each of its batches."""
        if self.schedule is None:
            return
        actor.schedule = self.schedule
        self.schedule.report(actor.prefix, actor.activity(changed=True), now_ms())

    async def _reload_until_loaded(self, prefix: str, backoff: Backoff) -> PrefixActor:
        """A fresh actor for `prefix` from Redis, retrying (with backoff) while Redis fails."""
        while True:
            await trio.sleep(backoff.next())
            if self.reload is None:
                return self.make_actor(prefix)
            try:
                return await self.reload(prefix)
            except StoreFenced:
                raise
            except Exception as exc:  # noqa: BLE001 - Redis down or out of fds: try again
                log_event(log, "prefix.reload_failed", level=logging.WARNING, prefix=prefix,
                          error=f"{type(exc).__name__}: {exc}")

    def _fail_in_flight(self, prefix: str, actor: PrefixActor) -> None:
        """Answer every request the failed actor held or had queued: COORDINATOR_NOT_AVAILABLE."""
        actor.send_channel.close()
        in_flight = self._in_flight.get(prefix, collections.deque())
        while in_flight:
            envelope = in_flight.popleft()
            if not envelope.answered:
                envelope.fail(unavailable_response(envelope.request))

    # --- ticks and sessions ----------------------------------------------------------

    def tick(self, *, expire: bool = True) -> None:
        """Send a tick to every due live actor (each one with a schedule, else every one) that
        has room for it; never waits (a full mailbox skips one). `expire` False: the ticks
        expire nobody (fresh leases after a lapse, D5)."""
        now = now_ms()
        if self.schedule is None:
            due: list[tuple[str, bool | None]] = [(prefix, None) for prefix in self.actors]
        else:
            due = [(wake.prefix, wake.retention) for wake in self.schedule.due(now)]
        for prefix, retention in due:
            actor = self.actors.get(prefix)
            if actor is None or prefix not in self._live:
                continue
            try:
                actor.send_channel.send_nowait(Envelope(Tick(now, retention, expire), None, None))
            except trio.WouldBlock:
                self.ticks_skipped += 1
                continue
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                continue  # failing right now; its supervisor takes over
            self._wake(prefix)

    def forget(self, session: Outbox) -> None:
        """Drop every reference to a closed session (called once, after its last reply)."""
        for prefix in self._addresses.forget(session):
            actor = self.actors.get(prefix)
            if actor is not None:
                actor.forget_session(session)


class SessionIndex:
    """Which prefixes each session sent requests to (to forget it there), and the getRouting
    subscriptions on prefixes that have no actor yet, until their session ends."""

    def __init__(self) -> None:
        self._prefixes: dict[Outbox, set[str]] = {}
        self._waiting: dict[str, set[Outbox]] = {}

    def sent(self, session: Outbox, prefix: str) -> None:
        self._prefixes.setdefault(session, set()).add(prefix)

    def wait(self, prefix: str, session: Outbox) -> None:
        self._waiting.setdefault(prefix, set()).add(session)

    def take_waiting(self, prefix: str) -> set[Outbox]:
        """The subscribers waiting for `prefix`'s actor, which exists now."""
        return self._waiting.pop(prefix, set())

    def forget(self, session: Outbox) -> set[str]:
        """Drop `session` everywhere; the prefixes whose actors may still know it."""
        for prefix in [p for p, waiting in self._waiting.items() if session in waiting]:
            waiting = self._waiting[prefix]
            waiting.discard(session)
            if not waiting:
                del self._waiting[prefix]
        return self._prefixes.pop(session, set())
