"""The member's reconciliation: pure decisions from heartbeat responses (docs/protocol.md table).

`MemberState` is what the member holds: shards it reads, shards it drains
(revoking), shards it has drained and reports `REVOKED` until an `OK`. Every
transition is a pure function returning the next state and the `Actions` the
shell performs (start reading, revoke, abandon at once, heartbeat now, events).
Time is passed in (`now`, milliseconds on a monotonic clock); nothing here awaits.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import attrs

from rsc.protocol import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    TEMPORARY_LEAVE_EPOCH,
    Heartbeat,
    HeartbeatResponse,
    RevokeState,
    RevokingShard,
    Status,
)

__all__ = ["JOIN_EPOCH", "LEAVE_EPOCH", "TEMPORARY_LEAVE_EPOCH", "Actions", "Event", "EventName",
           "Hold", "MemberState", "Phase", "SentHeartbeat"]


class Phase(enum.Enum):
    """Where a held shard is: being read, or no longer read and draining."""

    READING = "READING"
    REVOKING = "REVOKING"


@attrs.frozen
class Hold:
    """One held shard: its phase and the generation that tags every message read under it."""

    phase: Phase
    generation: int


class EventName(enum.StrEnum):
    """What happened to the member; the value is the name `rsc consume --events` prints."""

    JOINED = "joined"
    ASSIGNED = "assigned"
    REVOKING = "revoking"
    REVOKED = "revoked"
    FENCED = "fenced"
    JOIN_REFUSED = "join refused"
    LEFT = "left"
    INSTANCE_FENCED = "instance fenced"  # S3: a newer member took over the instanceId


@attrs.frozen
class Event:
    """Something an operator may want to see (`rsc consume --events`)."""

    name: EventName
    shards: tuple[str, ...] = ()
    member_epoch: int | None = None
    reason: str | None = None


@attrs.frozen
class Actions:
    """What the shell must do after a transition.

    start: begin reading these shards (recover their pending entries first);
    revoke: stop reading these, drop what is queued, drain what runs, then report;
    abandon: stop reads and acks of these at once (fenced or lost);
    resume: shards that were draining and are assigned again: read them again.
    """

    start: frozenset[str] = frozenset()
    revoke: frozenset[str] = frozenset()
    abandon: frozenset[str] = frozenset()
    resume: frozenset[str] = frozenset()
    heartbeat_now: bool = False
    events: tuple[Event, ...] = ()


NO_ACTIONS = Actions()


@attrs.frozen
class SentHeartbeat:
    """What a heartbeat request reported, so its response can be applied precisely."""

    member_epoch: int
    sent_at: float  # ms, monotonic: the lease of an accepted answer runs from here
    full_ownership: bool
    holding_version: int
    reported_revoked: frozenset[str]
    incarnation: int = 0


@attrs.frozen(kw_only=True)
class MemberState:
    """Everything the member knows about its own membership."""

    member_id: str
    member_epoch: int = JOIN_EPOCH
    holds: Mapping[str, Hold] = attrs.field(factory=dict)
    revoked: frozenset[str] = frozenset()
    holding_version: int = 0
    reported_version: int = -1
    next_generation: int = 1
    last_accepted_sent_at: float | None = None  # ms, monotonic
    heartbeat_interval_ms: int | None = None
    lease_ttl_ms: int | None = None
    max_concurrency: int | None = None
    leaving: bool = False
    joined: bool = False
    left: bool = False  # H9: a leave (epoch -1) was answered; nothing more to send
    incarnation: int = 0
    # the cap (A1), or UNRELEASED_INSTANCE_ID (S4), that refused the last join, until one is taken
    join_refused: Status | None = None
    instance_id: str | None = None  # S1: a static member's, sent on every heartbeat
    leave_epoch: int = LEAVE_EPOCH  # what a drained leave sends: -1, or -2 for a static member (S2)
    instance_fenced: str | None = None  # S3: why this member stopped for good (FENCED_INSTANCE_ID)

    # --- queries ---------------------------------------------------------------------

    def reading(self) -> frozenset[str]:
        """Shards to include in reads."""
        return frozenset(s for s, h in self.holds.items() if h.phase is Phase.READING)

    def revoking(self) -> frozenset[str]:
        """Shards no longer read, still draining local in-flight work."""
        return frozenset(s for s, h in self.holds.items() if h.phase is Phase.REVOKING)

    def owned(self) -> frozenset[str]:
        """`ownedShards`: every shard held, reading or draining."""
        return frozenset(self.holds)

    # --- heartbeat request -----------------------------------------------------------

    def heartbeat(self, now: float, *, capacity: int | None,
                  stream_prefix: str, consumer_group: str) -> tuple[Heartbeat, SentHeartbeat]:
        """The next heartbeat request (requestId is a placeholder) and what it reports;
        `now` (ms) is when it is sent."""
        epoch = self.leave_epoch if self.leaving and not self.holds else self.member_epoch
        full = epoch == JOIN_EPOCH or self.holding_version != self.reported_version
        owned: tuple[str, ...] | None = tuple(sorted(self.owned())) if full else None
        if epoch == JOIN_EPOCH:
            owned = ()
        revoking_report = tuple(
            [RevokingShard(shard=s, state=RevokeState.REVOKING) for s in sorted(self.revoking())]
            + [RevokingShard(shard=s, state=RevokeState.REVOKED) for s in sorted(self.revoked)]
        )
        request = Heartbeat(
            request_id=0, stream_prefix=stream_prefix, consumer_group=consumer_group,
            member_id=self.member_id, member_epoch=epoch, capacity=capacity,
            owned_shards=owned, revoking_shards=revoking_report if epoch > 0 else (),
            instance_id=self.instance_id,
        )
        sent = SentHeartbeat(member_epoch=epoch, sent_at=now, full_ownership=full,
                             holding_version=self.holding_version,
                             reported_revoked=self.revoked, incarnation=self.incarnation)
        return request, sent

    # --- transitions -----------------------------------------------------------------

    def on_response(self, sent: SentHeartbeat,
                    response: HeartbeatResponse) -> tuple[MemberState, Actions]:
        """Apply a heartbeat response (the status table of docs/protocol.md, one row per status)."""
        if sent.incarnation != self.incarnation:
            return self, NO_ACTIONS  # sent before this member fenced itself: stale
        status = Status(response.status)
        handler = _RESPONSE_TRANSITIONS.get(status, MemberState._on_nothing_changed)
        return handler(self, sent, response)

    def on_drained(self, shard: str) -> tuple[MemberState, Actions]:
        """A revoking shard has no local in-flight work and no read in progress: REVOKED."""
        hold = self.holds.get(shard)
        if hold is None or hold.phase is not Phase.REVOKING:
            return self, NO_ACTIONS
        holds = {s: h for s, h in self.holds.items() if s != shard}
        state = attrs.evolve(self, holds=holds, revoked=self.revoked | {shard},
                             holding_version=self.holding_version + 1)
        return state, Actions(heartbeat_now=True,
                              events=(Event(EventName.REVOKED, (shard,), self.member_epoch),))

    def on_ack_refused(self, shard: str) -> tuple[MemberState, Actions]:
        """The owner token names someone else: this member lost `shard`; stop it at once."""
        if shard not in self.holds:
            return self, NO_ACTIONS
        holds = {s: h for s, h in self.holds.items() if s != shard}
        state = attrs.evolve(self, holds=holds, holding_version=self.holding_version + 1)
        return state, Actions(abandon=frozenset({shard}), heartbeat_now=True,
                              events=(Event(EventName.FENCED, (shard,), self.member_epoch,
                                            "ack refused: not the owner"),))

    def on_abandon(self, reason: str) -> tuple[MemberState, Actions]:
        """Give up every shard at once (a lease that ran out, D1, or a leave whose drain took
        too long); rejoin or leave next."""
        return self._fenced(reason)

    def on_session_lost(self) -> MemberState:
        """A new session must report the full holding (the coordinator may have missed some)."""
        return attrs.evolve(self, reported_version=-1)

    def on_leave_requested(self, *, for_good: bool = False) -> tuple[MemberState, Actions]:
        """Shutdown: start nothing new, revoke everything read; leave once drained. A static
        member leaves for a while (-2, S2) unless `for_good` asks for a real leave (-1)."""
        reading = self.reading()
        holds = {s: attrs.evolve(h, phase=Phase.REVOKING) for s, h in self.holds.items()}
        temporary = self.instance_id is not None and not for_good
        state = attrs.evolve(self, holds=holds, leaving=True,
                             leave_epoch=TEMPORARY_LEAVE_EPOCH if temporary else LEAVE_EPOCH,
                             holding_version=self.holding_version + (1 if reading else 0))
        return state, Actions(revoke=reading, heartbeat_now=True)

    # --- one method per status --------------------------------------------------------

    def _on_ok(self, sent: SentHeartbeat, response: HeartbeatResponse) -> tuple[MemberState, Actions]:
        if sent.member_epoch in (LEAVE_EPOCH, TEMPORARY_LEAVE_EPOCH):  # H9, S2
            epoch = sent.member_epoch
            state = attrs.evolve(self, member_epoch=epoch, holds={}, revoked=frozenset(),
                                 joined=False, left=True)
            reason = "temporary leave: the group keeps its shards" if epoch < LEAVE_EPOCH else None
            return state, Actions(events=(Event(EventName.LEFT, member_epoch=epoch,
                                                reason=reason),))
        assigned = frozenset(response.assignment.assigned_shards if response.assignment else ())
        base = self._accepted(sent, response)
        state, actions = base._follow(assigned, may_start=not self.leaving)
        state = attrs.evolve(state, revoked=state.revoked - sent.reported_revoked)
        events = actions.events
        if not self.joined:
            events = (Event(EventName.JOINED, member_epoch=state.member_epoch), *events)
            state = attrs.evolve(state, joined=True)
        return state, attrs.evolve(actions, events=events)

    def _on_revoke_pending(self, sent: SentHeartbeat,
                           response: HeartbeatResponse) -> tuple[MemberState, Actions]:
        if response.assignment is None:
            return self._accepted(sent, response), NO_ACTIONS
        assigned = frozenset(response.assignment.assigned_shards)
        return self._accepted(sent, response)._follow(assigned, may_start=False)

    def _on_sync_metadata(self, sent: SentHeartbeat,
                          response: HeartbeatResponse) -> tuple[MemberState, Actions]:
        state = attrs.evolve(self, reported_version=-1)
        if response.assignment is not None:
            state, actions = state._follow(frozenset(response.assignment.assigned_shards),
                                           may_start=False)
        else:
            actions = NO_ACTIONS
        return state, attrs.evolve(actions, heartbeat_now=True)

    def _on_membership_lost(self, sent: SentHeartbeat,
                            response: HeartbeatResponse) -> tuple[MemberState, Actions]:
        if sent.member_epoch in (LEAVE_EPOCH, TEMPORARY_LEAVE_EPOCH):
            return self._on_ok(sent, response)
        return self._fenced(f"{Status(response.status).value}: {response.error or ''}".rstrip(": "))

    def _on_join_refused(self, sent: SentHeartbeat,
                         response: HeartbeatResponse) -> tuple[MemberState, Actions]:
        """A1: the join was refused by a cap of the coordinator, or S4: another live member
        holds this instanceId (UNRELEASED_INSTANCE_ID). Hold nothing, rejoin later (the shell
        backs off); the event says so once per status while it lasts."""
        if sent.member_epoch in (LEAVE_EPOCH, TEMPORARY_LEAVE_EPOCH):
            return self._on_ok(sent, response)
        status = Status(response.status)
        reason = f"{status.value}: {response.error}" if response.error else status.value
        if self.holds or self.revoked:  # never for a join; an answer to a held epoch: let go
            state, actions = self._fenced(reason)
        else:
            state, actions = attrs.evolve(self, member_epoch=JOIN_EPOCH, joined=False), NO_ACTIONS
        refused = Event(EventName.JOIN_REFUSED, member_epoch=JOIN_EPOCH, reason=reason)
        events = actions.events if self.join_refused is status else (*actions.events, refused)
        state = attrs.evolve(state, join_refused=status)
        return state, attrs.evolve(actions, heartbeat_now=False, events=events)

    def _on_instance_fenced(self, sent: SentHeartbeat,
                            response: HeartbeatResponse) -> tuple[MemberState, Actions]:
        """S3: a newer member took over this instanceId. Stop for good: hold nothing, send
        nothing more, never rejoin; the shell ends the member with an error naming it."""
        if sent.member_epoch in (LEAVE_EPOCH, TEMPORARY_LEAVE_EPOCH):
            return self._on_ok(sent, response)
        reason = (f"{Status.FENCED_INSTANCE_ID.value}: instanceId {self.instance_id!r} was taken "
                  "over by a newer member; this member stops for good")
        state, actions = self._fenced(reason)
        state = attrs.evolve(state, member_epoch=LEAVE_EPOCH, left=True, instance_fenced=reason)
        events = (Event(EventName.INSTANCE_FENCED, tuple(sorted(self.owned())), self.member_epoch,
                        reason),)  # one event (and one line), not a fence and a rejoin
        return state, attrs.evolve(actions, heartbeat_now=False, events=events)

    def _on_nothing_changed(self, sent: SentHeartbeat,
                            response: HeartbeatResponse) -> tuple[MemberState, Actions]:
        return self, NO_ACTIONS

    # --- helpers -----------------------------------------------------------------------

    def _accepted(self, sent: SentHeartbeat, response: HeartbeatResponse) -> MemberState:
        return attrs.evolve(
            self,
            member_epoch=response.member_epoch if response.member_epoch is not None
            else self.member_epoch,
            last_accepted_sent_at=sent.sent_at,
            reported_version=sent.holding_version if sent.full_ownership
            else self.reported_version,
            heartbeat_interval_ms=response.heartbeat_interval_ms or self.heartbeat_interval_ms,
            lease_ttl_ms=response.lease_ttl_ms or self.lease_ttl_ms,
            max_concurrency=response.max_concurrency,
            join_refused=None,
        )

    def _follow(self, assigned: frozenset[str], *, may_start: bool) -> tuple[MemberState, Actions]:
        """Read what is assigned (starting new shards only if allowed), revoke the rest."""
        holds = dict(self.holds)
        revoke = frozenset(s for s, h in holds.items() if h.phase is Phase.READING) - assigned
        for shard in revoke:
            holds[shard] = attrs.evolve(holds[shard], phase=Phase.REVOKING)
        resume: frozenset[str] = frozenset()
        start: set[str] = set()
        generation = self.next_generation
        if may_start:
            resume = frozenset(s for s, h in holds.items()
                               if h.phase is Phase.REVOKING and s in assigned)
            for shard in resume:
                holds[shard] = attrs.evolve(holds[shard], phase=Phase.READING)
            for shard in sorted(assigned - holds.keys()):
                holds[shard] = Hold(Phase.READING, generation)
                generation += 1
                start.add(shard)
        changed = bool(revoke or start or resume)
        state = attrs.evolve(self, holds=holds, next_generation=generation,
                             revoked=self.revoked - start,
                             holding_version=self.holding_version + (1 if changed else 0))
        events: list[Event] = []
        if start or resume:
            events.append(Event(EventName.ASSIGNED, tuple(sorted(start | resume)), state.member_epoch))
        if revoke:
            events.append(Event(EventName.REVOKING, tuple(sorted(revoke)), state.member_epoch))
        return state, Actions(start=frozenset(start), revoke=revoke, resume=resume,
                              heartbeat_now=changed, events=tuple(events))

    def _fenced(self, reason: str) -> tuple[MemberState, Actions]:
        state = attrs.evolve(
            self, member_epoch=JOIN_EPOCH, holds={}, revoked=frozenset(),
            holding_version=self.holding_version + 1, reported_version=-1,
            last_accepted_sent_at=None, joined=False, incarnation=self.incarnation + 1,
        )
        return state, Actions(abandon=self.owned(), heartbeat_now=True,
                              events=(Event(EventName.FENCED, tuple(sorted(self.owned())),
                                            self.member_epoch, reason),))


_RESPONSE_TRANSITIONS = {
    Status.OK: MemberState._on_ok,
    Status.REVOKE_PENDING: MemberState._on_revoke_pending,
    Status.SYNC_METADATA: MemberState._on_sync_metadata,
    Status.UNKNOWN_MEMBER_ID: MemberState._on_membership_lost,
    Status.FENCED_MEMBER_EPOCH: MemberState._on_membership_lost,
    Status.COORDINATOR_NOT_AVAILABLE: MemberState._on_nothing_changed,
    Status.INVALID_REQUEST: MemberState._on_nothing_changed,
    Status.GROUP_MAX_SIZE_REACHED: MemberState._on_join_refused,
    Status.GROUP_LIMIT_REACHED: MemberState._on_join_refused,
    Status.UNRELEASED_INSTANCE_ID: MemberState._on_join_refused,  # S4
    Status.FENCED_INSTANCE_ID: MemberState._on_instance_fenced,  # S3
}
