"""The member's reads and acks on trio-driven connections (rsc/common/trio_redis.py): no thread
hop per round trip, where the Redis URL names one plain server.

The same commands as `StreamOps` (streams.py) sends through redis-py, with the same replies:
- reads: XREADGROUP over the readable shards, pipelined (the next read may be sent before the
  last one's reply is in), on a connection of their own; any error drops that connection with
  everything in flight;
- acks: the owner-checking ack script (rsc/common/scripts/ack.lua) by EVALSHA, every call in
  one write; where Redis answers NOSCRIPT the script is loaded and those calls sent again
  (as rsc/common/lua.py's runner does); a shard not ours answers NOT_OWNER.
Claims, lag and the rest stay on `StreamOps`. `native_ops` says None for a Cluster, a
Sentinel URL or a unix socket: the reader and the acker then use `StreamOps` in a thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from redis.exceptions import NoScriptError

from rsc.common.trio_redis import Settings, TrioRedis, settings_of
from rsc.member.streams import ACK_SCRIPT, FlatEntry, _by_stream, ack_calls, acked_counts


class NativeStreamOps:
    """Reads and acks of one consumer (memberId) of one consumer group over trio connections."""

    def __init__(self, settings: Settings, consumer_group: str, consumer: str, *,
                 use_xackdel: bool) -> None:
        self.settings = settings
        self.consumer_group = consumer_group
        self.consumer = consumer
        self.use_xackdel = use_xackdel
        self._reads: TrioRedis | None = None
        self._acks: TrioRedis | None = None

    @property
    def reads_sent(self) -> int:
        """XREADGROUPs sent by `send_read` whose replies were not received yet."""
        return 0 if self._reads is None else self._reads.in_flight

    async def send_read(self, shards: Sequence[str], *, count: int, block_ms: int) -> None:
        """Send one XREADGROUP for never-delivered entries of `shards`; `receive_read` answers."""
        if self._reads is None or self._reads.closed:
            self._reads = await TrioRedis.open(self.settings)
        await self._reads.send([("XREADGROUP", "GROUP", self.consumer_group, self.consumer,
                                 "COUNT", count, "BLOCK", block_ms, "STREAMS", *shards,
                                 *([">"] * len(shards)))])

    async def receive_read(self) -> list[tuple[str, list[FlatEntry]]]:
        """The reply to the oldest read sent: [(shard, [[id, [field, value, ...]], ...]), ...]."""
        if self._reads is None or not self._reads.in_flight:
            raise RuntimeError("no read in flight")
        reply = await self._reads.receive()
        if isinstance(reply, Exception):
            await self.reset_reads()
            raise reply
        return _by_stream(reply)

    async def reset_reads(self) -> None:
        """Drop the read connection and whatever is in flight on it."""
        connection, self._reads = self._reads, None
        if connection is not None:
            await connection.aclose()

    async def ack(self, ids_by_shard: Mapping[str, Sequence[str]]) -> dict[str, int]:
        """Ack entries per shard in one round trip; a shard answers NOT_OWNER if not ours."""
        calls = ack_calls(ids_by_shard, self.consumer, self.consumer_group, self.use_xackdel)
        if not calls:
            return {}
        if self._acks is None or self._acks.closed:
            self._acks = await TrioRedis.open(self.settings, decode=True)
        connection = self._acks
        commands = [command for _, command in ACK_SCRIPT.commands(calls)]
        results: list[Any] = await connection.execute(commands)
        missing = [index for index, result in enumerate(results) if isinstance(result, NoScriptError)]
        if missing:  # a restarted or promoted server: load it, send those again
            await connection.call("SCRIPT", "LOAD", ACK_SCRIPT.text)
            again = await connection.execute([commands[index] for index in missing])
            for index, result in zip(missing, again, strict=True):
                results[index] = result
        return acked_counts(calls, results)

    async def aclose(self) -> None:
        for connection in (self._reads, self._acks):
            if connection is not None:
                await connection.aclose()
        self._reads = self._acks = None


def native_ops(client: Any, consumer_group: str, consumer: str, *,
               use_xackdel: bool) -> NativeStreamOps | None:
    """Native reads and acks for the server `client` talks to, None where only redis-py can."""
    settings = settings_of(client)
    if settings is None:
        return None
    return NativeStreamOps(settings, consumer_group, consumer, use_xackdel=use_xackdel)
