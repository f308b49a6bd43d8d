"""The trio guest run inside an asyncio loop: what `rsc.member.aio` runs the member runtime on.

The member runtime and the producer are trio programs. On an asyncio loop they
run in trio's guest mode (`trio.lowlevel.start_guest_run`): trio's scheduler
runs its batches as callbacks of the asyncio loop, on the loop's own thread,
and waits for its I/O in a helper thread. A thread runs one trio run at a
time, so every listener and producer of one loop shares one `GuestHost`,
started by the first user and ended by the last.

The two sides meet on one thread, but not in one run context: trio code may
call asyncio's non-blocking functions (`loop.create_task`,
`future.set_result`) directly, while asyncio code (callbacks, tasks) reaches
trio only through the trio token (`soon`), or runs a trio coroutine as a task
of the host's nursery (`call`).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import outcome
import trio

from rsc.common.error_family import RscError

T = TypeVar("T")

_hosts: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, GuestHost] = (
    weakref.WeakKeyDictionary())


class HostStopped(RscError, RuntimeError):
    """The loop's trio guest run ended before the call did."""


class GuestHost:
    """The trio guest run of one asyncio loop, and the ways into it from asyncio."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.users = 0
        self.finishing = False
        self.token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._closing = trio.Event()
        self._ready: asyncio.Future[None] = loop.create_future()
        self.done: asyncio.Future[outcome.Outcome[object]] = loop.create_future()

    @classmethod
    async def acquire(cls) -> GuestHost:
        """The running loop's guest run (started here if it has none); `release` it after."""
        loop = asyncio.get_running_loop()
        host = _hosts.get(loop)
        while host is not None and host.finishing:
            await asyncio.shield(host.done)  # the last user left: let that run end first
            host = _hosts.get(loop)
        if host is None:
            host = _hosts[loop] = cls(loop)
            trio.lowlevel.start_guest_run(
                host._main, run_sync_soon_threadsafe=loop.call_soon_threadsafe,
                run_sync_soon_not_threadsafe=loop.call_soon, done_callback=host._finished,
                host_uses_signal_set_wakeup_fd=True, strict_exception_groups=True)
        host.users += 1
        try:
            await asyncio.shield(host._ready)
        except BaseException:
            await host.release()
            raise
        return host

    async def release(self) -> None:
        """One user fewer; the last one ends the run (and waits for it to end)."""
        self.users -= 1
        if self.users == 0:
            self.finishing = True
            self.soon(self._closing.set)
            await asyncio.shield(self.done)

    async def _main(self) -> None:
        self.token = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._ready.set_result(None)
            await self._closing.wait()
            nursery.cancel_scope.cancel()

    def _finished(self, result: outcome.Outcome[object]) -> None:
        self.finishing = True  # the next user starts a new run
        if _hosts.get(self.loop) is self:
            del _hosts[self.loop]
        if not self._ready.done():
            error = result.error if isinstance(result, outcome.Error) else HostStopped(
                "the trio guest run ended before it started")
            self._ready.set_exception(error)
        self.done.set_result(result)

    def soon(self, function: Callable[..., object], *args: object) -> None:
        """Run `function(*args)` in trio's run context soon (from anywhere: an asyncio task or
        callback, a signal handler, another thread); nothing once the run has ended."""
        token = self.token
        if token is None:
            raise HostStopped("the trio guest run has not started")
        try:
            token.run_sync_soon(function, *args)
        except trio.RunFinishedError:
            pass

    def call(self, async_fn: Callable[..., Awaitable[T]], *args: object) -> asyncio.Future[T]:
        """Run `async_fn(*args)` as a task of the host's nursery; its result (or exception) as
        an asyncio future. Cancelling the future cancels the trio task; the task's failure
        goes to the future, never to the other users of the run."""
        future: asyncio.Future[T] = self.loop.create_future()
        token = self.token
        try:
            if token is None:
                raise trio.RunFinishedError
            token.run_sync_soon(self._spawn, future, async_fn, args)
        except trio.RunFinishedError:  # L1: said as ours, and never a future left pending
            future.set_exception(HostStopped("the trio guest run has ended"))
        return future

    def _spawn(self, future: asyncio.Future[T], async_fn: Callable[..., Awaitable[T]],
               args: tuple[object, ...]) -> None:
        if future.done():
            return
        if self._nursery is None or self._closing.is_set():
            future.set_exception(HostStopped("the trio guest run is ending"))
            return
        self._nursery.start_soon(self._run, future, async_fn, args)

    async def _run(self, future: asyncio.Future[T], async_fn: Callable[..., Awaitable[T]],
                   args: tuple[object, ...]) -> None:
        scope = trio.CancelScope()

        def cancelled(done: asyncio.Future[T]) -> None:
            if done.cancelled():
                self.soon(scope.cancel)

        future.add_done_callback(cancelled)
        try:
            with scope:
                result = await async_fn(*args)
        except trio.Cancelled:
            if not future.done():
                future.set_exception(HostStopped("the trio guest run was cancelled"))
            raise
        except BaseException as exc:  # noqa: BLE001 - it is the caller's, never the run's
            if not future.done():
                future.set_exception(exc)
            return
        if not scope.cancelled_caught and not future.done():
            future.set_result(result)


async def wait_asyncio(futures: Sequence[asyncio.Future[T]], host: GuestHost) -> None:
    """From trio: wait until every asyncio future (or task) is done."""
    pending = [future for future in futures if not future.done()]
    if not pending:
        return
    finished = trio.Event()
    left = len(pending)

    def one_done(_: asyncio.Future[T]) -> None:
        nonlocal left
        left -= 1
        if left == 0:
            host.soon(finished.set)

    for future in pending:
        future.add_done_callback(one_done)
    await finished.wait()
