"""The ack book: handled ids per (shard, generation) until the acker takes them (pure).

Workers add the id of every handled entry; the acker takes up to a batch of
them per round trip, grouped by the (shard, generation) they were read under,
so the ledger can admit each group right before its ack (D1). A worker that
acks before its handler (`AckPolicy.BEFORE`) leaves a waiter on its buffer,
set once the acker has sent it.
"""

from __future__ import annotations

from typing import Protocol


class Waiter(Protocol):
    """What a worker waiting for its ack leaves on the buffer (a `trio.Event` is one)."""

    def set(self) -> None: ...


class AckBuffer:
    """Ids of one shard, read under one generation, handled and waiting for the acker."""

    __slots__ = ("shard", "generation", "ids", "sent", "refused")

    def __init__(self, shard: str, generation: int) -> None:
        self.shard = shard
        self.generation = generation
        self.ids: list[str] = []
        self.sent: Waiter | None = None  # left by AckPolicy.BEFORE workers waiting on it
        self.refused = False


Taken = list[tuple[AckBuffer, list[str], bool]]


class AckBook:
    """Handled ids per (shard, generation) until the acker takes them."""

    def __init__(self) -> None:
        self.buffers: dict[tuple[str, int], AckBuffer] = {}
        self.pending = 0  # ids in `buffers`
        self.awaited = 0  # AckPolicy.BEFORE workers waiting for their ack

    def add(self, shard: str, generation: int, entry_id: str) -> AckBuffer:
        """A handled entry of `shard`, read under `generation`, is to be acked."""
        key = (shard, generation)
        buffer = self.buffers.get(key)
        if buffer is None:
            buffer = self.buffers[key] = AckBuffer(shard, generation)
        buffer.ids.append(entry_id)
        self.pending += 1
        return buffer

    def take(self, budget: int) -> Taken:
        """Up to `budget` ids, oldest buffer first: (buffer, ids, whether that empties it)."""
        taken: Taken = []
        for key, buffer in list(self.buffers.items()):
            if budget <= 0:
                break
            if len(buffer.ids) <= budget:
                ids, complete = buffer.ids, True
                del self.buffers[key]
            else:
                ids, complete = buffer.ids[:budget], False
                del buffer.ids[:budget]
            budget -= len(ids)
            self.pending -= len(ids)
            taken.append((buffer, ids, complete))
        return taken
