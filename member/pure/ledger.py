"""The member ledger: every data-plane decision of one member, pure (no trio, no Redis).

The shells (heartbeat, reader, workers, acker) tell the ledger what happened
and do what it answers. It keeps:

- the membership (`MemberState` of reconcile.py, fed with heartbeat answers);
- in-flight work per shard (handed to a worker, not yet acked or dropped) and
  the shards a read in progress may still deliver entries for, from which it
  decides that a revoking shard is drained and must be reported `REVOKED`;
- the recovery cursors (XAUTOCLAIM) and the claim gate: a fresh claim of a
  shard waits until its earlier work is done, so nothing runs twice at once;
- the lease clock and D1 (docs/protocol.md, Data plane rules): `admit` checks
  ownership and the lease in one call before every handler call and every ack;
  D1 lives here and nowhere else, with its D5 exception (outage.py): a shard
  within its outage allowance is admitted in the same step;
- when the member is done: a leave answered (H9), or a stopping member that
  holds nothing and has no session to leave on;
- the worker count (`maxConcurrency`) and the ack flush rule.

Time is passed in: `now` is milliseconds on a monotonic clock, the clock the
heartbeat send times were taken on.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Mapping
from types import MappingProxyType

import attrs

from rsc.member.pure.health import HealthVerdict, MembershipHealth
from rsc.member.pure.outage import Observation, OutageAllowance
from rsc.member.pure.reconcile import (
    JOIN_EPOCH,
    NO_ACTIONS,
    Actions,
    MemberState,
    Phase,
    SentHeartbeat,
)
from rsc.protocol import Heartbeat, HeartbeatResponse, KnownRouting, RoutingSummary, Status
from rsc.protocol.routing import HASH_NAME
from rsc.protocol.vocabulary import RetentionMode

DEFAULT_LEASE_TTL_MS = 10_000  # the protocol's default (H6), until the coordinator names its own
DEFAULT_HEARTBEAT_INTERVAL_MS = 3_000  # the protocol's default, until the coordinator names its own
CLAIM_START = "0-0"  # an XAUTOCLAIM cursor: scan the shard's pending entries from the start


class Verdict(enum.Enum):
    """The answer of `admit`: may this handler call (or ack) happen now?"""

    ALLOWED = "allowed"
    NOT_HELD = "not held"  # not held at this generation, or no member epoch
    LEASE_EXPIRED = "lease expired"  # no accepted heartbeat sent within the lease TTL


_ALLOWED: tuple[Verdict, Actions] = (Verdict.ALLOWED, NO_ACTIONS)
_NOT_HELD: tuple[Verdict, Actions] = (Verdict.NOT_HELD, NO_ACTIONS)


def merge(first: Actions, second: Actions) -> Actions:
    """Both sets of actions, in order."""
    if second is NO_ACTIONS:
        return first
    if first is NO_ACTIONS:
        return second
    return Actions(start=first.start | second.start, revoke=first.revoke | second.revoke,
                   abandon=first.abandon | second.abandon, resume=first.resume | second.resume,
                   heartbeat_now=first.heartbeat_now or second.heartbeat_now,
                   events=first.events + second.events)


def retention_mode(routing: RoutingSummary | None) -> RetentionMode | None:
    """The `retention.mode` a heartbeat's routing carries, None when it names no retention."""
    if routing is None or routing.retention is None:
        return None
    return routing.retention.mode


def acks_delete(mode: RetentionMode | None, server_has_xackdel: bool) -> bool:
    """T1: ack with XACKDEL ... ACKED (the entry goes once every group acked it) only when the
    prefix's retention is `acked` and the server has XACKDEL; plain XACK otherwise (`none`,
    T3, or a coordinator that names no retention)."""
    return server_has_xackdel and mode is RetentionMode.ACKED


def worker_count(max_concurrency: int | None, capacity: int) -> int:
    """Workers to run: the heartbeat's `maxConcurrency`, else the member's own capacity."""
    return max(1, max_concurrency or capacity)


@attrs.frozen
class AckFlushRule:
    """When handled entries are worth an ack round trip.

    The acker sends at once a full batch, or what a worker waits for (ack
    before handling), or everything once no work is left that could add to
    the batch; otherwise it lingers up to `linger_ms` for more.
    """

    batch: int
    linger_ms: float

    def due(self, pending: int, *, awaited: int, busy: int, queued: int) -> bool:
        """Send now (no lingering)."""
        return pending >= self.batch or awaited > 0 or (not busy and not queued)

    def wake_acker(self, pending: int, *, busy: int, queued: int) -> bool:
        """A worker just added an entry: wake a parked acker (the first one starts the linger)."""
        return pending == 1 or pending >= self.batch or (not busy and not queued)


class Ledger:
    """The books and decisions of one member; the shells hold one each."""

    def __init__(self, member_id: str, *, capacity: int,
                 default_lease_ttl_ms: int = DEFAULT_LEASE_TTL_MS,
                 default_heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
                 instance_id: str | None = None, now: float = 0.0) -> None:
        self.state = MemberState(member_id=member_id, instance_id=instance_id)  # S1
        self.capacity = capacity
        self.default_lease_ttl_ms = default_lease_ttl_ms
        self.default_heartbeat_interval_ms = default_heartbeat_interval_ms
        self._in_flight: Counter[str] = Counter()
        self.in_flight: Mapping[str, int] = MappingProxyType(self._in_flight)
        self._reads_in_progress: frozenset[str] = frozenset()
        self._recovering: dict[str, str] = {}
        self._denied: set[str] = set()  # refused while waiting for a look at Redis (D5)
        self.retention_mode: RetentionMode | None = None  # as the last heartbeat routing named it
        self.store_id: str | None = None  # the first storeId a heartbeat routing carried
        self.store_changed_to: str | None = None  # K9: another storeId a later routing named
        self.routed = False  # some heartbeat answer carried routing
        self.has_routing = False  # the last heartbeat answer carried routing (K8: ready)
        self.known_routing: KnownRouting | None = None  # K8: the last routing heard, for joins
        self.outage = OutageAllowance(member_id)  # D5
        self.health = MembershipHealth(member_id, now)  # D6, D7

    # --- D1 and the lease clock, with D5 ---------------------------------------------------

    @property
    def lease_ttl_ms(self) -> int:
        return self.state.lease_ttl_ms or self.default_lease_ttl_ms

    def lease_deadline(self, now: float | None = None) -> float | None:
        """When (ms) the member must check its lease again (None: nothing to wake up for).

        The D1 deadline of the last accepted heartbeat, or later while a D5 allowance
        covers a held shard. Given `now`: None once both passed while the last look
        found no coordinator (the member waits for its next look, it does not fence).
        """
        state = self.state
        if state.last_accepted_sent_at is None or not state.holds:
            return None
        deadline = state.last_accepted_sent_at + self.lease_ttl_ms
        allowed = self.outage.deadline(state.holds)
        if allowed is not None and allowed > deadline:
            deadline = allowed
        if now is not None and now >= deadline and self.outage.coordinator_absent:
            return None
        return deadline

    def _d1_holds(self, now: float) -> bool:
        sent_at = self.state.last_accepted_sent_at
        return sent_at is not None and now - sent_at < self.lease_ttl_ms

    def time_admits(self, shard: str, now: float) -> bool:
        """D1 or D5 at `now`: a lease younger than its TTL, or the shard's outage allowance."""
        return self._d1_holds(now) or self.outage.allows(shard, now)

    def admit(self, shard: str, generation: int, now: float) -> tuple[Verdict, Actions]:
        """D1 (with D5), in one step: may a handler call (or an ack) of `shard`, read under
        `generation`, happen at `now`?

        Allowed only while the shard is held at that generation with a member
        epoch, and either the last accepted heartbeat was sent less than a lease
        TTL before `now` (D1) or the shard is within its outage allowance (D5).
        A lease that ran out fences the member here and now (whatever task asks
        first), and the actions say what to abandon; except while the last look
        at Redis found no coordinator: then the member waits, fenced in effect
        (nothing admitted), for its next look (D5: a frozen member learns from
        the owner records whether its shards were given away).
        """
        state = self.state
        hold = state.holds.get(shard)
        if hold is None or hold.generation != generation or state.member_epoch <= JOIN_EPOCH:
            return _NOT_HELD
        if self._d1_holds(now) or self.outage.allows(shard, now):
            return _ALLOWED
        if self.outage.coordinator_absent:
            self._denied.add(shard)  # its dropped entries are claimed again once admitted
            return Verdict.LEASE_EXPIRED, NO_ACTIONS
        return Verdict.LEASE_EXPIRED, self._lease_lost()

    def start_handler(self, shard: str, generation: int, now: float) -> tuple[Verdict, Actions]:
        """`admit` for a handler call, counted in flight when allowed (one call on the hot
        path; the worker or the acker finishes it)."""
        state = self.state
        hold = state.holds.get(shard)
        if hold is not None and hold.generation == generation and state.member_epoch > JOIN_EPOCH:
            sent_at = state.last_accepted_sent_at  # D1 in line: `admit`'s first answer
            if sent_at is not None and now - sent_at < (state.lease_ttl_ms or self.default_lease_ttl_ms):
                self._in_flight[shard] += 1
                return _ALLOWED
        decision = self.admit(shard, generation, now)
        if decision is _ALLOWED:
            self._in_flight[shard] += 1
        return decision

    def check_lease(self, now: float) -> Actions:
        """Fence the member if its lease ran out by `now` (before reads and heartbeats), unless
        D5 still allows a held shard or the member waits for its next look at Redis."""
        state = self.state
        if state.last_accepted_sent_at is None or not state.holds or self._d1_holds(now):
            return NO_ACTIONS
        if self.outage.coordinator_absent or self.outage.any_allowed(state.holds, now):
            return NO_ACTIONS
        return self._lease_lost()

    def _lease_lost(self) -> Actions:
        return self._transition(*self.state.on_abandon("no heartbeat accepted for a lease TTL"))

    # --- D5: looking at Redis while heartbeats fail -----------------------------------------

    def observation_due(self, now: float) -> bool:
        """D5: heartbeats fail, the member holds shards, and its last look is an interval old."""
        return bool(self.state.holds) and self.outage.observation_due(now, self.heartbeat_interval_ms)

    @property
    def heartbeat_interval_ms(self) -> float:
        return float(self.state.heartbeat_interval_ms or self.default_heartbeat_interval_ms)

    def observed_shards(self) -> list[str]:
        """The shards whose owner records a look reads (every held shard)."""
        return sorted(self.state.holds)

    def on_observation(self, observation: Observation) -> Actions:
        """A look at Redis (lease key and owner records, one round trip) came back: extend the
        allowance (D5), and stop every held shard Redis records as someone else's."""
        actions = NO_ACTIONS
        for shard in sorted(self.outage.observe(observation, self.lease_ttl_ms)):
            if shard not in self.state.holds:
                continue
            owner = observation.owners.get(shard)
            reason = ("its owner record names " + owner) if owner else "its owner record is cleared"
            state, more = self.state.on_ack_refused(shard)
            more = attrs.evolve(more, events=tuple(attrs.evolve(event, reason=reason)
                                                   for event in more.events))
            actions = merge(actions, self._transition(state, more))
        self._readmit(observation.sent_at)
        return actions

    def _readmit(self, now: float) -> None:
        """Shards refused while the member waited for a look and admitted again: the entries
        dropped meanwhile are pending under this member, so they are claimed again."""
        for shard in list(self._denied):
            if shard not in self.state.reading():
                self._denied.discard(shard)
            elif self.time_admits(shard, now):
                self._denied.discard(shard)
                self._recovering[shard] = CLAIM_START

    def on_session_failed(self) -> None:
        """A session could not be opened or broke: heartbeats fail (D5, D7)."""
        self.outage.session_failed()
        self.health.failed()

    # --- membership ---------------------------------------------------------------------

    def heartbeat(self, now: float, *, capacity: int | None, stream_prefix: str,
                  consumer_group: str) -> tuple[Heartbeat, SentHeartbeat, Actions]:
        """The heartbeat to send at `now`: first fence if the lease ran out (then it rejoins)."""
        actions = self.check_lease(now)
        self.health.membership(self.in_group, now)
        request, sent = self.state.heartbeat(now, capacity=capacity, stream_prefix=stream_prefix,
                                             consumer_group=consumer_group)
        if request.member_epoch == JOIN_EPOCH and (self.store_id or self.known_routing):
            # K8: a join carries what the member knows, for a coordinator that lost it all
            request = attrs.evolve(request, known_store_id=self.store_id,
                                   known_routing=self.known_routing)
        self.outage.heartbeat_sent(now)
        return request, sent, actions

    def on_response(self, sent: SentHeartbeat, response: HeartbeatResponse,
                    now: float | None = None) -> Actions:
        """A heartbeat answer arrived at `now` (default: when it was sent); its lease counts
        from `sent.sent_at`."""
        routing = response.routing
        if response.status == Status.OK:
            self.has_routing = routing is not None
        if routing is not None:
            self.routed = True
            self.known_routing = KnownRouting(version=routing.version,
                                              shard_count=routing.shard_count, hash=HASH_NAME)
            self.retention_mode = retention_mode(routing) or self.retention_mode
            if self.store_id is None:
                self.store_id = routing.store_id
            elif routing.store_id is not None and routing.store_id != self.store_id:
                self.store_changed_to = routing.store_id  # K9: another store: the member stops
        actions = self._transition(*self.state.on_response(sent, response))
        accepted = self.state.last_accepted_sent_at == sent.sent_at
        self.outage.heartbeat_answered(accepted)
        arrived = sent.sent_at if now is None else now
        self.health.answered(arrived, response.status)
        self.health.membership(self.in_group, arrived)
        if accepted and self._denied:
            self._readmit(sent.sent_at)
        return actions

    def acks_delete(self, server_has_xackdel: bool) -> bool:
        """Acks now delete (XACKDEL ... ACKED): see `acks_delete`."""
        return acks_delete(self.retention_mode, server_has_xackdel)

    def on_session_lost(self) -> None:
        """A new session reports the full holding."""
        self.state = self.state.on_session_lost()

    @property
    def in_group(self) -> bool:
        """The member holds a member epoch its coordinator gave it (D6, D7): joined and
        neither fenced nor left. A D5 outage keeps it in."""
        state = self.state
        return state.joined and state.member_epoch > 0 and not state.left

    def health_verdict(self, now: float, coordinator_url: str = "the coordinator") -> HealthVerdict:
        """D7 at `now`: in its group, or why not and whether a restart would cure it."""
        health = self.health
        health.membership(self.in_group, now)
        if self.outage.heartbeats_failing(now, self.heartbeat_interval_ms):
            health.failed()
        return health.verdict(now, lease_ttl_ms=self.lease_ttl_ms,
                              heartbeat_interval_ms=self.heartbeat_interval_ms,
                              coordinator_url=coordinator_url, has_routing=self.has_routing)

    @property
    def left(self) -> bool:
        """H9: the leave (epoch -1) was answered; the member is gone from its group."""
        return self.state.left

    def done_without_session(self, stopping: bool) -> bool:
        """The session is lost while the member is stopping and holds nothing: it is done
        without a leave (nobody to tell; the coordinator expires it after its lease, H6)."""
        return stopping and not self.state.holds

    def on_leave_requested(self, *, for_good: bool = False) -> Actions:
        """Shutdown: revoke everything; leave once drained (a static member with -2, S2,
        unless `for_good`)."""
        self.health.stop()
        return self._transition(*self.state.on_leave_requested(for_good=for_good))

    def on_abandon(self, reason: str) -> Actions:
        """Give up every shard at once (a drain on leave took too long)."""
        return self._transition(*self.state.on_abandon(reason))

    def on_ack_refused(self, shard: str) -> Actions:
        """Redis refused an ack: the owner token names another member."""
        return self._transition(*self.state.on_ack_refused(shard))

    def workers(self) -> int:
        """Workers to run now."""
        return worker_count(self.state.max_concurrency, self.capacity)

    # --- in-flight work and reads in progress ---------------------------------------------

    def started(self, shard: str, count: int = 1) -> None:
        """`count` entries of `shard` were handed to a worker (or await their ack)."""
        self._in_flight[shard] += count

    def finished(self, shard: str, count: int = 1) -> Actions:
        """`count` entries of `shard` are done (acked, refused or dropped)."""
        in_flight = self._in_flight
        in_flight[shard] -= count
        if in_flight[shard] > 0:
            return NO_ACTIONS
        del in_flight[shard]
        return self._drained_shards()

    def reads_in_progress(self, shards: Iterable[str]) -> Actions:
        """The shards that reads sent and not yet answered may still deliver entries for."""
        self._reads_in_progress = frozenset(shards)
        return self._drained_shards()

    def is_idle(self, shard: str) -> bool:
        """Nothing of `shard` is in flight."""
        return shard not in self._in_flight

    # --- reading and recovery -------------------------------------------------------------

    def still_reading(self, shard: str, generation: int) -> bool:
        """Entries read under `generation` may be queued: the shard is read under it."""
        hold = self.state.holds.get(shard)
        return (hold is not None and hold.phase is Phase.READING
                and hold.generation == generation and self.state.member_epoch > JOIN_EPOCH)

    def generation(self, shard: str) -> int:
        """The generation `shard` is held under (0 when not held)."""
        hold = self.state.holds.get(shard)
        return 0 if hold is None else hold.generation

    def recoverable(self, now: float | None = None) -> list[str]:
        """Shards whose pending entries are to be claimed now (the claim gate): a fresh
        claim waits until the shard's earlier work is done, so nothing runs twice at once
        (given `now`, only shards D1 or D5 admits)."""
        reading = self.state.reading()
        return [shard for shard in sorted(self._recovering) if shard in reading
                and (self._recovering[shard] != CLAIM_START or shard not in self._in_flight)
                and (now is None or self.time_admits(shard, now))]

    def readable(self, now: float | None = None) -> list[str]:
        """Shards to read new entries of (recovered ones only; given `now`, only those D1 or
        D5 admits: a read of a shard that may not be handled leaves its entries pending)."""
        return sorted(s for s in self.state.reading() if s not in self._recovering
                      and (now is None or self.time_admits(s, now)))

    def recovering(self) -> bool:
        """Some shard still has pending entries to claim."""
        return bool(self._recovering)

    def claim_cursor(self, shard: str) -> str | None:
        """Where the next claim of `shard` starts (None: nothing left to claim)."""
        return self._recovering.get(shard)

    def claimed(self, shard: str, generation: int, cursor: str) -> bool:
        """A claim of `shard` answered with `cursor` for the next one; True when what it
        claimed may be queued (the shard is still read under `generation`)."""
        if not self.still_reading(shard, generation) or shard not in self._recovering:
            return False  # revoked meanwhile: what was claimed stays pending for the next owner
        if cursor == CLAIM_START:
            del self._recovering[shard]
        else:
            self._recovering[shard] = cursor
        return True

    def read_failed(self) -> Actions:
        """The read connection broke with reads in flight: what Redis delivered to them is
        pending under this member, so every reading shard is claimed again."""
        for shard in self.state.reading():
            self._recovering[shard] = CLAIM_START
        return self.reads_in_progress(())

    # --- transitions ------------------------------------------------------------------

    def _transition(self, state: MemberState, actions: Actions) -> Actions:
        self.state = state
        self.outage.forget(actions.abandon)
        for shard in actions.abandon:
            self._recovering.pop(shard, None)
        for shard in actions.start:
            self._recovering[shard] = CLAIM_START
        return merge(actions, self._drained_shards())

    def _drained_shards(self) -> Actions:
        """Report REVOKED every revoking shard with nothing in flight and no read in progress."""
        actions = NO_ACTIONS
        while True:
            drained = next((shard for shard in sorted(self.state.revoking())
                            if shard not in self._in_flight
                            and shard not in self._reads_in_progress), None)
            if drained is None:
                return actions
            self._recovering.pop(drained, None)
            self.state, more = self.state.on_drained(drained)
            actions = merge(actions, more)
