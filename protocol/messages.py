"""Every message of PROTOCOL.md as a frozen attrs class.

Attribute names are snake_case; on the wire they are camelCase (see codec).
Each class knows its wire `type` through the `TYPE` class variable.
Validators enforce the ranges of the protocol, so a decoded message is valid.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import attrs

from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import Cutover, GroupState, MemberState, MigrationState, RevokeState

__all__ = [
    "MAX_NAME_LENGTH",
    "MAX_SHARD_COUNT",
    "AdminRequest",
    "AdminResponse",
    "Assignment",
    "AssignmentChanged",
    "DescribeGroup",
    "ErrorResponse",
    "GetRouting",
    "GroupDescription",
    "GroupSummary",
    "Groups",
    "Heartbeat",
    "HeartbeatResponse",
    "ListGroups",
    "MaxConcurrencyChanged",
    "MemberDescription",
    "MemberRemoved",
    "MemberRequest",
    "Message",
    "MigrationDescription",
    "RemoveMember",
    "RevokingShard",
    "Routing",
    "RoutingDescription",
    "RoutingSummary",
    "SetMaxConcurrency",
    "SetShardCount",
    "ShardCountChanged",
    "camel",
    "check_name",
    "FieldValueError",
]

MAX_NAME_LENGTH = 200
MAX_SHARD_COUNT = 4096


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


def _name(instance: Any, attribute: attrs.Attribute, value: str) -> None:
    check_name(attribute.name, value)


def _member_id(instance: Any, attribute: attrs.Attribute, value: str) -> None:
    check_name(attribute.name, value, allow_braces=True)


def _at_least(low: int):
    def check(instance: Any, attribute: attrs.Attribute, value: int | None) -> None:
        if value is not None and value < low:
            raise FieldValueError(f"field '{camel(attribute.name)}' must be >= {low}, got {value}")

    return check


def _shard_count(instance: Any, attribute: attrs.Attribute, value: int) -> None:
    if not 1 <= value <= MAX_SHARD_COUNT:
        raise FieldValueError(
            f"field '{camel(attribute.name)}' must be in 1..{MAX_SHARD_COUNT}, got {value}"
        )


class Message:
    """Base of every wire message; `TYPE` is the wire `type` tag."""

    TYPE: ClassVar[str]


# --- member endpoint ---------------------------------------------------------


@attrs.frozen(kw_only=True)
class RevokingShard:
    shard: str
    state: RevokeState


@attrs.frozen(kw_only=True)
class Heartbeat(Message):
    TYPE: ClassVar[str] = "heartbeat"
    request_id: int
    stream_prefix: str = attrs.field(validator=_name)
    consumer_group: str = attrs.field(validator=_name)
    member_id: str = attrs.field(validator=_member_id)
    member_epoch: int = attrs.field(validator=_at_least(-1))
    capacity: int | None = attrs.field(default=None, validator=_at_least(1))
    owned_shards: tuple[str, ...] | None = None
    revoking_shards: tuple[RevokingShard, ...] = ()


@attrs.frozen(kw_only=True)
class RoutingSummary:
    version: int
    shard_count: int


@attrs.frozen(kw_only=True)
class Assignment:
    assigned_shards: tuple[str, ...] = ()
    pending_shards: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class HeartbeatResponse(Message):
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
class GetRouting(Message):
    TYPE: ClassVar[str] = "getRouting"
    request_id: int
    stream_prefix: str = attrs.field(validator=_name)
    subscribe: bool = False


@attrs.frozen(kw_only=True)
class Routing(Message):
    """Answer to getRouting, and (without requestId) the push on a routing change."""

    TYPE: ClassVar[str] = "routing"
    request_id: int | None = None  # a push carries none (PROTOCOL.md Transport)
    status: Status
    stream_prefix: str
    version: int | None = None
    shard_count: int | None = None
    hash: str | None = None
    streams: tuple[str, ...] | None = None
    error: str | None = None


# --- admin endpoint ------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ListGroups(Message):
    TYPE: ClassVar[str] = "listGroups"
    request_id: int


@attrs.frozen(kw_only=True)
class DescribeGroup(Message):
    TYPE: ClassVar[str] = "describeGroup"
    request_id: int
    stream_prefix: str = attrs.field(validator=_name)
    consumer_group: str = attrs.field(validator=_name)


@attrs.frozen(kw_only=True)
class SetShardCount(Message):
    TYPE: ClassVar[str] = "setShardCount"
    request_id: int
    stream_prefix: str = attrs.field(validator=_name)
    consumer_group: str = attrs.field(validator=_name)
    shard_count: int = attrs.field(validator=_shard_count)
    cutover: Cutover = Cutover.PARALLEL


@attrs.frozen(kw_only=True)
class SetMaxConcurrency(Message):
    TYPE: ClassVar[str] = "setMaxConcurrency"
    request_id: int
    stream_prefix: str = attrs.field(validator=_name)
    consumer_group: str = attrs.field(validator=_name)
    max_concurrency: int | None = attrs.field(validator=_at_least(1))


@attrs.frozen(kw_only=True)
class RemoveMember(Message):
    TYPE: ClassVar[str] = "removeMember"
    request_id: int
    stream_prefix: str = attrs.field(validator=_name)
    consumer_group: str = attrs.field(validator=_name)
    member_id: str = attrs.field(validator=_member_id)


@attrs.frozen(kw_only=True)
class GroupSummary:
    stream_prefix: str
    consumer_group: str
    group_epoch: int
    members: int
    shards: int
    state: GroupState


@attrs.frozen(kw_only=True)
class Groups(Message):
    TYPE: ClassVar[str] = "groups"
    request_id: int | None
    status: Status
    groups: tuple[GroupSummary, ...] = ()
    error: str | None = None


@attrs.frozen(kw_only=True)
class MigrationDescription:
    state: MigrationState
    from_version: int
    to_version: int
    cutover: Cutover
    drained_shards: tuple[str, ...] = ()
    remaining_shards: tuple[str, ...] = ()


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


@attrs.frozen(kw_only=True)
class GroupDescription(Message):
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
    error: str | None = None


@attrs.frozen(kw_only=True)
class RoutingDescription:
    version: int
    shard_count: int
    hash: str
    streams: tuple[str, ...]


@attrs.frozen(kw_only=True)
class ShardCountChanged(Message):
    TYPE: ClassVar[str] = "shardCountChanged"
    request_id: int | None
    status: Status
    stream_prefix: str
    consumer_group: str
    routing: RoutingDescription | None = None
    migration: MigrationDescription | None = None
    error: str | None = None


@attrs.frozen(kw_only=True)
class MaxConcurrencyChanged(Message):
    TYPE: ClassVar[str] = "maxConcurrencyChanged"
    request_id: int | None
    status: Status
    stream_prefix: str
    consumer_group: str
    max_concurrency: int | None = None
    group_epoch: int | None = None
    error: str | None = None


@attrs.frozen(kw_only=True)
class MemberRemoved(Message):
    TYPE: ClassVar[str] = "memberRemoved"
    request_id: int | None
    status: Status
    stream_prefix: str
    consumer_group: str
    member_id: str
    group_epoch: int | None = None
    error: str | None = None


@attrs.frozen(kw_only=True)
class ErrorResponse(Message):
    """The reply to anything malformed (INVALID_REQUEST)."""

    TYPE: ClassVar[str] = "error"
    request_id: int | None
    status: Status
    error: str


MemberRequest = Heartbeat | GetRouting
AdminRequest = ListGroups | DescribeGroup | SetShardCount | SetMaxConcurrency | RemoveMember
AdminResponse = Groups | GroupDescription | ShardCountChanged | MaxConcurrencyChanged | MemberRemoved
