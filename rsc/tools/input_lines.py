"""`rsc produce`'s input: stdin lines, `key<TAB>value` or a JSON object, read into a bounded channel.

A JSON line may carry bytes as base64 (`valueBase64`, `keyBase64`, M1), `headers` (M2;
`headersBase64` for bytes),
and no key or `"key": null` for a keyless message (M3); a message over the size limit
(M4) is refused like a malformed line. A JSON line is strict (L5): no field but those,
and the ones `rsc consume` prints (`shard`, `id`, `memberId`: ignored, so its output
replays), a string where a string is due, one form of each field, no field twice.

Each line is checked completely before it is accepted (B3): its JSON, its base64, its
fields, its size, and that every string in it encodes as UTF-8 (a JSON `\\ud800` escape
gives a lone surrogate that does not): what is accepted is exactly what the producer
writes, so nothing one line holds can fail the write of another. A line longer than any
message under the limit can be (`max_line_bytes`) is refused without being held.

`parse_line`, `LineSplitter` and `InputReader` are pure; `read_lines` reads a file
descriptor in a thread that cancellation abandons (so Ctrl-C works on a terminal too)
and stops reading while the channel is full. A malformed line is said (`line N:
malformed: ...`), counted and skipped; nothing else is lost.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Callable

import attrs
import trio

from rsc.common.json_types import JsonObject, JsonValue
from rsc.member.pure.entry import DEFAULT_MAX_MESSAGE_BYTES, outgoing
from rsc.member.pure.producer_core import Record

READ_CHUNK = 1 << 16
LINE_SLACK_BYTES = 1 << 20  # JSON around a message: field names, escapes, spaces
LINE_EXPANSION = 8  # JSON escapes (`\u0001` is six characters for one byte) and base64

MESSAGE_FIELDS = frozenset({"key", "keyBase64", "value", "valueBase64", "headers",
                            "headersBase64"})
CONSUME_FIELDS = frozenset({"shard", "id", "memberId"})  # printed by `rsc consume`; ignored (L5)


class MalformedLine(ValueError):
    """A produce input line that is neither `key<TAB>value` nor a JSON object with a value,
    or a message over the size limit (M4): reported alike, and skipped."""


def max_line_bytes(limit: int = DEFAULT_MAX_MESSAGE_BYTES) -> int:
    """The longest input line that can still hold a message of `limit` bytes (B3)."""
    return LINE_EXPANSION * limit + LINE_SLACK_BYTES


def parse_line(line: str, *, limit: int = DEFAULT_MAX_MESSAGE_BYTES) -> Record:
    """The record of one input line: (key, value) or (key, value, headers).

    `key<TAB>value` is text. A JSON object gives `value` (a string) or `valueBase64`
    (bytes, M1), `key` or `keyBase64`, none or `"key": null` for a keyless message (M3),
    and `headers`, an object of text values, or `headersBase64` (M2); any other field but
    those `rsc consume` prints is refused (L5). A message whose key, value and headers
    take more than `limit` bytes (M4), or with a string that does not encode as UTF-8 (a
    lone surrogate), is refused (B3): a record returned here is one the producer writes."""
    if line.lstrip().startswith("{"):
        record = _json_record(line)
    else:
        key, tab, value = line.partition("\t")
        if not tab:
            raise MalformedLine("expected key<TAB>value or a JSON object")
        record = (key, value)
    try:
        outgoing(*record, limit=limit)  # what the producer checks, so it cannot refuse it later
    except (ValueError, TypeError) as exc:
        raise MalformedLine(str(exc)) from None
    return record


def _unique_fields(pairs: list[tuple[str, JsonValue]]) -> JsonObject:
    obj: JsonObject = {}
    for name, value in pairs:
        if name in obj:
            raise MalformedLine(f"field {name!r} given twice")
        obj[name] = value
    return obj


def _json_record(line: str) -> Record:
    try:
        obj = json.loads(line, object_pairs_hook=_unique_fields)
    except MalformedLine:
        raise
    except (ValueError, RecursionError) as exc:
        raise MalformedLine(f"invalid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise MalformedLine("a JSON line needs an object with 'key' and 'value'")
    unknown = sorted(name for name in obj if name not in MESSAGE_FIELDS | CONSUME_FIELDS)
    if unknown:
        allowed = ", ".join(sorted(MESSAGE_FIELDS))
        raise MalformedLine(f"unknown field {unknown[0]!r} (a line may give {allowed}; "
                            "shard, id and memberId are ignored)")
    key = _key(obj)
    _one_form(obj, "value")
    if "value" in obj:
        text = obj["value"]
        if not isinstance(text, str):
            raise MalformedLine(f"'value' must be a string, got {_json_type(text)} "
                                "(valueBase64 for bytes)")
        value: str | bytes = text
    elif "valueBase64" in obj:
        value = _base64(obj["valueBase64"], "valueBase64")
    else:
        raise MalformedLine("a JSON line needs an object with 'key' and 'value' "
                            "(or 'valueBase64'; no key: a keyless message)")
    headers = _headers(obj)
    return (key, value, headers) if headers else (key, value)


def _one_form(obj: JsonObject, name: str) -> None:
    if name in obj and f"{name}Base64" in obj:
        raise MalformedLine(f"give '{name}' or '{name}Base64', not both")


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "an object" if isinstance(value, dict) else "an array"


def _headers(obj: JsonObject) -> dict[str, str | bytes] | None:
    """`headers` (text values) or `headersBase64` (bytes, what `rsc consume` prints for a
    header that is not UTF-8), not both."""
    _one_form(obj, "headers")
    name = "headersBase64" if "headersBase64" in obj else "headers"
    if name not in obj:
        return None
    headers = obj[name]
    texts: dict[str, str] = {}
    if isinstance(headers, dict):
        texts = {header: data for header, data in headers.items()
                 if isinstance(header, str) and header and isinstance(data, str)}
    if not isinstance(headers, dict) or len(texts) != len(headers):
        raise MalformedLine(f"'{name}' must be an object of non-empty names to string values")
    if name == "headers":
        return dict(texts)
    return {header: _base64(data, f"headersBase64[{header!r}]") for header, data in texts.items()}


def _key(obj: JsonObject) -> str | bytes | None:
    """The key: text, bytes from `keyBase64`, or None (absent or null: keyless, M3)."""
    _one_form(obj, "key")
    if "keyBase64" in obj:
        return _base64(obj["keyBase64"], "keyBase64")
    text = obj.get("key")
    if text is not None and not isinstance(text, str):
        raise MalformedLine(f"'key' must be a string or null, got {_json_type(text)}")
    return text


def _base64(text: object, name: str) -> bytes:
    if not isinstance(text, str):
        raise MalformedLine(f"'{name}' must be a base64 string")
    try:
        return base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error) as exc:
        raise MalformedLine(f"'{name}' is not base64: {exc}") from None


def is_blank(line: str) -> bool:
    """A line of nothing but spaces (and a carriage return): skipped, not malformed."""
    return not line.strip(" \r")


@attrs.frozen
class TooLong:
    """A line over `max_line_bytes`: its size, counted while it was skipped, not held."""

    size: int


class LineSplitter:
    """Bytes in, complete lines out (without their newline). A line longer than
    `max_bytes` is not held: it comes out as `TooLong` once its newline (or the end) is
    read."""

    def __init__(self, max_bytes: int | None = None) -> None:
        self._max_bytes = max_bytes
        self._rest = bytearray()
        self._skipped = -1  # bytes of an over-long line read so far; -1: none

    @property
    def held(self) -> int:
        return len(self._rest)

    def feed(self, data: bytes) -> list[bytes | TooLong]:
        lines: list[bytes | TooLong] = []
        start = 0
        while (end := data.find(b"\n", start)) >= 0:
            lines.append(self._line(data[start:end]))
            start = end + 1
        self._hold(data[start:])
        return lines

    def finish(self) -> list[bytes | TooLong]:
        if self._skipped < 0 and not self._rest:
            return []
        return [self._line(b"")]

    def _hold(self, tail: bytes) -> None:
        if self._skipped >= 0:
            self._skipped += len(tail)
            return
        self._rest += tail
        if self._max_bytes is not None and len(self._rest) > self._max_bytes:
            self._skipped = len(self._rest)
            self._rest = bytearray()

    def _line(self, end: bytes) -> bytes | TooLong:
        if self._skipped >= 0:
            size, self._skipped = self._skipped + len(end), -1
            return TooLong(size)
        line = bytes(self._rest + end) if self._rest else end
        self._rest = bytearray()
        if self._max_bytes is not None and len(line) > self._max_bytes:
            return TooLong(len(line))
        return line


@attrs.frozen
class Accepted:
    """Line `number` holds `record`, checked: the producer writes it as it is."""

    number: int
    record: Record


@attrs.frozen
class Refused:
    """Line `number` is malformed, for `reason`; nothing of it is kept."""

    number: int
    reason: str


class InputReader:
    """Pure: input bytes in, one `Accepted` or `Refused` per line that is not blank out, in
    order (B3). Line numbers count every line, blank ones too."""

    def __init__(self, limit: int = DEFAULT_MAX_MESSAGE_BYTES, *,
                 max_line: int | None = None) -> None:
        self._limit = limit
        self._max_line = max_line_bytes(limit) if max_line is None else max_line
        self._splitter = LineSplitter(self._max_line)
        self.lines = 0

    @property
    def held(self) -> int:
        """Bytes of the unfinished line held (never more than the longest line)."""
        return self._splitter.held

    def feed(self, data: bytes) -> list[Accepted | Refused]:
        return self._outcomes(self._splitter.feed(data))

    def finish(self) -> list[Accepted | Refused]:
        return self._outcomes(self._splitter.finish())

    def _outcomes(self, raws: list[bytes | TooLong]) -> list[Accepted | Refused]:
        outcomes: list[Accepted | Refused] = []
        for raw in raws:
            self.lines += 1
            outcome = self._outcome(raw)
            if outcome is not None:
                outcomes.append(outcome)
        return outcomes

    def _outcome(self, raw: bytes | TooLong) -> Accepted | Refused | None:
        if isinstance(raw, TooLong):
            return Refused(self.lines, f"a line of {raw.size:,} bytes is longer than any "
                                       f"message under the limit can be ({self._max_line:,} "
                                       "bytes); skipped unread")
        try:
            text = raw.decode("utf-8").removesuffix("\r")
        except UnicodeDecodeError as exc:
            return Refused(self.lines, f"not UTF-8: {exc}")
        if is_blank(text):
            return None
        try:
            return Accepted(self.lines, parse_line(text, limit=self._limit))
        except MalformedLine as exc:
            return Refused(self.lines, str(exc))


async def read_lines(fd: int, lines_in: trio.MemorySendChannel[Accepted],
                     counts: dict[str, int], say: Callable[[str], None], *,
                     limit: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
    """Parse input lines into the bounded channel: no more is read while it is full. A
    blank line is skipped (it still counts for the line numbers)."""
    reader = InputReader(limit)
    while True:
        # a thread read that cancellation abandons, so Ctrl-C works on a terminal too
        data = await trio.to_thread.run_sync(os.read, fd, READ_CHUNK, abandon_on_cancel=True)
        for outcome in reader.feed(data) if data else reader.finish():
            counts["line"] = outcome.number
            if isinstance(outcome, Refused):
                counts["malformed"] += 1
                say(f"line {outcome.number}: malformed: {outcome.reason}")
                continue
            await lines_in.send(outcome)
            counts["accepted"] += 1
        if not data:
            return
