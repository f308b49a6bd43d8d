"""The member's reads and acks on trio-driven connections (rsc/common/trio_redis.py): no thread
hop per round trip, where the Redis URL names one plain server.

The same commands as `StreamOps` (streams.py) sends through redis-py, with the same replies:
- reads: XREADGROUP over the readable shards, pipelined (the next read may be sent before the
  last one's reply is in), on a connection of their own; any error drops that connection with
  everything in flight;
- acks: the owner-checking ack script (rsc/common/scripts/ack.lua) by EVALSHA, every call in
  one write; where Redis answers NOSCRIPT the script is loaded and those calls sent again
  (as rsc/common/lua.py's runner does); a shard not ours answers NOT_OWNER.
- a producer's writes (`NativeProduceOps`, without --min-replicas): the seal-checking produce
  script, the records of one batch in one write, each reply read as `ProduceOps.write` does.
Claims, lag, WAIT (K5) and the rest stay on redis-py. `native_ops` says None for a Cluster, a
Sentinel URL or a unix socket: the reader and the acker then use `StreamOps` in a thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from redis.exceptions import NoScriptError

from rsc.common.lua import Call, Script
from rsc.common.trio_redis import Settings, TrioRedis, settings_of
from rsc.member.streams import (
    ACK_SCRIPT,
    PRODUCE_SCRIPT,
    FlatEntry,
    WriteResult,
    _by_stream,
    ack_calls,
    acked_counts,
    write_result,
)
from rsc.protocol.routing import seal_key


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
        return acked_counts(calls, await run_script(self._acks, ACK_SCRIPT, calls))

    async def aclose(self) -> None:
        for connection in (self._reads, self._acks):
            if connection is not None:
                await connection.aclose()
        self._reads = self._acks = None


async def run_script(connection: TrioRedis, script: Script, calls: Sequence[Call]) -> list[Any]:
    """`script`'s calls by EVALSHA in one write; the calls Redis answered NOSCRIPT (a restarted
    or promoted server) are sent again once it is loaded. Replies in order, errors as values."""
    commands = [command for _, command in script.commands(calls)]
    results: list[Any] = await connection.execute(commands)
    missing = [index for index, result in enumerate(results) if isinstance(result, NoScriptError)]
    if missing:
        await connection.call("SCRIPT", "LOAD", script.text)
        again = await connection.execute([commands[index] for index in missing])
        for index, result in zip(missing, again, strict=True):
            results[index] = result
    return results


class NativeProduceOps:
    """A producer's writes (without --min-replicas) through the seal-checking produce script,
    over one trio connection: `ProduceOps.write` without its thread hop."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._connection: TrioRedis | None = None

    async def write(self, records: Sequence[tuple[str, list[bytes]]]) -> list[WriteResult]:
        """XADD each (shard, entry fields) in one round trip; per record its id or why not.

        An error of the whole round trip (connection, timeout) is raised."""
        if not records:
            return []
        if self._connection is None or self._connection.closed:
            self._connection = await TrioRedis.open(self.settings, decode=True)
        calls = [([shard, seal_key(shard)], fields) for shard, fields in records]
        return [write_result(reply) for reply in
                await run_script(self._connection, PRODUCE_SCRIPT, calls)]

    async def aclose(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.aclose()


def native_produce_ops(client: object) -> NativeProduceOps | None:
    """Native writes to the server `client` talks to, None where only redis-py can."""
    settings = settings_of(client)
    return None if settings is None else NativeProduceOps(settings)


def native_ops(client: object, consumer_group: str, consumer: str, *,
               use_xackdel: bool) -> NativeStreamOps | None:
    """Native reads and acks for the server `client` talks to, None where only redis-py can."""
    settings = settings_of(client)
    if settings is None:
        return None
    return NativeStreamOps(settings, consumer_group, consumer, use_xackdel=use_xackdel)
