"""The D4 deadline of one prefix's store calls: each on a worker thread, abandoned at its deadline.

The store I/O of one batch (the drain check, the checkpoint, offset moves, cleanup, and
each shard read) has a deadline of a third of the lease TTL. Past it the worker thread is
abandoned (it finishes in the background), the call fails as `StoreStalled`, and the prefix
machine is told (`on_abandoned`): it sends nothing else for the prefix until the thread
returns, which the actor reports at its next batch (`returned`), landed or not.

Why a trio deadline around an abandonable thread rather than a per-call redis-py
`socket_timeout`: one checkpoint is several round trips (create, seal, retire, hash), so
a per-call timeout does not bound the batch; a timeout shorter than a slow but healthy big
write would fail it for good; and the pool's fixed timeout is shared with the lease renewal
and loads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import trio

from rsc.actors.logs import log_event
from rsc.actors.ports import PrefixMetrics
from rsc.actors.prefix_io import Checkpoint
from rsc.actors.store import STORE_IO_ERRORS, MetadataStore, StoreError

log = logging.getLogger("rsc.coordinator")

T = TypeVar("T")


class StoreStalled(StoreError):
    """A store call passed its D4 deadline and was abandoned."""


class _Call:
    """One store call on a worker thread; `done` is set by the thread when it returns."""

    def __init__(self, what: str, checkpoint: Checkpoint | None) -> None:
        self.what = what
        self.checkpoint = checkpoint  # a metadata write: adopted if it finishes after all
        self.ok = False
        self.done = threading.Event()


class StoreCalls:
    """Runs one prefix's blocking store calls under their deadline (module docstring)."""

    def __init__(self, prefix: str, store: MetadataStore, deadline_s: float, *,
                 on_abandoned: Callable[[Checkpoint | str], None],
                 metrics: PrefixMetrics | None = None) -> None:
        self.prefix = prefix
        self.store = store
        self.deadline_s = deadline_s
        self.on_abandoned = on_abandoned
        self.metrics = metrics
        self.abandoned_calls = 0
        self.readable = True  # the last shard read worked (to log outages once)
        self._abandoned: _Call | None = None

    @property
    def abandoned(self) -> bool:
        """A call was abandoned and its return not reported yet."""
        return self._abandoned is not None

    def returned(self) -> bool | None:
        """Whether the abandoned call returned, having worked (True) or not (False); None
        while none was abandoned or it still runs."""
        call = self._abandoned
        if call is None or not call.done.is_set():
            return None
        self._abandoned = None
        return call.ok

    async def call(self, deadline: float, what: str, fn: Callable[..., T], *args: Any,
                   checkpoint: Checkpoint | None = None) -> T:
        """`fn(*args)` on a worker thread, abandoned at `deadline` (D4): StoreStalled then.
        Every I/O failure comes back as a StoreError."""
        call = _Call(what, checkpoint)

        def run() -> T:
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
        deadline_ms = round(self.deadline_s * 1000)
        self.on_abandoned(checkpoint if checkpoint is not None else what)
        self.store.stalled(f"the {what} of {self.prefix!r} was abandoned after {deadline_ms} ms")
        if self.metrics is not None:
            self.metrics.store_call_abandoned(what)
        log_event(log, "store.call_abandoned", level=logging.WARNING, prefix=self.prefix, call=what,
                  deadline_ms=deadline_ms)
        raise StoreStalled(f"the {what} took longer than {deadline_ms} ms (a third of the lease) "
                           "and was abandoned; retry with backoff")

    async def read(self, operation: Callable[..., T], *args: Any,
                   deadline: float | None = None) -> T | None:
        """A shard_ops call on the store's client; None when Redis failed (logged once per
        outage). Bounded like every store call: by `deadline`, or a third of the lease."""
        if deadline is None:
            deadline = trio.current_time() + self.deadline_s
        what = getattr(operation, "__name__", "shard read")
        try:
            result = await self.call(deadline, what, operation, self.store.client, *args)
        except StoreError as exc:
            if self.readable:
                log_event(log, "shards.unreadable", level=logging.WARNING, prefix=self.prefix,
                          error=str(exc))
            self.readable = False
            return None
        if not self.readable:
            log_event(log, "shards.readable", prefix=self.prefix)
        self.readable = True
        return result
