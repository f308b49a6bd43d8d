"""The worker shell: long-lived workers (as many as the ledger says) run the handler.

Each worker takes the next entry the key-ordered `WorkQueue` allows, asks the
ledger to admit it (D1: held at the generation it was read under, lease
alive, in one call, right before the handler), runs the handler (with the
retry policy, if any) and hands the id to the ack book. A refused entry is
not run; it stays pending in Redis for the next owner.

`WorkerPool` is that loop, written once for both hosts: the trio host's
`Workers` here and the asyncio host's `AioWorkers` (aio_workers.py) say only
how they wait, sleep, run a thread, wake the acker and reach trio's context
(where the data plane's `StreamOps` records an attempt, dataplane.py).

The no-op path costs a few microseconds per message: no task, no thread hop,
no wakeup of anybody but the acker once a batch is worth sending.
"""

from __future__ import annotations

import enum
import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio
from redis import exceptions as redis_errors

from rsc.common.backoff import RECORD_RETRY
from rsc.common.dead_letters import CRASHED, REDRIVE_GROUP_HEADER
from rsc.common.redact import redact_text
from rsc.member.codecs import DecodeFailed
from rsc.member.core import monotonic_ms
from rsc.member.message import NO_HEADERS, Handler, Message, Queued
from rsc.member.policies import AckPolicy, RetryPolicy, dead_letter_fields
from rsc.member.pure.attempts import DeadLetterNow, next_step
from rsc.member.pure.ledger import Verdict
from rsc.member.pure.reconcile import NO_ACTIONS, Actions
from rsc.member.redis_io.dataplane import open_stream_ops
from rsc.member.redis_io.ops import produce_ops, stream_ops
from rsc.member.redis_io.streams import NOT_OWNER, RECORDED
from rsc.member.redis_io.unrecoverable import check_permanent

if TYPE_CHECKING:
    import redis

    from rsc.member.core import MemberCore

log = logging.getLogger("rsc.member.workers")  # the name logging configs and docs know


class After(enum.Enum):
    """What follows a worker's turn on an entry."""

    ACK = "ack"  # handled, or dead-lettered: ack it
    LEAVE = "leave"  # not acked: it stays pending in Redis
    WAIT = "wait"  # it waits for its next attempt on no worker, its key held (L4)

CHECKPOINT_EVERY = 64  # a handler that never awaits must not starve the other tasks
MAX_ERROR_BYTES = 1024  # rsc-error: type and message, at most 1 KiB (P2)


class WorkerPool:
    """The workers of one member, whatever the host: the loop, D1 admission, the retry policy.

    A host gives: `event_type` (what `ack_now` waits on), `_apply` / `_finish` /
    `_wake_acker` (effects in trio's run context), `_checkpoint`, `_sleep`,
    `_in_thread`, and `_stopping` (whether an exception out of a handler means the
    worker itself is being stopped, rather than a failed handler).
    """

    event_type: type = trio.Event

    def __init__(self, core: MemberCore, handler: Handler, misc_client: redis.Redis) -> None:
        self.core = core
        self.handler = handler
        self.is_async = inspect.iscoroutinefunction(handler)
        self.dead_letters = produce_ops(misc_client)  # XADD of dead letters (its add_raw)
        # the owner-checked record of an attempt before its call (P1): native where it can
        # be, else redis-py in a thread; closed by the host's `run` when the workers end
        self.attempts = open_stream_ops(stream_ops(misc_client, core.config.consumer_group,
                                                   core.member_id, use_xackdel=False))
        self._suspect_running = False  # a call that may crash the process runs (P1)
        self._suspect_waiters: list[Any] = []

    # --- what a host supplies --------------------------------------------------------

    def _apply(self, actions: Actions) -> None:
        self.core.apply(actions)

    def _finish(self, shard: str) -> None:
        self.core.finish(shard)

    def _wake_acker(self) -> None:
        self.core.acker_parking.wake()

    async def _checkpoint(self) -> None:
        await trio.lowlevel.checkpoint()

    async def _sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)

    async def _in_thread(self, function: Callable[..., Any], *args: Any) -> Any:
        raise NotImplementedError

    async def _in_trio(self, function: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """`await function(*args)` in trio's run context (the data plane's calls)."""
        raise NotImplementedError

    def _stopping(self, error: BaseException) -> bool:
        return not isinstance(error, Exception)  # trio's Cancelled, KeyboardInterrupt

    def _later(self, seconds: float, callback: Callable[[], None]) -> None:
        """Call `callback` in trio's run context after `seconds`."""
        raise NotImplementedError

    def _park(self, entry: Queued) -> None:
        """L4: `entry` waits for its next attempt on no worker, its key held, until the
        policy's backoff has passed; then it runs again before anything else."""
        key = (entry[0][0], entry[1])
        self.core.retry_book.parked[key] = entry
        policy = self.core.config.retry
        delay = policy.backoff_ms / 1000 if policy is not None else 0.0
        self._later(delay, functools.partial(self._resume, key))

    def _resume(self, key: tuple[str, str]) -> None:
        core = self.core
        book = core.retry_book
        entry = book.parked.pop(key, None)
        if entry is None:
            return  # abandoned meanwhile: the shard was revoked, left or fenced
        if core.ledger.still_reading(key[0], entry[5]):
            core.queue.resume(entry)
        else:
            book.retries.pop(key, None)
            core.queue.done(entry)

    log = log  # a handler's failures are logged here (each host its own logger)

    def _failed(self, core: MemberCore, message: Message, attempt: int, error: BaseException, *,
                final: bool) -> None:
        """A handler call failed: one line per attempt, the traceback once, with the last."""
        core.stats.failed += 1
        self.log.warning("member %s: handler failed on %s %s (attempt %d%s): %r", core.member_id,
                         message.shard, message.id, attempt, ", the last" if final else "", error,
                         exc_info=error if final else None)

    # --- the shared part -------------------------------------------------------------

    def admit(self, shard: str, generation: int, what: str = "handler") -> bool:
        """D1 before a handler call (or a dead letter): the ledger's verdict, its actions
        applied."""
        core = self.core
        now = core.clock()
        verdict, actions = core.ledger.admit(shard, generation, now)
        self._decided(what, shard, generation, now, verdict, actions)
        return verdict is Verdict.ALLOWED

    def _decided(self, what: str, shard: str, generation: int, now: float, verdict: Verdict,
                 actions: Actions) -> None:
        core = self.core
        if core.observers.trace is not None:
            core.observers.trace.admission(what, core.ledger, shard, generation, now, verdict)
        if actions is not NO_ACTIONS:
            self._apply(actions)

    async def worker(self, index: int) -> None:
        """Take entries until none is left, then wait until the reader queues more.

        Between the ledger's admission and the handler's first step there is no
        await: on either host they are one step of its loop (D1).
        """
        core = self.core
        queue, ledger, acks, stats = core.queue, core.ledger, core.acks, core.stats
        parking, gauge, retry_book = core.acker_parking, core.workers, core.retry_book
        ack_rule = core.ack_rule
        handler = self.handler
        member_id = core.member_id
        start_handler = ledger.start_handler
        clock = core.clock
        decided, finish, wake_acker = self._decided, self._finish, self._wake_acker
        checkpoint, stopping, failed = self._checkpoint, self._stopping, self._failed
        traced = core.observers.trace is not None
        allowed = Verdict.ALLOWED
        pop, wait, done = queue.pop, queue.wait, queue.done
        config = core.config
        fast = self.is_async and config.retry is None and config.ack_policy is AckPolicy.AFTER
        monotonic, own_clock = time.monotonic, clock is monotonic_ms
        new_message = tuple.__new__  # Message's fields in order, without its Python __new__
        no_headers, redrive_header = NO_HEADERS, REDRIVE_GROUP_HEADER
        own_group = config.consumer_group.encode("utf-8")
        since_checkpoint = 0
        while True:
            entry = pop(index)
            if entry is None:
                since_checkpoint = 0
                await wait(index)
                continue
            (shard, _order), entry_id, key, value, headers, generation = entry
            now = monotonic() * 1000.0 if own_clock else clock()  # monotonic_ms, in line
            verdict, actions = start_handler(shard, generation, now)  # D1, in one call
            if verdict is not allowed or traced:
                decided("handler", shard, generation, now, verdict, actions)
                if verdict is not allowed:
                    if retry_book.retries:
                        retry_book.retries.pop((shard, entry_id), None)
                    done(entry)
                    continue
            if headers is not no_headers and redrive_header in headers \
                    and headers[redrive_header] != own_group:
                # P3: sent back for another group of the prefix: acked here without a call
                if retry_book.claimed_counts:
                    retry_book.claimed_counts.pop((shard, entry_id), None)
                acks.add(shard, generation, entry_id)
                stats.redrives_passed += 1
                done(entry)
                if parking.parked:
                    wake_acker()
                continue
            message = new_message(Message, (shard, entry_id, key, value, member_id, headers, 1))
            gauge.busy += 1
            handled = waiting = False
            try:
                if fast:
                    try:
                        await handler(message)  # type: ignore[misc]  # its first step: this step
                        stats.processed += 1
                        handled = True
                    except BaseException as exc:  # noqa: BLE001 - a handler's failure is data
                        if stopping(exc):
                            raise
                        failed(core, message, 1, exc, final=True)
                else:
                    after = await self.process(message, generation)
                    handled, waiting = after is After.ACK, after is After.WAIT
                if handled:  # the acker admits it again right before acking
                    acks.add(shard, generation, entry_id)
                elif waiting:  # on no worker, its key held, until its next attempt (L4)
                    self._park(entry)
            finally:
                gauge.busy -= 1
                if not waiting:
                    done(entry)
                if not handled:
                    finish(shard)
            if handled and parking.parked and ack_rule.wake_acker(
                    acks.pending, busy=gauge.busy, queued=len(queue)):
                wake_acker()
            since_checkpoint += 1
            if since_checkpoint >= CHECKPOINT_EVERY:
                since_checkpoint = 0
                await checkpoint()

    async def process(self, message: Message, generation: int) -> After:
        """The general path (sync handlers, retries, AckPolicy.BEFORE): what follows."""
        if self.core.config.ack_policy is AckPolicy.BEFORE:
            resumed = (message.shard, message.id) in self.core.retry_book.retries  # acked already
            if not resumed and not await self.ack_now(message, generation):
                return After.LEAVE
            after = await self.run_handler(message, generation, admitted=False)
            return After.WAIT if after is After.WAIT else After.LEAVE
        return await self.run_handler(message, generation, admitted=True)

    async def ack_now(self, message: Message, generation: int) -> bool:
        """Ack before the handler (at-most-once); True when Redis took the ack."""
        core = self.core
        core.ledger.started(message.shard)  # the acker finishes this extra count
        buffer = core.acks.add(message.shard, generation, message.id)
        sent: Any = buffer.sent
        if not isinstance(sent, self.event_type):  # the first worker waiting on this buffer
            sent = buffer.sent = self.event_type()  # the acker (trio, on this thread) sets it
        core.acks.awaited += 1
        self._wake_acker()
        try:
            await sent.wait()
        finally:
            core.acks.awaited -= 1
        return not buffer.refused

    async def run_handler(self, first: Message, generation: int, *, admitted: bool) -> After:
        """Run the handler (with the retry policy, if any); what follows for the entry.

        Every call but an `admitted` first one, and a dead letter, is admitted by the
        ledger first (D1), in the loop step that starts the call.
        """
        policy = self.core.config.retry
        if policy is None:  # the default mode: one call; a failure leaves the entry pending
            if not admitted and not self.admit(first.shard, generation):
                return After.LEAVE
            error = await self._call(first)
            if error is None:
                return After.ACK
            self._failed(self.core, first, 1, error, final=True)
            return After.LEAVE
        return await self._run_with_policy(first, generation, policy, admitted=admitted)

    async def _call(self, message: Message) -> BaseException | None:
        """One handler call: None when it returned, else what it raised."""
        try:
            if self.is_async:
                await self.handler(message)  # type: ignore[misc]
            else:
                await self._in_thread(self.handler, message)
        except BaseException as exc:  # noqa: BLE001 - a handler's failure is data, not a crash
            if self._stopping(exc):
                raise
            return exc
        self.core.stats.processed += 1
        return None

    async def _run_with_policy(self, first: Message, generation: int, policy: RetryPolicy, *,
                               admitted: bool) -> After:
        """P1: calls counted in Redis. A claimed entry's count came with its claim; each call
        but the first of a freshly read entry is recorded before it runs (owner checked), and
        the entry is dead-lettered (P2) once the count reached `max_deliveries`. Acked first
        (AckPolicy.BEFORE), nothing is pending: the calls are counted here only. Between two
        calls the entry waits on no worker (`After.WAIT`, L4) and comes back here."""
        core = self.core
        shard = first.shard
        key = (shard, first.id)
        counted = core.config.ack_policy is AckPolicy.AFTER
        book = core.retry_book
        resumed = book.retries.pop(key, None)
        count: int | None = None
        error: BaseException | None = None
        if resumed is not None:  # back from waiting for this attempt
            count, error = resumed
        elif counted:
            count = book.claimed_counts.pop(key, None)
        waited = resumed is not None
        while True:
            step = next_step(count, policy.max_deliveries,
                             permanent=isinstance(error, DecodeFailed))
            if isinstance(step, DeadLetterNow):
                if not self.admit(shard, generation, "dead letter"):
                    return After.LEAVE  # a side effect as a handler call is: D1 applies
                stream = policy.stream_for(core.config.stream_prefix, core.config.consumer_group)
                written = await self.dead_letter(first, stream, step.deliveries, error)
                return After.ACK if written else After.LEAVE
            if error is not None and not waited and policy.backoff_ms > 0 and count is not None:
                book.retries[key] = (count, error)
                return After.WAIT
            waited = False
            message = first._replace(attempt=step.attempt)
            if step.record is not None and counted:
                ran, error = await self._suspect_call(message, generation, step.record)
                if not ran:
                    return After.LEAVE
            else:
                if (step.record is not None or not admitted) and not self.admit(shard, generation):
                    return After.LEAVE
                error = await self._call(message)
            if error is None:
                return After.ACK
            count = step.attempt
            self._failed(core, first, count, error, final=isinstance(error, DecodeFailed)
                         or count >= policy.max_deliveries)

    async def _suspect_call(self, message: Message, generation: int,
                            count: int) -> tuple[bool, BaseException | None]:
        """A call that may be the one that crashes the process (a redelivery, or a retry): one
        at a time per member, after the acks of what was handled are in Redis and once the
        call is recorded, so a crash in it raises no other entry's count and repeats nothing
        handled. Whether it ran, and what it raised (None: it returned)."""
        while self._suspect_running:
            waiter = self.event_type()
            self._suspect_waiters.append(waiter)
            await waiter.wait()
        self._suspect_running = True
        try:
            await self._acks_sent()
            if not self.admit(message.shard, generation) or not await self._record(
                    message, generation, count):
                return False, None  # no unrecorded call runs
            if not self.admit(message.shard, generation):
                return False, None
            return True, await self._call(message)
        finally:
            self._suspect_running = False
            waiters, self._suspect_waiters = self._suspect_waiters, []
            for waiter in waiters:
                waiter.set()

    async def _acks_sent(self) -> None:
        """Wait until the acks of every entry handled so far have been sent."""
        acks = self.core.acks
        if not acks.pending:
            return
        waiters = []
        for buffer in list(acks.buffers.values()):
            sent: Any = buffer.sent
            if not isinstance(sent, self.event_type):
                sent = buffer.sent = self.event_type()
            waiters.append(sent)
        acks.awaited += 1
        self._wake_acker()
        try:
            for sent in waiters:
                await sent.wait()
        finally:
            acks.awaited -= 1

    async def _record(self, message: Message, generation: int, count: int) -> bool:
        """Record the next call in Redis before it runs (P1); True once recorded. Refused
        (another owner): the shard stops as on a refused ack. No longer pending: no call."""
        core = self.core
        retry = RECORD_RETRY.start()
        while True:
            try:
                outcome = await self._in_trio(self.attempts.record_attempt, message.shard,
                                              message.id, count)
                break
            except redis_errors.RedisError as exc:
                check_permanent(exc, core.config.redis_url)
                self.log.warning("member %s: cannot record an attempt of %s %s, retrying: %r",
                                 core.member_id, message.shard, message.id, exc)
                await self._sleep(retry.next())
                if not self.admit(message.shard, generation):
                    return False
        if outcome == NOT_OWNER:
            core.stats.ack_refusals += 1
            self._apply(core.ledger.on_ack_refused(message.shard))
            return False
        return outcome == RECORDED

    async def dead_letter(self, message: Message, stream: str, deliveries: int,
                          error: BaseException | None) -> bool:
        """Write the dead letter (P2); True when written, so the entry may be acked. A write
        Redis refuses leaves the entry pending and is reported; the member goes on."""
        core = self.core
        fields = dead_letter_fields(message, error=error_text(error), deliveries=deliveries,
                                    consumer_group=core.config.consumer_group,
                                    now_ms=int(time.time() * 1000))
        try:
            await self._in_thread(self.dead_letters.add_raw, stream, fields)
        except redis_errors.RedisError as exc:
            self.log.error("member %s: cannot write the dead letter of %s %s to %s, it stays "
                           "pending: %r", core.member_id, message.shard, message.id, stream, exc)
            return False
        core.stats.dead_lettered += 1
        self.log.warning("member %s: %s %s dead-lettered to %s after %d deliveries: %s",
                         core.member_id, message.shard, message.id, stream, deliveries,
                         fields["rsc-error"])
        return True


def error_text(error: BaseException | None) -> str:
    """`rsc-error` (P2): the error's type and message, secrets masked (K7), at most 1 KiB;
    `crashed` when no error was seen (the process died during the calls)."""
    if error is None:
        return CRASHED
    text = redact_text(f"{type(error).__name__}: {error}")
    encoded = text.encode("utf-8")
    if len(encoded) > MAX_ERROR_BYTES:
        text = encoded[:MAX_ERROR_BYTES - 3].decode("utf-8", "ignore") + "..."
    return text


class Workers(WorkerPool):
    """The worker pool of one member on the trio host: trio tasks, trio worker threads."""

    def __init__(self, core: MemberCore, handler: Handler, misc_client: redis.Redis) -> None:
        super().__init__(core, handler, misc_client)
        self.threads = trio.CapacityLimiter(max(64, core.config.capacity))
        self._nursery: trio.Nursery | None = None  # where waiting retries' timers run

    async def run(self) -> None:
        """Keep as many long-lived workers as the ledger's worker count (never one per message)."""
        core = self.core
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                spawned = 0
                while True:
                    while spawned < core.queue.workers:
                        nursery.start_soon(self.worker, spawned)
                        spawned += 1
                    await core.changed.wait()
        finally:
            await self.attempts.aclose()

    async def _in_thread(self, function: Callable[..., Any], *args: Any) -> Any:
        return await trio.to_thread.run_sync(function, *args, limiter=self.threads)

    async def _in_trio(self, function: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        return await function(*args)

    def _later(self, seconds: float, callback: Callable[[], None]) -> None:
        if self._nursery is not None:
            self._nursery.start_soon(_call_after, seconds, callback)


async def _call_after(seconds: float, callback: Callable[[], None]) -> None:
    await trio.sleep(seconds)
    callback()
