"""Key-ordered work queue (Confluent Parallel Consumer's KEY mode): pure, no I/O.

Messages with the same (shard, partition key) run one at a time in arrival
order; different keys run in parallel. Keys become runnable in arrival order,
so no key starves.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar


class Keyed(Protocol):
    @property
    def shard(self) -> str: ...

    @property
    def key(self) -> str: ...


ItemT = TypeVar("ItemT", bound=Keyed)
OrderKey = tuple[str, Hashable]


class KeyOrderedQueue(Generic[ItemT]):
    """Queued messages by (shard, key); `pop_ready` hands out the next one allowed to run."""

    def __init__(self) -> None:
        self._queues: dict[OrderKey, deque[ItemT]] = {}
        self._running: set[OrderKey] = set()
        self._ready: deque[OrderKey] = deque()
        self._in_ready: set[OrderKey] = set()
        self._queued = 0

    def __len__(self) -> int:
        """Messages queued, not yet handed out."""
        return self._queued

    def push(self, item: ItemT) -> None:
        """Queue a message behind earlier ones of its key."""
        order_key = (item.shard, item.key)
        self._queues.setdefault(order_key, deque()).append(item)
        self._queued += 1
        self._mark_ready(order_key)

    def pop_ready(self) -> ItemT | None:
        """The next message whose key has nothing running, or None; its key is now running."""
        while self._ready:
            order_key = self._ready.popleft()
            self._in_ready.discard(order_key)
            queue = self._queues.get(order_key)
            if not queue or order_key in self._running:
                continue
            item = queue.popleft()
            if not queue:
                del self._queues[order_key]
            self._queued -= 1
            self._running.add(order_key)
            return item
        return None

    def done(self, item: ItemT) -> None:
        """The message handed out for `item`'s key finished; the key's next may run."""
        order_key = (item.shard, item.key)
        self._running.discard(order_key)
        self._mark_ready(order_key)

    def drop_shard(self, shard: str) -> list[ItemT]:
        """Remove and return every queued (not running) message of `shard`."""
        dropped: list[ItemT] = []
        for order_key in [k for k in self._queues if k[0] == shard]:
            dropped.extend(self._queues.pop(order_key))
            self._in_ready.discard(order_key)
        self._queued -= len(dropped)
        return dropped

    def _mark_ready(self, order_key: OrderKey) -> None:
        if (order_key in self._queues and order_key not in self._running
                and order_key not in self._in_ready):
            self._ready.append(order_key)
            self._in_ready.add(order_key)
