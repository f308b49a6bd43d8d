"""The data plane's native executor: reads, acks and a producer's writes on trio-driven
connections (rsc/common/trio_redis.py), no thread hop per round trip, where the Redis URL names
one plain server.

The same commands and replies as `StreamOps` (streams.py) over redis-py, from the same builders
and parsers (stream_commands.py):
- reads: XREADGROUP over the readable shards, pipelined (the next read may be sent before the
  last one's reply is in), on a connection of their own; any error drops that connection with
  everything in flight;
- acks: the owner-checking ack script (rsc/common/scripts/ack.lua) by EVALSHA, every call in
  one write, with the one NOSCRIPT fallback (rsc/common/lua.py's `ScriptPlan`); a shard not
  ours answers NOT_OWNER;
- the workers' attempt records (P1): the owner-checked attempt script, the same way, on a
  connection of each call's own (idle ones are used again), as workers record at once;
- a producer's writes (`NativeProduceOps`, without --min-replicas): the seal-checking produce
  script, the records of one batch in one write, each reply read as `ProduceOps.write` does.
Claims, lag, WAIT (K5) and the rest stay on redis-py. `native_ops` says None for a Cluster, a
Sentinel URL or a unix socket: `dataplane.open_stream_ops` then runs `StreamOps` in a thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import trio

from rsc.common.trio_redis import Settings, TrioRedis, settings_of
from rsc.member.redis_io.stream_commands import (
    ACK_SCRIPT,
    ATTEMPT_SCRIPT,
    PRODUCE_SCRIPT,
    StreamEntries,
    WriteResult,
    ack_calls,
    acked_counts,
    attempt_call,
    attempt_outcome,
    by_stream,
    produce_calls,
    read_command,
    write_result,
)


class NativeStreamOps:
    """Reads, acks and attempt records of one consumer (memberId) of one consumer group over
    trio connections (a `dataplane.StreamOps`)."""

    def __init__(self, settings: Settings, consumer_group: str, consumer: str, *,
                 use_xackdel: bool) -> None:
        self.settings = settings
        self.consumer_group = consumer_group
        self.consumer = consumer
        self.use_xackdel = use_xackdel
        self._reads: TrioRedis | None = None
        self._acks: TrioRedis | None = None
        self._attempts: list[TrioRedis] = []  # idle connections for attempt records

    @property
    def reads_sent(self) -> int:
        """XREADGROUPs sent by `send_read` whose replies were not received yet."""
        return 0 if self._reads is None else self._reads.in_flight

    async def read(self, sends: Sequence[Sequence[str]], *, count: int,
                   block_ms: int) -> StreamEntries:
        """Send one read per element of `sends`, then receive the oldest read in flight
        ([] when none is)."""
        for shards in sends:
            await self.send_read(shards, count=count, block_ms=block_ms)
        if self._reads is None or not self._reads.in_flight:
            return []
        return await self.receive_read()

    async def send_read(self, shards: Sequence[str], *, count: int, block_ms: int) -> None:
        """Send one XREADGROUP for never-delivered entries of `shards`; `receive_read` answers."""
        if self._reads is None or self._reads.closed:
            self._reads = await TrioRedis.open(self.settings)
        await self._reads.send([read_command(self.consumer_group, self.consumer, shards,
                                             count=count, block_ms=block_ms)])

    async def receive_read(self) -> StreamEntries:
        """The reply to the oldest read sent: [(shard, [[id, [field, value, ...]], ...]), ...]."""
        if self._reads is None or not self._reads.in_flight:
            raise RuntimeError("no read in flight")
        reply = await self._reads.receive()
        if isinstance(reply, Exception):
            await self.reset_reads()
            raise reply
        return by_stream(reply)

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
        return acked_counts(calls, await self._acks.run(ACK_SCRIPT.plan(calls)))

    async def record_attempt(self, shard: str, entry_id: str, count: int) -> int:
        """Set a pending entry's delivery count to `count` before a handler call (P1), while the
        owner token names this member: RECORDED, NOT_PENDING or NOT_OWNER (attempt.lua). One
        call at a time per connection: an idle one, else a new one, kept unless it failed."""
        call = attempt_call(shard, self.consumer_group, self.consumer, entry_id, count)
        idle = self._attempts
        connection = idle.pop() if idle else await TrioRedis.open(self.settings, decode=True)
        try:
            [reply] = await connection.run(ATTEMPT_SCRIPT.plan([call]))
        finally:
            if not connection.closed:  # (a failed or cancelled round trip closed it)
                idle.append(connection)
        return attempt_outcome(reply)

    async def aclose(self) -> None:
        """Close every connection, at once even when cancelled (each closes forcefully)."""
        connections, self._attempts = [self._reads, self._acks, *self._attempts], []
        self._reads = self._acks = None
        with trio.CancelScope(shield=True):  # a cancelled close must not skip the others
            for connection in connections:
                if connection is not None:
                    await connection.aclose()


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
        plan = PRODUCE_SCRIPT.plan(produce_calls(records))
        return [write_result(reply) for reply in await self._connection.run(plan)]

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
