"""The queue between a member's reader and its workers, and a re-armable signal.

`WorkQueue` is the key-ordered queue (ordering.py) plus the parking of the
workers that take from it: a worker calls `pop(index)` and, when that gives
nothing, `await wait(index)`. Only workers with an index below the worker
count take work; the others wait until the count grows. Pushing wakes as many
idle workers as there are new items, finishing a key wakes one for its next
item, and taking an item from a full queue calls `on_room` (the reader's
wake-up). Nothing here decides what runs: the ledger does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

import trio

from rsc.member.pure.ordering import KeyOrderedQueue, OrderKey

ItemT = TypeVar("ItemT")


class Signal:
    """A re-armable broadcast: `fire()` wakes every current waiter."""

    def __init__(self) -> None:
        self._event = trio.Event()

    def fire(self) -> None:
        self._event.set()
        self._event = trio.Event()

    async def wait(self) -> None:
        await self._event.wait()

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        while not condition():
            await self._event.wait()


class Lot(Protocol):
    """Where idle workers park: trio's `ParkingLot`, or a host's own (asyncio's)."""

    async def park(self) -> None: ...

    def unpark(self, *, count: int = 1) -> object: ...

    def unpark_all(self) -> object: ...


class WorkQueue(Generic[ItemT]):
    """Key-ordered items for a pool of `workers` long-lived workers."""

    def __init__(self, order_key: Callable[[ItemT], OrderKey], *, workers: int,
                 max_buffered: int, on_room: Callable[[], None]) -> None:
        self._items: KeyOrderedQueue[ItemT] = KeyOrderedQueue(order_key)
        self._workers = workers
        self._max_buffered = max_buffered
        self._on_room = on_room
        self.room_wanted = False  # set by the reader while it waits for room
        self._idle: Lot = trio.lowlevel.ParkingLot()
        self._over_limit: Lot = trio.lowlevel.ParkingLot()

    def park_on(self, make_lot: Callable[[], Lot], on_room: Callable[[], None]) -> None:
        """Workers of another host (asyncio) park on lots of its own and wake the reader
        its own way; called before any worker parks."""
        self._idle, self._over_limit, self._on_room = make_lot(), make_lot(), on_room

    def __len__(self) -> int:
        """Items queued, not yet taken."""
        return len(self._items)

    @property
    def workers(self) -> int:
        return self._workers

    @property
    def has_room(self) -> bool:
        return len(self._items) < self._max_buffered

    def push_many(self, items: list[ItemT]) -> None:
        """Queue items behind earlier ones of their keys; wake idle workers for them."""
        if items:
            self._items.push_many(items)
            if self._idle:
                self._idle.unpark(count=len(items))

    def pop(self, index: int) -> ItemT | None:
        """The next item worker `index` may run, or None: then `await wait(index)`."""
        if index >= self._workers:
            return None
        item = self._items.pop_ready()
        if item is not None and self.room_wanted and len(self._items) < self._max_buffered:
            self.room_wanted = False
            self._on_room()
        return item

    async def wait(self, index: int) -> None:
        """Park worker `index` until it may have work (or its index is in use again)."""
        if index >= self._workers:
            if self._items.ready and self._idle:
                self._idle.unpark()  # pass on a wakeup meant for a worker that may work
            await self._over_limit.park()
        else:
            await self._idle.park()

    def done(self, item: ItemT) -> None:
        """The item taken for its key finished: its key's next item may run."""
        if self._items.done(item) and self._items.ready > 1 and self._idle:
            self._idle.unpark()  # this worker takes one, a parked one the next

    def resume(self, item: ItemT) -> None:
        """An item whose key it still holds is to run again, before anything else (L4)."""
        self._items.resume(item)
        if self._idle:
            self._idle.unpark()

    def drop_shard(self, shard: str) -> list[ItemT]:
        """Remove every queued (not taken) item of `shard`."""
        return self._items.drop_shard(shard)

    def set_workers(self, workers: int) -> None:
        """Change how many workers take work; parked workers re-check their place."""
        if workers != self._workers:
            self._workers = workers
            self._over_limit.unpark_all()
            self._idle.unpark_all()
