"""The producer: routes each message by its partition key and writes it to its shard.

    async with open_producer("ws://127.0.0.1:8765", "redis://127.0.0.1:6379/0", "orders") as p:
        ids = await p.send_batch([("customer-7", "paid"), ("customer-9", "shipped")])

Routing comes from the coordinator (`getRouting` with `subscribe`) and is
refreshed on every routing push. A key goes to shard
`zlib.crc32(key.encode("utf-8")) % shardCount` (`protocol.shard_for_key`), the
same in every process and language. One `send_batch` is one pipeline. A write
to a sealed shard (resharding) is refused by Redis; the producer then fetches
the new routing and writes the message to its new shard: nothing is lost and
the caller never sees the refusal.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import attrs
import trio

from rsc.member.session import Session, open_session
from rsc.member.streams import ProduceOps, connect
from rsc.protocol import HASH_NAME, GetRouting, Routing, Status, shard_for_key

log = logging.getLogger(__name__)


class RoutingUnavailable(Exception):
    """The coordinator has no routing for the prefix (no shards yet) within the wait."""


@attrs.frozen
class RoutingTable:
    """One routing version of a prefix: `streams[i]` is shard i."""

    version: int
    streams: tuple[str, ...]

    def stream_for(self, key: str) -> str:
        """The shard stream a partition key goes to."""
        return self.streams[shard_for_key(key, len(self.streams))]


def routing_table(message: Routing) -> RoutingTable | None:
    """The table of an OK routing message, None for UNKNOWN_STREAM; refuses unknown hashes."""
    if message.status != Status.OK or not message.streams or message.version is None:
        return None
    if message.hash not in (None, HASH_NAME):
        raise ValueError(f"routing uses hash {message.hash!r}; this producer knows {HASH_NAME!r}")
    return RoutingTable(version=message.version, streams=tuple(message.streams))


class Producer:
    """Writes messages of one stream prefix; build it with `open_producer`."""

    def __init__(self, session: Session, ops: ProduceOps, stream_prefix: str, *,
                 routing_wait_s: float, subscribe: bool = True) -> None:
        self.stream_prefix = stream_prefix
        self.subscribe = subscribe
        self.routing: RoutingTable | None = None
        self.sent = 0
        self.rerouted = 0
        self._session = session
        self._ops = ops
        self._routing_wait_s = routing_wait_s

    async def refresh(self) -> RoutingTable | None:
        """Ask the coordinator for the current routing (and subscribe to its changes, if asked)."""
        response = await self._session.request(
            GetRouting(request_id=0, stream_prefix=self.stream_prefix, subscribe=self.subscribe))
        if isinstance(response, Routing):
            self._adopt(response)
        return self.routing

    async def send(self, key: str, value: str) -> str:
        """Write one message; return its stream entry id."""
        return (await self.send_batch([(key, value)]))[0]

    async def send_batch(self, records: Sequence[tuple[str, str]]) -> list[str]:
        """Write (key, value) records in one pipeline, rerouting any refused by a sealed shard."""
        return [entry_id for _, entry_id in await self.send_batch_located(records)]

    async def send_batch_located(self, records: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        """Like `send_batch`, returning the (stream, entry id) where each record landed."""
        ids: list[tuple[str, str] | None] = [None] * len(records)
        todo = list(range(len(records)))
        while todo:
            self.adopt_pushes()
            routing = await self._routing()
            writes = [(routing.stream_for(records[i][0]), *records[i]) for i in todo]
            results = await trio.to_thread.run_sync(self._ops.write, writes)
            sealed = []
            for index, write, result in zip(todo, writes, results, strict=True):
                if result is None:
                    sealed.append(index)
                else:
                    ids[index] = (write[0], result)
            if sealed:
                self.rerouted += len(sealed)
                await self._wait_past(routing.version)
            todo = sealed
        self.sent += len(records)
        return [located for located in ids if located is not None]

    def adopt_pushes(self) -> None:
        """Adopt the routing pushes the session has received so far (never blocks)."""
        while True:
            try:
                push = self._session.pushes.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return
            if isinstance(push, Routing) and push.stream_prefix == self.stream_prefix:
                self._adopt(push)

    def _adopt(self, message: Routing) -> None:
        table = routing_table(message)
        if table is not None and (self.routing is None or table.version >= self.routing.version):
            self.routing = table

    async def _routing(self) -> RoutingTable:
        if self.routing is None:
            with trio.move_on_after(self._routing_wait_s):
                while self.routing is None:
                    await self.refresh()
                    if self.routing is None:
                        await trio.sleep(0.2)
                        self.adopt_pushes()
        if self.routing is None:
            raise RoutingUnavailable(f"no routing for stream prefix {self.stream_prefix!r}")
        return self.routing

    async def _wait_past(self, version: int) -> None:
        """Refresh until the routing is newer than the sealed `version`."""
        delay = 0.01
        while True:
            await self.refresh()
            if self.routing is not None and self.routing.version > version:
                return
            await trio.sleep(delay)
            delay = min(delay * 2, 0.5)


@asynccontextmanager
async def open_producer(coordinator_url: str, redis_url: str, stream_prefix: str, *,
                        token: str | None = None, routing_wait_s: float = 30.0,
                        subscribe: bool = True) -> AsyncIterator[Producer]:
    """A producer with its coordinator session, routing subscription and Redis connection.

    `subscribe=False` makes a producer that only learns new routing when a write
    to a sealed version is refused (it still never loses a message).
    """
    client = connect(redis_url)
    try:
        async with open_session(coordinator_url, "member", token=token) as session:
            producer = Producer(session, ProduceOps(client), stream_prefix,
                                routing_wait_s=routing_wait_s, subscribe=subscribe)
            await producer.refresh()
            yield producer
    finally:
        client.close()
