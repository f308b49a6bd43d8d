"""The prefix machine: one stream prefix, sans-I/O, behind one facade.

Pure, like the group machine and h11's connection: requests and ticks go in
(`handle`, `tick`), typed I/O requests come out (actors/core/prefix_io.py), and the
shell (actors/actor.py) runs each and hands its `Outcome` back; `now_ms` is
always passed in. A batch is: every request to `handle` (answers decided now
or built later), then `flush`, a generator that yields the batch's I/O in the
one order this module owns:

1. the drain count (R2), when due;
2. the checkpoint (Kafka's CoordinatorResult records: streams to create,
   unseal, seal and retire, hash changes, owner tokens), after waiting for the
   running retention pass when it creates consumer groups or moves offsets
   (T1); D4: a stalled drain count or wait fails the write, another store
   error only delays the drain;
3. once the checkpoint landed, the offset moves (G3) and the cleanup of
   deleted groups' consumer groups (G1); when it failed, a rollback to what
   Redis holds (h11's send_failed);
4. the lag reads of this batch's describes, the totals of listGroups;
5. `Deliver`: answer every request (H12: what reveals state only once it is
   durable, `resolve`), push and log what committed;
6. the retention pass, when due (T1..T3), unless the last one still runs
   beside the batches: then it is held until that one is over (T1).

D4: while a store call the shell abandoned at its deadline still runs
(`call_abandoned`), no I/O request is yielded: each fails at once as stalled
(a batch that must write is refused, one that reveals nothing new is
answered). Its return is reported (`abandoned_call_returned`): a checkpoint
that landed after all is adopted.

The decisions live in one module per reason to change, each with its own
rule tests: routing and resharding (R1..R5, actors/core/prefix_routing.py), group
lifecycle (G1, G3, actors/core/prefix_lifecycle.py), retention (T1..T3,
actors/core/prefix_retention.py), admission (A1, H13, actors/core/prefix_admission.py),
watches (actors/core/prefix_watches.py), what a response may reveal and the repair
of failed writes (H12, D4, actors/core/prefix_durability.py) and what operators
read (describe, listGroups: actors/core/prefix_views.py). This facade keeps the
groups, registers them (H13), assembles the checkpoint and owns the order.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping

import attrs

from rsc.actors.core.group import Effects, Event, GroupMachine, GroupSettings
from rsc.actors.core.prefix_admission import Caps, GroupBudget
from rsc.actors.core.prefix_durability import GATE_CLOSED, REVEALING, UNAVAILABLE, Durability
from rsc.actors.core.prefix_io import (
    MIGRATION_RETIRED,
    ROUTING_CHANGED,
    RUNS_BESIDE,
    Answer,
    AwaitRetention,
    Backlog,
    Checkpoint,
    Committed,
    CreateConsumerGroups,
    Deliver,
    DestroyConsumerGroups,
    DrainQuery,
    DrainReport,
    IORequest,
    LagRead,
    MoveOffsets,
    Outcome,
    PrefixEvent,
    RetentionPass,
    RetireStreams,
    TotalsRead,
)
from rsc.actors.core.prefix_lifecycle import Lifecycle
from rsc.actors.core.prefix_retention import (
    RETENTION_EVERY_TICKS,
    Retention,
    must_wait,
    retention_message,
    retention_record,
)
from rsc.actors.core.prefix_routing import (
    Resharding,
    migration_description,
    routing_description,
    routing_summary,
)
from rsc.actors.core.prefix_schedule import Activity
from rsc.actors.core.prefix_views import OVERDUE_FACTOR, describe, is_overdue, summaries
from rsc.actors.core.prefix_watches import Described, starts_watch
from rsc.actors.core.records import (
    Changes,
    GroupSnapshot,
    MigrationRecord,
    OwnerToken,
    PrefixSnapshot,
    RetentionRecord,
    RoutingRecord,
)
from rsc.actors.core.shard_reports import GroupTotals, ShardLag
from rsc.actors.core.watch import Watch
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.routing import HASH_NAME
from rsc.protocol.vocabulary import JOIN_EPOCH, LEAVE_EPOCH

__all__ = [
    "OVERDUE_FACTOR", "RETENTION_EVERY_TICKS", "REVEALING", "UNAVAILABLE", "Answer",
    "AwaitRetention", "Backlog", "Checkpoint", "Committed", "CreateConsumerGroups", "Deliver",
    "DestroyConsumerGroups", "DrainQuery", "DrainReport", "ExpiredGroup", "GroupBudget",
    "IORequest", "LagRead", "MoveOffsets", "Outcome", "PrefixEvent", "PrefixMachine",
    "RetentionPass", "RetireStreams", "TotalsRead", "is_overdue", "migration_description",
    "pushes_to_session", "retention_message", "retention_record", "routing_description",
    "routing_summary", "starts_watch",
]

AWAIT_RETENTION = AwaitRetention()


def pushes_to_session(request: m.Heartbeat) -> bool:
    """H10: a heartbeat makes its session where the member's pushes go; a leave (H9)
    forgets it."""
    return request.member_epoch != LEAVE_EPOCH


Confirmed = (m.SetShardCount | m.SetMaxConcurrency | m.RemoveMember | m.DeleteGroup
             | m.ResetOffsets | m.SetRetention)
CONFIRMED = (m.SetShardCount, m.SetMaxConcurrency, m.RemoveMember, m.DeleteGroup,
             m.ResetOffsets, m.SetRetention)
"""C1: the changes that may carry the group epoch and routing version they were confirmed at."""

EXPIRY_WARNING_MS = 86_400_000  # B6: an empty group's expiry is said a day ahead


def expiry_warning_ms(retention_ms: int) -> int:
    """B6: how long before its expiry an empty group is warned of: a day, or the whole
    retention when it is shorter (at once)."""
    return min(EXPIRY_WARNING_MS, retention_ms)


@attrs.frozen
class ExpiredGroup:
    """C3: a group B6 deleted, as it was just before (what the machine holds in memory; the
    shell adds each shard's figures from Redis and audits it)."""

    group: str
    group_epoch: int
    members: tuple[str, ...]
    empty_since_ms: int | None
    retention_ms: int


class PrefixMachine:
    """One stream prefix: its groups and the parts that decide for it; see the module docstring."""

    def __init__(self, prefix: str, settings: GroupSettings, *,
                 keep_drained_streams: bool = False, budget: GroupBudget | None = None,
                 max_group_size: int | None = None) -> None:
        self.prefix = prefix
        self.settings = settings
        self.caps = Caps(prefix, budget, max_group_size)
        self.resharding = Resharding(prefix, keep_drained_streams=keep_drained_streams)
        self.lifecycle = Lifecycle(prefix)
        self.trimming = Retention()
        self.described = Described()
        self.groups: dict[str, GroupMachine] = {}
        self.store_id: str | None = None  # this Redis's rsc:store-id, set by the shell
        self.store_went_back_at_ms: int | None = None  # K3: set by the shell, None: never
        # K8: the storeId whose clients may present routing to adopt (set by the shell while
        # the coordinator started on a store lost together with its memory), and whether
        # clients asked for this prefix while it had no routing (rsc_prefix_without_routing)
        self.clients_store_id: str | None = None
        self.asked_without_routing = False
        self.durability = Durability()
        # H12: the response to send once the checkpoint landed or not (bound here: one call
        # per answer on the hot path)
        self.resolve = self.durability.resolve
        # lag of the groups described this batch (read after the checkpoint)
        self._lag_wanted: set[str] = set()
        self._lags: dict[str, list[ShardLag] | None] = {}
        # B6: wall clock minus the machine's clock (set by the shell: empty-since times are
        # unix ms, so a restart keeps them), the groups already warned of, the warnings to log
        self.wall_offset_ms = 0
        self.shard_damage: dict[str, str] = {}  # B7: shard -> damage kind, as last checked
        self._expiry_warned: set[str] = set()
        self.expiry_notices: list[dict[str, object]] = []
        self.expired: list[ExpiredGroup] = []  # C3: the expiries the shell audits

    # --- the parts' state, as one object -------------------------------------------

    @property
    def budget(self) -> GroupBudget | None:
        return self.caps.budget

    @property
    def max_group_size(self) -> int | None:
        return self.caps.max_group_size

    @property
    def keep_drained_streams(self) -> bool:
        return self.resharding.keep_drained_streams

    @property
    def routing(self) -> RoutingRecord | None:
        return self.resharding.routing

    @property
    def migration(self) -> MigrationRecord | None:
        return self.resharding.migration

    @property
    def blocking(self) -> tuple[m.BlockingGroup, ...]:
        """G2: who held the migration up at the last drain measurement (not persisted)."""
        return self.resharding.blocking

    @property
    def retention(self) -> RetentionRecord:
        return self.trimming.record

    @property
    def persisted(self) -> PrefixSnapshot:
        """What Redis holds: the rollback point."""
        return self.durability.persisted

    # --- restore -------------------------------------------------------------------

    def restore(self, snapshot: PrefixSnapshot, now_ms: int) -> None:
        """Load the replayed records after a coordinator restart (members get fresh leases)."""
        self.resharding.restore(snapshot.routing, snapshot.migration)
        self.resharding.drain_check_due = snapshot.migration is not None
        self.trimming.record = snapshot.retention
        self.groups = {}
        shards = self.assignable_shards()
        for name, group in snapshot.groups.items():
            self.groups[name] = GroupMachine.from_record(self.prefix, name, self.settings, group,
                                                         shards, now_ms)
        self.durability.persisted = PrefixSnapshot(
            routing=snapshot.routing, migration=snapshot.migration, retention=snapshot.retention,
            groups={name: GroupSnapshot(g.group, dict(g.members))
                    for name, g in snapshot.groups.items()})
        self.caps.count(len(self.groups))

    # --- requests in -----------------------------------------------------------------

    def handle(self, request: m.Request, now_ms: int) -> Answer:
        """Apply one request; the answer is final only after the checkpoint (`resolve`)."""
        answer = self._handle(request, now_ms)
        budget = self.caps.budget
        if budget is not None:  # A1: the coordinator's count of groups
            budget.count(self.prefix, len(self.groups))
        return answer

    def _handle(self, request: m.Request, now_ms: int) -> Answer:
        if isinstance(request, m.Heartbeat):
            if self.resharding.routing is None:
                self._asked_without_routing(request)
            return Answer(request, self._heartbeat(request, now_ms))
        if isinstance(request, m.GetRouting):
            if self.resharding.routing is None:
                self._asked_without_routing(request)
            return Answer(request, later=lambda: self._routing_response(request))
        if isinstance(request, CONFIRMED):
            stale = self._stale_confirmation(request)
            if stale is not None:
                return Answer(request, stale)
        if isinstance(request, m.SetShardCount):
            return Answer(request, self._set_shard_count(request))
        if isinstance(request, m.SetMaxConcurrency):
            return Answer(request, self._set_max_concurrency(request))
        if isinstance(request, m.RemoveMember):
            return Answer(request, self._remove_member(request, now_ms))
        if isinstance(request, m.DeleteGroup):
            return Answer(request, self._delete_group(request))
        if isinstance(request, m.ResetOffsets):
            return self.lifecycle.reset_offsets(request, self.groups, self.live_streams())
        if isinstance(request, m.SetRetention):
            return Answer(request, self.trimming.set(request, routed=self.routing is not None,
                                                     prefix=self.prefix))
        if isinstance(request, m.DescribeGroup):
            self._lag_wanted.add(request.consumer_group)
            return Answer(request, later=lambda: self.describe(
                request, now_ms, self._lags.get(request.consumer_group)))
        return Answer(request, request.error(
            Status.INVALID_REQUEST, f"{request.TYPE} is not a request of a stream prefix"))

    def _stale_confirmation(self, request: Confirmed) -> m.Response | None:
        """C1: STALE_CONFIRMATION when the group's epoch or the routing version is not what
        the request was confirmed at, checked in the prefix's order with the change itself."""
        moved = []
        epoch = getattr(request, "if_group_epoch", None)
        if epoch is not None:
            name = getattr(request, "consumer_group", None)
            group = self.groups.get(name) if name is not None else None
            if group is None:
                moved.append(f"group {name!r} is gone")
            elif group.group_epoch != epoch:
                moved.append(f"group epoch {epoch} -> {group.group_epoch}")
        version = request.if_routing_version
        if version is not None:
            current = self.routing.version if self.routing is not None else 0
            if current != version:
                moved.append(f"routing version {version or 'none'} -> {current or 'none'}")
        if not moved:
            return None
        return request.error(Status.STALE_CONFIRMATION,
                             "the group changed since this was confirmed (" + ", ".join(moved)
                             + "): nothing changed; look at it again and confirm again")

    def tick(self, now_ms: int, retention: bool | None = None, *, expire: bool = True) -> None:
        """Expire leases and revoke timeouts (H6, H14); measure drain and retire (R2).

        `expire` False (a lease TTL after the coordinator took a lapsed lease back, D5):
        nobody is expired or fenced on heartbeats older than the lapse, while drain,
        retirement and retention go on.

        `retention`: the coordinator's schedule says whether the pass is due on this tick
        (T1, T2, actors/core/prefix_schedule.py); None counts ticks here (a pass every
        RETENTION_EVERY_TICKS of them), for a machine ticked on every tick.
        """
        if expire:
            for group in self.groups.values():
                group.tick(now_ms)
            self._expire_empty_groups(now_ms + self.wall_offset_ms)
        self.resharding.tick()
        if retention is None:
            self.trimming.tick()
        elif retention:
            self.trimming.make_due()

    def unowned_shards(self, now_ms: int) -> dict[str, int]:
        """D7: per group with live members, its target shards nobody has held for a lease."""
        return {name: group.unowned_shards(now_ms) for name, group in self.groups.items()
                if group.members}

    def activity(self, *, watched: bool = False, changed: bool = False) -> Activity:
        """What the last batch left behind, for the coordinator's schedule of wakes
        (actors/core/prefix_schedule.py): live members, a migration, a repair or an abandoned
        call (D4), the caps, and whether the batch wrote the prefix's records or a pass is
        held (T1: what groups acked may move; `changed` says so from outside)."""
        last = self.durability.last_checkpoint
        record = self.trimming.record
        durability = self.durability
        return Activity(
            live=any(group.members for group in self.groups.values()),
            migrating=self.resharding.migration is not None, watched=watched,
            repairing=durability.gate_closed or durability.repair_pending
            or bool(self.lifecycle.destroy),
            routed=self.resharding.routing is not None,
            caps=record.max_length is not None or record.max_age_ms is not None,
            changed=changed or self.trimming.held or (last is not None and not last.empty),
            expiry_due_ms=self._next_expiry_ms())

    def _next_expiry_ms(self) -> int | None:
        """B6: when (on this machine's clock) an empty group is next to be warned of or to
        expire; None when none is."""
        retention = self.settings.empty_group_retention_ms
        if retention <= 0:
            return None
        soonest: int | None = None
        warning = expiry_warning_ms(retention)
        for name, group in self.groups.items():
            expires = group.expires_at_ms
            if expires is None:
                continue
            at = expires if name in self._expiry_warned else expires - warning
            if soonest is None or at < soonest:
                soonest = at
        return None if soonest is None else soonest - self.wall_offset_ms

    # the rules the shell carries out per request, one call each (no wrapper on the hot path):
    # H10 where a member's pushes go, and which describe starts a watch
    pushes_to_session = staticmethod(pushes_to_session)
    starts_watch = staticmethod(starts_watch)

    # --- the batch's I/O, in order -----------------------------------------------------

    def flush(self, now_ms: int, *, summaries: bool = False
              ) -> Generator[IORequest, Outcome, None]:
        """Yield this batch's I/O requests in the batch order (module docstring); send each
        one's Outcome back. `summaries`: a listGroups waits in this batch."""
        stalled_at: int | None = None
        query = self.drain_query()
        if query is not None:
            outcome = yield from self._io(query, now_ms)
            if outcome.ok:
                self.drain_measured(outcome.value)
            elif outcome.stalled:  # D4: the store is stalled; this batch writes nothing
                stalled_at = max(now_ms, outcome.now_ms)
            # any other store error: the migration waits for the next drain count (R2)
        wall_ms = now_ms + self.wall_offset_ms
        for group in self.groups.values():  # B6: the empty clocks go with this checkpoint
            group.note_emptiness(wall_ms)
        checkpoint = self.checkpoint()
        durable = True
        if not checkpoint.empty:
            failed_at = stalled_at
            if failed_at is None and must_wait(checkpoint) and self.trimming.running:
                outcome = yield from self._io(AWAIT_RETENTION, now_ms)  # T1
                if outcome.ok:
                    self.trimming.finished()
                else:
                    failed_at = max(now_ms, outcome.now_ms)
            if failed_at is None:
                outcome = yield from self._io(checkpoint, now_ms)
                if not outcome.ok:
                    failed_at = max(now_ms, outcome.now_ms)
            durable = failed_at is None
            if failed_at is not None:
                self.write_failed(checkpoint, failed_at)
            else:
                for move in checkpoint.moves:  # G3
                    outcome = yield from self._io(move, now_ms)
                    if outcome.ok:
                        self.offsets_moved(move, outcome.value)
                if checkpoint.cleanup is not None:  # G1
                    outcome = yield from self._io(checkpoint.cleanup, now_ms)
                    if not outcome.ok:
                        self.cleanup_failed(checkpoint)
        for read in self.lag_reads():
            outcome = yield from self._io(read, now_ms)
            self.lag_measured(read, outcome.value if outcome.ok else None)
        totals = None
        if summaries:
            totals_read = self.totals_read()
            if totals_read is not None:
                outcome = yield from self._io(totals_read, now_ms)
                totals = outcome.value if outcome.ok else None
        yield Deliver(durable, self.committed(checkpoint) if durable else None, totals)
        retention_pass = self.retention_pass()
        if retention_pass is not None:
            outcome = yield from self._io(retention_pass, now_ms)
            self.trimming.ran(beside=outcome.ok and outcome.value == RUNS_BESIDE, sent=outcome.ok)

    def lag_read(self, group: str, now_ms: int
                 ) -> Generator[IORequest, Outcome, list[ShardLag] | None]:
        """One group's lag outside a batch's flush: a watch's look (B4) or an expiry notice
        (B6), as a typed I/O request like the batch's; None when the read failed, or (D4)
        while an abandoned call runs: then nothing is sent."""
        outcome = yield from self._io(LagRead(group, self.live_streams()), now_ms)
        return outcome.value if outcome.ok else None

    def _io(self, step: IORequest, now_ms: int) -> Generator[IORequest, Outcome, Outcome]:
        """Yield `step` and return its outcome; D4: while an abandoned call runs nothing is
        sent, the step fails at once as stalled."""
        if self.durability.gate_closed:
            return Outcome(error=GATE_CLOSED, stalled=True, now_ms=now_ms)
        outcome = yield step
        return outcome

    # --- what the shell reports besides the outcomes ----------------------------------

    @property
    def store_open(self) -> bool:
        """D4: whether anything may be sent for the prefix now (no abandoned call runs)."""
        return not self.durability.gate_closed

    def call_abandoned(self, call: Checkpoint | str) -> None:
        """D4: the shell abandoned a store call at its deadline (a checkpoint, or what it
        was); nothing is sent for the prefix until it returns."""
        self.durability.call_abandoned(call)

    def abandoned_call_returned(self, *, landed: bool, now_ms: int) -> bool:
        """D4: the abandoned call returned, `landed` or not; True when it was a checkpoint
        that landed after all, adopted now."""
        adopted = self.durability.call_returned(landed=landed)
        if adopted is not None:
            self.adopt(adopted, now_ms)
        return adopted is not None

    def retention_started(self) -> None:
        """T1: a pass of this prefix runs beside the batches (one started by the actor this
        one replaced): the next pass and the checkpoints that must wait for it know."""
        self.trimming.running = True

    def retention_finished(self) -> None:
        """T1: no pass of this prefix runs any more."""
        self.trimming.finished()

    # --- reads the batch needs ---------------------------------------------------------

    def retention_pass(self) -> RetentionPass | None:
        """T1..T3: the trim the shell should run now, every RETENTION_EVERY_TICKS ticks (held
        while the last one still runs)."""
        if not self.trimming.due(routed=self.routing is not None):
            return None
        return self.trimming.take_pass(self.live_streams(), tuple(self.groups))

    def lag_reads(self) -> tuple[LagRead, ...]:
        """The lag reads this batch's describes need, on the streams as they are durably now."""
        wanted, self._lag_wanted, self._lags = self._lag_wanted, set(), {}
        if not wanted:
            return ()
        streams = self.live_streams()
        return tuple(LagRead(name, streams) for name in sorted(wanted) if name in self.groups)

    def lag_measured(self, read: LagRead, lags: list[ShardLag] | None) -> None:
        """What Redis said of a group's shards (None: the read failed; describe shows none)."""
        self._lags[read.group] = lags

    def drain_query(self) -> DrainQuery | None:
        """The drain measurement (R2) the shell should make before this checkpoint, if due."""
        return self.resharding.drain_query(self.groups)

    def drain_measured(self, report: DrainReport) -> None:
        """R2, G2: an old stream is drained when no group has undelivered or pending entries."""
        blocking_changed, reassign = self.resharding.drain_measured(report, self.groups)
        if blocking_changed:
            self.described.every = True  # every group's migration description names them
        if reassign:
            self._reassign()

    def drained(self, shards: Iterable[str]) -> None:
        """R2: these old shards are drained for every group; they leave the assignment."""
        if self.resharding.drained(shards):
            self._reassign()

    # --- the checkpoint --------------------------------------------------------------

    def checkpoint(self) -> Checkpoint:
        """Take the batch's records: everything the shell must write before answering."""
        resharding = self.resharding
        retire = resharding.retirement(self.groups, self.persisted.migration,
                                       self.persisted.groups)
        changes = Changes()
        routing, migration = resharding.routing, resharding.migration
        # identity first: the routing holds every stream name, and a steady batch changes neither
        if routing is not self.persisted.routing and routing != self.persisted.routing:
            changes.set_routing(routing)
        if migration is not self.persisted.migration and migration != self.persisted.migration:
            changes.set_migration(migration)
        owners: list[OwnerToken] = []
        effects: dict[str, Effects] = {}
        deleted, moves = self.lifecycle.take()
        for name, effect in deleted.items():  # G1: its last changes, then it is gone
            owners.extend(OwnerToken(shard, name, owner)
                          for shard, owner in effect.owner_changes.items())
            changes.groups[name] = None
            persisted = self.persisted.groups.get(name)
            for member_id in (*effect.members_removed, *(persisted.members if persisted else ())):
                changes.members[(name, member_id)] = None
            effects[name] = effect
        for name, group in self.groups.items():
            group.catch_up()  # H10: newcomers behind an epoch that has settled
            effect = effects[name] = group.take_effects()
            if effect.group_dirty:
                changes.groups[name] = group.persistent_group()
            for member_id in effect.members_dirty:
                if member_id in group.members:
                    changes.members[(name, member_id)] = group.persistent_member(member_id)
            for member_id in effect.members_removed:
                changes.members[(name, member_id)] = None
            owners.extend(OwnerToken(shard, name, owner)
                          for shard, owner in effect.owner_changes.items())
        cleanup = self.lifecycle.cleanup(resharding.existing_streams())
        if self.trimming.record != self.persisted.retention:
            changes.retention = self.trimming.record
        if changes.routing_changed and routing is not None:
            resharding.events.append(PrefixEvent(ROUTING_CHANGED, {
                "version": routing.version, "shard_count": routing.shard_count}))
        self.described.note(changes, effects)
        unseal = resharding.take_unseal()
        create, seal = resharding.create, resharding.seal
        fresh = bool(changes or owners or create or seal or unseal or retire or cleanup or moves)
        self.durability.repair(changes, owners, self.groups, routing, resharding.migration)
        checkpoint = Checkpoint(create=tuple(create), unseal=unseal, seal=tuple(seal),
                                retire=retire, changes=changes, owners=tuple(owners),
                                effects=effects, events=resharding.take_events(), cleanup=cleanup,
                                moves=moves, repair_only=not fresh and bool(changes or owners))
        resharding.create, resharding.seal = [], []
        self.lifecycle.taken_cleanup()
        self.durability.last_checkpoint = checkpoint
        return checkpoint

    @property
    def last_checkpoint(self) -> Checkpoint | None:
        """The checkpoint the last `checkpoint()` (or `flush`) took."""
        return self.durability.last_checkpoint

    @property
    def repair_pending(self) -> bool:
        """A failed write left fields or owner tokens that the next checkpoint writes again."""
        return self.durability.repair_pending

    # --- outcomes of the checkpoint ------------------------------------------------------

    def committed(self, checkpoint: Checkpoint) -> Committed:
        """The checkpoint is durable: fold it into the rollback point; what to push."""
        self.durability.landed(checkpoint)
        pushes: list[m.AssignmentChanged] = []
        events: list[tuple[str, Event]] = []
        for name, effect in checkpoint.effects.items():
            group = self.groups.get(name)
            events.extend((name, event) for event in effect.events)
            if group is None:
                continue
            pushes.extend(m.AssignmentChanged(stream_prefix=self.prefix, consumer_group=name,
                                              member_id=member_id, group_epoch=group.group_epoch)
                          for member_id in effect.pushes)
        routing = None  # routing answers carry the retention too: a change of it is pushed
        if (checkpoint.changes.routing_changed or checkpoint.changes.retention is not None) \
                and self.routing is not None:
            routing = self._routing_message(None)
        deleted = tuple(name for name, group in checkpoint.changes.groups.items()
                        if group is None and name not in self.groups)
        return Committed(pushes=tuple(pushes), routing=routing, events=tuple(events),
                         groups=tuple(checkpoint.effects), prefix_events=checkpoint.events,
                         deleted=deleted,
                         migration_retired=any(event.kind == MIGRATION_RETIRED
                                               for event in checkpoint.events))

    def write_failed(self, checkpoint: Checkpoint, now_ms: int) -> None:
        """The checkpoint did not land (h11's send_failed): back to what Redis holds.

        Its seal may have landed before the hash failed: a version that stays
        current is unsealed with the next checkpoint, so producers are not
        refused by a routing that never changed. The hash may have landed in
        part, or may still land late: its fields and owner tokens are written
        again by the next checkpoint (actors/core/prefix_durability.py).
        """
        self.resharding.seal_failed(checkpoint.seal, checkpoint.unseal)
        self.durability.failed(checkpoint)
        self._restore_persisted(now_ms)

    def adopt(self, checkpoint: Checkpoint, now_ms: int) -> None:
        """A checkpoint answered as failed landed after all (D4: an abandoned write finished in
        the background, and nothing was written after it): Redis holds it, so memory takes it
        as its rollback point, rather than the repair writing it back out. Nothing of it was
        revealed; members learn it from their next heartbeats."""
        self.durability.adopted(checkpoint)
        self._restore_persisted(now_ms)
        self.cleanup_failed(checkpoint)  # its consumer groups are dropped with the next one

    def _restore_persisted(self, now_ms: int) -> None:
        self.described.every = True  # back to what Redis holds
        self.resharding.restore(self.persisted.routing, self.persisted.migration)
        self.trimming.record = self.persisted.retention
        shards = self.assignable_shards()
        for name in list(self.groups):
            if name not in self.persisted.groups:
                del self.groups[name]
        for name, record in self.persisted.groups.items():
            group = self.groups.get(name)
            if group is None:  # deleted in the failed batch (G1): it is still there
                group = self.groups[name] = GroupMachine(self.prefix, name, self.settings)
            group.restore(record, shards, now_ms, restart=False)
        self.caps.count(len(self.groups))

    def cleanup_failed(self, checkpoint: Checkpoint) -> None:
        """The hash landed but the cleanup did not: do it again with the next checkpoint."""
        if checkpoint.cleanup is not None:
            self.lifecycle.cleanup_failed(checkpoint.cleanup.groups, self.groups)

    def offsets_moved(self, move: MoveOffsets, last_delivered: Mapping[str, str]) -> None:
        """G3: the move landed; `last_delivered` is the group's new id per stream."""
        self.lifecycle.offsets_moved(move, last_delivered)
        self.described.groups.add(move.group)

    def mark_watches(self, watches: Iterable[Watch]) -> None:
        """Tell these watches to look again when this batch may have changed their group."""
        self.described.mark(watches)

    # --- views -----------------------------------------------------------------------

    def live_streams(self) -> tuple[str, ...]:
        """Every stream that may still hold undelivered entries: undrained old ones, current ones."""
        return self.resharding.live_streams()

    def routing_versions(self) -> tuple[tuple[str, ...], ...]:
        """C2: the streams of every routing version whose streams are all still there, newest
        first: the current one, and the one before while its migration lasts."""
        return self.resharding.routing_versions()

    def assignable_shards(self) -> tuple[str, ...]:
        """What the groups assign now: undrained old shards, and the new ones unless held back (R3)."""
        return self.resharding.assignable_shards()

    def shard_versions(self) -> dict[str, int]:
        """The routing version of every live shard."""
        return self.resharding.shard_versions()

    def totals_read(self) -> TotalsRead | None:
        """listGroups' lag and pending sums need this read (None: no shards or no groups)."""
        streams = self.live_streams()
        if not streams or not self.groups:
            return None
        return TotalsRead(tuple(self.groups), streams)

    def summaries(self, totals: Mapping[str, GroupTotals] | None = None
                  ) -> tuple[m.GroupSummary, ...]:
        """listGroups' entries for this prefix, by group name, with lag and pending sums.

        Without shards a group has lag 0; when the read failed (`totals` None while there
        are shards) its lag is null.
        """
        return summaries(self.groups, totals, has_shards=bool(self.live_streams()))

    def describe(self, request: m.DescribeGroup, now_ms: int,
                 lags: list[ShardLag] | None) -> m.GroupDescription:
        """describeGroup: the group, its overdue members, retention, blockers and shards.

        `lags` is what Redis said of the live shards (None: not read, no shards shown).
        """
        group = self.groups.get(request.consumer_group)
        if group is None:
            unknown = request.unknown_group()
            assert isinstance(unknown, m.GroupDescription)
            return unknown
        routing, migration = self.routing, self.migration
        described = describe(
            request, group, now_ms, lags,
            routing=routing_summary(routing, self.store_id, self.retention) if routing else None,
            migration=migration_description(migration, self.blocking) if migration else None,
            versions=self.shard_versions(), heartbeat_interval_ms=self.settings.heartbeat_interval_ms,
            retention=retention_message(self.retention), damage=self.shard_damage)
        return attrs.evolve(described, store_went_back_at_ms=self.store_went_back_at_ms)

    # --- requests --------------------------------------------------------------------

    def _heartbeat(self, request: m.Heartbeat, now_ms: int) -> m.Response:
        routing = self.resharding.routing
        summary = routing_summary(routing, self.store_id, self.trimming.record) if routing else None
        group = self.groups.get(request.consumer_group)
        if group is None:
            if request.member_epoch != JOIN_EPOCH:
                # H13: only a join registers a group; a leave (H9) or a stale epoch leaves nothing
                return request.unknown_group()
            refused = self.caps.new_group_refused(request, request.consumer_group)  # A1
            if refused is not None:
                return refused
            group = self._register(request.consumer_group)
        elif request.member_epoch == JOIN_EPOCH and self.caps.max_group_size is not None:
            refused = self.caps.join_refused(request, group)  # A1, S3, S4
            if refused is not None:
                return refused
        return group.heartbeat(request, now_ms, summary)

    def _asked_without_routing(self, request: m.Heartbeat | m.GetRouting) -> None:
        """K8: a client asks for this prefix, which has no routing. On a store lost together
        with the coordinator's memory, the routing it presents (with the storeId adopted)
        is written back: its streams and consumer groups created, the groups reassigned."""
        self.asked_without_routing = True
        known = request.known_routing
        if (known is None or self.clients_store_id is None
                or request.known_store_id != self.clients_store_id):
            return
        if self.resharding.adopt(known, tuple(self.groups)):
            self._reassign()

    def _register(self, name: str) -> GroupMachine:
        """H13: a group appears with the prefix's shards and a consumer group on every live stream."""
        group = GroupMachine(self.prefix, name, self.settings, self.assignable_shards())
        group.effects.group_dirty = True
        self.groups[name] = group
        self.lifecycle.registered(name)
        live = self.live_streams()
        if live:
            self.resharding.create.append(CreateConsumerGroups(live, (name,)))
        return group

    def _set_shard_count(self, request: m.SetShardCount) -> m.Response:
        name = request.consumer_group
        if name is not None and name not in self.groups:
            if self.routing is not None:  # G1: a typo never creates a group that blocks drains
                return request.unknown_group()
            refused = self.caps.new_group_refused(request, name)  # A1: counts against --max-groups
            if refused is not None:
                return refused
            self._register(name)
        before = self.resharding.routing
        response = self.resharding.reshard(request, self.groups)
        if self.resharding.routing is not before:
            self._reassign()
        return response

    def _set_max_concurrency(self, request: m.SetMaxConcurrency) -> m.Response:
        group = self.groups.get(request.consumer_group)
        if group is None:
            return request.unknown_group()
        group.set_max_concurrency(request.max_concurrency)
        return m.MaxConcurrencyChanged(
            request_id=request.request_id, status=Status.OK, stream_prefix=self.prefix,
            consumer_group=request.consumer_group, max_concurrency=group.max_concurrency,
            group_epoch=group.group_epoch)

    def _remove_member(self, request: m.RemoveMember, now_ms: int) -> m.Response:
        group = self.groups.get(request.consumer_group)
        if group is None:
            return request.unknown_group()
        if request.instance_id is not None:  # S5: by instanceId, an AWAY member too
            removed = group.remove_instance(request.instance_id, now_ms)
            if removed is None:
                return request.error(
                    Status.UNKNOWN_MEMBER_ID,
                    f"no member of the group holds instanceId {request.instance_id!r}")
        elif group.remove_member(request.member_id, now_ms):
            removed = request.member_id
        else:
            return request.error(Status.UNKNOWN_MEMBER_ID,
                                 f"member {request.member_id!r} is not live in the group")
        return m.MemberRemoved(
            request_id=request.request_id, status=Status.OK, stream_prefix=self.prefix,
            consumer_group=request.consumer_group, member_id=removed,
            group_epoch=group.group_epoch)

    def _expire_empty_groups(self, wall_ms: int) -> None:
        """B6: delete (as G1) every group empty for `empty_group_retention_ms`, and warn of
        those whose expiry is near (a day ahead, or at once for a shorter retention)."""
        retention = self.settings.empty_group_retention_ms
        if retention <= 0:
            return
        warned = self._expiry_warned
        expired = False
        for name, group in list(self.groups.items()):
            expires_at = group.expires_at_ms
            if expires_at is None:
                warned.discard(name)
                continue
            since = group.empty_since_ms
            if wall_ms >= expires_at:
                self.expired.append(ExpiredGroup(
                    group=name, group_epoch=group.group_epoch, members=tuple(group.members),
                    empty_since_ms=since, retention_ms=retention))
                group.effects.events.append(Event("group_expired", fields={
                    "empty_since_ms": since, "retention_ms": retention,
                    # P2: deleteGroup and B6 leave the group's dead letters where they are
                    "dead_letters": "kept"}))
                self._delete_group(m.DeleteGroup(request_id=0, stream_prefix=self.prefix,
                                                 consumer_group=name))
                warned.discard(name)
                expired = True
            elif name not in warned and wall_ms >= expires_at - expiry_warning_ms(retention):
                warned.add(name)
                self.expiry_notices.append({"prefix": self.prefix, "group": name,
                                            "empty_since_ms": since, "expires_at_ms": expires_at})
        if expired:
            self.caps.count(len(self.groups))  # A1: the coordinator's count of groups

    def rewrite_empty_groups(self) -> bool:
        """B6: write the records of the empty groups again (the store's format was raised to
        one that keeps their empty-since time); False when there is none."""
        empty = [group for group in self.groups.values() if group.empty_since_ms is not None]
        for group in empty:
            group.effects.group_dirty = True
        return bool(empty)

    def take_expired(self) -> list[ExpiredGroup]:
        """C3: the groups B6 deleted since the last call (the shell audits them)."""
        expired, self.expired = self.expired, []
        return expired

    def take_expiry_notices(self) -> list[dict[str, object]]:
        """B6: the `group.expiry_pending` warnings since the last call (the shell logs them)."""
        notices, self.expiry_notices = self.expiry_notices, []
        return notices

    def _delete_group(self, request: m.DeleteGroup) -> m.Response:
        """G1: only an empty group goes; its records, and then its Redis consumer groups."""
        response = self.lifecycle.delete(request, self.groups)
        if response.status == Status.OK:  # it no longer holds drains up (R2)
            self.resharding.drain_check_due = self.migration is not None
        return response

    def _routing_response(self, request: m.GetRouting) -> m.Routing:
        if self.routing is None:
            return request.unknown_stream()
        return self._routing_message(request.request_id)

    def _routing_message(self, request_id: int | None) -> m.Routing:
        routing = self.routing
        assert routing is not None
        return m.Routing(request_id=request_id, status=Status.OK, stream_prefix=self.prefix,
                         version=routing.version, shard_count=routing.shard_count,
                         hash=HASH_NAME, streams=routing.streams, store_id=self.store_id,
                         retention=retention_message(self.retention))

    def _reassign(self) -> None:
        shards = self.assignable_shards()
        for group in self.groups.values():
            group.set_shards(shards)

    def __repr__(self) -> str:
        return f"PrefixMachine({self.prefix!r}, groups={len(self.groups)})"
