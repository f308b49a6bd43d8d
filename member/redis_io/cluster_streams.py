"""The data plane on a Redis Cluster: every command goes to the node that owns its key's slot.

`NodeRouter` groups commands by the master owning each one's first key and
sends one pipeline per node (no cross-slot command is ever built: each
command and script call names keys of one shard, which all share the shard's
hash tag). It follows redirections: `ASK` (one command re-sent to the
importing node after ASKING), `MOVED`, `TRYAGAIN`, `CLUSTERDOWN` and a lost
node (the slot map is read again, then the rest retried, a few times with a
short pause: a failover takes a few seconds, after which the caller's own
retry takes over).

`ClusterStreamOps` and `ClusterProduceOps` are `StreamOps` and `ProduceOps`
over a router (their claims, acks, scripts and lag are the base classes', sent through
the router's `execute`); `rsc.member.redis_io.ops` hands them out for a `RedisCluster` client.
Reads differ in one way: XREADGROUP names one stream per call in a cluster
(one slot), so a read is one non-blocking XREADGROUP per shard,
pipelined per node, repeated with a short growing pause (POLL_MIN_S ..
POLL_MAX_S) until entries arrive or `block_ms` has passed; a read never waits
longer than `block_ms`. `send_read` only queues the read; `receive_read` runs
the oldest one, so the reader's one-read-ahead protocol holds unchanged.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence

import redis
from redis.cluster import ClusterNode
from redis.connection import Connection
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    TryAgainError,
)

from rsc.common.lua import Command, Reply, Word
from rsc.common.server_features import supports_xackdel
from rsc.member.redis_io.stream_commands import (
    PRODUCE_SCRIPT,
    StreamEntries,
    by_stream,
    read_command,
)
from rsc.member.redis_io.streams import (
    ProduceOps,
    StreamOps,
    unparsed_client,
)

ATTEMPTS = 6
RETRY_PAUSE_S = 0.05
POLL_MIN_S = 0.002
POLL_MAX_S = 0.05



class NodeRouter:
    """Pipelines of commands, one per master node, redirections followed."""

    def __init__(self, cluster: redis.RedisCluster) -> None:
        self.cluster = cluster
        self._unparsed: dict[str, redis.Redis] = {}

    def _client(self, node: ClusterNode) -> redis.Redis:
        """The node's connections, stream replies left as the server sent them."""
        pool = node.redis_connection.connection_pool
        client = self._unparsed.get(node.name)
        if client is None or client.connection_pool is not pool:
            client = self._unparsed[node.name] = unparsed_client(pool)
        return client

    def _refresh(self) -> None:
        try:
            self.cluster.nodes_manager.initialize()
        except redis.RedisError:
            pass  # no node answered yet: the next attempt tries again

    def execute(self, commands: Sequence[Command]) -> list[Reply]:
        """Each command's reply (errors returned, not raised), in order.

        A command still redirected (MOVED, ASK, TRYAGAIN, CLUSTERDOWN) after
        ATTEMPTS rounds gets that last reply. Raises the last connection error
        (or slot-map error) when a command could not be delivered at all.
        """
        results: list[Reply] = [None] * len(commands)
        pending = list(range(len(commands)))
        asking: dict[int, ClusterNode] = {}
        redirected: dict[int, Exception] = {}  # the last redirection each command got
        last_error: Exception | None = None
        for attempt in range(ATTEMPTS):
            by_node: dict[str, tuple[ClusterNode, list[int]]] = {}
            retry: list[int] = []
            for index in pending:
                node = asking.get(index)
                if node is None:
                    try:
                        node = self.cluster.nodes_manager.get_node_from_slot(
                            self.cluster.keyslot(commands[index][0]))
                    except redis.RedisError as exc:  # slot not covered (yet)
                        last_error = exc
                        redirected.pop(index, None)
                        retry.append(index)
                        continue
                by_node.setdefault(node.name, (node, []))[1].append(index)
            refresh = bool(retry)
            sent = []  # every node's pipeline is written before any reply is read: the
            for node, indexes in by_node.values():  # masters work on them at the same time
                try:
                    sent.append((self._send(node, [(commands[i][1], i in asking) for i in indexes]),
                                 indexes))
                except (redis.ConnectionError, redis.TimeoutError) as exc:
                    last_error, refresh = exc, True
                    retry += indexes
                    for index in indexes:
                        redirected.pop(index, None)
            for (client, connection, shape), indexes in sent:
                try:
                    replies = self._receive(client, connection, shape)
                except (redis.ConnectionError, redis.TimeoutError) as exc:
                    last_error, refresh = exc, True
                    retry += indexes
                    for index in indexes:
                        redirected.pop(index, None)
                    continue
                for index, reply in zip(indexes, replies, strict=True):
                    asking.pop(index, None)
                    if isinstance(reply, AskError | TryAgainError | ClusterDownError):
                        redirected[index] = reply  # (MovedError is an AskError)
                    if isinstance(reply, MovedError):
                        refresh = True
                        retry.append(index)
                    elif isinstance(reply, AskError):
                        target = self.cluster.get_node(host=reply.host, port=reply.port)
                        if target is None:
                            refresh = True
                        else:
                            asking[index] = target
                        retry.append(index)
                    elif isinstance(reply, TryAgainError | ClusterDownError):
                        retry.append(index)
                    else:
                        results[index] = reply
            if not retry:
                return results
            pending = sorted(retry)
            if attempt + 1 < ATTEMPTS:
                if refresh:
                    self._refresh()
                if any(index not in asking for index in pending):
                    time.sleep(RETRY_PAUSE_S * (attempt + 1))
        if all(index in redirected for index in pending):
            for index in pending:
                results[index] = redirected[index]
            return results
        assert last_error is not None
        raise last_error

    def _send(self, node: ClusterNode, commands: Sequence[tuple[Sequence[Word], bool]]
              ) -> tuple[redis.Redis, Connection, list[tuple[str, bool]]]:
        """Write one node's commands (each after ASKING where asked) in one packet."""
        client = self._client(node)
        connection = client.connection_pool.get_connection()
        words: list[Sequence[Word]] = []
        shape = []
        for command, ask in commands:
            if ask:
                words.append(("ASKING",))
            words.append(command)
            shape.append((str(command[0]), ask))
        try:
            connection.send_packed_command(connection.pack_commands(words))
        except BaseException:
            connection.disconnect()
            client.connection_pool.release(connection)
            raise
        return client, connection, shape

    def _receive(self, client: redis.Redis, connection: Connection, shape: Sequence[tuple[str, bool]]
                 ) -> list[Reply]:
        """Read the replies `_send` asked for; error replies are returned in place."""
        replies: list[Reply] = []
        try:
            for name, ask in shape:
                if ask:
                    try:
                        client.parse_response(connection, "ASKING")
                    except redis.ResponseError:
                        pass  # the command's own reply says what went wrong
                try:
                    replies.append(client.parse_response(connection, name))
                except redis.ResponseError as exc:
                    replies.append(exc)
        except BaseException:
            connection.disconnect()  # replies may be left on it
            raise
        finally:
            client.connection_pool.release(connection)
        return replies

    def call(self, key: str, *words: Word) -> Reply:
        """One command; its error raised."""
        reply = self.execute([(key, words)])[0]
        if isinstance(reply, Exception):
            raise reply
        return reply


class ClusterStreamOps(StreamOps):
    """`StreamOps` on a Redis Cluster: per-shard commands sent to the owning node."""

    def __init__(self, client: redis.RedisCluster, consumer_group: str, consumer: str, *,
                 use_xackdel: bool | None = None) -> None:
        # no super().__init__: a cluster client has no single connection pool to share
        self.client = client  # type: ignore[assignment]
        self.consumer_group = consumer_group
        self.consumer = consumer
        self.use_xackdel = supports_xackdel(client) if use_xackdel is None else use_xackdel
        self.router = NodeRouter(client)
        self._execute = self.router.execute  # every other command: to its shard's node
        self._load = client.script_load  # on every master
        self._queued_reads: deque[tuple[tuple[str, ...], int, int]] = deque()
        self.reads_sent = 0

    # --- reads: queued by send_read, run by receive_read ---------------------------

    def send_read(self, shards: Sequence[str], *, count: int, block_ms: int) -> None:
        self._queued_reads.append((tuple(shards), count, block_ms))
        self.reads_sent += 1

    def receive_read(self) -> StreamEntries:
        if not self._queued_reads:
            raise RuntimeError("no read in flight")
        shards, count, block_ms = self._queued_reads[0]
        try:
            reply = self.read_new_raw(shards, count=count, block_ms=block_ms)
        except BaseException:
            self.reset_reads()
            raise
        self._queued_reads.popleft()
        self.reads_sent -= 1
        return reply

    def reset_reads(self) -> None:
        self._queued_reads.clear()
        self.reads_sent = 0

    def read_new_raw(self, shards: Sequence[str], *, count: int, block_ms: int) -> StreamEntries:
        """Never-delivered entries of `shards`, waiting up to block_ms (0: not at all) for some."""
        if not shards:
            return []
        commands = [(shard, read_command(self.consumer_group, self.consumer, [shard], count=count,
                                         block_ms=None)) for shard in shards]
        deadline = time.monotonic() + max(block_ms, 0) / 1000
        pause = POLL_MIN_S
        while True:
            found: StreamEntries = []
            for reply in self.router.execute(commands):
                if isinstance(reply, Exception):
                    raise reply
                found += [(stream, entries) for stream, entries in by_stream(reply) if entries]
            remaining = deadline - time.monotonic()
            if found or remaining <= 0:
                return found
            time.sleep(min(pause, remaining))
            pause = min(pause * 2, POLL_MAX_S)

    def _call(self, key: str, *words: Word) -> Reply:
        return self.router.call(key, *words)


class ClusterProduceOps(ProduceOps):
    """`ProduceOps` on a Redis Cluster: each XADD script call sent to its shard's node."""

    def __init__(self, client: redis.RedisCluster) -> None:
        self.client = client  # type: ignore[assignment]
        self.router = NodeRouter(client)
        self._execute = self.router.execute  # each script call to its shard's node
        self._load = client.script_load  # on every master

    def prepare(self) -> None:
        """Load the script on every master now (before a producer accepts input)."""
        self._load(PRODUCE_SCRIPT.text)
