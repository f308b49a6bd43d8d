"""The asyncio host's worker shell: long-lived asyncio tasks run the handler.

The trio host's workers (workers.py) are trio tasks; here they are asyncio
tasks on the application's loop, made in a copy of the application's context
(so sniffio, anyio and httpx see asyncio in a handler), as many as the
ledger's worker count. They take entries from the member's key-ordered
`WorkQueue`, parked on asyncio futures (`AsyncioLot`) that the trio reader
resolves directly (both run on the loop's thread).

D1 (docs/protocol.md, Data plane rules): the ledger admits each entry and the
worker awaits the handler's coroutine in place, so the admission and the
handler's first step are one step of the asyncio loop: a process frozen
(SIGSTOP) between loop steps cannot start a handler on a lease it lost
meanwhile. A plain `def` handler is handed to a worker thread in that step.
Nothing per message crosses to trio: what must run in trio's context (the
acker's wakeup, the ledger's actions, a finished entry's bookkeeping) is
queued and sent through the trio token in one batch per loop step.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import trio

from rsc.member.aio_guest import GuestHost, wait_asyncio
from rsc.member.ledger import Verdict
from rsc.member.message import MESSAGE_SETTERS, Handler, Message, new_message
from rsc.member.ops import produce_ops
from rsc.member.policies import NO_RETRY, AckPolicy, DeadLetter, RetryLater, dead_letter_fields
from rsc.member.reconcile import NO_ACTIONS, Actions

if TYPE_CHECKING:
    import redis

    from rsc.member.core import MemberCore

log = logging.getLogger(__name__)

CHECKPOINT_EVERY = 64  # a handler that never awaits must not starve the loop
STOP_WAIT_S = 5.0  # cancelled workers get this long to finish their `finally`


class AsyncioLot:
    """A parking lot of asyncio tasks (what `WorkQueue` parks workers on), woken from trio or
    asyncio code on the loop's thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._parked: deque[asyncio.Future[None]] = deque()

    def __len__(self) -> int:
        return len(self._parked)

    async def park(self) -> None:
        future = self._loop.create_future()
        self._parked.append(future)
        try:
            await future
        finally:
            if future.cancelled():  # not woken: leave the lot (a woken one was taken off it)
                try:
                    self._parked.remove(future)
                except ValueError:
                    pass

    def unpark(self, count: int = 1) -> None:
        parked = self._parked
        while count > 0 and parked:
            future = parked.popleft()
            if not future.done():
                future.set_result(None)
                count -= 1

    def unpark_all(self) -> None:
        self.unpark(len(self._parked))


class ToTrio:
    """Calls to make in trio's run context, sent through the trio token in one batch."""

    def __init__(self, host: GuestHost) -> None:
        self._host = host
        self._calls: list[tuple[Callable[..., object], tuple[object, ...]]] = []

    def __call__(self, function: Callable[..., object], *args: object) -> None:
        calls = self._calls
        calls.append((function, args))
        if len(calls) == 1:
            self._host.soon(self._run)

    def _run(self) -> None:
        calls, self._calls = self._calls, []
        for function, args in calls:
            try:
                function(*args)
            except Exception:  # one failed call must not drop the others
                log.exception("asyncio host: %r failed in trio", function)


class AioWorkers:
    """The worker pool of one member on the asyncio host (`run` is its trio side)."""

    def __init__(self, core: MemberCore, handler: Handler, misc_client: redis.Redis, *,
                 host: GuestHost, context: contextvars.Context) -> None:
        self.core = core
        self.handler = handler
        self.is_async = inspect.iscoroutinefunction(handler)
        self.dead_letters = produce_ops(misc_client)  # XADD of dead letters (its add_raw)
        self.host = host
        self.loop = host.loop
        self.context = context
        self.to_trio = ToTrio(host)
        self.threads = ThreadPoolExecutor(max(64, core.config.capacity),
                                          thread_name_prefix=f"rsc-{core.member_id}")
        self._acker_woken = False
        self._died: BaseException | None = None
        core.queue.park_on(lambda: AsyncioLot(host.loop),
                           on_room=lambda: self.to_trio(core.wake_reader))

    async def run(self) -> None:
        """Keep as many asyncio workers as the ledger's worker count; cancel them at the end."""
        core = self.core
        tasks: list[asyncio.Task[None]] = []
        try:
            while self._died is None:
                while len(tasks) < core.queue.workers:
                    task = self.loop.create_task(self.worker(len(tasks)),
                                                 context=self.context.copy())
                    task.add_done_callback(self._worker_done)
                    tasks.append(task)
                await core.changed.wait()
            raise self._died  # a worker's own failure (never a handler's) ends the member
        finally:
            for task in tasks:
                task.cancel()
            with trio.CancelScope(shield=True), trio.move_on_after(STOP_WAIT_S):
                await wait_asyncio(list(tasks), self.host)
            self.threads.shutdown(wait=False)

    def _worker_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.to_trio(self._worker_died, task.exception())

    def _worker_died(self, error: BaseException) -> None:
        if self._died is None:
            self._died = error
            self.core.changed.fire()

    # --- trio-side effects, queued -------------------------------------------------------

    def _wake_acker(self) -> None:
        if not self._acker_woken:
            self._acker_woken = True
            self.to_trio(self._acker_wakeup)

    def _acker_wakeup(self) -> None:
        self._acker_woken = False
        self.core.acker_parking.wake()

    def _decided(self, what: str, shard: str, generation: int, now: float, verdict: Verdict,
                 actions: Actions) -> None:
        core = self.core
        if core.trace is not None:
            core.trace.admission(what, core.ledger, shard, generation, now, verdict)
        if actions is not NO_ACTIONS:
            self.to_trio(core.apply, actions)

    def admit(self, shard: str, generation: int, what: str = "handler") -> bool:
        """D1 before a handler call (or a dead letter)."""
        core = self.core
        now = core.clock()
        verdict, actions = core.ledger.admit(shard, generation, now)
        self._decided(what, shard, generation, now, verdict, actions)
        return verdict is Verdict.ALLOWED

    # --- the workers -----------------------------------------------------------------

    async def worker(self, index: int) -> None:
        """Take entries until none is left, then park until the reader queues more."""
        core = self.core
        queue, ledger, acks, stats = core.queue, core.ledger, core.acks, core.stats
        parking = core.acker_parking
        ack_rule = core.ack_rule
        handler = self.handler
        member_id = core.member_id
        start_handler = ledger.start_handler
        clock = core.clock
        decided = self._decided
        to_trio = self.to_trio
        finish = core.finish
        traced = core.trace is not None
        allowed = Verdict.ALLOWED
        pop, wait, done = queue.pop, queue.wait, queue.done
        set_shard, set_id, set_key, set_value, set_fields, set_member, set_attempt = MESSAGE_SETTERS
        new = object.__new__
        config = core.config
        fast = self.is_async and config.retry is None and config.ack_policy is AckPolicy.AFTER
        this_task = asyncio.current_task()
        since_checkpoint = 0
        while True:
            entry = pop(index)
            if entry is None:
                since_checkpoint = 0
                await wait(index)
                continue
            (shard, key), entry_id, fields, value, generation = entry
            now = clock()
            verdict, actions = start_handler(shard, generation, now)  # D1, in one call
            if verdict is not allowed or traced:
                decided("handler", shard, generation, now, verdict, actions)
                if verdict is not allowed:
                    done(entry)
                    continue
            message = new(Message)
            set_shard(message, shard)
            set_id(message, entry_id)
            set_key(message, key)
            set_value(message, value)
            set_fields(message, fields)
            set_member(message, member_id)
            set_attempt(message, 1)
            core.busy += 1
            handled = False
            try:
                if fast:
                    try:
                        await handler(message)  # type: ignore[misc]  # first step: this step
                        stats.processed += 1
                        handled = True
                    except asyncio.CancelledError:
                        if this_task is not None and this_task.cancelling():
                            raise  # the worker is stopped
                        _failed(core, message, 1, "cancelled")
                    except Exception as exc:  # noqa: BLE001 - a handler's failure is data
                        _failed(core, message, 1, exc)
                else:
                    handled = await self.process(message, generation)
                if handled:  # the acker admits it again right before acking
                    acks.add(shard, generation, entry_id)
            finally:
                core.busy -= 1
                done(entry)
                if not handled:
                    to_trio(finish, shard)
            if handled and parking.parked and ack_rule.wake_acker(
                    acks.pending, busy=core.busy, queued=len(queue)):
                self._wake_acker()
            since_checkpoint += 1
            if since_checkpoint >= CHECKPOINT_EVERY:
                since_checkpoint = 0
                await asyncio.sleep(0)

    async def process(self, message: Message, generation: int) -> bool:
        """The general path (sync handlers, retries, AckPolicy.BEFORE); True when the
        entry still needs its ack."""
        if self.core.config.ack_policy is AckPolicy.BEFORE:
            if await self.ack_now(message, generation):
                await self.run_handler(message, generation, admitted=False)
            return False
        return await self.run_handler(message, generation, admitted=True)

    async def ack_now(self, message: Message, generation: int) -> bool:
        """Ack before the handler (at-most-once); True when Redis took the ack."""
        core = self.core
        core.ledger.started(message.shard)  # the acker finishes this extra count
        buffer = core.acks.add(message.shard, generation, message.id)
        sent = buffer.sent
        if not isinstance(sent, asyncio.Event):  # the first worker waiting on this buffer
            sent = buffer.sent = asyncio.Event()  # the acker (trio, this thread) sets it
        core.acks.awaited += 1
        self.to_trio(core.acker_parking.wake)
        try:
            await sent.wait()
        finally:
            core.acks.awaited -= 1
        return not buffer.refused

    async def run_handler(self, first: Message, generation: int, *, admitted: bool) -> bool:
        """Run the handler, then what the retry policy says after each failure; True when the
        entry may be acked.

        Every call but an `admitted` first one, and a dead letter, is admitted by the
        ledger first (D1), in the loop step that starts the call.
        """
        core = self.core
        retry = core.config.retry or NO_RETRY
        message = first
        while True:
            if (message.attempt > 1 or not admitted) and not self.admit(first.shard, generation):
                return False
            try:
                if self.is_async:
                    await self.handler(message)  # type: ignore[misc]
                else:
                    await self.loop.run_in_executor(self.threads, self.handler, message)
                core.stats.processed += 1
                return True
            except asyncio.CancelledError as exc:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # the worker is stopped
                error: BaseException = exc
            except Exception as exc:  # noqa: BLE001 - a handler's failure is data, not a crash
                error = exc
            _failed(core, first, message.attempt, error)
            step = retry.after_failure(message.attempt)
            if isinstance(step, RetryLater):
                await asyncio.sleep(step.delay_s)
                message = new_message(first.shard, first.id, first.key, first.value,
                                      dict(first.fields), first.member_id, step.attempt)
                continue
            if isinstance(step, DeadLetter):
                if not self.admit(first.shard, generation, "dead letter"):
                    return False  # a side effect as a handler call is: D1 applies
                await self.dead_letter(first, step, error)
                return True
            return False  # LeavePending: no ack, delivered again to the next owner

    async def dead_letter(self, message: Message, step: DeadLetter, error: BaseException) -> None:
        core = self.core
        fields = dead_letter_fields(shard=message.shard, entry_id=message.id, key=message.key,
                                    value=message.value, error=error, attempts=step.attempts,
                                    consumer_group=core.config.consumer_group,
                                    member_id=core.member_id)
        await self.loop.run_in_executor(self.threads, self.dead_letters.add_raw, step.stream,
                                        fields)
        core.stats.dead_lettered += 1


def _failed(core: MemberCore, message: Message, attempt: int, error: object) -> None:
    core.stats.failed += 1
    log.warning("member %s: handler failed on %s %s (attempt %d): %r", core.member_id,
                message.shard, message.id, attempt, error)
