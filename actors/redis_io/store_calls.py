"""The D4 deadline of one prefix's store calls: each on a worker thread, abandoned at its deadline.

The store I/O of one batch (the drain check, the checkpoint, offset moves, cleanup, and
each shard read) has a deadline of a third of the lease TTL, run by
actors/redis_io/store_deadline.py. Past it the worker thread is abandoned (it finishes in the
background), the call fails as `StoreStalled`, and the prefix machine is told
(`on_abandoned`): it sends nothing else for the prefix until the thread returns, which the
actor reports at its next batch (`returned`), landed or not.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import trio

from rsc.actors.core.prefix_io import Checkpoint
from rsc.actors.logs import log_event
from rsc.actors.ports import PrefixMetrics
from rsc.actors.redis_io.store import MetadataStore, StoreError
from rsc.actors.redis_io.store_deadline import AbandonedCall, OutageLine, StoreStalled, run_by_deadline

log = logging.getLogger("rsc.coordinator")

T = TypeVar("T")


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
        self.outage = OutageLine(prefix)  # shard reads: logged once per outage
        self._abandoned: AbandonedCall | None = None

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

    async def call(self, deadline: float, what: str, fn: Callable[..., T], *args: object,
                   checkpoint: Checkpoint | None = None) -> T:
        """`fn(*args)` on a worker thread, abandoned at `deadline` (D4): StoreStalled then.
        Every I/O failure comes back as a StoreError."""
        try:
            return await run_by_deadline(deadline, what, fn, *args)
        except StoreStalled as stalled:
            call = stalled.call
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
                           "and was abandoned; retry with backoff", call)

    async def read(self, operation: Callable[..., T], *args: object,
                   deadline: float | None = None) -> T | None:
        """A shard_ops call on the store's client; None when Redis failed (logged once per
        outage). Bounded like every store call: by `deadline`, or a third of the lease."""
        if deadline is None:
            deadline = trio.current_time() + self.deadline_s
        what = getattr(operation, "__name__", "shard read")
        try:
            result = await self.call(deadline, what, operation, self.store.client, *args)
        except StoreError as exc:
            self.outage.failed(str(exc))
            return None
        self.outage.worked()
        return result
