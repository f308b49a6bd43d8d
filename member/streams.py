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
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

import attrs
import redis
from redis.backoff import NoBackoff
from redis.connection import Connection
from redis.retry import Retry
from redis.typing import EncodableT, FieldT

from rsc.common.error_family import StoreMismatch as StoreMismatch  # re-exported
from rsc.common.lag import ends_commands, lag_from_ends
from rsc.common.lua import (
    Command,
    Execute,
    Reply,
    Script,
    Word,
    load_all,
    pipelined,
    reply_int,
    reply_list,
)
from rsc.common.permission_probe import PRODUCER_PROBES, probe_permissions
from rsc.common.redact import redact_url
from rsc.common.redis_connect import connect as connect_any
from rsc.common.server_features import supports_xackdel
from rsc.member.producer_core import Refused
from rsc.member.store_identity import StoreChanged, store_changed_line
from rsc.protocol.routing import owner_key, seal_key

NOT_OWNER = -1
ACK_CHUNK = 2000
SEALED_ERROR = Refused.SEALED.value  # the produce script's error replies
MISSING_ERROR = Refused.MISSING.value
STORE_ID_KEY = "rsc:store-id"  # written by the coordinator in its Redis (Producer routing)
KEY_FIELD = "key"
VALUE_FIELD = "value"

# the owner-checking ack and the seal-checking produce (rsc/common/scripts/*.lua say KEYS, ARGV)
ACK_SCRIPT = Script("ack")
PRODUCE_SCRIPT = Script("produce")
ATTEMPT_SCRIPT = Script("attempt")  # records a handler call before it runs (P1), owner checked
RECORDED, NOT_PENDING = 1, 0  # the attempt script's replies besides NOT_OWNER


# one stream entry as the server sends it: [id, [field, value, ...]] (fields None if deleted)
FlatEntry = Sequence[Any]


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
    command objects over it with `rsc.member.ops` (their cluster variants).
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


def ack_calls(ids_by_shard: Mapping[str, Sequence[str]], consumer: str, group: str,
              use_xackdel: bool) -> list[tuple[list[str], list[str]]]:
    """The owner-checked ack script's calls: (keys, args) per shard and chunk of ids."""
    xackdel = "1" if use_xackdel else "0"
    calls = []
    for shard, ids in ids_by_shard.items():
        # Lua's unpack has a stack limit: at most ACK_CHUNK ids per script call
        for start in range(0, len(ids), ACK_CHUNK):
            calls.append(([shard, owner_key(shard, group)],
                          [consumer, group, xackdel, *ids[start:start + ACK_CHUNK]]))
    return calls


def acked_counts(calls: Sequence[tuple[list[str], list[str]]], results: Sequence[Reply]) -> dict[str, int]:
    """Entries acked per shard from the script's replies; NOT_OWNER sticks for its shard."""
    acked: dict[str, int] = {}
    for (keys, _), result in zip(calls, results, strict=True):
        if isinstance(result, Exception):
            raise result
        shard = keys[0]
        count = reply_int(result)
        if count == NOT_OWNER or acked.get(shard) == NOT_OWNER:
            acked[shard] = NOT_OWNER
        else:
            acked[shard] = acked.get(shard, 0) + count
    return acked


class StreamOps:
    """The data-plane commands for one consumer (memberId) of one consumer group, on one
    Redis (`rsc.member.ops.stream_ops` picks the cluster variant for a cluster client)."""

    def __init__(self, client: redis.Redis, consumer_group: str, consumer: str, *,
                 use_xackdel: bool | None = None) -> None:
        self.client = client
        self.consumer_group = consumer_group
        self.consumer = consumer
        self.use_xackdel = supports_xackdel(client) if use_xackdel is None else use_xackdel
        # the same connections, replies as the server sent them (no per-entry tuples and dicts)
        self._unparsed = redis.Redis(connection_pool=client.connection_pool)
        for command in UNPARSED_COMMANDS:
            self._unparsed.set_response_callback(command, _unparsed_reply)
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
            self._read_connection.send_command(
                "XREADGROUP", "GROUP", self.consumer_group, self.consumer, "COUNT", count,
                "BLOCK", block_ms, "STREAMS", *shards, *([">"] * len(shards)))
        except BaseException:
            self.reset_reads()
            raise
        self.reads_sent += 1

    def receive_read(self) -> list[tuple[str, list[FlatEntry]]]:
        """The reply to the oldest read sent: [(shard, [[id, [field, value, ...]], ...]), ...]."""
        if self._read_connection is None or not self.reads_sent:
            raise RuntimeError("no read in flight")
        try:
            reply = self._read_connection.read_response()
        except BaseException:
            self.reset_reads()
            raise
        self.reads_sent -= 1
        return _by_stream(reply)

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

    def read_new_raw(self, shards: Sequence[str], *, count: int, block_ms: int
                     ) -> list[tuple[str, list[FlatEntry]]]:
        """`read_new` unparsed: [(shard, [[id, [field, value, ...] or None], ...]), ...]."""
        if not shards:
            return []
        reply = self._unparsed.xreadgroup(
            self.consumer_group, self.consumer, {shard: ">" for shard in shards},
            count=count, block=block_ms,
        )
        return _by_stream(reply)

    def claim_pending(self, shard: str, start: str, *, count: int) -> tuple[str, list[Entry]]:
        """Claim up to `count` pending entries of any consumer from `start` (XAUTOCLAIM, idle 0).

        Returns the cursor for the next call ("0-0" when the whole PEL was scanned)
        and the claimed entries; entries deleted from the stream leave the PEL.
        """
        cursor, claimed = self.claim_pending_raw(shard, start, count=count)
        return cursor, [Entry(shard, entry_id, pairs(flat)) for entry_id, flat in claimed
                        if entry_id is not None]

    def claim_pending_raw(self, shard: str, start: str, *, count: int
                          ) -> tuple[str, list[FlatEntry]]:
        """`claim_pending` unparsed: (cursor, [[id, [field, value, ...] or None], ...])."""
        reply = self._unparsed.xautoclaim(shard, self.consumer_group, self.consumer,
                                          min_idle_time=0, start_id=start, count=count)
        return _text(reply[0]), [entry for entry in reply[1] if entry is not None]

    def claim_counted(self, shard: str, start: str, *, count: int) -> Claimed:
        """Claim up to `count` pending entries from `start` without raising their delivery
        counts (`XAUTOCLAIM ... JUSTID`), then read their counts (XPENDING) and bodies (XRANGE)
        in one round trip (P1)."""
        reply = self._unparsed.execute_command("XAUTOCLAIM", shard, self.consumer_group,
                                               self.consumer, 0, start, "COUNT", count, "JUSTID")
        return claimed_details(pipelined(self._unparsed), shard, self.consumer_group, reply)

    def pending_counts(self, shard: str, ids: Sequence[str]) -> dict[str, int]:
        """The delivery count of each of `ids` still pending (XPENDING over their range)."""
        return pending_counts(pipelined(self._unparsed), shard, self.consumer_group, ids)

    def record_attempt(self, shard: str, entry_id: str, count: int) -> int:
        """Set a pending entry's delivery count to `count` before a handler call, while the
        owner token names this member: RECORDED, NOT_PENDING or NOT_OWNER (attempt.lua)."""
        call = ([shard, owner_key(shard, self.consumer_group)],
                [self.consumer, self.consumer_group, entry_id, str(count)])
        return reply_int(ATTEMPT_SCRIPT.call(self.client, *call))

    def ack(self, ids_by_shard: Mapping[str, Sequence[str]]) -> dict[str, int]:
        """Ack entries per shard in one pipeline; a shard answers NOT_OWNER if not ours."""
        calls = ack_calls(ids_by_shard, self.consumer, self.consumer_group, self.use_xackdel)
        if not calls:
            return {}
        return acked_counts(calls, ACK_SCRIPT.run_on(self.client, calls))

    def lag(self, shards: Iterable[str]) -> dict[str, int | None]:
        """Entries not yet delivered to the group, per shard (the lag rule, rsc/common/lag.py)."""
        return group_lags(pipelined(self.client), list(shards), self.consumer_group)


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


@attrs.frozen
class Claimed:
    """What a counted claim took (P1): the cursor of the next claim, the claimed entries with
    their bodies (as the server sent them, in id order), each one's delivery count, and the
    ids whose bodies are gone (trimmed while pending: out of the pending list, or to ack)."""

    cursor: str
    entries: list[FlatEntry]
    counts: dict[str, int]
    gone: list[str]


def claimed_details(execute: Execute, shard: str, group: str, reply: Any) -> Claimed:
    """From an `XAUTOCLAIM ... JUSTID` reply: the counts (one XPENDING over the claimed range)
    and the bodies (one XRANGE per id), in one round trip."""
    items = reply_list(reply)
    cursor = _word(items[0])
    ids = [_word(entry_id) for entry_id in reply_list(items[1])]
    gone = [_word(entry_id) for entry_id in reply_list(items[2])] if len(items) > 2 else []
    if not ids:
        return Claimed(cursor, [], {}, gone)
    commands: list[Command] = [(shard, ("XPENDING", shard, group, ids[0], ids[-1], len(ids)))]
    commands += [(shard, ("XRANGE", shard, entry_id, entry_id)) for entry_id in ids]
    replies = execute(commands)
    for result in replies:
        if isinstance(result, Exception):
            raise result
    counts = _counts(replies[0])
    entries: list[FlatEntry] = []
    for entry_id, found in zip(ids, replies[1:], strict=True):
        if isinstance(found, list) and found:
            entries.append(found[0])
        else:
            gone.append(entry_id)  # trimmed between the claim and the read: still pending
    return Claimed(cursor, entries, counts, gone)


def pending_counts(execute: Execute, shard: str, group: str, ids: Sequence[str]) -> dict[str, int]:
    """The delivery counts of the pending entries among `ids` (one XPENDING over their range)."""
    if not ids:
        return {}
    [reply] = execute([(shard, ("XPENDING", shard, group, min(ids, key=_id_order),
                                max(ids, key=_id_order), len(ids)))])
    if isinstance(reply, Exception):
        raise reply
    wanted = set(ids)
    return {entry_id: count for entry_id, count in _counts(reply).items() if entry_id in wanted}


def _id_order(entry_id: str) -> tuple[int, int]:
    milliseconds, _, sequence = entry_id.partition("-")
    return int(milliseconds), int(sequence or 0)


def _counts(reply: object) -> dict[str, int]:
    """id -> delivery count from an XPENDING range reply, raw ([id, consumer, idle, count])
    or as redis-py parses it (dicts)."""
    counts: dict[str, int] = {}
    for row in reply_list(reply):
        if isinstance(row, dict):
            counts[_word(row["message_id"])] = int(row["times_delivered"])
        else:
            fields = reply_list(row)
            counts[_word(fields[0])] = reply_int(fields[3])
    return counts


UNPARSED_COMMANDS = ("XREADGROUP", "XAUTOCLAIM", "XPENDING")  # replies kept as the server sent

_R = TypeVar("_R")


def _unparsed_reply(response: _R, **options: object) -> _R:
    return response


def _by_stream(reply: Any) -> list[tuple[str, list[FlatEntry]]]:
    """An XREADGROUP reply as [(stream, entries)], from RESP2 (a list) or RESP3 (a map)."""
    if not reply:
        return []
    items = reply.items() if isinstance(reply, dict) else reply
    return [(stream.decode() if stream.__class__ is bytes else stream, entries)
            for stream, entries in items]


def _word(reply: object) -> str:
    """A word of a reply as text; TypeError naming what came instead."""
    if isinstance(reply, bytes):
        return reply.decode()
    if isinstance(reply, str):
        return reply
    raise TypeError(f"expected a word in Redis's reply, got {reply!r}")


def _text(word: str | bytes) -> str:
    return word.decode() if word.__class__ is bytes else word  # type: ignore[return-value]


def pairs(flat: Sequence[str] | Mapping[str, str] | None) -> dict[str, str]:
    """An entry's fields from the server's flat [field, value, ...] list."""
    if flat is None:
        return {}
    if isinstance(flat, Mapping):
        return dict(flat)
    it = iter(flat)
    return dict(zip(it, it, strict=True))


# per record: the entry id, a refusal (R5), or the Redis error the server answered for it
WriteResult = str | Refused | redis.RedisError


def write_result(reply: object) -> WriteResult:
    """What the produce script's reply for one record means (shared by every ProduceOps)."""
    if isinstance(reply, redis.RedisError):
        text = str(reply)
        if text.startswith(SEALED_ERROR):
            return Refused.SEALED
        if text.startswith(MISSING_ERROR):
            return Refused.MISSING
        return reply
    if isinstance(reply, Exception):
        raise reply
    return str(reply)


class ReplicaWait:
    """The connection that wrote a batch, held until WAIT reports enough replicas (K5).

    WAIT counts the replicas holding every write made *on its connection*, so a
    shortfall is waited on again here, on the same connection, never on another one
    (which wrote nothing and would report every replica at once).
    """

    def __init__(self, client: redis.Redis, connection: Any, replicas: int) -> None:
        self.client = client
        self.connection = connection
        self.replicas = replicas  # as the last WAIT reported

    def wait(self, wanted: int, timeout_ms: int) -> int:
        """WAIT once more on the writing connection; the replicas it reports."""
        try:
            self.connection.send_command("WAIT", wanted, timeout_ms)
            self.replicas = int(self.client.parse_response(self.connection, "WAIT"))
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
    (`rsc.member.ops.produce_ops` picks the cluster variant for a cluster client)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def write_and_wait(self, records: Sequence[tuple[str, list[bytes]]], replicas: int,
                       timeout_ms: int) -> tuple[list[WriteResult], ReplicaWait]:
        """`write`, then WAIT for `replicas` on the connection that wrote, in one round trip.

        The returned ReplicaWait holds that connection (release it): when it reports
        fewer replicas than asked, wait on it again. An error of the round trip is raised.
        """
        load_all(self.client, [PRODUCE_SCRIPT])
        connection = self.client.connection_pool.get_connection()
        calls = [([shard, seal_key(shard)], fields) for shard, fields in records]
        waiter = ReplicaWait(self.client, connection, 0)
        try:
            replies = self._send_on(connection, calls, replicas, timeout_ms)
            missing = [index for index, reply in enumerate(replies[:-1])
                       if isinstance(reply, redis.exceptions.NoScriptError)]
            if missing:  # a restarted or promoted server: load it, write those again, WAIT again
                self.client.script_load(PRODUCE_SCRIPT.text)
                again = self._send_on(connection, [calls[i] for i in missing], replicas, timeout_ms)
                for index, reply in zip(missing, again[:-1], strict=True):
                    replies[index] = reply
                replies[-1] = again[-1]
        except BaseException:
            waiter.release(broken=True)
            raise
        if isinstance(replies[-1], Exception):
            waiter.release()
            raise replies[-1]  # e.g. NOPERM for WAIT
        waiter.replicas = reply_int(replies[-1])
        return [write_result(reply) for reply in replies[:-1]], waiter

    def _send_on(self, connection: Connection, calls: Sequence[tuple[Sequence[str], Sequence[bytes]]],
                 replicas: int, timeout_ms: int) -> list[Reply]:
        """The script calls and a WAIT in one packet on `connection`; error replies in place."""
        words: list[Sequence[Word]] = [("EVALSHA", PRODUCE_SCRIPT.sha, len(keys), *keys, *args)
                                      for keys, args in calls]
        words.append(("WAIT", replicas, timeout_ms))
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
        calls = [([shard, seal_key(shard)], fields) for shard, fields in records]
        return [write_result(result) for result in PRODUCE_SCRIPT.run_on(self.client, calls)]

    def prepare(self) -> None:
        """Try each kind of command once (K10) and load the script now (before a producer
        accepts input)."""
        probe_permissions(self.client, PRODUCER_PROBES, role="producer")
        load_all(self.client, [PRODUCE_SCRIPT])

    def add_raw(self, stream: str, fields: Mapping[str, str | bytes]) -> str:
        """A plain XADD (dead-letter stream)."""
        entry: dict[FieldT, EncodableT] = dict(fields.items())
        return str(self.client.xadd(stream, entry))
