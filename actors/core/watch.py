"""When a `describeGroup` watch pushes: pure rules, no I/O.

A watch pushes the latest description whenever it differs from the last one
pushed in any field except `lastHeartbeatMsAgo`, `awayMs` (S6) and
`oldestPendingMs`, and C4's `oldestUndeliveredAgeMs` and `oldestPendingEntryAgeMs` (those tick
on their own), and at most `MAX_PUSHES_PER_SECOND` times a second: a
description is looked at again only `MIN_INTERVAL_MS` after the last look, so
whatever changed in between is pushed once, as it is then (the latest wins).

Cost: a watch looks only when the prefix machine said its group changed
(`changed`, from `PrefixMachine.mark_watches`), at most MAX_PUSHES_PER_SECOND
times a second, and otherwise once every `REFRESH_MS` for what moves without
the machine seeing it (lag, lengths, overdue), so a quiet group is not
described (nor its lag read) ten times a second.
"""

from __future__ import annotations

import attrs

from rsc.protocol import messages as m
from rsc.protocol.errors import Status

MAX_PUSHES_PER_SECOND = 10
MIN_INTERVAL_MS = 1000 // MAX_PUSHES_PER_SECOND
REFRESH_MS = 1000  # lag, lengths and overdue change in Redis or with time, not in the machine


def significant(description: m.GroupDescription) -> m.GroupDescription:
    """The description without what changes by itself (clocks) or per answer (requestId)."""
    return attrs.evolve(
        description, request_id=None,
        oldest_undelivered_age_ms=None, oldest_pending_entry_age_ms=None,  # C4
        members=tuple(attrs.evolve(member, last_heartbeat_ms_ago=None, away_ms=None)
                      for member in description.members),
        shards=tuple(attrs.evolve(shard, oldest_pending_ms=None, oldest_undelivered_age_ms=None,
                                  oldest_pending_entry_age_ms=None)
                     for shard in description.shards))


@attrs.define
class Watch:
    """One session's watch of one group: what it was last sent, and when it last looked."""

    request: m.DescribeGroup
    sent: m.GroupDescription
    looked_at_ms: int
    changed: bool = False  # the machine changed the group since the last look

    def due(self, now_ms: int) -> bool:
        """Time to look again: after a change, at most MAX_PUSHES_PER_SECOND looks (so pushes)
        a second; without one, every REFRESH_MS."""
        since = now_ms - self.looked_at_ms
        return since >= REFRESH_MS or (self.changed and since >= MIN_INTERVAL_MS)

    def offer(self, description: m.GroupDescription, now_ms: int) -> m.GroupDescription | None:
        """Look at the latest description: the push to send (no requestId), or None.

        After a push with status UNKNOWN_GROUP (the group was deleted) the watch is over.
        """
        self.looked_at_ms = now_ms
        self.changed = False
        if significant(description) == significant(self.sent):
            return None
        self.sent = description
        return attrs.evolve(description, request_id=None)

    @property
    def over(self) -> bool:
        return self.sent.status == Status.UNKNOWN_GROUP
