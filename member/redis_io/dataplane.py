"""The member's data plane as the reader, the acker and the workers see it: one async
`StreamOps` protocol, two executors behind it.

- native (native_streams.py): trio-driven connections, no thread hop, where the Redis URL
  names one plain server (redis://, rediss://);
- redis-py (`ThreadedStreamOps`): the sync `StreamOps` of streams.py, or its cluster variant
  (cluster_streams.py), each round trip in a worker thread; a Cluster, a Sentinel URL or a
  unix socket.

Both send the commands stream_commands.py builds and read the replies with its parsers; the
Lua scripts (the acks', the attempt records') run through the one NOSCRIPT fallback
(rsc/common/lua.py's `ScriptPlan`). Claims and lag stay on the sync ops (`streams.StreamOps`),
run in a thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import trio

from rsc.member.redis_io import streams
from rsc.member.redis_io.native_streams import native_ops
from rsc.member.redis_io.stream_commands import StreamEntries


class StreamOps(Protocol):
    """Reads and acks of one consumer (memberId) of one consumer group."""

    use_xackdel: bool

    @property
    def reads_sent(self) -> int:
        """Reads sent whose replies were not received yet."""

    async def read(self, sends: Sequence[Sequence[str]], *, count: int,
                   block_ms: int) -> StreamEntries:
        """Send one XREADGROUP (never-delivered entries, BLOCK up to block_ms) per element of
        `sends`, then receive the reply to the oldest read in flight ([] when none is):
        [(shard, [[id, [field, value, ...]], ...]), ...]. Replies come in the order the reads
        were sent; on an error the caller calls `reset_reads`."""

    async def reset_reads(self) -> None:
        """Drop the read connection and whatever is in flight on it."""

    async def ack(self, ids_by_shard: Mapping[str, Sequence[str]]) -> dict[str, int]:
        """Ack entries per shard in one round trip (owner checked): the count acked per shard,
        or NOT_OWNER for a shard whose owner token names another member."""

    async def record_attempt(self, shard: str, entry_id: str, count: int) -> int:
        """Set a pending entry's delivery count to `count` before a handler call (P1), while the
        shard's owner token names this member: RECORDED, NOT_PENDING or NOT_OWNER (the attempt
        script). Workers call it at once, each for its own entry."""

    async def aclose(self) -> None:
        """Close the executor's own connections."""


class ThreadedStreamOps:
    """`StreamOps` over redis-py: the sync ops (one Redis or a cluster), one thread hop per call."""

    def __init__(self, ops: streams.StreamOps) -> None:
        self.ops = ops

    @property
    def use_xackdel(self) -> bool:
        return self.ops.use_xackdel

    @use_xackdel.setter
    def use_xackdel(self, value: bool) -> None:
        self.ops.use_xackdel = value

    @property
    def reads_sent(self) -> int:
        return self.ops.reads_sent

    async def read(self, sends: Sequence[Sequence[str]], *, count: int,
                   block_ms: int) -> StreamEntries:
        return await trio.to_thread.run_sync(self._read, sends, count, block_ms)

    def _read(self, sends: Sequence[Sequence[str]], count: int, block_ms: int) -> StreamEntries:
        ops = self.ops
        for shards in sends:
            ops.send_read(shards, count=count, block_ms=block_ms)
        return ops.receive_read() if ops.reads_sent else []

    async def reset_reads(self) -> None:
        self.ops.reset_reads()

    async def ack(self, ids_by_shard: Mapping[str, Sequence[str]]) -> dict[str, int]:
        return await trio.to_thread.run_sync(self.ops.ack, ids_by_shard)

    async def record_attempt(self, shard: str, entry_id: str, count: int) -> int:
        return await trio.to_thread.run_sync(self.ops.record_attempt, shard, entry_id, count)

    async def aclose(self) -> None:
        """Nothing of its own: the client is its opener's to close."""


def open_stream_ops(ops: streams.StreamOps) -> StreamOps:
    """The native executor for the server `ops` talks to where there is one (one plain server),
    else `ops` itself in a thread."""
    native = native_ops(ops.client, ops.consumer_group, ops.consumer, use_xackdel=ops.use_xackdel)
    return ThreadedStreamOps(ops) if native is None else native
