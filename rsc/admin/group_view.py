"""One group as the operator tools show it, derived once from a `describeGroup` answer.

Pure: no I/O, no rich, no clock. `group_view(description)` takes the protocol's typed
`GroupDescription` (docs/protocol.md, describeGroup) and returns a `GroupView`: its members
(by id, with what each holds against its target), the shards of the live versions (owner,
the member revoking it, backlog), the migration's progress and the groups it waits on (G2),
the retention in force, the group's backlog (undelivered, unacked, oldest unacked), the ages of
its oldest undelivered and oldest unacked entries (C4) and its laggiest shard. `rsc admin
describe` (and `watch --table`) draws it (rsc/admin/describe.py), `watch`'s change lines use
its rules (rsc/admin/watch_view.py), the web console sends it to its group page
(rsc/console/views.py).

Display words (rsc/common/lag.py): the wire's `lag` is *undelivered*, its `pending` is
*unacked*, and the *backlog* is both together.
"""

from __future__ import annotations

import attrs

from rsc.common.lag import backlog, total_backlog
from rsc.protocol.messages import (
    BlockingGroup,
    GroupDescription,
    MemberDescription,
    MigrationDescription,
    Retention,
    ShardDescription,
)
from rsc.protocol.vocabulary import Cutover, GroupState, MemberState, MigrationState


@attrs.frozen
class MemberView:
    """A member and what it holds against its target.

    Held: assigned plus revoking. Not held yet: in its target, not held (waiting). Not in
    target: held but no longer in its target, whether or not the member was told yet.
    """

    member: MemberDescription
    behind: bool  # its epoch is not the group's assignment epoch
    held: frozenset[str]
    not_held_yet: frozenset[str]
    not_in_target: frozenset[str]

    @property
    def member_id(self) -> str:
        return self.member.member_id

    @property
    def state(self) -> MemberState:
        return self.member.state

    @property
    def needs_attention(self) -> bool:
        """Overdue, not STABLE, behind the assignment epoch, or holding other than its target."""
        return (self.member.overdue or self.member.state != MemberState.STABLE or self.behind
                or bool(self.not_held_yet or self.not_in_target))


@attrs.frozen
class ShardView:
    """A shard of a live version: its owner, the member still revoking it, its figures."""

    shard: str
    version: int
    owner: str | None
    revoking_from: str | None
    length: int
    last_delivered_id: str | None
    lag: int | None  # undelivered; None where Redis cannot tell
    pending: int  # unacked
    backlog: int | None
    oldest_pending_ms: int | None
    max_delivery_count: int | None


@attrs.frozen
class MigrationView:
    """A migration's progress (R2): versions, old shards drained of all, the groups it waits
    on (G2) in the order the coordinator gave them."""

    state: MigrationState
    from_version: int
    to_version: int
    cutover: Cutover
    drained: int
    total: int
    remaining_shards: tuple[str, ...]
    blocking_groups: tuple[BlockingGroup, ...]

    def most_behind_first(self) -> tuple[BlockingGroup, ...]:
        """The blocking groups, the most undelivered plus unacked first, then by name."""
        return tuple(sorted(self.blocking_groups, key=lambda entry: (
            -(entry.undelivered or 0) - entry.pending, entry.consumer_group)))


@attrs.frozen
class Backlog:
    """Sums over the shards: undelivered (None if any shard's is unknown), unacked, both
    together, the oldest unacked entry's age and the highest delivery count (P1)."""

    undelivered: int | None
    unacked: int
    backlog: int | None
    oldest_unacked_ms: int | None
    max_delivery_count: int


@attrs.frozen
class Reconciliation:
    """Where target and current assignment differ: shards waiting for their member, shards
    to release, members behind the assignment epoch."""

    waiting: int
    to_release: int
    behind: int

    @property
    def settled(self) -> bool:
        return not (self.waiting or self.to_release or self.behind)


@attrs.frozen
class GroupView:
    """A group as `describe`, `watch` and the console's group page show it."""

    description: GroupDescription
    members: tuple[MemberView, ...]  # by member id
    shards: tuple[ShardView, ...]  # in the coordinator's (routing) order
    migration: MigrationView | None
    retention: Retention | None  # top-level in the description, or inside its routing
    totals: Backlog
    laggiest: ShardView | None
    reconciliation: Reconciliation

    @property
    def stream_prefix(self) -> str:
        return self.description.stream_prefix

    @property
    def consumer_group(self) -> str:
        return self.description.consumer_group

    @property
    def state(self) -> GroupState | None:
        return self.description.state

    @property
    def group_epoch(self) -> int | None:
        return self.description.group_epoch

    @property
    def assignment_epoch(self) -> int | None:
        return self.description.assignment_epoch

    @property
    def max_concurrency(self) -> int | None:
        return self.description.max_concurrency

    @property
    def routing_version(self) -> int | None:
        routing = self.description.routing
        return None if routing is None else routing.version

    @property
    def shard_count(self) -> int | None:
        routing = self.description.routing
        return None if routing is None else routing.shard_count

    @property
    def oldest_undelivered_age_ms(self) -> int | None:
        """C4: the age of the group's oldest undelivered entry (the largest over its shards);
        None if nothing is undelivered."""
        return self.description.oldest_undelivered_age_ms

    @property
    def oldest_pending_entry_age_ms(self) -> int | None:
        """C4: the age of the group's oldest delivered, unacked entry; None if none is."""
        return self.description.oldest_pending_entry_age_ms

    @property
    def store_went_back_at_ms(self) -> int | None:
        """K3, K4: when the coordinator last wrote a store that went back; None if never."""
        return self.description.store_went_back_at_ms


def held_shards(member: MemberDescription) -> frozenset[str]:
    """What the member holds now: assigned plus revoking."""
    return frozenset(member.assigned_shards) | frozenset(member.revoking_shards)


def member_view(description: GroupDescription, member: MemberDescription) -> MemberView:
    held = held_shards(member)
    target = frozenset(member.target_shards)
    return MemberView(member=member,
                      behind=(description.assignment_epoch is not None
                              and member.member_epoch != description.assignment_epoch),
                      held=held, not_held_yet=target - held, not_in_target=held - target)


def shard_view(shard: ShardDescription, revoking_from: str | None) -> ShardView:
    return ShardView(shard=shard.shard, version=shard.version, owner=shard.owner,
                     revoking_from=revoking_from, length=shard.length,
                     last_delivered_id=shard.last_delivered_id, lag=shard.lag,
                     pending=shard.pending, backlog=backlog(shard.lag, shard.pending),
                     oldest_pending_ms=shard.oldest_pending_ms,
                     max_delivery_count=shard.max_delivery_count)


def migration_view(migration: MigrationDescription | None) -> MigrationView | None:
    if migration is None:
        return None
    drained = len(migration.drained_shards)
    return MigrationView(state=migration.state, from_version=migration.from_version,
                         to_version=migration.to_version, cutover=migration.cutover,
                         drained=drained, total=drained + len(migration.remaining_shards),
                         remaining_shards=migration.remaining_shards,
                         blocking_groups=migration.blocking_groups)


def shard_totals(shards: tuple[ShardView, ...]) -> Backlog:
    lags = [shard.lag for shard in shards]
    ages = [shard.oldest_pending_ms for shard in shards if shard.oldest_pending_ms is not None]
    return Backlog(
        undelivered=None if any(lag is None for lag in lags) else sum(lag or 0 for lag in lags),
        unacked=sum(shard.pending for shard in shards),
        backlog=total_backlog([(shard.lag, shard.pending) for shard in shards]),
        oldest_unacked_ms=max(ages, default=None),
        max_delivery_count=max((shard.max_delivery_count or 0 for shard in shards), default=0))


def laggiest_shard(shards: tuple[ShardView, ...]) -> ShardView | None:
    """The shard most behind: the largest backlog (ties: most undelivered, then first in
    routing order); None if no shard has anything undelivered or unacked."""
    def rank(shard: ShardView) -> tuple[int, int]:
        undelivered = shard.lag or 0
        return undelivered + shard.pending, undelivered
    best: ShardView | None = None
    for shard in shards:
        if rank(shard) == (0, 0):
            continue
        if best is None or rank(shard) > rank(best):
            best = shard
    return best


def reconciliation(members: tuple[MemberView, ...]) -> Reconciliation:
    return Reconciliation(waiting=sum(len(member.not_held_yet) for member in members),
                          to_release=sum(len(member.not_in_target) for member in members),
                          behind=sum(1 for member in members if member.behind))


def retention_of(description: GroupDescription) -> Retention | None:
    """The prefix's retention: top-level in the description, or inside its routing."""
    if description.retention is not None:
        return description.retention
    return None if description.routing is None else description.routing.retention


def group_view(description: GroupDescription) -> GroupView:
    """The group's view, derived once from its description."""
    members = tuple(member_view(description, member)
                    for member in sorted(description.members, key=lambda m: m.member_id))
    revoking = {shard: member.member_id for member in members
                for shard in member.member.revoking_shards}
    shards = tuple(shard_view(shard, revoking.get(shard.shard)) for shard in description.shards)
    return GroupView(description=description, members=members, shards=shards,
                     migration=migration_view(description.migration),
                     retention=retention_of(description), totals=shard_totals(shards),
                     laggiest=laggiest_shard(shards), reconciliation=reconciliation(members))
