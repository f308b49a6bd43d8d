"""The metadata record schema: the one module that knows the layout of a prefix's hash.

`rsc:meta:{<prefix>}` holds, all values JSON:

- `coordinatorEpoch`: the check-and-set guard (written by the store's script).
- `writeSequence`: the number of the coordinator's last write that landed; the
  script refuses an older one arriving late (D4). Not part of any record.
- `routing`: `{"version", "shardCount", "streams"}`.
- `retention`: `{"mode", "maxLength", "maxAgeMs"}` (absent: the default, `acked` without caps).
- `migration`: `{"state", "fromVersion", "toVersion", "cutover", "fromStreams",
  "drained", "retiring"}`.
- `group:<name>`: `{"groupEpoch", "assignmentEpoch", "maxConcurrency"}`, and from format 2
  `"emptySinceMs"` (B6: when the group last had no live member; absent while it has one).
- `member:<len(group)>:<group>:<memberId>`: `{"epoch", "previousEpoch",
  "capacity", "assigned", "revoking", "target"}` (names may contain ':'), and for
  a static member (S1) also `"instanceId"` and `"away"` (S2/S5); records without
  them are dynamic members.

The whole store carries one metadata format version (like Kafka's
`metadata.version`), kept by actors/redis_io/store.py in `rsc:format-version`: format 1 is
the layout above without `emptySinceMs`, format 2 adds it, and a store without the key is
in format 1. The coordinator reads
every format up to `LATEST_FORMAT_VERSION`, refuses to start on a newer one, and
writes the format in use until an operator raises it (`setFormatVersion`), so a
rollback to the release before works until then (`format_change` decides).

The pure cores describe what changed as typed records in a `Changes`;
`encode` turns it into hash fields, `replay` turns a hash back into a
`PrefixSnapshot`, and `PrefixSnapshot.apply` folds committed changes into the
copy the prefix machine rolls back to. Write, load and rollback share this
schema, so they cannot drift apart (Kafka's records and `replay`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import NotRequired, TypedDict

import attrs

from rsc.protocol.vocabulary import Cutover, MigrationState, RetentionMode

COORDINATOR_EPOCH_FIELD = "coordinatorEpoch"
WRITE_SEQUENCE_FIELD = "writeSequence"
ROUTING_FIELD = "routing"
MIGRATION_FIELD = "migration"
RETENTION_FIELD = "retention"
GROUP_FIELD = "group:"
MEMBER_FIELD = "member:"


FORMAT_VERSIONS: Mapping[int, str] = {
    1: "the prefix hashes, owner tokens and seal markers above (every release since 0.1.0)",
    2: "format 1, and when each empty group became empty (emptySinceMs, B6: a restart keeps "
       "its expiry clock)",
}
"""Every metadata format this code reads, with what it is; it writes the one in use."""
LATEST_FORMAT_VERSION = max(FORMAT_VERSIONS)
UNVERSIONED_FORMAT_VERSION = 1  # a store without a format version was written in format 1


# --- format versions ---------------------------------------------------------------


def stored_format_version(value: str | None) -> int:
    """The format a store is in, from its format version value (None: none written, format 1);
    ValueError naming the value when it is no format version."""
    if value is None:
        return UNVERSIONED_FORMAT_VERSION
    text = value.strip()
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"holds {value!r}, which is no format version (a whole number >= 1)")
    return int(text)


def load_refusal(stored: int, latest: int = LATEST_FORMAT_VERSION) -> str | None:
    """Why a coordinator that reads formats up to `latest` must not load a store in format
    `stored` (None: it may). A newer format may hold records it would misread or drop."""
    if stored <= latest:
        return None
    return (f"the store is in metadata format {stored}, and this coordinator reads "
            f"{_formats(latest)}: run the release that raised it, or a newer one")


def _formats(latest: int) -> str:
    return "format 1" if latest == 1 else f"formats 1 to {latest}"


@attrs.frozen
class FormatChange:
    """What `setFormatVersion` may do: `refusal` says why not (None: allowed); `changed` is
    False when the store is already in the requested format (nothing to write)."""

    refusal: str | None
    changed: bool


def format_change(current: int, requested: int, latest: int = LATEST_FORMAT_VERSION) -> FormatChange:
    """Raising the store's format from `current` to `requested` (`latest`: the newest this
    coordinator writes). A format is never lowered: records written in it may not fit an
    older one, and the release that needs the older one cannot read them."""
    if requested > latest:
        return FormatChange(f"format {requested} is unknown to this coordinator, which writes "
                            f"{_formats(latest)}: upgrade the coordinators first", False)
    if requested < current:
        return FormatChange(f"the store is in format {current}; a format version is never "
                            f"lowered (restore a backup taken before it was raised instead)", False)
    return FormatChange(None, requested != current)


# --- records ---------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class RoutingRecord:
    """A prefix's live routing version (R1)."""

    version: int
    shard_count: int
    streams: tuple[str, ...]


@attrs.frozen(kw_only=True)
class RetentionRecord:
    """A prefix's retention (T1..T3); new prefixes start with `acked` and no caps."""

    mode: RetentionMode = RetentionMode.ACKED
    max_length: int | None = None
    max_age_ms: int | None = None


DEFAULT_RETENTION = RetentionRecord()


@attrs.frozen(kw_only=True)
class MigrationRecord:
    """A resharding from one routing version to the next (R1..R4).

    `retiring` holds drained streams of older versions that some member may
    still hold; they are deleted once nobody does.
    """

    from_version: int
    to_version: int
    cutover: Cutover
    from_streams: tuple[str, ...]
    drained: frozenset[str] = frozenset()
    state: MigrationState = MigrationState.DRAINING
    retiring: tuple[str, ...] = ()

    @property
    def remaining(self) -> tuple[str, ...]:
        return tuple(s for s in self.from_streams if s not in self.drained)


@attrs.frozen(kw_only=True)
class GroupRecord:
    """A group's epochs and settings; its shards follow from the prefix's routing and migration."""

    group_epoch: int = 0
    assignment_epoch: int = 0
    max_concurrency: int | None = None
    empty_since_ms: int | None = None  # B6: no live member since (written from format 2)


@attrs.frozen(kw_only=True)
class MemberRecord:
    """One member's books and its target (liveness clocks are never persisted: H12)."""

    epoch: int
    previous_epoch: int
    capacity: int | None
    assigned: frozenset[str] = frozenset()
    revoking: frozenset[str] = frozenset()
    target: frozenset[str] = frozenset()
    instance_id: str | None = None  # S1: a static member's instanceId
    away: bool = False  # S2/S5: AWAY (its away clock restarts with the coordinator, like leases)


@attrs.frozen
class OwnerToken:
    """The owner key of a shard for a group: a memberId, or None to delete it."""

    shard: str
    group: str
    member_id: str | None


@attrs.define
class GroupSnapshot:
    """A group as persisted: its record and its members'."""

    group: GroupRecord = attrs.field(factory=GroupRecord)
    members: dict[str, MemberRecord] = attrs.field(factory=dict)


@attrs.define
class PrefixSnapshot:
    """Everything a prefix's hash holds, as records."""

    routing: RoutingRecord | None = None
    migration: MigrationRecord | None = None
    groups: dict[str, GroupSnapshot] = attrs.field(factory=dict)
    retention: RetentionRecord = DEFAULT_RETENTION

    def apply(self, changes: Changes) -> None:
        """Fold committed changes in (what `replay` of the written hash would give)."""
        if changes.routing_changed:
            self.routing = changes.routing
        if changes.migration_changed:
            self.migration = changes.migration
        if changes.retention is not None:
            self.retention = changes.retention
        for name, group in changes.groups.items():
            if group is None:
                self.groups.pop(name, None)
            else:
                self.groups.setdefault(name, GroupSnapshot()).group = group
        for (name, member_id), member in changes.members.items():
            snapshot = self.groups.get(name)
            if snapshot is None:
                continue
            if member is None:
                snapshot.members.pop(member_id, None)
            else:
                snapshot.members[member_id] = member


@attrs.define
class Changes:
    """The hash fields a checkpoint writes: a record sets a field, None deletes it."""

    routing: RoutingRecord | None = None
    routing_changed: bool = False
    migration: MigrationRecord | None = None
    migration_changed: bool = False
    groups: dict[str, GroupRecord | None] = attrs.field(factory=dict)
    members: dict[tuple[str, str], MemberRecord | None] = attrs.field(factory=dict)
    retention: RetentionRecord | None = None  # None: unchanged

    def set_routing(self, routing: RoutingRecord | None) -> None:
        self.routing, self.routing_changed = routing, True

    def set_migration(self, migration: MigrationRecord | None) -> None:
        self.migration, self.migration_changed = migration, True

    def __bool__(self) -> bool:
        return (self.routing_changed or self.migration_changed or bool(self.groups)
                or bool(self.members) or self.retention is not None)


def changes_of(snapshot: PrefixSnapshot) -> Changes:
    """The changes that write `snapshot` into an empty hash."""
    changes = Changes()
    changes.set_routing(snapshot.routing)
    changes.set_migration(snapshot.migration)
    if snapshot.retention != DEFAULT_RETENTION:
        changes.retention = snapshot.retention
    for name, group in snapshot.groups.items():
        changes.groups[name] = group.group
        for member_id, member in group.members.items():
            changes.members[(name, member_id)] = member
    return changes


# --- field names -------------------------------------------------------------------


def group_field(group: str) -> str:
    return GROUP_FIELD + group


def member_field(group: str, member_id: str) -> str:
    """`member:<len(group)>:<group>:<memberId>`: the length keeps ':' in names unambiguous."""
    return f"{MEMBER_FIELD}{len(group)}:{group}:{member_id}"


def parse_member_field(field: str) -> tuple[str, str]:
    length, _, rest = field[len(MEMBER_FIELD):].partition(":")
    size = int(length)
    return rest[:size], rest[size + 1:]


# --- values ------------------------------------------------------------------------
# The JSON objects of the hash fields, as this module writes them (and replays them: the
# coordinator reads only what a coordinator wrote).


class RoutingValue(TypedDict):
    version: int
    shardCount: int
    streams: list[str]


class MigrationValue(TypedDict):
    state: str
    fromVersion: int
    toVersion: int
    cutover: str
    fromStreams: list[str]
    drained: list[str]
    retiring: NotRequired[list[str]]  # absent in a store written before retirement was recorded


class RetentionValue(TypedDict):
    mode: str
    maxLength: int | None
    maxAgeMs: int | None


class GroupValue(TypedDict):
    groupEpoch: int
    assignmentEpoch: int
    maxConcurrency: int | None
    emptySinceMs: NotRequired[int]  # format 2 (B6), and only while the group is empty


class MemberValue(TypedDict):
    epoch: int
    previousEpoch: int
    capacity: int | None
    assigned: list[str]
    revoking: list[str]
    target: list[str]
    instanceId: NotRequired[str]  # a static member's only (S1)
    away: NotRequired[bool]



def routing_value(record: RoutingRecord) -> RoutingValue:
    return {"version": record.version, "shardCount": record.shard_count,
            "streams": list(record.streams)}


def migration_value(record: MigrationRecord) -> MigrationValue:
    return {"state": record.state.value, "fromVersion": record.from_version,
            "toVersion": record.to_version, "cutover": record.cutover.value,
            "fromStreams": list(record.from_streams), "drained": sorted(record.drained),
            "retiring": list(record.retiring)}


def retention_value(record: RetentionRecord) -> RetentionValue:
    return {"mode": record.mode.value, "maxLength": record.max_length,
            "maxAgeMs": record.max_age_ms}


EMPTY_SINCE_FORMAT_VERSION = 2  # the first format that stores `emptySinceMs` (B6)


def group_value(record: GroupRecord, format_version: int = LATEST_FORMAT_VERSION) -> GroupValue:
    """The group's JSON; `emptySinceMs` only in a store of format 2 or later (a format 1 store
    keeps that time in memory only, and a restart starts it again)."""
    value: GroupValue = {"groupEpoch": record.group_epoch,
                         "assignmentEpoch": record.assignment_epoch,
                         "maxConcurrency": record.max_concurrency}
    if record.empty_since_ms is not None and format_version >= EMPTY_SINCE_FORMAT_VERSION:
        value["emptySinceMs"] = record.empty_since_ms
    return value


def member_value(record: MemberRecord) -> MemberValue:
    value: MemberValue = {
        "epoch": record.epoch, "previousEpoch": record.previous_epoch,
        "capacity": record.capacity, "assigned": sorted(record.assigned),
        "revoking": sorted(record.revoking), "target": sorted(record.target)}
    if record.instance_id is not None:  # a dynamic member's record stays as it always was
        value["instanceId"] = record.instance_id
        value["away"] = record.away
    return value


def _routing(value: RoutingValue) -> RoutingRecord:
    return RoutingRecord(version=value["version"], shard_count=value["shardCount"],
                         streams=tuple(value["streams"]))


def _migration(value: MigrationValue) -> MigrationRecord:
    return MigrationRecord(
        from_version=value["fromVersion"], to_version=value["toVersion"],
        cutover=Cutover(value["cutover"]), from_streams=tuple(value["fromStreams"]),
        drained=frozenset(value["drained"]), state=MigrationState(value["state"]),
        retiring=tuple(value.get("retiring", ())))


def _retention(value: RetentionValue) -> RetentionRecord:
    return RetentionRecord(mode=RetentionMode(value["mode"]), max_length=value["maxLength"],
                           max_age_ms=value["maxAgeMs"])


def _group(value: GroupValue) -> GroupRecord:
    return GroupRecord(group_epoch=value["groupEpoch"], assignment_epoch=value["assignmentEpoch"],
                       max_concurrency=value["maxConcurrency"],
                       empty_since_ms=value.get("emptySinceMs"))


def _member(value: MemberValue) -> MemberRecord:
    return MemberRecord(epoch=value["epoch"], previous_epoch=value["previousEpoch"],
                        capacity=value["capacity"], assigned=frozenset(value["assigned"]),
                        revoking=frozenset(value["revoking"]), target=frozenset(value["target"]),
                        instance_id=value.get("instanceId"), away=bool(value.get("away", False)))


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


# --- write and replay --------------------------------------------------------------


def encode(changes: Changes, format_version: int = LATEST_FORMAT_VERSION) -> dict[str, str | None]:
    """The hash fields to set (JSON text) or delete (None), in the store's `format_version`."""
    fields: dict[str, str | None] = {}
    if changes.routing_changed:
        fields[ROUTING_FIELD] = _json(routing_value(changes.routing)) if changes.routing else None
    if changes.migration_changed:
        fields[MIGRATION_FIELD] = (_json(migration_value(changes.migration))
                                   if changes.migration else None)
    if changes.retention is not None:
        fields[RETENTION_FIELD] = _json(retention_value(changes.retention))
    for name, group in changes.groups.items():
        fields[group_field(name)] = (None if group is None
                                     else _json(group_value(group, format_version)))
    for (name, member_id), member in changes.members.items():
        fields[member_field(name, member_id)] = None if member is None else _json(member_value(member))
    return fields


def replay(fields: Mapping[str, str]) -> PrefixSnapshot:
    """Rebuild a prefix from its hash; member fields of a group without its field are ignored."""
    snapshot = PrefixSnapshot()
    if fields.get(ROUTING_FIELD):
        snapshot.routing = _routing(json.loads(fields[ROUTING_FIELD]))
    if fields.get(MIGRATION_FIELD):
        snapshot.migration = _migration(json.loads(fields[MIGRATION_FIELD]))
    if fields.get(RETENTION_FIELD):
        snapshot.retention = _retention(json.loads(fields[RETENTION_FIELD]))
    for field, value in fields.items():
        if field.startswith(GROUP_FIELD):
            snapshot.groups[field[len(GROUP_FIELD):]] = GroupSnapshot(_group(json.loads(value)))
    for field, value in fields.items():
        if field.startswith(MEMBER_FIELD):
            name, member_id = parse_member_field(field)
            group = snapshot.groups.get(name)
            if group is not None:
                group.members[member_id] = _member(json.loads(value))
    return snapshot
