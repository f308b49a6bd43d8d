"""Redis-side reads and trims of a prefix's shard streams: lag, retention, drain, store id.

Blocking (redis-py's sync client); the coordinator calls these through
`trio.to_thread.run_sync`. Every function sends all its shards in ONE
pipeline (`transaction=False`), so the cost is one round trip however many
shards there are. Each command or script in it names the keys of one shard
only (the stream, or keys sharing its hash tag `{prefix:vN:i}`), so the same
calls work on Redis Cluster. Work that must read a shard's state and then act
on it (retention, drain counts) is a Lua script per shard: atomic on that
shard, and still one round trip. (Group lifecycle on the streams, G1 and G3,
is actors/store.py's StreamAdmin.)

Written against Redis 7.0 (XINFO GROUPS `lag` and `entries-read` exist since
7.0). Differences in later servers are noted where they matter: XACKDEL
(8.2) and the cases where `lag` is nil.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from typing import Any, NamedTuple

import redis

from rsc.actors.shard_reports import (  # the values these reads return, re-exported
    BlockingGroup as BlockingGroup,
)
from rsc.actors.shard_reports import (
    DrainCount,
    GroupTotals,
    RetentionResult,
    ShardLag,
    age_cut_id,
    sum_known,
)
from rsc.actors.shard_reports import blocking as blocking
from rsc.actors.shard_reports import drain_report as drain_report
from rsc.actors.shard_reports import drained_shards as drained_shards
from rsc.actors.shard_reports import totals as totals
from rsc.actors.store import STORE_IO_ERRORS, StoreError
from rsc.common.redis_connect import is_cluster

STORE_ID_KEY = "rsc:store-id"

# --- pure helpers ----------------------------------------------------------------------


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _check_positive(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{name} must be an integer >= 1 or None, got {value!r}")


# --- scripts ---------------------------------------------------------------------------

# Stream ids are compared and incremented as decimal strings: Lua numbers are doubles,
# and a 64-bit sequence does not fit one.
_ID_HELPERS = """
local function split(id)
  local dash = string.find(id, '-', 1, true)
  return string.sub(id, 1, dash - 1), string.sub(id, dash + 1)
end
local function num_less(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local function id_less(a, b)
  local am, as = split(a)
  local bm, bs = split(b)
  if am ~= bm then return num_less(am, bm) end
  return num_less(as, bs)
end
local function incr(digits)
  local tail = ''
  for i = #digits, 1, -1 do
    local d = string.byte(digits, i) - 48
    if d < 9 then return string.sub(digits, 1, i - 1) .. string.char(49 + d) .. tail end
    tail = '0' .. tail
  end
  return '1' .. tail
end
local function next_id(id)
  local ms, seq = split(id)
  if seq == '18446744073709551615' then return incr(ms) .. '-0' end
  return ms .. '-' .. incr(seq)
end
local function fields(flat)
  local out = {}
  for i = 1, #flat, 2 do out[flat[i]] = flat[i + 1] end
  return out
end
local function groups_of(key)
  local out = {}
  for _, flat in ipairs(redis.call('XINFO', 'GROUPS', key)) do
    local info = fields(flat)
    out[info['name']] = info
  end
  return out
end
-- the oldest id a group still needs: its first pending entry, else the one after its last-delivered
local function needed(key, name, info)
  if info['pending'] > 0 then
    local first = redis.call('XPENDING', key, name, '-', '+', 1)
    if #first > 0 then return first[1][1] end
  end
  return next_id(info['last-delivered-id'])
end
-- how many entries lie between two XRANGE bounds (at most limit), page by page
local function count_range(key, start, stop, limit)
  local count = 0
  while limit == nil or count < limit do
    local page = 512
    if limit ~= nil and limit - count < page then page = limit - count end
    local batch = redis.call('XRANGE', key, start, stop, 'COUNT', page)
    count = count + #batch
    if #batch < page then break end
    start = '(' .. batch[#batch][1]
  end
  return count
end
"""

# KEYS[1] shard stream. ARGV[1] '1': trim what every group acked (T1); ARGV[2] max length or '';
# ARGV[3] age cut id (entries below it go) or ''; ARGV[4..] the prefix's groups.
# Returns {removed by acks, removed by caps, removed unconsumed, length after}.
_RETENTION = _ID_HELPERS + """
local key = KEYS[1]
if redis.call('EXISTS', key) == 0 then return {0, 0, 0, 0} end
local known = groups_of(key)
local oldest = nil
local complete = true
for i = 4, #ARGV do
  local info = known[ARGV[i]]
  if info == nil then
    complete = false
  else
    local id = needed(key, ARGV[i], info)
    if oldest == nil or id_less(id, oldest) then oldest = id end
  end
end
-- a group with no consumer group here has read nothing: everything is unconsumed for it
if not complete then oldest = '0-0' end
local by_acks, by_caps, unconsumed = 0, 0, 0
local below_oldest_gone = false
if ARGV[1] == '1' and complete and oldest ~= nil then
  by_acks = redis.call('XTRIM', key, 'MINID', oldest)
  below_oldest_gone = true
end
if ARGV[3] ~= '' then
  local cut = ARGV[3]
  local lost = 0
  if oldest ~= nil and id_less(oldest, cut) and not below_oldest_gone then
    lost = count_range(key, oldest, '(' .. cut, nil)
  end
  local removed = redis.call('XTRIM', key, 'MINID', cut)
  if below_oldest_gone and oldest ~= nil then lost = removed end
  by_caps = by_caps + removed
  unconsumed = unconsumed + lost
end
if ARGV[2] ~= '' then
  local excess = redis.call('XLEN', key) - tonumber(ARGV[2])
  if excess > 0 then
    if oldest ~= nil then
      local acked = 0
      if not below_oldest_gone and oldest ~= '0-0' then
        acked = count_range(key, '-', '(' .. oldest, excess)
      end
      unconsumed = unconsumed + excess - acked
    end
    by_caps = by_caps + redis.call('XTRIM', key, 'MAXLEN', ARGV[2])
  end
end
return {by_acks, by_caps, unconsumed, redis.call('XLEN', key)}
"""

# KEYS[1] sealed shard stream; ARGV[1..] groups. Returns {undelivered, pending} per group.
# An entry removed by retention counts as delivered: undelivered counts entries that still exist.
_DRAIN = _ID_HELPERS + """
local key = KEYS[1]
local out = {}
if redis.call('EXISTS', key) == 0 then
  for i = 1, #ARGV do out[#out + 1] = 0; out[#out + 1] = 0 end
  return out
end
local stream = fields(redis.call('XINFO', 'STREAM', key))
local length = stream['length']
local known = groups_of(key)
for i = 1, #ARGV do
  local info = known[ARGV[i]]
  local undelivered, pending = length, 0
  if info ~= nil then
    pending = info['pending']
    local last = info['last-delivered-id']
    if length == 0 or not id_less(last, stream['last-entry'][1]) then
      undelivered = 0
    elseif id_less(last, stream['first-entry'][1]) then
      undelivered = length
    elseif info['lag'] then
      -- trims only cut below first-entry <= last, and Redis reports nil lag when a deletion
      -- lies after last: so lag counts exactly the entries after last that still exist
      undelivered = info['lag']
    else
      undelivered = count_range(key, '(' .. last, '+', nil)
    end
  end
  out[#out + 1] = undelivered
  out[#out + 1] = pending
end
return out
"""


class _Script:
    """A Lua script run by EVALSHA inside a caller's pipeline, loaded once per client.

    redis-py's own pipeline scripts send SCRIPT EXISTS before every execute (a second round
    trip); this loads on first use and again only when Redis answers NOSCRIPT (a restart).
    """

    def __init__(self, body: str) -> None:
        self.body = body
        self.sha = hashlib.sha1(body.encode()).hexdigest()

    def run_all(self, client: redis.Redis, calls: Sequence[tuple[str, Sequence[Any]]]) -> list[Any]:
        """Run the script once per (key, args), all in one pipeline; errors come back as values."""
        for attempt in (1, 2):
            pipe = client.pipeline(transaction=False)
            for key, args in calls:
                # EVALSHA by name: a cluster pipeline routes it by its key (evalsha() is refused there)
                pipe.execute_command("EVALSHA", self.sha, 1, key, *args)
            results = pipe.execute(raise_on_error=False)
            if attempt == 1 and any(isinstance(r, redis.exceptions.NoScriptError) for r in results):
                client.script_load(self.body)
                continue
            return results
        raise AssertionError("unreachable")


_retention_script = _Script(_RETENTION)
_drain_script = _Script(_DRAIN)


def load_scripts(client: redis.Redis) -> None:
    """Load every script now (at start), so the first call costs one round trip too."""
    try:
        for script in (_retention_script, _drain_script):
            client.script_load(script.body)
    except STORE_IO_ERRORS as exc:
        raise StoreError(f"cannot load the shard scripts: {exc}") from exc


def _raise_errors(what: str, streams: Sequence[str], results: Sequence[Any]) -> None:
    for stream, result in zip(streams, results, strict=True):
        if isinstance(result, Exception):
            raise StoreError(f"cannot {what} on {stream}: {result}")


# --- lag -------------------------------------------------------------------------------


def shard_lag(client: redis.Redis, streams: Sequence[str], group: str) -> list[ShardLag]:
    """Length, last-delivered id, lag, pending and oldest pending idle time, per shard.

    One round trip for all shards: XLEN, XINFO GROUPS and `XPENDING key group - + 1` (the
    pending list is ordered by id, so its first entry is the oldest, with its idle time).
    A missing stream reads as empty; a missing consumer group as `last_delivered_id` None.

    `lag` is Redis's own. On Redis 7.0 it is nil when the group's entries-read counter is
    unknown and cannot be estimated: the group was created or moved (SETID) to an id strictly
    inside the stream (a reset to a timestamp), or an entry after its last-delivered id was
    deleted (XDEL). It is known again once the group reads up to the last entry. Entries
    deleted by XACKDEL (Redis >= 8.2) leave the same kind of gap, so expect nil more often there.
    """
    try:
        pipe = client.pipeline(transaction=False)
        for stream in streams:
            pipe.xlen(stream)
            pipe.xinfo_groups(stream)
            pipe.xpending_range(stream, group, "-", "+", 1)
            _queue_ends(pipe, stream)
        results = pipe.execute(raise_on_error=False)
    except STORE_IO_ERRORS as exc:
        raise StoreError(f"cannot read shard lag: {exc}") from exc
    lags = []
    for index, stream in enumerate(streams):
        length, infos, first_pending, first, last = results[5 * index: 5 * index + 5]
        if isinstance(length, Exception):
            raise StoreError(f"cannot read the length of {stream}: {length}")
        info = None
        if not isinstance(infos, Exception):
            info = next((g for g in infos if _text(g["name"]) == group), None)
        if info is None:
            lags.append(ShardLag(shard=stream, length=length, last_delivered_id=None, lag=None,
                                 pending=0, oldest_pending_ms=None))
            continue
        oldest = None
        if not isinstance(first_pending, Exception) and first_pending:
            oldest = int(first_pending[0]["time_since_delivered"])
        last_delivered = _text(info["last-delivered-id"])
        lag = known_lag(info.get("lag"), length, last_delivered, _end_id(first), _end_id(last))
        lags.append(ShardLag(
            shard=stream, length=length, last_delivered_id=last_delivered,
            lag=lag, pending=int(info["pending"]), oldest_pending_ms=oldest))
    return lags


def _id(entry_id: str) -> tuple[int, int]:
    """A stream id as (milliseconds, sequence), for comparisons."""
    milliseconds, _, sequence = entry_id.partition("-")
    return int(milliseconds), int(sequence or 0)


def _queue_ends(pipe: Any, stream: str) -> None:
    """Queue the ids of the stream's first and last entries (for `known_lag`)."""
    pipe.xrange(stream, "-", "+", count=1)
    pipe.xrevrange(stream, "+", "-", count=1)


def _end_id(reply: Any) -> str | None:
    if isinstance(reply, Exception) or not reply:
        return None
    return _text(reply[0][0])


def known_lag(redis_lag: Any, length: Any, last_delivered: str | None,
              first_id: str | None, last_id: str | None) -> int | None:
    """Redis's own lag, or what can be told without it.

    Redis 7.x reports nil lag once entries were trimmed or deleted inside what the group has
    not read (our `acked` retention does exactly that), or after a SETID into the stream. Two
    cases still have an exact answer: the group has delivered the last entry (lag 0), or every
    entry that is left comes after its last-delivered id (lag = length). Else None.
    """
    if redis_lag is not None:
        return int(redis_lag)
    if isinstance(length, Exception) or last_delivered is None:
        return None
    if int(length) == 0 or (last_id is not None and _id(last_delivered) >= _id(last_id)):
        return 0
    if first_id is not None and _id(first_id) > _id(last_delivered):
        return int(length)
    return None


def group_totals(client: redis.Redis, streams: Sequence[str],
                 groups: Sequence[str]) -> dict[str, GroupTotals]:
    """Lag and pending sums of several groups of one prefix (listGroups): one XINFO GROUPS per shard.

    A group missing on a shard makes its lag unknown (None) and adds no pending.
    """
    if not groups:
        return {}
    result = group_totals_many(client, [(streams, groups)])[0]
    if isinstance(result, StoreError):
        raise result
    return result


def group_totals_many(client: redis.Redis, reads: Sequence[tuple[Sequence[str], Sequence[str]]]
                      ) -> list[dict[str, GroupTotals] | StoreError]:
    """`group_totals` of many prefixes, (streams, groups) each: ONE pipeline of XINFO GROUPS,
    and a second only for the shards where Redis gives some group no lag (`known_lag` needs
    their length and end ids then). A read that failed comes back as its StoreError."""
    streams = [stream for shards, _ in reads for stream in shards]
    try:
        pipe = client.pipeline(transaction=False)
        for stream in streams:
            pipe.xinfo_groups(stream)
        infos = pipe.execute(raise_on_error=False)
        needing = []
        position = 0
        for shards, groups in reads:
            wanted = set(groups)
            for _ in shards:
                found = infos[position]
                if not isinstance(found, Exception) and any(
                        info.get("lag") is None and _text(info["name"]) in wanted for info in found):
                    needing.append(position)
                position += 1
        ends: dict[int, tuple[Any, Any, Any]] = {}
        if needing:
            pipe = client.pipeline(transaction=False)
            for index in needing:
                pipe.xlen(streams[index])
                _queue_ends(pipe, streams[index])
            replies = pipe.execute(raise_on_error=False)
            ends = {index: tuple(replies[3 * n: 3 * n + 3])  # type: ignore[misc]
                    for n, index in enumerate(needing)}
    except STORE_IO_ERRORS as exc:
        raise StoreError(f"cannot read group lag: {exc}") from exc
    out: list[dict[str, GroupTotals] | StoreError] = []
    position = 0
    for shards, groups in reads:
        per_shard = []
        for _ in shards:
            length, first, last = ends.get(position, (None, None, None))
            per_shard.append((infos[position], length, first, last))
            position += 1
        out.append(_totals(groups, per_shard))
    return out


def _totals(groups: Sequence[str], shards: Sequence[tuple[Any, Any, Any, Any]]
            ) -> dict[str, GroupTotals]:
    lags: dict[str, list[int | None]] = {name: [] for name in groups}
    pending = dict.fromkeys(groups, 0)
    for infos, length, first, last in shards:
        by_name = {} if isinstance(infos, Exception) else {_text(g["name"]): g for g in infos}
        for name in groups:
            info = by_name.get(name)
            lags[name].append(None if info is None else known_lag(
                info.get("lag"), length, _text(info["last-delivered-id"]), _end_id(first),
                _end_id(last)))
            pending[name] += 0 if info is None else int(info["pending"])
    return {name: GroupTotals(lag=sum_known(lags[name]), pending=pending[name]) for name in groups}


# --- retention -------------------------------------------------------------------------


def apply_retention(client: redis.Redis, streams: Sequence[str], groups: Sequence[str], *,
                    acked: bool, max_length: int | None, max_age_ms: int | None,
                    now_ms: int) -> list[RetentionResult]:
    """One retention pass over a prefix's shards (T1..T3), one script per shard, one round trip.

    Per shard, atomically: the oldest id some group still needs is the minimum over the
    groups of their first pending id, else the id after their last-delivered id. With
    `acked`, an exact `XTRIM MINID <that id>` (never `~`) removes what every group has acked;
    a prefix with no group, or a group missing its consumer group on the shard, removes
    nothing by acks. Then the caps: `XTRIM MINID` at now - maxAgeMs and `XTRIM MAXLEN`, both
    exact so the count of unconsumed removals (entries at or above that oldest id) is exact.
    """
    result = apply_retention_many(client, [RetentionCall(streams, groups, acked, max_length,
                                                         max_age_ms)], now_ms)[0]
    if isinstance(result, StoreError):
        raise result
    return result


class RetentionCall(NamedTuple):
    """One prefix's pass for `apply_retention_many` (the fields of `apply_retention`)."""

    streams: Sequence[str]
    groups: Sequence[str]
    acked: bool
    max_length: int | None
    max_age_ms: int | None


def apply_retention_many(client: redis.Redis, calls: Sequence[RetentionCall],
                         now_ms: int) -> list[list[RetentionResult] | StoreError]:
    """`apply_retention` of many prefixes in ONE pipeline (T1..T3, each shard its own script);
    a pass with a failed shard comes back as its StoreError (the others still count)."""
    scripts: list[tuple[str, Sequence[Any]]] = []
    for call in calls:
        _check_positive("max_length", call.max_length)
        _check_positive("max_age_ms", call.max_age_ms)
        cut = age_cut_id(call.max_age_ms, now_ms) if call.max_age_ms is not None else None
        args = ["1" if call.acked else "0",
                "" if call.max_length is None else str(call.max_length), cut or "", *call.groups]
        scripts.extend((stream, args) for stream in call.streams)
    try:
        results = _retention_script.run_all(client, scripts)
    except STORE_IO_ERRORS as exc:
        raise StoreError(f"cannot apply retention: {exc}") from exc
    out: list[list[RetentionResult] | StoreError] = []
    start = 0
    for call in calls:
        mine = results[start:start + len(call.streams)]
        start += len(call.streams)
        try:
            _raise_errors("apply retention", call.streams, mine)
        except StoreError as exc:
            out.append(exc)
            continue
        out.append([RetentionResult(shard=stream, removed_acked=int(r[0]),
                                    removed_by_caps=int(r[1]), removed_unconsumed=int(r[2]),
                                    length=int(r[3]))
                    for stream, r in zip(call.streams, mine, strict=True)])
    return out


def trim_acked(client: redis.Redis, streams: Sequence[str], groups: Sequence[str]) -> list[int]:
    """T1 without caps: entries removed per shard because every group acked them."""
    results = apply_retention(client, streams, groups, acked=True, max_length=None,
                              max_age_ms=None, now_ms=0)
    return [r.removed_acked for r in results]


def enforce_caps(client: redis.Redis, streams: Sequence[str], groups: Sequence[str],
                 max_length: int | None, max_age_ms: int | None, now_ms: int) -> tuple[int, int]:
    """T2 alone: (entries removed by the caps, of which some group had not acked)."""
    results = apply_retention(client, streams, groups, acked=False, max_length=max_length,
                              max_age_ms=max_age_ms, now_ms=now_ms)
    return (sum(r.removed_by_caps for r in results), sum(r.removed_unconsumed for r in results))


def supports_xackdel(client: redis.Redis) -> bool:
    """Whether the server has XACKDEL (Redis >= 8.2): `COMMAND INFO XACKDEL` names it.

    On a cluster: every master has it (the command names no key, so each is asked)."""
    servers = ([node.redis_connection for node in client.get_primaries()]  # type: ignore[attr-defined]
               if is_cluster(client) else [client])
    try:
        replies = [server.execute_command("COMMAND INFO", "XACKDEL") for server in servers]
    except STORE_IO_ERRORS as exc:
        raise StoreError(f"cannot ask Redis for its commands: {exc}") from exc
    return all(bool(reply) and reply[0] is not None for reply in replies)


# --- drain -----------------------------------------------------------------------------


def drain_counts(client: redis.Redis, streams: Sequence[str],
                 groups: Sequence[str]) -> list[DrainCount]:
    """Per (shard, group): entries after last-delivered that still exist, and pending (R2, G2).

    An entry removed by retention counts as delivered; a missing stream (retired) is drained;
    a group with no consumer group on a shard has everything left to read there.
    """
    if not groups:
        return []
    try:
        results = _drain_script.run_all(client, [(stream, list(groups)) for stream in streams])
    except STORE_IO_ERRORS as exc:
        raise StoreError(f"cannot read drain progress: {exc}") from exc
    _raise_errors("read drain progress", streams, results)
    counts = []
    for stream, flat in zip(streams, results, strict=True):
        for index, group in enumerate(groups):
            counts.append(DrainCount(shard=stream, consumer_group=group,
                                     undelivered=int(flat[2 * index]),
                                     pending=int(flat[2 * index + 1])))
    return counts


def blocking_groups(client: redis.Redis, streams: Sequence[str],
                    groups: Sequence[str]) -> list[BlockingGroup]:
    """Groups that still have undelivered or pending entries on these (sealed, old) shards (G2)."""
    return blocking(drain_counts(client, streams, groups), groups)


# --- store identity --------------------------------------------------------------------


def ensure_store_id(client: redis.Redis, known: str | None = None) -> str:
    """The id of this Redis (`rsc:store-id`): written once, and again whenever it is missing.

    `known` is the id the coordinator already holds; it is written back if the key went
    missing (a flush), so the id stays the same for the coordinator's life. Returns the id
    Redis holds now (SET NX and GET in one round trip).
    """
    candidate = known if known is not None else secrets.token_hex(16)
    try:
        pipe = client.pipeline(transaction=False)
        pipe.set(STORE_ID_KEY, candidate, nx=True)
        pipe.get(STORE_ID_KEY)
        _, stored = pipe.execute()
    except STORE_IO_ERRORS as exc:
        raise StoreError(f"cannot read or write {STORE_ID_KEY}: {exc}") from exc
    return _text(stored)
