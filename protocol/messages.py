"""Every message of docs/protocol.md as a frozen attrs class.

Attribute names are snake_case; on the wire they are camelCase (see codec).
Each class knows its wire `type` through the `TYPE` class variable.
Validators enforce the ranges of the protocol, so a decoded message is valid.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

import attrs

from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import (
    LEAVE_EPOCH,
    TEMPORARY_LEAVE_EPOCH,
    Cutover,
    GroupState,
    MemberState,
    MigrationState,
    RetentionMode,
    RevokeState,
)

__all__ = [
    "MAX_NAME_LENGTH",
    "MAX_SHARD_COUNT",
    "AdminRequest",
    "AdminResponse",
    "Assignment",
    "AssignmentChanged",
    "BlockingGroup",
    "DeleteGroup",
    "DescribeGroup",
    "ErrorResponse",
    "GetRouting",
    "GroupRequest",
    "GroupDeleted",
    "GroupDescription",
    "GroupSummary",
    "Groups",
    "Heartbeat",
    "HeartbeatResponse",
    "KnownRouting",
    "ListGroups",
    "MaxConcurrencyChanged",
    "MemberDescription",
    "MemberRemoved",
    "MemberRequest",
    "Message",
    "MigrationDescription",
    "OffsetsReset",
    "RemoveMember",
    "ResetOffsets",
    "ResetTo",
    "Retention",
    "RetentionChanged",
    "Request",
    "Response",
    "RevokingShard",
    "Routing",
    "RoutingDescription",
    "RoutingSummary",
    "SetMaxConcurrency",
    "SetRetention",
    "SetShardCount",
    "ShardCountChanged",
    "ShardDescription",
    "ShardOffset",
    "camel",
    "check_name",
    "FieldValueError",
    "FormatVersion",
    "FormatVersionChanged",
    "GetFormatVersion",
    "SetFormatVersion",
    "DeadLetterEntry",
    "DeadLetters",
    "DeadLettersRedriven",
    "ListDeadLetters",
    "RedriveDeadLetters",
    "RedrivenEntry",
    "SkippedDeadLetter",
    "Blob",
    "FieldBlob",
    "StreamEntry",
    "ReadShard",
    "ShardEntries",
    "FindKey",
    "KeyEntries",
    "ListPending",
    "PendingEntry",
    "PendingEntries",
]

MAX_NAME_LENGTH = 200
MAX_SHARD_COUNT = 4096
OWNED_ON_TEMPORARY_LEAVE = ("field 'ownedShards' must be empty on a temporary leave "
                            "(memberEpoch -2): stop reading and drain first")


def camel(name: str) -> str:
    """snake_case attribute name -> camelCase wire name."""
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


class FieldValueError(ValueError):
    """A field holds a value the protocol does not allow; the text names the wire field."""


# Unicode category Cc is exactly these code points (C0, DEL and C1 controls)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def check_name(field: str, value: str, *, allow_braces: bool = False) -> None:
    """Raise FieldValueError unless `value` is a valid prefix, group or member name.

    `field` is the wire name (a snake_case attribute name is camelCased for the message).
    """
    problem = None
    if not value:
        problem = "must not be empty"
    elif len(value) > MAX_NAME_LENGTH:
        problem = f"is longer than {MAX_NAME_LENGTH} characters"
    elif _CONTROL.search(value):
        problem = "contains a control character"
    elif not allow_braces and ("{" in value or "}" in value):
        problem = "contains '{' or '}' (reserved for Redis Cluster hash tags)"
    if problem:
        raise FieldValueError(f"field '{camel(field)}' {problem}")


def _name(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    check_name(attribute.name, value)


def _optional_name(instance: object, attribute: attrs.Attribute[str | None], value: str | None) -> None:
    if value is not None:
        check_name(attribute.name, value)


MAX_STREAM_NAME_LENGTH = 1000  # a dead-letter stream: `{<prefix>}:dead:<group>` fits


def _optional_stream_name(instance: object, attribute: attrs.Attribute[str | None],
                          value: str | None) -> None:
    """An optional Redis stream key (P2: a dead-letter stream): non-empty, at most 1000
    characters, no control character."""
    if value is None:
        return
    if not value or len(value) > MAX_STREAM_NAME_LENGTH or _CONTROL.search(value):
        raise FieldValueError(f"field '{camel(attribute.name)}' must be a stream key of 1 to "
                              f"{MAX_STREAM_NAME_LENGTH} characters without control characters")


def _member_and_instance_id(instance: Heartbeat, attribute: attrs.Attribute[str], value: str) -> None:
    """A heartbeat's memberId, then its optional instanceId (S1: same rules): one validator,
    so a heartbeat without an instanceId pays no extra call (attrs runs validators once every
    field is set)."""
    check_name(attribute.name, value, allow_braces=True)
    if instance.instance_id is not None:
        check_name("instance_id", instance.instance_id, allow_braces=True)


def _optional_member_id(instance: object, attribute: attrs.Attribute[str | None],
                        value: str | None) -> None:
    """An optional memberId or instanceId (S1: same rules as a memberId)."""
    if value is not None:
        check_name(attribute.name, value, allow_braces=True)


_Bounded = TypeVar("_Bounded", int, int | None)


def _at_least(low: int) -> Callable[[object, attrs.Attribute[_Bounded], _Bounded], None]:
    def check(instance: object, attribute: attrs.Attribute[_Bounded], value: _Bounded) -> None:
        if value is not None and value < low:
            raise FieldValueError(f"field '{camel(attribute.name)}' must be >= {low}, got {value}")

    return check


def _within(low: int, high: int) -> Callable[[object, attrs.Attribute[int], int], None]:
    def check(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
        if not low <= value <= high:
            raise FieldValueError(f"field '{camel(attribute.name)}' must be in {low}..{high}, "
                                  f"got {value}")

    return check


def _shard_count(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not 1 <= value <= MAX_SHARD_COUNT:
        raise FieldValueError(
            f"field '{camel(attribute.name)}' must be in 1..{MAX_SHARD_COUNT}, got {value}"
        )


class Message:
    """Base of every wire message; `TYPE` is the wire `type` tag.

    Every concrete message is an attrs class (the codec structures them as such): the
    annotation lets `attrs.fields` and `attrs.asdict` take any message.
    """

    TYPE: ClassVar[str]
    if TYPE_CHECKING:  # for the checker only: get_type_hints cannot subscript attrs.Attribute
        __attrs_attrs__: ClassVar[tuple[attrs.Attribute[object], ...]]


class Response(Message):
    """A message that answers a request (or a push of the same type): it has a `status`."""

    status: Status


class Request(Message):
    """A request: its replies are built from it, so `requestId` and the names are copied once."""

    request_id: int

    def error(self, status: Status, error: str) -> Response:
        """The response type of this request with an error status (docs/protocol.md, Transport)."""
        raise NotImplementedError


class GroupRequest(Request):
    """A request that names a group `(streamPrefix, consumerGroup)`."""

    stream_prefix: str
    consumer_group: str

    def unknown_group(self) -> Response:
        """UNKNOWN_GROUP: the group was never seen (or was deleted)."""
        return self.error(Status.UNKNOWN_GROUP,
                          f"group {self.consumer_group!r} of {self.stream_prefix!r} was never seen")


# --- member endpoint ---------------------------------------------------------


@attrs.frozen(kw_only=True)
class RevokingShard:
    shard: str
    state: RevokeState


@attrs.frozen(kw_only=True)
class KnownRouting:
    """K8: the routing a client holds for its prefix, carried into joins and getRouting so
    that a coordinator whose store and memory were both lost can adopt it."""

    version: int = attrs.field(validator=_at_least(1))
    shard_count: int = attrs.field(validator=_at_least(1))
    hash: str = attrs.field(validator=_name)


@attrs.frozen(kw_only=True)
class Heartbeat(GroupRequest):
    TYPE: ClassVar[str] = "heartbeat"
    request_id: int
    stream_prefix: str = attrs.field(validator=_name)
    consumer_group: str = attrs.field(validator=_name)
    member_id: str = attrs.field(validator=_member_and_instance_id)
    # -1 leaves (H9), -2 leaves for a while (S2); below that is INVALID_REQUEST
    member_epoch: int = attrs.field(validator=_at_least(TEMPORARY_LEAVE_EPOCH))
    capacity: int | None = attrs.field(default=None, validator=_at_least(1))
    owned_shards: tuple[str, ...] | None = None
    revoking_shards: tuple[RevokingShard, ...] = ()
    instance_id: str | None = None  # S1 (checked by memberId's validator, see there)
    # P2: the member's dead-letter stream (a RetryPolicy's), absent = unchanged
    dead_letter_stream: str | None = attrs.field(default=None, validator=_optional_stream_name)
    known_store_id: str | None = None  # K8: sent on a join (epoch 0) by a member that knows it
    known_routing: KnownRouting | None = None  # K8: the routing the member holds, on a join

    def error(self, status: Status, error: str) -> HeartbeatResponse:
        return HeartbeatResponse(request_id=self.request_id, status=status,
                                 member_id=self.member_id, error=error)

    def unknown_group(self) -> HeartbeatResponse:
        """A heartbeat other than a join for a group that does not exist (H9, H13, S2): a
        leave is OK at epoch -1 (a retried leave), a temporary leave OK at -2 (a naming
        shards is INVALID_REQUEST), anything else UNKNOWN_MEMBER_ID."""
        if self.member_epoch == LEAVE_EPOCH:
            return HeartbeatResponse(request_id=self.request_id, status=Status.OK,
                                     member_id=self.member_id, member_epoch=LEAVE_EPOCH)
        if self.member_epoch == TEMPORARY_LEAVE_EPOCH:
            if self.owned_shards:
                return self.error(Status.INVALID_REQUEST, OWNED_ON_TEMPORARY_LEAVE)
            return HeartbeatResponse(request_id=self.request_id, status=Status.OK,
                                     member_id=self.member_id,
                                     member_epoch=TEMPORARY_LEAVE_EPOCH)
        return self.error(Status.UNKNOWN_MEMBER_ID,
                          f"member {self.member_id!r} is not live in group {self.consumer_group!r} "
                          f"of {self.stream_prefix!r}; rejoin with epoch 0")


@attrs.frozen(kw_only=True)
class Retention:
    """A prefix's retention (T1..T3): what may remove entries from its shards."""

    mode: RetentionMode = RetentionMode.ACKED
    max_length: int | None = attrs.field(default=None, validator=_at_least(1))
    max_age_ms: int | None = attrs.field(default=None, validator=_at_least(1))


@attrs.frozen(kw_only=True)
class RoutingSummary:
    version: int
    shard_count: int
    store_id: str | None = None  # this Redis's rsc:store-id
    retention: Retention | None = None


@attrs.frozen(kw_only=True)
class Assignment:
    assigned_shards: tuple[str, ...] = ()
    pending_shards: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class HeartbeatResponse(Response):
    TYPE: ClassVar[str] = "heartbeatResponse"
    request_id: int | None
    status: Status
    member_id: str
    member_epoch: int | None = None
    group_epoch: int | None = None
    assignment_epoch: int | None = None
    heartbeat_interval_ms: int | None = None
    lease_ttl_ms: int | None = None
    max_concurrency: int | None = None
    routing: RoutingSummary | None = None
    assignment: Assignment | None = None
    error: str | None = None


@attrs.frozen(kw_only=True)
class AssignmentChanged(Message):
    """Push (H10): a hint that the member's next heartbeat answer differs."""

    TYPE: ClassVar[str] = "assignmentChanged"
    stream_prefix: str
    consumer_group: str
    member_id: str
    group_epoch: int


@attrs.frozen(kw_only=True)
class GetRouting(Request):
    TYPE: ClassVar[str] = "getRouting"
    request_id: int
    stream_prefix: str = attrs.field(validator=_name)
    subscribe: bool = False
    known_store_id: str | None = None  # K8: the storeId the client learnt before
    known_routing: KnownRouting | None = None  # K8: the routing the client holds

    def error(self, status: Status, error: str) -> Routing:
        return Routing(request_id=self.request_id, status=status, stream_prefix=self.stream_prefix,
                       error=error)

    def unknown_stream(self) -> Routing:
        """UNKNOWN_STREAM: the prefix has no routing yet."""
        return self.error(Status.UNKNOWN_STREAM,
                          f"stream prefix {self.stream_prefix!r} has no routing yet")


@attrs.frozen(kw_only=True)
class Routing(Response):
    """Answer to getRouting, and (without requestId) the push on a routing change."""

    TYPE: ClassVar[str] = "routing"
    request_id: int | None = None  # a push carries none (docs/protocol.md Transport)
    status: Status
    stream_prefix: str
    version: int | None = None
    shard_count: int | None = None
    hash: str | None = None
    streams: tuple[str, ...] | None = None
    store_id: str | None = None
    retention: Retention | None = None
    error: str | None = None


# --- admin endpoint ------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ListGroups(Request):
    TYPE: ClassVar[str] = "listGroups"
    request_id: int

    def error(self, status: Status, error: str) -> Groups:
        return Groups(request_id=self.request_id, status=status, error=error)


@attrs.frozen(kw_only=True)
class DescribeGroup(GroupRequest):
    TYPE: ClassVar[str] = "describeGroup"
    request_id: int
    stream_prefix: str = attrs.field(validator=_name)
    consumer_group: str = attrs.field(validator=_name)
    watch: bool = False  # keep pushing every change of the description

    def error(self, status: Status, error: str) -> GroupDescription:
        return GroupDescription(request_id=self.request_id, status=status,
                                stream_prefix=self.stream_prefix,
                                consumer_group=self.consumer_group, error=error)


def _group_epoch_needs_group(instance: SetShardCount, attribute: attrs.Attribute[int | None],
                             value: int | None) -> None:
    """C1: setShardCount checks a group's epoch only when it names the group."""
    _at_least(0)(instance, attribute, value)
    if value is not None and instance.consumer_group is None:
        raise FieldValueError("field 'ifGroupEpoch' needs field 'consumerGroup'")


@attrs.frozen(kw_only=True)
class SetShardCount(Request):
    """Reshard a prefix; the group is optional (G1: on a prefix with routing it must exist)."""

    TYPE: ClassVar[str] = "setShardCount"
    request_id: int
    stream_prefix: str = attrs.field(validator=_name)
    shard_count: int = attrs.field(validator=_shard_count)
    consumer_group: str | None = attrs.field(default=None, validator=_optional_name)
    cutover: Cutover = Cutover.PARALLEL
    # C1: answered STALE_CONFIRMATION, changing nothing, unless the group's epoch and the
    # routing version (0: no routing) are these when the prefix takes it (absent: not checked)
    if_group_epoch: int | None = attrs.field(default=None, validator=_group_epoch_needs_group)
    if_routing_version: int | None = attrs.field(default=None, validator=_at_least(0))

    def unknown_group(self) -> ShardCountChanged:
        return self.error(Status.UNKNOWN_GROUP,
                          f"group {self.consumer_group!r} of {self.stream_prefix!r} was never seen")

    def error(self, status: Status, error: str) -> ShardCountChanged:
        return ShardCountChanged(request_id=self.request_id, status=status,
                                 stream_prefix=self.stream_prefix,
                                 consumer_group=self.consumer_group, error=error)


@attrs.frozen(kw_only=True)
class SetMaxConcurrency(GroupRequest):
    TYPE: ClassVar[str] = "setMaxConcurrency"
    request_id: int
    stream_prefix: str = attrs.field(validator=_name)
    consumer_group: str = attrs.field(validator=_name)
    max_concurrency: int | None = attrs.field(validator=_at_least(1))
    # C1: answered STALE_CONFIRMATION, changing nothing, unless the group's epoch and the
    # routing version (0: no routing) are these when the prefix takes it (absent: not checked)
    if_group_epoch: int | None = attrs.field(default=None, validator=_at_least(0))
    if_routing_version: int | None = attrs.field(default=None, validator=_at_least(0))

    def error(self, status: Status, error: str) -> MaxConcurrencyChanged:
        return MaxConcurrencyChanged(request_id=self.request_id, status=status,
                                     stream_prefix=self.stream_prefix,
                                     consumer_group=self.consumer_group, error=error)


def _one_member(instance: RemoveMember, attribute: attrs.Attribute[str | None], value: str | None) -> None:
    """S5: removeMember names a memberId or an instanceId, exactly one of them."""
    _optional_member_id(instance, attribute, value)
    if (instance.member_id is None) == (value is None):
        raise FieldValueError("field 'memberId' and field 'instanceId' are both set; name exactly "
                              "one" if value is not None else
                              "field 'memberId' or field 'instanceId' is missing (removeMember "
                              "names exactly one)")


@attrs.frozen(kw_only=True)
class RemoveMember(GroupRequest):
    TYPE: ClassVar[str] = "removeMember"
    request_id: int
    stream_prefix: str = attrs.field(validator=_name)
    consumer_group: str = attrs.field(validator=_name)
    member_id: str | None = attrs.field(default=None, validator=_optional_member_id)
    instance_id: str | None = attrs.field(default=None, validator=_one_member)  # S5
    # C1: answered STALE_CONFIRMATION, changing nothing, unless the group's epoch and the
    # routing version (0: no routing) are these when the prefix takes it (absent: not checked)
    if_group_epoch: int | None = attrs.field(default=None, validator=_at_least(0))
    if_routing_version: int | None = attrs.field(default=None, validator=_at_least(0))

    def error(self, status: Status, error: str) -> MemberRemoved:
        return MemberRemoved(request_id=self.request_id, status=status,
                             stream_prefix=self.stream_prefix, consumer_group=self.consumer_group,
                             member_id=self.member_id, error=error)


@attrs.frozen(kw_only=True)
class DeleteGroup(GroupRequest):
    """G1: remove an empty group's metadata and its Redis consumer groups."""

    TYPE: ClassVar[str] = "deleteGroup"
    request_id: int
    stream_prefix: str = attrs.field(validator=_name)
    consumer_group: str = attrs.field(validator=_name)
    # C1: answered STALE_CONFIRMATION, changing nothing, unless the group's epoch and the
    # routing version (0: no routing) are these when the prefix takes it (absent: not checked)
    if_group_epoch: int | None = attrs.field(default=None, validator=_at_least(0))
    if_routing_version: int | None = attrs.field(default=None, validator=_at_least(0))

    def error(self, status: Status, error: str) -> GroupDeleted:
        return GroupDeleted(request_id=self.request_id, status=status,
                            stream_prefix=self.stream_prefix, consumer_group=self.consumer_group,
                            error=error)


ResetTo = Literal["earliest", "latest", "timestamp"]
"""Where `resetOffsets` moves a group (G3)."""


def _timestamp_ms(instance: ResetOffsets, attribute: attrs.Attribute[int | None],
                  value: int | None) -> None:
    if value is not None and value < 0:
        raise FieldValueError(f"field 'timestampMs' must be >= 0, got {value}")
    if instance.to == "timestamp" and value is None:
        raise FieldValueError("field 'timestampMs' is missing (required when 'to' is 'timestamp')")
    if instance.to != "timestamp" and value is not None:
        raise FieldValueError(f"field 'timestampMs' is only allowed when 'to' is 'timestamp', "
                              f"not {instance.to!r}")


@attrs.frozen(kw_only=True)
class ResetOffsets(GroupRequest):
    """G3: move an empty group's last-delivered id on every live shard, dropping its pending."""

    TYPE: ClassVar[str] = "resetOffsets"
    request_id: int
    stream_prefix: str = attrs.field(validator=_name)
    consumer_group: str = attrs.field(validator=_name)
    to: ResetTo
    timestamp_ms: int | None = attrs.field(default=None, validator=_timestamp_ms)
    dry_run: bool = False  # C1: answer the ids it would set, move nothing
    # C1: answered STALE_CONFIRMATION, changing nothing, unless the group's epoch and the
    # routing version (0: no routing) are these when the prefix takes it (absent: not checked)
    if_group_epoch: int | None = attrs.field(default=None, validator=_at_least(0))
    if_routing_version: int | None = attrs.field(default=None, validator=_at_least(0))

    def error(self, status: Status, error: str) -> OffsetsReset:
        return OffsetsReset(request_id=self.request_id, status=status,
                            stream_prefix=self.stream_prefix, consumer_group=self.consumer_group,
                            error=error)


@attrs.frozen(kw_only=True)
class GroupSummary:
    stream_prefix: str
    consumer_group: str
    group_epoch: int
    members: int
    shards: int
    state: GroupState
    lag: int | None = None  # summed over the group's shards; null if any shard's is
    pending: int = 0
    expires_at_ms: int | None = None  # B6: when an empty group expires (unix ms)


@attrs.frozen(kw_only=True)
class Groups(Response):
    TYPE: ClassVar[str] = "groups"
    request_id: int | None
    status: Status
    groups: tuple[GroupSummary, ...] = ()
    error: str | None = None


@attrs.frozen(kw_only=True)
class BlockingGroup:
    """G2: a group that still has undelivered (null: Redis cannot tell) or pending old entries."""

    consumer_group: str
    undelivered: int | None
    pending: int


@attrs.frozen(kw_only=True)
class MigrationDescription:
    state: MigrationState
    from_version: int
    to_version: int
    cutover: Cutover
    drained_shards: tuple[str, ...] = ()
    remaining_shards: tuple[str, ...] = ()
    blocking_groups: tuple[BlockingGroup, ...] = ()


@attrs.frozen(kw_only=True)
class ShardDescription:
    """One shard of a live version as one group sees it (from XINFO GROUPS and XPENDING)."""

    shard: str
    version: int
    owner: str | None
    length: int
    last_delivered_id: str | None
    lag: int | None
    pending: int
    oldest_pending_ms: int | None
    damage: str | None = None  # B7: maxId, falseSeal or missingSeal, as last checked
    # P1: the highest delivery count among the shard's oldest 100 pending entries (None: none)
    max_delivery_count: int | None = None
    # C4: ages on the Redis node's clock of the oldest undelivered and oldest pending entries
    oldest_undelivered_age_ms: int | None = None
    oldest_pending_entry_age_ms: int | None = None


@attrs.frozen(kw_only=True)
class MemberDescription:
    member_id: str
    member_epoch: int
    state: MemberState
    capacity: int | None
    last_heartbeat_ms_ago: int | None
    assigned_shards: tuple[str, ...] = ()
    pending_shards: tuple[str, ...] = ()
    revoking_shards: tuple[str, ...] = ()
    target_shards: tuple[str, ...] = ()
    overdue: bool = False  # last accepted heartbeat older than interval x 1.5
    instance_id: str | None = None  # S6: null for a dynamic member
    away_ms: int | None = None  # S6: time since its last accepted heartbeat, only when AWAY
    dead_letter_stream: str | None = None  # P2: as the member's heartbeats report it


@attrs.frozen(kw_only=True)
class GroupDescription(Response):
    TYPE: ClassVar[str] = "groupDescription"
    request_id: int | None
    status: Status
    stream_prefix: str
    consumer_group: str
    state: GroupState | None = None
    group_epoch: int | None = None
    assignment_epoch: int | None = None
    max_concurrency: int | None = None
    routing: RoutingSummary | None = None
    migration: MigrationDescription | None = None
    members: tuple[MemberDescription, ...] = ()
    target_assignment: dict[str, tuple[str, ...]] = attrs.field(factory=dict)
    current_assignment: dict[str, tuple[str, ...]] = attrs.field(factory=dict)
    shards: tuple[ShardDescription, ...] = ()
    retention: Retention | None = None
    store_went_back_at_ms: int | None = None  # K3: when the store last went back (unix ms)
    expires_at_ms: int | None = None  # B6: when an empty group expires (unix ms); null otherwise
    oldest_undelivered_age_ms: int | None = None  # C4: the largest over the shards
    oldest_pending_entry_age_ms: int | None = None  # C4: the largest over the shards
    error: str | None = None


@attrs.frozen(kw_only=True)
class RoutingDescription:
    version: int
    shard_count: int
    hash: str
    streams: tuple[str, ...]


@attrs.frozen(kw_only=True)
class ShardCountChanged(Response):
    TYPE: ClassVar[str] = "shardCountChanged"
    request_id: int | None
    status: Status
    stream_prefix: str
    consumer_group: str | None
    routing: RoutingDescription | None = None
    migration: MigrationDescription | None = None
    error: str | None = None


@attrs.frozen(kw_only=True)
class MaxConcurrencyChanged(Response):
    TYPE: ClassVar[str] = "maxConcurrencyChanged"
    request_id: int | None
    status: Status
    stream_prefix: str
    consumer_group: str
    max_concurrency: int | None = None
    group_epoch: int | None = None
    error: str | None = None


@attrs.frozen(kw_only=True)
class MemberRemoved(Response):
    TYPE: ClassVar[str] = "memberRemoved"
    request_id: int | None
    status: Status
    stream_prefix: str
    consumer_group: str
    member_id: str | None  # the removed member; null on an error naming only an instanceId
    group_epoch: int | None = None
    error: str | None = None


@attrs.frozen(kw_only=True)
class GroupDeleted(Response):
    TYPE: ClassVar[str] = "groupDeleted"
    request_id: int | None
    status: Status
    stream_prefix: str
    consumer_group: str
    error: str | None = None


@attrs.frozen(kw_only=True)
class ShardOffset:
    shard: str
    last_delivered_id: str


@attrs.frozen(kw_only=True)
class OffsetsReset(Response):
    TYPE: ClassVar[str] = "offsetsReset"
    request_id: int | None
    status: Status
    stream_prefix: str
    consumer_group: str
    shards: tuple[ShardOffset, ...] = ()
    dry_run: bool = False  # C1: what a reset would set; nothing moved
    error: str | None = None


def _prefix_retention_only(instance: SetRetention, attribute: attrs.Attribute[int | None],
                           value: int | None) -> None:
    """C1: the routing version is checked with the prefix's own retention, not its dead
    letters' (P2)."""
    _at_least(0)(instance, attribute, value)
    if value is not None and instance.dead_letters_of is not None:
        raise FieldValueError("field 'ifRoutingVersion' is not taken with field 'deadLettersOf'")


@attrs.frozen(kw_only=True)
class SetRetention(Request):
    """T1..T3: replace the prefix's whole retention."""

    TYPE: ClassVar[str] = "setRetention"
    request_id: int
    stream_prefix: str = attrs.field(validator=_name)
    retention: Retention
    # P2: set the retention of this group's dead letters instead (mode `none` and its caps)
    dead_letters_of: str | None = attrs.field(default=None, validator=_optional_name)
    # C1: answered STALE_CONFIRMATION, changing nothing, unless the routing version (0: no
    # routing) is this when the prefix takes it (absent: not checked); not with deadLettersOf
    if_routing_version: int | None = attrs.field(default=None, validator=_prefix_retention_only)

    def error(self, status: Status, error: str) -> RetentionChanged:
        return RetentionChanged(request_id=self.request_id, status=status,
                                stream_prefix=self.stream_prefix,
                                dead_letters_of=self.dead_letters_of, error=error)

    def unknown_stream(self) -> RetentionChanged:
        """UNKNOWN_STREAM: the prefix has no routing yet."""
        return self.error(Status.UNKNOWN_STREAM,
                          f"stream prefix {self.stream_prefix!r} has no routing yet")


@attrs.frozen(kw_only=True)
class RetentionChanged(Response):
    TYPE: ClassVar[str] = "retentionChanged"
    request_id: int | None
    status: Status
    stream_prefix: str
    retention: Retention | None = None
    dead_letters_of: str | None = None  # P2: the group whose dead letters' retention it is
    error: str | None = None


@attrs.frozen(kw_only=True)
class GetFormatVersion(Request):
    """The metadata format version of the coordinator's store (docs/protocol.md, Admin)."""

    TYPE: ClassVar[str] = "getFormatVersion"
    request_id: int

    def error(self, status: Status, error: str) -> FormatVersion:
        return FormatVersion(request_id=self.request_id, status=status, error=error)


@attrs.frozen(kw_only=True)
class FormatVersion(Response):
    """`formatVersion`: the format the store is in, and the newest this coordinator writes."""

    TYPE: ClassVar[str] = "formatVersion"
    request_id: int | None
    status: Status
    format_version: int | None = None
    latest_format_version: int | None = None
    error: str | None = None


@attrs.frozen(kw_only=True)
class SetFormatVersion(Request):
    """Raise the store's metadata format version (never lower it)."""

    TYPE: ClassVar[str] = "setFormatVersion"
    request_id: int
    format_version: int = attrs.field(validator=_at_least(1))

    def error(self, status: Status, error: str) -> FormatVersionChanged:
        return FormatVersionChanged(request_id=self.request_id, status=status, error=error)


@attrs.frozen(kw_only=True)
class FormatVersionChanged(Response):
    TYPE: ClassVar[str] = "formatVersionChanged"
    request_id: int | None
    status: Status
    format_version: int | None = None
    previous_format_version: int | None = None
    error: str | None = None


# --- dead letters (P3) -----------------------------------------------------------------

MAX_DEAD_LETTER_PAGE = 1000
MAX_REDRIVE = 1_000_000


@attrs.frozen(kw_only=True)
class DeadLetterEntry:
    """One dead letter as `listDeadLetters` shows it: its story (P2) and the message, as text
    (UTF-8, U+FFFD where the bytes are not)."""

    id: str
    source_stream: str | None
    source_id: str | None
    consumer_group: str | None
    deliveries: int | None
    error: str | None
    member_id: str | None
    dead_at_ms: int | None
    key: str | None
    value: str
    redriven: int = 0  # returns so far (rsc-redriven)


@attrs.frozen(kw_only=True)
class ListDeadLetters(GroupRequest):
    """P3: a group's dead letters: count, oldest and newest, errors by type, one page."""

    TYPE: ClassVar[str] = "listDeadLetters"
    request_id: int
    stream_prefix: str = attrs.field(validator=_name)
    consumer_group: str = attrs.field(validator=_name)
    count: int = attrs.field(default=100, validator=_within(1, MAX_DEAD_LETTER_PAGE))
    after: str | None = None  # the page starts after this entry id (None: the oldest)

    def error(self, status: Status, error: str) -> DeadLetters:
        return DeadLetters(request_id=self.request_id, status=status,
                           stream_prefix=self.stream_prefix, consumer_group=self.consumer_group,
                           error=error)


@attrs.frozen(kw_only=True)
class DeadLetters(Response):
    TYPE: ClassVar[str] = "deadLetters"
    request_id: int | None
    status: Status
    stream_prefix: str
    consumer_group: str
    stream: str | None = None
    count: int = 0
    oldest_ms: int | None = None
    newest_ms: int | None = None
    errors_by_type: dict[str, int] = attrs.field(factory=dict)
    entries: tuple[DeadLetterEntry, ...] = ()
    retention: Retention | None = None  # P2: the dead letters' own retention (None: none)
    error: str | None = None


@attrs.frozen(kw_only=True)
class RedriveDeadLetters(GroupRequest):
    """P3: send a group's dead letters back to their source prefix, to this group."""

    TYPE: ClassVar[str] = "redriveDeadLetters"
    request_id: int
    stream_prefix: str = attrs.field(validator=_name)
    consumer_group: str = attrs.field(validator=_name)
    dry_run: bool = False
    max: int = attrs.field(default=1000, validator=_within(1, MAX_REDRIVE))
    ids: tuple[str, ...] = ()
    force: bool = False  # send back entries already sent back 3 times too

    def error(self, status: Status, error: str) -> DeadLettersRedriven:
        return DeadLettersRedriven(request_id=self.request_id, status=status,
                                   stream_prefix=self.stream_prefix,
                                   consumer_group=self.consumer_group, error=error)


@attrs.frozen(kw_only=True)
class RedrivenEntry:
    id: str  # the dead letter's id
    shard: str  # where it went (or would go, on a dry run)
    new_id: str | None = None  # its id there (None on a dry run)


@attrs.frozen(kw_only=True)
class SkippedDeadLetter:
    id: str
    reason: str


@attrs.frozen(kw_only=True)
class DeadLettersRedriven(Response):
    TYPE: ClassVar[str] = "deadLettersRedriven"
    request_id: int | None
    status: Status
    stream_prefix: str
    consumer_group: str
    stream: str | None = None
    dry_run: bool = False
    redriven: tuple[RedrivenEntry, ...] = ()
    skipped: tuple[SkippedDeadLetter, ...] = ()
    error: str | None = None


@attrs.frozen(kw_only=True)
class ReadAudit(Request):
    """C3: the newest entries of the audit log `rsc:audit`, newest first (`beforeId`: older
    than that entry, to page back)."""

    TYPE: ClassVar[str] = "readAudit"
    request_id: int
    count: int = attrs.field(default=50, validator=_within(1, 1000))
    before_id: str | None = None

    def error(self, status: Status, error: str) -> AuditEntries:
        return AuditEntries(request_id=self.request_id, status=status, error=error)


@attrs.frozen(kw_only=True)
class AuditEntries(Response):
    """C3: audit entries, each the JSON object stored in `rsc:audit` plus its stream `id`."""

    TYPE: ClassVar[str] = "auditEntries"
    request_id: int | None
    status: Status
    entries: tuple[dict[str, Any], ...] = ()
    error: str | None = None


# --- messages (C2) ----------------------------------------------------------------------

MAX_MESSAGE_PAGE = 50  # entries a page of readShard, findKey or listPending
MAX_PAGE_BYTES = 256 * 1024  # contents a page (keys, values, header and field values)
MAX_KEY_SCAN = 10_000  # entries one findKey scans
_ENTRY_ID = re.compile(r"\A[0-9]{1,20}(-[0-9]{1,20})?\Z")


def _optional_entry_id(instance: object, attribute: attrs.Attribute[str | None],
                       value: str | None) -> None:
    if value is not None and not _ENTRY_ID.match(value):
        raise FieldValueError(f"field '{camel(attribute.name)}' must be a stream entry id "
                              f"like 1733040000000-0, got {value!r}")


def _shard_name(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not value or len(value) > MAX_STREAM_NAME_LENGTH or _CONTROL.search(value):
        raise FieldValueError(f"field '{camel(attribute.name)}' must be a stream key of 1 to "
                              f"{MAX_STREAM_NAME_LENGTH} characters without control characters")


@attrs.frozen(kw_only=True)
class Blob:
    """C2: bytes as shown: `text` when they are UTF-8 (else `base64`), `size` their full length,
    `cut` when only the first bytes are shown."""

    text: str | None = None
    base64: str | None = None
    size: int = 0
    cut: bool = False


@attrs.frozen(kw_only=True)
class FieldBlob:
    """C2: a header (`h:<name>`, M2) or another field of an entry: its name as text."""

    name: str
    value: Blob


@attrs.frozen(kw_only=True)
class StreamEntry:
    """C2: one stream entry as M1/M2 lay it out: key, value, headers, and any other field."""

    id: str
    key: Blob | None = None
    value: Blob | None = None
    headers: tuple[FieldBlob, ...] = ()
    fields: tuple[FieldBlob, ...] = ()


@attrs.frozen(kw_only=True)
class ReadShard(Request):
    """C2: a page of one shard's entries, newest (or oldest) first, from an id or a time."""

    TYPE: ClassVar[str] = "readShard"
    request_id: int
    stream_prefix: str = attrs.field(validator=_name)
    shard: str = attrs.field(validator=_shard_name)
    newest_first: bool = True
    from_id: str | None = attrs.field(default=None, validator=_optional_entry_id)
    from_ms: int | None = attrs.field(default=None, validator=_at_least(0))
    count: int = attrs.field(default=MAX_MESSAGE_PAGE, validator=_within(1, MAX_MESSAGE_PAGE))

    def __attrs_post_init__(self) -> None:
        if self.from_id is not None and self.from_ms is not None:
            raise FieldValueError("fields 'fromId' and 'fromMs' exclude each other: give one")

    def error(self, status: Status, error: str) -> ShardEntries:
        return ShardEntries(request_id=self.request_id, status=status,
                            stream_prefix=self.stream_prefix, shard=self.shard, error=error)


@attrs.frozen(kw_only=True)
class ShardEntries(Response):
    """C2: a page of entries; `nextId` starts the next page (None: none left)."""

    TYPE: ClassVar[str] = "shardEntries"
    request_id: int | None
    status: Status
    stream_prefix: str
    shard: str
    length: int | None = None
    entries: tuple[StreamEntry, ...] = ()
    next_id: str | None = None
    error: str | None = None


@attrs.frozen(kw_only=True)
class FindKey(Request):
    """C2: a key's entries, in its shard of every routing version still present (the current
    one, and the previous one while a resharding drains it), newest first by id; each request
    scans at most 10,000 entries and says where to continue."""

    TYPE: ClassVar[str] = "findKey"
    request_id: int
    stream_prefix: str = attrs.field(validator=_name)
    key: str
    continue_id: str | None = attrs.field(default=None, validator=_optional_entry_id)
    count: int = attrs.field(default=MAX_MESSAGE_PAGE, validator=_within(1, MAX_MESSAGE_PAGE))

    def error(self, status: Status, error: str) -> KeyEntries:
        return KeyEntries(request_id=self.request_id, status=status,
                          stream_prefix=self.stream_prefix, key=self.key, error=error)


@attrs.frozen(kw_only=True)
class KeyEntries(Response):
    TYPE: ClassVar[str] = "keyEntries"
    request_id: int | None
    status: Status
    stream_prefix: str
    key: str
    shard: str | None = None  # the key's shard in the current routing
    scanned: int = 0
    entries: tuple[StreamEntry, ...] = ()
    continue_id: str | None = None  # scan on from here (None: the shards were scanned)
    shards: tuple[str, ...] = ()  # every shard searched, the current version's first
    error: str | None = None


@attrs.frozen(kw_only=True)
class ListPending(GroupRequest):
    """C2: a group's pending entries in one shard: owner, idle time, delivery count."""

    TYPE: ClassVar[str] = "listPending"
    request_id: int
    stream_prefix: str = attrs.field(validator=_name)
    consumer_group: str = attrs.field(validator=_name)
    shard: str = attrs.field(validator=_shard_name)
    after_id: str | None = attrs.field(default=None, validator=_optional_entry_id)
    count: int = attrs.field(default=MAX_MESSAGE_PAGE, validator=_within(1, MAX_MESSAGE_PAGE))

    def error(self, status: Status, error: str) -> PendingEntries:
        return PendingEntries(request_id=self.request_id, status=status,
                              stream_prefix=self.stream_prefix,
                              consumer_group=self.consumer_group, shard=self.shard, error=error)


@attrs.frozen(kw_only=True)
class PendingEntry:
    id: str
    owner: str
    idle_ms: int
    deliveries: int


@attrs.frozen(kw_only=True)
class PendingEntries(Response):
    TYPE: ClassVar[str] = "pendingEntries"
    request_id: int | None
    status: Status
    stream_prefix: str
    consumer_group: str
    shard: str
    pending: int = 0  # the shard's whole count for the group
    entries: tuple[PendingEntry, ...] = ()
    next_id: str | None = None  # page on after this id (None: none left)
    error: str | None = None


@attrs.frozen(kw_only=True)
class ErrorResponse(Response):
    """The reply to anything malformed (INVALID_REQUEST)."""

    TYPE: ClassVar[str] = "error"
    request_id: int | None
    status: Status
    error: str


MemberRequest = Heartbeat | GetRouting
AdminRequest = (ListGroups | DescribeGroup | SetShardCount | SetMaxConcurrency | RemoveMember
                | DeleteGroup | ResetOffsets | SetRetention | GetFormatVersion | SetFormatVersion
                | ListDeadLetters | RedriveDeadLetters | ReadAudit | ReadShard | FindKey
                | ListPending)
AdminResponse = (Groups | GroupDescription | ShardCountChanged | MaxConcurrencyChanged
                 | MemberRemoved | GroupDeleted | OffsetsReset | RetentionChanged | FormatVersion
                 | FormatVersionChanged | DeadLetters | DeadLettersRedriven | AuditEntries
                 | ShardEntries | KeyEntries | PendingEntries)
