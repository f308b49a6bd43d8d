"""What one member's shells share: the ledger, the work queue, the ack book, the signals.

The decisions are the pure ledger's (ledger.py) and ack book's (ackbook.py);
this module holds them with the trio parts the shells wait on.

`MemberCore.apply` is the one place where the ledger's actions reach the
shells: drop the queued entries of shards no longer read, set the worker
count, ask for a heartbeat, pass events on, wake whoever may now have work.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import attrs
import trio

from rsc.common.error_family import InstanceFenced as InstanceFenced  # re-exported
from rsc.member.config import MemberConfig
from rsc.member.message import Queued, order_key
from rsc.member.notices import Notices
from rsc.member.pure.ackbook import AckBook
from rsc.member.pure.budget import ReadBudget
from rsc.member.pure.ledger import AckFlushRule, Ledger
from rsc.member.pure.reconcile import NO_ACTIONS, Actions, Event, EventName
from rsc.member.pure.store_identity import StoreChanged, store_changed_line
from rsc.member.shells.workqueue import Signal, WorkQueue
from rsc.member.stats import MemberStats
from rsc.member.trace import HandlerTrace

EventCallback = Callable[[str, Event], None]
ReadObserver = Callable[[str, frozenset[str], float, float], None]
AckObserver = Callable[[str, int], None]

log = logging.getLogger(__name__)


def monotonic_ms() -> float:
    """The member's clock: monotonic milliseconds (heartbeat send times, D1 checks)."""
    return time.monotonic() * 1000.0


class AckerParking:
    """Where the acker waits for handled ids; waking it costs nothing while it is busy."""

    __slots__ = ("parked", "_lot")

    def __init__(self) -> None:
        self.parked = False
        self._lot = trio.lowlevel.ParkingLot()

    def wake(self) -> None:
        self._lot.unpark_all()

    async def park(self) -> None:
        self.parked = True
        try:
            await self._lot.park()
        finally:
            self.parked = False


@attrs.define(eq=False)
class Lifecycle:
    """Where one member is in its life, for every shell to wait on: joined, asked to stop,
    left, and why it stops on its own."""

    stop_requested: trio.Event = attrs.field(factory=trio.Event)
    leave_for_good: bool = False  # S2: a static member's stop leaves with -1, not -2
    joined: trio.Event = attrs.field(factory=trio.Event)
    left: trio.Event = attrs.field(factory=trio.Event)
    store_ok: trio.Event = attrs.field(factory=trio.Event)  # the storeId checked (or none): reads may start
    fatal: BaseException | None = None  # why the member stops on its own (after leaving)


@attrs.define(eq=False)
class Observers:
    """What the embedding application watches (events, reads, acks, handler traces)."""

    on_event: EventCallback | None = None
    read_observer: ReadObserver | None = None
    ack_observer: AckObserver | None = None
    trace: HandlerTrace | None = None
    # called right before each ack batch is sent; False holds the batch back (its entries stay
    # pending for the next owner). `rsc consume` flushes its stdout lines here, so a line is
    # out before its message's ack (one flush per batch instead of one per line)
    before_ack: Callable[[], bool] | None = None


@attrs.define(eq=False)
class ReaderSignal:
    """How the other shells wake the reader: `wake` fires; `waiting` says it waits for a
    shard's in-flight work before a fresh claim."""

    wake: Signal = attrs.field(factory=Signal)
    waiting: bool = False


@attrs.define(eq=False)
class HeartbeatSignal:
    """Whether the heartbeat shell should send at once: the ledger's actions and the
    coordinator's pushes ask (`due`), the heartbeat loop clears it as it sends."""

    due: bool = True


@attrs.define(eq=False)
class WorkerGauge:
    """The workers' own count, changed by them only: how many hold a work item (`busy`),
    which the acker's flush rule reads."""

    busy: int = 0


@attrs.define(eq=False)
class ServerFacts:
    """What the member learnt of its Redis at start (the runtime sets it, once): whether the
    server has XACKDEL (>= 8.2)."""

    xackdel: bool = False


class RetryBook:
    """P1/L4's bookkeeping, kept by the reader (claimed counts) and the workers (waiting
    retries), forgotten per shard when the shard is given up (`forget`)."""

    __slots__ = ("claimed_counts", "parked", "retries")

    def __init__(self) -> None:
        # P1: delivery counts of claimed entries, (shard, id) -> count, until a worker takes
        # them (with a RetryPolicy; an entry not in here was freshly read)
        self.claimed_counts: dict[tuple[str, str], int] = {}
        # L4: entries waiting for their next attempt on no worker, their keys held, and the
        # count and last error each resumes with, by (shard, id)
        self.parked: dict[tuple[str, str], Queued] = {}
        self.retries: dict[tuple[str, str], tuple[int, BaseException]] = {}

    def forget(self, shard: str) -> list[Queued]:
        """A shard given up: its claimed counts and waiting retries go; the entries that were
        waiting, whose keys the caller releases (L4)."""
        if not (self.claimed_counts or self.retries or self.parked):
            return []
        for book in (self.claimed_counts, self.retries):
            for key in [key for key in book if key[0] == shard]:
                del book[key]
        return [self.parked.pop(key) for key in [key for key in self.parked if key[0] == shard]]


class MemberCore:
    """What one member's heartbeat, reader, worker and acker shells share: the ledger and the
    books it decides with, the work queue, and small parts owned by topic: the member's
    `life`, the reader's wake-up (`reader`), the heartbeat's (`heartbeat`), the workers'
    gauge (`workers`), the retry book (`retry_book`), what the member's Redis can do
    (`server`) and the application's `observers`; `changed` fires on state transitions."""

    def __init__(self, config: MemberConfig, *, on_event: EventCallback | None = None,
                 read_observer: ReadObserver | None = None,
                 ack_observer: AckObserver | None = None,
                 trace: HandlerTrace | None = None, notices: Notices | None = None,
                 read_budget: ReadBudget | None = None) -> None:
        self.config = config
        self.read_budget = read_budget  # at most this many entries read (--max-messages)
        self.member_id = config.member_id
        self.observers = Observers(on_event, read_observer, ack_observer, trace)
        self.life = Lifecycle()
        self.reader = ReaderSignal()
        self.clock = monotonic_ms
        self.ledger = Ledger(config.member_id, capacity=config.capacity,
                             default_heartbeat_interval_ms=config.default_heartbeat_interval_ms,
                             instance_id=config.instance_id, now=self.clock())
        self.stats = MemberStats(member_id=config.member_id, workers=config.capacity,
                                 in_flight=self.ledger.in_flight)
        self.ack_rule = AckFlushRule(batch=config.ack_batch, linger_ms=config.ack_linger_ms)
        self.queue: WorkQueue[Queued] = WorkQueue(
            order_key, workers=config.capacity, max_buffered=config.max_buffered,
            on_room=self.wake_reader)
        self.acks = AckBook()
        self.retry_book = RetryBook()
        self.acker_parking = AckerParking()
        self.workers = WorkerGauge()
        self.changed = Signal()  # state transitions (and pushes) only, never per message
        self.heartbeat = HeartbeatSignal()
        self.server = ServerFacts()
        # problem lines: said once, repeated slowly, cleared (a console tool passes its own)
        self.notices = notices if notices is not None else Notices(self._warn)

    def _warn(self, line: str) -> None:
        log.warning(line)  # no arguments: the line is never %-formatted

    def use_xackdel(self) -> bool:
        """Acks delete now (retention `acked` and a server with XACKDEL)."""
        return self.ledger.acks_delete(self.server.xackdel)

    def store_changed(self, where: str, found: str) -> None:
        """K9: `where` names another storeId than the member started with: it stops, reading
        nothing more (the reader looks at `life.fatal`), and `run` raises StoreChanged."""
        self.life.fatal = StoreChanged(store_changed_line(where, self.ledger.store_id or "", found))
        self.life.stop_requested.set()
        self.wake_reader()

    def apply(self, actions: Actions) -> None:
        """Do what the ledger decided; refresh the gauges."""
        ledger, queue, stats = self.ledger, self.queue, self.stats
        if ledger.store_changed_to is not None and self.life.fatal is None:
            self.store_changed(f"the coordinator at {self.config.coordinator_url}",
                               ledger.store_changed_to)
        for shard in (*actions.abandon, *actions.revoke):
            dropped = queue.drop_shard(shard)
            for entry in self.retry_book.forget(shard):  # L4: abandoned at once, unacked
                queue.done(entry)
            if self.read_budget is not None and dropped:
                self.read_budget.give_back(len(dropped))
        workers = ledger.workers()
        if queue.workers != workers:
            queue.set_workers(workers)
        stats.workers = workers
        stats.member_epoch = ledger.state.member_epoch
        stats.owned_shards = tuple(sorted(ledger.state.owned()))
        if actions.heartbeat_now:
            self.heartbeat.due = True
        for event in actions.events:
            if event.name is EventName.JOINED:
                self.life.joined.set()
            elif event.name is EventName.INSTANCE_FENCED:  # S3: stop for good, say why
                self.life.fatal = InstanceFenced(self.config.instance_id or "", event.reason or "")
                self.life.stop_requested.set()
            elif event.name is EventName.FENCED:
                stats.fences += 1
                log.warning("member %s fenced, stops %s: %s", self.member_id,
                            ", ".join(event.shards) or "no shards", event.reason)
            if self.observers.on_event is not None:
                self.observers.on_event(self.member_id, event)
        self.changed.fire()
        self.wake_reader()

    def finish(self, shard: str, count: int = 1) -> None:
        """`count` entries of `shard` are no longer in flight (acked, refused or dropped)."""
        actions = self.ledger.finished(shard, count)
        if actions is not NO_ACTIONS:
            self.apply(actions)
        elif self.reader.waiting and self.ledger.is_idle(shard):
            self.wake_reader()  # a fresh claim may wait for in-flight work to finish

    def wake_reader(self) -> None:
        self.reader.waiting = False  # one wakeup is enough: it re-checks what it can do
        self.queue.room_wanted = False
        self.reader.wake.fire()
