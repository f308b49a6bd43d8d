"""Prefix actors: the trio shell around the pure group machines of one stream prefix.

One actor task per stream prefix owns that prefix's routing and all its groups
(the prefix is the unit of metadata: one Redis hash, one check-and-set). It
drains its mailbox in batches: apply every request to the pure machines,
persist once (H12: durable first), then answer and push. When the write fails
the machines roll back to the last persisted records and every answer that
would reveal new state becomes COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any, Protocol

import attrs
import trio

from rsc.actors.group import GroupMachine, GroupSettings
from rsc.actors.logs import log_event
from rsc.actors.store import (
    MetadataStore,
    StoreError,
    StoreFenced,
    StreamAdmin,
    group_field,
    member_field,
)
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.routing import HASH_NAME, stream_key

log = logging.getLogger("rsc.coordinator")

MAX_BATCH = 1024


class Outbox(Protocol):
    """Where an actor sends pushes for a session (see server.Session)."""

    def push(self, message: m.Message) -> None: ...


class ReplyOwner(Protocol):
    """The session a reply belongs to: told when one of its replies is ready."""

    def wake(self) -> None: ...


@attrs.define(eq=False, slots=True)
class Reply:
    """A response slot: the session writes responses in request order as they resolve."""

    owner: ReplyOwner
    message: m.Message | None = None
    is_push: bool = False

    def resolve(self, message: m.Message) -> None:
        self.message = message
        self.owner.wake()


@attrs.frozen
class Envelope:
    request: Any  # a protocol request, or Tick
    reply: Reply | None
    session: Outbox | None


@attrs.frozen
class Tick:
    now_ms: int


@attrs.frozen
class SummariesRequest:
    """listGroups asks each prefix actor for its groups, after the batch's checkpoint."""


class Collect:
    """A reply slot for a request from inside the coordinator: awaited, not sent."""

    def __init__(self) -> None:
        self.message: Any = None
        self.done = trio.Event()

    def resolve(self, message: Any) -> None:
        self.message = message
        self.done.set()


@attrs.frozen(kw_only=True)
class RoutingState:
    version: int
    shard_count: int
    streams: tuple[str, ...]

    def summary(self) -> m.RoutingSummary:
        return m.RoutingSummary(version=self.version, shard_count=self.shard_count)

    def description(self) -> m.RoutingDescription:
        return m.RoutingDescription(version=self.version, shard_count=self.shard_count,
                                    hash=HASH_NAME, streams=self.streams)

    def to_record(self) -> dict[str, Any]:
        return {"version": self.version, "shardCount": self.shard_count, "streams": list(self.streams)}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> RoutingState:
        return cls(version=record["version"], shard_count=record["shardCount"],
                   streams=tuple(record["streams"]))


DRAINING = "DRAINING"
COMPLETE = "COMPLETE"


@attrs.define(kw_only=True)
class MigrationState:
    """A resharding of the prefix from one routing version to the next (R1..R5)."""

    from_version: int
    to_version: int
    cutover: str
    from_streams: tuple[str, ...]
    drained: frozenset[str] = frozenset()
    state: str = DRAINING

    @property
    def remaining(self) -> tuple[str, ...]:
        return tuple(s for s in self.from_streams if s not in self.drained)

    def description(self) -> m.MigrationDescription:
        return m.MigrationDescription(
            state=self.state, from_version=self.from_version, to_version=self.to_version,
            cutover=self.cutover,
            drained_shards=tuple(s for s in self.from_streams if s in self.drained),
            remaining_shards=self.remaining)

    def to_record(self) -> dict[str, Any]:
        return {"state": self.state, "fromVersion": self.from_version, "toVersion": self.to_version,
                "cutover": self.cutover, "fromStreams": list(self.from_streams),
                "drained": sorted(self.drained)}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> MigrationState:
        return cls(from_version=record["fromVersion"], to_version=record["toVersion"],
                   cutover=record["cutover"], from_streams=tuple(record["fromStreams"]),
                   drained=frozenset(record["drained"]), state=record["state"])


def now_ms() -> int:
    return math.floor(trio.current_time() * 1000)


class PrefixActor:
    """Owns one stream prefix: its routing, its groups, their sessions and subscribers."""

    def __init__(self, prefix: str, store: MetadataStore, settings: GroupSettings,
                 *, push_enabled: bool = True, metrics: Any = None,
                 keep_drained_streams: bool = False) -> None:
        self.prefix = prefix
        self.store = store
        self.streams = StreamAdmin(store.client)
        self.keep_drained_streams = keep_drained_streams
        self.migration: MigrationState | None = None
        self.persisted_migration: MigrationState | None = None
        self._drain_check_due = False
        self.settings = settings
        self.push_enabled = push_enabled
        self.metrics = metrics
        self.routing: RoutingState | None = None
        self.groups: dict[str, GroupMachine] = {}
        # last state known to be in Redis, for rollback
        self.persisted_routing: RoutingState | None = None
        self.persisted_groups: dict[str, dict[str, Any]] = {}
        # where to push each member (H10), and the reverse, to forget a closed session fast
        self.sessions: dict[tuple[str, str], Outbox] = {}
        self.session_members: dict[Outbox, set[tuple[str, str]]] = {}
        self.subscribers: set[Outbox] = set()
        self.send_channel, self.receive_channel = trio.open_memory_channel[Envelope](4096)
        self.healthy = True

    # --- restore -------------------------------------------------------------------

    def restore(self, data: dict[str, Any], now: int) -> None:
        """Load persisted state after a coordinator restart (members get fresh leases)."""
        if data.get("routing"):
            self.routing = self.persisted_routing = RoutingState.from_record(data["routing"])
        if data.get("migration"):
            self.migration = MigrationState.from_record(data["migration"])
            self.persisted_migration = attrs.evolve(self.migration)
        for name, record in data["groups"].items():
            record = {**record, "shards": self.assignable_shards()}
            machine = GroupMachine.from_record(self.prefix, name, self.settings, record, now)
            self.groups[name] = machine
            self.persisted_groups[name] = record

    # --- the loop ------------------------------------------------------------------

    async def run(self) -> None:
        async with self.receive_channel:
            async for first in self.receive_channel:
                batch = [first]
                while len(batch) < MAX_BATCH:
                    try:
                        batch.append(self.receive_channel.receive_nowait())
                    except trio.WouldBlock:
                        break
                await self._handle_batch(batch)

    async def _handle_batch(self, batch: list[Envelope]) -> None:
        now = now_ms()
        immediate: list[tuple[Reply, m.Message]] = []
        deferred: list[tuple[Reply, Callable[[], m.Message]]] = []
        routing_before = self.routing
        streams_to_create: list[tuple[list[str], list[str]]] = []
        to_seal: list[str] = []
        for envelope in batch:
            request = envelope.request
            if isinstance(request, Tick):
                self._tick(request.now_ms)
            elif isinstance(request, m.Heartbeat):
                started = trio.current_time()
                group = self._group(request.consumer_group, streams_to_create)
                response = group.heartbeat(request, now, self._routing_summary())
                self._track_session((request.consumer_group, request.member_id),
                                    None if request.member_epoch == -1 else envelope.session)
                immediate.append((envelope.reply, response))
                if self.metrics is not None:
                    self.metrics.observe_heartbeat_seconds(trio.current_time() - started)
            elif isinstance(request, m.GetRouting):
                if request.subscribe and envelope.session is not None:
                    self.subscribers.add(envelope.session)
                deferred.append((envelope.reply, lambda r=request: self._routing_response(r)))
            elif isinstance(request, m.SetShardCount):
                immediate.append((envelope.reply,
                                  self._set_shard_count(request, streams_to_create, to_seal)))
            elif isinstance(request, m.SetMaxConcurrency):
                immediate.append((envelope.reply, self._set_max_concurrency(request)))
            elif isinstance(request, m.RemoveMember):
                immediate.append((envelope.reply, self._remove_member(request, now)))
            elif isinstance(request, m.DescribeGroup):
                deferred.append((envelope.reply, lambda r=request: self._describe(r)))
            elif isinstance(request, SummariesRequest):
                deferred.append((envelope.reply, self._summaries))

        if self._drain_check_due and self.migration is not None:
            self._drain_check_due = False
            await self._advance_migration()
        effects = {name: group.take_effects() for name, group in self.groups.items()}
        ok = await self._checkpoint(effects, streams_to_create, to_seal)
        if not ok:
            immediate = [(reply, _unavailable(response) if response.status in _REVEALING else response)
                         for reply, response in immediate]
        for reply, response in immediate:
            if reply is not None:
                reply.resolve(response)
        for reply, make in deferred:
            if reply is not None:
                reply.resolve(make())
        if ok:
            self._after_commit(effects, routing_before)
        if self.metrics is not None and self.migration is not None:
            self.metrics.set_migration_progress(self.prefix, len(self.migration.drained),
                                                len(self.migration.from_streams))

    # --- requests --------------------------------------------------------------------

    def _group(self, name: str, streams_to_create: list[tuple[list[str], list[str]]]) -> GroupMachine:
        """The group, registered on first sight (H13) with the prefix's shards."""
        group = self.groups.get(name)
        if group is None:
            group = GroupMachine(self.prefix, name, self.settings, self.assignable_shards())
            group.effects.group_dirty = True
            self.groups[name] = group
            live = self.live_streams()
            if live:
                streams_to_create.append((list(live), [name]))
        return group

    def live_streams(self) -> tuple[str, ...]:
        """Every stream of every live routing version (the old one until it is retired)."""
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
        if self.migration.cutover == "ordered" and remaining:
            return remaining
        return remaining + self.routing.streams

    def _routing_summary(self) -> m.RoutingSummary | None:
        return self.routing.summary() if self.routing else None

    def _routing_response(self, request: m.GetRouting) -> m.Routing:
        if self.routing is None:
            return m.Routing(request_id=request.request_id, status=Status.UNKNOWN_STREAM,
                             stream_prefix=self.prefix,
                             error=f"stream prefix {self.prefix!r} has no routing yet")
        return self._routing_message(request.request_id)

    def _routing_message(self, request_id: int | None) -> m.Routing:
        assert self.routing is not None
        return m.Routing(request_id=request_id, status=Status.OK, stream_prefix=self.prefix,
                         version=self.routing.version, shard_count=self.routing.shard_count,
                         hash=HASH_NAME, streams=self.routing.streams)

    def _set_shard_count(self, request: m.SetShardCount,
                         streams_to_create: list[tuple[list[str], list[str]]],
                         to_seal: list[str]) -> m.ShardCountChanged:
        self._group(request.consumer_group, streams_to_create)

        def answer(status: Status = Status.OK, error: str | None = None) -> m.ShardCountChanged:
            ok = status == Status.OK
            return m.ShardCountChanged(
                request_id=request.request_id, status=status, stream_prefix=self.prefix,
                consumer_group=request.consumer_group,
                routing=self.routing.description() if self.routing and ok else None,
                migration=self.migration.description() if self.migration and ok else None,
                error=error)

        if self.routing is not None and self.routing.shard_count == request.shard_count:
            return answer()  # R4: the same count changes nothing
        if self.migration is not None:
            return answer(Status.MIGRATION_IN_PROGRESS,
                          f"stream prefix {self.prefix!r} is still migrating from version "
                          f"{self.migration.from_version} to {self.migration.to_version}; "
                          "wait until it is COMPLETE")
        version = self.routing.version + 1 if self.routing else 1
        streams = tuple(stream_key(self.prefix, version, i) for i in range(request.shard_count))
        if self.routing is not None:  # R1: the next version; the old one is sealed and drains
            self.migration = MigrationState(
                from_version=self.routing.version, to_version=version, cutover=request.cutover,
                from_streams=self.routing.streams)
            to_seal.extend(self.routing.streams)
            self._drain_check_due = True
        self.routing = RoutingState(version=version, shard_count=request.shard_count, streams=streams)
        streams_to_create.append((list(streams), list(self.groups)))
        self._reassign()
        return answer()

    def _reassign(self) -> None:
        shards = self.assignable_shards()
        for group in self.groups.values():
            group.set_shards(shards)

    async def _advance_migration(self) -> None:
        """R2: drop drained old shards from the assignment; retire the old version when done."""
        migration = self.migration
        assert migration is not None
        groups = list(self.groups)
        try:
            if migration.state == DRAINING:
                drained = await trio.to_thread.run_sync(self.streams.drained, migration.remaining, groups)
                if drained:
                    migration.drained = migration.drained | drained
                    if not migration.remaining:
                        migration.state = COMPLETE
                        log_event(log, "migration.complete", prefix=self.prefix,
                                  version=migration.to_version)
                    self._reassign()
            elif not any(shard in group.owners for group in self.groups.values()
                         for shard in migration.from_streams):
                if not self.keep_drained_streams:
                    await trio.to_thread.run_sync(self.streams.retire, migration.from_streams, groups)
                log_event(log, "migration.retired", prefix=self.prefix, version=migration.from_version)
                self.migration = None
        except StoreError as exc:
            log.warning("migration of prefix %s waits: %s", self.prefix, exc)
        if self.metrics is not None and self.migration is not None:
            self.metrics.set_migration_progress(self.prefix, len(self.migration.drained),
                                                len(self.migration.from_streams))
        elif self.metrics is not None:
            self.metrics.migration_finished(self.prefix)

    def _set_max_concurrency(self, request: m.SetMaxConcurrency) -> m.MaxConcurrencyChanged:
        group = self.groups.get(request.consumer_group)
        if group is None:
            return m.MaxConcurrencyChanged(
                request_id=request.request_id, status=Status.UNKNOWN_GROUP,
                stream_prefix=self.prefix, consumer_group=request.consumer_group,
                error=f"group {request.consumer_group!r} of {self.prefix!r} was never seen")
        group.set_max_concurrency(request.max_concurrency)
        return m.MaxConcurrencyChanged(
            request_id=request.request_id, status=Status.OK, stream_prefix=self.prefix,
            consumer_group=request.consumer_group, max_concurrency=group.max_concurrency,
            group_epoch=group.group_epoch)

    def _remove_member(self, request: m.RemoveMember, now: int) -> m.MemberRemoved:
        group = self.groups.get(request.consumer_group)

        def answer(status: Status, error: str | None = None) -> m.MemberRemoved:
            return m.MemberRemoved(
                request_id=request.request_id, status=status, stream_prefix=self.prefix,
                consumer_group=request.consumer_group, member_id=request.member_id,
                group_epoch=group.group_epoch if group and status == Status.OK else None, error=error)

        if group is None:
            return answer(Status.UNKNOWN_GROUP,
                          f"group {request.consumer_group!r} of {self.prefix!r} was never seen")
        if not group.remove_member(request.member_id, now):
            return answer(Status.UNKNOWN_MEMBER_ID,
                          f"member {request.member_id!r} is not live in the group")
        return answer(Status.OK)

    def _describe(self, request: m.DescribeGroup) -> m.GroupDescription:
        group = self.groups.get(request.consumer_group)
        if group is None:
            return m.GroupDescription(
                request_id=request.request_id, status=Status.UNKNOWN_GROUP, stream_prefix=self.prefix,
                consumer_group=request.consumer_group,
                error=f"group {request.consumer_group!r} of {self.prefix!r} was never seen")
        description = group.describe(now_ms(), self._routing_summary(),
                                     self.migration.description() if self.migration else None)
        return attrs.evolve(description, request_id=request.request_id)

    def _summaries(self) -> Any:
        return tuple(self.groups[name].summary() for name in sorted(self.groups))

    def _tick(self, now: int) -> None:
        for group in self.groups.values():
            group.tick(now)
        if self.migration is not None:
            self._drain_check_due = True

    # --- durability ------------------------------------------------------------------

    async def _checkpoint(self, effects: dict[str, Any],
                          streams_to_create: list[tuple[list[str], list[str]]],
                          to_seal: list[str]) -> bool:
        fields: dict[str, Any] = {}
        if self.routing != self.persisted_routing:
            fields["routing"] = self.routing.to_record() if self.routing else None
        if self.migration != self.persisted_migration:
            fields["migration"] = self.migration.to_record() if self.migration else None
        changes = {name: self._group_changes(name, effect)
                   for name, effect in effects.items() if effect.dirty}
        for group_fields, _ in changes.values():
            fields.update(group_fields)
        owner_changes = [(shard, name, owner) for name, effect in effects.items()
                         for shard, owner in effect.owner_changes.items()]
        if not fields and not owner_changes and not streams_to_create:
            return True
        started = trio.current_time()
        try:
            await trio.to_thread.run_sync(self._write, fields, owner_changes, streams_to_create, to_seal)
        except StoreFenced:
            raise
        except StoreError as exc:
            if self.healthy:
                log_event(log, "store.unavailable", level=logging.WARNING, prefix=self.prefix,
                          error=str(exc))
            self.healthy = False
            self._rollback()
            return False
        if not self.healthy:
            log_event(log, "store.available", level=logging.WARNING, prefix=self.prefix)
        self.healthy = True
        if self.metrics is not None:
            self.metrics.observe_checkpoint_seconds(trio.current_time() - started)
        self.persisted_routing = self.routing
        self.persisted_migration = attrs.evolve(self.migration) if self.migration else None
        for _, apply in changes.values():
            apply()
        return True

    def _group_changes(self, name: str, effect: Any) -> tuple[dict[str, Any], Callable[[], None]]:
        """The hash fields a group's effects change, and how to fold them into the rollback copy."""
        group = self.groups[name]
        fields: dict[str, Any] = {}
        if effect.group_dirty:
            fields[group_field(name)] = group.group_record()
        members = {mid: {**group.member_record(mid), "target": group.member_target(mid)}
                   for mid in effect.members_dirty if mid in group.members}
        for mid, record in members.items():
            fields[member_field(name, mid)] = record
        for mid in effect.members_removed:
            fields[member_field(name, mid)] = None

        def apply() -> None:
            persisted = self.persisted_groups.setdefault(name, {"members": {}, "target": {}})
            if effect.group_dirty:
                persisted.update(group.group_record())
            for mid, record in members.items():
                persisted["target"][mid] = record["target"]
                persisted["members"][mid] = {k: v for k, v in record.items() if k != "target"}
            for mid in effect.members_removed:
                persisted["members"].pop(mid, None)
                persisted["target"].pop(mid, None)

        return fields, apply

    def _write(self, fields: dict[str, Any], owner_changes: list[tuple[str, str, str | None]],
               streams_to_create: list[tuple[list[str], list[str]]], to_seal: list[str]) -> None:
        # new streams exist before routing names them; the old version is sealed before
        # producers are told to move (R1)
        for streams, groups in streams_to_create:
            self.store.create_consumer_groups(streams, groups)
        if to_seal:
            self.streams.seal(to_seal)
        self.store.write(self.prefix, fields, owner_changes)

    def _rollback(self) -> None:
        now = now_ms()
        self.routing = self.persisted_routing
        self.migration = attrs.evolve(self.persisted_migration) if self.persisted_migration else None
        for name in list(self.groups):
            record = self.persisted_groups.get(name)
            if record is None:
                del self.groups[name]
            else:  # routing and migration are rolled back already: the shards follow them
                self.groups[name].restore({**record, "shards": self.assignable_shards()}, now,
                                          restart=False)

    def _after_commit(self, effects: dict[str, Any], routing_before: RoutingState | None) -> None:
        """Pushes (H10) and routing notifications, once the state they hint at is durable."""
        for name, effect in effects.items():
            group = self.groups[name]
            for event in effect.events:
                _log_event(self.prefix, name, event)
                if self.metrics is not None:
                    self.metrics.group_event(self.prefix, name, event)
            if self.metrics is not None:
                self.metrics.set_group_state(self.prefix, name, group)
            if not self.push_enabled:
                continue
            for member_id in effect.pushes:
                session = self.sessions.get((name, member_id))
                if session is not None:
                    session.push(m.AssignmentChanged(
                        stream_prefix=self.prefix, consumer_group=name, member_id=member_id,
                        group_epoch=group.group_epoch))
        if self.routing != routing_before and self.routing is not None:
            log_event(log, "routing.changed", prefix=self.prefix, version=self.routing.version,
                      shard_count=self.routing.shard_count)
            message = self._routing_message(None)
            for session in list(self.subscribers):
                session.push(message)

    def _track_session(self, key: tuple[str, str], session: Outbox | None) -> None:
        old = self.sessions.get(key)
        if old is session:
            return
        if old is not None:
            self.session_members[old].discard(key)
            del self.sessions[key]
        if session is not None:
            self.sessions[key] = session
            self.session_members.setdefault(session, set()).add(key)

    def forget_session(self, session: Outbox) -> None:
        self.subscribers.discard(session)
        for key in self.session_members.pop(session, ()):
            del self.sessions[key]


_REVEALING = frozenset({Status.OK, Status.REVOKE_PENDING, Status.SYNC_METADATA})


def _unavailable(response: Any) -> m.Message:
    """The same response type with COORDINATOR_NOT_AVAILABLE: nothing new may be revealed."""
    error = "the metadata store cannot be written right now; retry with backoff"
    if isinstance(response, m.HeartbeatResponse):
        return m.HeartbeatResponse(request_id=response.request_id,
                                   status=Status.COORDINATOR_NOT_AVAILABLE,
                                   member_id=response.member_id, error=error)
    fields = {f.name for f in attrs.fields(type(response))}
    keep = {name: getattr(response, name) for name in
            ("request_id", "stream_prefix", "consumer_group", "member_id") if name in fields}
    return type(response)(status=Status.COORDINATOR_NOT_AVAILABLE, error=error, **keep)


_EVENT_NAMES = {"epoch": "group.epoch", "joined": "member.joined", "rejoined": "member.rejoined",
                "left": "member.left", "expired": "member.expired", "removed": "member.removed",
                "revoke_timeout": "member.removed", "fenced": "member.fenced",
                "revoked": "member.revoked"}


def _log_event(prefix: str, group: str, event: Any) -> None:
    fields: dict[str, Any] = {"prefix": prefix, "group": group}
    if event.member_id:
        fields["member"] = event.member_id
    if event.kind == "revoke_timeout":
        fields["reason"] = "revoke_timeout"
    log_event(log, _EVENT_NAMES.get(event.kind, event.kind), **fields, **event.fields)
