"""Messages through the console tools (docs/protocol.md M1 to M4): bytes as base64, headers,
keyless lines, the size limit, in `rsc produce`'s input and `rsc consume`'s lines.

The pure parts (an input line to a record, a message to its JSON line) without I/O; the round
trip through real `rsc produce` and `rsc consume` processes, a real redis-server and a real
coordinator.
"""

from __future__ import annotations

import base64
import json
import random
import subprocess
import sys

import pytest
import redis
import trio

from rsc.member.pure.entry import DEFAULT_MAX_MESSAGE_BYTES
from rsc.tools.input_lines import MalformedLine, is_blank, parse_line
from rsc.tools.output_lines import json_line
from tests.processes import ROOT, log_message
from tests.test_console_failures import assert_no_traceback, spawn_tool, tool_env
from tests.test_member_support import set_shards


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# --- pure: input lines --------------------------------------------------------------------


def test_a_json_line_may_give_bytes_as_base64_and_text_headers():
    assert parse_line(json.dumps({"keyBase64": b64(b"\xff\x00k"), "valueBase64": b64(b"\x80v"),
                                  "headers": {"traceparent": "00-ab", "n": "1"}})) == (
        b"\xff\x00k", b"\x80v", {"traceparent": "00-ab", "n": "1"})
    assert parse_line('{"key": "k", "valueBase64": ""}') == ("k", b"")
    assert parse_line('{"key": "k", "value": "v", "headers": {}}') == ("k", "v")
    assert parse_line(json.dumps({"key": "k", "value": "v", "headersBase64": {"b": b64(b"\xfe")}})
                      ) == ("k", "v", {"b": b"\xfe"})  # what consume prints for such a header


def test_no_key_or_a_null_key_is_keyless_and_an_empty_key_is_a_key():
    assert parse_line('{"value": "v"}') == (None, "v")
    assert parse_line('{"key": null, "value": "v"}') == (None, "v")
    assert parse_line('{"key": "", "value": "v"}') == ("", "v")
    assert parse_line("\tv") == ("", "v")


@pytest.mark.parametrize(("line", "named"), [
    ('{"key": "k", "value": "v", "valueBase64": "dg=="}', "not both"),
    ('{"key": "k", "keyBase64": "aw==", "value": "v"}', "not both"),
    ('{"key": "k", "valueBase64": "not base64!"}', "'valueBase64' is not base64"),
    ('{"key": "k", "valueBase64": 5}', "'valueBase64' must be a base64 string"),
    ('{"key": "k", "value": "v", "headers": {"n": 1}}', "'headers'"),
    ('{"key": "k", "value": "v", "headers": ["n"]}', "'headers'"),
    ('{"key": "k", "value": "v", "headers": {"": "x"}}', "'headers'"),
    ('{"key": "k", "value": "v", "headers": {"a": "x"}, "headersBase64": {"b": "eA=="}}',
     "not both"),
    ('{"key": "k", "value": "v", "headersBase64": {"b": "x!"}}', r"'headersBase64\['b'\]' is not base64"),
    ('{"key": 1, "value": "v"}', "'key' must be a string or null"),
    ('{"key": "k"}', "'value'"),
])
def test_a_json_line_that_is_not_a_message_is_malformed_naming_why(line, named):
    with pytest.raises(MalformedLine, match=named):
        parse_line(line)


def test_a_message_over_the_limit_is_malformed_naming_its_size_and_the_limit():
    value = "x" * 100
    assert parse_line(f"k\t{value}", limit=101) == ("k", value)
    with pytest.raises(MalformedLine, match="message of 102 bytes .* over the limit of 101 bytes"):
        parse_line(f"kk\t{value}", limit=101)
    headers = json.dumps({"key": "k", "value": "v", "headers": {"h": "y" * 200}})
    with pytest.raises(MalformedLine, match="over the limit of 101"):
        parse_line(headers, limit=101)  # the headers count, names included
    big = json.dumps({"key": "k", "valueBase64": b64(b"\0" * DEFAULT_MAX_MESSAGE_BYTES)})
    with pytest.raises(MalformedLine, match="1,048,577 bytes"):
        parse_line(big)  # the default is 1 MiB, counted after base64 decoding


def test_a_blank_line_is_blank_and_a_tab_is_an_empty_message():
    assert is_blank("") and is_blank("   ") and is_blank("\r")
    assert not is_blank("\t") and not is_blank(" x")


# --- pure: output lines -------------------------------------------------------------------


def test_consume_lines_show_text_as_text_and_other_bytes_as_base64():
    assert json.loads(json_line("s", "1-0", b"k", b"v", {}, "m")) == {
        "shard": "s", "id": "1-0", "key": "k", "value": "v", "memberId": "m"}
    assert json.loads(json_line("s", "1-0", b"\xff", b"\x80\x00", {"n": b"1"}, None)) == {
        "shard": "s", "id": "1-0", "keyBase64": b64(b"\xff"), "valueBase64": b64(b"\x80\x00"),
        "headers": {"n": "1"}, "memberId": None}
    assert json.loads(json_line("s", "1-0", None, "é".encode(), {}, "m"))["key"] is None
    assert json.loads(json_line("s", "1-0", None, b"v", {}, "m"))["value"] == "v"
    binary_header = json.loads(json_line("s", "1-0", b"k", b"v", {"a": b"x", "b": b"\xfe"}, "m"))
    assert binary_header["headersBase64"] == {"a": b64(b"x"), "b": b64(b"\xfe")}
    assert "headers" not in binary_header


# --- real processes ---------------------------------------------------------------------


def random_messages(rng: random.Random, count: int) -> list[dict]:
    """`count` input objects: binary values (some valid UTF-8 by chance, most not), binary
    and text keys, headers on each."""
    messages = []
    for n in range(count):
        value = rng.randbytes(rng.randrange(0, 300))
        obj: dict = {"valueBase64": b64(value), "headers": {"n": str(n), "traceparent":
                                                            f"00-{rng.randbytes(16).hex()}-01"}}
        if n % 10 == 0:  # a binary header: the whole set goes as base64
            obj["headersBase64"] = {name: b64(text.encode()) for name, text in obj.pop("headers").items()}
            obj["headersBase64"]["bin"] = b64(b"\xff\xfe" + rng.randbytes(4))
        if n % 3 == 0:
            obj["keyBase64"] = b64(rng.randbytes(rng.randrange(1, 20)))
        else:
            obj["key"] = f"key-{n % 17}"
        messages.append(obj)
    return messages


def headers_of(line: dict) -> tuple:
    """A line's headers as sorted (name, bytes) pairs, whichever form it gives them in."""
    if "headersBase64" in line:
        return tuple(sorted((name, base64.b64decode(data))
                            for name, data in line["headersBase64"].items()))
    return tuple(sorted((name, text.encode()) for name, text in line.get("headers", {}).items()))


def decoded(line: dict, name: str) -> bytes | None:
    if f"{name}Base64" in line:
        return base64.b64decode(line[f"{name}Base64"])
    return None if line[name] is None else line[name].encode("utf-8")


async def produce(coordinator, prefix: str, stdin: bytes, *extra: str) -> tuple[int, list[str]]:
    with trio.fail_after(60):
        result = await trio.run_process(
            [sys.executable, "-m", "rsc", "produce", prefix, "--coordinator", coordinator.url,
             "--redis-url", coordinator.redis_url, *extra], stdin=stdin, capture_stdout=True,
            capture_stderr=True, check=False, cwd=ROOT, env=tool_env())
    return result.returncode, [log_message(line) for line in result.stderr.decode().splitlines()]


async def consume_lines(coordinator, *args: str) -> list[dict]:
    tool = await spawn_tool("consume", *args, "--coordinator", coordinator.url,
                            "--redis-url", coordinator.redis_url, stdout=subprocess.PIPE)
    assert tool.process.stdout is not None
    out = b""
    with trio.fail_after(60):
        while chunk := await tool.process.stdout.receive_some(65536):
            out += chunk
        assert await tool.finish() == 0, tool.lines
    assert_no_traceback(tool)
    return [json.loads(line) for line in out.splitlines()]


async def test_200_binary_values_with_headers_round_trip_byte_for_byte(coordinator):
    await set_shards(coordinator.url, "orders", "billing", 4)
    sent = random_messages(random.Random(32), 200)
    stdin = "".join(json.dumps(obj) + "\n" for obj in sent).encode()
    code, stderr = await produce(coordinator, "orders", stdin)
    assert code == 0, stderr
    assert any(line.startswith("rsc produce: sent 200,") for line in stderr), stderr

    def expected(obj: dict) -> tuple:
        key = base64.b64decode(obj["keyBase64"]) if "keyBase64" in obj else obj["key"].encode()
        return key, base64.b64decode(obj["valueBase64"]), headers_of(obj)

    want = sorted(expected(obj) for obj in sent)
    peeked = await consume_lines(coordinator, "orders", "--peek")
    consumed = await consume_lines(coordinator, "orders", "billing", "--max-messages", "200")
    for lines in (peeked, consumed):
        got = sorted((decoded(line, "key"), decoded(line, "value"), headers_of(line))
                     for line in lines)
        assert got == want
    assert any("valueBase64" in line for line in consumed)  # binary values really were binary
    assert sum("headersBase64" in line for line in consumed) == 20  # and so were 20 headers
    assert {line["memberId"] is None for line in peeked} == {True}


async def test_keyless_lines_spread_over_the_shards_and_print_a_null_key(coordinator):
    streams = await set_shards(coordinator.url, "events", "audit", 4)
    stdin = b"".join(b'{"value": "e%d"}\n' % n if n % 2 else b'{"key": null, "value": "e%d"}\n' % n
                     for n in range(400))
    code, stderr = await produce(coordinator, "events", stdin)
    assert code == 0, stderr
    client = redis.Redis.from_url(coordinator.redis_url)
    try:
        lengths = [client.xlen(stream) for stream in streams]
        assert sum(lengths) == 400 and min(lengths) >= 40, lengths
        assert not any(b"key" in fields for stream in streams
                       for _, fields in client.xrange(stream))  # stored without a key field
    finally:
        client.close()
    peeked = await consume_lines(coordinator, "events", "--peek", "--max-messages", "5")
    assert len(peeked) == 5 and {line["key"] for line in peeked} == {None}


async def test_a_2_mib_message_is_refused_by_name_like_a_malformed_line(coordinator):
    streams = await set_shards(coordinator.url, "orders", "billing", 2)
    big = json.dumps({"key": "big", "valueBase64": b64(b"\1" * (2 << 20))})
    stdin = f"k1\tv1\n{big}\nk2\tv2\n".encode()
    code, stderr = await produce(coordinator, "orders", stdin)
    assert code == 1  # as for a malformed line
    assert any(line.startswith("rsc produce: line 2: malformed: message of 2,097,155 bytes")
               and "over the limit of 1,048,576 bytes" in line for line in stderr), stderr
    assert any(line.startswith("rsc produce: sent 2,") and line.endswith("malformed 1")
               for line in stderr), stderr
    client = redis.Redis.from_url(coordinator.redis_url)
    try:
        values = sorted(fields[b"value"] for s in streams for _, fields in client.xrange(s))
    finally:
        client.close()
    assert values == [b"v1", b"v2"]  # nothing else held back
    code, stderr = await produce(coordinator, "orders", f"{big}\n".encode(),
                                 "--max-message-bytes", str(3 << 20))
    assert code == 0, stderr  # a larger limit lets it through


async def test_a_blank_line_is_skipped_not_malformed(coordinator):
    streams = await set_shards(coordinator.url, "orders", "billing", 2)
    code, stderr = await produce(coordinator, "orders", b"k1\tv1\n\n  \r\nk2\tv2\n\n")
    assert code == 0, stderr
    assert not any("malformed" in line for line in stderr), stderr
    code, stderr = await produce(coordinator, "orders", b"\nbroken\n")
    assert code == 1 and any(line.startswith("rsc produce: line 2: malformed") for line in stderr)
    client = redis.Redis.from_url(coordinator.redis_url)
    try:
        assert sum(client.xlen(stream) for stream in streams) == 2
    finally:
        client.close()
