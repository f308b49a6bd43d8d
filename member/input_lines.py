"""`rsc produce`'s input: stdin lines, `key<TAB>value` or a JSON object, read into a bounded channel.

`parse_line` and `LineSplitter` are pure; `read_lines` reads a file descriptor in a
thread that cancellation abandons (so Ctrl-C works on a terminal too) and stops
reading while the channel is full. A malformed line is said (`line N: malformed:
...`), counted and skipped; nothing else is lost.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import trio

READ_CHUNK = 1 << 16


class MalformedLine(ValueError):
    """A produce input line that is neither `key<TAB>value` nor a JSON object with both."""


def parse_line(line: str) -> tuple[str, str]:
    """(key, value) of one input line; JSON values that are not strings stay JSON text."""
    if line.lstrip().startswith("{"):
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise MalformedLine(f"invalid JSON: {exc}") from None
        if not isinstance(obj, dict) or "key" not in obj or "value" not in obj:
            raise MalformedLine("a JSON line needs an object with 'key' and 'value'")
        if not isinstance(obj["key"], str):
            raise MalformedLine("'key' must be a string")
        value = obj["value"]
        return obj["key"], value if isinstance(value, str) else json.dumps(value)
    key, tab, value = line.partition("\t")
    if not tab:
        raise MalformedLine("expected key<TAB>value or a JSON object")
    return key, value


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


async def read_lines(fd: int, lines_in: trio.MemorySendChannel[tuple[str, str]],
                     counts: dict[str, int], say: Callable[[str], None]) -> None:
    """Parse input lines into the bounded channel: no more is read while it is full."""
    splitter = LineSplitter()
    while True:
        # a thread read that cancellation abandons, so Ctrl-C works on a terminal too
        data = await trio.to_thread.run_sync(os.read, fd, READ_CHUNK, abandon_on_cancel=True)
        for raw in splitter.feed(data) if data else splitter.finish():
            counts["line"] += 1
            try:
                record = parse_line(raw.decode("utf-8").removesuffix("\r"))
            except (MalformedLine, UnicodeDecodeError) as exc:
                counts["malformed"] += 1
                say(f"line {counts['line']}: malformed: {exc}")
                continue
            await lines_in.send(record)
            counts["accepted"] += 1
        if not data:
            return
