"""The lag rule, the same for the coordinator's reads and the member's gauge. Pure.

Lag is Redis's own XINFO GROUPS `lag` where Redis has one. Redis 7.x reports
nil once entries were trimmed or deleted inside what the group has not read
(the `acked` retention does exactly that, and XACKDEL leaves the same gaps) or
after a SETID into the stream. Two cases still have an exact answer: the group
has delivered the last entry (lag 0), or every entry left comes after its
last-delivered id (lag = length). Otherwise the lag is unknown (None).

Telling those cases needs the stream's length and its first and last ids: the
callers queue `ends_commands` for the shards where Redis gave no lag and hand
the replies to `known_lag`.
"""

from __future__ import annotations

from collections.abc import Sequence


def ends_commands(stream: str) -> list[tuple[str, ...]]:
    """The commands whose replies `known_lag` needs: the length, the first and last entry."""
    return [("XLEN", stream), ("XRANGE", stream, "-", "+", "COUNT", "1"),
            ("XREVRANGE", stream, "+", "-", "COUNT", "1")]


def end_id(reply: object) -> str | None:
    """The entry id of an XRANGE / XREVRANGE COUNT 1 reply (None: empty, or failed)."""
    if not isinstance(reply, list | tuple) or not reply:
        return None  # empty, or the read failed
    entry_id = reply[0][0]
    return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)


def stream_id(entry_id: str) -> tuple[int, int]:
    """A stream id as (milliseconds, sequence), for comparisons."""
    milliseconds, _, sequence = entry_id.partition("-")
    return int(milliseconds), int(sequence or 0)


def known_lag(redis_lag: int | str | None, length: object, last_delivered: str | None,
              first_id: str | None, last_id: str | None) -> int | None:
    """Redis's own lag, or what can be told without it (the module docstring)."""
    if redis_lag is not None:
        return int(redis_lag)
    if not isinstance(length, int) or last_delivered is None:
        return None  # the length was not read, or its read failed
    if length == 0 or (last_id is not None and stream_id(last_delivered) >= stream_id(last_id)):
        return 0
    if first_id is not None and stream_id(first_id) > stream_id(last_delivered):
        return length
    return None


def lag_from_ends(redis_lag: int | str | None, last_delivered: str | None,
                  ends: Sequence[object]) -> int | None:
    """`known_lag` from the replies of `ends_commands` (length, first, last)."""
    length, first, last = ends
    return known_lag(redis_lag, length, last_delivered, end_id(first), end_id(last))


# --- the backlog: what the operator tools display --------------------------------------
#
# Display words (docs/reference/glossary): *undelivered* is the lag above (entries the group
# has not read yet), *unacked* is Redis's pending count (entries read by a member and not
# acked yet: the wire's `pending`), and the *backlog* is both together: what the group still
# has to finish. A group whose members read far ahead has 0 undelivered and a large backlog.


def backlog(undelivered: int | None, unacked: int | None) -> int | None:
    """Undelivered plus unacked entries; None when either is unknown (Redis could not tell)."""
    if undelivered is None or unacked is None:
        return None
    if undelivered < 0 or unacked < 0:
        raise ValueError(f"entry counts cannot be negative: undelivered {undelivered}, "
                         f"unacked {unacked}")
    return undelivered + unacked


def backlog_floor(undelivered: int | None, unacked: int | None) -> int:
    """What the backlog is at least: the known parts (unknown ones count 0)."""
    return (undelivered or 0) + (unacked or 0)


def total_backlog(shards: Sequence[tuple[int | None, int | None]]) -> int | None:
    """The backlog of several shards, each `(undelivered, unacked)`; None if any is unknown."""
    total = 0
    for undelivered, unacked in shards:
        part = backlog(undelivered, unacked)
        if part is None:
            return None
        total += part
    return total
