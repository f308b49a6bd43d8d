"""Redis commands of the data plane, as plain blocking functions over the sync redis client.

The trio shells call these through `trio.to_thread.run_sync`; everything that
is not a blocking read is batched into one pipeline per call. Scripts:

- ack: acks (XACK, or XACKDEL where the server has it) only while the shard's
  owner token names this member; otherwise acks nothing and returns NOT_OWNER.
- produce: XADD unless the shard's seal marker exists (fails with SEALED) or
  its stream does not (fails with MISSING: retired, or not this coordinator's Redis).

The scripts are files run by the one runner (rsc/common/lua.py); XACKDEL is
asked of the server (rsc/common/server_features.py); the lag follows the one
lag rule (rsc/common/lag.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

import attrs
import redis
from redis.backoff import NoBackoff
from redis.connection import Connection, ConnectionPool
from redis.retry import Retry
from redis.typing import EncodableT, FieldT

from rsc.common.error_family import StoreMismatch as StoreMismatch  # re-exported
from rsc.common.lag import ends_commands, lag_from_ends
from rsc.common.lua import Command, Execute, Reply, Word, load_all, pipelined, reply_int
from rsc.common.permission_probe import PRODUCER_PROBES, probe_permissions
from rsc.common.redact import redact_url
from rsc.common.redis_connect import connect as connect_any
from rsc.common.server_features import supports_xackdel
from rsc.member.pure.producer_core import Refused as Refused  # re-exported
from rsc.member.pure.store_identity import StoreChanged, store_changed_line
from rsc.member.redis_io.stream_commands import (
    ACK_SCRIPT,
    ATTEMPT_SCRIPT,
    PRODUCE_SCRIPT,
    Claimed,
    FlatEntry,
    StreamEntries,
    WriteResult,
    ack_calls,
    acked_counts,
    attempt_call,
    attempt_outcome,
    autoclaim_command,
    autoclaimed,
    by_stream,
    claim_plan,
    pairs,
    pending_command,
    pending_of,
    produce_calls,
    read_command,
    write_result,
)
from rsc.member.redis_io.stream_commands import (
    NOT_OWNER as NOT_OWNER,  # re-exported
)
from rsc.member.redis_io.stream_commands import (
    NOT_PENDING as NOT_PENDING,  # re-exported
)
from rsc.member.redis_io.stream_commands import (
    RECORDED as RECORDED,  # re-exported
)

STORE_ID_KEY = "rsc:store-id"  # written by the coordinator in its Redis (Producer routing)
KEY_FIELD = "key"
VALUE_FIELD = "value"


@attrs.frozen
class Entry:
    """One stream entry read from a shard."""

    shard: str
    id: str
    fields: Mapping[str, str]

    @property
    def key(self) -> str:
        return self.fields.get(KEY_FIELD, "")

    @property
    def value(self) -> str:
        return self.fields.get(VALUE_FIELD, "")


def connect(redis_url: str, *, timeout_s: float | None = None,
            retries: bool = True, decode: bool = True) -> redis.Redis:
    """A sync client decoding replies as UTF-8 text (hiredis when installed); with
    `decode=False` replies stay bytes (the reader's: messages are bytes, M1).

    `timeout_s` bounds connecting and every reply; `retries=False` makes the
    first connection error or timeout raise, for callers that retry themselves
    (and say so). A URL that is not a Redis URL raises ValueError.

    A `RedisCluster` when the URL names a cluster node (`INFO cluster`): build the
    command objects over it with `rsc.member.redis_io.ops` (their cluster variants).
    """
    options: dict[str, object] = {}
    if timeout_s is not None:
        options.update(socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    if not retries:
        options.update(retry=Retry(NoBackoff(), 0))
    return connect_any(redis_url, decode_responses=decode,  # type: ignore[return-value]
                       socket_keepalive=True, **options)


def read_store_id(client: redis.Redis) -> str | None:
    """The storeId the coordinator wrote in this Redis, None when the key is absent."""
    value = client.get(STORE_ID_KEY)
    if isinstance(value, bytes):  # a client without decode_responses (the reader's)
        return value.decode()
    return None if value is None else str(value)


def recheck_store_id(client: redis.Redis, known: str, *, redis_url: str) -> bool:
    """K9 after a Redis reconnect: raise StoreChanged if this Redis holds another storeId than
    `known`; False while it holds none (K8: a store lost with its coordinator, being restored
    from clients), True when it holds `known`. Redis errors are raised for the caller."""
    own = read_store_id(client)
    if own is None:
        return False
    if own != known:
        raise StoreChanged(store_changed_line(f"the Redis at {redact_url(redis_url)}", known, own))
    return True


def store_id_of(message: object) -> str | None:
    """The `storeId` a routing message (or a heartbeat's routing) carries, None when absent.

    Read defensively: coordinators before storeId send none, and the message
    classes gain the field (`store_id`) separately.
    """
    value = getattr(message, "store_id", None)
    return value if isinstance(value, str) else None


def store_mismatch_line(redis_url: str, own: str | None, coordinator_url: str,
                        expected: str) -> str:
    """The one line a producer or member exits with when its Redis is another one."""
    held = f"storeId {own!r}" if own is not None else "no storeId"
    return (f"{redact_url(redis_url)} is not the coordinator's Redis: it holds {held}, the coordinator "
            f"at {coordinator_url} uses storeId {expected!r}; point --redis-url "
            "(RSC_REDIS_URL) at the coordinator's Redis")


def check_store_id(client: redis.Redis, expected: str, *, redis_url: str,
                   coordinator_url: str, recheck_s: float = 1.0) -> None:
    """Raise StoreMismatch unless this Redis holds the coordinator's storeId `expected`.

    Blocking (run it in a thread); Redis errors are raised for the caller to retry.
    An absent key is read once more after `recheck_s`: the coordinator writes it
    again whenever it is missing (a flushed Redis), while another Redis never has it.
    """
    own = read_store_id(client)
    if own is None and recheck_s > 0:
        time.sleep(recheck_s)
        own = read_store_id(client)
    if own != expected:
        raise StoreMismatch(store_mismatch_line(redis_url, own, coordinator_url, expected))


class StreamOps:
    """The data-plane commands for one consumer (memberId) of one consumer group, on one
    Redis (`rsc.member.redis_io.ops.stream_ops` picks the cluster variant for a cluster client)."""

    def __init__(self, client: redis.Redis, consumer_group: str, consumer: str, *,
                 use_xackdel: bool | None = None) -> None:
        self.client = client
        self.consumer_group = consumer_group
        self.consumer = consumer
        self.use_xackdel = supports_xackdel(client) if use_xackdel is None else use_xackdel
        self._unparsed = unparsed_client(client.connection_pool)  # the same connections
        # how commands other than the pipelined reads reach Redis (the cluster's: its router)
        self._execute: Execute = pipelined(self._unparsed)
        self._load: Callable[[str], object] = client.script_load
        self._read_connection: Connection | None = None
        self.reads_sent = 0  # XREADGROUPs sent by `send_read`, replies not yet received

    # --- pipelined reads ------------------------------------------------------------------
    # XREADGROUP on a connection of its own, where the next read may be sent before the
    # last one's reply is read: Redis works on it while this process parses the last.
    # Replies come back in the order the reads were sent. On any error the connection is
    # dropped with everything in flight (`reset_reads`).

    def send_read(self, shards: Sequence[str], *, count: int, block_ms: int) -> None:
        """Send one XREADGROUP for never-delivered entries of `shards`; `receive_read` answers."""
        if self._read_connection is None:
            self._read_connection = self.client.connection_pool.get_connection()
        try:
            self._read_connection.send_command(*read_command(
                self.consumer_group, self.consumer, shards, count=count, block_ms=block_ms))
        except BaseException:
            self.reset_reads()
            raise
        self.reads_sent += 1

    def receive_read(self) -> StreamEntries:
        """The reply to the oldest read sent: [(shard, [[id, [field, value, ...]], ...]), ...]."""
        if self._read_connection is None or not self.reads_sent:
            raise RuntimeError("no read in flight")
        try:
            reply = self._read_connection.read_response()
        except BaseException:
            self.reset_reads()
            raise
        self.reads_sent -= 1
        return by_stream(reply)

    def reset_reads(self) -> None:
        """Drop the read connection and whatever is in flight on it."""
        connection, self._read_connection, self.reads_sent = self._read_connection, None, 0
        if connection is not None:
            connection.disconnect()
            self.client.connection_pool.release(connection)

    def read_new(self, shards: Sequence[str], *, count: int, block_ms: int) -> list[Entry]:
        """One XREADGROUP over `shards` for never-delivered entries, blocking up to block_ms."""
        return [Entry(shard, entry_id, pairs(flat))
                for shard, entries in self.read_new_raw(shards, count=count, block_ms=block_ms)
                for entry_id, flat in entries if entry_id is not None]

    def read_new_raw(self, shards: Sequence[str], *, count: int, block_ms: int) -> StreamEntries:
        """`read_new` unparsed: [(shard, [[id, [field, value, ...] or None], ...]), ...]."""
        if not shards:
            return []
        return by_stream(self._unparsed.execute_command(*read_command(
            self.consumer_group, self.consumer, shards, count=count, block_ms=block_ms)))

    def claim_pending(self, shard: str, start: str, *, count: int) -> tuple[str, list[Entry]]:
        """Claim up to `count` pending entries of any consumer from `start` (XAUTOCLAIM, idle 0).

        Returns the cursor for the next call ("0-0" when the whole PEL was scanned)
        and the claimed entries; entries deleted from the stream leave the PEL.
        """
        cursor, claimed = self.claim_pending_raw(shard, start, count=count)
        return cursor, [Entry(shard, entry_id, pairs(flat))
                        for entry_id, flat in claimed if entry_id is not None]

    def claim_pending_raw(self, shard: str, start: str, *, count: int
                          ) -> tuple[str, list[FlatEntry]]:
        """`claim_pending` unparsed: (cursor, [[id, [field, value, ...] or None], ...])."""
        return autoclaimed(self._call(shard, *autoclaim_command(
            shard, self.consumer_group, self.consumer, start, count=count)))

    def claim_counted(self, shard: str, start: str, *, count: int) -> Claimed:
        """Claim up to `count` pending entries from `start` without raising their delivery
        counts (`XAUTOCLAIM ... JUSTID`), then read their counts (XPENDING) and bodies (XRANGE)
        in one round trip (P1)."""
        reply = self._call(shard, *autoclaim_command(
            shard, self.consumer_group, self.consumer, start, count=count, justid=True))
        return claimed_details(self._execute, shard, self.consumer_group, reply)

    def pending_counts(self, shard: str, ids: Sequence[str]) -> dict[str, int]:
        """The delivery count of each of `ids` still pending (XPENDING over their range)."""
        return pending_counts(self._execute, shard, self.consumer_group, ids)

    def record_attempt(self, shard: str, entry_id: str, count: int) -> int:
        """Set a pending entry's delivery count to `count` before a handler call, while the
        owner token names this member: RECORDED, NOT_PENDING or NOT_OWNER (attempt.lua)."""
        call = attempt_call(shard, self.consumer_group, self.consumer, entry_id, count)
        [reply] = ATTEMPT_SCRIPT.run([call], self._execute, self._load)
        return attempt_outcome(reply)

    def ack(self, ids_by_shard: Mapping[str, Sequence[str]]) -> dict[str, int]:
        """Ack entries per shard in one pipeline; a shard answers NOT_OWNER if not ours."""
        calls = ack_calls(ids_by_shard, self.consumer, self.consumer_group, self.use_xackdel)
        if not calls:
            return {}
        return acked_counts(calls, ACK_SCRIPT.run(calls, self._execute, self._load))

    def lag(self, shards: Iterable[str]) -> dict[str, int | None]:
        """Entries not yet delivered to the group, per shard (the lag rule, rsc/common/lag.py)."""
        return group_lags(self._execute, list(shards), self.consumer_group)

    def _call(self, key: str, *words: Word) -> Reply:
        """One command (routed by `key` on a cluster); its error raised."""
        return self._unparsed.execute_command(*words)


def group_lags(execute: Execute, shards: Sequence[str], group: str) -> dict[str, int | None]:
    """`group`'s lag per shard by the one lag rule: Redis's XINFO GROUPS `lag`, or where it is
    nil (after a trim inside what the group has not read) what the stream's ends tell, read
    in a second round trip only for those shards. None: unknown, or no such consumer group."""
    if not shards:
        return {}
    lags: dict[str, int | None] = {}
    unknown: dict[str, str] = {}  # shard -> the group's last-delivered id, where Redis has no lag
    replies = execute([(shard, ("XINFO GROUPS", shard)) for shard in shards])
    for shard, infos in zip(shards, replies, strict=True):
        lags[shard] = None
        info = next((info for info in infos if info.get("name") == group), None) \
            if isinstance(infos, list) else None
        if info is None:
            continue
        if info.get("lag") is not None:
            lags[shard] = int(info["lag"])
        else:
            unknown[shard] = str(info["last-delivered-id"])
    if unknown:
        ends = execute([(shard, command) for shard in unknown for command in ends_commands(shard)])
        for index, (shard, last_delivered) in enumerate(unknown.items()):
            lags[shard] = lag_from_ends(None, last_delivered, ends[3 * index: 3 * index + 3])
    return lags


def claimed_details(execute: Execute, shard: str, group: str, reply: Reply) -> Claimed:
    """From an `XAUTOCLAIM ... JUSTID` reply: the counts (one XPENDING over the claimed range)
    and the bodies (one XRANGE per id), in one round trip."""
    plan = claim_plan(shard, group, reply)
    return plan.claimed(execute(plan.commands) if plan.commands else [])


def pending_counts(execute: Execute, shard: str, group: str, ids: Sequence[str]) -> dict[str, int]:
    """The delivery counts of the pending entries among `ids` (one XPENDING over their range)."""
    if not ids:
        return {}
    [reply] = execute([pending_command(shard, group, ids)])
    return pending_of(reply, ids)


UNPARSED_COMMANDS = ("XREADGROUP", "XAUTOCLAIM", "XPENDING")  # replies kept as the server sent

_R = TypeVar("_R")


def _unparsed_reply(response: _R, **options: object) -> _R:
    return response


def unparsed_client(pool: ConnectionPool) -> redis.Redis:
    """A client over `pool`'s connections whose stream replies stay as the server sent them
    (no per-entry tuples and dicts): what the parsers of stream_commands.py read."""
    client = redis.Redis(connection_pool=pool)
    for command in UNPARSED_COMMANDS:
        client.set_response_callback(command, _unparsed_reply)
    return client


class ReplicaWait:
    """The connection that wrote a batch, held until WAIT reports enough replicas (K5).

    WAIT counts the replicas holding every write made *on its connection*, so a
    shortfall is waited on again here, on the same connection, never on another one
    (which wrote nothing and would report every replica at once).
    """

    def __init__(self, client: redis.Redis, connection: Connection | None, replicas: int) -> None:
        self.client = client
        self.connection = connection
        self.replicas = replicas  # as the last WAIT reported

    def wait(self, wanted: int, timeout_ms: int) -> int:
        """WAIT once more on the writing connection; the replicas it reports."""
        connection = self.connection
        if connection is None:
            raise RuntimeError("the writing connection was released")
        try:
            connection.send_command("WAIT", wanted, timeout_ms)
            self.replicas = int(self.client.parse_response(connection, "WAIT"))
        except BaseException:
            self.release(broken=True)
            raise
        return self.replicas

    def release(self, *, broken: bool = False) -> None:
        """Give the connection back to the pool (dropped first when `broken`)."""
        connection, self.connection = self.connection, None
        if connection is not None:
            if broken:
                connection.disconnect()
            self.client.connection_pool.release(connection)


class ProduceOps:
    """Writes of a producer: XADD through the seal-checking script, pipelined, on one Redis
    (`rsc.member.redis_io.ops.produce_ops` picks the cluster variant for a cluster client)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._execute: Execute = pipelined(client)  # (the cluster's: its router)
        self._load: Callable[[str], object] = client.script_load

    def write_and_wait(self, records: Sequence[tuple[str, list[bytes]]], replicas: int,
                       timeout_ms: int) -> tuple[list[WriteResult], ReplicaWait]:
        """`write`, then WAIT for `replicas` on the connection that wrote, in one round trip.

        The returned ReplicaWait holds that connection (release it): when it reports
        fewer replicas than asked, wait on it again. An error of the round trip is raised.
        """
        load_all(self.client, [PRODUCE_SCRIPT])
        connection = self.client.connection_pool.get_connection()
        plan = PRODUCE_SCRIPT.plan(produce_calls(records))
        waiter = ReplicaWait(self.client, connection, 0)
        wait: Command = ("", ("WAIT", replicas, timeout_ms))
        try:
            *replies, waited = self._send_on(connection, [*plan.commands, wait])
            again = plan.resend(replies)
            if again:  # a restarted or promoted server: load it, write those again, WAIT again
                self.client.script_load(plan.text)
                *again_replies, waited = self._send_on(connection, [*again, wait])
                plan.merge(replies, again_replies)
        except BaseException:
            waiter.release(broken=True)
            raise
        if isinstance(waited, Exception):
            waiter.release()
            raise waited  # e.g. NOPERM for WAIT
        waiter.replicas = reply_int(waited)
        return [write_result(reply) for reply in replies], waiter

    def _send_on(self, connection: Connection, commands: Sequence[Command]) -> list[Reply]:
        """`commands` in one packet on `connection`; error replies in place."""
        words = [command for _, command in commands]
        connection.send_packed_command(connection.pack_commands(words))
        replies: list[Reply] = []
        for command in words:
            try:
                replies.append(self.client.parse_response(connection, str(command[0])))
            except redis.ResponseError as exc:
                replies.append(exc)
        return replies

    def write(self, records: Sequence[tuple[str, list[bytes]]]) -> list[WriteResult]:
        """XADD each (shard, entry fields) in one pipeline; per record its id or why not.

        An error of the whole round trip (connection, timeout) is raised.
        """
        if not records:
            return []
        return [write_result(result) for result in
                PRODUCE_SCRIPT.run(produce_calls(records), self._execute, self._load)]

    def prepare(self) -> None:
        """Try each kind of command once (K10) and load the script now (before a producer
        accepts input)."""
        probe_permissions(self.client, PRODUCER_PROBES, role="producer")
        load_all(self.client, [PRODUCE_SCRIPT])

    def add_raw(self, stream: str, fields: Mapping[str, str | bytes]) -> str:
        """A plain XADD (dead-letter stream)."""
        entry: dict[FieldT, EncodableT] = dict(fields.items())
        return str(self.client.xadd(stream, entry))
