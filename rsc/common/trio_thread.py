"""A trio event loop in a thread of its own, for code that is not trio: plain threads, a
Django or Flask view, a pytest test of any flavour.

    loop = TrioThread("rsc producer").start()
    result = loop.call(some_async_function, arg)   # from any thread but the loop's own
    loop.close()

`call` runs an async function in the loop and blocks the calling thread until it returns
(or raises); calls from many threads run concurrently in the loop. `serve(opener)` keeps
an async context manager open in the loop (a producer, a coordinator) until `close()`.
The thread is a daemon, so an interpreter that exits without `close()` is not held up.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Generic, TypeVar, TypeVarTuple

import trio

from rsc.common.error_family import RscError

T = TypeVar("T")
OpenedT = TypeVar("OpenedT")
Args = TypeVarTuple("Args")


class LoopClosed(RscError, RuntimeError):
    """The loop is not running (not started yet, closed, or its opener failed)."""


class TrioThread(Generic[OpenedT]):
    """One trio loop in a daemon thread; see the module docstring. `OpenedT` is what its
    opener's context manager gives."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._opened: OpenedT | None = None
        self._opener: Callable[[], AbstractAsyncContextManager[OpenedT]] | None = None

    def start(self, opener: Callable[[], AbstractAsyncContextManager[OpenedT]] | None = None,
              timeout: float = 60.0) -> TrioThread[OpenedT]:
        """Start the loop (and, with `opener`, enter the context manager it returns there);
        returns once it runs. Whatever the opener raised is raised here."""
        self._opener = opener
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise LoopClosed(f"{self.name}: the loop did not start within {timeout:g} s")
        if self._failure is not None:
            raise self._failure
        return self

    @property
    def failure(self) -> BaseException | None:
        """What ended the loop (its opener's error), None while it runs or after a clean end."""
        return self._failure

    @property
    def opened(self) -> OpenedT | None:
        """What the opener's context manager gave (None without an opener)."""
        return self._opened

    def call(self, function: Callable[[*Args], Awaitable[T]], *args: *Args) -> T:
        """Run `await function(*args)` in the loop; block until it is done (any thread but the
        loop's own)."""
        if self._token is None or (self._stop is not None and self._stop.is_set()):
            raise LoopClosed(f"{self.name} is not running")
        if threading.current_thread() is self._thread:
            raise RuntimeError(f"{self.name}: call() from the loop's own thread would deadlock")
        return trio.from_thread.run(function, *args, trio_token=self._token)

    def close(self, timeout: float = 30.0) -> None:
        """Leave the opener's context manager and end the loop (idempotent)."""
        token, stop = self._token, self._stop
        if token is not None and stop is not None and not stop.is_set():
            try:
                trio.from_thread.run_sync(stop.set, trio_token=token)
            except trio.RunFinishedError:
                pass
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _main(self) -> None:
        try:
            trio.run(self._run)
        except BaseException as exc:  # noqa: BLE001 - handed to start(), or lost at exit
            self._failure = exc
        finally:
            self._ready.set()

    async def _run(self) -> None:
        self._stop = trio.Event()
        self._token = trio.lowlevel.current_trio_token()
        if self._opener is None:
            self._ready.set()
            await self._stop.wait()
            return
        async with self._opener() as opened:
            self._opened = opened
            self._ready.set()
            await self._stop.wait()

