"""The codec's direct paths for the heartbeat hot path against its converter paths.

`encode` writes a heartbeatResponse (and an assignmentChanged push) field by field and
`decode` builds a well-formed heartbeat directly; both must agree with the converter to the
byte (encode) and to the value or the error message (decode).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsc.protocol import codec
from rsc.protocol import messages as m
from rsc.protocol.codec import (
    ADMIN_REQUESTS,
    MEMBER_REQUESTS,
    _decode_with_converter,
    _encode_with_converter,
    _fast_heartbeat,
    decode,
    encode,
)
from rsc.protocol.errors import ProtocolError, Status
from rsc.protocol.vocabulary import RetentionMode, RevokeState

LONE_SURROGATES = "\ud800\udbff\udc00\udfff"

# --- strategies --------------------------------------------------------------------------------

# Any text json.dumps can write, lone surrogates included (the encoder writes what it is given).
any_text = st.text(st.characters(codec="utf-8") | st.sampled_from(LONE_SURROGATES), max_size=12)
# Text a heartbeat accepts as a name: no control characters, no surrogates, no braces.
name_chars = st.characters(exclude_categories=("Cc", "Cs"), exclude_characters="{}")
names = st.text(name_chars, min_size=1, max_size=24)
member_ids = st.text(st.characters(exclude_categories=("Cc", "Cs")), min_size=1, max_size=24)
shard_names = st.text(st.characters(codec="utf-8"), max_size=16)
ints = st.integers(min_value=-(2**63), max_value=2**63)
optional_ints = st.none() | ints
shard_tuples = st.lists(any_text, max_size=4).map(tuple)

retentions = st.builds(
    m.Retention,
    mode=st.sampled_from(RetentionMode),
    max_length=st.none() | st.integers(min_value=1, max_value=2**40),
    max_age_ms=st.none() | st.integers(min_value=1, max_value=2**40),
)
routing_summaries = st.builds(
    m.RoutingSummary,
    version=ints,
    shard_count=ints,
    store_id=st.none() | any_text,
    retention=st.none() | retentions,
)
assignments = st.builds(m.Assignment, assigned_shards=shard_tuples, pending_shards=shard_tuples)
heartbeat_responses = st.builds(
    m.HeartbeatResponse,
    request_id=optional_ints,
    status=st.sampled_from(Status),
    member_id=any_text,
    member_epoch=optional_ints,
    group_epoch=optional_ints,
    assignment_epoch=optional_ints,
    heartbeat_interval_ms=optional_ints,
    lease_ttl_ms=optional_ints,
    max_concurrency=optional_ints,
    routing=st.none() | routing_summaries,
    assignment=st.none() | assignments,
    error=st.none() | any_text,
)
assignment_pushes = st.builds(
    m.AssignmentChanged,
    stream_prefix=any_text,
    consumer_group=any_text,
    member_id=any_text,
    group_epoch=ints,
)

ABSENT = object()


def _without_absent(pairs: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in pairs.items() if value is not ABSENT}


revoking_entries = st.builds(
    lambda shard, state, extra: {"shard": shard, "state": state, **extra},
    shard_names,
    st.sampled_from([state.value for state in RevokeState]),
    st.dictionaries(st.sampled_from(["note", "since"]), st.integers(), max_size=1),
)


@st.composite
def heartbeat_objects(draw: st.DrawFn) -> dict[str, Any]:
    """A valid heartbeat as a parsed JSON object: optional fields absent, null or set, keys in
    any order, sometimes an unknown extra key."""
    fields = _without_absent({
        "type": "heartbeat",
        "requestId": draw(ints),
        "streamPrefix": draw(names),
        "consumerGroup": draw(names),
        "memberId": draw(member_ids),
        "memberEpoch": draw(st.integers(min_value=-2, max_value=2**40)),
        "instanceId": draw(st.just(ABSENT) | st.none() | member_ids),
        "capacity": draw(st.just(ABSENT) | st.none() | st.integers(min_value=1, max_value=2**31)),
        "ownedShards": draw(st.just(ABSENT) | st.none() | st.lists(shard_names, max_size=4)),
        "revokingShards": draw(st.just(ABSENT) | st.lists(revoking_entries, max_size=3)),
        "future": draw(st.just(ABSENT) | st.integers() | st.text(max_size=4)),
    })
    keys = draw(st.permutations(list(fields)))
    return {key: fields[key] for key in keys}


def _frame(obj: dict[str, Any], ensure_ascii: bool) -> str:
    return json.dumps(obj, ensure_ascii=ensure_ascii)


def _converter_outcome(obj: Any, allowed: frozenset[str] | None) -> tuple[str, Any, Any]:
    try:
        message = _decode_with_converter(obj, allowed)
    except ProtocolError as exc:
        return ("error", exc.message, exc.request_id)
    return ("message", message, repr(message))


def _product_outcome(text: str, allowed: frozenset[str] | None) -> tuple[str, Any, Any]:
    try:
        message = decode(text, allowed)
    except ProtocolError as exc:
        return ("error", exc.message, exc.request_id)
    return ("message", message, repr(message))


# --- (a) encode ----------------------------------------------------------------------------------


@settings(max_examples=400)
@given(heartbeat_responses)
def test_heartbeat_response_encodes_byte_identical_to_the_converter(response: m.HeartbeatResponse) -> None:
    assert encode(response) == _encode_with_converter(response)


@settings(max_examples=200)
@given(assignment_pushes)
def test_assignment_changed_encodes_byte_identical_to_the_converter(push: m.AssignmentChanged) -> None:
    assert encode(push) == _encode_with_converter(push)


def test_heartbeat_response_writes_type_first_and_every_field_including_nulls() -> None:
    response = m.HeartbeatResponse(
        request_id=None, status=Status.REVOKE_PENDING, member_id="m\u00e9-\u4e2d",
        routing=m.RoutingSummary(version=2, shard_count=4, store_id=None,
                                 retention=m.Retention(mode=RetentionMode.NONE, max_length=10)),
        assignment=m.Assignment(assigned_shards=("p:v2:0",), pending_shards=()))
    text = encode(response)
    assert text == _encode_with_converter(response)
    assert text.startswith('{"type":"heartbeatResponse","requestId":null,"status":"REVOKE_PENDING",'
                           '"memberId":"m\u00e9-\u4e2d",')
    obj = json.loads(text)
    assert list(obj) == ["type", "requestId", "status", "memberId", "memberEpoch", "groupEpoch",
                         "assignmentEpoch", "heartbeatIntervalMs", "leaseTtlMs", "maxConcurrency",
                         "routing", "assignment", "error"]
    assert obj["routing"] == {"version": 2, "shardCount": 4, "storeId": None,
                              "retention": {"mode": "none", "maxLength": 10, "maxAgeMs": None}}
    assert obj["assignment"] == {"assignedShards": ["p:v2:0"], "pendingShards": []}
    assert decode(text) == response


def test_other_messages_still_take_the_converter(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[m.Message] = []
    original = codec._encode_with_converter

    def spy(message: m.Message) -> str:
        calls.append(message)
        return original(message)

    monkeypatch.setattr(codec, "_encode_with_converter", spy)
    routing = m.Routing(request_id=1, status=Status.OK, stream_prefix="orders")
    response = m.HeartbeatResponse(request_id=1, status=Status.OK, member_id="a")
    assert json.loads(encode(routing))["type"] == "routing"
    encode(response)
    assert calls == [routing]


# --- (b) decode of valid heartbeats -------------------------------------------------------------


@settings(max_examples=400)
@given(heartbeat_objects(), st.booleans(), st.sampled_from([None, MEMBER_REQUESTS]))
def test_valid_heartbeat_decodes_like_the_converter(obj: dict[str, Any], ensure_ascii: bool,
                                                    allowed: frozenset[str] | None) -> None:
    text = _frame(obj, ensure_ascii)
    expected = _decode_with_converter(json.loads(text), allowed)
    got = decode(text, allowed)
    assert got == expected
    assert repr(got) == repr(expected)  # also the types: tuples, RevokeState members
    assert type(got) is m.Heartbeat
    assert _fast_heartbeat(json.loads(text)) == expected  # and it took the direct path


def test_valid_heartbeat_does_not_reach_the_converter(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(obj: Any, allowed: frozenset[str] | None = None) -> m.Message:
        raise AssertionError("the converter path was taken")

    monkeypatch.setattr(codec, "_decode_with_converter", refuse)
    text = ('{"type":"heartbeat","requestId":3,"streamPrefix":"orders","consumerGroup":"billing",'
            '"memberId":"m{1}","memberEpoch":-1,"revokingShards":[{"shard":"orders:v1:0",'
            '"state":"REVOKED"}]}')
    message = decode(text, MEMBER_REQUESTS)
    assert message == m.Heartbeat(
        request_id=3, stream_prefix="orders", consumer_group="billing", member_id="m{1}",
        member_epoch=-1, capacity=None, owned_shards=None,
        revoking_shards=(m.RevokingShard(shard="orders:v1:0", state=RevokeState.REVOKED),))
    assert isinstance(message, m.Heartbeat)
    assert type(message.revoking_shards[0].state) is RevokeState


def test_heartbeat_not_allowed_here_keeps_its_error() -> None:
    text = ('{"type":"heartbeat","requestId":4,"streamPrefix":"orders","consumerGroup":"billing",'
            '"memberId":"m","memberEpoch":0}')
    with pytest.raises(ProtocolError) as raised:
        decode(text, ADMIN_REQUESTS)
    assert raised.value.request_id == 4
    assert raised.value.message.startswith("field 'type': 'heartbeat' is not accepted here")
    assert _product_outcome(text, ADMIN_REQUESTS) == _converter_outcome(json.loads(text), ADMIN_REQUESTS)


# --- (c) decode of invalid heartbeats -----------------------------------------------------------

INT_FIELDS = ["requestId", "memberEpoch", "capacity"]
TEXT_FIELDS = ["streamPrefix", "consumerGroup", "memberId"]
OPTIONAL_TEXT_FIELDS = ["instanceId"]
REQUIRED_FIELDS = ["requestId", "streamPrefix", "consumerGroup", "memberId", "memberEpoch"]
WRONG_FOR_INT: list[Any] = [True, False, 7.5, 7.0, "7", [], {}, [1]]
WRONG_FOR_TEXT: list[Any] = [None, True, 7, 7.5, [], {}, ["a"]]
WRONG_FOR_LIST: list[Any] = [True, 7, 7.5, "a", {}, {"0": "a"}]


def _set(obj: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    return {**obj, key: value}


def _drop(obj: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k != key}


def _with_surrogate(text: str, surrogate: str, at: int) -> str:
    at %= len(text) + 1
    return text[:at] + surrogate + text[at:]


@st.composite
def invalid_heartbeat_objects(draw: st.DrawFn) -> dict[str, Any]:
    """A valid heartbeat with one thing broken so that the converter rejects it."""
    obj = draw(heartbeat_objects())
    kind = draw(st.sampled_from([
        "wrong int", "bool int", "wrong text", "missing", "surrogate", "capacity", "epoch",
        "bad name", "instance", "instance surrogate", "bad instance", "owned not list",
        "owned item", "owned surrogate", "revoking not list",
        "revoking item", "revoking shard", "revoking state", "revoking missing", "revoking surrogate",
    ]))
    surrogate = draw(st.sampled_from(LONE_SURROGATES))
    at = draw(st.integers(min_value=0, max_value=30))
    if kind == "wrong int":
        return _set(obj, draw(st.sampled_from(INT_FIELDS)), draw(st.sampled_from(WRONG_FOR_INT)))
    if kind == "bool int":
        return _set(obj, draw(st.sampled_from(INT_FIELDS)), draw(st.booleans()))
    if kind == "wrong text":
        return _set(obj, draw(st.sampled_from(TEXT_FIELDS)), draw(st.sampled_from(WRONG_FOR_TEXT)))
    if kind == "missing":
        return _drop(obj, draw(st.sampled_from(REQUIRED_FIELDS)))
    if kind == "surrogate":
        field = draw(st.sampled_from(TEXT_FIELDS))
        return _set(obj, field, _with_surrogate(obj[field], surrogate, at))
    if kind == "capacity":
        return _set(obj, "capacity", draw(st.integers(max_value=0)))
    if kind == "epoch":
        return _set(obj, "memberEpoch", draw(st.integers(max_value=-3)))
    if kind == "instance":
        return _set(obj, draw(st.sampled_from(OPTIONAL_TEXT_FIELDS)),
                    draw(st.sampled_from([value for value in WRONG_FOR_TEXT if value is not None])))
    if kind == "instance surrogate":
        return _set(obj, "instanceId", _with_surrogate(obj.get("instanceId") or "i", surrogate, at))
    if kind == "bad instance":
        return _set(obj, "instanceId", draw(st.sampled_from(["", "x\x00", "\x85", "n" * 201])))
    if kind == "bad name":
        field = draw(st.sampled_from(["streamPrefix", "consumerGroup"]))
        bad = draw(st.sampled_from(["", "a{b", "}", "x\x00", "tab\there", "\x7f", "n" * 201]))
        return _set(obj, field, bad)
    if kind == "owned not list":
        return _set(obj, "ownedShards", draw(st.sampled_from(WRONG_FOR_LIST)))
    if kind == "owned item":
        items = list(obj.get("ownedShards") or [])
        items.insert(at % (len(items) + 1), draw(st.sampled_from(WRONG_FOR_TEXT)))
        return _set(obj, "ownedShards", items)
    if kind == "owned surrogate":
        items = list(obj.get("ownedShards") or [])
        items.insert(at % (len(items) + 1), _with_surrogate("s", surrogate, at))
        return _set(obj, "ownedShards", items)
    if kind == "revoking not list":
        return _set(obj, "revokingShards", draw(st.sampled_from([None, *WRONG_FOR_LIST])))
    revoking = [dict(entry) for entry in obj.get("revokingShards") or []]
    entry = {"shard": "p:v1:0", "state": "REVOKING"}
    if kind == "revoking item":
        broken: Any = draw(st.sampled_from([None, 1, "p:v1:0", ["p:v1:0", "REVOKING"]]))
    elif kind == "revoking shard":
        broken = _set(entry, "shard", draw(st.sampled_from(WRONG_FOR_TEXT)))
    elif kind == "revoking state":
        broken = _set(entry, "state", draw(st.sampled_from(["revoking", "DONE", "", None, 1, True])))
    elif kind == "revoking missing":
        broken = _drop(entry, draw(st.sampled_from(["shard", "state"])))
    else:
        broken = _set(entry, "shard", _with_surrogate("p:v1:0", surrogate, at))
    revoking.insert(at % (len(revoking) + 1), broken)
    return _set(obj, "revokingShards", revoking)


@settings(max_examples=600)
@given(invalid_heartbeat_objects(), st.booleans(), st.sampled_from([None, MEMBER_REQUESTS]))
def test_invalid_heartbeat_fails_with_the_converters_error(obj: dict[str, Any], ensure_ascii: bool,
                                                           allowed: frozenset[str] | None) -> None:
    text = _frame(obj, ensure_ascii)
    expected = _converter_outcome(json.loads(text), allowed)
    assert expected[0] == "error", f"the mutation left a valid heartbeat: {obj!r}"
    assert _fast_heartbeat(json.loads(text)) is None
    with pytest.raises(ProtocolError) as raised:
        decode(text, allowed)
    assert (raised.value.message, raised.value.request_id) == (expected[1], expected[2])


VALID = {"type": "heartbeat", "requestId": 9, "streamPrefix": "orders", "consumerGroup": "billing",
         "memberId": "m-1", "memberEpoch": 2, "capacity": 4, "ownedShards": ["orders:v1:0"],
         "revokingShards": [{"shard": "orders:v1:1", "state": "REVOKING"}]}


@pytest.mark.parametrize(("change", "message"), [
    ({"capacity": True}, "field 'capacity': expected integer, got boolean"),
    ({"requestId": "9"}, "field 'requestId': expected integer, got string"),
    ({"memberEpoch": -3}, "field 'memberEpoch' must be >= -2, got -3"),
    ({"instanceId": ""}, "field 'instanceId' must not be empty"),
    ({"instanceId": 7}, "field 'instanceId': expected string, got integer"),
    ({"capacity": 0}, "field 'capacity' must be >= 1, got 0"),
    ({"memberId": "m\ud800"}, "field 'memberId': is not valid Unicode (lone surrogate)"),
    ({"ownedShards": ["ok", 3]}, "field 'ownedShards[1]': expected string, got integer"),
    ({"revokingShards": [{"shard": "s", "state": "GONE"}]},
     "field 'revokingShards[0].state': unknown value 'GONE', expected one of 'REVOKING', 'REVOKED'"),
    ({"revokingShards": None}, "field 'revokingShards': expected array, got null"),
    ({"streamPrefix": "a{b}"},
     "field 'streamPrefix' contains '{' or '}' (reserved for Redis Cluster hash tags)"),
])
def test_named_invalid_heartbeats_keep_todays_message(change: dict[str, Any], message: str) -> None:
    text = json.dumps({**VALID, **change})
    expected = _converter_outcome(json.loads(text), MEMBER_REQUESTS)
    with pytest.raises(ProtocolError) as raised:
        decode(text, MEMBER_REQUESTS)
    assert (raised.value.message, raised.value.request_id) == (expected[1], expected[2])
    assert raised.value.message == message
    assert raised.value.request_id == (9 if "requestId" not in change else None)


def test_missing_required_field_keeps_todays_message() -> None:
    text = json.dumps(_drop(VALID, "memberEpoch"))
    with pytest.raises(ProtocolError) as raised:
        decode(text, MEMBER_REQUESTS)
    assert raised.value.message == "field 'memberEpoch' is missing"
    assert raised.value.request_id == 9
    assert _product_outcome(text, MEMBER_REQUESTS) == _converter_outcome(json.loads(text), MEMBER_REQUESTS)


def test_the_direct_heartbeat_path_reads_every_field_of_the_messages():
    """A field added to Heartbeat or RevokingShard but not to `_fast_heartbeat` would be
    dropped on the direct path; this names the sets the two must agree on."""
    import attrs

    from rsc.protocol.messages import camel

    assert {camel(f.name) for f in attrs.fields(m.Heartbeat)} == codec.FAST_HEARTBEAT_KEYS
    assert {camel(f.name) for f in attrs.fields(m.RevokingShard)} == codec.FAST_REVOKING_SHARD_KEYS
