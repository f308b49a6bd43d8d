"""A prefix's retention (T1..T3): its setting, when a pass is due, and what waits for one. Pure.

- T3: `setRetention` replaces the whole retention object; only a prefix with
  routing has one. A new prefix starts with `acked` and no caps.
- T1/T2: a pass is due every RETENTION_EVERY_TICKS ticks; it trims what every
  group acked (mode `acked`, and only when the prefix has a group) and applies
  the caps in either mode.
- T1: a pass is computed for the groups and offsets of its moment. A checkpoint
  that creates consumer groups (at id 0) or moves offsets back waits for the
  pass that runs (`must_wait`), so no pass trims what a group it did not know
  has not acked.
- T1: one pass at a time per prefix. A pass due while the last one still runs
  beside the batches is held (`held`): it stays due and is taken once the shell
  reports the running one over; a pass that could not be sent (the store is
  stalled, D4) is held the same way.
"""

from __future__ import annotations

import attrs

from rsc.actors.core.prefix_io import Checkpoint, RetentionPass
from rsc.actors.core.records import RetentionRecord
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import RetentionMode

RETENTION_EVERY_TICKS = 10
"""T1/T2: retention runs at least every tick interval x 10."""


def retention_message(retention: RetentionRecord) -> m.Retention:
    return m.Retention(mode=retention.mode, max_length=retention.max_length,
                       max_age_ms=retention.max_age_ms)


def retention_record(retention: m.Retention) -> RetentionRecord:
    return RetentionRecord(mode=retention.mode, max_length=retention.max_length,
                           max_age_ms=retention.max_age_ms)


def must_wait(checkpoint: Checkpoint) -> bool:
    """T1: a checkpoint that creates consumer groups or moves offsets waits for the running pass."""
    return bool(checkpoint.create or checkpoint.moves)


@attrs.define
class Retention:
    """The prefix's retention setting and the ticks since its last pass."""

    record: RetentionRecord = attrs.field(factory=RetentionRecord)
    ticks: int = 0
    running: bool = False  # a pass runs beside the batches (T1: the next one waits)
    held: bool = False  # a pass came due and waits for the running one, or for the store

    def tick(self) -> None:
        self.ticks += 1

    def make_due(self) -> None:
        """The coordinator's schedule says the pass is due now (actors/core/prefix_schedule.py)."""
        self.ticks = max(self.ticks, RETENTION_EVERY_TICKS)

    def due(self, *, routed: bool) -> bool:
        """T1/T2: a pass is due every RETENTION_EVERY_TICKS ticks on a prefix with routing
        (and a held one at once)."""
        return routed and (self.ticks >= RETENTION_EVERY_TICKS or self.held)

    def take_pass(self, streams: tuple[str, ...], groups: tuple[str, ...]) -> RetentionPass | None:
        """T1..T3: the pass to run now, on `streams` for `groups` (the ticks start again), or
        None while the last one still runs (T1: held until it is over)."""
        if self.running:
            self.held = True
            return None
        self.ticks = 0
        self.held = False
        record = self.record
        # T3: `none` removes nothing because of acks; T1: a prefix with no group neither
        acked = record.mode == RetentionMode.ACKED and bool(groups)
        return RetentionPass(streams, groups, acked=acked, max_length=record.max_length,
                             max_age_ms=record.max_age_ms)

    def ran(self, *, beside: bool, sent: bool) -> None:
        """The taken pass ran to its end, or goes on `beside` the batches; one not `sent` (the
        store is stalled, D4) is held."""
        self.running = beside
        self.held = not sent

    def finished(self) -> None:
        """The pass that ran beside the batches is over (or failed): the next may go."""
        self.running = False

    def set(self, request: m.SetRetention, *, routed: bool, prefix: str) -> m.Response:
        """T3: the whole retention object is replaced; only a prefix with routing has one."""
        if not routed:
            return request.unknown_stream()
        self.record = retention_record(request.retention)
        return m.RetentionChanged(request_id=request.request_id, status=Status.OK,
                                  stream_prefix=prefix, retention=retention_message(self.record))
