"""The member actor: one member's session, reader, dispatcher, workers and acker in one nursery.

Decisions come from `MemberState` (reconcile.py) and `KeyOrderedQueue`
(ordering.py); this module only moves data between them, the coordinator
session and Redis. Redis calls go through the sync client in worker threads:
one connection for the blocking reader, one for the acker, one for the rest.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import redis
import trio

from member.ordering import KeyOrderedQueue
from member.policies import AckPolicy, RetryPolicy
from member.reconcile import LEAVE_EPOCH, Actions, Event, MemberState, Phase
from member.session import ResponseUndecodable, SessionClosed, open_session
from member.stats import MemberStats
from member.streams import (
    KEY_FIELD,
    NOT_OWNER,
    VALUE_FIELD,
    ProduceOps,
    StreamOps,
    connect,
    supports_xackdel,
)
from protocol import AssignmentChanged, HeartbeatResponse, Status

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


class Work:
    """One entry on its way through the member: queued, running, waiting for its ack."""

    __slots__ = ("shard", "key", "generation", "message", "acked", "ack_ok")

    def __init__(self, message: Message, generation: int) -> None:
        self.shard = message.shard
        self.key = message.key
        self.generation = generation
        self.message = message
        self.acked: trio.Event | None = None
        self.ack_ok = False


RawEntries = list[tuple[str | None, dict[str, str] | None]]


def build_works(shard: str, entries: RawEntries, generation: int, member_id: str) -> list[Work]:
    """Work items of one shard from redis-py's parsed entries (skipping deleted ones)."""
    works: list[Work] = []
    append = works.append
    for entry_id, fields in entries:
        if entry_id is None:
            continue
        if fields is None:
            fields = {}
        append(Work(new_message(shard, entry_id, fields.get(KEY_FIELD, ""),
                                fields.get(VALUE_FIELD, ""), fields, member_id), generation))
    return works


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
        self._queue: KeyOrderedQueue[Work] = KeyOrderedQueue()
        self._recovering: dict[str, str] = {}
        self._reads_in_progress: frozenset[str] = frozenset()
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
        self._acks: list[Work] = []
        self._ack_lot = trio.lowlevel.ParkingLot()
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
        self._reader_wake.fire()
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
            self._reader_wake.fire()  # a fresh claim may wait for in-flight work to finish
        self._check_drained()

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
                while not self._reader_can_work():
                    self._reader_waiting = True
                    try:
                        await self._reader_wake.wait()
                    finally:
                        self._reader_waiting = False
                recoverable = self._recoverable()
                try:
                    if recoverable:
                        await self._recover_some(ops, recoverable[0])
                    else:
                        await self._read_new(ops, self._readable())
                except redis.RedisError as exc:
                    log.warning("member %s: read failed: %r", self.member_id, exc)
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
        count, member_id = self.config.read_count, self.member_id

        def claim() -> tuple[str, list[Work]]:
            cursor, entries = ops.claim_pending_raw(shard, start, count=count)
            return cursor, build_works(shard, entries, generation, member_id)

        cursor, works = await self._observed(frozenset({shard}), claim)
        if not self._still_reading(shard, generation) or shard not in self._recovering:
            return  # revoked meanwhile: what we claimed stays pending for the next owner
        self._enqueue(works)
        if cursor == "0-0":
            del self._recovering[shard]
        else:
            self._recovering[shard] = cursor

    async def _read_new(self, ops: StreamOps, shards: list[str]) -> None:
        generations = {s: self.state.holds[s].generation for s in shards}
        count, block_ms, member_id = self.config.read_count, self.config.block_ms, self.member_id

        def read() -> list[tuple[str, list[Work]]]:
            return [(shard, build_works(shard, entries, generations[shard], member_id))
                    for shard, entries in ops.read_new_raw(shards, count=count, block_ms=block_ms)]

        for shard, works in await self._observed(frozenset(shards), read):
            if self._still_reading(shard, generations[shard]):
                self._enqueue(works)

    def _still_reading(self, shard: str, generation: int) -> bool:
        hold = self.state.holds.get(shard)
        return (hold is not None and hold.phase is Phase.READING
                and self.state.may_process(shard, generation))

    def _enqueue(self, works: list[Work]) -> None:
        if works:
            self._queue.push_many(works)
            if self._idle:
                self._idle.unpark(count=len(works))

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
        """Take ready work until none is left, then park until the reader queues more.

        The no-op path costs a few microseconds per message: no task, no thread
        hop, no wakeup of anybody but the acker once a batch is worth sending.
        """
        queue = self._queue
        max_buffered = self.config.max_buffered
        since_checkpoint = 0
        while True:
            if index >= self._worker_limit:
                if queue.ready and self._idle:
                    self._idle.unpark()  # pass on a wakeup meant for a worker that may work
                await self._over_limit.park()
                continue
            work = queue.pop_ready()
            if work is None:
                since_checkpoint = 0
                await self._idle.park()
                continue
            if self._reader_waiting and len(queue) < max_buffered:
                self._reader_wake.fire()
            self.stats.in_flight[work.shard] += 1
            self._busy += 1
            handed_to_acker = False
            try:
                handed_to_acker = await self._process(work)
            finally:
                self._busy -= 1
                if queue.done(work) and self._idle:
                    self._idle.unpark()  # its key's next message is ready: keep keys parallel
                if not handed_to_acker:
                    self._finish(work.shard)
            if handed_to_acker:
                acks = self._acks
                if (len(acks) == 1 or len(acks) >= self.config.ack_batch
                        or (not self._busy and not queue)):
                    self._ack_lot.unpark_all()
            since_checkpoint += 1
            if since_checkpoint >= 64:  # a handler that never awaits must not starve the rest
                since_checkpoint = 0
                await trio.lowlevel.checkpoint()

    async def _process(self, work: Work) -> bool:
        """Run one message; True when it went to the acker (which then finishes it)."""
        if not self.state.may_process(work.shard, work.generation):
            return False  # no longer ours: it stays pending for the next owner
        if self.config.ack_policy is AckPolicy.BEFORE:
            if await self._ack_now(work):
                await self._run_handler(work)
            return False
        if self._is_async and self.config.retry is None:
            try:
                await self.handler(work.message)  # type: ignore[misc]
            except Exception as exc:  # noqa: BLE001 - a handler's failure is data, not a crash
                self.stats.failed += 1
                log.warning("member %s: handler failed on %s %s (attempt 1): %r",
                            self.member_id, work.shard, work.message.id, exc)
                return False
            self.stats.processed += 1
        elif not await self._run_handler(work):
            return False
        self._acks.append(work)  # the acker checks ownership again right before acking
        return True

    async def _ack_now(self, work: Work) -> bool:
        work.acked = trio.Event()
        self.stats.in_flight[work.shard] += 1  # the acker finishes this extra count
        self._acks.append(work)
        self._acks_awaited += 1
        self._ack_lot.unpark_all()
        try:
            await work.acked.wait()
        finally:
            self._acks_awaited -= 1
        return work.ack_ok

    async def _run_handler(self, work: Work) -> bool:
        """Run the handler (with the retry policy); True when the entry may be acked."""
        retry = self.config.retry
        attempts = retry.max_deliveries if retry else 1
        error: BaseException | None = None
        first = work.message
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
                            self.member_id, work.shard, first.id, attempt, exc)
            if attempt < attempts:
                await trio.sleep(retry.backoff_ms / 1000 if retry else 0)
                if not self.state.may_process(work.shard, work.generation):
                    return False
        if retry is not None and retry.dead_letter_stream is not None:
            await self._dead_letter(work, retry.dead_letter_stream, error, attempts)
            return True
        return False

    async def _dead_letter(self, work: Work, stream: str, error: BaseException | None,
                           attempts: int) -> None:
        message = work.message
        fields = {"shard": work.shard, "id": message.id, "key": work.key,
                  "value": message.value, "error": repr(error), "attempts": str(attempts),
                  "consumerGroup": self.config.consumer_group, "memberId": self.member_id}
        assert self._misc_client is not None
        ops = ProduceOps(self._misc_client)
        await trio.to_thread.run_sync(ops.add_raw, stream, fields)
        self.stats.dead_lettered += 1

    # --- acker ---------------------------------------------------------------------------

    def _ack_due(self) -> bool:
        """Send now: a full batch, a worker waiting for its ack, or no more work to wait for."""
        return (len(self._acks) >= self.config.ack_batch or self._acks_awaited > 0
                or (not self._busy and not self._queue))

    async def _acker(self) -> None:
        """Send acks in batches: up to `ack_batch`, waiting at most `ack_linger_ms` for more
        while workers are still busy with what was read."""
        ops = StreamOps(connect(self.config.redis_url), self.config.consumer_group,
                        self.member_id, use_xackdel=self._use_xackdel)
        linger = self.config.ack_linger_ms / 1000
        try:
            while True:
                while not self._acks:
                    await self._ack_lot.park()
                if not self._ack_due():
                    with trio.move_on_after(linger):
                        while not self._ack_due():
                            await self._ack_lot.park()
                batch = self._acks[:self.config.ack_batch]
                del self._acks[:len(batch)]
                await self._ack_batch(ops, batch)
        finally:
            ops.client.close()

    async def _ack_batch(self, ops: StreamOps, batch: list[Work]) -> None:
        while True:
            ids_by_shard: dict[str, list[str]] = {}
            skipped: set[tuple[str, int]] = set()  # no longer ours: stays pending, not acked
            checked: tuple[str, int] | None = None
            ids: list[str] = []
            may_process = self.state.may_process
            for work in batch:
                if (work.shard, work.generation) != checked:
                    checked = (work.shard, work.generation)
                    if may_process(work.shard, work.generation):
                        ids = ids_by_shard.setdefault(work.shard, [])
                    else:
                        ids = []
                        skipped.add(checked)
                ids.append(work.message.id)
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
        finished: dict[str, int] = {}
        for work in batch:
            if work.acked is not None:
                work.ack_ok = ((work.shard, work.generation) not in skipped
                               and results.get(work.shard, NOT_OWNER) != NOT_OWNER)
                work.acked.set()
            finished[work.shard] = finished.get(work.shard, 0) + 1
        in_flight = self.stats.in_flight
        for shard, count in finished.items():
            in_flight[shard] -= count
            if in_flight[shard] <= 0:
                del in_flight[shard]
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
