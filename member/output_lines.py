"""`rsc consume`'s output: one JSON line per message on stdout, one per member event on stderr.

A closed stdout pipe (`| head -1`) stops the consumer cleanly: the message that
could not be printed raises `PipeClosed`, so it is not acked.
"""

from __future__ import annotations

import json
import os
import select
import stat
import sys
from collections.abc import Callable
from typing import TextIO

import trio

from rsc.member.reconcile import Event
from rsc.member.runtime import Message


def message_line(message: Message) -> str:
    """The stdout line of one processed message."""
    return json.dumps({"shard": message.shard, "id": message.id, "key": message.key,
                       "value": message.value, "memberId": message.member_id},
                      separators=(",", ":"), ensure_ascii=False)


def event_line(member_id: str, event: Event) -> str:
    """The stderr line of one member event (`--events`)."""
    return json.dumps({"event": event.name, "memberId": member_id,
                       "memberEpoch": event.member_epoch, "shards": list(event.shards),
                       "reason": event.reason}, separators=(",", ":"), ensure_ascii=False)


class PipeClosed(Exception):
    """Nobody reads stdout any more: the message was not printed, so it is not acked."""


class StdoutLines:
    """Message lines on stdout; a closed pipe (`| head -1`) stops the consumer cleanly."""

    def __init__(self, on_closed: Callable[[], None], stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.closed = False
        self._on_closed = on_closed

    def write(self, line: str) -> None:
        if self.closed:
            raise PipeClosed
        try:
            self.stream.write(line + "\n")
            self.stream.flush()
        except BrokenPipeError:
            self._close()
            raise PipeClosed from None

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
