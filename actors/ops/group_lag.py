"""C4: every group's backlog in entries and in time, read for the metrics every 15 s.

The coordinator exports per group, beside the counts (`rsc_group_lag_entries`,
`rsc_group_pending_entries`), the age of its oldest undelivered entry
(`rsc_group_lag_seconds`) and of its oldest pending one (`rsc_group_pending_age_seconds`),
each the largest over the group's live shards: the signal an autoscaler reads. Ages are
taken against the Redis node's `TIME` (stream ids are times on its clock), by the ages
script (rsc/common/scripts/ages.lua), one round trip for every shard of every prefix, after
one round trip for the counts. Nothing behind is 0 seconds.

`read_group_lag` is the blocking read (a worker thread); `group_lag_loop` runs it every
`--lag-metrics-interval-ms` within D4's store deadline and hands the figures to the metrics.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

import attrs
import trio

from rsc.actors.core.shard_reports import oldest_age
from rsc.actors.logs import log_event
from rsc.actors.redis_io import shard_ops
from rsc.actors.redis_io.store import StoreError
from rsc.actors.redis_io.store_deadline import run_by_deadline
from rsc.common.lua import Client

log = logging.getLogger("rsc.coordinator")


@attrs.frozen
class PrefixGroups:
    """What to read of one prefix: its live streams and its groups."""

    prefix: str
    streams: tuple[str, ...]
    groups: tuple[str, ...]


@attrs.frozen
class GroupLag:
    """One group's backlog: counts (None where Redis cannot tell) and ages in ms."""

    prefix: str
    group: str
    lag_entries: int | None
    pending_entries: int
    lag_ms: int  # age of the oldest undelivered entry, 0 when none
    pending_age_ms: int  # age of the oldest pending entry, 0 when none


class LagMetrics(Protocol):
    """Where the figures go (actors.ops.metrics.CoordinatorMetrics)."""

    def set_group_lag(self, figures: Sequence[GroupLag]) -> None: ...


def read_group_lag(client: Client, reads: Sequence[PrefixGroups]) -> list[GroupLag]:
    """Every group's counts and ages (blocking: two round trips in all). StoreError on failure."""
    wanted = [read for read in reads if read.groups]
    pairs = [(read.streams, read.groups) for read in wanted]
    totals = shard_ops.group_totals_many(client, pairs)
    all_ages = shard_ops.group_ages_many(client, pairs)
    figures = []
    for read, total, ages in zip(wanted, totals, all_ages, strict=True):
        if isinstance(total, StoreError):
            raise total
        for group in read.groups:
            shard_ages = ages.get(group, [])
            lag_ms = oldest_age([age.oldest_undelivered_age_ms for age in shard_ages])
            pending_ms = oldest_age([age.oldest_pending_entry_age_ms for age in shard_ages])
            figures.append(GroupLag(prefix=read.prefix, group=group,
                                    lag_entries=total[group].lag,
                                    pending_entries=total[group].pending,
                                    lag_ms=lag_ms or 0, pending_age_ms=pending_ms or 0))
    return figures


async def group_lag_loop(client: Client, source: Callable[[], list[PrefixGroups]],
                         metrics: LagMetrics, *, interval_s: float, deadline_s: float) -> None:
    """Read every group's lag every `interval_s` (the first read at once); a read slower than
    `deadline_s` is abandoned (D4) and the gauges keep their last values until the next."""
    while True:
        reads = source()
        try:
            figures = await run_by_deadline(trio.current_time() + deadline_s, "group lag read",
                                            read_group_lag, client, reads)
        except StoreError as exc:  # StoreStalled too: abandoned at the deadline
            log_event(log, "metrics.group_lag_unread", level=logging.DEBUG, error=str(exc))
        else:
            metrics.set_group_lag(figures)
        await trio.sleep(interval_s)
