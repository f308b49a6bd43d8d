"""The asyncio host's worker shell: long-lived asyncio tasks run the handler.

The trio host's workers (workers.py) are trio tasks; here they are asyncio
tasks on the application's loop, made in a copy of the application's context
(so sniffio, anyio and httpx see asyncio in a handler), as many as the
ledger's worker count, running the same loop as the trio host's
(`WorkerPool.worker`). They take entries from the member's key-ordered
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
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import trio

from rsc.member.message import Handler
from rsc.member.pure.reconcile import Actions
from rsc.member.shells.aio_guest import GuestHost, wait_asyncio
from rsc.member.shells.workers import WorkerPool

if TYPE_CHECKING:
    import redis

    from rsc.member.core import MemberCore

log = logging.getLogger(__name__)

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


class AioWorkers(WorkerPool):
    """The worker pool of one member on the asyncio host (`run` is its trio side)."""

    event_type = asyncio.Event  # the acker (trio, on this thread) sets it
    log = log  # rsc.member.aio_workers, as the asyncio guide names it

    def __init__(self, core: MemberCore, handler: Handler, misc_client: redis.Redis, *,
                 host: GuestHost, context: contextvars.Context) -> None:
        super().__init__(core, handler, misc_client)
        self.host = host
        self.loop = host.loop
        self.context = context
        self.to_trio = ToTrio(host)
        self.threads = ThreadPoolExecutor(max(64, core.config.capacity),
                                          thread_name_prefix=f"rsc-{core.member_id}")
        self._acker_woken = False
        self._died: BaseException | None = None
        self._timers: set[asyncio.TimerHandle] = set()  # waiting retries' wake-ups (L4)
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
            for timer in self._timers:  # waiting retries end with their member (L4)
                timer.cancel()
            for task in tasks:
                task.cancel()
            with trio.CancelScope(shield=True), trio.move_on_after(STOP_WAIT_S):
                await wait_asyncio(list(tasks), self.host)
            self.threads.shutdown(wait=False)
            await self.attempts.aclose()

    def _worker_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.to_trio(self._worker_died, task.exception())

    def _worker_died(self, error: BaseException) -> None:
        if self._died is None:
            self._died = error
            self.core.changed.fire()

    # --- the host's part of WorkerPool: trio-side effects queued, asyncio waits ------------

    def _apply(self, actions: Actions) -> None:
        self.to_trio(self.core.apply, actions)

    def _finish(self, shard: str) -> None:
        self.to_trio(self.core.finish, shard)

    def _wake_acker(self) -> None:
        if not self._acker_woken:
            self._acker_woken = True
            self.to_trio(self._acker_wakeup)

    def _acker_wakeup(self) -> None:
        self._acker_woken = False
        self.core.acker_parking.wake()

    async def _checkpoint(self) -> None:
        await asyncio.sleep(0)

    async def _sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def _later(self, seconds: float, callback: Callable[[], None]) -> None:
        timers = self._timers

        def fire() -> None:
            timers.discard(handle)
            self.to_trio(callback)

        handle = self.loop.call_later(seconds, fire)
        timers.add(handle)

    async def _in_thread(self, function: Callable[..., Any], *args: Any) -> Any:
        return await self.loop.run_in_executor(self.threads, function, *args)

    async def _in_trio(self, function: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        return await self.host.call(function, *args)

    def _stopping(self, error: BaseException) -> bool:
        """A cancellation is the worker's stop only when its own task is being cancelled; one
        raised inside a handler (its own timeout, say) is the handler's failure."""
        if isinstance(error, asyncio.CancelledError):
            task = asyncio.current_task()
            return task is not None and task.cancelling() > 0
        return not isinstance(error, Exception)
