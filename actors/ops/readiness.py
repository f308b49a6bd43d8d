"""`/readyz` and the one place a Redis outage is logged (K10).

The decisions are actors/core/lease.py's `WriteHealth` (pure); this shell guards it with a lock
(the lease task and the store's writes report from worker threads) and logs what it says.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from rsc.actors.core.lease import OutageEnded, OutageLasts, OutageNotice, OutageStarted, WriteHealth
from rsc.actors.logs import log_event

log = logging.getLogger("rsc.coordinator")

OUTAGE_REMINDER_S = 10.0
READY_AFTER_S = 10.0  # K10: /readyz 200 again only after writes succeeded this long


class Readiness:
    """What `/readyz` reports, and the one place a Redis outage is logged.

    Ready: the lease is held and metadata writes have succeeded for `latch_s` (10 s) since
    the last one that failed (K10, actors/core/lease.py `WriteHealth`: a store that fails every
    other write is not ready, and its probe does not flap; the outage is logged once when
    it starts, at most every 10 s while it lasts and once when it ends). The lease task and
    the store's writes report into it (from worker threads: a lock guards it). `/healthz`
    needs nothing: it answers while the process runs.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 reminder_s: float = OUTAGE_REMINDER_S, latch_s: float = READY_AFTER_S) -> None:
        self.holds_lease = False
        self.last_error: str | None = None
        self._clock = clock
        self._latch_s = latch_s
        self._lock = threading.Lock()
        self._health = WriteHealth(reminder_s=reminder_s, latch_s=latch_s)

    @property
    def last_write_ok(self) -> bool:
        return self._health.last_write_ok

    @property
    def ready(self) -> bool:
        with self._lock:
            _say(self._health.settle(self._clock()))
            return self.holds_lease and self._health.healthy

    def lease_held(self, held: bool, error: str | None = None) -> None:
        self.holds_lease = held
        if error is not None:
            self.last_error = error

    def write_succeeded(self) -> None:
        with self._lock:
            _say(self._health.succeeded(self._clock()))

    def write_failed(self, error: str) -> None:
        with self._lock:
            self.last_error = error
            _say(self._health.failed(self._clock(), error))

    def reason(self) -> str:
        if self.ready:
            return "ready"
        if not self.holds_lease:
            return f"not holding the coordinator lease ({self.last_error or 'not taken yet'})"
        if self.last_write_ok:
            return (f"metadata writes failed until "
                    f"{self._clock() - self._health.last_failure:.1f} s ago "
                    f"({self.last_error}); ready once they succeeded for {self._latch_s:g} s "
                    "(K10)")
        return f"the last metadata write failed ({self.last_error})"


def _say(notice: OutageNotice | None) -> None:
    """K10's lines: an outage's start, its reminders, its end."""
    if isinstance(notice, OutageStarted):
        log_event(log, "store.unavailable", level=logging.WARNING, error=notice.error)
    elif isinstance(notice, OutageLasts):
        log_event(log, "store.still_unavailable", level=logging.WARNING, seconds=notice.seconds,
                  failures=notice.failures, error=notice.error)
    elif isinstance(notice, OutageEnded):
        log_event(log, "store.available", level=logging.WARNING, seconds=notice.seconds,
                  failures=notice.failures)
