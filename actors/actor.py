"""Prefix actors: the small runtime around the pure prefix machine of one stream prefix.

One actor per stream prefix (the unit of metadata: one Redis hash, one check-and-set).
It takes its mailbox in batches (actors/mailbox.py), hands every request to the machine,
then runs each I/O request the machine's `flush` yields (actors/core/prefix_io.py) and sends
its outcome back; when the machine says `Deliver`, the answers and pushes go out
(actors/delivery.py). Like Kafka's CoordinatorRuntime it decides nothing: the batch
order, what a failed or stalled call means, the D4 gate after an abandoned call, the
adoption of a late write, the T1 wait and the hold of a retention pass, which heartbeat
moves a member's push target and which describe starts a watch are the machine's
(actors/core/prefix.py and its parts). The actor only reports what happened: each outcome, a
call abandoned at its deadline and its return (actors/redis_io/store_calls.py), the end of a pass
that ran beside the batches (actors/redis_io/retention_runner.py).

Its parts, one reason to change each: the mailbox (batching), the store calls (the D4
deadline), the steps (store I/O, actors/redis_io/store_steps.py), the retention runner, and the
delivery (sessions, subscribers, watches).
"""

from __future__ import annotations

import logging
import math
import secrets
import time

import attrs
import trio

from rsc.actors.admin import audit
from rsc.actors.config import store_deadline_ms as default_store_deadline_ms
from rsc.actors.core.group import GroupMachine, GroupSettings
from rsc.actors.core.prefix import ExpiredGroup, PrefixMachine
from rsc.actors.core.prefix_admission import GroupBudget
from rsc.actors.core.prefix_io import DONE, AwaitRetention, Deliver, IORequest, Outcome, RetentionPass
from rsc.actors.core.prefix_schedule import Activity, Schedule
from rsc.actors.core.records import PrefixSnapshot
from rsc.actors.core.shard_reports import ShardLag
from rsc.actors.delivery import Answered, Delivery
from rsc.actors.logs import log_event
from rsc.actors.mailbox import Envelope, Mailbox, SummariesRequest, Tick
from rsc.actors.ports import Outbox, PrefixMetrics
from rsc.actors.redis_io.retention_runner import RetentionRunner
from rsc.actors.redis_io.shard_work import ShardWork
from rsc.actors.redis_io.store import MetadataStore
from rsc.actors.redis_io.store_calls import StoreCalls, StoreStalled
from rsc.actors.redis_io.store_steps import PrefixSteps
from rsc.protocol import messages as m

__all__ = ["Envelope", "PrefixActor", "StoreIdentity", "StoreStalled", "SummariesRequest", "Tick",
           "now_ms"]

log = logging.getLogger("rsc.coordinator")


def now_ms() -> int:
    return math.floor(trio.current_time() * 1000)


@attrs.define
class StoreIdentity:
    """The coordinator's `rsc:store-id` (shard_ops.ensure_store_id), shared by every actor.

    K8: a coordinator that started on a store without a storeId and with nothing in memory
    (`from_clients`) has no storeId until a client presents the one it knew (the first one
    presented wins) or a prefix gets routing from an admin (then a fresh one); `written` says
    whether Redis holds `value` (the store id loop writes it, `wanted` wakes it).
    """

    value: str | None = None
    went_back_at_ms: int | None = None  # K3: when the store last went back (unix ms), None: never
    from_clients: bool = False
    written: bool = False
    wanted: trio.Event = attrs.field(factory=trio.Event)

    adopted: bool = False  # K8: `value` is the storeId a client presented

    def present(self, store_id: str, *, from_client: bool = True) -> None:
        """K8: a client presented the storeId it knew (or, `from_client` False, an admin
        created routing first: a new one): the first one is taken."""
        if self.from_clients and self.value is None:
            self.value, self.adopted = store_id, from_client
            self.wanted.set()

    def clients_store_id(self) -> str | None:
        """The storeId whose clients' routing may be adopted (K8), None when none may."""
        return self.value if self.from_clients else None

    @property
    def stored(self) -> str | None:
        """The storeId Redis was last seen or made to hold (None before: nothing to check, K3)."""
        return self.value if self.written else None


class PrefixActor:
    """Runs one stream prefix's machine: its batches, their I/O, their delivery."""

    def __init__(self, prefix: str, store: MetadataStore, settings: GroupSettings,
                 *, push_enabled: bool = True, metrics: PrefixMetrics | None = None,
                 keep_drained_streams: bool = False,
                 identity: StoreIdentity | None = None, budget: GroupBudget | None = None,
                 max_group_size: int | None = None, store_deadline_ms: float | None = None,
                 background: trio.Nursery | None = None,
                 shard_work: ShardWork | None = None,
                 audit_log: audit.AuditLog | None = None) -> None:
        self.prefix = prefix
        self.audit_log = audit_log  # C3: where B6's expiries are recorded
        self.identity = identity or StoreIdentity()
        self.metrics = metrics
        self.machine = machine = PrefixMachine(
            prefix, settings, keep_drained_streams=keep_drained_streams, budget=budget,
            max_group_size=max_group_size)
        self.mailbox = Mailbox()
        # D4: the store I/O of one batch gets a third of the lease
        deadline_s = (default_store_deadline_ms(settings.lease_ttl_ms) if store_deadline_ms is None
                      else store_deadline_ms) / 1000
        self.calls = StoreCalls(prefix, store, deadline_s, on_abandoned=machine.call_abandoned,
                                metrics=metrics)
        self.steps = PrefixSteps(prefix, store, self.calls, metrics=metrics, shard_work=shard_work)
        self.retention = RetentionRunner(prefix, self.calls, store_open=lambda: machine.store_open,
                                         background=background, shard_work=shard_work,
                                         metrics=metrics)
        self.delivery = Delivery(prefix, push_enabled=push_enabled, metrics=metrics)
        self.schedule: Schedule | None = None  # told after each batch what it left behind

    @property
    def groups(self) -> dict[str, GroupMachine]:
        return self.machine.groups

    @property
    def send_channel(self) -> trio.MemorySendChannel[Envelope]:
        return self.mailbox.send_channel

    def restore(self, snapshot: PrefixSnapshot, now: int) -> None:
        """Load the replayed records after a coordinator restart (members get fresh leases)."""
        self.machine.restore(snapshot, now)

    def activity(self, *, changed: bool = False) -> Activity:
        """What the schedule needs to know of this prefix now (actors/core/prefix_schedule.py)."""
        return self.machine.activity(watched=bool(self.delivery.watches), changed=changed)

    async def drain(self) -> None:
        """Run batches while the mailbox holds requests; return once it is empty (the router
        starts this again when the next request or tick arrives)."""
        while batch := self.mailbox.take():
            await self._handle_batch(batch)
            await trio.lowlevel.checkpoint()  # the next batch in a later pass: others run between

    # --- one batch -------------------------------------------------------------------

    async def _handle_batch(self, batch: list[Envelope]) -> None:
        now = now_ms()
        machine = self.machine
        if self.calls.abandoned or self.retention.ended():
            self._report_returns(now)
        identity = self.identity
        if identity.from_clients and identity.value is None:
            # K8: the first storeId a client presents is adopted; an admin creating routing
            # first makes a new one (a new deployment)
            for envelope in batch:
                request = envelope.request
                presented = getattr(request, "known_store_id", None)
                if presented is not None:
                    identity.present(presented)
                elif isinstance(request, m.SetShardCount):
                    identity.present(secrets.token_hex(16), from_client=False)
                if identity.value is not None:
                    break
        if identity.from_clients:
            machine.clients_store_id = identity.clients_store_id()
        machine.store_id = identity.value
        machine.store_went_back_at_ms = identity.went_back_at_ms
        machine.wall_offset_ms = math.floor(time.time() * 1000) - now  # B6: unix ms
        answers: list[Answered] = []
        summaries: list[SummariesRequest] = []
        delivery, metrics = self.delivery, self.metrics
        handling_started = time.perf_counter()
        for envelope in batch:
            request = envelope.request
            if isinstance(request, Tick):
                machine.tick(request.now_ms, request.retention, expire=request.expire)
                continue
            if isinstance(request, SummariesRequest):
                summaries.append(request)
                continue
            started = trio.current_time()
            answers.append((envelope.reply, machine.handle(request, now), envelope.session))
            if isinstance(request, m.Heartbeat):
                delivery.track((request.consumer_group, request.member_id),
                               envelope.session if machine.pushes_to_session(request) else None)
                if metrics is not None:
                    metrics.observe_heartbeat_seconds(trio.current_time() - started)
            elif isinstance(request, m.GetRouting) and request.subscribe and envelope.session:
                delivery.subscribe(envelope.session)
        busy_s = time.perf_counter() - handling_started  # the batch's time without a yield

        # C3: what a group B6 deleted in this batch held, read before the flush destroys its
        # Redis consumer groups; audited after it
        expired = [await self._before_expiry(gone) for gone in machine.take_expired()]

        # the machine's I/O, in the batch order it owns (actors/core/prefix.py); each outcome goes back
        deadline = trio.current_time() + self.calls.deadline_s
        flush = machine.flush(now, summaries=bool(summaries))
        step: IORequest | None = next(flush, None)
        while step is not None:
            if isinstance(step, Deliver):
                delivering = time.perf_counter()
                delivery.deliver(machine, step, answers, summaries, now_ms)
                busy_s += time.perf_counter() - delivering
                outcome = DONE
            else:
                outcome = await self._run(step, deadline)
            try:
                step = flush.send(outcome)
            except StopIteration:
                step = None
        # the next batch's size: its handling and its delivery (answers encoded and written,
        # pushes) together near the budget, so one busy group keeps the loop no longer
        self.mailbox.measured(len(batch), busy_s)
        if delivery.watches:
            machine.mark_watches(delivery.watched())
            await delivery.refresh_watches(machine, now_ms, self._read_lag)
        else:
            machine.mark_watches(())
        for notice in machine.take_expiry_notices():  # B6: said ahead, whatever the checkpoint
            await self._warn_of_expiry(notice)
        if self.audit_log is not None:
            for body in expired:
                await self.audit_log.append(body)
        if self.metrics is not None and machine.migration is not None:
            self.metrics.set_migration_progress(self.prefix, len(machine.migration.drained),
                                                len(machine.migration.from_streams))
        if self.schedule is not None:
            self.schedule.report(self.prefix, self.activity(), now_ms())

    def _report_returns(self, now: int) -> None:
        """Tell the machine what ended since the last batch: an abandoned call (D4), a pass."""
        machine = self.machine
        returned = self.calls.returned()
        if returned is not None and machine.abandoned_call_returned(landed=returned, now_ms=now):
            log_event(log, "store.write_landed_late", level=logging.WARNING, prefix=self.prefix)
        if not self.retention.running:  # its end, or none ran: the machine hears it either way
            machine.retention_finished()

    async def _run(self, step: IORequest, deadline: float) -> Outcome:
        if isinstance(step, RetentionPass):
            return await self.retention.run(step)
        if isinstance(step, AwaitRetention):
            return await self.retention.wait(deadline, now_ms)
        assert not isinstance(step, Deliver)
        return await self.steps.run(step, deadline, now_ms())

    async def _warn_of_expiry(self, notice: dict[str, object]) -> None:
        """B6: `group.expiry_pending` for a group that would lose entries it has not read or
        acked (or whose shards cannot be read now); a group with nothing left says nothing."""
        lags = await self._read_lag(str(notice["group"]))
        if lags is not None:
            undelivered = sum(lag.lag or 0 for lag in lags)
            pending = sum(lag.pending for lag in lags)
            if not undelivered and not pending and all(lag.lag is not None for lag in lags):
                return
            notice = {**notice, "undelivered": undelivered, "pending": pending}
        log_event(log, "group.expiry_pending", level=logging.WARNING, **notice)

    async def _before_expiry(self, gone: ExpiredGroup) -> dict[str, object]:
        """C3: the audit entry of a group B6 deleted: its epoch and members as the machine
        had them, each shard's last-delivered id, lag and pending as Redis still has them."""
        lags = await self._read_lag(gone.group) if self.audit_log is not None else None
        shards = None if lags is None else [
            {"shard": lag.shard, "lastDeliveredId": lag.last_delivered_id, "lag": lag.lag,
             "pending": lag.pending} for lag in lags]
        return audit.expiry_entry(self.prefix, gone.group, group_epoch=gone.group_epoch,
                                  members=gone.members, empty_since_ms=gone.empty_since_ms,
                                  retention_ms=gone.retention_ms, shards=shards,
                                  time_ms=audit.now_ms())

    async def _read_lag(self, group: str) -> list[ShardLag] | None:
        """A group's lag as the machine asks for it (its D4 gate: nothing sent while an
        abandoned call runs), with a deadline of its own."""
        reads = self.machine.lag_read(group, now_ms())
        deadline = trio.current_time() + self.calls.deadline_s
        try:
            step = next(reads)
            while True:
                step = reads.send(await self._run(step, deadline))
        except StopIteration as done:
            return done.value

    # --- sessions ----------------------------------------------------------------------

    def subscribe(self, *sessions: Outbox) -> None:
        """These sessions get every routing change of the prefix (getRouting with subscribe)."""
        self.delivery.subscribe(*sessions)

    def take_over(self, old: PrefixActor) -> None:
        """Replace `old` (a reload): push targets, subscribers and watches survive, and a
        retention pass the old one started is still waited for (T1)."""
        self.delivery.take_over(old.delivery)
        self.retention.take_over(old.retention)
        if self.retention.running:
            self.machine.retention_started()

    def forget_session(self, session: Outbox) -> None:
        self.delivery.forget(session)
