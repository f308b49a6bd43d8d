"""`rsc consume PREFIX --peek` and `--max-messages N` (docs/protocol.md, Command line).

`--max-messages N` stops a consumer after N messages handled and acked: the
quota (`MessageQuota`, pure) lets N handler calls print, and the members' read
budget (member/pure/budget.py) reads no more than N entries, so none is left pending.
Should a later one still come (a safety net), it raises `QuotaReached` before
printing: it is neither shown nor acked, and stays pending for the next owner
(nothing goes into a pipe nobody reads).

`--peek` joins no group and acks nothing: it asks the coordinator for the
prefix's current routing and reads its shard streams with XRANGE, printing the
same JSON lines as `rsc consume` (with `memberId` null), up to N of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import trio

from rsc.member.pure.entry import read_fields
from rsc.member.redis_io.streams import connect
from rsc.protocol import GetRouting, Routing, Status
from rsc.tools.output_lines import json_line

PEEK_CHUNK = 500


class QuotaReached(Exception):
    """`--max-messages` were handled: this message is not printed, so it is not acked."""


class MessageQuota:
    """At most `limit` handler calls print (None: no limit)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.taken = 0

    def take(self) -> bool:
        """One more message may be handled; False once the limit is reached."""
        if self.limit is not None and self.taken >= self.limit:
            return False
        self.taken += 1
        return True

    @property
    def reached(self) -> bool:
        return self.limit is not None and self.taken >= self.limit


def peek_line(shard: str, entry_id: str | bytes, fields: Any) -> str:
    """A peeked entry (fields as the server sent them), in the shape of `rsc consume`'s
    lines (no member handled it)."""
    key, value, headers = read_fields(fields)
    if entry_id.__class__ is bytes:
        entry_id = entry_id.decode()
    return json_line(shard, str(entry_id), key, value, headers, None)


def _next_id(entry_id: str | bytes) -> str:
    """The smallest id after `entry_id` (XRANGE's exclusive start, Redis 6.2+ has `(`)."""
    return f"({entry_id.decode() if isinstance(entry_id, bytes) else entry_id}"


def read_shards(client: Any, streams: tuple[str, ...], limit: int | None) -> Iterator[str]:
    """Every entry of `streams`, shard by shard, oldest first, as lines (blocking)."""
    left = limit
    for stream in streams:
        start = "-"
        while left is None or left > 0:
            count = PEEK_CHUNK if left is None else min(PEEK_CHUNK, left)
            entries = client.xrange(stream, min=start, max="+", count=count)
            if not entries:
                break
            for entry_id, fields in entries:
                yield peek_line(stream, entry_id, fields)
                if left is not None:
                    left -= 1
            start = _next_id(entries[-1][0])
        if left is not None and left <= 0:
            return


async def peek(prefix: str, *, routing: Routing, redis_url: str, limit: int | None,
               write: Callable[[str], None]) -> int:
    """Print up to `limit` entries of the routing's shards; how many were printed."""
    if routing.status != Status.OK:
        raise ValueError(f"no routing for {prefix!r}")
    client = connect(redis_url, timeout_s=10.0, decode=False)  # M1: entries are bytes
    printed = 0
    try:
        lines = read_shards(client, tuple(routing.streams or ()), limit)
        while True:
            line = await trio.to_thread.run_sync(next, lines, None)
            if line is None:
                return printed
            write(line)
            printed += 1
    finally:
        client.close()


def routing_request(prefix: str) -> GetRouting:
    return GetRouting(request_id=0, stream_prefix=prefix, subscribe=False)
