"""Sticky uniform assignor (H2): counts differ by at most one, minimal movement.

Pure. Like Kafka's uniform assignor: every member keeps the shards it already
has while that stays balanced; only the surplus of over-full members and the
shards of departed members move, to the members with the fewest.

`TargetAssignment` is incremental: adding or removing a member or changing the
shard set costs O(moved shards x log members), not a pass over every shard,
so a join at 10,000 members x 50 shards stays in milliseconds. `assign` is
the from-scratch form (same rules) for tests and benchmarks.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence


class TargetAssignment:
    """The target assignment of one group, kept balanced under incremental changes.

    Deterministic: the same sequence of changes gives the same targets.
    `changed` collects the members whose target changed since `take_changed`.
    """

    def __init__(self, shards: Sequence[str] = (),
                 previous: Mapping[str, Iterable[str]] | None = None) -> None:
        self.shards: tuple[str, ...] = tuple(shards)
        self.owner: dict[str, str] = {}
        self.targets: dict[str, set[str]] = {}
        self.changed: set[str] = set()
        self._index = {shard: index for index, shard in enumerate(self.shards)}
        self._unassigned: set[str] = set()
        self._min_heap: list[tuple[int, str]] = []
        self._max_heap: list[tuple[int, str]] = []
        valid = set(self.shards)
        for member_id in sorted(previous or {}):
            mine = self.targets[member_id] = set()
            for shard in previous[member_id] if previous else ():
                if shard in valid and shard not in self.owner:
                    mine.add(shard)
                    self.owner[shard] = member_id
        self._unassigned = valid - set(self.owner)
        self._rebuild_heaps()
        self._fill_and_balance()
        self.changed = set(self.targets)

    # --- changes -----------------------------------------------------------------

    def add_member(self, member_id: str) -> None:
        if member_id in self.targets:
            return
        self.targets[member_id] = set()
        self.changed.add(member_id)
        self._push(member_id)
        self._fill_and_balance()

    def remove_member(self, member_id: str) -> None:
        shards = self.targets.pop(member_id, None)
        if shards is None:
            return
        self.changed.discard(member_id)
        for shard in shards:
            del self.owner[shard]
        self._unassigned |= shards
        self._fill_and_balance()

    def rename_member(self, old: str, new: str) -> None:
        """`new` takes over `old`'s target as it is (S3: a static member's return under a new
        memberId); no shard moves and nobody else's target changes."""
        if new in self.targets:
            raise ValueError(f"member {new!r} already has a target")
        shards = self.targets.pop(old)
        self.targets[new] = shards
        for shard in shards:
            self.owner[shard] = new
        if old in self.changed:
            self.changed.discard(old)
            self.changed.add(new)
        self._push(new)  # the old member's heap entries are stale now and get skipped

    def set_shards(self, shards: Sequence[str]) -> None:
        self.shards = tuple(shards)
        self._index = {shard: index for index, shard in enumerate(self.shards)}
        for shard in [s for s in self.owner if s not in self._index]:
            member_id = self.owner.pop(shard)
            self.targets[member_id].discard(shard)
            self.changed.add(member_id)
            self._push(member_id)
        self._unassigned = {s for s in self.shards if s not in self.owner}
        self._fill_and_balance()

    # --- views -------------------------------------------------------------------

    def of(self, member_id: str) -> frozenset[str]:
        return frozenset(self.targets.get(member_id, ()))

    def as_dict(self) -> dict[str, frozenset[str]]:
        return {member_id: frozenset(shards) for member_id, shards in self.targets.items()}

    def take_changed(self) -> set[str]:
        changed, self.changed = self.changed, set()
        return changed

    # --- balancing ---------------------------------------------------------------

    def _rebuild_heaps(self) -> None:
        self._min_heap = [(len(s), m) for m, s in self.targets.items()]
        self._max_heap = [(-len(s), m) for m, s in self.targets.items()]
        heapq.heapify(self._min_heap)
        heapq.heapify(self._max_heap)

    def _push(self, member_id: str) -> None:
        load = len(self.targets[member_id])
        heapq.heappush(self._min_heap, (load, member_id))
        heapq.heappush(self._max_heap, (-load, member_id))

    def _least_loaded(self) -> str:
        while True:
            load, member_id = self._min_heap[0]
            shards = self.targets.get(member_id)
            if shards is not None and len(shards) == load:
                return member_id
            heapq.heappop(self._min_heap)  # stale entry

    def _most_loaded(self) -> str:
        while True:
            load, member_id = self._max_heap[0]
            shards = self.targets.get(member_id)
            if shards is not None and len(shards) == -load:
                return member_id
            heapq.heappop(self._max_heap)

    def _bulk_fill(self) -> None:
        """Hand out many free shards at once: fill every member up to its quota."""
        total = len(self.owner) + len(self._unassigned)
        base, extra = divmod(total, len(self.targets))
        ranked = sorted(self.targets, key=lambda m: (-len(self.targets[m]), m))
        free = sorted(self._unassigned, key=self._index.__getitem__, reverse=True)
        for rank, member_id in enumerate(ranked):
            mine = self.targets[member_id]
            want = base + (1 if rank < extra else 0) - len(mine)
            if want > 0 and free:
                self.changed.add(member_id)
            while want > 0 and free:
                shard = free.pop()
                mine.add(shard)
                self.owner[shard] = member_id
                want -= 1
        self._unassigned = set(free)
        self._rebuild_heaps()

    def _give(self, shard: str, member_id: str) -> None:
        self.targets[member_id].add(shard)
        self.owner[shard] = member_id
        self.changed.add(member_id)
        self._push(member_id)

    def _fill_and_balance(self) -> None:
        if not self.targets:
            return
        if len(self._min_heap) > 4 * len(self.targets) + 64:
            self._rebuild_heaps()  # keep stale entries bounded
        if len(self._unassigned) > len(self.targets):
            self._bulk_fill()
        for shard in sorted(self._unassigned, key=self._index.__getitem__):
            self._give(shard, self._least_loaded())
        self._unassigned.clear()
        # a donor's shards in order, sorted once per call: the shard that moves is its greatest
        # (deterministic), found in O(1) instead of a pass over its set on every move
        ranked: dict[str, list[str]] = {}
        while True:
            most, least = self._most_loaded(), self._least_loaded()
            if len(self.targets[most]) - len(self.targets[least]) <= 1:
                return
            order = ranked.get(most)
            if order is None:
                order = ranked[most] = sorted(self.targets[most])
            shard = order.pop()
            self.targets[most].discard(shard)
            self.changed.add(most)
            self._push(most)
            ranked.pop(least, None)  # it gains a shard: its order is stale
            self._give(shard, least)


def assign(
    members: Iterable[str],
    shards: Sequence[str],
    previous: Mapping[str, Iterable[str]],
) -> dict[str, frozenset[str]]:
    """Target assignment of `shards` over `members`, sticky to `previous`, from scratch."""
    member_ids = sorted(set(members))
    kept = {member_id: previous.get(member_id, ()) for member_id in member_ids}
    return TargetAssignment(shards, kept).as_dict()
