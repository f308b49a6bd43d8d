"""Which prefixes the coordinator wakes on a tick, and for what: the periodic work, by what changed.

Pure (no trio, no Redis; `now_ms` passed in). One `Schedule` serves every
prefix of the coordinator: after each batch a prefix actor reports its
`Activity`; on each tick `due` says which prefixes to wake, oldest due first,
at most `budget` of them (the rest stay due and come first on the next tick).
A prefix with nothing to do is not woken at all, so idle prefixes cost no
task, no tick and no Redis call.

The rules, one per reason to wake:

- H6, H14: a prefix with live members (or a revocation under way) is woken
  every tick: leases expire and revoke timeouts run on the tick.
- R2: a prefix with a migration is woken every tick (drain counts, retirement).
- Watches: a prefix with a `describeGroup` watch is woken every tick (the
  watch itself decides when to look again, actors/core/watch.py).
- D4: a prefix with a failed write to repair, a late write to adopt or a
  cleanup to retry is woken every tick until that is done.
- T1: what every group acked can move only while members are live (they ack)
  or when the groups or their offsets change (a write of the prefix's records:
  joins, leaves, expiries, resets, new groups). Such a prefix gets a retention
  pass within RETENTION_EVERY_TICKS ticks of the change, so one that keeps
  changing gets one at least every tick interval x 10; one that changed
  nothing since its last pass gets none.
- T2: a prefix with routing and a cap (`maxLength` or `maxAgeMs`) can grow
  without the coordinator seeing it (producers write to Redis directly), so it
  gets a pass at least every RETENTION_EVERY_TICKS ticks, changed or not.
- A prefix without routing has no shards: no pass.
- B6: a prefix with an empty group is woken when that group's expiry is to be
  warned of, and when it expires (`expiry_due_ms`, on the machine's clock).

A woken prefix is handed a tick (`Wake`); `retention` says the pass is due on
it (the prefix machine takes it at the end of that batch, actors/core/prefix.py).
"""

from __future__ import annotations

import heapq

import attrs

from rsc.actors.core.prefix_retention import RETENTION_EVERY_TICKS

DEFAULT_BUDGET = 4096
"""Prefixes woken per tick at most; the others wait for the next tick, oldest due first."""


@attrs.frozen
class Activity:
    """What a prefix's last batch left behind: the reasons it may need waking."""

    live: bool = False  # live members or revocations (H6, H14; acks may come: T1)
    migrating: bool = False  # R2
    watched: bool = False  # describeGroup watches to refresh
    repairing: bool = False  # D4: a failed write, a late write or a cleanup waits for a batch
    routed: bool = False  # the prefix has shards
    caps: bool = False  # T2: maxLength or maxAgeMs is set
    changed: bool = False  # the batch wrote the prefix's records (T1: groups or offsets moved)
    expiry_due_ms: int | None = None  # B6: an empty group's next warning or expiry

    @property
    def every_tick(self) -> bool:
        return self.live or self.migrating or self.watched or self.repairing


@attrs.frozen
class Wake:
    """Wake this prefix now with a tick; `retention`: its retention pass is due (T1, T2)."""

    prefix: str
    retention: bool = False


@attrs.define
class _Entry:
    activity: Activity = attrs.field(factory=Activity)
    pass_due_ms: int | None = None  # when the next retention pass is due (None: none is)
    wake_ms: int | None = None  # the wake queued in the heap (None: none queued)


class Schedule:
    """The coordinator-wide schedule of prefix wakes; see the module docstring."""

    def __init__(self, tick_ms: int, *, every_ticks: int = RETENTION_EVERY_TICKS,
                 budget: int = DEFAULT_BUDGET) -> None:
        if tick_ms < 1 or every_ticks < 1 or budget < 1:
            raise ValueError("tick_ms, every_ticks and budget must be >= 1")
        self.tick_ms = tick_ms
        self.period_ms = tick_ms * every_ticks
        self.budget = budget
        self._entries: dict[str, _Entry] = {}
        self._heap: list[tuple[int, int, str]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._entries)

    def report(self, prefix: str, activity: Activity, now_ms: int) -> None:
        """A batch of `prefix` ended with `activity`: note when it must be woken next."""
        entry = self._entries.get(prefix)
        if entry is None:
            entry = self._entries[prefix] = _Entry()
        entry.activity = activity
        if not activity.routed:
            entry.pass_due_ms = None  # no shards, nothing to trim
        elif activity.live or activity.changed:  # T1: a pass within the period of the change
            latest = now_ms + self.period_ms
            if entry.pass_due_ms is None or entry.pass_due_ms > latest:
                entry.pass_due_ms = latest
        elif activity.caps and entry.pass_due_ms is None:  # T2: caps hold without any change
            entry.pass_due_ms = now_ms + self.period_ms
        self._queue(prefix, entry, self._next_wake(entry, now_ms))

    def forget(self, prefix: str) -> None:
        """The prefix is gone: it is never woken again (its heap entries go stale)."""
        self._entries.pop(prefix, None)

    def due(self, now_ms: int) -> list[Wake]:
        """The prefixes to wake now, oldest due first, at most `budget`; the rest stay queued."""
        wakes: list[Wake] = []
        heap = self._heap
        while heap and heap[0][0] <= now_ms and len(wakes) < self.budget:
            wake_ms, _, prefix = heapq.heappop(heap)
            entry = self._entries.get(prefix)
            if entry is None or entry.wake_ms != wake_ms:
                continue  # stale: forgotten, or queued again at another time
            entry.wake_ms = None
            retention = entry.pass_due_ms is not None and entry.pass_due_ms <= now_ms
            if retention:
                caps = entry.activity.caps and entry.activity.routed
                entry.pass_due_ms = now_ms + self.period_ms if caps else None  # T2 comes again
            expiry = entry.activity.expiry_due_ms
            if retention or entry.activity.every_tick or (expiry is not None
                                                           and expiry <= now_ms):
                wakes.append(Wake(prefix, retention))
            self._queue(prefix, entry, self._next_wake(entry, now_ms))
        return wakes

    def pass_due_ms(self, prefix: str) -> int | None:
        """When `prefix`'s next retention pass is due (None: none is)."""
        entry = self._entries.get(prefix)
        return None if entry is None else entry.pass_due_ms

    def waiting(self) -> int:
        """How many prefixes have a wake queued."""
        return sum(1 for entry in self._entries.values() if entry.wake_ms is not None)

    # --- internals -------------------------------------------------------------------

    def _next_wake(self, entry: _Entry, now_ms: int) -> int | None:
        wake = now_ms + self.tick_ms if entry.activity.every_tick else None
        if entry.pass_due_ms is not None and (wake is None or entry.pass_due_ms < wake):
            wake = entry.pass_due_ms
        expiry = entry.activity.expiry_due_ms
        if expiry is not None:
            expiry = max(expiry, now_ms + self.tick_ms)  # a due one comes with the next tick
            if wake is None or expiry < wake:
                wake = expiry
        return wake

    def _queue(self, prefix: str, entry: _Entry, wake_ms: int | None) -> None:
        if wake_ms is None:
            return  # nothing due: an earlier queued wake finds nothing and queues nothing
        if entry.wake_ms is not None and entry.wake_ms <= wake_ms:
            return  # an earlier wake is queued already; it queues the next one
        entry.wake_ms = wake_ms
        self._seq += 1
        heapq.heappush(self._heap, (wake_ms, self._seq, prefix))
