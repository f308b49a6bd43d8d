"""A prefix's routing and resharding (R1..R5). Pure.

- R1: `setShardCount` creates the next version's streams (with a consumer
  group per group) before routing names them, and seals the old version
  before producers are told to move.
- R2: an old stream is drained when no group has undelivered or pending
  entries on it (a stream already gone counts as drained); a drained stream
  leaves the assignment. Old streams wait for a group to exist and drain them.
- R3: with cutover `ordered` the new shards are held back until every old one
  is drained; `parallel` assigns both at once.
- R4: the same count changes nothing; a migration blocks the next
  `setShardCount` only while it is DRAINING. Once it is COMPLETE the next one
  starts at once, and the drained streams of the complete one are retired
  when nobody holds them any more (only what Redis already knows is drained:
  a failed write never resurrects a deleted stream as undrained).
- G2: the drain measurement names the groups that hold a migration up.

A seal that landed with a checkpoint whose hash did not is undone with the
next checkpoint, so producers are not refused by a routing that never changed.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

import attrs

from rsc.actors.core.group import GroupMachine
from rsc.actors.core.prefix_io import (
    MIGRATION_COMPLETE,
    MIGRATION_RETIRED,
    RESTORED_FROM_CLIENTS,
    CreateConsumerGroups,
    DrainQuery,
    DrainReport,
    PrefixEvent,
    RetireStreams,
)
from rsc.actors.core.prefix_retention import retention_message
from rsc.actors.core.records import GroupSnapshot, MigrationRecord, RetentionRecord, RoutingRecord
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.routing import HASH_NAME, stream_key
from rsc.protocol.vocabulary import Cutover, MigrationState


def routing_summary(routing: RoutingRecord, store_id: str | None = None,
                    retention: RetentionRecord | None = None) -> m.RoutingSummary:
    return m.RoutingSummary(version=routing.version, shard_count=routing.shard_count,
                            store_id=store_id,
                            retention=retention_message(retention) if retention else None)


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


class Resharding:
    """The routing and migration of one prefix, and what a batch must create, seal and unseal."""

    def __init__(self, prefix: str, *, keep_drained_streams: bool = False) -> None:
        self.prefix = prefix
        self.keep_drained_streams = keep_drained_streams
        self.routing: RoutingRecord | None = None
        self.migration: MigrationRecord | None = None
        # G2: who held the migration up at the last drain measurement (not persisted)
        self.blocking: tuple[m.BlockingGroup, ...] = ()
        self.drain_check_due = False
        self.retire_check_due = False
        # what this batch writes before the hash (R1), and prefix events to log once durable
        self.create: list[CreateConsumerGroups] = []
        self.seal: list[str] = []
        self.unseal: set[str] = set()
        self.events: list[PrefixEvent] = []

    def restore(self, routing: RoutingRecord | None, migration: MigrationRecord | None) -> None:
        """Back to these records (a restart or a rollback): a migration checks its drains again."""
        self.routing = routing
        self.migration = migration
        if migration is not None:
            self.retire_check_due = True

    def tick(self) -> None:
        """R2: every tick measures drain and retires what nobody holds any more."""
        if self.migration is not None:
            self.drain_check_due = self.retire_check_due = True

    # --- views -----------------------------------------------------------------------

    def live_streams(self) -> tuple[str, ...]:
        """Every stream that may still hold undelivered entries: undrained old ones, current ones."""
        current = self.routing.streams if self.routing else ()
        old = self.migration.remaining if self.migration else ()
        return old + current

    def routing_versions(self) -> tuple[tuple[str, ...], ...]:
        """C2: the current routing's streams, then the previous version's while a migration
        from it lasts (drained ones too: they go only when the migration is retired)."""
        current = (self.routing.streams,) if self.routing else ()
        if self.migration is None:
            return current
        return current + (self.migration.from_streams,)

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

    def existing_streams(self) -> tuple[str, ...]:
        """Every stream of every version not yet retired."""
        current = self.routing.streams if self.routing else ()
        if self.migration is None:
            return current
        return self.migration.retiring + self.migration.from_streams + current

    def shard_versions(self) -> dict[str, int]:
        """The routing version of every live shard."""
        versions: dict[str, int] = {}
        if self.migration is not None:
            versions.update(dict.fromkeys(self.migration.remaining, self.migration.from_version))
        if self.routing is not None:
            versions.update(dict.fromkeys(self.routing.streams, self.routing.version))
        return versions

    # --- R1, R4: setShardCount ------------------------------------------------------

    def reshard(self, request: m.SetShardCount, groups: Collection[str]) -> m.ShardCountChanged:
        """R1, R4: the next routing version for `request.shard_count` shards (the caller
        reassigns the groups when the routing changed)."""
        routing, migration = self.routing, self.migration
        if routing is not None and routing.shard_count == request.shard_count:
            return self.shard_count_changed(request)  # R4: the same count changes nothing
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
            self.seal.extend(routing.streams)
            self.drain_check_due = True
        self.routing = RoutingRecord(version=version, shard_count=request.shard_count,
                                     streams=streams)
        self.create.append(CreateConsumerGroups(streams, tuple(groups)))
        return self.shard_count_changed(request)

    def adopt(self, known: m.KnownRouting, groups: Collection[str]) -> bool:
        """K8: the routing a client presented, on a store that lost it with the coordinator's
        memory: taken as it is (its version, its shard count, its stream names), its streams
        and consumer groups created at `0` (K4). Only while the prefix has no routing; returns
        whether it was taken (the caller reassigns the groups)."""
        if self.routing is not None or known.hash != HASH_NAME:
            return False
        streams = tuple(stream_key(self.prefix, known.version, i)
                        for i in range(known.shard_count))
        self.routing = RoutingRecord(version=known.version, shard_count=known.shard_count,
                                     streams=streams)
        self.create.append(CreateConsumerGroups(streams, tuple(groups)))
        self.events.append(PrefixEvent(RESTORED_FROM_CLIENTS, {
            "version": known.version, "shard_count": known.shard_count}))
        return True

    def shard_count_changed(self, request: m.SetShardCount) -> m.ShardCountChanged:
        return m.ShardCountChanged(
            request_id=request.request_id, status=Status.OK, stream_prefix=self.prefix,
            consumer_group=request.consumer_group,
            routing=routing_description(self.routing) if self.routing else None,
            migration=migration_description(self.migration) if self.migration else None)

    # --- R2, G2: drain ----------------------------------------------------------------

    def drain_query(self, groups: Collection[str]) -> DrainQuery | None:
        """The drain measurement (R2) to make before this batch's checkpoint, if due."""
        migration = self.migration
        if not self.drain_check_due or migration is None:
            return None
        self.drain_check_due = False
        if migration.state != MigrationState.DRAINING or not migration.remaining:
            return None
        if not groups:  # R2: kept until a group exists and drains them
            return None
        return DrainQuery(migration.remaining, tuple(groups))

    def drain_measured(self, report: DrainReport, groups: Iterable[str]) -> tuple[bool, bool]:
        """R2, G2: an old stream is drained when no group has undelivered or pending entries.

        Returns (the blocking groups changed, the assignable shards changed)."""
        migration = self.migration
        if migration is None:
            return False, False
        names = tuple(groups)
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
            for name in names:
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
        changed = blocking_groups != self.blocking
        self.blocking = blocking_groups
        return changed, self.drained(drained)

    def drained(self, shards: Iterable[str]) -> bool:
        """R2: these old shards are drained for every group; True when the assignment changes."""
        migration = self.migration
        if migration is None:
            return False
        newly = frozenset(shards) & frozenset(migration.remaining)
        if not newly:
            return False
        migration = attrs.evolve(migration, drained=migration.drained | newly)
        if not migration.remaining:
            migration = attrs.evolve(migration, state=MigrationState.COMPLETE)
            self.events.append(PrefixEvent(MIGRATION_COMPLETE, {"version": migration.to_version}))
        self.migration = migration
        return True

    # --- R4: retirement ---------------------------------------------------------------

    def retirement(self, groups: Mapping[str, GroupMachine], durable: MigrationRecord | None,
                   durable_groups: Mapping[str, GroupSnapshot]) -> RetireStreams | None:
        """Drained old streams no group holds any more are deleted; a complete migration
        ends. Only what Redis already knows (`durable`) is drained goes, and only what no
        member holds in memory nor in what Redis holds (`durable_groups`): the streams go
        before the hash is written, and a release whose write fails is rolled back."""
        migration = self.migration
        if not self.retire_check_due or migration is None:
            return None
        self.retire_check_due = False
        held: set[str] = set()
        for group in groups.values():
            held.update(group.owners)
        for snapshot in durable_groups.values():
            for member in snapshot.members.values():
                held.update(member.assigned)
                held.update(member.revoking)
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
            self.events.append(PrefixEvent(MIGRATION_RETIRED, {"version": migration.from_version}))
        elif free:
            self.migration = attrs.evolve(
                migration, retiring=tuple(s for s in migration.retiring if s not in free))
        if not free or self.keep_drained_streams:
            return None
        return RetireStreams(free, tuple(groups))

    # --- the batch's stream writes -----------------------------------------------------

    def take_unseal(self) -> tuple[str, ...]:
        """Streams sealed by a failed checkpoint that are still current: unsealed now."""
        if not self.unseal:  # rare (a failed seal); the set of every stream is not built per batch
            return ()
        current = set(self.routing.streams) if self.routing else set()
        unseal = tuple(sorted(s for s in self.unseal if s in current and s not in self.seal))
        self.unseal = set()
        return unseal

    def seal_failed(self, seal: Iterable[str], unseal: Iterable[str]) -> None:
        """The checkpoint failed: its seals may have landed; unseal what stays current."""
        self.unseal.update(seal)
        self.unseal.update(unseal)

    def take_events(self) -> tuple[PrefixEvent, ...]:
        events, self.events = tuple(self.events), []
        return events
