"""How many more entries a member's reader may take (`rsc consume --max-messages N`).

Pure: no I/O.

A reader with a budget reads no more than is left of it: XREADGROUP's COUNT (which
counts per stream) and the shards of one read are cut so that one read cannot return
more, and a read goes ahead of the last one's reply only while what is left covers
everything the reads in flight could return (`ahead_fits`). So a consumer that stops
after N messages leaves nothing delivered but unhandled in its group's pending list. Entries read but never
handled here (a revoked shard's queue, a read for a shard no longer held) are given
back (so the run still ends); members of one `rsc consume` share one budget. What a
member read for a shard it then lost stays pending for the shard's new owner: with
several members that rebalance while they start, a few entries can be left so.
"""

from __future__ import annotations


class ReadBudget:
    """At most `limit` entries read and not given back (None: no limit)."""

    def __init__(self, limit: int | None) -> None:
        if limit is not None and limit < 0:
            raise ValueError(f"a read budget is 0 or more, got {limit}")
        self.limit = limit
        self.read = 0
        self.given_back = 0

    def left(self) -> int | None:
        """Entries that may still be read; None without a limit."""
        if self.limit is None:
            return None
        return max(0, self.limit - (self.read - self.given_back))

    def took(self, count: int) -> None:
        """A read returned `count` entries."""
        self.read += count

    def give_back(self, count: int) -> None:
        """`count` entries read will not be handled here (dropped, or for a shard gone)."""
        self.given_back += count

    def restart(self, handled: int) -> None:
        """New readers after `handled` entries were handled: nothing else is out."""
        self.read, self.given_back = handled, 0


def read_shape(shards: tuple[str, ...], count: int, left: int | None,
               turn: int = 0) -> tuple[tuple[str, ...], int]:
    """The shards of one XREADGROUP and its COUNT (per stream) so that it returns at most
    `left` entries (None: no limit): fewer shards when fewer entries are left than shards,
    taken in turn from `turn` (the reader counts its reads), so an empty shard first in
    line does not keep the others from being read."""
    if left is None or not shards:
        return shards, count
    if left < len(shards):
        start = turn % len(shards)
        return (shards[start:] + shards[:start])[:left], 1
    return shards, max(1, min(count, left // len(shards)))


PROBE_BLOCK_MS = 1
"""BLOCK of a read over a part of the held shards while other parts are still unlooked at."""


def part_block_ms(held: int, part: int, empty_parts: int, block_ms: int) -> int:
    """The BLOCK of a read over `part` of the `held` shards (read_shape cut it so), after
    `empty_parts` reads in a row found their part empty: while some part of this round is still
    unlooked at, PROBE_BLOCK_MS, so a budget's last few entries in a later part are not found
    one full BLOCK per empty part; the last part of a round that found nothing gets the full
    `block_ms` (the shards are empty: wait for new entries as a reader without a budget does),
    and the next round looks again."""
    if part <= 0 or part >= held:
        return block_ms
    parts = -(-held // part)
    return PROBE_BLOCK_MS if empty_parts % parts < parts - 1 else block_ms


def ahead_fits(left: int, in_flight: int, shards: int, count: int) -> bool:
    """A read ahead over `shards` with COUNT `count` (per stream) may go: `left` entries may
    still be read, and the reads in flight can return at most `in_flight` of them."""
    return shards > 0 and left - in_flight >= shards * count
