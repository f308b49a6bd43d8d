"""What Redis reports of a prefix's shard streams, as values: lag, totals, drain counts, trims.

Pure (no Redis, no I/O): actors/redis_io/shard_ops.py reads these from Redis, and the
prefix machine and the tests use them without it. The helpers fold them the way
describe (lag), listGroups (totals) and the drain check (R2, G2) read them.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

# --- results ---------------------------------------------------------------------------


@attrs.frozen
class ShardLag:
    """One group's position on one shard, as Redis reports it."""

    shard: str
    length: int
    last_delivered_id: str | None  # None: the group has no consumer group on this shard
    lag: int | None  # XINFO GROUPS `lag`; None where Redis cannot tell
    pending: int
    oldest_pending_ms: int | None  # idle ms of the pending entry with the smallest id
    max_delivery_count: int | None = None  # the highest delivery count of the oldest pending (P1)
    # C4: now (the node's TIME) minus the id time of the first undelivered / first pending entry
    oldest_undelivered_age_ms: int | None = None
    oldest_pending_entry_age_ms: int | None = None


@attrs.frozen
class ShardAges:
    """C4: how old one group's oldest undelivered and oldest pending entries are on one shard,
    against the Redis node's own clock (None: there is no such entry)."""

    shard: str
    oldest_undelivered_age_ms: int | None
    oldest_pending_entry_age_ms: int | None


@attrs.frozen
class GroupTotals:
    """A group's lag and pending summed over shards (`lag` is None if any shard's is)."""

    lag: int | None
    pending: int


@attrs.frozen
class RetentionResult:
    """What one retention pass removed from one shard."""

    shard: str
    removed_acked: int  # by `acked` (T1): every group had acked these
    removed_by_caps: int  # by maxLength / maxAgeMs (T2)
    removed_unconsumed: int  # of removed_by_caps, entries some group had not acked
    length: int  # the shard's length afterwards


@attrs.frozen
class DrainCount:
    """What one group still has to read (`undelivered`) or ack (`pending`) on one shard."""

    shard: str
    consumer_group: str
    undelivered: int
    pending: int


# --- pure helpers ----------------------------------------------------------------------


def sum_known(values: Sequence[int | None]) -> int | None:
    """The sum, or None as soon as one value is unknown."""
    known = [v for v in values if v is not None]
    return sum(known) if len(known) == len(values) else None


def drain_report(counts: Sequence[DrainCount]) -> dict[str, dict[str, tuple[int | None, int]]]:
    """The counts per stream, then per group: (undelivered, pending), as the prefix machine reads them."""
    report: dict[str, dict[str, tuple[int | None, int]]] = {}
    for count in counts:
        report.setdefault(count.shard, {})[count.consumer_group] = (count.undelivered, count.pending)
    return report


def age_cut_id(max_age_ms: int, now_ms: int) -> str | None:
    """The MINID that removes entries older than `max_age_ms` at `now_ms` (None: nothing is)."""
    cut = now_ms - max_age_ms
    return f"{cut}-0" if cut > 0 else None


def entry_age_ms(entry_id: str | None, now_ms: int) -> int | None:
    """C4: how old an entry is at `now_ms` on its node's clock (its id's milliseconds), never
    below 0 (None: no entry)."""
    if not entry_id:
        return None
    milliseconds = int(entry_id.partition("-")[0])
    return max(0, now_ms - milliseconds)


def oldest_age(ages: Sequence[int | None]) -> int | None:
    """The largest known age (a group's, over its shards); None when no shard has one."""
    known = [age for age in ages if age is not None]
    return max(known) if known else None
