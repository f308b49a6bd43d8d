"""The data plane's commands as values, sans-I/O: what to send (argv builders) and what a reply
means (parsers). Nothing here sends or receives; the executors do (`streams.py` and
`cluster_streams.py` over redis-py, `native_streams.py` over rsc/common/trio_redis.py), so a
fix to a command or to the reading of its reply is made once, and unit-tested without a Redis.

Scripts (rsc/common/scripts/*.lua, run by rsc/common/lua.py's one NOSCRIPT fallback):
- ack: acks (XACK, or XACKDEL where the server has it) only while the shard's owner token
  names this member; otherwise acks nothing and returns NOT_OWNER;
- produce: XADD unless the shard's seal marker exists (fails with SEALED) or its stream does
  not (fails with MISSING: retired, or not this coordinator's Redis);
- attempt: records a handler call before it runs (P1), owner checked.

Replies are read as the server sent them (RESP2 lists or RESP3 maps, words as bytes or text),
or as redis-py parses them where a caller asked it to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
from redis.exceptions import RedisError

from rsc.common.lua import Call, Command, Reply, Script, Word, reply_int, reply_list
from rsc.member.pure.producer_core import Refused
from rsc.protocol.routing import owner_key, seal_key

NOT_OWNER = -1
ACK_CHUNK = 2000
SEALED_ERROR = Refused.SEALED.value  # the produce script's error replies
MISSING_ERROR = Refused.MISSING.value
RECORDED, NOT_PENDING = 1, 0  # the attempt script's replies besides NOT_OWNER

# the owner-checking ack and the seal-checking produce (rsc/common/scripts/*.lua say KEYS, ARGV)
ACK_SCRIPT = Script("ack")
PRODUCE_SCRIPT = Script("produce")
ATTEMPT_SCRIPT = Script("attempt")

FlatEntry = Sequence[Any]
"""One stream entry as the server sends it: [id, [field, value, ...]] (fields None if deleted);
its words bytes or text as the client decodes, read in place by the hot path (message.py)."""

StreamEntries = list[tuple[str, list[FlatEntry]]]
"""A read's reply: [(stream, [entry, ...]), ...], streams as text, entries as sent."""

WriteResult = str | Refused | RedisError
"""Per record written: the entry id, a refusal (R5), or the Redis error the server answered."""


# --- command builders ---------------------------------------------------------------------

def read_command(group: str, consumer: str, shards: Sequence[str], *, count: int,
                 block_ms: int | None) -> tuple[Word, ...]:
    """One XREADGROUP for never-delivered entries of `shards` (BLOCK left out when None)."""
    block: tuple[Word, ...] = () if block_ms is None else ("BLOCK", block_ms)
    return ("XREADGROUP", "GROUP", group, consumer, "COUNT", count, *block, "STREAMS", *shards,
            *([">"] * len(shards)))


def autoclaim_command(shard: str, group: str, consumer: str, start: str, *, count: int,
                      justid: bool = False) -> tuple[Word, ...]:
    """XAUTOCLAIM of up to `count` pending entries of any consumer from `start` (idle 0);
    JUSTID leaves their delivery counts alone (P1)."""
    return ("XAUTOCLAIM", shard, group, consumer, 0, start, "COUNT", count,
            *(("JUSTID",) if justid else ()))


def pending_command(shard: str, group: str, ids: Sequence[str]) -> Command:
    """One XPENDING over the range of `ids` (not empty), for their delivery counts."""
    return (shard, ("XPENDING", shard, group, min(ids, key=id_order), max(ids, key=id_order),
                    len(ids)))


def ack_calls(ids_by_shard: Mapping[str, Sequence[str]], consumer: str, group: str,
              use_xackdel: bool) -> list[Call]:
    """The owner-checked ack script's calls: (keys, args) per shard and chunk of ids."""
    xackdel = "1" if use_xackdel else "0"
    calls: list[Call] = []
    for shard, ids in ids_by_shard.items():
        # Lua's unpack has a stack limit: at most ACK_CHUNK ids per script call
        for start in range(0, len(ids), ACK_CHUNK):
            calls.append(([shard, owner_key(shard, group)],
                          [consumer, group, xackdel, *ids[start:start + ACK_CHUNK]]))
    return calls


def produce_calls(records: Sequence[tuple[str, Sequence[bytes]]]) -> list[Call]:
    """The seal-checking produce script's calls: one per (shard, entry fields)."""
    return [([shard, seal_key(shard)], fields) for shard, fields in records]


def attempt_call(shard: str, group: str, consumer: str, entry_id: str, count: int) -> Call:
    """The attempt script's call: set `entry_id`'s delivery count to `count` (P1)."""
    return ([shard, owner_key(shard, group)], [consumer, group, entry_id, str(count)])


# --- reply parsers ------------------------------------------------------------------------

def by_stream(reply: object) -> StreamEntries:
    """An XREADGROUP reply as [(stream, entries)], from RESP2 (a list) or RESP3 (a map);
    [] for a read that timed out (nil)."""
    if not reply:
        return []
    items = reply.items() if isinstance(reply, dict) else reply
    return [(stream.decode() if stream.__class__ is bytes else stream, entries)
            for stream, entries in items]  # type: ignore[attr-defined]  # (an array of pairs)


def autoclaimed(reply: object) -> tuple[str, list[FlatEntry]]:
    """An XAUTOCLAIM reply: (the next cursor, the claimed entries still in the stream)."""
    items = reply_list(reply)
    return word(items[0]), [entry for entry in reply_list(items[1]) if isinstance(entry, list)]


def acked_counts(calls: Sequence[Call], results: Sequence[Reply]) -> dict[str, int]:
    """Entries acked per shard from the ack script's replies; NOT_OWNER sticks for its shard."""
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


def attempt_outcome(reply: Reply) -> int:
    """The attempt script's reply: RECORDED, NOT_PENDING or NOT_OWNER (an error reply raised)."""
    if isinstance(reply, Exception):
        raise reply
    return reply_int(reply)


def write_result(reply: Reply) -> WriteResult:
    """What the produce script's reply for one record means (shared by every executor)."""
    if isinstance(reply, RedisError):
        text = str(reply)
        if text.startswith(SEALED_ERROR):
            return Refused.SEALED
        if text.startswith(MISSING_ERROR):
            return Refused.MISSING
        return reply
    if isinstance(reply, Exception):
        raise reply
    return str(reply)


@attrs.frozen
class Claimed:
    """What a counted claim took (P1): the cursor of the next claim, the claimed entries with
    their bodies (as the server sent them, in id order), each one's delivery count, and the
    ids whose bodies are gone (trimmed while pending: out of the pending list, or to ack)."""

    cursor: str
    entries: list[FlatEntry]
    counts: dict[str, int]
    gone: list[str]


@attrs.frozen
class ClaimPlan:
    """An `XAUTOCLAIM ... JUSTID` reply read, and the round trip that completes it: one
    XPENDING over the claimed range (the counts), one XRANGE per id (the bodies)."""

    cursor: str
    ids: list[str]
    gone: list[str]
    commands: list[Command]

    def claimed(self, replies: Sequence[Reply]) -> Claimed:
        """The claim, from the replies to `commands` (an error reply raised)."""
        if not self.ids:
            return Claimed(self.cursor, [], {}, list(self.gone))
        for result in replies:
            if isinstance(result, Exception):
                raise result
        counts = delivery_counts(replies[0])
        entries: list[FlatEntry] = []
        gone = list(self.gone)
        for entry_id, found in zip(self.ids, replies[1:], strict=True):
            if isinstance(found, list) and found:
                entries.append(found[0])
            else:
                gone.append(entry_id)  # trimmed between the claim and the read: still pending
        return Claimed(self.cursor, entries, counts, gone)


def claim_plan(shard: str, group: str, reply: Reply) -> ClaimPlan:
    """What an `XAUTOCLAIM ... JUSTID` reply took, and the commands that read the rest."""
    items = reply_list(reply)
    cursor = word(items[0])
    ids = [word(entry_id) for entry_id in reply_list(items[1])]
    gone = [word(entry_id) for entry_id in reply_list(items[2])] if len(items) > 2 else []
    commands: list[Command] = []
    if ids:
        commands.append((shard, ("XPENDING", shard, group, ids[0], ids[-1], len(ids))))
        commands += [(shard, ("XRANGE", shard, entry_id, entry_id)) for entry_id in ids]
    return ClaimPlan(cursor, ids, gone, commands)


def pending_of(reply: Reply, ids: Sequence[str]) -> dict[str, int]:
    """From the reply to `pending_command(.., ids)`: the counts of those of `ids` still pending."""
    if isinstance(reply, Exception):
        raise reply
    wanted = set(ids)
    return {entry_id: count for entry_id, count in delivery_counts(reply).items()
            if entry_id in wanted}


def delivery_counts(reply: Reply) -> dict[str, int]:
    """id -> delivery count from an XPENDING range reply, raw ([id, consumer, idle, count])
    or as redis-py parses it (dicts)."""
    counts: dict[str, int] = {}
    for row in reply_list(reply):
        if isinstance(row, dict):
            counts[word(row["message_id"])] = int(row["times_delivered"])
        else:
            fields = reply_list(row)
            counts[word(fields[0])] = reply_int(fields[3])
    return counts


def id_order(entry_id: str) -> tuple[int, int]:
    """A stream entry id's order: (milliseconds, sequence)."""
    milliseconds, _, sequence = entry_id.partition("-")
    return int(milliseconds), int(sequence or 0)


def word(reply: Reply) -> str:
    """A word of a reply as text; TypeError naming what came instead."""
    if isinstance(reply, bytes):
        return reply.decode()
    if isinstance(reply, str):
        return reply
    raise TypeError(f"expected a word in Redis's reply, got {reply!r}")


def pairs(flat: Sequence[str] | Mapping[str, str] | None) -> dict[str, str]:
    """An entry's fields from the server's flat [field, value, ...] list."""
    if flat is None:
        return {}
    if isinstance(flat, Mapping):
        return dict(flat)
    it = iter(flat)
    return dict(zip(it, it, strict=True))
