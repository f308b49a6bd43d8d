"""What Redis holds of a prefix, what a response may reveal, and the repair of failed writes
(H12, D4). Pure.

- H12: a response that reveals state (OK, REVOKE_PENDING, SYNC_METADATA) is sent
  only once that state is durable; when the batch's checkpoint fails it becomes
  COORDINATOR_NOT_AVAILABLE and memory rolls back to what Redis holds
  (`persisted`). A batch whose checkpoint only repaired an earlier failed write
  revealed nothing new: it is answered as usual even if that write fails too.
- D4: a write that failed may have landed in part (the hash without the owner
  tokens on a cluster) or late (an abandoned write Redis ran when it came
  back). Every field and owner token of a failed checkpoint is written again,
  from memory, by the next checkpoint (`repair`), so Redis matches memory once
  that one lands. A late write the shell sees land is adopted instead
  (`adopted`): Redis holds it, memory takes it as its rollback point.
- D4, the gate: while a store call abandoned at its deadline still runs, nothing
  else is sent for the prefix (`gate_closed`): its order with later calls is
  unknown. The shell reports the abandoned call (`call_abandoned`) and its
  return (`call_returned`); a checkpoint that landed then is adopted.
"""

from __future__ import annotations

from collections.abc import Mapping

from rsc.actors.core.group import GroupMachine
from rsc.actors.core.prefix_io import Answer, Checkpoint
from rsc.actors.core.records import Changes, MigrationRecord, OwnerToken, PrefixSnapshot, RoutingRecord
from rsc.protocol import messages as m
from rsc.protocol.errors import Status

REVEALING = frozenset({Status.OK, Status.REVOKE_PENDING, Status.SYNC_METADATA})
"""Statuses whose response reveals state: sent only once that state is durable (H12)."""

UNAVAILABLE = "the metadata store cannot be written right now; retry with backoff"

GATE_CLOSED = "the store has not answered a call abandoned earlier; retry with backoff"
"""D4: why a step is not sent while an abandoned call still runs."""


class Durability:
    """The rollback point, and the fields and owner tokens failed writes left unsure."""

    def __init__(self) -> None:
        self.persisted = PrefixSnapshot()  # what Redis holds: the rollback point
        # fields and owner tokens of failed writes, rewritten from memory until one lands
        self._unsure_routing = self._unsure_migration = False
        self._unsure_groups: set[str] = set()
        self._unsure_members: set[tuple[str, str]] = set()
        self._unsure_owners: set[tuple[str, str]] = set()
        self.last_checkpoint: Checkpoint | None = None
        self._abandoned: Checkpoint | str | None = None  # D4: a store call past its deadline

    @property
    def gate_closed(self) -> bool:
        """D4: a store call abandoned at its deadline still runs: nothing else is sent."""
        return self._abandoned is not None

    def call_abandoned(self, call: Checkpoint | str) -> None:
        """D4: the shell abandoned this call (a checkpoint, or what it was) at its deadline."""
        self._abandoned = call

    def call_returned(self, *, landed: bool) -> Checkpoint | None:
        """D4: the abandoned call returned; the gate opens. The checkpoint to adopt when it was
        a metadata write that landed after all, else None."""
        call, self._abandoned = self._abandoned, None
        return call if landed and isinstance(call, Checkpoint) else None

    @property
    def repair_pending(self) -> bool:
        """A failed write left fields or owner tokens that the next checkpoint writes again."""
        return bool(self._unsure_routing or self._unsure_migration or self._unsure_groups
                    or self._unsure_members or self._unsure_owners)

    def repair(self, changes: Changes, owners: list[OwnerToken], groups: Mapping[str, GroupMachine],
               routing: RoutingRecord | None, migration: MigrationRecord | None) -> None:
        """D4: add every field and owner token of a failed write that this checkpoint misses,
        with memory's value (a half-written or late write is overwritten)."""
        if self._unsure_routing and not changes.routing_changed:
            changes.set_routing(routing)
        if self._unsure_migration and not changes.migration_changed:
            changes.set_migration(migration)
        for name in sorted(self._unsure_groups - changes.groups.keys()):
            group = groups.get(name)
            changes.groups[name] = group.persistent_group() if group is not None else None
        for key in sorted(self._unsure_members - changes.members.keys()):
            group = groups.get(key[0])
            changes.members[key] = (group.persistent_member(key[1])
                                    if group is not None and key[1] in group.members else None)
        written = {(token.shard, token.group) for token in owners}
        for shard, name in sorted(self._unsure_owners - written):
            group = groups.get(name)
            owners.append(OwnerToken(shard, name, group.owners.get(shard) if group else None))

    def landed(self, checkpoint: Checkpoint) -> None:
        """The checkpoint is durable: fold it into the rollback point."""
        self.persisted.apply(checkpoint.changes)
        if checkpoint is self.last_checkpoint:  # it rewrote every unsure field and token
            self._unsure_routing = self._unsure_migration = False
            self._unsure_groups, self._unsure_members, self._unsure_owners = set(), set(), set()

    def failed(self, checkpoint: Checkpoint) -> None:
        """D4: the checkpoint failed, but may have landed in part or may land late: each of its
        fields and owner tokens is written again by the next checkpoint."""
        changes = checkpoint.changes
        self._unsure_routing |= changes.routing_changed
        self._unsure_migration |= changes.migration_changed
        self._unsure_groups.update(changes.groups)
        self._unsure_members.update(changes.members)
        self._unsure_owners.update((token.shard, token.group) for token in checkpoint.owners)

    def adopted(self, checkpoint: Checkpoint) -> None:
        """D4: a checkpoint answered as failed landed after all: Redis holds it."""
        self.persisted.apply(checkpoint.changes)

    def resolve(self, answer: Answer, *, durable: bool) -> m.Response:
        """H12: the response to send, now that the checkpoint landed (`durable`) or not."""
        if answer.later is not None:
            return answer.later()
        assert answer.response is not None
        # a batch whose checkpoint only repaired an earlier failed write revealed nothing new
        last = self.last_checkpoint
        if (not durable and not (last is not None and last.repair_only)
                and answer.response.status in REVEALING):
            return answer.request.error(Status.COORDINATOR_NOT_AVAILABLE, UNAVAILABLE)
        return answer.response
