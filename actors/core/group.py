"""The group state machine: one consumer group's members, epochs and assignments.

Pure: events in (heartbeats, ticks, admin changes, routing changes), new state
and effects out; `now_ms` is always passed in. Rules H1..H14 of docs/protocol.md
live here, the way Kafka's CurrentAssignmentBuilder / TargetAssignmentBuilder
split them: `TargetAssignment` keeps the target, `_reconcile` moves one
member from what it holds towards its target without ever letting a shard
have two owners. Static members (S1..S6) carry an instanceId: they go `AWAY`
instead of expiring, their target waits for them, and a join with their
instanceId takes it over.

The prefix machine (actors/core/prefix.py) turns the effects into records
(actors/core/records.py) that the shell persists before it sends any response
(H12), and rolls back with `restore()` when that write fails.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from rsc.actors.core.assignor import TargetAssignment
from rsc.actors.core.records import GroupRecord, GroupSnapshot, MemberRecord
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    TEMPORARY_LEAVE_EPOCH,
    GroupState,
    MemberState,
    RevokeState,
)


@attrs.frozen(kw_only=True)
class GroupSettings:
    """Timing the coordinator hands to members and uses for leases (flags, in ms)."""

    heartbeat_interval_ms: int = 3000
    lease_ttl_ms: int = 10000
    revoke_timeout_ms: int = 60000
    static_session_timeout_ms: int = 45000  # S5: how long an AWAY member's target waits
    empty_group_retention_ms: int = 604_800_000  # B6: an empty group expires (0: never)


@attrs.define(kw_only=True)
class Member:
    """The coordinator's books on one member."""

    member_id: str
    member_epoch: int
    previous_epoch: int = LEAVE_EPOCH
    capacity: int | None = None
    assigned: frozenset[str] = frozenset()
    revoking: frozenset[str] = frozenset()
    instance_id: str | None = None  # S1: a static member's; None for a dynamic one
    away: bool = False  # S2/S5: in the group and in the target, holding nothing
    # not persisted: liveness and revoke clocks restart after a coordinator restart
    # (an AWAY member's away clock is `last_heartbeat_ms`: S5, S6)
    last_heartbeat_ms: int = 0
    revoke_started_ms: int | None = None
    needs_full_report: bool = False
    dead_letter_stream: str | None = None  # P2: as its heartbeats report it (not persisted)
    # H10: pushed since its last answered heartbeat; a further change before that heartbeat
    # is answered needs no push of its own (the answer carries it)
    pushed: bool = False

    @property
    def held(self) -> frozenset[str]:
        return self.assigned | self.revoking


@attrs.frozen
class Event:
    """Something an operator log line or a metric should see."""

    # joined, rejoined, left, expired, removed, fenced, revoke_timeout, revoked, epoch;
    # away and returned for static members (S2, S3, S5)
    kind: str
    member_id: str | None = None
    fields: dict[str, Any] = attrs.field(factory=dict)


@attrs.define
class Effects:
    """What the shell must do after an event: persist, push, log, write owner tokens."""

    group_dirty: bool = False  # epochs, settings or shards changed
    members_dirty: set[str] = attrs.field(factory=set)  # their books or targets changed
    members_removed: set[str] = attrs.field(factory=set)
    pushes: set[str] = attrs.field(factory=set)
    events: list[Event] = attrs.field(factory=list)
    # shard -> new owner memberId, or None when nobody holds it any more
    owner_changes: dict[str, str | None] = attrs.field(factory=dict)

    @property
    def dirty(self) -> bool:
        """Something a response may reveal changed: it must be persisted first (H12)."""
        return self.group_dirty or bool(self.members_dirty) or bool(self.members_removed)


def malformed_join(request: m.Heartbeat) -> str | None:
    """A join (memberEpoch 0) and a temporary leave (-2, S2) list no owned shards
    (Heartbeat, `ownedShards`): what is wrong, naming the field, or None. The server
    answers it before any lookup."""
    if request.owned_shards:
        if request.member_epoch == JOIN_EPOCH:
            return "field 'ownedShards' must be empty on a join (memberEpoch 0)"
        if request.member_epoch == TEMPORARY_LEAVE_EPOCH:
            return m.OWNED_ON_TEMPORARY_LEAVE
    return None


class GroupMachine:
    """One group `(stream_prefix, consumer_group)`; see the module docstring."""

    def __init__(
        self,
        stream_prefix: str,
        consumer_group: str,
        settings: GroupSettings,
        shards: Sequence[str] = (),
    ) -> None:
        self.stream_prefix = stream_prefix
        self.consumer_group = consumer_group
        self.settings = settings
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.max_concurrency: int | None = None
        self.members: dict[str, Member] = {}
        self.shards: tuple[str, ...] = tuple(shards)
        self._shard_index = {shard: index for index, shard in enumerate(self.shards)}
        # the target at assignment_epoch (H2), kept balanced incrementally
        self.target = TargetAssignment(self.shards)
        # shard -> member holding it (assigned or revoking): H3 in one index
        self.owners: dict[str, str] = {}
        # members removed by the revoke timeout answer FENCED, not UNKNOWN (H14)
        self.fenced_ids: dict[str, int] = {}
        # S1: instanceId -> the one member holding it (AWAY members included)
        self.instances: dict[str, str] = {}
        # S3: memberIds replaced by a return under another memberId -> (instanceId, since)
        self.replaced: dict[str, tuple[str, int]] = {}
        # D7: target shards nobody holds -> since when (not persisted: a restart starts afresh)
        self.free_since: dict[str, int] = {}
        # B6: since when the group has had no live member (None while it has one)
        self.empty_since_ms: int | None = None
        # H10's catch-up (`catch_up`): the members that joined since its last push; this
        # machine's clock as the last heartbeat or tick set it; when the assignment epoch last
        # moved; when the catch-up last looked
        self.newcomers: set[str] = set()
        self.clock_ms = 0
        self.epoch_moved_ms = 0
        self.caught_up_ms = 0
        self.effects = Effects()

    # --- events ----------------------------------------------------------------

    def note_emptiness(self, now_ms: int) -> None:
        """B6: start the empty clock when the last live member went (AWAY static members are
        live), stop it when one joins; either is written with the group's record."""
        if self.members:
            if self.empty_since_ms is not None:
                self.empty_since_ms = None
                self.effects.group_dirty = True
        elif self.empty_since_ms is None:
            self.empty_since_ms = now_ms
            self.effects.group_dirty = True

    @property
    def expires_at_ms(self) -> int | None:
        """B6: when this group expires, if it stays empty (None: it has members, or never)."""
        retention = self.settings.empty_group_retention_ms
        if self.members or self.empty_since_ms is None or retention <= 0:
            return None
        return self.empty_since_ms + retention

    def heartbeat(self, request: m.Heartbeat, now_ms: int,
                  routing: m.RoutingSummary | None) -> m.HeartbeatResponse:
        """Handle one member heartbeat (H1..H9, H11, H13, S1..S5)."""
        self.clock_ms = now_ms
        member_id = request.member_id
        if request.member_epoch == LEAVE_EPOCH:
            return self._leave(request, now_ms)
        if request.member_epoch == TEMPORARY_LEAVE_EPOCH:
            return self._temporary_leave(request, now_ms)
        if request.member_epoch == JOIN_EPOCH:
            invalid = malformed_join(request)
            if invalid is not None:
                return self._error(request, Status.INVALID_REQUEST, invalid)
            return self._join(request, now_ms, routing)

        known = self.members.get(member_id)
        if known is None or known.away:  # S3: an AWAY member's heartbeats are not accepted
            return self._not_live(request)
        member = known
        if request.instance_id is not None and request.instance_id != member.instance_id:
            return self._instance_mismatch(request, member)

        revoked = {r.shard for r in request.revoking_shards if r.state == RevokeState.REVOKED}
        owned = None if request.owned_shards is None else set(request.owned_shards) - revoked

        if request.member_epoch != member.member_epoch:
            if request.member_epoch != member.previous_epoch:
                self._fence_event(member_id, "epoch", request.member_epoch)
                return self._error(
                    request, Status.FENCED_MEMBER_EPOCH,
                    f"memberEpoch {request.member_epoch} is neither the current epoch "
                    f"{member.member_epoch} nor the previous one")
            if owned is None:  # H7: a lost response, and no full report to check it against
                member.last_heartbeat_ms = now_ms
                return self._sync(request, member)
        elif member.needs_full_report and owned is None:  # H12: restored, needs a full report
            member.last_heartbeat_ms = now_ms
            return self._sync(request, member)

        if owned is not None:
            stale = owned - member.held
            if stale:  # H7 subset check and H8 stale ownership
                self._fence_event(member_id, "stale_ownership", request.member_epoch)
                return self._error(
                    request, Status.FENCED_MEMBER_EPOCH,
                    f"ownedShards names shards the member does not hold: {sorted(stale)}")

        # accepted
        member.last_heartbeat_ms = now_ms
        if owned is not None:
            member.needs_full_report = False
        if request.capacity is not None and request.capacity != member.capacity:
            member.capacity = request.capacity
            self.effects.members_dirty.add(member_id)
            self._bump_epoch("capacity", cause=member_id)
        released = revoked & member.revoking
        if owned is not None:
            # a full report is the truth about what the member holds: what it does not list
            # is released, unless it is assigned and still in its target (it will start it)
            keep = member.assigned & self.target.of(member_id)
            released |= member.held - owned - keep
        if released:
            self._release(member, released, now_ms, cause=member_id)
        return self._respond(request, member, now_ms, routing)

    def tick(self, now_ms: int) -> None:
        """Expire leases (H6) and enforce the revoke timeout (H14).

        A static member whose lease runs out becomes AWAY instead (S5), and is removed once
        `static_session_timeout_ms` has passed since its last accepted heartbeat.
        """
        self.clock_ms = now_ms
        lease = self.settings.lease_ttl_ms
        timeout = self.settings.revoke_timeout_ms
        session = self.settings.static_session_timeout_ms
        for member in list(self.members.values()):
            silent = now_ms - member.last_heartbeat_ms
            if member.away or silent > lease:
                if member.instance_id is None:
                    self._remove(member, "expired", now_ms)
                elif silent > session:  # only once its lease is over too, whatever the flags
                    self._remove(member, "expired", now_ms, {"reason": "session_timeout"})
                elif not member.away:
                    self._go_away(member, now_ms, "lease_expired")
                continue
            if member.revoke_started_ms is not None and now_ms - member.revoke_started_ms > timeout:
                self._remove(member, "revoke_timeout", now_ms)
                self.fenced_ids[member.member_id] = now_ms
        # forget revoke-timeout tombstones once a member would have expired anyway
        for member_id, since in list(self.fenced_ids.items()):
            if now_ms - since > 10 * lease:
                del self.fenced_ids[member_id]
        if self.replaced:  # and replaced memberIds once their process would long have stopped
            horizon = 10 * max(lease, session)
            for member_id, (_instance, since) in list(self.replaced.items()):
                if now_ms - since > horizon:
                    del self.replaced[member_id]
        self.unowned_shards(now_ms)  # keeps the since-times of free shards at tick resolution

    def catch_up(self) -> None:
        """H10's deferred part, for newcomers. An epoch that moved on its own is not pushed at
        the bump. Once the assignment epoch has stood still for `catch_up_settle_ms` and every
        member that joined since the last catch-up is STABLE, each of them still behind the
        epoch gets one push, and they are newcomers no more. A join storm so reaches STABLE
        soon after its last move instead of up to a heartbeat interval later.

        Established members are left to their next regular heartbeat: pushing thousands of
        them at once would line their heartbeat phases up into one burst that comes back every
        interval (docs/architecture.md). Newcomers joined together anyway, and are pushed once.
        While a newcomer still revokes or waits for a shard nobody is pushed, so the pushed
        heartbeats do not land on top of the moves; the catch-up looks at most once a settle
        time."""
        if not self.newcomers:
            return
        now, epoch, settle = self.clock_ms, self.assignment_epoch, self.catch_up_settle_ms
        if now - self.epoch_moved_ms < settle or now - self.caught_up_ms < settle:
            return
        self.caught_up_ms = now
        behind: list[str] = []
        for member_id in self.newcomers:
            member = self.members.get(member_id)
            if member is None or member.away:
                continue
            if self.member_state(member) is not MemberState.STABLE:
                return  # a newcomer still moves shards: look again a settle time later
            if member.member_epoch != epoch:
                behind.append(member_id)
        self.newcomers.clear()
        for member_id in behind:
            self._push(member_id)

    @property
    def catch_up_settle_ms(self) -> int:
        """How long the assignment epoch stands still before newcomers are caught up (H10):
        a quarter of the heartbeat interval, at most 250 ms."""
        return min(self.settings.heartbeat_interval_ms // 4, 250)

    def unowned_shards(self, now_ms: int) -> int:
        """D7: the shards of the target that nobody has held for longer than one lease TTL
        while the group has live members (not AWAY ones, S2), leaving out the target of AWAY
        members; the shards of a v+1 held back for an `ordered` cutover (R3) are not in the
        target yet. `rsc_group_unowned_shards` reports it."""
        if not any(not member.away for member in self.members.values()):
            self.free_since.clear()
            return 0
        away = {member_id for member_id, member in self.members.items() if member.away}
        free: dict[str, int] = {}
        for shard in self.shards:
            if shard in self.owners or self.target.owner.get(shard) in away:
                continue
            free[shard] = self.free_since.get(shard, now_ms)
        self.free_since = free
        lease = self.settings.lease_ttl_ms
        return sum(1 for since in free.values() if now_ms - since > lease)

    def remove_member(self, member_id: str | None, now_ms: int) -> bool:
        """Admin removal, AWAY members too (S5); False when the member is not live (or no
        memberId is named: a removal by instanceId is `remove_instance`)."""
        member = self.members.get(member_id) if member_id is not None else None
        if member is None:
            return False
        self._remove(member, "removed", now_ms)
        return True

    def remove_instance(self, instance_id: str, now_ms: int) -> str | None:
        """Admin removal by instanceId (S5), an AWAY member too: the memberId removed, or
        None when no member holds that instanceId."""
        member_id = self.instances.get(instance_id)
        if member_id is None:
            return None
        self._remove(self.members[member_id], "removed", now_ms)
        return member_id

    def join_adds_member(self, request: m.Heartbeat) -> bool:
        """Whether a join would grow the group (A1's --max-group-size): not a rejoin, not a
        return to an instanceId's target (S3), not a duplicate (S4)."""
        return (request.member_id not in self.members
                and (request.instance_id is None or request.instance_id not in self.instances))

    def set_max_concurrency(self, value: int | None) -> None:
        """Admin change of the group setting (H1, H11)."""
        if value != self.max_concurrency:
            self.max_concurrency = value
            self._bump_epoch("max_concurrency", push_all=True)

    def set_shards(self, shards: Sequence[str]) -> None:
        """The prefix's assignable shards changed (routing created, resharding)."""
        shards = tuple(shards)
        if shards != self.shards:
            self.shards = shards
            self._shard_index = {shard: index for index, shard in enumerate(shards)}
            self._bump_epoch("routing", push_all=True)

    def take_effects(self) -> Effects:
        effects, self.effects = self.effects, Effects()
        return effects

    # --- transitions -----------------------------------------------------------

    def _join(self, request: m.Heartbeat, now_ms: int,
              routing: m.RoutingSummary | None) -> m.HeartbeatResponse:
        """A join: H1's join or rejoin, S3's return, or S4's duplicate."""
        member = self.members.get(request.member_id)
        instance_id = request.instance_id
        if member is not None:
            if instance_id is not None and instance_id != member.instance_id:
                return self._instance_mismatch(request, member)
            if member.away:
                self._return(member, request, now_ms)
            else:
                self._rejoin(member, request, now_ms)
        elif instance_id is not None and instance_id in self.instances:
            holder = self.members[self.instances[instance_id]]
            if not holder.away:  # S4: a second live holder; nothing changes
                return self._error(
                    request, Status.UNRELEASED_INSTANCE_ID,
                    f"instanceId {instance_id!r} is held by live member {holder.member_id!r}; "
                    "nothing changed, retry the join with backoff")
            member = self._replace(holder, request, now_ms)
        else:
            member = self._add(request, now_ms)
        return self._respond(request, member, now_ms, routing)

    def _add(self, request: m.Heartbeat, now_ms: int) -> Member:
        """A new member (H1); with an instanceId it is static (S1)."""
        member = Member(member_id=request.member_id, member_epoch=JOIN_EPOCH,
                        capacity=request.capacity, last_heartbeat_ms=now_ms,
                        instance_id=request.instance_id)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.instances[member.instance_id] = member.member_id
        self.target.add_member(member.member_id)
        self.newcomers.add(member.member_id)
        self.effects.members_dirty.add(member.member_id)
        self.effects.members_removed.discard(member.member_id)
        self.fenced_ids.pop(member.member_id, None)
        self.replaced.pop(member.member_id, None)
        fields: dict[str, Any] = {"capacity": request.capacity}
        if member.instance_id is not None:
            fields["instanceId"] = member.instance_id
        self.effects.events.append(Event("joined", member.member_id, fields))
        self._bump_epoch("join", cause=member.member_id)
        return member

    def _return(self, member: Member, request: m.Heartbeat, now_ms: int) -> None:
        """S3 under the same memberId: the AWAY member is back, with its target at once."""
        member.away = False
        member.last_heartbeat_ms = now_ms
        member.member_epoch, member.previous_epoch = JOIN_EPOCH, LEAVE_EPOCH  # as a join (H4)
        member.needs_full_report = False
        self.effects.members_dirty.add(member.member_id)
        self.newcomers.add(member.member_id)
        self.effects.events.append(Event("returned", member.member_id,
                                         {"instanceId": member.instance_id}))
        self._capacity(member, request.capacity)

    def _replace(self, holder: Member, request: m.Heartbeat, now_ms: int) -> Member:
        """S3: a join with an AWAY member's instanceId under another memberId takes over its
        target as it is; the old memberId is fenced for good (FENCED_INSTANCE_ID)."""
        assert holder.instance_id is not None
        if holder.held:  # an AWAY member holds nothing; kept safe should that ever change (H3)
            self._release(holder, holder.held, now_ms, cause=holder.member_id, revoke=False)
        old_id, new_id, instance_id = holder.member_id, request.member_id, holder.instance_id
        member = Member(member_id=new_id, member_epoch=JOIN_EPOCH, capacity=holder.capacity,
                        instance_id=instance_id, last_heartbeat_ms=now_ms)
        del self.members[old_id]
        self.members[new_id] = member
        self.instances[instance_id] = new_id
        self.target.rename_member(old_id, new_id)
        self.effects.members_dirty.discard(old_id)
        self.effects.members_removed.add(old_id)
        self.effects.pushes.discard(old_id)
        self.effects.members_dirty.add(new_id)
        self.effects.members_removed.discard(new_id)
        self.replaced[old_id] = (instance_id, now_ms)
        self.replaced.pop(new_id, None)
        self.newcomers.discard(old_id)
        self.newcomers.add(new_id)
        self.fenced_ids.pop(new_id, None)
        self.effects.events.append(Event("returned", new_id, {"instanceId": instance_id,
                                                              "replaced": old_id}))
        self._capacity(member, request.capacity)
        return member

    def _capacity(self, member: Member, capacity: int | None) -> None:
        """H1: a capacity change grows the group epoch."""
        if capacity is not None and capacity != member.capacity:
            member.capacity = capacity
            self.effects.members_dirty.add(member.member_id)
            self._bump_epoch("capacity", cause=member.member_id)

    def _rejoin(self, member: Member, request: m.Heartbeat, now_ms: int) -> None:
        """A live member rejoining: it has dropped everything it held (H1)."""
        member.last_heartbeat_ms = now_ms
        member.needs_full_report = False
        if member.held:
            self._release(member, member.held, now_ms, cause=member.member_id, revoke=False)
        self.newcomers.add(member.member_id)
        self.effects.events.append(Event("rejoined", member.member_id))
        self._capacity(member, request.capacity)

    def _leave(self, request: m.Heartbeat, now_ms: int) -> m.HeartbeatResponse:
        """H9: free the member's shards at once; OK at epoch -1, also for an unknown member.
        A static member's -1 is a real leave too (S5)."""
        member = self.members.get(request.member_id)
        if member is None:
            if request.member_id in self.replaced:
                return self._not_live(request)
        elif request.instance_id is not None and request.instance_id != member.instance_id:
            return self._instance_mismatch(request, member)
        else:
            self._remove(member, "left", now_ms)
        return self._left(request, LEAVE_EPOCH)

    def _temporary_leave(self, request: m.Heartbeat, now_ms: int) -> m.HeartbeatResponse:
        """S2: a static member leaves for a while: AWAY, its target kept for it, held by
        nobody and given to nobody; no epoch growth. OK at epoch -2, also when repeated or
        from a member the coordinator does not know."""
        if request.owned_shards:
            return self._error(request, Status.INVALID_REQUEST, m.OWNED_ON_TEMPORARY_LEAVE)
        member = self.members.get(request.member_id)
        if member is None:
            if request.member_id in self.replaced:
                return self._not_live(request)
        elif member.instance_id is None:
            return self._error(request, Status.INVALID_REQUEST,
                               "memberEpoch -2 (a temporary leave) is only for static members, "
                               "which join with an instanceId; leave with memberEpoch -1")
        elif request.instance_id is not None and request.instance_id != member.instance_id:
            return self._instance_mismatch(request, member)
        elif not member.away:
            member.last_heartbeat_ms = now_ms  # S5: the away clock starts here
            self._go_away(member, now_ms, "temporary_leave")
        return self._left(request, TEMPORARY_LEAVE_EPOCH)

    def _left(self, request: m.Heartbeat, epoch: int) -> m.HeartbeatResponse:
        """The answer to a leave (H9) or a temporary leave (S2): OK, no shards."""
        return m.HeartbeatResponse(
            request_id=request.request_id, status=Status.OK, member_id=request.member_id,
            member_epoch=epoch,
            group_epoch=self.group_epoch, assignment_epoch=self.assignment_epoch,
            heartbeat_interval_ms=self.settings.heartbeat_interval_ms,
            lease_ttl_ms=self.settings.lease_ttl_ms,
        )

    def _go_away(self, member: Member, now_ms: int, reason: str) -> None:
        """S2/S5: the member stays in the group and in the target, holding nothing; nobody
        else gets its shards and the epoch does not grow."""
        if member.held:
            self._release(member, member.held, now_ms, cause=member.member_id, revoke=False)
        member.away = True
        member.revoke_started_ms = None
        member.needs_full_report = False
        self.effects.members_dirty.add(member.member_id)
        self._answered(member)  # nothing to push to (S2); its return is answered in full
        self.effects.events.append(Event("away", member.member_id, {
            "instanceId": member.instance_id, "reason": reason}))

    def _remove(self, member: Member, reason: str, now_ms: int,
                fields: dict[str, Any] | None = None) -> None:
        """Take a member out of the group and free its shards at once (H6, H9, H14, S5)."""
        if member.held:
            self._release(member, member.held, now_ms, cause=member.member_id, revoke=False)
        del self.members[member.member_id]
        fields = dict(fields or {})
        if member.instance_id is not None and self.instances.get(member.instance_id) == member.member_id:
            del self.instances[member.instance_id]
            fields["instanceId"] = member.instance_id
        self.target.remove_member(member.member_id)
        self.newcomers.discard(member.member_id)
        self.effects.members_dirty.discard(member.member_id)
        self.effects.members_removed.add(member.member_id)
        self.effects.events.append(Event(reason, member.member_id, fields))
        self.effects.pushes.discard(member.member_id)
        self._bump_epoch(reason, cause=member.member_id)

    def _release(self, member: Member, shards: Iterable[str], now_ms: int, *,
                 cause: str, revoke: bool = True) -> None:
        """`member` no longer holds `shards`: free them and wake whoever waits for them."""
        shards = frozenset(shards)
        if revoke and member.revoke_started_ms is not None:
            self.effects.events.append(Event("revoked", member.member_id, {
                "shards": sorted(shards), "ms": now_ms - member.revoke_started_ms}))
        member.assigned -= shards
        member.revoking -= shards
        if not member.revoking:
            member.revoke_started_ms = None
        for shard in shards:
            if self.owners.get(shard) == member.member_id:
                del self.owners[shard]
                self.free_since[shard] = now_ms
                self.effects.owner_changes[shard] = None
                waiting = self.target.owner.get(shard)
                if waiting is not None and waiting != cause:
                    self._push(waiting)
        self.effects.members_dirty.add(member.member_id)

    def _bump_epoch(self, reason: str, cause: str | None = None, *, push_all: bool = False) -> None:
        """H1: the group epoch grows and the target is recomputed at it.

        Members are added to and removed from the target as they come and go;
        here the shards follow, and the members whose target changed are pushed
        (H10). With `push_all` (routing or maxConcurrency changed) everyone is.
        """
        self.group_epoch += 1
        self.epoch_moved_ms = self.clock_ms
        if self.target.shards != self.shards:
            self.target.set_shards(self.shards)
        self.assignment_epoch = self.group_epoch
        changed = self.target.take_changed()
        self.effects.group_dirty = True
        self.effects.members_dirty |= changed
        self.effects.events.append(Event("epoch", None, {
            "reason": reason, "groupEpoch": self.group_epoch, "members": len(self.members)}))
        for member_id in (self.members if push_all else changed):
            if member_id != cause:
                self._push(member_id)

    def _push(self, member_id: str) -> None:
        """H10: push `member_id` once the batch commits, unless a push since its last answered
        heartbeat is still unanswered: the heartbeat that push brings gets everything changed
        until it is handled. An AWAY member has no session to push to; its return gets its
        target anyway (S3)."""
        member = self.members.get(member_id)
        if member is not None and not member.pushed and not member.away:
            member.pushed = True
            self.effects.pushes.add(member_id)

    def _answered(self, member: Member) -> None:
        """`member`'s heartbeat is answered with the books as they are now: a push queued in
        this batch before it is no longer needed, and the next change is pushed again."""
        if member.pushed:
            member.pushed = False
            self.effects.pushes.discard(member.member_id)

    def _reconcile(self, member: Member, now_ms: int) -> Status:
        """Move `member` towards its target (H3, H4, H5); the heart of CurrentAssignmentBuilder."""
        target = self.target.of(member.member_id)
        # a shard already being revoked stays so even if it is back in the target: the
        # member was told to stop reading it, and only its release frees it (H3, H4)
        if member.held - target or member.revoking:
            keep = member.assigned & target
            revoking = member.held - keep
            if keep != member.assigned or revoking != member.revoking:
                member.assigned = keep
                member.revoking = revoking
                self.effects.members_dirty.add(member.member_id)
            if member.revoke_started_ms is None:  # H14: the clock starts with the first ask
                member.revoke_started_ms = now_ms
            return Status.REVOKE_PENDING
        member.revoke_started_ms = None
        if member.member_epoch != self.assignment_epoch:
            member.previous_epoch = member.member_epoch
            member.member_epoch = self.assignment_epoch
            self.effects.members_dirty.add(member.member_id)
        free = [s for s in target - member.assigned if s not in self.owners]
        if free:
            for shard in free:
                self.owners[shard] = member.member_id
                self.effects.owner_changes[shard] = member.member_id
            member.assigned = member.assigned | frozenset(free)
            self.effects.members_dirty.add(member.member_id)
        return Status.OK

    # --- responses -------------------------------------------------------------

    def _respond(self, request: m.Heartbeat, member: Member, now_ms: int,
                 routing: m.RoutingSummary | None) -> m.HeartbeatResponse:
        if request.dead_letter_stream is not None:  # P2: absent means unchanged
            member.dead_letter_stream = request.dead_letter_stream
        status = self._reconcile(member, now_ms)
        self._answered(member)
        return self._response(request, member, status, routing)

    def _sync(self, request: m.Heartbeat, member: Member) -> m.HeartbeatResponse:
        """SYNC_METADATA: drain-only; the member keeps what it holds and is still assigned."""
        self._answered(member)
        return self._response(request, member, Status.SYNC_METADATA, None)

    def _response(self, request: m.Heartbeat, member: Member, status: Status,
                  routing: m.RoutingSummary | None) -> m.HeartbeatResponse:
        target = self.target.of(member.member_id)
        order = self._shard_order
        return m.HeartbeatResponse(
            request_id=request.request_id,
            status=status,
            member_id=member.member_id,
            member_epoch=member.member_epoch,
            group_epoch=self.group_epoch,
            assignment_epoch=self.assignment_epoch,
            heartbeat_interval_ms=self.settings.heartbeat_interval_ms,
            lease_ttl_ms=self.settings.lease_ttl_ms,
            max_concurrency=self.effective_max_concurrency(member),
            routing=routing,
            assignment=m.Assignment(
                assigned_shards=tuple(sorted(member.assigned, key=order)),
                pending_shards=tuple(sorted(target - member.assigned, key=order)),
            ),
        )

    def _error(self, request: m.Heartbeat, status: Status, error: str) -> m.HeartbeatResponse:
        return m.HeartbeatResponse(request_id=request.request_id, status=status,
                                   member_id=request.member_id, error=error)

    def _not_live(self, request: m.Heartbeat) -> m.HeartbeatResponse:
        """A heartbeat other than a join from a memberId that is not live: replaced (S3),
        removed by the revoke timeout (H14), AWAY (S3) or unknown."""
        member_id = request.member_id
        replaced = self.replaced.get(member_id)
        if replaced is not None:
            return self._error(request, Status.FENCED_INSTANCE_ID,
                               f"instanceId {replaced[0]!r} was taken over by a newer member; "
                               "stop for good, do not rejoin")
        if member_id in self.fenced_ids:
            return self._error(request, Status.FENCED_MEMBER_EPOCH,
                               "member was removed by the revoke timeout; rejoin with epoch 0")
        return self._error(request, Status.UNKNOWN_MEMBER_ID,
                           f"member {member_id!r} is not live in the group; rejoin with epoch 0")

    def _instance_mismatch(self, request: m.Heartbeat, member: Member) -> m.HeartbeatResponse:
        """S1: the instanceId is read on a join; it never changes, nor is one added later."""
        held = "none" if member.instance_id is None else repr(member.instance_id)
        return self._error(request, Status.INVALID_REQUEST,
                           f"field 'instanceId' {request.instance_id!r} differs from the member's "
                           f"instanceId ({held}); an instanceId is set on the first join and "
                           "never changed or added")

    def _fence_event(self, member_id: str, reason: str, epoch: int) -> None:
        self.effects.events.append(Event("fenced", member_id, {"reason": reason, "epoch": epoch}))

    def _shard_order(self, shard: str) -> tuple[int, str]:
        return (self._shard_index.get(shard, len(self._shard_index)), shard)

    # --- views -----------------------------------------------------------------

    def effective_max_concurrency(self, member: Member) -> int | None:
        """H11: min(group setting, member capacity); either alone when the other is unset."""
        limits = [v for v in (self.max_concurrency, member.capacity) if v is not None]
        return min(limits) if limits else None

    def member_state(self, member: Member) -> MemberState:
        if member.away:
            return MemberState.AWAY
        target = self.target.of(member.member_id)
        if member.revoking or member.held - target:
            return MemberState.UNREVOKED_SHARDS
        if target - member.assigned:
            return MemberState.UNRELEASED_SHARDS
        return MemberState.STABLE

    @property
    def state(self) -> GroupState:
        if not self.members:
            return GroupState.EMPTY
        if all(member.away  # S6: an AWAY member does not make the group RECONCILING
               or (member.member_epoch == self.assignment_epoch
                   and self.member_state(member) == MemberState.STABLE)
               for member in self.members.values()):
            return GroupState.STABLE
        return GroupState.RECONCILING

    def describe(self, now_ms: int, routing: m.RoutingSummary | None,
                 migration: m.MigrationDescription | None) -> m.GroupDescription:
        order = self._shard_order

        def ordered(shards: Iterable[str]) -> tuple[str, ...]:
            return tuple(sorted(shards, key=order))

        members = tuple(
            m.MemberDescription(
                member_id=member.member_id,
                member_epoch=member.member_epoch,
                state=self.member_state(member),
                capacity=member.capacity,
                last_heartbeat_ms_ago=max(0, now_ms - member.last_heartbeat_ms),
                assigned_shards=ordered(member.assigned),
                pending_shards=ordered(self.target.of(member.member_id)
                                       - member.assigned),
                revoking_shards=ordered(member.revoking),
                target_shards=ordered(self.target.of(member.member_id)),
                instance_id=member.instance_id,
                away_ms=max(0, now_ms - member.last_heartbeat_ms) if member.away else None,
                dead_letter_stream=member.dead_letter_stream,
            )
            for member in sorted(self.members.values(), key=lambda mb: mb.member_id)
        )
        return m.GroupDescription(
            request_id=None, status=Status.OK,
            stream_prefix=self.stream_prefix, consumer_group=self.consumer_group,
            state=self.state, group_epoch=self.group_epoch,
            assignment_epoch=self.assignment_epoch, max_concurrency=self.max_concurrency,
            routing=routing, migration=migration, members=members,
            target_assignment={d.member_id: d.target_shards for d in members},
            current_assignment={d.member_id: ordered(self.members[d.member_id].held)
                                for d in members},
        )

    def summary(self) -> m.GroupSummary:
        return m.GroupSummary(stream_prefix=self.stream_prefix, consumer_group=self.consumer_group,
                              group_epoch=self.group_epoch, members=len(self.members),
                              shards=len(self.shards), state=self.state,
                              expires_at_ms=self.expires_at_ms)

    # --- durability (H12) ------------------------------------------------------

    def to_record(self) -> GroupSnapshot:
        """Everything a response may reveal, as the records the store persists."""
        return GroupSnapshot(self.persistent_group(),
                             {mid: self.persistent_member(mid) for mid in self.members})

    def persistent_group(self) -> GroupRecord:
        """The group-level record (written when `group_dirty`).

        The shards are not in it: they follow from the prefix's routing and
        migration, which the prefix machine persists and restores first.
        """
        return GroupRecord(group_epoch=self.group_epoch, assignment_epoch=self.assignment_epoch,
                           max_concurrency=self.max_concurrency,
                           empty_since_ms=self.empty_since_ms)

    def persistent_member(self, member_id: str) -> MemberRecord:
        """One member's books and target (written only for the members in `members_dirty`)."""
        member = self.members[member_id]
        return MemberRecord(epoch=member.member_epoch, previous_epoch=member.previous_epoch,
                            capacity=member.capacity, assigned=member.assigned,
                            revoking=member.revoking, target=self.target.of(member_id),
                            instance_id=member.instance_id, away=member.away)

    def restore(self, record: GroupSnapshot, shards: Sequence[str], now_ms: int, *,
                restart: bool) -> None:
        """Load state from records (a coordinator restart, or a rollback after a failed write).

        On a restart every member gets a fresh lease and must send a full
        report (SYNC_METADATA until it does), and an AWAY member a fresh away clock
        (S5); on a rollback liveness is kept.
        """
        old = self.members
        self.group_epoch = record.group.group_epoch
        self.assignment_epoch = record.group.assignment_epoch
        self.max_concurrency = record.group.max_concurrency
        self.empty_since_ms = record.group.empty_since_ms
        self.clock_ms = self.epoch_moved_ms = now_ms
        self.shards = tuple(shards)
        self._shard_index = {shard: index for index, shard in enumerate(self.shards)}
        self.members = {}
        for mid, data in record.members.items():
            previous = None if restart else old.get(mid)
            self.members[mid] = Member(
                member_id=mid, member_epoch=data.epoch, previous_epoch=data.previous_epoch,
                capacity=data.capacity, assigned=data.assigned, revoking=data.revoking,
                instance_id=data.instance_id, away=data.away,
                last_heartbeat_ms=now_ms if previous is None else previous.last_heartbeat_ms,
                revoke_started_ms=(now_ms if data.revoking else None) if previous is None
                else previous.revoke_started_ms,
                needs_full_report=not data.away and (
                    restart or (previous is not None and previous.needs_full_report)),
            )
        self.target = TargetAssignment(self.shards, {mid: data.target
                                                     for mid, data in record.members.items()})
        for member_id in self.members:
            self.target.add_member(member_id)
        self.target.take_changed()
        self.owners = {s: mid for mid, mb in self.members.items() for s in mb.held}
        if restart:
            self.free_since = {}
        self.instances = {mb.instance_id: mid for mid, mb in self.members.items()
                          if mb.instance_id is not None}
        self.newcomers &= self.members.keys()  # a rolled-back join is gone
        for member_id in [mid for mid in self.replaced if mid in self.members]:
            del self.replaced[member_id]  # a rolled-back return (S3): that memberId is back
        self.effects = Effects()

    @classmethod
    def from_record(cls, stream_prefix: str, consumer_group: str, settings: GroupSettings,
                    record: GroupSnapshot, shards: Sequence[str], now_ms: int) -> GroupMachine:
        machine = cls(stream_prefix, consumer_group, settings)
        machine.restore(record, shards, now_ms, restart=True)
        return machine
