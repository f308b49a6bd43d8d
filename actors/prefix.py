"""The prefix machine: routing, resharding, group lifecycle and what a response may reveal.

Pure, like the group machine: events in (requests, ticks, drain results, the
outcome of each write), records and messages out; `now_ms` is always passed
in. It owns one stream prefix: its routing (R1), its migration (R2..R4), its
groups, their registration (H13) and lifecycle (G1..G3), and the H12 rule
that a response reveals only what is durable. The shell (actors/actor.py)
drains a batch of requests into `handle`, measures drain when `drain_query`
asks, writes `checkpoint()` (Kafka's CoordinatorResult records: streams to
create, unseal, seal and retire, hash changes, owner tokens, then consumer
groups to drop and offsets to move), reports back with `committed()` (pushes
to send), `write_failed()` (roll back), `cleanup_failed()` or
`offsets_moved()`, and answers each request with `resolve()`.

Group lifecycle: a group exists from its first join or its registration by
`setShardCount` on a prefix without routing, until `deleteGroup` (G1); a
migration's description names the groups that hold it up (G2); an empty
group's offsets can be moved (G3).

Admission (A1): a `GroupBudget` shared by every prefix machine of a
coordinator counts groups for `--max-groups` (a join or a `setShardCount` that
would register one more gets GROUP_LIMIT_REACHED); `max_group_size` refuses a
join of a new member into a full group (GROUP_MAX_SIZE_REACHED). Both change
nothing.

Repair (issue 11, D4): a write that failed may have landed in part (the hash
without the owner tokens on a cluster) or late (an abandoned write Redis ran
when it came back). Every field and owner token of a failed checkpoint is
written again, from memory, by the next checkpoint, so Redis matches memory
once that one lands.

Reading of R4: a migration blocks the next `setShardCount` only while it is
DRAINING; once it is COMPLETE the next one starts at once, and the drained
streams of the complete one are retired when nobody holds them any more.

Operations (PROTOCOL.md "Lag and shards", "Retention"): describe shows each
live shard's lag as Redis reports it (`lag_reads` asks the shell for one
pipelined read per described group, `lag_measured` hands it back), members
overdue on their heartbeat, and the prefix's retention, which `setRetention`
replaces and `retention_pass` turns into a trim every RETENTION_EVERY_TICKS
ticks (T1..T3; the shell runs it with actors/shard_ops.py).

Room for what comes next: a prefix-level setting is one more record in
actors/records.py plus a request here; group caps (A1) belong
in `_register` and the join path; store deadlines (D4) are the shell's
(a timed-out write is a `write_failed`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from rsc.actors.group import Effects, Event, GroupMachine, GroupSettings
from rsc.actors.records import (
    Changes,
    GroupSnapshot,
    MigrationRecord,
    OwnerToken,
    PrefixSnapshot,
    RetentionRecord,
    RoutingRecord,
)
from rsc.actors.shard_ops import GroupTotals, ShardLag
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.routing import HASH_NAME, stream_key
from rsc.protocol.vocabulary import JOIN_EPOCH, Cutover, MigrationState, RetentionMode

REVEALING = frozenset({Status.OK, Status.REVOKE_PENDING, Status.SYNC_METADATA})
"""Statuses whose response reveals state: sent only once that state is durable (H12)."""

UNAVAILABLE = "the metadata store cannot be written right now; retry with backoff"

Backlog = Mapping[str, tuple[int | None, int]]
"""Per group, on one old stream: (undelivered entries, or None when Redis cannot tell; pending)."""

DrainReport = Mapping[str, Backlog | None]
"""The answer to a DrainQuery: per stream its backlog, or None when the stream is gone."""

RETENTION_EVERY_TICKS = 10
"""T1/T2: retention runs at least every tick interval x 10."""

OVERDUE_FACTOR = 1.5
"""A member is overdue when its last accepted heartbeat is older than interval x 1.5."""


@attrs.frozen
class LagRead:
    """describeGroup's shards: one group's lag on the live streams (one round trip)."""

    group: str
    streams: tuple[str, ...]


@attrs.frozen
class TotalsRead:
    """listGroups' lag and pending sums of every group of the prefix (one round trip)."""

    groups: tuple[str, ...]
    streams: tuple[str, ...]


@attrs.frozen
class RetentionPass:
    """T1..T3: what to trim on the prefix's live shards, for which groups.

    `acked` asks for the T1 trim (mode `acked` and at least one group); the caps
    apply in either mode (T2). A pass that trims nothing still measures the shards'
    lengths (`rsc_shard_length`).
    """

    streams: tuple[str, ...]
    groups: tuple[str, ...]
    acked: bool
    max_length: int | None
    max_age_ms: int | None


@attrs.frozen
class Answer:
    """How a request is answered: decided now, or built once the checkpoint is done.

    A decided `response` that reveals state is replaced by COORDINATOR_NOT_AVAILABLE
    when the write fails (H12); `later` is built from whatever is durable then.
    """

    request: m.Request
    response: m.Response | None = None
    later: Callable[[], m.Response] | None = None


@attrs.frozen
class CreateConsumerGroups:
    """Streams to create (if missing) with a consumer group per group, at id 0."""

    streams: tuple[str, ...]
    groups: tuple[str, ...]


@attrs.frozen
class RetireStreams:
    """Drained streams to delete, with their seal markers and these groups' owner tokens."""

    streams: tuple[str, ...]
    groups: tuple[str, ...]


@attrs.frozen
class DestroyConsumerGroups:
    """G1: remove these groups' Redis consumer groups from the streams (missing ones are fine)."""

    streams: tuple[str, ...]
    groups: tuple[str, ...]


@attrs.frozen(eq=False)
class MoveOffsets:
    """G3: set a group's last-delivered id on these streams and drop its pending entries."""

    streams: tuple[str, ...]
    group: str
    to: m.ResetTo
    timestamp_ms: int | None


@attrs.frozen
class PrefixEvent:
    """A prefix-level log line (routing.changed, migration.complete, migration.retired)."""

    kind: str
    fields: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class DrainQuery:
    """Which old streams to measure for drain (R2), for which groups."""

    streams: tuple[str, ...]
    groups: tuple[str, ...]


@attrs.frozen
class Checkpoint:
    """Everything one batch writes, in this order: create, unseal, seal, retire, hash, owner
    tokens, then the cleanup and offset moves.

    New streams exist before routing names them and the old version is sealed
    before producers are told to move (R1); retired streams are deleted before
    the hash forgets them, so a failed write retires them again later. The
    cleanup (consumer groups of deleted groups) runs only once the hash says
    the group is gone; when it fails the machine queues it again
    (`cleanup_failed`).
    """

    create: tuple[CreateConsumerGroups, ...] = ()
    unseal: tuple[str, ...] = ()  # sealed by a checkpoint that failed, still current
    seal: tuple[str, ...] = ()
    retire: RetireStreams | None = None
    changes: Changes = attrs.field(factory=Changes)
    owners: tuple[OwnerToken, ...] = ()
    effects: dict[str, Effects] = attrs.field(factory=dict)
    events: tuple[PrefixEvent, ...] = ()
    cleanup: DestroyConsumerGroups | None = None
    moves: tuple[MoveOffsets, ...] = ()  # after the hash too; each reports its outcome
    # only fields and tokens of an earlier failed write, rewritten (`_repair`): the batch itself
    # changed nothing, so its answers reveal nothing new even if this write fails too
    repair_only: bool = False

    @property
    def empty(self) -> bool:
        """Nothing to write: the batch is durable as it is."""
        return not (self.create or self.unseal or self.seal or self.retire or self.changes
                    or self.owners or self.cleanup or self.moves)


@attrs.define
class GroupBudget:
    """A1: the groups of every prefix of one coordinator, against `--max-groups`."""

    max_groups: int
    total: int = 0
    counts: dict[str, int] = attrs.field(factory=dict)

    def count(self, prefix: str, groups: int) -> None:
        """`prefix` has `groups` groups now (registered or restored, deleted or rolled back)."""
        self.total += groups - self.counts.get(prefix, 0)
        if groups:
            self.counts[prefix] = groups
        else:
            self.counts.pop(prefix, None)

    @property
    def full(self) -> bool:
        return self.total >= self.max_groups


@attrs.frozen
class Committed:
    """What the shell does once a checkpoint is durable: push, log, count."""

    pushes: tuple[m.AssignmentChanged, ...] = ()
    routing: m.Routing | None = None  # for every subscriber
    events: tuple[tuple[str, Event], ...] = ()  # (group, event)
    groups: tuple[str, ...] = ()  # groups whose state may have changed
    prefix_events: tuple[PrefixEvent, ...] = ()
    deleted: tuple[str, ...] = ()  # groups gone (G1): forget their series


def routing_summary(routing: RoutingRecord, store_id: str | None = None,
                    retention: RetentionRecord | None = None) -> m.RoutingSummary:
    return m.RoutingSummary(version=routing.version, shard_count=routing.shard_count,
                            store_id=store_id,
                            retention=retention_message(retention) if retention else None)


def retention_message(retention: RetentionRecord) -> m.Retention:
    return m.Retention(mode=retention.mode, max_length=retention.max_length,
                       max_age_ms=retention.max_age_ms)


def retention_record(retention: m.Retention) -> RetentionRecord:
    return RetentionRecord(mode=retention.mode, max_length=retention.max_length,
                           max_age_ms=retention.max_age_ms)


def is_overdue(last_heartbeat_ms_ago: int | None, heartbeat_interval_ms: int) -> bool:
    """Overdue: the last accepted heartbeat is older than the interval plus half of it."""
    return (last_heartbeat_ms_ago is not None
            and last_heartbeat_ms_ago > heartbeat_interval_ms * OVERDUE_FACTOR)


def routing_description(routing: RoutingRecord) -> m.RoutingDescription:
    return m.RoutingDescription(version=routing.version, shard_count=routing.shard_count,
                                hash=HASH_NAME, streams=routing.streams)


def migration_description(migration: MigrationRecord,
                          blocking: tuple[m.BlockingGroup, ...] = ()) -> m.MigrationDescription:
    return m.MigrationDescription(
        state=migration.state, from_version=migration.from_version,
        to_version=migration.to_version, cutover=migration.cutover,
        drained_shards=tuple(s for s in migration.from_streams if s in migration.drained),
        remaining_shards=migration.remaining,
        blocking_groups=blocking if migration.state == MigrationState.DRAINING else ())


class PrefixMachine:
    """One stream prefix: routing, migration and groups; see the module docstring."""

    def __init__(self, prefix: str, settings: GroupSettings, *,
                 keep_drained_streams: bool = False, budget: GroupBudget | None = None,
                 max_group_size: int | None = None) -> None:
        self.prefix = prefix
        self.budget = budget
        self.max_group_size = max_group_size
        # fields and owner tokens of failed writes, rewritten from memory until one lands
        self._unsure_routing = self._unsure_migration = False
        self._unsure_groups: set[str] = set()
        self._unsure_members: set[tuple[str, str]] = set()
        self._unsure_owners: set[tuple[str, str]] = set()
        self._last_checkpoint: Checkpoint | None = None
        self.settings = settings
        self.keep_drained_streams = keep_drained_streams
        self.routing: RoutingRecord | None = None
        self.migration: MigrationRecord | None = None
        self.groups: dict[str, GroupMachine] = {}
        self.retention = RetentionRecord()
        self.store_id: str | None = None  # this Redis's rsc:store-id, set by the shell
        self.persisted = PrefixSnapshot()  # what Redis holds: the rollback point
        self._create: list[CreateConsumerGroups] = []
        self._seal: list[str] = []
        self._unseal: set[str] = set()
        self._events: list[PrefixEvent] = []
        # G1: deleted this batch (their last effects still to write), and consumer groups to drop
        self._deleted: dict[str, Effects] = {}
        self._destroy: set[str] = set()
        # G3: offset moves of this batch, and the ids they left (read by their answers)
        self._moves: list[MoveOffsets] = []
        self._moved: dict[MoveOffsets, Mapping[str, str]] = {}
        # G2: who held the migration up at the last drain measurement (not persisted)
        self.blocking: tuple[m.BlockingGroup, ...] = ()
        self._drain_check_due = False
        self._retire_check_due = False
        # watches (Admin): groups whose description may have changed since `take_described`
        self._described: set[str] = set()
        self._described_all = False
        # lag of the groups described this batch (read after the checkpoint), and the ticks
        # since the last retention pass
        self._lag_wanted: set[str] = set()
        self._lags: dict[str, list[ShardLag] | None] = {}
        self._ticks = 0

    # --- restore -------------------------------------------------------------------

    def restore(self, snapshot: PrefixSnapshot, now_ms: int) -> None:
        """Load the replayed records after a coordinator restart (members get fresh leases)."""
        self.routing = snapshot.routing
        self.migration = snapshot.migration
        self.retention = snapshot.retention
        self.groups = {}
        shards = self.assignable_shards()
        for name, group in snapshot.groups.items():
            self.groups[name] = GroupMachine.from_record(self.prefix, name, self.settings, group,
                                                         shards, now_ms)
        self.persisted = PrefixSnapshot(
            routing=snapshot.routing, migration=snapshot.migration, retention=snapshot.retention,
            groups={name: GroupSnapshot(g.group, dict(g.members))
                    for name, g in snapshot.groups.items()})
        self._drain_check_due = self._retire_check_due = self.migration is not None
        self._count_groups()

    # --- events --------------------------------------------------------------------

    def handle(self, request: m.Request, now_ms: int) -> Answer:
        """Apply one request; the answer is final only after the checkpoint (`resolve`)."""
        answer = self._handle(request, now_ms)
        self._count_groups()
        return answer

    def _handle(self, request: m.Request, now_ms: int) -> Answer:
        if isinstance(request, m.Heartbeat):
            return Answer(request, self._heartbeat(request, now_ms))
        if isinstance(request, m.GetRouting):
            return Answer(request, later=lambda: self._routing_response(request))
        if isinstance(request, m.SetShardCount):
            return Answer(request, self._set_shard_count(request))
        if isinstance(request, m.SetMaxConcurrency):
            return Answer(request, self._set_max_concurrency(request))
        if isinstance(request, m.RemoveMember):
            return Answer(request, self._remove_member(request, now_ms))
        if isinstance(request, m.DeleteGroup):
            return Answer(request, self._delete_group(request))
        if isinstance(request, m.ResetOffsets):
            return self._reset_offsets(request)
        if isinstance(request, m.SetRetention):
            return Answer(request, self._set_retention(request))
        if isinstance(request, m.DescribeGroup):
            self._lag_wanted.add(request.consumer_group)
            return Answer(request, later=lambda: self.describe(
                request, now_ms, self._lags.get(request.consumer_group)))
        return Answer(request, request.error(
            Status.INVALID_REQUEST, f"{request.TYPE} is not a request of a stream prefix"))

    def tick(self, now_ms: int) -> None:
        """Expire leases and revoke timeouts (H6, H14); measure drain and retire (R2)."""
        for group in self.groups.values():
            group.tick(now_ms)
        if self.migration is not None:
            self._drain_check_due = self._retire_check_due = True
        self._ticks += 1

    def retention_pass(self) -> RetentionPass | None:
        """T1..T3: the trim the shell should run now, every RETENTION_EVERY_TICKS ticks."""
        if self._ticks < RETENTION_EVERY_TICKS or self.routing is None:
            return None
        self._ticks = 0
        retention = self.retention
        # T3: `none` removes nothing because of acks; T1: a prefix with no group neither
        acked = retention.mode == RetentionMode.ACKED and bool(self.groups)
        return RetentionPass(self.live_streams(), tuple(self.groups), acked=acked,
                             max_length=retention.max_length, max_age_ms=retention.max_age_ms)

    def lag_reads(self) -> tuple[LagRead, ...]:
        """The lag reads this batch's describes need, on the streams as they are durably now."""
        wanted, self._lag_wanted, self._lags = self._lag_wanted, set(), {}
        streams = self.live_streams()
        return tuple(LagRead(name, streams) for name in sorted(wanted) if name in self.groups)

    def lag_measured(self, read: LagRead, lags: list[ShardLag] | None) -> None:
        """What Redis said of a group's shards (None: the read failed; describe shows none)."""
        self._lags[read.group] = lags
    def drain_query(self) -> DrainQuery | None:
        """The drain measurement (R2) the shell should make before this checkpoint, if due."""
        migration = self.migration
        if not self._drain_check_due or migration is None:
            return None
        self._drain_check_due = False
        if migration.state != MigrationState.DRAINING or not migration.remaining:
            return None
        if not self.groups:  # R2: kept until a group exists and drains them
            return None
        return DrainQuery(migration.remaining, tuple(self.groups))

    def drain_measured(self, report: DrainReport) -> None:
        """R2, G2: an old stream is drained when no group has undelivered or pending entries."""
        migration = self.migration
        if migration is None:
            return
        drained: set[str] = set()
        blocking: dict[str, tuple[int | None, int]] = {}
        for stream in migration.remaining:
            if stream not in report:
                continue
            backlog = report[stream]
            if backlog is None:  # already gone
                drained.add(stream)
                continue
            clear = True
            for name in self.groups:
                undelivered, pending = backlog.get(name, (None, 0))
                if undelivered == 0 and pending == 0:
                    continue
                clear = False
                total_undelivered, total_pending = blocking.get(name, (0, 0))
                blocking[name] = (None if undelivered is None or total_undelivered is None
                                  else total_undelivered + undelivered, total_pending + pending)
            if clear:
                drained.add(stream)
        blocking_groups = tuple(m.BlockingGroup(consumer_group=name, undelivered=undelivered,
                                                pending=pending)
                                for name, (undelivered, pending) in sorted(blocking.items()))
        if blocking_groups != self.blocking:
            self._described_all = True  # every group's migration description names them
        self.blocking = blocking_groups
        self.drained(drained)

    def drained(self, shards: Iterable[str]) -> None:
        """R2: these old shards are drained for every group; they leave the assignment."""
        migration = self.migration
        if migration is None:
            return
        newly = frozenset(shards) & frozenset(migration.remaining)
        if not newly:
            return
        migration = attrs.evolve(migration, drained=migration.drained | newly)
        if not migration.remaining:
            migration = attrs.evolve(migration, state=MigrationState.COMPLETE)
            self._events.append(PrefixEvent("migration.complete", {"version": migration.to_version}))
        self.migration = migration
        self._reassign()

    # --- the checkpoint --------------------------------------------------------------

    def checkpoint(self) -> Checkpoint:
        """Take the batch's records: everything the shell must write before answering."""
        retire = self._retirement()
        changes = Changes()
        # identity first: the routing holds every stream name, and a steady batch changes neither
        if self.routing is not self.persisted.routing and self.routing != self.persisted.routing:
            changes.set_routing(self.routing)
        if (self.migration is not self.persisted.migration
                and self.migration != self.persisted.migration):
            changes.set_migration(self.migration)
        owners: list[OwnerToken] = []
        effects: dict[str, Effects] = {}
        for name, effect in self._deleted.items():  # G1: its last changes, then it is gone
            owners.extend(OwnerToken(shard, name, owner)
                          for shard, owner in effect.owner_changes.items())
            changes.groups[name] = None
            persisted = self.persisted.groups.get(name)
            for member_id in (*effect.members_removed, *(persisted.members if persisted else ())):
                changes.members[(name, member_id)] = None
            effects[name] = effect
        for name, group in self.groups.items():
            effect = effects[name] = group.take_effects()
            if effect.group_dirty:
                changes.groups[name] = group.persistent_group()
            for member_id in effect.members_dirty:
                if member_id in group.members:
                    changes.members[(name, member_id)] = group.persistent_member(member_id)
            for member_id in effect.members_removed:
                changes.members[(name, member_id)] = None
            owners.extend(OwnerToken(shard, name, owner)
                          for shard, owner in effect.owner_changes.items())
        cleanup = None
        if self._destroy:
            cleanup = DestroyConsumerGroups(self._existing_streams(), tuple(sorted(self._destroy)))
        if self.retention != self.persisted.retention:
            changes.retention = self.retention
        if changes.routing_changed and self.routing is not None:
            self._events.append(PrefixEvent("routing.changed", {
                "version": self.routing.version, "shard_count": self.routing.shard_count}))
        self._note_described(changes, effects)
        unseal: tuple[str, ...] = ()
        if self._unseal:  # rare (a failed seal); the set of every stream is not built per batch
            current = set(self.routing.streams) if self.routing else set()
            unseal = tuple(sorted(s for s in self._unseal if s in current and s not in self._seal))
        fresh = bool(changes or owners or self._create or self._seal or unseal or retire or cleanup
                     or self._moves)
        self._repair(changes, owners)
        checkpoint = Checkpoint(create=tuple(self._create), unseal=unseal,
                                seal=tuple(self._seal), retire=retire,
                                changes=changes, owners=tuple(owners), effects=effects,
                                events=tuple(self._events), cleanup=cleanup,
                                moves=tuple(self._moves),
                                repair_only=not fresh and bool(changes or owners))
        self._create, self._seal, self._events, self._moves = [], [], [], []
        self._unseal = set()
        self._deleted, self._destroy = {}, set()
        self._last_checkpoint = checkpoint
        return checkpoint

    def _repair(self, changes: Changes, owners: list[OwnerToken]) -> None:
        """Add every field and owner token of a failed write that this checkpoint misses,
        with memory's value (issue 11: a half-written or late write is overwritten)."""
        if self._unsure_routing and not changes.routing_changed:
            changes.set_routing(self.routing)
        if self._unsure_migration and not changes.migration_changed:
            changes.set_migration(self.migration)
        for name in sorted(self._unsure_groups - changes.groups.keys()):
            group = self.groups.get(name)
            changes.groups[name] = group.persistent_group() if group is not None else None
        for key in sorted(self._unsure_members - changes.members.keys()):
            group = self.groups.get(key[0])
            changes.members[key] = (group.persistent_member(key[1])
                                    if group is not None and key[1] in group.members else None)
        written = {(token.shard, token.group) for token in owners}
        for shard, name in sorted(self._unsure_owners - written):
            group = self.groups.get(name)
            owners.append(OwnerToken(shard, name, group.owners.get(shard) if group else None))

    @property
    def repair_pending(self) -> bool:
        """A failed write left fields or owner tokens that the next checkpoint writes again."""
        return bool(self._unsure_routing or self._unsure_migration or self._unsure_groups
                    or self._unsure_members or self._unsure_owners)

    def _count_groups(self) -> None:
        if self.budget is not None:
            self.budget.count(self.prefix, len(self.groups))

    def committed(self, checkpoint: Checkpoint) -> Committed:
        """The checkpoint is durable: fold it into the rollback point; what to push."""
        self.persisted.apply(checkpoint.changes)
        if checkpoint is self._last_checkpoint:  # it rewrote every unsure field and token
            self._unsure_routing = self._unsure_migration = False
            self._unsure_groups, self._unsure_members, self._unsure_owners = set(), set(), set()
        pushes: list[m.AssignmentChanged] = []
        events: list[tuple[str, Event]] = []
        for name, effect in checkpoint.effects.items():
            group = self.groups.get(name)
            events.extend((name, event) for event in effect.events)
            if group is None:
                continue
            pushes.extend(m.AssignmentChanged(stream_prefix=self.prefix, consumer_group=name,
                                              member_id=member_id, group_epoch=group.group_epoch)
                          for member_id in effect.pushes)
        routing = None  # routing answers carry the retention too: a change of it is pushed
        if (checkpoint.changes.routing_changed or checkpoint.changes.retention is not None) \
                and self.routing is not None:
            routing = self._routing_message(None)
        deleted = tuple(name for name, group in checkpoint.changes.groups.items()
                        if group is None and name not in self.groups)
        return Committed(pushes=tuple(pushes), routing=routing, events=tuple(events),
                         groups=tuple(checkpoint.effects), prefix_events=checkpoint.events,
                         deleted=deleted)

    def write_failed(self, checkpoint: Checkpoint, now_ms: int) -> None:
        """The checkpoint did not land (h11's send_failed): back to what Redis holds.

        Its seal may have landed before the hash failed: a version that stays
        current is unsealed with the next checkpoint, so producers are not
        refused by a routing that never changed. The hash may have landed in
        part, or may still land late: its fields and owner tokens are written
        again by the next checkpoint (`_repair`).
        """
        self._unseal.update(checkpoint.seal)
        self._unseal.update(checkpoint.unseal)
        changes = checkpoint.changes
        self._unsure_routing |= changes.routing_changed
        self._unsure_migration |= changes.migration_changed
        self._unsure_groups.update(changes.groups)
        self._unsure_members.update(changes.members)
        self._unsure_owners.update((token.shard, token.group) for token in checkpoint.owners)
        self._restore_persisted(now_ms)

    def adopt(self, checkpoint: Checkpoint, now_ms: int) -> None:
        """A checkpoint answered as failed landed after all (D4: an abandoned write finished in
        the background, and nothing was written after it): Redis holds it, so memory takes it
        as its rollback point, rather than the repair writing it back out. Nothing of it was
        revealed; members learn it from their next heartbeats."""
        self.persisted.apply(checkpoint.changes)
        self._restore_persisted(now_ms)
        self.cleanup_failed(checkpoint)  # its consumer groups are dropped with the next one

    def _note_described(self, changes: Changes, effects: Mapping[str, Effects]) -> None:
        """Which descriptions this batch may have changed (a watch looks at those only)."""
        if changes.routing_changed or changes.migration_changed or changes.retention is not None:
            self._described_all = True  # every group's routing, migration and retention
        elif not self._described_all:
            self._described.update(changes.groups)  # settings changed, registered or deleted
            self._described.update(name for name, effect in effects.items()
                                   if effect.dirty or effect.events)

    def take_described(self) -> tuple[bool, frozenset[str]]:
        """(every group, or these groups) whose description may differ since the last call."""
        described = (self._described_all, frozenset(self._described))
        self._described_all, self._described = False, set()
        return described

    def _restore_persisted(self, now_ms: int) -> None:
        self._described_all = True  # back to what Redis holds
        self.routing = self.persisted.routing
        self.migration = self.persisted.migration
        self.retention = self.persisted.retention
        shards = self.assignable_shards()
        for name in list(self.groups):
            if name not in self.persisted.groups:
                del self.groups[name]
        for name, record in self.persisted.groups.items():
            group = self.groups.get(name)
            if group is None:  # deleted in the failed batch (G1): it is still there
                group = self.groups[name] = GroupMachine(self.prefix, name, self.settings)
            group.restore(record, shards, now_ms, restart=False)
        if self.migration is not None:
            self._retire_check_due = True
        self._count_groups()

    def cleanup_failed(self, checkpoint: Checkpoint) -> None:
        """The hash landed but the cleanup did not: do it again with the next checkpoint."""
        if checkpoint.cleanup is not None:
            self._destroy.update(name for name in checkpoint.cleanup.groups
                                 if name not in self.groups)

    def offsets_moved(self, move: MoveOffsets, last_delivered: Mapping[str, str]) -> None:
        """G3: the move landed; `last_delivered` is the group's new id per stream."""
        self._moved[move] = last_delivered
        self._described.add(move.group)

    def resolve(self, answer: Answer, *, durable: bool) -> m.Response:
        """H12: the response to send, now that the checkpoint landed (`durable`) or not."""
        if answer.later is not None:
            return answer.later()
        assert answer.response is not None
        # a batch whose checkpoint only repaired an earlier failed write revealed nothing new
        repair_only = self._last_checkpoint is not None and self._last_checkpoint.repair_only
        if not durable and not repair_only and answer.response.status in REVEALING:
            return answer.request.error(Status.COORDINATOR_NOT_AVAILABLE, UNAVAILABLE)
        return answer.response

    # --- views -----------------------------------------------------------------------

    def live_streams(self) -> tuple[str, ...]:
        """Every stream that may still hold undelivered entries: undrained old ones, current ones."""
        current = self.routing.streams if self.routing else ()
        old = self.migration.remaining if self.migration else ()
        return old + current

    def assignable_shards(self) -> tuple[str, ...]:
        """What the groups assign now: undrained old shards, and the new ones unless held back (R3)."""
        if self.routing is None:
            return ()
        if self.migration is None:
            return self.routing.streams
        remaining = self.migration.remaining
        if self.migration.cutover == Cutover.ORDERED and remaining:
            return remaining
        return remaining + self.routing.streams

    def totals_read(self) -> TotalsRead | None:
        """listGroups' lag and pending sums need this read (None: no shards or no groups)."""
        streams = self.live_streams()
        if not streams or not self.groups:
            return None
        return TotalsRead(tuple(self.groups), streams)

    def summaries(self, totals: Mapping[str, GroupTotals] | None = None
                  ) -> tuple[m.GroupSummary, ...]:
        """listGroups' entries for this prefix, by group name, with lag and pending sums.

        Without shards a group has lag 0; when the read failed (`totals` None while there
        are shards) its lag is null.
        """
        result = []
        for name in sorted(self.groups):
            summary = self.groups[name].summary()
            if totals is not None and name in totals:
                summary = attrs.evolve(summary, lag=totals[name].lag, pending=totals[name].pending)
            elif not self.live_streams():
                summary = attrs.evolve(summary, lag=0)
            result.append(summary)
        return tuple(result)

    def shard_versions(self) -> dict[str, int]:
        """The routing version of every live shard."""
        versions: dict[str, int] = {}
        if self.migration is not None:
            versions.update(dict.fromkeys(self.migration.remaining, self.migration.from_version))
        if self.routing is not None:
            versions.update(dict.fromkeys(self.routing.streams, self.routing.version))
        return versions

    # --- requests --------------------------------------------------------------------

    def _heartbeat(self, request: m.Heartbeat, now_ms: int) -> m.HeartbeatResponse:
        routing = (routing_summary(self.routing, self.store_id, self.retention)
                   if self.routing else None)
        group = self.groups.get(request.consumer_group)
        if group is None:
            if request.member_epoch != JOIN_EPOCH:
                # H13: only a join registers a group; a leave (H9) or a stale epoch leaves nothing
                return request.unknown_group()
            if self._groups_full():
                return request.error(Status.GROUP_LIMIT_REACHED,
                                     self._group_limit_text(request.consumer_group))
            group = self._register(request.consumer_group)
        elif (request.member_epoch == JOIN_EPOCH and self.max_group_size is not None
              and request.member_id not in group.members
              and len(group.members) >= self.max_group_size):
            return request.error(
                Status.GROUP_MAX_SIZE_REACHED,
                f"group {request.consumer_group!r} of {self.prefix!r} already has "
                f"{len(group.members)} members, the most --max-group-size "
                f"({self.max_group_size}) allows; nothing changed, retry the join with backoff")
        return group.heartbeat(request, now_ms, routing)

    def _groups_full(self) -> bool:
        return self.budget is not None and self.budget.full

    def _group_limit_text(self, name: str) -> str:
        assert self.budget is not None
        return (f"the coordinator already has {self.budget.total} groups, the most --max-groups "
                f"({self.budget.max_groups}) allows; group {name!r} of {self.prefix!r} was not "
                "created, nothing changed; retry with backoff")

    def _register(self, name: str) -> GroupMachine:
        """H13: a group appears with the prefix's shards and a consumer group on every live stream."""
        group = GroupMachine(self.prefix, name, self.settings, self.assignable_shards())
        group.effects.group_dirty = True
        self.groups[name] = group
        self._destroy.discard(name)  # deleted and registered again before its cleanup ran
        live = self.live_streams()
        if live:
            self._create.append(CreateConsumerGroups(live, (name,)))
        return group

    def _set_shard_count(self, request: m.SetShardCount) -> m.ShardCountChanged:
        name = request.consumer_group
        if name is not None and name not in self.groups:
            if self.routing is not None:  # G1: a typo never creates a group that blocks drains
                return request.unknown_group()
            if self._groups_full():  # A1: groups registered here count against --max-groups
                return request.error(Status.GROUP_LIMIT_REACHED, self._group_limit_text(name))
            self._register(name)
        routing, migration = self.routing, self.migration
        if routing is not None and routing.shard_count == request.shard_count:
            return self._shard_count_changed(request)  # R4: the same count changes nothing
        if migration is not None and migration.state != MigrationState.COMPLETE:
            return request.error(
                Status.MIGRATION_IN_PROGRESS,
                f"stream prefix {self.prefix!r} is still migrating from version "
                f"{migration.from_version} to {migration.to_version} "
                f"({len(migration.remaining)} of {len(migration.from_streams)} old shards "
                "not drained yet); retry once it is COMPLETE")
        version = routing.version + 1 if routing else 1
        streams = tuple(stream_key(self.prefix, version, i) for i in range(request.shard_count))
        if routing is not None:  # R1: the next version; the old one is sealed and drains
            retiring = migration.retiring + migration.from_streams if migration else ()
            self.blocking = ()
            self.migration = MigrationRecord(
                from_version=routing.version, to_version=version, cutover=request.cutover,
                from_streams=routing.streams, retiring=retiring)
            self._seal.extend(routing.streams)
            self._drain_check_due = True
        self.routing = RoutingRecord(version=version, shard_count=request.shard_count,
                                     streams=streams)
        self._create.append(CreateConsumerGroups(streams, tuple(self.groups)))
        self._reassign()
        return self._shard_count_changed(request)

    def _shard_count_changed(self, request: m.SetShardCount) -> m.ShardCountChanged:
        return m.ShardCountChanged(
            request_id=request.request_id, status=Status.OK, stream_prefix=self.prefix,
            consumer_group=request.consumer_group,
            routing=routing_description(self.routing) if self.routing else None,
            migration=migration_description(self.migration) if self.migration else None)

    def _set_max_concurrency(self, request: m.SetMaxConcurrency) -> m.Response:
        group = self.groups.get(request.consumer_group)
        if group is None:
            return request.unknown_group()
        group.set_max_concurrency(request.max_concurrency)
        return m.MaxConcurrencyChanged(
            request_id=request.request_id, status=Status.OK, stream_prefix=self.prefix,
            consumer_group=request.consumer_group, max_concurrency=group.max_concurrency,
            group_epoch=group.group_epoch)

    def _remove_member(self, request: m.RemoveMember, now_ms: int) -> m.Response:
        group = self.groups.get(request.consumer_group)
        if group is None:
            return request.unknown_group()
        if not group.remove_member(request.member_id, now_ms):
            return request.error(Status.UNKNOWN_MEMBER_ID,
                                 f"member {request.member_id!r} is not live in the group")
        return m.MemberRemoved(
            request_id=request.request_id, status=Status.OK, stream_prefix=self.prefix,
            consumer_group=request.consumer_group, member_id=request.member_id,
            group_epoch=group.group_epoch)

    def _delete_group(self, request: m.DeleteGroup) -> m.Response:
        """G1: only an empty group goes; its records, and then its Redis consumer groups."""
        name = request.consumer_group
        group = self.groups.get(name)
        if group is None:
            return request.unknown_group()
        if group.members:
            return request.error(
                Status.GROUP_NOT_EMPTY,
                f"group {name!r} of {self.prefix!r} has {len(group.members)} live member(s); "
                "stop them (or remove them) first")
        del self.groups[name]
        self._deleted[name] = group.take_effects()
        self._destroy.add(name)
        self._drain_check_due = self.migration is not None  # it no longer holds drains up (R2)
        return m.GroupDeleted(request_id=request.request_id, status=Status.OK,
                              stream_prefix=self.prefix, consumer_group=name)

    def _reset_offsets(self, request: m.ResetOffsets) -> Answer:
        """G3: only a group without live members moves; answered once the move is done."""
        group = self.groups.get(request.consumer_group)
        if group is None:
            return Answer(request, request.unknown_group())
        if group.members:
            return Answer(request, request.error(
                Status.GROUP_NOT_EMPTY,
                f"group {request.consumer_group!r} of {self.prefix!r} has {len(group.members)} "
                "live member(s); stop them (or remove them) before moving its offsets"))
        move = MoveOffsets(self.live_streams(), request.consumer_group, request.to,
                           request.timestamp_ms)
        self._moves.append(move)

        def answer() -> m.Response:
            moved = self._moved.pop(move, None)
            if moved is None:
                return request.error(Status.COORDINATOR_NOT_AVAILABLE,
                                     "the offsets could not be moved right now; retry with backoff")
            return m.OffsetsReset(
                request_id=request.request_id, status=Status.OK, stream_prefix=self.prefix,
                consumer_group=request.consumer_group,
                shards=tuple(m.ShardOffset(shard=stream, last_delivered_id=moved[stream])
                             for stream in move.streams if stream in moved))

        return Answer(request, later=answer)

    def _existing_streams(self) -> tuple[str, ...]:
        """Every stream of every version not yet retired."""
        current = self.routing.streams if self.routing else ()
        if self.migration is None:
            return current
        return self.migration.retiring + self.migration.from_streams + current

    def describe(self, request: m.DescribeGroup, now_ms: int,
                 lags: list[ShardLag] | None) -> m.GroupDescription:
        """describeGroup: the group, its overdue members, retention, blockers and shards.

        `lags` is what Redis said of the live shards (None: not read, no shards shown).
        """
        group = self.groups.get(request.consumer_group)
        if group is None:
            unknown = request.unknown_group()
            assert isinstance(unknown, m.GroupDescription)
            return unknown
        description = group.describe(
            now_ms, routing_summary(self.routing, self.store_id, self.retention)
            if self.routing else None,
            migration_description(self.migration, self.blocking) if self.migration else None)
        interval = self.settings.heartbeat_interval_ms
        members = tuple(attrs.evolve(member, overdue=is_overdue(member.last_heartbeat_ms_ago,
                                                               interval))
                        for member in description.members)
        versions = self.shard_versions()
        shards = tuple(
            m.ShardDescription(shard=lag.shard, version=versions.get(lag.shard, 0),
                               owner=group.owners.get(lag.shard), length=lag.length,
                               last_delivered_id=lag.last_delivered_id, lag=lag.lag,
                               pending=lag.pending, oldest_pending_ms=lag.oldest_pending_ms)
            for lag in lags or ())
        return attrs.evolve(description, request_id=request.request_id, members=members,
                            shards=shards, retention=retention_message(self.retention))

    def _set_retention(self, request: m.SetRetention) -> m.Response:
        """T3: the whole retention object is replaced; only a prefix with routing has one."""
        if self.routing is None:
            return request.unknown_stream()
        self.retention = retention_record(request.retention)
        return m.RetentionChanged(request_id=request.request_id, status=Status.OK,
                                  stream_prefix=self.prefix,
                                  retention=retention_message(self.retention))

    def _routing_response(self, request: m.GetRouting) -> m.Routing:
        if self.routing is None:
            return request.unknown_stream()
        return self._routing_message(request.request_id)

    def _routing_message(self, request_id: int | None) -> m.Routing:
        assert self.routing is not None
        return m.Routing(request_id=request_id, status=Status.OK, stream_prefix=self.prefix,
                         version=self.routing.version, shard_count=self.routing.shard_count,
                         hash=HASH_NAME, streams=self.routing.streams, store_id=self.store_id,
                         retention=retention_message(self.retention))

    # --- migration ---------------------------------------------------------------------

    def _reassign(self) -> None:
        shards = self.assignable_shards()
        for group in self.groups.values():
            group.set_shards(shards)

    def _retirement(self) -> RetireStreams | None:
        """Drained old streams nobody holds any more are deleted; a complete migration ends."""
        migration = self.migration
        if not self._retire_check_due or migration is None:
            return None
        self._retire_check_due = False
        held: set[str] = set()
        for group in self.groups.values():
            held.update(group.owners)
        # only what Redis already knows is drained goes: a failed write never resurrects a
        # deleted stream as undrained
        durable = self.persisted.migration
        durable_retiring = set(durable.retiring) if durable else set()
        durable_complete = (durable is not None and durable.state == MigrationState.COMPLETE
                            and durable.to_version == migration.to_version)
        free = tuple(s for s in migration.retiring if s not in held and s in durable_retiring)
        done = (migration.state == MigrationState.COMPLETE and durable_complete
                and len(free) == len(migration.retiring)
                and not any(s in held for s in migration.from_streams))
        if done:
            self.migration = None
            free += migration.from_streams
            self._events.append(PrefixEvent("migration.retired", {"version": migration.from_version}))
        elif free:
            self.migration = attrs.evolve(
                migration, retiring=tuple(s for s in migration.retiring if s not in free))
        if not free or self.keep_drained_streams:
            return None
        return RetireStreams(free, tuple(self.groups))

    def __repr__(self) -> str:
        return f"PrefixMachine({self.prefix!r}, groups={len(self.groups)})"
