"""`rsc produce`'s input (B3, L5): each line is checked completely before it is accepted, a
bad line is reported by number and costs no other line, and JSON lines are strict but still
replay `rsc consume`'s own output.

The reader is pure (`InputReader`: bytes in, one outcome per line out) and fuzzed with
hypothesis; what it accepts must pass the producer's own check as one batch, which is what
`rsc produce` writes. One real-process test runs the issue's input against a real Redis and
coordinator.
"""

from __future__ import annotations

import base64
import json
import random
import sys
from typing import Any

import pytest
import redis
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rsc.member.producer import open_producer
from rsc.member.pure.entry import outgoing
from rsc.member.pure.producer_core import ProducerCore, Record
from rsc.tools.input_lines import (
    Accepted,
    InputReader,
    LineSplitter,
    MalformedLine,
    Refused,
    TooLong,
    is_blank,
    max_line_bytes,
    parse_line,
)
from rsc.tools.output_lines import json_line
from tests.processes import ROOT, log_message
from tests.test_console_failures import tool_env
from tests.test_member_support import set_shards

SURROGATE = "\ud800"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def read_all(data: bytes, *, chunk: int = 1 << 16, limit: int = 1 << 20,
             max_line: int | None = None) -> list[Accepted | Refused]:
    reader = InputReader(limit, max_line=max_line)
    outcomes: list[Accepted | Refused] = []
    for start in range(0, len(data), chunk):
        outcomes += reader.feed(data[start:start + chunk])
    return outcomes + reader.finish()


def writable(records: list[Record]) -> None:
    """What `rsc produce`'s writer does before anything is sent: the producer's check of the
    whole batch; raises if one accepted record could still fail the batch."""
    ProducerCore().delivery(records)


# --- B3: a lone surrogate anywhere is one malformed line --------------------------------


@pytest.mark.parametrize(("obj", "named"), [
    ({"key": "c", "value": SURROGATE}, "value: not encodable as UTF-8"),
    ({"key": f"k{SURROGATE}", "value": "v"}, "key: not encodable as UTF-8"),
    ({"key": "k", "value": "v", "headers": {f"h{SURROGATE}": "x"}},
     r"header name 'h\\ud800': not encodable"),
    ({"key": "k", "value": "v", "headers": {"h": SURROGATE}}, "header 'h': not encodable"),
])
def test_b3_a_lone_surrogate_in_key_value_or_header_is_malformed_naming_it(obj, named):
    line = json.dumps(obj)  # ASCII JSON with a \ud800 escape: valid JSON, no UTF-8
    with pytest.raises(MalformedLine, match=named):
        parse_line(line)


def test_b3_the_issue_input_accepts_a_b_d_and_reports_line_3():
    data = b'a\t1\nb\t2\n{"key":"c","value":"\\ud800"}\nd\t4\n'
    outcomes = read_all(data)
    assert [type(outcome).__name__ for outcome in outcomes] == [
        "Accepted", "Accepted", "Refused", "Accepted"]
    accepted = [outcome for outcome in outcomes if isinstance(outcome, Accepted)]
    assert [(line.number, line.record) for line in accepted] == [
        (1, ("a", "1")), (2, ("b", "2")), (4, ("d", "4"))]
    refused = outcomes[2]
    assert isinstance(refused, Refused) and refused.number == 3
    assert "value: not encodable as UTF-8" in refused.reason
    writable([line.record for line in accepted])


def test_b3_an_overlong_line_is_refused_by_number_and_never_held():
    max_line = max_line_bytes(1000)
    reader = InputReader(1000)
    outcomes = reader.feed(b"k\tv\n")
    held = 0
    for _ in range(max_line // 4096 + 40):  # well past the longest line, 4 KiB at a time
        outcomes += reader.feed(b"x" * 4096)
        held = max(held, reader.held)
    outcomes += reader.feed(b"\nk2\tv2")
    outcomes += reader.finish()
    assert held <= max_line
    assert [outcome.number for outcome in outcomes] == [1, 2, 3]
    assert isinstance(outcomes[1], Refused) and "longer than any message" in outcomes[1].reason
    assert [outcome.record for outcome in outcomes if isinstance(outcome, Accepted)] == [
        ("k", "v"), ("k2", "v2")]


def test_b3_line_splitter_reports_a_long_line_at_its_end_and_keeps_the_next():
    splitter = LineSplitter(max_bytes=5)
    assert splitter.feed(b"abc\nabcdefgh") == [b"abc"]
    assert splitter.feed(b"ij\nok") == [TooLong(10)]
    assert splitter.feed(b"123456\n") == [TooLong(8)]
    assert splitter.finish() == []


def test_b3_invalid_utf8_and_bad_json_are_reported_and_skipped():
    data = b"a\t1\n\xff\xfe\tx\n{not json\n\n{\"value\": \"ok\"}\n"
    outcomes = read_all(data)
    assert [(type(o).__name__, o.number) for o in outcomes] == [
        ("Accepted", 1), ("Refused", 2), ("Refused", 3), ("Accepted", 5)]
    assert "not UTF-8" in outcomes[1].reason  # type: ignore[union-attr]
    assert "invalid JSON" in outcomes[2].reason  # type: ignore[union-attr]


# --- B3: fuzz -------------------------------------------------------------------------------

# text the producer can write: any character but the newline and lone surrogates
TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\n\r"),
               max_size=30)
# strings as a hostile line has them: lone surrogates and control characters in
HOSTILE = st.text(st.one_of(st.characters(),
                            st.integers(0xD800, 0xDFFF).map(chr),
                            st.integers(0, 0x1F).map(chr)), max_size=12)


@st.composite
def valid_lines(draw: st.DrawFn) -> tuple[bytes, Record]:
    """A line that must be accepted, and the record it holds."""
    if draw(st.booleans()):
        key = draw(TEXT.filter(lambda text: "\t" not in text))
        value = draw(TEXT)
        line = f"{key}\t{value}"
        if is_blank(line) or line.lstrip().startswith("{"):
            line, key = f"k{line}", f"k{key}"
        return line.encode(), (key, value)
    obj: dict[str, object] = {}
    text_key = draw(st.one_of(st.none(), TEXT))
    json_key: str | bytes | None = text_key
    if draw(st.booleans()) and text_key is not None:
        json_key = draw(st.binary(max_size=20))
        obj["keyBase64"] = b64(json_key)
    elif text_key is not None or draw(st.booleans()):
        obj["key"] = text_key
    json_value: str | bytes = draw(TEXT)
    if draw(st.booleans()):
        binary = draw(st.binary(max_size=40))
        json_value = binary
        obj["valueBase64"] = b64(binary)
    else:
        obj["value"] = json_value
    headers = draw(st.dictionaries(TEXT.filter(bool), TEXT, max_size=3))
    if headers:
        obj["headers"] = headers
    if draw(st.booleans()):
        obj.update(shard="p:v1:0", id="1-0", memberId=None)  # what `rsc consume` adds
    line = json.dumps(obj, ensure_ascii=draw(st.booleans()))
    return line.encode(), ((json_key, json_value, headers) if headers
                           else (json_key, json_value))


JUNK_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), HOSTILE),
    lambda children: st.one_of(st.lists(children, max_size=3),
                               st.dictionaries(HOSTILE, children, max_size=3)),
    max_leaves=8)
MESSAGE_JSON = st.fixed_dictionaries({}, optional={
    name: st.one_of(HOSTILE, JUNK_JSON) for name in
    ("key", "value", "keyBase64", "valueBase64", "headers", "Key", "header")})


def junk_lines() -> st.SearchStrategy[bytes]:
    """Lines that may be anything: random bytes, hostile JSON, huge lines."""
    return st.one_of(
        st.binary(max_size=60).map(lambda data: data.replace(b"\n", b"")),
        MESSAGE_JSON.map(lambda obj: json.dumps(obj).encode()),
        JUNK_JSON.map(lambda obj: json.dumps(obj).encode()),
        st.integers(300, 3000).map(lambda size: b"k\t" + b"x" * size),  # over max_line=256
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(valid_lines(), junk_lines()), max_size=25),
       st.integers(1, 97))
def test_b3_fuzzed_input_accepts_every_valid_line_and_loses_none_to_a_bad_one(items, chunk):
    data = b"".join((item[0] if isinstance(item, tuple) else item) + b"\n" for item in items)
    outcomes = read_all(data, chunk=chunk, limit=1 << 20, max_line=256)
    by_number = {outcome.number: outcome for outcome in outcomes}
    assert len(by_number) == len(outcomes)  # one outcome per line at most
    assert [outcome.number for outcome in outcomes] == sorted(by_number)
    for number, item in enumerate(items, start=1):
        if isinstance(item, tuple):
            line, record = item
            if len(line) > 256:
                assert isinstance(by_number[number], Refused)
                continue
            outcome = by_number[number]
            assert isinstance(outcome, Accepted), (line, outcome)
            assert outcome.record == record
        elif number not in by_number:  # only a blank line has no outcome
            assert is_blank(item.decode("utf-8").removesuffix("\r"))
    accepted = [outcome.record for outcome in outcomes if isinstance(outcome, Accepted)]
    writable(accepted)  # the writer's batch: nothing accepted can fail it


@settings(max_examples=200, deadline=None)
@given(MESSAGE_JSON)
def test_b3_a_json_line_is_accepted_only_if_the_producer_can_write_it(obj):
    line = json.dumps(obj)
    try:
        record = parse_line(line)
    except MalformedLine as exc:
        assert str(exc)  # said, with a reason
        return
    outgoing(*record)  # never raises for what was accepted


# --- L5: strict JSON lines -----------------------------------------------------------------


@pytest.mark.parametrize(("line", "named"), [
    ('{"Key": "k3", "value": "v"}', "unknown field 'Key'"),
    ('{"key": "k", "value": "v", "header": {"a": "b"}}', "unknown field 'header'"),
    ('{"key": "k", "value": "v", "extra": 1}', "unknown field 'extra'"),
    ('{"key": "k", "value": 5}', "'value' must be a string, got a number"),
    ('{"key": "k", "value": null}', "'value' must be a string, got null"),
    ('{"key": "k", "value": true}', "'value' must be a string, got a boolean"),
    ('{"key": "k", "value": {"nested": 1}}', "'value' must be a string, got an object"),
    ('{"key": "k", "value": [1]}', "'value' must be a string, got an array"),
    ('{"key": 5, "value": "v"}', "'key' must be a string or null, got a number"),
    ('{"key": "k", "keyBase64": null, "value": "v"}', "'key' or 'keyBase64', not both"),
    ('{"key": "k", "keyBase64": "aw==", "value": "v"}', "'key' or 'keyBase64', not both"),
    ('{"key": "k", "value": "v", "value": "w"}', "field 'value' given twice"),
    ('{"key": "k", "value": "v", "headers": null}', "'headers' must be an object"),
    ('{"key": "k", "valueBase64": null}', "'valueBase64' must be a base64 string"),
])
def test_l5_a_json_line_with_an_unknown_field_or_a_non_string_value_is_malformed(line, named):
    with pytest.raises(MalformedLine, match=named):
        parse_line(line)


def test_l5_consume_output_lines_replay():
    lines = [
        json_line("p:v1:0", "1-0", b"k", b"v", {}, "m-1"),
        json_line("p:v1:1", "1-1", None, b"keyless", {"trace": b"t"}, None),
        json_line("p:v1:0", "1-2", b"\xff", b"\x80bin", {"b": b"\xfe"}, "m-1"),
    ]
    assert [parse_line(line) for line in lines] == [
        ("k", "v"), (None, "keyless", {"trace": "t"}), (b"\xff", b"\x80bin", {"b": b"\xfe"})]


def test_l5_send_without_a_codec_takes_str_or_bytes_and_a_none_key_stays_keyless():
    core = ProducerCore()
    delivery = core.delivery([("k", "v"), (b"k", b"v"), (None, "v")])
    assert delivery is not None
    for record, named in [((5, "v"), "record 0: key: expected str or bytes, got int"),
                          (("k", 5), "record 0: value: expected str or bytes, got int"),
                          (("k", None), "record 0: value: expected str or bytes, got NoneType"),
                          (("k", {"a": 1}), "record 0: value: expected str or bytes, got dict")]:
        with pytest.raises(TypeError, match=named):
            core.delivery([record])
    with pytest.raises(ValueError, match="record 0: key: not encodable as UTF-8"):
        core.delivery([(SURROGATE, "v")])


async def test_l5_send_refuses_other_types_before_anything_is_written(coordinator):
    streams = await set_shards(coordinator.url, "orders", "billing", 2)
    async with open_producer(coordinator.url, coordinator.redis_url, "orders") as producer:
        with pytest.raises(TypeError, match="value: expected str or bytes, got int"):
            await producer.send("k", 5)
        with pytest.raises(TypeError, match="key: expected str or bytes, got int"):
            await producer.send_batch([("a", "1"), (7, "2")])
        await producer.send(None, "keyless")
    client = redis.Redis.from_url(coordinator.redis_url)
    try:
        entries = [fields for stream in streams for _, fields in client.xrange(stream)]
    finally:
        client.close()
    assert entries == [{b"value": b"keyless"}]  # nothing of the refused batch, no key field


# --- B3 with real processes ----------------------------------------------------------------


async def produce(coordinator, prefix: str, stdin: bytes) -> tuple[int, list[str]]:
    with trio.fail_after(60):
        result = await trio.run_process(
            [sys.executable, "-m", "rsc", "produce", prefix, "--coordinator", coordinator.url,
             "--redis-url", coordinator.redis_url], stdin=stdin, capture_stdout=True,
            capture_stderr=True, check=False, cwd=ROOT, env=tool_env())
    return result.returncode, [log_message(line) for line in result.stderr.decode().splitlines()]


def stored_values(redis_url: str, streams: list[str]) -> list[Any]:
    client = redis.Redis.from_url(redis_url)
    try:
        entries: Any = [client.xrange(stream) for stream in streams]
        return sorted((fields.get(b"key"), fields[b"value"]) for stream_entries in entries
                      for _, fields in stream_entries)
    finally:
        client.close()


async def test_b3_a_lone_surrogate_line_costs_no_other_line_real_process(coordinator):
    streams = await set_shards(coordinator.url, "P", "g", 2)
    code, stderr = await produce(
        coordinator, "P", b'a\t1\nb\t2\n{"key":"c","value":"\\ud800"}\nd\t4\n')
    assert code == 1, stderr
    assert not any("Traceback" in line for line in stderr), stderr
    assert any(line.startswith("rsc produce: line 3: malformed: value: not encodable as UTF-8")
               for line in stderr), stderr
    assert stored_values(coordinator.redis_url, streams) == [
        (b"a", b"1"), (b"b", b"2"), (b"d", b"4")]


async def test_b3_surrogates_in_keys_and_headers_and_l5_typos_cost_no_line_real_process(
        coordinator):
    streams = await set_shards(coordinator.url, "P", "g", 2)
    rng = random.Random(41)
    good = [f"k{n}\tv{n}".encode() for n in range(300)]
    bad = [b'{"key":"\\udfff","value":"x"}',
           b'{"key":"k","value":"x","headers":{"\\ud800":"y"}}',
           b'{"key":"k","value":"x","headers":{"h":"\\udc00"}}',
           b'{"Key":"k3","value":"v"}', b'{"key":"k","value":5}', b"\xff\xfe", b"{",
           b"x" * (10 << 20)]  # a line longer than any 1 MiB message can be
    lines = good + bad
    rng.shuffle(lines)
    code, stderr = await produce(coordinator, "P", b"\n".join(lines) + b"\n")
    assert code == 1, stderr
    assert not any("Traceback" in line for line in stderr), stderr
    reported = sorted(int(line.split()[3].rstrip(":")) for line in stderr
                      if line.startswith("rsc produce: line "))
    assert reported == sorted(lines.index(line) + 1 for line in bad)
    assert any(line.startswith("rsc produce: sent 300,") and line.endswith("malformed 8")
               for line in stderr), stderr
    assert stored_values(coordinator.redis_url, streams) == sorted(
        (f"k{n}".encode(), f"v{n}".encode()) for n in range(300))
