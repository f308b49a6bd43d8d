"""What operators read of a prefix: `describeGroup` and `listGroups` entries. Pure.

- describe shows the group, each live shard with its version, owner and lag as
  Redis reports it (none when the read failed), members overdue on their
  heartbeat (last accepted one older than the interval x OVERDUE_FACTOR; an
  AWAY member is away, not overdue: S6, its shards show owner null), the
  migration with its blocking groups (G2), and the prefix's retention (T3).
- listGroups shows each group's lag and pending summed over the live shards:
  lag 0 without shards, null when the read failed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from rsc.actors.core.group import GroupMachine
from rsc.actors.core.shard_reports import GroupTotals, ShardLag, oldest_age
from rsc.protocol import messages as m
from rsc.protocol.vocabulary import MemberState

OVERDUE_FACTOR = 1.5
"""A member is overdue when its last accepted heartbeat is older than interval x 1.5."""


def is_overdue(last_heartbeat_ms_ago: int | None, heartbeat_interval_ms: int) -> bool:
    """Overdue: the last accepted heartbeat is older than the interval plus half of it."""
    return (last_heartbeat_ms_ago is not None
            and last_heartbeat_ms_ago > heartbeat_interval_ms * OVERDUE_FACTOR)


def describe(request: m.DescribeGroup, group: GroupMachine, now_ms: int,
             lags: Sequence[ShardLag] | None, *, routing: m.RoutingSummary | None,
             migration: m.MigrationDescription | None, versions: Mapping[str, int],
             heartbeat_interval_ms: int, retention: m.Retention,
             damage: Mapping[str, str] | None = None) -> m.GroupDescription:
    """describeGroup of `group`; `lags` is what Redis said of the live shards (None: not read)."""
    description = group.describe(now_ms, routing, migration)
    members = tuple(attrs.evolve(member, overdue=member.state != MemberState.AWAY and is_overdue(
                        member.last_heartbeat_ms_ago, heartbeat_interval_ms))
                    for member in description.members)
    shards = tuple(
        m.ShardDescription(shard=lag.shard, version=versions.get(lag.shard, 0),
                           owner=group.owners.get(lag.shard), length=lag.length,
                           last_delivered_id=lag.last_delivered_id, lag=lag.lag,
                           pending=lag.pending, oldest_pending_ms=lag.oldest_pending_ms,
                           damage=damage.get(lag.shard) if damage else None,
                           max_delivery_count=lag.max_delivery_count,
                           oldest_undelivered_age_ms=lag.oldest_undelivered_age_ms,
                           oldest_pending_entry_age_ms=lag.oldest_pending_entry_age_ms)
        for lag in lags or ())
    return attrs.evolve(
        description, request_id=request.request_id, members=members, shards=shards,
        retention=retention, expires_at_ms=group.expires_at_ms,
        oldest_undelivered_age_ms=oldest_age([s.oldest_undelivered_age_ms for s in shards]),
        oldest_pending_entry_age_ms=oldest_age([s.oldest_pending_entry_age_ms for s in shards]))


def summaries(groups: Mapping[str, GroupMachine], totals: Mapping[str, GroupTotals] | None,
              *, has_shards: bool) -> tuple[m.GroupSummary, ...]:
    """listGroups' entries for these groups, by name, with lag and pending sums."""
    result = []
    for name in sorted(groups):
        summary = groups[name].summary()
        if totals is not None and name in totals:
            summary = attrs.evolve(summary, lag=totals[name].lag, pending=totals[name].pending)
        elif not has_shards:
            summary = attrs.evolve(summary, lag=0)
        result.append(summary)
    return tuple(result)
