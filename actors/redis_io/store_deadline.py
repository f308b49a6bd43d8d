"""D4's deadline, run in one place: a blocking store call on a worker thread, abandoned at it.

docs/protocol.md, D4: a store call (a metadata write, a lease renewal, a shard round trip,
a format raise) unanswered after a third of the lease TTL (`CoordinatorConfig.store_deadline_ms`)
is given up. `run_by_deadline` runs `fn(*args)` on a worker thread (on `limiter` if one is
given) and waits for it until `deadline` (trio time); past it the thread is abandoned (it
finishes in the background, on its socket timeout at the latest) and `StoreStalled` is
raised, carrying the `AbandonedCall` whose `done` the thread sets when it returns and whose
`ok` says whether it worked. Every I/O failure the store did not convert comes back as a
`StoreError`. What an abandoned call means is the caller's: a prefix's machine closes its
store gate (actors/redis_io/store_calls.py), the shard pipelines send nothing more until it returns
(actors/redis_io/shard_work.py), a format raise is answered COORDINATOR_NOT_AVAILABLE
(actors/admin/format_admin.py), a lease renewal is a failed write (actors/app.py).

`OutageLine` is the other half that was written at each call site: an outage of reads
logged once when it starts and once when it ends, however many calls fail meanwhile.

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
from typing import TypeVar

import trio

from rsc.actors.logs import log_event
from rsc.actors.redis_io.store import STORE_IO_ERRORS, StoreError

log = logging.getLogger("rsc.coordinator")

T = TypeVar("T")


class AbandonedCall:
    """One store call given up at its deadline: `done` is set by its thread when it returns,
    `ok` then says whether it worked."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.ok = False
        self.done = threading.Event()


class StoreStalled(StoreError):
    """A store call passed its D4 deadline and was abandoned (`call` still runs)."""

    def __init__(self, message: str, call: AbandonedCall) -> None:
        super().__init__(message)
        self.call = call


async def run_by_deadline(deadline: float, what: str, fn: Callable[..., T], *args: object,
                          limiter: trio.CapacityLimiter | None = None) -> T:
    """`fn(*args)` on a worker thread, abandoned at `deadline` (D4): StoreStalled then.
    Every I/O failure comes back as a StoreError."""
    call = AbandonedCall(what)

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
        return await trio.to_thread.run_sync(run, limiter=limiter, abandon_on_cancel=True)
    raise StoreStalled(f"the {what} was abandoned at its deadline", call)


class OutageLine:
    """Shard reads that fail, logged once per outage: `failed` logs `shards.unreadable` at the
    first failure, `worked` logs `shards.readable` at the first success after it (one prefix's
    reads when `prefix` is given, the coordinator-wide pipelines otherwise)."""

    def __init__(self, prefix: str | None = None) -> None:
        self.prefix = prefix
        self.readable = True  # the last read worked

    def failed(self, error: str, *, prefixes: int | None = None) -> None:
        if self.readable:
            if self.prefix is not None:
                log_event(log, "shards.unreadable", level=logging.WARNING, prefix=self.prefix,
                          error=error)
            else:
                log_event(log, "shards.unreadable", level=logging.WARNING, error=error,
                          prefixes=prefixes)
        self.readable = False

    def worked(self) -> None:
        if not self.readable:
            if self.prefix is not None:
                log_event(log, "shards.readable", prefix=self.prefix)
            else:
                log_event(log, "shards.readable")
        self.readable = True
