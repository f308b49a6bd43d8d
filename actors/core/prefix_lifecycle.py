"""A prefix's group lifecycle after registration (G1, G3). Pure.

- G1: only an empty group is deleted (GROUP_NOT_EMPTY otherwise): its records
  go with the batch's checkpoint, and its Redis consumer groups only once the
  hash says it is gone; a cleanup that fails is queued again. A group deleted
  and registered again before its cleanup ran keeps its consumer groups.
- G3: only a group without live members has its offsets moved; the move runs
  once the checkpoint landed, and the answer is built from its outcome
  (COORDINATOR_NOT_AVAILABLE when it failed).

Registration (H13) and the caps (A1) are the facade's and actors/core/prefix_admission.py's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping

from rsc.actors.core.group import Effects, GroupMachine
from rsc.actors.core.prefix_io import Answer, DestroyConsumerGroups, MoveOffsets
from rsc.protocol import messages as m
from rsc.protocol.errors import Status


class Lifecycle:
    """Deleted groups still to clean up, and this batch's offset moves."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        # G1: deleted this batch (their last effects still to write), and consumer groups to drop
        self.deleted: dict[str, Effects] = {}
        self.destroy: set[str] = set()
        # G3: offset moves of this batch, and the ids they left (read by their answers)
        self.moves: list[MoveOffsets] = []
        self.moved: dict[MoveOffsets, Mapping[str, str]] = {}

    def registered(self, name: str) -> None:
        """H13: `name` exists (again): its consumer groups are kept."""
        self.destroy.discard(name)  # deleted and registered again before its cleanup ran

    def delete(self, request: m.DeleteGroup, groups: MutableMapping[str, GroupMachine]) -> m.Response:
        """G1: only an empty group goes; its records, and then its Redis consumer groups."""
        name = request.consumer_group
        group = groups.get(name)
        if group is None:
            return request.unknown_group()
        if group.members:
            return request.error(
                Status.GROUP_NOT_EMPTY,
                f"group {name!r} of {self.prefix!r} has {len(group.members)} live member(s); "
                "stop them (or remove them) first")
        del groups[name]
        self.deleted[name] = group.take_effects()
        self.destroy.add(name)
        return m.GroupDeleted(request_id=request.request_id, status=Status.OK,
                              stream_prefix=self.prefix, consumer_group=name)

    def reset_offsets(self, request: m.ResetOffsets, groups: Mapping[str, GroupMachine],
                      live_streams: tuple[str, ...]) -> Answer:
        """G3: only a group without live members moves; answered once the move is done."""
        group = groups.get(request.consumer_group)
        if group is None:
            return Answer(request, request.unknown_group())
        if group.members:
            return Answer(request, request.error(
                Status.GROUP_NOT_EMPTY,
                f"group {request.consumer_group!r} of {self.prefix!r} has {len(group.members)} "
                "live member(s); stop them (or remove them) before moving its offsets"))
        move = MoveOffsets(live_streams, request.consumer_group, request.to, request.timestamp_ms,
                           dry_run=request.dry_run)
        self.moves.append(move)

        def answer() -> m.Response:
            moved = self.moved.pop(move, None)
            if moved is None:
                return request.error(Status.COORDINATOR_NOT_AVAILABLE,
                                     "the offsets could not be moved right now; retry with backoff")
            return m.OffsetsReset(
                request_id=request.request_id, status=Status.OK, stream_prefix=self.prefix,
                consumer_group=request.consumer_group, dry_run=request.dry_run,
                shards=tuple(m.ShardOffset(shard=stream, last_delivered_id=moved[stream])
                             for stream in move.streams if stream in moved))

        return Answer(request, later=answer)

    def offsets_moved(self, move: MoveOffsets, last_delivered: Mapping[str, str]) -> None:
        """G3: the move landed; `last_delivered` is the group's new id per stream."""
        self.moved[move] = last_delivered

    def cleanup(self, existing_streams: tuple[str, ...]) -> DestroyConsumerGroups | None:
        """G1: the consumer groups of deleted groups to drop after this checkpoint."""
        if not self.destroy:
            return None
        return DestroyConsumerGroups(existing_streams, tuple(sorted(self.destroy)))

    def cleanup_failed(self, groups: Iterable[str], live: Mapping[str, object]) -> None:
        """G1: the hash landed but the cleanup did not: drop them with the next checkpoint."""
        self.destroy.update(name for name in groups if name not in live)

    def take(self) -> tuple[dict[str, Effects], tuple[MoveOffsets, ...]]:
        """The batch's deleted groups and moves, for its checkpoint (the cleanup stays queued
        until `taken_cleanup`)."""
        deleted, moves = self.deleted, tuple(self.moves)
        self.deleted, self.moves = {}, []
        return deleted, moves

    def taken_cleanup(self) -> None:
        self.destroy = set()
