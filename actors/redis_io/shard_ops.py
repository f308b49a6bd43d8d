"""Redis-side reads and trims of a prefix's shard streams: lag, retention, drain, store id.

Blocking (redis-py's sync client); the coordinator calls these through
`trio.to_thread.run_sync`. Every function sends all its shards in ONE
pipeline (`transaction=False`), so the cost is one round trip however many
shards there are. Each command or script in it names the keys of one shard
only (the stream, or keys sharing its hash tag `{prefix:vN:i}`), so the same
calls work on Redis Cluster. Work that must read a shard's state and then act
on it (retention, drain counts) is a Lua script per shard: atomic on that
shard, and still one round trip. (Group lifecycle on the streams, G1 and G3,
is actors/redis_io/store.py's StreamAdmin.)

Written against Redis 7.0 (XINFO GROUPS `lag` and `entries-read` exist since
7.0). Differences in later servers are noted where they matter: XACKDEL
(asked of the server, rsc/common/server_features.py) and the cases where `lag`
is nil. The Lua scripts are files run by the one runner (rsc/common/lua.py).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import NamedTuple

import redis
from redis.exceptions import NoScriptError

from rsc.actors.core.shard_reports import (  # the values these reads return, re-exported
    DrainCount,
    GroupTotals,
    RetentionResult,
    ShardAges,
    ShardLag,
    age_cut_id,
    entry_age_ms,
    sum_known,
)
from rsc.actors.core.shard_reports import drain_report as drain_report
from rsc.actors.redis_io.store import STORE_IO_ERRORS, StoreError
from rsc.common import server_features
from rsc.common.lag import ends_commands, lag_from_ends
from rsc.common.lua import Call, Client, Reply, Script, load_all, reply_int, reply_list

STORE_ID_KEY = "rsc:store-id"

# --- pure helpers ----------------------------------------------------------------------


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _check_positive(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{name} must be an integer >= 1 or None, got {value!r}")


# --- scripts ---------------------------------------------------------------------------

# per shard, atomically: read its state and act on it (rsc/common/scripts/*.lua say KEYS, ARGV)
RETENTION_SCRIPT = Script("stream_ids", "retention")
DRAIN_SCRIPT = Script("stream_ids", "drain")
AGES_SCRIPT = Script("stream_ids", "ages")  # C4: the node's TIME and the oldest entries' ids


def load_scripts(client: Client) -> None:
    """Load every script now (at start), so the first call costs one round trip too."""
    try:
        load_all(client, (RETENTION_SCRIPT, DRAIN_SCRIPT, AGES_SCRIPT))
    except STORE_IO_ERRORS as exc:
        raise StoreError(f"cannot load the shard scripts: {exc}") from exc


def _raise_errors(what: str, streams: Sequence[str], results: Sequence[object]) -> None:
    for stream, result in zip(streams, results, strict=True):
        if isinstance(result, Exception):
            raise StoreError(f"cannot {what} on {stream}: {result}")


# --- lag -------------------------------------------------------------------------------


PENDING_LOOKED_AT = 100  # the oldest pending entries whose delivery counts describeGroup shows


def shard_lag(client: Client, streams: Sequence[str], group: str) -> list[ShardLag]:
    """Length, last-delivered id, lag, pending, oldest pending idle time and the highest
    delivery count among the oldest pending entries (P1), per shard.

    One round trip for all shards: XLEN, XINFO GROUPS and `XPENDING key group - + 100` (the
    pending list is ordered by id, so its first entry is the oldest, with its idle time; an
    entry a handler keeps failing or crashing on stays pending, so it is among the oldest).
    A missing stream reads as empty; a missing consumer group as `last_delivered_id` None.

    `lag` follows the one lag rule (rsc/common/lag.py). Redis's own is nil on Redis 7.0 when
    the group's entries-read counter is unknown and cannot be estimated: the group was
    created or moved (SETID) to an id strictly inside the stream (a reset to a timestamp),
    or an entry after its last-delivered id was deleted (XDEL). It is known again once the
    group reads up to the last entry. Entries deleted by XACKDEL leave the same kind of gap,
    so expect nil more often there.

    C4: the same round trip runs the ages script per shard (the oldest undelivered and
    pending entries' ages against the node's TIME); a shard whose script failed shows none.
    """
    try:
        pipe = client.pipeline(transaction=False)
        for stream in streams:
            pipe.xinfo_groups(stream)
            pipe.xpending_range(stream, group, "-", "+", PENDING_LOOKED_AT)
            _queue_ends(pipe, stream)
        for _, words in AGES_SCRIPT.commands([([stream], [group]) for stream in streams]):
            pipe.execute_command(*words)
        results = pipe.execute(raise_on_error=False)
        replies = results[5 * len(streams):]
        if any(isinstance(reply, NoScriptError) for reply in replies):
            replies = AGES_SCRIPT.run_on(client, [([stream], [group]) for stream in streams])
    except STORE_IO_ERRORS as exc:
        raise StoreError(f"cannot read shard lag: {exc}") from exc
    ages = {age.shard: age for stream, reply in zip(streams, replies, strict=True)
            for age in _ages(stream, [group], reply).values()}
    lags = []
    for index, stream in enumerate(streams):
        infos, first_pending, length, first, last = results[5 * index: 5 * index + 5]
        if isinstance(length, Exception):
            raise StoreError(f"cannot read the length of {stream}: {length}")
        info = None
        if not isinstance(infos, Exception):
            info = next((g for g in infos if _text(g["name"]) == group), None)
        if info is None:
            lags.append(ShardLag(shard=stream, length=length, last_delivered_id=None, lag=None,
                                 pending=0, oldest_pending_ms=None))
            continue
        oldest = max_deliveries = None
        if not isinstance(first_pending, Exception) and first_pending:
            oldest = int(first_pending[0]["time_since_delivered"])
            max_deliveries = max(int(row["times_delivered"]) for row in first_pending)
        last_delivered = _text(info["last-delivered-id"])
        lag = lag_from_ends(info.get("lag"), last_delivered, (length, first, last))
        age = ages.get(stream)
        lags.append(ShardLag(
            shard=stream, length=length, last_delivered_id=last_delivered,
            lag=lag, pending=int(info["pending"]), oldest_pending_ms=oldest,
            max_delivery_count=max_deliveries,
            oldest_undelivered_age_ms=None if age is None else age.oldest_undelivered_age_ms,
            oldest_pending_entry_age_ms=None if age is None else age.oldest_pending_entry_age_ms))
    return lags


def _ages(stream: str, groups: Sequence[str], reply: Reply) -> dict[str, ShardAges]:
    """The ages script's reply for one shard, per group (none when the script failed)."""
    if isinstance(reply, Exception) or not isinstance(reply, list) or not reply:
        return {}
    now_ms = reply_int(reply[0])
    ids = [_text(value) for value in reply[1:]]
    return {group: ShardAges(shard=stream,
                             oldest_undelivered_age_ms=entry_age_ms(ids[2 * n], now_ms),
                             oldest_pending_entry_age_ms=entry_age_ms(ids[2 * n + 1], now_ms))
            for n, group in enumerate(groups)}


def group_ages(client: Client, streams: Sequence[str], groups: Sequence[str]
               ) -> dict[str, list[ShardAges]]:
    """C4: per group, its ages on every shard whose script answered (one round trip)."""
    return group_ages_many(client, [(streams, groups)])[0]


def group_ages_many(client: Client, reads: Sequence[tuple[Sequence[str], Sequence[str]]]
                    ) -> list[dict[str, list[ShardAges]]]:
    """`group_ages` of many prefixes, (streams, groups) each, in ONE round trip (one ages
    script per shard): the source of `rsc_group_lag_seconds` and `rsc_group_pending_age_seconds`."""
    calls = [([stream], list(groups)) for streams, groups in reads if groups for stream in streams]
    try:
        replies = AGES_SCRIPT.run_on(client, calls)
    except STORE_IO_ERRORS as exc:
        raise StoreError(f"cannot read group ages: {exc}") from exc
    out: list[dict[str, list[ShardAges]]] = []
    position = 0
    for streams, groups in reads:
        found: dict[str, list[ShardAges]] = {group: [] for group in groups}
        if groups:
            for stream in streams:
                for group, age in _ages(stream, groups, replies[position]).items():
                    found[group].append(age)
                position += 1
        out.append(found)
    return out


def _queue_ends(pipe: redis.client.Pipeline, stream: str) -> None:
    """Queue what the lag rule needs of the stream besides Redis's lag (rsc/common/lag.py).
    Its replies are read undecoded: the first and last entries come with their values, which
    may be any bytes (M1), and the store's client decodes replies as UTF-8."""
    for command in ends_commands(stream):
        pipe.execute_command(*command, NEVER_DECODE=True)


def group_totals(client: Client, streams: Sequence[str],
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


def group_totals_many(client: Client, reads: Sequence[tuple[Sequence[str], Sequence[str]]]
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
        ends: dict[int, tuple[object, ...]] = {}
        if needing:
            pipe = client.pipeline(transaction=False)
            for index in needing:
                _queue_ends(pipe, streams[index])
            replies = pipe.execute(raise_on_error=False)
            ends = {index: tuple(replies[3 * n: 3 * n + 3])
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


def _totals(groups: Sequence[str], shards: Sequence[tuple[Reply, object, object, object]]
            ) -> dict[str, GroupTotals]:
    lags: dict[str, list[int | None]] = {name: [] for name in groups}
    pending = dict.fromkeys(groups, 0)
    for infos, length, first, last in shards:
        by_name = {} if isinstance(infos, Exception) else {
            _text(g["name"]): g for g in reply_list(infos) if isinstance(g, dict)}
        for name in groups:
            info = by_name.get(name)
            lags[name].append(None if info is None else lag_from_ends(
                info.get("lag"), _text(info["last-delivered-id"]), (length, first, last)))
            pending[name] += 0 if info is None else int(info["pending"])
    return {name: GroupTotals(lag=sum_known(lags[name]), pending=pending[name]) for name in groups}


# --- retention -------------------------------------------------------------------------


def _retention_result(stream: str, counts: list[Reply]) -> RetentionResult:
    """The retention script's reply for one shard: removed by acks, by caps, of them
    unconsumed, and the length left."""
    return RetentionResult(shard=stream, removed_acked=reply_int(counts[0]),
                           removed_by_caps=reply_int(counts[1]),
                           removed_unconsumed=reply_int(counts[2]), length=reply_int(counts[3]))


def apply_retention(client: Client, streams: Sequence[str], groups: Sequence[str], *,
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


def apply_retention_many(client: Client, calls: Sequence[RetentionCall],
                         now_ms: int) -> list[list[RetentionResult] | StoreError]:
    """`apply_retention` of many prefixes in ONE pipeline (T1..T3, each shard its own script);
    a pass with a failed shard comes back as its StoreError (the others still count)."""
    scripts: list[Call] = []
    for call in calls:
        _check_positive("max_length", call.max_length)
        _check_positive("max_age_ms", call.max_age_ms)
        cut = age_cut_id(call.max_age_ms, now_ms) if call.max_age_ms is not None else None
        args = ["1" if call.acked else "0",
                "" if call.max_length is None else str(call.max_length), cut or "", *call.groups]
        scripts.extend(([stream], args) for stream in call.streams)
    try:
        results = RETENTION_SCRIPT.run_on(client, scripts)
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
        out.append([_retention_result(stream, reply_list(r))
                    for stream, r in zip(call.streams, mine, strict=True)])
    return out


def supports_xackdel(client: Client) -> bool:
    """Whether every master has XACKDEL (rsc/common/server_features.py asks the server)."""
    try:
        return server_features.supports_xackdel(client)
    except STORE_IO_ERRORS as exc:
        raise StoreError(f"cannot ask Redis for its commands: {exc}") from exc


# --- drain -----------------------------------------------------------------------------


def drain_counts(client: Client, streams: Sequence[str],
                 groups: Sequence[str]) -> list[DrainCount]:
    """Per (shard, group): entries after last-delivered that still exist, and pending (R2, G2).

    An entry removed by retention counts as delivered; a missing stream (retired) is drained;
    a group with no consumer group on a shard has everything left to read there.
    """
    if not groups:
        return []
    try:
        results = DRAIN_SCRIPT.run_on(client, [([stream], list(groups)) for stream in streams])
    except STORE_IO_ERRORS as exc:
        raise StoreError(f"cannot read drain progress: {exc}") from exc
    _raise_errors("read drain progress", streams, results)
    counts = []
    for stream, reply in zip(streams, results, strict=True):
        flat = reply_list(reply)
        for index, group in enumerate(groups):
            counts.append(DrainCount(shard=stream, consumer_group=group,
                                     undelivered=reply_int(flat[2 * index]),
                                     pending=reply_int(flat[2 * index + 1])))
    return counts


# --- store identity --------------------------------------------------------------------


def read_store_id(client: Client) -> str | None:
    """The `rsc:store-id` this Redis holds, None when it holds none (K8: lost, or new)."""
    try:
        stored = client.get(STORE_ID_KEY)
    except STORE_IO_ERRORS as exc:
        raise StoreError(f"cannot read {STORE_ID_KEY}: {exc}") from exc
    return None if stored is None else _text(stored)


def ensure_store_id(client: Client, known: str | None = None) -> str:
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
