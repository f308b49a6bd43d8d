"""The prefix machine's I/O requests, and the outcome the shell hands back for each.

Pure values (frozen attrs): the prefix machine (actors/core/prefix.py) yields them
one at a time from `PrefixMachine.flush`, the shell (actors/actor.py) runs
each against Redis and sends back an `Outcome`, h11's `send_failed` made
general: what worked carries its `value`, what failed its `error`, and a call
past its store deadline is `stalled` (D4). Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from rsc.actors.core.group import Effects, Event
from rsc.actors.core.records import Changes, OwnerToken
from rsc.protocol import messages as m

Backlog = Mapping[str, tuple[int | None, int]]
"""Per group, on one old stream: (undelivered entries, or None when Redis cannot tell; pending)."""

DrainReport = Mapping[str, Backlog | None]
"""The answer to a DrainQuery: per stream its backlog, or None when the stream is gone."""


@attrs.frozen
class Outcome:
    """How one I/O request went: `value` when it worked, else `error`; `stalled` when the
    call passed its store deadline and was abandoned (D4); `now_ms` when it returned."""

    value: Any = None
    error: str | None = None
    stalled: bool = False
    now_ms: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None


DONE = Outcome()
"""The outcome of an I/O request that worked and returns nothing."""

RUNS_BESIDE = "runs beside"
"""A RetentionPass outcome's value: the pass was started and goes on beside the batches."""


@attrs.frozen
class Answer:
    """How a request is answered: decided now, or built once the checkpoint is done.

    A decided `response` that reveals state is replaced by COORDINATOR_NOT_AVAILABLE
    when the write fails (H12); `later` is built from whatever is durable then.
    """

    request: m.Request
    response: m.Response | None = None
    later: Callable[[], m.Response] | None = None


# --- reads -----------------------------------------------------------------------------


@attrs.frozen
class DrainQuery:
    """R2: count what each group still has to read or ack on these old streams."""

    streams: tuple[str, ...]
    groups: tuple[str, ...]


@attrs.frozen
class LagRead:
    """describeGroup's shards: one group's lag on the live streams (one round trip)."""

    group: str
    streams: tuple[str, ...]


@attrs.frozen
class TotalsRead:
    """listGroups' lag and pending sums of every group of the prefix (one round trip)."""

    groups: tuple[str, ...]
    streams: tuple[str, ...]


# --- retention -------------------------------------------------------------------------


@attrs.frozen
class RetentionPass:
    """T1..T3: what to trim on the prefix's live shards, for which groups.

    `acked` asks for the T1 trim (mode `acked` and at least one group); the caps
    apply in either mode (T2). A pass that trims nothing still measures the shards'
    lengths (`rsc_shard_length`). Its outcome's value is `RUNS_BESIDE` when the pass
    goes on beside the batches (the shell says when it ended: `retention_finished`),
    anything else when it is over.
    """

    streams: tuple[str, ...]
    groups: tuple[str, ...]
    acked: bool
    max_length: int | None
    max_age_ms: int | None


@attrs.frozen
class AwaitRetention:
    """T1: wait (within the store deadline) for the retention pass that runs, if one does.

    Stalled when it still runs at the deadline: the checkpoint behind it fails.
    """


# --- the checkpoint and what follows it ------------------------------------------------


@attrs.frozen
class CreateConsumerGroups:
    """Streams to create (if missing) with a consumer group per group, at id 0."""

    streams: tuple[str, ...]
    groups: tuple[str, ...]


@attrs.frozen
class RetireStreams:
    """Drained streams to delete, with their seal markers and these groups' owner tokens."""

    streams: tuple[str, ...]
    groups: tuple[str, ...]


@attrs.frozen
class DestroyConsumerGroups:
    """G1: remove these groups' Redis consumer groups from the streams (missing ones are fine)."""

    streams: tuple[str, ...]
    groups: tuple[str, ...]


@attrs.frozen(eq=False)
class MoveOffsets:
    """G3: set a group's last-delivered id on these streams and drop its pending entries.

    Its outcome's value is the group's new last-delivered id per stream.
    """

    streams: tuple[str, ...]
    group: str
    to: m.ResetTo
    timestamp_ms: int | None
    dry_run: bool = False  # C1: the ids it would set; nothing moves


MIGRATION_COMPLETE = "migration.complete"
MIGRATION_RETIRED = "migration.retired"
ROUTING_CHANGED = "routing.changed"
RESTORED_FROM_CLIENTS = "store.restored_from_clients"  # K8: routing adopted from a client


@attrs.frozen
class PrefixEvent:
    """A prefix-level log line (ROUTING_CHANGED, MIGRATION_COMPLETE, MIGRATION_RETIRED)."""

    kind: str
    fields: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class Checkpoint:
    """Everything one batch writes, in this order: create, unseal, seal, retire, hash, owner
    tokens; then (separate I/O requests, once it landed) the offset moves and the cleanup.

    New streams exist before routing names them and the old version is sealed
    before producers are told to move (R1); retired streams are deleted before
    the hash forgets them, so a failed write retires them again later. The
    cleanup (consumer groups of deleted groups) runs only once the hash says
    the group is gone; when it fails the machine queues it again.
    """

    create: tuple[CreateConsumerGroups, ...] = ()
    unseal: tuple[str, ...] = ()  # sealed by a checkpoint that failed, still current
    seal: tuple[str, ...] = ()
    retire: RetireStreams | None = None
    changes: Changes = attrs.field(factory=Changes)
    owners: tuple[OwnerToken, ...] = ()
    effects: dict[str, Effects] = attrs.field(factory=dict)
    events: tuple[PrefixEvent, ...] = ()
    cleanup: DestroyConsumerGroups | None = None
    moves: tuple[MoveOffsets, ...] = ()  # after the hash too; each reports its outcome
    # only fields and tokens of an earlier failed write, rewritten (the repair): the batch
    # itself changed nothing, so its answers reveal nothing new even if this write fails too
    repair_only: bool = False

    @property
    def empty(self) -> bool:
        """Nothing to write: the batch is durable as it is."""
        return not (self.create or self.unseal or self.seal or self.retire or self.changes
                    or self.owners or self.cleanup or self.moves)


@attrs.frozen
class Committed:
    """What the shell does once a checkpoint is durable: push, log, count."""

    pushes: tuple[m.AssignmentChanged, ...] = ()
    routing: m.Routing | None = None  # for every subscriber
    events: tuple[tuple[str, Event], ...] = ()  # (group, event)
    groups: tuple[str, ...] = ()  # groups whose state may have changed
    prefix_events: tuple[PrefixEvent, ...] = ()
    deleted: tuple[str, ...] = ()  # groups gone (G1): forget their series
    migration_retired: bool = False  # a migration ended: its progress series goes


@attrs.frozen
class Deliver:
    """The batch's checkpoint is settled: answer every request now (`PrefixMachine.resolve`
    with `durable`), then push and log what `committed` says (None: nothing landed).
    `totals` is what listGroups' summaries read (None: not read, or the read failed)."""

    durable: bool
    committed: Committed | None
    totals: Mapping[str, Any] | None = None


IORequest = (DrainQuery | AwaitRetention | Checkpoint | MoveOffsets | DestroyConsumerGroups
             | LagRead | TotalsRead | Deliver | RetentionPass)
"""What `PrefixMachine.flush` yields, in the batch order it owns."""
