"""Key-ordered work queue (Confluent Parallel Consumer's KEY mode): pure, no I/O.

Messages with the same (shard, partition key) run one at a time in arrival
order; different keys run in parallel. Keys become runnable in arrival order,
so no key starves.

Layout (every operation is O(1) except `drop_shard`): a key is *active* while
one of its messages is ready or running. `_ready` holds ready messages (at
most one per key, the key's oldest); `_waiting[key]` holds the messages behind
it, or None when there are none (most keys, most of the time: no deque is
allocated for a key seen once). A message whose key is not active goes
straight to `_ready`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from typing import Any, Generic, Protocol, TypeVar


class Keyed(Protocol):
    @property
    def shard(self) -> str: ...

    @property
    def key(self) -> str: ...


ItemT = TypeVar("ItemT")
OrderKey = tuple[str, Hashable]


def shard_and_key(item: Keyed) -> OrderKey:
    """The default order key: the item's (shard, key) attributes."""
    return (item.shard, item.key)


class KeyOrderedQueue(Generic[ItemT]):
    """Queued messages by (shard, key); `pop_ready` hands out the next one allowed to run.

    `order_key(item)` gives an item's (shard, key); by default its attributes.
    """

    __slots__ = ("_ready", "_waiting", "_queued", "_order_key")

    def __init__(self, order_key: Callable[[Any], OrderKey] = shard_and_key) -> None:
        self._ready: deque[ItemT] = deque()
        self._waiting: dict[OrderKey, deque[ItemT] | None] = {}
        self._queued = 0
        self._order_key = order_key

    def __len__(self) -> int:
        """Messages queued, not yet handed out."""
        return self._queued

    @property
    def ready(self) -> int:
        """Messages that may be handed out now."""
        return len(self._ready)

    def push(self, item: ItemT) -> None:
        """Queue a message behind earlier ones of its key."""
        order_key = self._order_key(item)
        waiting = self._waiting
        self._queued += 1
        if order_key in waiting:
            behind = waiting[order_key]
            if behind is None:
                waiting[order_key] = deque((item,))
            else:
                behind.append(item)
        else:
            waiting[order_key] = None
            self._ready.append(item)

    def push_many(self, items: list[ItemT]) -> None:
        """`push` each of `items`, in order (`push` in line: once per entry read)."""
        order_key, waiting, ready = self._order_key, self._waiting, self._ready
        self._queued += len(items)
        for item in items:
            key = order_key(item)
            if key in waiting:
                behind = waiting[key]
                if behind is None:
                    waiting[key] = deque((item,))
                else:
                    behind.append(item)
            else:
                waiting[key] = None
                ready.append(item)

    def pop_ready(self) -> ItemT | None:
        """The next message whose key has nothing running, or None; its key is now running."""
        if self._ready:
            self._queued -= 1
            return self._ready.popleft()
        return None

    def done(self, item: ItemT) -> bool:
        """The message handed out for `item`'s key finished; the key's next may run.

        True when that made a message ready.
        """
        order_key = self._order_key(item)
        behind = self._waiting.get(order_key)
        if behind:
            self._ready.append(behind.popleft())
            if not behind:
                self._waiting[order_key] = None
            return True
        self._waiting.pop(order_key, None)
        return False

    def resume(self, item: ItemT) -> None:
        """Hand `item` out again, first: it never stopped running for its key (a message back
        from waiting for its next attempt, L4), so nothing else of its key ran meanwhile."""
        self._queued += 1
        self._ready.appendleft(item)

    def drop_shard(self, shard: str) -> list[ItemT]:
        """Remove and return every queued (not running) message of `shard`."""
        dropped: list[ItemT] = []
        kept: deque[ItemT] = deque()
        for item in self._ready:
            order_key = self._order_key(item)
            if order_key[0] == shard:
                dropped.append(item)
                # its key has nothing running: it is no longer active
                behind = self._waiting.pop(order_key, None)
                if behind:
                    dropped.extend(behind)
            else:
                kept.append(item)
        self._ready = kept
        for order_key in [k for k in self._waiting if k[0] == shard]:
            behind = self._waiting[order_key]
            if behind:
                dropped.extend(behind)
            self._waiting[order_key] = None  # a message of this key is still running
        self._queued -= len(dropped)
        return dropped
