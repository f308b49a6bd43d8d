"""The member actor: one member's session, reader, workers and acker in one nursery.

Decisions come from `MemberState` (reconcile.py) and `KeyOrderedQueue`
(ordering.py); this module only moves data between them, the coordinator
session and Redis. Redis calls go through the sync client in worker threads:
one connection for the blocking reader, one for the acker, one for the rest.

The hot path is batched end to end: the reader keeps one XREADGROUP (COUNT =
read_count) in flight while the last batch is parsed; long-lived workers (as
many as `maxConcurrency`) take entries from the key-ordered queue without a
task or a thread hop per message; the acker sends up to `ack_batch` ids per
round trip, waiting up to `ack_linger_ms` while workers are still busy with
what was read. Nothing is woken per message except, once a batch is worth
sending, the acker; `_changed` fires on state transitions only.
"""

from __future__ import annotations

import inspect
import logging
import operator
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import redis
import trio

from rsc.member.ordering import KeyOrderedQueue
from rsc.member.policies import AckPolicy, RetryPolicy
from rsc.member.reconcile import JOIN_EPOCH, LEAVE_EPOCH, Actions, Event, MemberState, Phase
from rsc.member.session import ResponseUndecodable, SessionClosed, open_session
from rsc.member.stats import MemberStats
from rsc.member.streams import (
    KEY_FIELD,
    NOT_OWNER,
    VALUE_FIELD,
    FlatEntry,
    ProduceOps,
    StreamOps,
    connect,
    pairs,
    supports_xackdel,
)
from rsc.protocol import AssignmentChanged, HeartbeatResponse, Status

log = logging.getLogger(__name__)


@attrs.frozen
class Message:
    """What a handler receives: one stream entry of one shard."""

    shard: str
    id: str
    key: str
    value: str
    fields: dict[str, str]
    member_id: str
    attempt: int = 1


Handler = Callable[[Message], Awaitable[None] | None]
EventCallback = Callable[[str, Event], None]
ReadObserver = Callable[[str, frozenset[str], float, float], None]
AckObserver = Callable[[str, int], None]


@attrs.frozen(kw_only=True)
class MemberConfig:
    """Settings of one member (the listener API and `rsc consume` build these)."""

    coordinator_url: str
    redis_url: str
    stream_prefix: str
    consumer_group: str
    member_id: str
    capacity: int = 4
    token: str | None = None
    read_count: int = 100
    block_ms: int = 200
    max_buffered: int = 1000
    ack_batch: int = 500
    ack_linger_ms: float = 5.0
    ack_policy: AckPolicy = AckPolicy.AFTER
    retry: RetryPolicy | None = None
    default_heartbeat_interval_ms: int = 1000
    request_timeout_s: float = 10.0
    drain_timeout_s: float = 30.0
    leave_timeout_s: float = 5.0
    lag_interval_s: float = 2.0


class Signal:
    """A re-armable broadcast: `fire()` wakes every current waiter."""

    def __init__(self) -> None:
        self._event = trio.Event()

    def fire(self) -> None:
        self._event.set()
        self._event = trio.Event()

    async def wait(self) -> None:
        await self._event.wait()

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        while not condition():
            await self._event.wait()


_MESSAGE_SETTERS = tuple(Message.__dict__[name].__set__ for name in (
    "shard", "id", "key", "value", "fields", "member_id", "attempt"))


def new_message(shard: str, entry_id: str, key: str, value: str, fields: dict[str, str],
                member_id: str, attempt: int = 1) -> Message:
    """`Message(...)` without attrs' frozen `__init__` (4x cheaper: this runs once per entry)."""
    set_shard, set_id, set_key, set_value, set_fields, set_member, set_attempt = _MESSAGE_SETTERS
    message = object.__new__(Message)
    set_shard(message, shard)
    set_id(message, entry_id)
    set_key(message, key)
    set_value(message, value)
    set_fields(message, fields)
    set_member(message, member_id)
    set_attempt(message, attempt)
    return message


# A queued entry: ((shard, key), id, fields, value). Plain tuples of strings and a dict of
# strings, on purpose: the cyclic GC stops tracking such tuples the first time it sees them,
# so a thousand buffered entries are not promoted to the old generation over and over (each
# promotion wave brings a full collection of the whole process heap nearer). The Message a
# handler gets is made by the worker right before the handler and dies young.
Queued = tuple[tuple[str, str], str, dict[str, str], str]


def queued_entries(shard: str, entries: list[FlatEntry]) -> list[Queued]:
    """Queue items of one shard from entries as the server sent them (deleted ones skipped)."""
    queued: list[Queued] = []
    append = queued.append
    for entry_id, flat in entries:
        if entry_id is None:
            continue
        if flat.__class__ is list and len(flat) == 4:  # the usual entry: key and value
            field_a, value_a, field_b, value_b = flat
            fields: dict[str, str] = {field_a: value_a, field_b: value_b}
        elif flat is None:
            fields = {}
        else:
            fields = pairs(flat)
        append(((shard, fields.get(KEY_FIELD, "")), entry_id, fields,
                fields.get(VALUE_FIELD, "")))
    return queued


_order_key = operator.itemgetter(0)  # a queued entry's (shard, key)


class AckBuffer:
    """Ids of one shard, read under one generation, handled and waiting for the acker."""

    __slots__ = ("shard", "generation", "ids", "sent", "refused")

    def __init__(self, shard: str, generation: int) -> None:
        self.shard = shard
        self.generation = generation
        self.ids: list[str] = []
        self.sent: trio.Event | None = None  # made by AckPolicy.BEFORE workers waiting on it
        self.refused = False


class Member:
    """One member of a group: `await member.run()` until `member.stop()` (clean leave).

    Cancelling `run` stops everything at once without leaving (the coordinator
    then expires the member after its lease).
    """

    def __init__(self, config: MemberConfig, handler: Handler, *,
                 on_event: EventCallback | None = None,
                 read_observer: ReadObserver | None = None,
                 ack_observer: AckObserver | None = None) -> None:
        self.config = config
        self.handler = handler
        self.on_event = on_event
        self.read_observer = read_observer
        self.ack_observer = ack_observer
        self.state = MemberState(member_id=config.member_id)
        self.stats = MemberStats(member_id=config.member_id, workers=config.capacity)
        self._is_async = inspect.iscoroutinefunction(handler)
        self._queue: KeyOrderedQueue[Queued] = KeyOrderedQueue(_order_key)
        self._recovering: dict[str, str] = {}
        self._reads_in_progress: frozenset[str] = frozenset()
        # a read sent ahead, not yet answered: (shards, their generations, when it was sent)
        self._read_in_flight: tuple[tuple[str, ...], dict[str, int], float] | None = None
        # fired on state transitions (and pushes) only, never per message
        self._changed = Signal()
        self._heartbeat_due = True
        # workers: `_worker_limit` of them take work; the rest park on `_over_limit`
        self._worker_limit = config.capacity
        self._idle = trio.lowlevel.ParkingLot()
        self._over_limit = trio.lowlevel.ParkingLot()
        self._busy = 0  # workers holding a work item
        self._threads = trio.CapacityLimiter(max(64, config.capacity))
        # the reader parks on `_reader_wake` while it has nothing to do
        self._reader_wake = Signal()
        self._reader_waiting = False
        # acks: handed over by workers, sent in batches by the acker
        self._acks: dict[tuple[str, int], AckBuffer] = {}
        self._acks_pending = 0  # ids in `_acks`
        self._ack_lot = trio.lowlevel.ParkingLot()
        self._acker_parked = False
        self._acks_awaited = 0  # AckPolicy.BEFORE workers waiting for their ack
        self._stop_requested = trio.Event()
        self._joined = trio.Event()
        self._left = trio.Event()
        self._use_xackdel = False
        self._misc_client: redis.Redis | None = None

    # --- lifecycle ---------------------------------------------------------------------

    @property
    def member_id(self) -> str:
        return self.config.member_id

    def stop(self) -> None:
        """Ask for a clean leave: stop reading, drain in-flight work, leave with epoch -1."""
        self._stop_requested.set()

    async def run(self, *, task_status: trio.TaskStatus[Member] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until `stop()` has drained and left; `started` once the first join is accepted."""
        self._misc_client = connect(self.config.redis_url)
        self._use_xackdel = await trio.to_thread.run_sync(supports_xackdel, self._misc_client)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._session_loop)
                nursery.start_soon(self._reader)
                nursery.start_soon(self._worker_pool)
                nursery.start_soon(self._acker)
                nursery.start_soon(self._lease_watch)
                nursery.start_soon(self._lag_poll)
                with trio.CancelScope() as join_wait:
                    nursery.start_soon(self._cancel_on, self._stop_requested, join_wait)
                    await self._joined.wait()
                task_status.started(self)
                await self._stop_requested.wait()
                await self._leave()
                nursery.cancel_scope.cancel()
        finally:
            self._misc_client.close()

    async def _cancel_on(self, event: trio.Event, scope: trio.CancelScope) -> None:
        await event.wait()
        scope.cancel()

    async def _leave(self) -> None:
        self._apply(*self.state.on_leave_requested())
        with trio.move_on_after(self.config.drain_timeout_s):
            await self._changed.wait_until(lambda: not self.state.holds)
        if self.state.holds:
            self._apply(*self.state.on_abandon("drain timed out on leave"))
        with trio.move_on_after(self.config.leave_timeout_s):
            await self._left.wait()

    # --- applying decisions ------------------------------------------------------------

    def _apply(self, state: MemberState, actions: Actions) -> None:
        self.state = state
        for shard in actions.abandon:
            self._queue.drop_shard(shard)
            self._recovering.pop(shard, None)
        for shard in actions.revoke:
            self._queue.drop_shard(shard)
        for shard in actions.start:
            self._recovering[shard] = "0-0"
        workers = max(1, state.max_concurrency or self.config.capacity)
        if self._worker_limit != workers:
            self._worker_limit = workers
            self._over_limit.unpark_all()
            self._idle.unpark_all()  # idle workers over the new limit move to `_over_limit`
        self.stats.workers = workers
        self.stats.member_epoch = state.member_epoch
        self.stats.owned_shards = tuple(sorted(state.owned()))
        if actions.heartbeat_now:
            self._heartbeat_due = True
        for event in actions.events:
            if event.name == "joined":
                self._joined.set()
            elif event.name == "fenced":
                self.stats.fences += 1
            if self.on_event is not None:
                self.on_event(self.member_id, event)
        self._changed.fire()
        self._wake_reader()
        self._check_drained()

    def _check_drained(self) -> None:
        for shard in self.state.revoking():
            if self.stats.in_flight[shard] == 0 and shard not in self._reads_in_progress:
                self._recovering.pop(shard, None)
                self._apply(*self.state.on_drained(shard))
                return  # _apply re-checks the rest

    def _finish(self, shard: str, count: int = 1) -> None:
        """`count` entries of `shard` are no longer in flight (acked, refused or dropped)."""
        in_flight = self.stats.in_flight
        in_flight[shard] -= count
        if in_flight[shard] <= 0:
            del in_flight[shard]
            self._after_finish()

    def _after_finish(self) -> None:
        if self._reader_waiting:
            self._wake_reader()  # a fresh claim may wait for in-flight work to finish
        self._check_drained()

    def _wake_reader(self) -> None:
        self._reader_waiting = False  # one wakeup is enough: it re-checks what it can do
        self._reader_wake.fire()

    # --- session: heartbeats ---------------------------------------------------------------

    async def _session_loop(self) -> None:
        backoff = 0.05
        while not self._left.is_set():
            try:
                async with open_session(self.config.coordinator_url, "member",
                                        token=self.config.token) as session:
                    backoff = 0.05
                    self.state = self.state.on_session_lost()
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(self._watch_pushes, session)
                        await self._heartbeat_loop(session)
                        nursery.cancel_scope.cancel()
            except (SessionClosed, ResponseUndecodable, trio.TooSlowError) as exc:
                log.info("member %s: session lost (%s); reconnecting", self.member_id, exc)
                if self._stop_requested.is_set() and not self.state.holds:
                    self._left.set()  # nobody to tell: the lease runs out
                    return
                await trio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)

    async def _watch_pushes(self, session: Any) -> None:
        async for push in session.pushes:
            if isinstance(push, AssignmentChanged) and push.member_id == self.member_id:
                self._heartbeat_due = True
                self._changed.fire()

    async def _heartbeat_loop(self, session: Any) -> None:
        while True:
            self._heartbeat_due = False
            request, sent = self.state.heartbeat(
                trio.current_time(), capacity=self.config.capacity,
                stream_prefix=self.config.stream_prefix,
                consumer_group=self.config.consumer_group)
            with trio.fail_after(self.config.request_timeout_s):
                response = await session.request(request)
            if not isinstance(response, HeartbeatResponse):
                log.error("member %s: heartbeat refused: %s", self.member_id, response)
            else:
                if response.status != Status.OK and response.status != Status.REVOKE_PENDING:
                    log.info("member %s: heartbeat answered %s %s", self.member_id,
                             response.status, response.error or "")
                self._apply(*self.state.on_response(sent, response))
                if sent.member_epoch == LEAVE_EPOCH and self.state.member_epoch == LEAVE_EPOCH:
                    self._left.set()
                    return
            interval = (self.state.heartbeat_interval_ms
                        or self.config.default_heartbeat_interval_ms) / 1000
            with trio.move_on_after(interval):
                await self._changed.wait_until(lambda: self._heartbeat_due)

    async def _lease_watch(self) -> None:
        while True:
            deadline = self.state.lease_deadline()
            if deadline is None:
                await self._changed.wait()
                continue
            with trio.move_on_at(deadline):
                await self._changed.wait()
            before = self.state
            self._apply(*self.state.on_lease_check(trio.current_time()))
            if self.state is not before:
                log.warning("member %s: no heartbeat accepted for a lease TTL; fenced itself",
                            self.member_id)

    # --- reader ------------------------------------------------------------------------

    def _recoverable(self) -> list[str]:
        reading = self.state.reading()
        # a fresh claim waits for earlier work on the shard, so nothing runs twice at once
        return [s for s in sorted(self._recovering) if s in reading
                and (self._recovering[s] != "0-0" or self.stats.in_flight[s] == 0)]

    def _readable(self) -> list[str]:
        return sorted(s for s in self.state.reading() if s not in self._recovering)

    def _reader_can_work(self) -> bool:
        return (len(self._queue) < self.config.max_buffered
                and bool(self._recoverable() or self._readable()))

    async def _reader(self) -> None:
        ops = StreamOps(connect(self.config.redis_url), self.config.consumer_group,
                        self.member_id, use_xackdel=self._use_xackdel)
        try:
            while True:
                if self._read_in_flight is None:  # never park with a read in flight
                    while not self._reader_can_work():
                        self._reader_waiting = True
                        try:
                            await self._reader_wake.wait()
                        finally:
                            self._reader_waiting = False
                    recoverable = self._recoverable()
                    if recoverable:
                        try:
                            await self._recover_some(ops, recoverable[0])
                        except redis.RedisError as exc:
                            log.warning("member %s: claim failed: %r", self.member_id, exc)
                            await trio.sleep(0.2)
                        continue
                try:
                    await self._read_new(ops)
                except redis.RedisError as exc:
                    log.warning("member %s: read failed: %r", self.member_id, exc)
                    self._read_failed(ops)
                    await trio.sleep(0.2)
        finally:
            ops.client.close()

    async def _observed(self, shards: frozenset[str], call: Callable[[], Any]) -> Any:
        self._reads_in_progress = shards
        started = trio.current_time()
        try:
            return await trio.to_thread.run_sync(call)
        finally:
            self._reads_in_progress = frozenset()
            if self.read_observer is not None:
                self.read_observer(self.member_id, shards, started, trio.current_time())
            self._check_drained()

    async def _recover_some(self, ops: StreamOps, shard: str) -> None:
        generation = self.state.holds[shard].generation
        start = self._recovering[shard]
        count = self.config.read_count

        def claim() -> tuple[str, list[Queued]]:
            cursor, entries = ops.claim_pending_raw(shard, start, count=count)
            return cursor, queued_entries(shard, entries)

        cursor, messages = await self._observed(frozenset({shard}), claim)
        if not self._still_reading(shard, generation) or shard not in self._recovering:
            return  # revoked meanwhile: what we claimed stays pending for the next owner
        self._enqueue(messages)
        if cursor == "0-0":
            del self._recovering[shard]
        else:
            self._recovering[shard] = cursor

    async def _read_new(self, ops: StreamOps) -> None:
        """Receive one XREADGROUP reply, sending the next read first when it will be wanted.

        While the reader keeps up a steady stream of reads over an unchanged set of
        shards, one read stays in flight: Redis serves it while this process parses
        and builds the last batch. The shards of a read in flight count as being read
        (`_reads_in_progress`) until its reply is in, so a revoked shard is reported
        REVOKED only after every read that could deliver it entries has answered.
        """
        count, block_ms = self.config.read_count, self.config.block_ms
        holds = self.state.holds
        readable = tuple(self._readable())
        in_flight = self._read_in_flight
        if in_flight is None:
            shards, generations, sent_at = (readable, {s: holds[s].generation for s in readable},
                                            trio.current_time())
            send_first: tuple[str, ...] | None = shards
        else:
            (shards, generations, sent_at), send_first = in_flight, None
        # ahead only when the reader would read again at once anyway (as `_reader_can_work`)
        ahead = (bool(readable) and readable == shards and not self._recovering
                 and len(self._queue) < self.config.max_buffered)
        ahead_generations = {s: holds[s].generation for s in readable} if ahead else None

        def read() -> list[tuple[str, list[Queued]]]:
            if send_first is not None:
                ops.send_read(send_first, count=count, block_ms=block_ms)
            if ahead:
                ops.send_read(readable, count=count, block_ms=block_ms)
            return [(shard, queued_entries(shard, entries))
                    for shard, entries in ops.receive_read()]

        self._reads_in_progress = frozenset(shards) | frozenset(readable if ahead else ())
        ahead_sent_at = trio.current_time()
        try:
            batches = await trio.to_thread.run_sync(read)
        finally:
            if ahead_generations is not None and ops.reads_sent:
                self._read_in_flight = (readable, ahead_generations, ahead_sent_at)
                self._reads_in_progress = frozenset(readable)
            else:
                self._read_in_flight = None
                self._reads_in_progress = frozenset()
            if self.read_observer is not None:
                self.read_observer(self.member_id, frozenset(shards), sent_at, trio.current_time())
        for shard, messages in batches:
            if self._still_reading(shard, generations[shard]):
                self._enqueue(messages)
        self._check_drained()

    def _read_failed(self, ops: StreamOps) -> None:
        """The read connection broke with reads in flight: whatever Redis delivered to them
        is pending under this member, so claim the reading shards again once their
        in-flight work is done."""
        ops.reset_reads()
        self._read_in_flight = None
        self._reads_in_progress = frozenset()
        for shard in self.state.reading():
            self._recovering[shard] = "0-0"
        self._check_drained()

    def _still_reading(self, shard: str, generation: int) -> bool:
        hold = self.state.holds.get(shard)
        return (hold is not None and hold.phase is Phase.READING
                and self.state.may_process(shard, generation))

    def _enqueue(self, messages: list[Queued]) -> None:
        """Queue what was read under the shard's current generation.

        Invariant: every queued message of a shard belongs to the shard's current
        generation. A read is enqueued only while its generation still reads, and
        whatever ends a hold (revoke, abandon, fence) drops the shard's queued
        messages first. So a worker takes a message's generation from the hold
        when it takes the message; a queued entry needs no generation of its own.
        """
        if messages:
            self._queue.push_many(messages)
            if self._idle:
                self._idle.unpark(count=len(messages))

    # --- workers -------------------------------------------------------------------------

    async def _worker_pool(self) -> None:
        """Keep `_worker_limit` long-lived workers (never one task per message)."""
        async with trio.open_nursery() as nursery:
            spawned = 0
            while True:
                while spawned < self._worker_limit:
                    nursery.start_soon(self._worker, spawned)
                    spawned += 1
                await self._changed.wait()

    async def _worker(self, index: int) -> None:
        """Take ready messages until none is left, then park until the reader queues more.

        The no-op path costs a few microseconds per message: no task, no thread
        hop, no wakeup of anybody but the acker once a batch is worth sending.
        """
        queue = self._queue
        max_buffered = self.config.max_buffered
        ack_batch = self.config.ack_batch
        stats = self.stats
        in_flight = stats.in_flight
        handler = self.handler
        member_id = self.member_id
        acks = self._acks
        set_shard, set_id, set_key, set_value, set_fields, set_member, set_attempt = _MESSAGE_SETTERS
        new = object.__new__
        fast = (self._is_async and self.config.retry is None
                and self.config.ack_policy is AckPolicy.AFTER)
        since_checkpoint = 0
        while True:
            if index >= self._worker_limit:
                if queue.ready and self._idle:
                    self._idle.unpark()  # pass on a wakeup meant for a worker that may work
                await self._over_limit.park()
                continue
            entry = queue.pop_ready()
            if entry is None:
                since_checkpoint = 0
                await self._idle.park()
                continue
            if self._reader_waiting and len(queue) < max_buffered:
                self._wake_reader()
            (shard, key), entry_id, fields, value = entry
            state = self.state
            hold = state.holds.get(shard)
            if hold is None or state.member_epoch <= JOIN_EPOCH:
                # no longer ours (ownership + epoch, checked before the handler): it stays
                # pending for the next owner
                if queue.done(entry) and queue.ready > 1 and self._idle:
                    self._idle.unpark()
                continue
            generation = hold.generation
            message = new(Message)  # as Message(...), without attrs' frozen __init__
            set_shard(message, shard)
            set_id(message, entry_id)
            set_key(message, key)
            set_value(message, value)
            set_fields(message, fields)
            set_member(message, member_id)
            set_attempt(message, 1)
            in_flight[shard] += 1
            self._busy += 1
            handled = False
            try:
                if fast:
                    try:
                        await handler(message)  # type: ignore[misc]
                        stats.processed += 1
                        handled = True
                    except Exception as exc:  # noqa: BLE001 - a handler's failure is data
                        stats.failed += 1
                        log.warning("member %s: handler failed on %s %s (attempt 1): %r",
                                    member_id, shard, entry_id, exc)
                else:
                    handled = await self._process(message, generation)
                if handled:  # the acker checks ownership again right before acking
                    buffer = acks.get((shard, generation))
                    if buffer is None:
                        buffer = acks[(shard, generation)] = AckBuffer(shard, generation)
                    buffer.ids.append(entry_id)
                    self._acks_pending += 1
            finally:
                self._busy -= 1
                # its key's next message is ready: this worker takes one, a parked one the rest
                if queue.done(entry) and queue.ready > 1 and self._idle:
                    self._idle.unpark()
                if not handled:
                    self._finish(shard)
            if handled and self._acker_parked:  # is a batch worth sending now?
                pending = self._acks_pending
                if pending == 1 or pending >= ack_batch or (not self._busy and not queue):
                    self._ack_lot.unpark_all()
            since_checkpoint += 1
            if since_checkpoint >= 64:  # a handler that never awaits must not starve the rest
                since_checkpoint = 0
                await trio.lowlevel.checkpoint()

    async def _process(self, message: Message, generation: int) -> bool:
        """The general path (sync handlers, retries, AckPolicy.BEFORE); True when the
        entry still needs its ack."""
        if self.config.ack_policy is AckPolicy.BEFORE:
            if await self._ack_now(message, generation):
                await self._run_handler(message, generation)
            return False
        return await self._run_handler(message, generation)

    def _ack_later(self, shard: str, generation: int, entry_id: str) -> AckBuffer:
        key = (shard, generation)
        buffer = self._acks.get(key)
        if buffer is None:
            buffer = self._acks[key] = AckBuffer(shard, generation)
        buffer.ids.append(entry_id)
        self._acks_pending += 1
        return buffer

    async def _ack_now(self, message: Message, generation: int) -> bool:
        self.stats.in_flight[message.shard] += 1  # the acker finishes this extra count
        buffer = self._ack_later(message.shard, generation, message.id)
        if buffer.sent is None:
            buffer.sent = trio.Event()
        sent = buffer.sent
        self._acks_awaited += 1
        self._ack_lot.unpark_all()
        try:
            await sent.wait()
        finally:
            self._acks_awaited -= 1
        return not buffer.refused

    async def _run_handler(self, first: Message, generation: int) -> bool:
        """Run the handler (with the retry policy); True when the entry may be acked."""
        retry = self.config.retry
        attempts = retry.max_deliveries if retry else 1
        error: BaseException | None = None
        for attempt in range(1, attempts + 1):
            message = first if attempt == 1 else new_message(
                first.shard, first.id, first.key, first.value, dict(first.fields),
                first.member_id, attempt)
            try:
                if self._is_async:
                    await self.handler(message)  # type: ignore[misc]
                else:
                    await trio.to_thread.run_sync(self.handler, message, limiter=self._threads)
                self.stats.processed += 1
                return True
            except Exception as exc:  # noqa: BLE001 - a handler's failure is data, not a crash
                error = exc
                self.stats.failed += 1
                log.warning("member %s: handler failed on %s %s (attempt %d): %r",
                            self.member_id, first.shard, first.id, attempt, exc)
            if attempt < attempts:
                await trio.sleep(retry.backoff_ms / 1000 if retry else 0)
                if not self.state.may_process(first.shard, generation):
                    return False
        if retry is not None and retry.dead_letter_stream is not None:
            await self._dead_letter(first, retry.dead_letter_stream, error, attempts)
            return True
        return False

    async def _dead_letter(self, message: Message, stream: str, error: BaseException | None,
                           attempts: int) -> None:
        fields = {"shard": message.shard, "id": message.id, "key": message.key,
                  "value": message.value, "error": repr(error), "attempts": str(attempts),
                  "consumerGroup": self.config.consumer_group, "memberId": self.member_id}
        assert self._misc_client is not None
        ops = ProduceOps(self._misc_client)
        await trio.to_thread.run_sync(ops.add_raw, stream, fields)
        self.stats.dead_lettered += 1

    # --- acker ---------------------------------------------------------------------------

    def _ack_due(self) -> bool:
        """Send now: a full batch, a worker waiting for its ack, or no more work to wait for."""
        return (self._acks_pending >= self.config.ack_batch or self._acks_awaited > 0
                or (not self._busy and not self._queue))

    def _take_acks(self) -> list[tuple[AckBuffer, list[str], bool]]:
        """Up to `ack_batch` ids: (buffer, ids, whether that empties the buffer)."""
        budget = self.config.ack_batch
        taken: list[tuple[AckBuffer, list[str], bool]] = []
        for key, buffer in list(self._acks.items()):
            if budget <= 0:
                break
            if len(buffer.ids) <= budget:
                ids, complete = buffer.ids, True
                del self._acks[key]
            else:
                ids, complete = buffer.ids[:budget], False
                del buffer.ids[:budget]
            budget -= len(ids)
            self._acks_pending -= len(ids)
            taken.append((buffer, ids, complete))
        return taken

    async def _park_acker(self) -> None:
        self._acker_parked = True
        try:
            await self._ack_lot.park()
        finally:
            self._acker_parked = False

    async def _acker(self) -> None:
        """Send acks in batches: up to `ack_batch`, waiting at most `ack_linger_ms` for more
        while workers are still busy with what was read."""
        ops = StreamOps(connect(self.config.redis_url), self.config.consumer_group,
                        self.member_id, use_xackdel=self._use_xackdel)
        linger = self.config.ack_linger_ms / 1000
        try:
            while True:
                while not self._acks_pending:
                    await self._park_acker()
                if not self._ack_due():
                    with trio.move_on_after(linger):
                        while not self._ack_due():
                            await self._park_acker()
                await self._ack_batch(ops, self._take_acks())
        finally:
            ops.client.close()

    async def _ack_batch(self, ops: StreamOps, batch: list[tuple[AckBuffer, list[str], bool]]
                         ) -> None:
        while True:
            ids_by_shard: dict[str, list[str]] = {}
            for buffer, ids, _ in batch:
                if self.state.may_process(buffer.shard, buffer.generation):
                    ids_by_shard.setdefault(buffer.shard, []).extend(ids)
                else:
                    buffer.refused = True  # no longer ours: stays pending for the next owner
            try:
                results = await trio.to_thread.run_sync(ops.ack, ids_by_shard)
                break
            except redis.RedisError as exc:
                log.warning("member %s: ack failed, retrying: %r", self.member_id, exc)
                await trio.sleep(0.2)
        for shard, result in results.items():
            if result == NOT_OWNER:
                self.stats.ack_refusals += 1
                self._apply(*self.state.on_ack_refused(shard))
            else:
                self.stats.acked += result
                if self.ack_observer is not None:
                    self.ack_observer(self.member_id, result)
        in_flight = self.stats.in_flight
        for buffer, ids, complete in batch:
            if results.get(buffer.shard) == NOT_OWNER:
                buffer.refused = True
            if complete and buffer.sent is not None:
                buffer.sent.set()
            in_flight[buffer.shard] -= len(ids)
            if in_flight[buffer.shard] <= 0:
                del in_flight[buffer.shard]
        self._after_finish()

    # --- lag ---------------------------------------------------------------------------

    async def _lag_poll(self) -> None:
        ops = StreamOps(connect(self.config.redis_url), self.config.consumer_group,
                        self.member_id, use_xackdel=self._use_xackdel)
        try:
            while True:
                owned = sorted(self.state.owned())
                try:
                    self.stats.lag = await trio.to_thread.run_sync(ops.lag, owned)
                except redis.RedisError as exc:
                    log.debug("lag poll failed: %r", exc)
                await trio.sleep(self.config.lag_interval_s)
        finally:
            ops.client.close()
