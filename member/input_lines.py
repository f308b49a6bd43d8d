"""`rsc produce`'s input: stdin lines, `key<TAB>value` or a JSON object, read into a bounded channel.

A JSON line may carry bytes as base64 (`valueBase64`, `keyBase64`, M1), `headers` (M2;
`headersBase64` for bytes),
and no key or `"key": null` for a keyless message (M3); a message over the size limit
(M4) is refused like a malformed line.

`parse_line` and `LineSplitter` are pure; `read_lines` reads a file descriptor in a
thread that cancellation abandons (so Ctrl-C works on a terminal too) and stops
reading while the channel is full. A malformed line is said (`line N: malformed:
...`), counted and skipped; nothing else is lost.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Callable
from typing import Any

import trio

from rsc.member.entry import DEFAULT_MAX_MESSAGE_BYTES, MessageTooLarge, outgoing
from rsc.member.producer_core import Record

READ_CHUNK = 1 << 16


class MalformedLine(ValueError):
    """A produce input line that is neither `key<TAB>value` nor a JSON object with a value,
    or a message over the size limit (M4): reported alike, and skipped."""


def parse_line(line: str, *, limit: int = DEFAULT_MAX_MESSAGE_BYTES) -> Record:
    """The record of one input line: (key, value) or (key, value, headers).

    `key<TAB>value` is text. A JSON object gives `value` (a JSON value that is not a string
    stays JSON text) or `valueBase64` (bytes, M1), `key` or `keyBase64`, none or `"key":
    null` for a keyless message (M3), and `headers`, an object of text values (M2). A message
    whose key, value and headers take more than `limit` bytes is refused (M4)."""
    if line.lstrip().startswith("{"):
        record = _json_record(line)
    else:
        key, tab, value = line.partition("\t")
        if not tab:
            raise MalformedLine("expected key<TAB>value or a JSON object")
        record = (key, value)
    try:
        outgoing(*record, limit=limit)
    except MessageTooLarge as exc:
        raise MalformedLine(str(exc)) from None
    return record


def _json_record(line: str) -> Record:
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise MalformedLine(f"invalid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise MalformedLine("a JSON line needs an object with 'key' and 'value'")
    key = _text_or_base64(obj, "key")
    if "value" in obj and "valueBase64" in obj:
        raise MalformedLine("give 'value' or 'valueBase64', not both")
    if "value" in obj:
        value: str | bytes = obj["value"] if isinstance(obj["value"], str) else json.dumps(obj["value"])
    elif "valueBase64" in obj:
        value = _base64(obj["valueBase64"], "valueBase64")
    else:
        raise MalformedLine("a JSON line needs an object with 'key' and 'value' "
                            "(or 'valueBase64'; no key: a keyless message)")
    headers = _headers(obj)
    return (key, value, headers) if headers else (key, value)


def _headers(obj: dict[str, Any]) -> dict[str, str | bytes] | None:
    """`headers` (text values) or `headersBase64` (bytes, what `rsc consume` prints for a
    header that is not UTF-8), not both."""
    text, encoded = obj.get("headers"), obj.get("headersBase64")
    if text is not None and encoded is not None:
        raise MalformedLine("give 'headers' or 'headersBase64', not both")
    name = "headers" if encoded is None else "headersBase64"
    headers = text if encoded is None else encoded
    if headers is None:
        return None
    if not isinstance(headers, dict) or not all(
            isinstance(header, str) and header and isinstance(data, str)
            for header, data in headers.items()):
        raise MalformedLine(f"'{name}' must be an object of non-empty names to string values")
    if encoded is None:
        return dict(headers)
    return {header: _base64(data, f"headersBase64[{header!r}]") for header, data in headers.items()}


def _text_or_base64(obj: dict[str, Any], name: str) -> str | bytes | None:
    """The key: text, bytes from `keyBase64`, or None (absent or null: keyless, M3)."""
    encoded = f"{name}Base64"
    if obj.get(name) is not None and obj.get(encoded) is not None:
        raise MalformedLine(f"give '{name}' or '{encoded}', not both")
    if obj.get(encoded) is not None:
        return _base64(obj[encoded], encoded)
    text = obj.get(name)
    if text is not None and not isinstance(text, str):
        raise MalformedLine(f"'{name}' must be a string or null")
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


class LineSplitter:
    """Bytes in, complete lines out (UTF-8, without their newline)."""

    def __init__(self) -> None:
        self._rest = b""

    def feed(self, data: bytes) -> list[bytes]:
        *lines, self._rest = (self._rest + data).split(b"\n")
        return lines

    def finish(self) -> list[bytes]:
        rest, self._rest = self._rest, b""
        return [rest] if rest else []


async def read_lines(fd: int, lines_in: trio.MemorySendChannel[Record],
                     counts: dict[str, int], say: Callable[[str], None], *,
                     limit: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
    """Parse input lines into the bounded channel: no more is read while it is full. A
    blank line is skipped (it still counts for the line numbers)."""
    splitter = LineSplitter()
    while True:
        # a thread read that cancellation abandons, so Ctrl-C works on a terminal too
        data = await trio.to_thread.run_sync(os.read, fd, READ_CHUNK, abandon_on_cancel=True)
        for raw in splitter.feed(data) if data else splitter.finish():
            counts["line"] += 1
            try:
                text = raw.decode("utf-8").removesuffix("\r")
                if is_blank(text):
                    continue
                record = parse_line(text, limit=limit)
            except (MalformedLine, UnicodeDecodeError) as exc:
                counts["malformed"] += 1
                say(f"line {counts['line']}: malformed: {exc}")
                continue
            await lines_in.send(record)
            counts["accepted"] += 1
        if not data:
            return
