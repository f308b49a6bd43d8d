"""`rsc consume`'s output: one JSON line per message on stdout, one per member event on stderr.

A message's key and value print as text when they are valid UTF-8, else as base64
(`keyBase64`, `valueBase64`); a keyless message has `"key": null`; headers print
when there are any.

A closed stdout pipe (`| head -1`) stops the consumer cleanly: the message that
could not be printed raises `PipeClosed`, so it is not acked.
"""

from __future__ import annotations

import base64
import json
import os
import select
import stat
import sys
import time
from collections.abc import Callable, Mapping
from typing import TextIO

import trio

from rsc.common.log_lines import utc_timestamp
from rsc.member.pure.reconcile import Event
from rsc.member.shells.runtime import Message

# one encoder for every line: json.dumps with these options builds a new one per call
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def message_line(message: Message) -> str:
    """The stdout line of one processed message."""
    return json_line(message.shard, message.id, message.key_bytes, message.value_bytes,
                     message.headers, message.member_id)


def json_line(shard: str, entry_id: str, key: bytes | None, value: bytes,
              headers: Mapping[str, bytes], member_id: str | None) -> str:
    """One message as a JSON line: `key` and `value` as text when they are valid UTF-8, else
    `keyBase64` / `valueBase64` (M1); `"key": null` for a keyless message (M3); `headers`
    when it has any (M2), as `headersBase64` when one of them is not valid UTF-8."""
    obj: dict[str, object] = {"shard": shard, "id": entry_id}
    if key is None:
        obj["key"] = None
    else:
        _text_or_base64(obj, "key", key)
    _text_or_base64(obj, "value", value)
    if headers:
        try:
            obj["headers"] = {name: data.decode("utf-8") for name, data in headers.items()}
        except UnicodeDecodeError:
            obj["headersBase64"] = {name: base64.b64encode(data).decode("ascii")
                                    for name, data in headers.items()}
    obj["memberId"] = member_id
    return _encode(obj)


def _text_or_base64(obj: dict[str, object], name: str, data: bytes) -> None:
    try:
        obj[name] = data.decode("utf-8")
    except UnicodeDecodeError:
        obj[f"{name}Base64"] = base64.b64encode(data).decode("ascii")


def event_line(member_id: str, event: Event, ts: str | None = None) -> str:
    """The stderr line of one member event (`--events`): a JSON object that, like every log
    line, carries a UTC timestamp and a level (rsc/common/logs.py)."""
    return json.dumps({"event": event.name, "memberId": member_id,
                       "memberEpoch": event.member_epoch, "shards": list(event.shards),
                       "reason": event.reason, "ts": ts or utc_timestamp(time.time()),
                       "level": "INFO"}, separators=(",", ":"), ensure_ascii=False)


class PipeClosed(Exception):
    """Nobody reads stdout any more: the message was not printed, so it is not acked."""


class StdoutLines:
    """Message lines on stdout; a closed pipe (`| head -1`) stops the consumer cleanly."""

    def __init__(self, on_closed: Callable[[], None], stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.closed = False
        self._on_closed = on_closed

    def write(self, line: str, *, flush: bool = True) -> None:
        """One line; `flush` False leaves it in the stream's buffer until `flush()` (which
        `rsc consume` calls before each ack batch: a line is out before its ack)."""
        if self.closed:
            raise PipeClosed
        try:
            self.stream.write(line + "\n")
            if flush:
                self.stream.flush()
        except BrokenPipeError:
            self._close()
            raise PipeClosed from None

    def flush(self) -> bool:
        """Every line written is out: True; False once nobody reads any more (what was
        buffered is lost, so its messages must not be acked)."""
        if self.closed:
            return False
        try:
            self.stream.flush()
        except BrokenPipeError:
            self._close()
            return False
        return True

    def _close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:  # what is still buffered goes nowhere, quietly, instead of an error at exit
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass
        self._on_closed()

    async def watch(self, interval_s: float = 0.5) -> None:
        """Notice a pipe whose reader is gone while nothing is being written."""
        try:
            fd = self.stream.fileno()
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                return
        except (OSError, ValueError):
            return
        poller = select.poll()
        poller.register(fd, 0)  # POLLERR arrives unasked once the read end is closed
        while not self.closed:
            if any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0)):
                self._close()
                return
            await trio.sleep(interval_s)
