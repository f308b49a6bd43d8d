"""Hypothesis state machine over the pure group machine with simulated members.

Each simulated member keeps its own local view (what it reads, what it drains,
its epoch) and follows the member obligations of docs/protocol.md, with random but
legal choices: REVOKING or REVOKED for a shard it drains, `ownedShards` null
(when its holding is unchanged) or full, lost responses, capacity changes,
going silent. The world adds clock ticks, admin removals, maxConcurrency and
shard-set changes and coordinator restarts.

Static members (S1..S6) run beside the dynamic ones: two processes per
instanceId (`s0a`/`s0b` share `pod-0`), so a process restart is a return under
a new memberId (S3), two live processes are a duplicate (S4), and the replaced
one is fenced for good. They leave for a while with -2 (S2), go AWAY when their
lease runs out and are removed after the session timeout (S5), or by instanceId.

Checked after every step:
- H3 in the coordinator's books (owners index = assigned | revoking, no shard
  in two members; an AWAY member holds nothing) and in the members' local
  views (no shard read by two members; a member only holds what the books say
  it holds);
- H5 on every response: a shard a member reads and that stayed in its target
  is listed in assignedShards;
- H10: every member whose next answer changed was pushed, the cause was not;
- H12: a change of the record asks the shell to persist; owner changes keep
  the shell's owner tokens equal to the books;
- liveness: on a copy, every live member heartbeats correctly until nothing
  changes; then every shard is assigned, the group is STABLE and balanced.
"""

from __future__ import annotations

import pickle

import attrs
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from rsc.actors.core.group import GroupMachine, GroupSettings
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    TEMPORARY_LEAVE_EPOCH,
    GroupState,
    RevokeState,
)

PREFIX, GROUP = "orders", "billing"
LEASE = 10_000
SESSION = 25_000
SETTINGS = GroupSettings(heartbeat_interval_ms=3000, lease_ttl_ms=LEASE, revoke_timeout_ms=15_000,
                         static_session_timeout_ms=SESSION)
# two processes per instanceId: a restart under a new memberId, or a duplicate (S3, S4)
INSTANCES = {"s0a": "pod-0", "s0b": "pod-0", "s1a": "pod-1", "s1b": "pod-1"}
STATIC_IDS = tuple(INSTANCES)
MEMBER_IDS = ("m0", "m1", "m2", "m3", *STATIC_IDS)
ACCEPTED = (Status.OK, Status.REVOKE_PENDING, Status.SYNC_METADATA)
SETTLE_ROUNDS = 20


def shard_ids(version: int, count: int) -> tuple[str, ...]:
    return tuple(f"{PREFIX}:v{version}:{index}" for index in range(count))


@attrs.define
class SimMember:
    """One member's own view of the world; it only learns through responses."""

    member_id: str
    instance_id: str | None = None  # S1: set for the static processes
    active: bool = False  # joined (or joining); False before the first join and after a leave
    silent: bool = False  # crashed or partitioned: sends nothing
    epoch: int = 0  # 0 = the next heartbeat is a join
    reading: set[str] = attrs.field(factory=set)
    draining: set[str] = attrs.field(factory=set)
    revoked_unanswered: set[str] = attrs.field(factory=set)  # REVOKED repeats until an OK
    must_send_full: bool = True  # holding changed, or SYNC_METADATA asked for it
    lease_start: int | None = None  # when the last accepted heartbeat was sent
    # shards read continuously while in this member's target: H5 says no response drops them
    undisturbed: set[str] = attrs.field(factory=set)
    # removed behind its back (admin, revoke timeout): its next heartbeat must be refused
    expect_refusal: bool = False
    slow_drainer: bool = False  # keeps reporting REVOKING (until the revoke timeout)

    @property
    def holding(self) -> set[str]:
        return self.reading | self.draining

    def drop_everything(self) -> None:
        self.reading.clear()
        self.draining.clear()
        self.revoked_unanswered.clear()
        self.undisturbed.clear()
        self.epoch = 0
        self.must_send_full = True
        self.lease_start = None


@attrs.define
class World:
    group: GroupMachine
    members: dict[str, SimMember]
    now: int = 0
    version: int = 1
    # the shell's owner tokens, kept from effects.owner_changes
    owner_tokens: dict[str, str] = attrs.field(factory=dict)
    restarted: bool = False  # revoke-timeout tombstones do not survive a restart


def routing_of(group: GroupMachine, version: int) -> m.RoutingSummary | None:
    return m.RoutingSummary(version=version, shard_count=len(group.shards)) if group.shards else None


def target_of(group: GroupMachine, member_id: str) -> set[str]:
    return set(group.target.of(member_id))


def build_request(member: SimMember, *, finish: frozenset[str], full: bool,
                  capacity: int | None, repeat_instance: bool = False) -> m.Heartbeat:
    """The heartbeat a member following docs/protocol.md sends; `finish` drains those shards now.
    A static member names its instanceId on a join, and may repeat it later (S1)."""
    if member.epoch == JOIN_EPOCH:
        return m.Heartbeat(request_id=1, stream_prefix=PREFIX, consumer_group=GROUP,
                           member_id=member.member_id, member_epoch=JOIN_EPOCH, capacity=capacity,
                           owned_shards=() if full else None, instance_id=member.instance_id)
    done = finish & member.draining
    if done:  # no new reads and in-flight 0: it no longer holds them
        member.draining -= done
        member.revoked_unanswered |= done
        member.must_send_full = True
    entries = [m.RevokingShard(shard=s, state=RevokeState.REVOKING) for s in sorted(member.draining)]
    entries += [m.RevokingShard(shard=s, state=RevokeState.REVOKED)
                for s in sorted(member.revoked_unanswered)]
    send_full = full or member.must_send_full
    return m.Heartbeat(
        request_id=1, stream_prefix=PREFIX, consumer_group=GROUP, member_id=member.member_id,
        member_epoch=member.epoch, capacity=capacity,
        owned_shards=tuple(sorted(member.holding)) if send_full else None,
        revoking_shards=tuple(entries),
        instance_id=member.instance_id if repeat_instance else None)


def apply_response(world: World, member: SimMember, sent: m.Heartbeat,
                   response: m.HeartbeatResponse) -> None:
    """Follow the member table of docs/protocol.md, checking H5 on the way."""
    status = response.status
    assert status != Status.INVALID_REQUEST, response.error
    if member.expect_refusal:
        allowed = {Status.UNKNOWN_MEMBER_ID, Status.FENCED_MEMBER_EPOCH, Status.FENCED_INSTANCE_ID}
        if sent.member_epoch == JOIN_EPOCH:
            allowed = {Status.OK, Status.UNRELEASED_INSTANCE_ID}
        assert status in allowed, (member.member_id, status)
    member.expect_refusal = False
    if status in (Status.UNRELEASED_INSTANCE_ID, Status.FENCED_INSTANCE_ID):
        assert member.instance_id is not None, (member.member_id, status)
        if status == Status.UNRELEASED_INSTANCE_ID:  # S4: only ever the answer to a join
            assert sent.member_epoch == JOIN_EPOCH and not member.holding
    if status in (Status.UNKNOWN_MEMBER_ID, Status.FENCED_MEMBER_EPOCH,
                  Status.UNRELEASED_INSTANCE_ID, Status.FENCED_INSTANCE_ID):
        member.drop_everything()  # UNRELEASED: retry the join later (S4)
        if status == Status.FENCED_INSTANCE_ID:  # S3: stop for good
            member.active = False
        return
    assert status in ACCEPTED and response.assignment is not None
    assigned = set(response.assignment.assigned_shards)
    # H5: nothing read that stayed in the target is ever missing from a response
    stays = member.undisturbed & target_of(world.group, member.member_id)
    assert stays <= assigned, (member.member_id, status, stays - assigned)
    assert response.member_epoch is not None
    member.epoch = response.member_epoch
    member.lease_start = world.now
    before = member.holding
    stopped = member.reading - assigned
    member.draining |= stopped
    member.reading -= stopped
    if status == Status.OK:
        started = assigned - member.reading
        member.draining -= started  # listed again: read it again
        member.reading |= assigned
        member.undisturbed |= started & target_of(world.group, member.member_id)
        member.revoked_unanswered.clear()
    member.undisturbed &= member.reading
    if member.holding != before or status == Status.SYNC_METADATA:
        member.must_send_full = True


def send_heartbeat(world: World, member: SimMember, *, finish: frozenset[str], full: bool,
                   capacity: int | None, lost: bool, quiet: bool = False,
                   repeat_instance: bool = False) -> m.HeartbeatResponse:
    request = build_request(member, finish=finish, full=full, capacity=capacity,
                            repeat_instance=repeat_instance)
    response = world.group.heartbeat(request, world.now, routing_of(world.group, world.version))
    if request.owned_shards is not None:
        member.must_send_full = False
    if not quiet or response.status == Status.FENCED_INSTANCE_ID:
        event(f"{'lost ' if lost else ''}{response.status.value}{' (settling)' if quiet else ''}")
    if not lost:
        apply_response(world, member, request, response)
    return response


# these processes keep heartbeating at their epoch after their own lease ran out (they only
# stopped reading), so a replaced one meets FENCED_INSTANCE_ID (S3) rather than rejoining
KEEP_EPOCH_ON_LEASE_LOSS = frozenset({"s0b", "s1b"})


def self_fence_expired_leases(world: World) -> None:
    """A member stops reading once its own lease is over (it cannot know it is still live)."""
    for member in world.members.values():
        if member.lease_start is not None and world.now - member.lease_start >= LEASE:
            epoch = member.epoch
            member.drop_everything()
            if member.member_id in KEEP_EPOCH_ON_LEASE_LOSS:
                member.epoch = epoch


def react_to_removals(world: World, events) -> None:
    for removal in events:
        member = world.members.get(removal.member_id) if removal.member_id else None
        if member is None:
            continue
        if removal.kind in ("expired", "removed", "revoke_timeout", "away", "returned"):
            detail = removal.fields.get("reason") or ("replaced" in removal.fields and "replacing")
            event(f"{removal.kind} {detail}" if detail else removal.kind)
        if removal.kind in ("expired", "away"):  # S5: AWAY only once its own lease ran out
            assert not member.holding, f"{removal.member_id} expired before its own lease ran out"
        elif removal.kind == "returned" and "replaced" in removal.fields:
            replaced = world.members[removal.fields["replaced"]]
            assert not replaced.holding  # it was AWAY: it had stopped (H3, S3)
        elif removal.kind in ("removed", "revoke_timeout"):
            # H3 lets its shards move at once; it learns on its next heartbeat, still at its epoch
            epoch = member.epoch
            member.drop_everything()
            member.epoch = epoch
            member.expect_refusal = True


def keep_owner_tokens(world: World, owner_changes: dict[str, str | None]) -> None:
    """What the shell does with `owner_changes`; the tokens must always equal the books."""
    for shard, owner in owner_changes.items():
        if owner is None:
            world.owner_tokens.pop(shard, None)
        else:
            world.owner_tokens[shard] = owner
    assert world.owner_tokens == world.group.owners


def settle(world: World) -> None:
    """Every live member heartbeats correctly, nothing lost, until nothing changes."""
    for member in world.members.values():
        member.silent = False
    for _ in range(SETTLE_ROUNDS):
        record = world.group.to_record()
        views = {mid: (mb.epoch, set(mb.reading)) for mid, mb in world.members.items()}
        statuses = []
        for member_id in sorted(world.members):
            member = world.members[member_id]
            if not member.active:
                continue
            response = send_heartbeat(world, member, finish=frozenset(member.draining), full=True,
                                      capacity=None, lost=False, quiet=True)
            statuses.append(response.status)
            keep_owner_tokens(world, world.group.take_effects().owner_changes)
        # S4: a duplicate keeps being refused; that is a fixed point too
        quiet = all(status in (Status.OK, Status.UNRELEASED_INSTANCE_ID) for status in statuses)
        unchanged = views == {mid: (mb.epoch, set(mb.reading)) for mid, mb in world.members.items()}
        if quiet and unchanged and world.group.to_record() == record:
            return
    raise AssertionError(f"no fixed point after {SETTLE_ROUNDS} rounds: {world.group.to_record()}")


@st.composite
def heartbeat_choices(draw: st.DrawFn) -> dict:
    """The random but legal choices of one heartbeat."""
    return {
        "finish_share": draw(st.sampled_from([0.0, 0.5, 1.0])),  # of the shards it drains
        "full": draw(st.booleans()),
        "capacity": draw(st.sampled_from([None, None, None, 1, 2, 4])),
        "lost": draw(st.sampled_from([False, False, False, False, True])),
        "repeat_instance": draw(st.booleans()),  # S1: a static member may repeat its instanceId
    }


class GroupStateMachine(RuleBasedStateMachine):
    @initialize(shard_count=st.integers(0, 7), founders=st.integers(0, 4), settled=st.booleans(),
                slow=st.sets(st.sampled_from(MEMBER_IDS), max_size=2))
    def start(self, shard_count, founders, settled, slow):
        group = GroupMachine(PREFIX, GROUP, SETTINGS, shard_ids(1, shard_count))
        self.world = World(group=group, members={
            mid: SimMember(mid, instance_id=INSTANCES.get(mid), slow_drainer=mid in slow)
            for mid in MEMBER_IDS})
        self.cause: str | None = None
        self.answered: Status | None = None  # the status the cause's heartbeat got
        self.unanswered_pushes: set[str] = set()  # pushed, no heartbeat of theirs answered since
        self.before = self.snapshot()
        for member_id in MEMBER_IDS[:founders]:
            self.join(member_id, capacity=None, full=True, lost=False)
            self.check()
        if settled:
            self.settle_for_real()

    # --- members -----------------------------------------------------------------

    def beat(self, member_id: str, choices: dict) -> None:
        member = self.world.members[member_id]
        if not member.active or member.silent:
            return
        draining = [] if member.slow_drainer else sorted(member.draining)
        finish = frozenset(draining[: round(len(draining) * choices["finish_share"])])
        self.cause = member_id
        self.answered = send_heartbeat(
            self.world, member, finish=finish, full=choices["full"], capacity=choices["capacity"],
            lost=choices["lost"], repeat_instance=choices["repeat_instance"]).status
        self.check()

    @rule(member_id=st.sampled_from(MEMBER_IDS), capacity=st.none() | st.integers(1, 4),
          full=st.booleans(), lost=st.booleans())
    def join(self, member_id, capacity, full, lost):
        member = self.world.members[member_id]
        if member.active:
            return
        member.active, member.silent = True, False
        member.drop_everything()
        self.cause = member_id
        self.answered = send_heartbeat(self.world, member, finish=frozenset(), full=full,
                                       capacity=capacity, lost=lost).status

    @rule(beats=st.lists(st.tuples(st.sampled_from(MEMBER_IDS), heartbeat_choices()),
                         min_size=1, max_size=8))
    def heartbeats(self, beats):
        for member_id, choices in beats:
            self.beat(member_id, choices)

    @rule(member_id=st.sampled_from(MEMBER_IDS))
    def leave(self, member_id):
        member = self.world.members[member_id]
        if not member.active or member.silent:
            return
        member.drop_everything()  # drains, then leaves; a lost answer changes nothing
        member.active = False
        self.cause = member_id
        response = self.world.group.heartbeat(
            m.Heartbeat(request_id=1, stream_prefix=PREFIX, consumer_group=GROUP,
                        member_id=member_id, member_epoch=LEAVE_EPOCH),
            self.world.now, routing_of(self.world.group, self.world.version))
        if response.status == Status.FENCED_INSTANCE_ID:  # S3: it had been replaced
            assert member_id in self.world.group.replaced
        else:
            assert response.status == Status.OK and response.member_epoch == LEAVE_EPOCH
        assert member_id not in self.world.group.members

    @rule(member_id=st.sampled_from(STATIC_IDS), repeat_instance=st.booleans())
    def temporary_leave(self, member_id, repeat_instance):
        """S2: a static process stops reading, drains, and leaves for a while."""
        member = self.world.members[member_id]
        if not member.active or member.silent:
            return
        group = self.world.group
        books = group.members.get(member_id)
        live = books is not None and not books.away
        epoch, targets = group.group_epoch, {mid: target_of(group, mid) for mid in group.members}
        member.drop_everything()
        member.active = False
        self.cause = member_id
        response = group.heartbeat(
            m.Heartbeat(request_id=1, stream_prefix=PREFIX, consumer_group=GROUP,
                        member_id=member_id, member_epoch=TEMPORARY_LEAVE_EPOCH, owned_shards=(),
                        instance_id=member.instance_id if repeat_instance else None),
            self.world.now, routing_of(group, self.world.version))
        event(f"temporary leave {response.status.value}")
        if response.status == Status.FENCED_INSTANCE_ID:
            assert member_id in group.replaced and member_id not in group.members
            return
        assert response.status == Status.OK and response.member_epoch == TEMPORARY_LEAVE_EPOCH
        if books is not None:
            assert group.members[member_id].away and not group.members[member_id].held
        if live:  # S2: no epoch growth, every target as it was
            assert group.group_epoch == epoch
            assert {mid: target_of(group, mid) for mid in group.members} == targets

    @rule(member_id=st.sampled_from(MEMBER_IDS))
    def crash_and_restart_process(self, member_id):
        member = self.world.members[member_id]
        if member.active:
            member.drop_everything()
            member.silent = False

    @rule(member_id=st.sampled_from(MEMBER_IDS), silent=st.booleans())
    def go_silent_or_resume(self, member_id, silent):
        self.world.members[member_id].silent = silent

    @rule(member_id=st.sampled_from(MEMBER_IDS), slow=st.booleans())
    def drains_slowly_or_not(self, member_id, slow):
        self.world.members[member_id].slow_drainer = slow

    # --- the world ------------------------------------------------------------------

    @rule(intervals=st.integers(1, 8), data=st.data())
    def time_passes(self, intervals, data):
        """Heartbeat intervals go by: every member that is not silent beats once in each."""
        world = self.world
        for _ in range(intervals):
            world.now += SETTINGS.heartbeat_interval_ms
            self_fence_expired_leases(world)
            world.group.tick(world.now)
            self.check()
            for member_id in MEMBER_IDS:
                self.beat(member_id, data.draw(heartbeat_choices()))

    @rule(elapsed=st.sampled_from([100, 1000, 6000, 11_000]))
    def clock_jumps_and_ticks(self, elapsed):
        self.world.now += elapsed
        self_fence_expired_leases(self.world)
        self.world.group.tick(self.world.now)

    @rule(member_id=st.sampled_from(MEMBER_IDS))
    def admin_removes(self, member_id):
        removed = self.world.group.remove_member(member_id, self.world.now)
        assert removed == (member_id in self.before["books"])

    @rule(instance_id=st.sampled_from(sorted(set(INSTANCES.values()))), graceful=st.booleans(),
          capacity=st.none() | st.integers(1, 4))
    def rolling_restart(self, instance_id, graceful, capacity):
        """One step of a rolling deploy: the running process of an instanceId leaves for a
        while (S2) or crashes (goes silent), and its successor joins at once (S3, or S4 while
        the crashed one is not AWAY yet)."""
        old, new = (mid for mid in STATIC_IDS if INSTANCES[mid] == instance_id)
        if self.world.members[new].active and not self.world.members[old].active:
            old, new = new, old
        if not self.world.members[old].active or self.world.members[new].active:
            return
        if graceful:
            self.temporary_leave(old, repeat_instance=False)
        else:
            self.world.members[old].silent = True
        self.check()
        self.join(new, capacity=capacity, full=True, lost=False)

    @rule(instance_id=st.sampled_from(sorted(set(INSTANCES.values()))))
    def admin_removes_instance(self, instance_id):
        """S5: removeMember by instanceId, AWAY members too."""
        holder = next((mid for mid in self.before["books"]
                       if self.world.group.members[mid].instance_id == instance_id), None)
        assert self.world.group.remove_instance(instance_id, self.world.now) == holder
        assert instance_id not in self.world.group.instances

    @rule(value=st.none() | st.integers(1, 4))
    def admin_sets_max_concurrency(self, value):
        self.world.group.set_max_concurrency(value)

    @rule(count=st.integers(0, 7), keep_old=st.booleans())
    def routing_changes(self, count, keep_old):
        group = self.world.group
        old_version = self.world.version
        self.world.version += 1
        new = shard_ids(self.world.version, count)
        old = tuple(s for s in group.shards if s.startswith(f"{PREFIX}:v{old_version}:"))
        group.set_shards(old + new if keep_old else new)

    @rule()
    def coordinator_restarts(self):
        world = self.world
        record = world.group.to_record()
        world.group = GroupMachine.from_record(PREFIX, GROUP, SETTINGS, record, world.group.shards,
                                                world.now)
        assert world.group.to_record() == record
        world.owner_tokens = dict(world.group.owners)
        world.restarted = True
        self.unanswered_pushes.clear()  # a restart's books push nobody until the next change
        self.before = self.snapshot()

    @rule()
    def settle_for_real(self):
        settle(self.world)
        self.unanswered_pushes.clear()  # every member's last heartbeat was answered
        self.before = self.snapshot()

    # --- invariants -------------------------------------------------------------------

    def snapshot(self) -> dict:
        group = self.world.group
        record = group.to_record()
        answers = {}
        for member_id, member in group.members.items():
            if member.away:  # no session to push to; its return gets its target at once (S3)
                continue
            target = record.members[member_id].target
            free_pending = frozenset(s for s in target - member.assigned if s not in group.owners)
            # H10 as we read it: the epoch alone is not a change in substance (README)
            answers[member_id] = (target, group.effective_max_concurrency(member), group.shards,
                                  free_pending)
        return {"record": record, "answers": answers, "books": set(group.members)}

    @invariant()
    def checks_after_every_step(self):
        self.check()

    def check(self) -> None:
        """Everything that must hold after any single event."""
        world, group = self.world, self.world.group
        effects = group.take_effects()
        after = self.snapshot()
        before, cause, answered = self.before, self.cause, self.answered
        self.cause, self.answered = None, None
        self.before = after
        react_to_removals(world, effects.events)

        # H12: whatever changed in the record asks the shell to write it first
        if after["record"] != before["record"]:
            assert effects.dirty
        keep_owner_tokens(world, effects.owner_changes)

        # H10: pushed when its next answer changed, unless a push since its last answered
        # heartbeat is still unanswered (the heartbeat it brings gets this change too); never
        # the member whose heartbeat caused it, and never twice before it heartbeats
        unanswered = self.unanswered_pushes
        if cause is not None and answered in ACCEPTED:
            unanswered.discard(cause)
        assert cause not in effects.pushes
        assert not effects.pushes & unanswered, (effects.pushes, unanswered)
        for member_id, answer in after["answers"].items():
            if member_id != cause and before["answers"].get(member_id, answer) != answer:
                assert member_id in effects.pushes | unanswered, \
                    (member_id, before["answers"][member_id], answer)
        unanswered |= effects.pushes
        unanswered &= set(group.members)

        # S3: a return (without a capacity change) pushes nobody and grows no epoch
        kinds = [e.kind for e in effects.events]
        if "returned" in kinds and "epoch" not in kinds:
            assert not effects.pushes and after["record"].group == before["record"].group

        # S1: one holder per instanceId, and the index agrees with the books
        assert group.instances == {mb.instance_id: mid for mid, mb in group.members.items()
                                   if mb.instance_id is not None}
        assert all(mb.instance_id is not None for mb in group.members.values() if mb.away)

        # H3 in the books
        seen: dict[str, str] = {}
        for member_id, member in group.members.items():
            assert not member.assigned & member.revoking
            assert not (member.away and member.held), f"AWAY {member_id} holds {member.held}"
            for shard in member.held:
                assert shard not in seen, f"{shard} in the books of {seen[shard]} and {member_id}"
                seen[shard] = member_id
        assert group.owners == seen
        # H2: the target is a balanced partition of the shards over the live members
        targets = {mid: target_of(group, mid) for mid in group.members}
        if targets:
            handed_out = [s for mine in targets.values() for s in mine]
            assert sorted(handed_out) == sorted(group.shards)
            counts = [len(mine) for mine in targets.values()]
            assert max(counts) - min(counts) <= 1
        assert (group.state == GroupState.EMPTY) == (not group.members)

        # H3 as the members see it
        read_by: dict[str, str] = {}
        for member_id, member in world.members.items():
            books = group.members.get(member_id)
            if books is None:
                assert not member.holding, f"{member_id} reads {member.holding} but is not live"
                continue
            assert member.holding <= books.held, (member_id, member.holding, books.held)
            for shard in member.holding:
                assert shard not in read_by, f"{shard} read by {read_by[shard]} and {member_id}"
                read_by[shard] = member_id
            member.undisturbed &= target_of(group, member_id)

    @invariant()
    def settles_from_here(self):
        world = pickle.loads(pickle.dumps(self.world))  # a deep copy, several times faster
        settle(world)
        group = world.group
        if not group.members:
            return
        assert group.state == GroupState.STABLE
        record = group.to_record()
        owned, waiting = set(), set()
        for member_id, member in group.members.items():
            target = set(record.members[member_id].target)
            if member.away:  # S2: its target waits for it, held by nobody
                assert not member.held and not world.members[member_id].holding
                assert not target & set(group.owners)
                waiting |= target
                continue
            assert member.assigned == target and not member.revoking
            assert world.members[member_id].reading == target
            owned |= target
        assert owned | waiting == set(group.shards) and not owned & waiting


GroupStateMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40,
                                               deadline=None)
test_group_state_machine = GroupStateMachine.TestCase
