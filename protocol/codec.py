"""One cattrs converter for the whole protocol: camelCase, tagged on `type`.

`decode` turns text into a message or raises one ProtocolError naming the
field; `encode` turns a message into text. Primitives are strict: `"7"` is
not an int, `true` is not an int, `7.5` is not an int.
"""

from __future__ import annotations

import enum
import json
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeGuard

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from rsc.protocol import messages as m
from rsc.protocol.errors import ProtocolError, Status
from rsc.protocol.messages import FieldValueError, camel
from rsc.protocol.vocabulary import STATE_ENUMS, RevokeState

MESSAGE_TYPES: dict[str, type[m.Message]] = {
    cls.TYPE: cls
    for cls in (
        m.Heartbeat,
        m.HeartbeatResponse,
        m.AssignmentChanged,
        m.GetRouting,
        m.Routing,
        m.ListGroups,
        m.DescribeGroup,
        m.SetShardCount,
        m.SetMaxConcurrency,
        m.RemoveMember,
        m.Groups,
        m.GroupDescription,
        m.ShardCountChanged,
        m.MaxConcurrencyChanged,
        m.MemberRemoved,
        m.DeleteGroup,
        m.GroupDeleted,
        m.ResetOffsets,
        m.OffsetsReset,
        m.SetRetention,
        m.RetentionChanged,
        m.GetFormatVersion,
        m.FormatVersion,
        m.SetFormatVersion,
        m.FormatVersionChanged,
        m.ListDeadLetters,
        m.DeadLetters,
        m.RedriveDeadLetters,
        m.DeadLettersRedriven,
        m.ReadAudit,
        m.AuditEntries,
        m.ReadShard,
        m.ShardEntries,
        m.FindKey,
        m.KeyEntries,
        m.ListPending,
        m.PendingEntries,
        m.ErrorResponse,
    )
}

MEMBER_REQUESTS: frozenset[str] = frozenset({m.Heartbeat.TYPE, m.GetRouting.TYPE})
ADMIN_REQUESTS: frozenset[str] = frozenset(
    cls.TYPE
    for cls in (m.ListGroups, m.DescribeGroup, m.SetShardCount, m.SetMaxConcurrency, m.RemoveMember,
                m.DeleteGroup, m.ResetOffsets, m.SetRetention, m.GetFormatVersion,
                m.SetFormatVersion, m.ListDeadLetters, m.RedriveDeadLetters, m.ReadAudit,
                m.ReadShard, m.FindKey, m.ListPending)
)


class _FieldError(ValueError):
    """A primitive of the wrong JSON type."""


class _ItemError(ValueError):
    """Item `index` of an array (or key of an object) failed; `cause` says how."""

    def __init__(self, index: int | str, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.index = index
        self.cause = cause


def _origin(annotation: object) -> object:
    """The unsubscripted form of a type annotation (`tuple` of `tuple[int, ...]`), or None."""
    return typing.get_origin(annotation)


def _strict(expected: type, label: str) -> Callable[[object, object], object]:
    def structure(value: object, _: object) -> object:
        if type(value) is not expected:
            raise _FieldError(f"expected {label}, got {_json_type(value)}")
        return value

    return structure


def _strict_text(value: object, _: object) -> str:
    if type(value) is not str:
        raise _FieldError(f"expected string, got {_json_type(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        # A "\ud800" escape parses to a lone surrogate, which no UTF-8 frame, Redis
        # key or response can carry.
        raise _FieldError("is not valid Unicode (lone surrogate)") from None
    return value


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string",
            list: "array", dict: "object"}.get(type(value), type(value).__name__)


# K8's optional request fields: left out of a frame while null, so every heartbeat and
# getRouting of a client that knows nothing reads as before
OMITTED_WHEN_NULL = frozenset({"known_store_id", "known_routing",
                               "if_group_epoch", "if_routing_version"})  # C1: as before


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=False)
    conv.register_structure_hook(int, _strict(int, "integer"))
    conv.register_structure_hook(str, _strict_text)
    conv.register_structure_hook(bool, _strict(bool, "boolean"))

    def structure_enum(value: object, cls: type[enum.Enum]) -> enum.Enum:
        try:
            return cls(value)
        except ValueError:
            allowed = ", ".join(repr(member.value) for member in cls)
            raise _FieldError(f"unknown value {value!r}, expected one of {allowed}") from None

    conv.register_structure_hook_func(
        lambda t: isinstance(t, type) and issubclass(t, enum.Enum), structure_enum
    )
    # Status is also a str: without its own singledispatch entry the str hook above
    # would win and accept any string as a status.
    for string_enum in (Status, *STATE_ENUMS):
        conv.register_structure_hook(string_enum, structure_enum)

    def structure_literal(value: object, literal: object) -> object:
        allowed = typing.get_args(literal)
        if value not in allowed or type(value) is not type(allowed[0]):
            raise _FieldError(f"unknown value {value!r}, expected one of {', '.join(map(repr, allowed))}")
        return value

    conv.register_structure_hook_func(lambda t: _origin(t) is typing.Literal, structure_literal)

    def structure_tuple(value: object, tuple_type: object) -> tuple[object, ...]:
        if not isinstance(value, list):
            raise _FieldError(f"expected array, got {_json_type(value)}")
        (item_type, _ellipsis) = typing.get_args(tuple_type)
        items: list[object] = []
        for index, item in enumerate(value):
            try:
                items.append(conv.structure(item, item_type))
            except Exception as exc:  # noqa: BLE001 - re-raised with its position
                raise _ItemError(index, exc) from None
        return tuple(items)

    conv.register_structure_hook_func(
        lambda t: _origin(t) is tuple and typing.get_args(t)[1:] == (Ellipsis,),
        structure_tuple,
    )

    def structure_mapping(value: object, dict_type: object) -> dict[str, object]:
        if not isinstance(value, dict):
            raise _FieldError(f"expected object, got {_json_type(value)}")
        (_key_type, value_type) = typing.get_args(dict_type)
        items: dict[str, object] = {}
        for key, item in value.items():
            _strict_text(key, str)
            try:
                items[key] = conv.structure(item, value_type)
            except Exception as exc:  # noqa: BLE001 - re-raised with its key
                raise _ItemError(key, exc) from None
        return items

    conv.register_structure_hook_func(
        lambda t: _origin(t) is dict and typing.get_args(t)[:1] == (str,),
        structure_mapping,
    )

    # attribute name -> override; Any as cattrs takes them (its **kwargs share names with its flags)
    def renames(cls: type) -> dict[str, Any]:
        return {a.name: override(rename=camel(a.name)) for a in attrs.fields(cls)}

    def structure_factory(cls: type) -> Callable[[object, object], object]:
        structure: Callable[[Mapping[str, object], object], object] = make_dict_structure_fn(
            cls, conv, _cattrs_detailed_validation=True, **renames(cls))

        def structure_object(value: object, typ: object) -> object:
            if not isinstance(value, dict):
                raise _FieldError(f"expected object, got {_json_type(value)}")
            return structure(value, typ)

        return structure_object

    def unstructure_factory(cls: type) -> Callable[[object], dict[str, object]]:
        overrides = renames(cls)
        for name in OMITTED_WHEN_NULL.intersection(overrides):  # K8: sent only when known
            overrides[name] = override(rename=camel(name), omit_if_default=True)
        return make_dict_unstructure_fn(cls, conv, **overrides)

    conv.register_structure_hook_factory(attrs.has, structure_factory)
    conv.register_unstructure_hook_factory(attrs.has, unstructure_factory)
    return conv


converter = _make_converter()


def to_wire(message: m.Message) -> dict[str, object]:
    """The JSON object of a message, `type` first."""
    body: dict[str, object] = converter.unstructure(message)
    return {"type": message.TYPE, **body}


def encode(message: m.Message) -> str:
    """The text frame of a message.

    A heartbeatResponse (and an assignmentChanged push) is written field by field: it is the
    one frame of every heartbeat. Its text is byte-identical to the converter's (see
    `_encode_with_converter`, which every other message takes).
    """
    if type(message) is m.HeartbeatResponse:
        return _encode_heartbeat_response(message)
    if type(message) is m.AssignmentChanged:
        return _encode_assignment_changed(message)
    return _encode_with_converter(message)


def _encode_with_converter(message: m.Message) -> str:
    """The text frame of any message through the converter."""
    return json.dumps(to_wire(message), separators=(",", ":"), ensure_ascii=False)


def _encode_heartbeat_response(response: m.HeartbeatResponse) -> str:
    # The converter's keys in its order, `type` first. Like the converter, a status or a
    # retention mode goes to json.dumps as the (str) enum member, which writes its value;
    # tuples become lists.
    routing = response.routing
    assignment = response.assignment
    routing_object: dict[str, object] | None = None
    if routing is not None:
        retention = routing.retention
        routing_object = {
            "version": routing.version,
            "shardCount": routing.shard_count,
            "storeId": routing.store_id,
            "retention": None if retention is None else {
                "mode": retention.mode,
                "maxLength": retention.max_length,
                "maxAgeMs": retention.max_age_ms,
            },
        }
    return _dumps({
        "type": "heartbeatResponse",
        "requestId": response.request_id,
        "status": response.status,
        "memberId": response.member_id,
        "memberEpoch": response.member_epoch,
        "groupEpoch": response.group_epoch,
        "assignmentEpoch": response.assignment_epoch,
        "heartbeatIntervalMs": response.heartbeat_interval_ms,
        "leaseTtlMs": response.lease_ttl_ms,
        "maxConcurrency": response.max_concurrency,
        "routing": routing_object,
        "assignment": None if assignment is None else {
            "assignedShards": list(assignment.assigned_shards),
            "pendingShards": list(assignment.pending_shards),
        },
        "error": response.error,
    })


def _encode_assignment_changed(push: m.AssignmentChanged) -> str:
    return _dumps({
        "type": "assignmentChanged",
        "streamPrefix": push.stream_prefix,
        "consumerGroup": push.consumer_group,
        "memberId": push.member_id,
        "groupEpoch": push.group_epoch,
    })


_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def decode(text: str | bytes, allowed: frozenset[str] | None = None) -> m.Message:
    """Parse one text frame into a message, or raise ProtocolError naming the field.

    `allowed` restricts the accepted `type`s (an endpoint's requests).
    """
    if isinstance(text, bytes):
        raise ProtocolError("binary frames are not accepted; send JSON text frames")
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"frame is not valid JSON: {exc}") from None
    return decode_object(obj, allowed)


def decode_object(obj: object, allowed: frozenset[str] | None = None) -> m.Message:
    """Structure an already parsed JSON value into a message (see `decode`).

    A well-formed heartbeat is built directly (`_fast_heartbeat`); anything else, and any
    heartbeat the direct path does not accept as is, takes the converter, so every error
    reads the same.
    """
    if (type(obj) is dict and obj.get("type") == "heartbeat"
            and (allowed is None or "heartbeat" in allowed)):
        heartbeat = _fast_heartbeat(obj)
        if heartbeat is not None:
            return heartbeat
    return _decode_with_converter(obj, allowed)


def _clean_text(value: object) -> TypeGuard[str]:
    """True for a str the converter accepts: no lone surrogate (checked only off ASCII)."""
    if type(value) is not str:
        return False
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_REVOKE_STATES: dict[str, RevokeState] = {state.value: state for state in RevokeState}
# The wire keys `_fast_heartbeat` reads: a field added to Heartbeat or RevokingShard must be
# read there too, or the direct path would drop it (tests/test_codec_fast.py holds these to
# the attrs fields).
FAST_HEARTBEAT_KEYS = frozenset({"requestId", "streamPrefix", "consumerGroup", "memberId",
                                 "memberEpoch", "capacity", "ownedShards", "revokingShards",
                                 "instanceId", "deadLetterStream",
                                 "knownStoreId", "knownRouting"})
FAST_REVOKING_SHARD_KEYS = frozenset({"shard", "state"})


def _fast_heartbeat(obj: dict[str, object]) -> m.Heartbeat | None:
    """The heartbeat of `obj` if every field has exactly its JSON type and the message is
    valid, else None (the caller then takes the converter, which names the problem)."""
    if obj.get("knownStoreId") is not None or obj.get("knownRouting") is not None:
        return None  # K8: only joins carry them; the converter reads them
    request_id = obj.get("requestId")
    member_epoch = obj.get("memberEpoch")
    stream_prefix = obj.get("streamPrefix")
    consumer_group = obj.get("consumerGroup")
    member_id = obj.get("memberId")
    if (type(request_id) is not int or type(member_epoch) is not int
            or not _clean_text(stream_prefix) or not _clean_text(consumer_group)
            or not _clean_text(member_id)):
        return None
    capacity = obj.get("capacity")
    if capacity is not None and type(capacity) is not int:
        return None
    instance_id = obj.get("instanceId")  # S1: a dynamic member costs this one lookup
    if instance_id is not None and not _clean_text(instance_id):
        return None
    dead_letter_stream = obj.get("deadLetterStream")  # P2: on joins and full reports
    if dead_letter_stream is not None and not _clean_text(dead_letter_stream):
        return None
    owned = obj.get("ownedShards")
    owned_shards: tuple[str, ...] | None = None
    if owned is not None:
        if type(owned) is not list:
            return None
        for owned_shard in owned:
            if not _clean_text(owned_shard):
                return None
        owned_shards = tuple(owned)
    revoking_shards: tuple[m.RevokingShard, ...] = ()
    if "revokingShards" in obj:
        revoking = obj["revokingShards"]
        if type(revoking) is not list:
            return None
        items = []
        for item in revoking:
            if type(item) is not dict:
                return None
            shard = item.get("shard")
            state = item.get("state")
            if not _clean_text(shard) or type(state) is not str:
                return None
            revoke_state = _REVOKE_STATES.get(state)
            if revoke_state is None:
                return None
            items.append(m.RevokingShard(shard=shard, state=revoke_state))
        revoking_shards = tuple(items)
    try:
        return m.Heartbeat(request_id=request_id, stream_prefix=stream_prefix,
                           consumer_group=consumer_group, member_id=member_id,
                           member_epoch=member_epoch, capacity=capacity,
                           owned_shards=owned_shards, revoking_shards=revoking_shards,
                           instance_id=instance_id, dead_letter_stream=dead_letter_stream)
    except Exception:  # noqa: BLE001 - a validator's failure: the converter words it
        return None


def _decode_with_converter(obj: object, allowed: frozenset[str] | None = None) -> m.Message:
    """Structure a parsed JSON value through the converter alone (every message, every error)."""
    if not isinstance(obj, dict):
        raise ProtocolError(f"frame must be a JSON object, got {_json_type(obj)}")
    request_id = obj.get("requestId")
    if type(request_id) is not int:
        request_id = None
    type_name = obj.get("type")
    if not isinstance(type_name, str):
        raise ProtocolError("field 'type' is missing or not a string", request_id)
    cls = MESSAGE_TYPES.get(type_name)
    if cls is None or (allowed is not None and type_name not in allowed):
        expected = ", ".join(sorted(allowed if allowed is not None else MESSAGE_TYPES))
        raise ProtocolError(
            f"field 'type': {type_name!r} is not accepted here (expected one of {expected})",
            request_id,
        )
    try:
        return converter.structure(obj, cls)
    except Exception as exc:  # noqa: BLE001 - every structuring failure is the peer's
        raise ProtocolError(describe_error(exc), request_id) from None


def describe_error(exc: BaseException) -> str:
    """One line naming the first bad field of a cattrs failure, in wire (camelCase) terms."""
    path, leaf = _first_leaf(exc, "")
    if isinstance(leaf, FieldValueError):
        return str(leaf)
    if isinstance(leaf, KeyError):
        return f"field '{path}' is missing"
    return f"field '{path}': {leaf}" if path else str(leaf)


def _first_leaf(exc: BaseException, path: str) -> tuple[str, BaseException]:
    if isinstance(exc, _ItemError):
        return _first_leaf(exc.cause, f"{path}[{json.dumps(exc.index, ensure_ascii=False)}]")
    if isinstance(exc, cattrs.BaseValidationError) and exc.exceptions:
        inner = exc.exceptions[0]
        note = next((n for n in getattr(inner, "__notes__", []) if hasattr(n, "name")), None)
        if note is not None:
            path = f"{path}.{camel(note.name)}" if path else camel(note.name)
        return _first_leaf(inner, path)
    return path, exc
