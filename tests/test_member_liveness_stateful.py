"""Hypothesis state machine over the members' heartbeat, outage and rejoin logic (D1, D5, D6).

The pure parts are the real ones: two members' `Ledger`s with their `HeartbeatPacing`
(timeouts, reconnect delays, when the next heartbeat goes), and the coordinator's
`GroupMachine` with its `LeaseContinuity`. Around them this test plays what the shells
and the network do (member/shells/heartbeat.py `_run_session`, `_heartbeat_loop`, `watch_outage`;
actors/app.py's lease and tick loops), on one simulated clock, at the shipped timings
(heartbeat 3 s, lease 10 s, tick 1 s):

- the coordinator answers, is frozen (SIGSTOP: sessions stay open, heartbeats queue and
  are answered when it wakes; its lease key lapses after three ticks) or dead (SIGKILL:
  sessions break at once; restarted later from its records, every member a fresh lease);
- answers get lost, connects fail, a member's process is frozen (its clock jumps);
- members look at Redis (the lease key and the owner records the coordinator wrote) while
  their heartbeats fail, and run a handler on a shard only when their ledger admits it.

Checked after every step:
- D1/H3: no shard is admitted to both members at the same instant, and an admitted shard
  is, at that instant, the member's in the coordinator's books (or, while no coordinator
  runs, in the owner record the coordinator wrote);
- D6: no member is out of its group while the coordinator has answered it for longer than
  one lease TTL plus one heartbeat interval since the last fault played out (a lost answer
  given up on, a connect that failed, a member woken), and its D7 verdict says healthy;
- D5: a coordinator outage alone (no lost answers, connect failures or frozen members since
  the group was last stable) fences nobody.
"""

from __future__ import annotations

import attrs
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from rsc.actors.core.group import GroupMachine, GroupSettings
from rsc.actors.core.lease import LeaseContinuity, Renewal
from rsc.member.pure.ledger import Ledger, Verdict
from rsc.member.pure.outage import Observation
from rsc.member.pure.pacing import HeartbeatPacing
from rsc.member.pure.reconcile import Actions, EventName, SentHeartbeat
from rsc.protocol import messages as m
from rsc.protocol.vocabulary import GroupState

PREFIX, GROUP = "orders", "billing"
INTERVAL, LEASE, TICK = 3_000, 10_000, 1_000
COORDINATOR_LEASE = 3 * TICK
SETTINGS = GroupSettings(heartbeat_interval_ms=INTERVAL, lease_ttl_ms=LEASE,
                         revoke_timeout_ms=60_000)
SHARDS = tuple(f"{{{PREFIX}:v1:{index}}}" for index in range(4))
ROUTING = m.RoutingSummary(version=1, shard_count=len(SHARDS))
STEP = 100  # ms of simulated time per step
REQUEST_TIMEOUT_S = 10.0  # MemberConfig's default


class Coordinator:
    """The coordinator process as members and Redis see it."""

    def __init__(self) -> None:
        self.machine = GroupMachine(PREFIX, GROUP, SETTINGS, SHARDS)
        self.state = "up"  # up | frozen | dead
        self.continuity = LeaseContinuity(lease_ms=COORDINATOR_LEASE, confirmed_at=0)
        self.key_until = COORDINATOR_LEASE  # its lease key lapses then unless renewed
        self.next_tick = TICK
        self.owner_records: dict[str, str] = {}  # what Redis holds: the ack check's records
        self.incarnation = 0  # sessions of a dead process are gone
        self.frozen_queue: list[tuple[Member, m.Heartbeat, SentHeartbeat]] = []
        self.up_since = 0

    def key_absent(self, now: int) -> bool:
        return now >= self.key_until

    def answer(self, now: int, request: m.Heartbeat) -> m.HeartbeatResponse:
        """One heartbeat, with what the shell does around the machine: owner records first."""
        response = self.machine.heartbeat(request, now, ROUTING)
        self.commit()
        return response

    def commit(self) -> set[str]:
        effects = self.machine.take_effects()
        for shard, owner in effects.owner_changes.items():
            if owner is None:
                self.owner_records.pop(shard, None)
            else:
                self.owner_records[shard] = owner
        return effects.pushes

    def run_until(self, now: int) -> set[str]:
        """Lease renewals and ticks up to `now` (only while up); the members pushed."""
        pushed: set[str] = set()
        if self.state == "up" and self.next_tick < now - TICK:  # woken: one tick now, no catch-up
            self.next_tick = now
        while self.state == "up" and self.next_tick <= now:
            at = self.next_tick
            self.next_tick += TICK
            outcome = Renewal.RENEWED if not self.key_absent(at) else Renewal.LAPSED
            self.continuity.renewal(at, outcome)
            self.key_until = at + COORDINATOR_LEASE
            if self.continuity.broken is not None:  # lapsed while frozen: take it back (D5)
                self.continuity.resume(at, LEASE)
            if self.continuity.expiry_allowed(at):
                self.machine.tick(at)
                pushed |= self.commit()
        return pushed


@attrs.define(eq=False)
class Member:
    """One member process: its ledger and pacing, and what its shells are doing."""

    member_id: str
    ledger: Ledger
    pacing: HeartbeatPacing
    session: int | None = None  # the coordinator incarnation it is connected to
    connect_until: int | None = None  # a connect in progress gives up then
    next_attempt: int = 0
    awaiting: SentHeartbeat | None = None
    answer_by: int = 0
    next_beat: int = 0
    due: bool = True
    frozen_until: int = 0
    lose_answers: int = 0
    lost: SentHeartbeat | None = None  # the heartbeat whose answer a fault lost
    fail_connects: int = 0
    handled: int = 0
    fenced: int = 0

    def apply(self, actions: Actions) -> None:
        if actions.heartbeat_now:
            self.due = True
        self.fenced += sum(1 for event in actions.events if event.name is EventName.FENCED)


def make_member(member_id: str) -> Member:
    ledger = Ledger(member_id, capacity=2, default_heartbeat_interval_ms=INTERVAL, now=0)
    pacing = HeartbeatPacing(default_interval_ms=INTERVAL, jitter=0.2, join_retry_initial_s=0.5,
                             join_retry_max_s=15.0, draw=lambda: 0.5)
    return Member(member_id, ledger, pacing)


class LivenessMachine(RuleBasedStateMachine):
    """See the module docstring."""

    @initialize()
    def start(self) -> None:
        self.now = 0
        self.coordinator = Coordinator()
        self.members = [make_member("a"), make_member("b")]
        self.faulted_at = -10**9  # the last lost answer, connect failure or member freeze
        self.settled = False  # stable, every member in, and no member fault since (D5's check)
        self.outage_ended_at = 0
        self.fences_when_settled: list[int] = []
        self.advance(30_000)  # joined, assigned, stable
        assert all(member.ledger.in_group for member in self.members)

    # --- the world ---------------------------------------------------------------------

    @rule(seconds=st.integers(1, 90))
    def wait(self, seconds: int) -> None:
        self.advance(seconds * 1000)

    def outage_starts(self) -> None:
        """An outage before every member had a heartbeat accepted since the last one ended is
        one long outage with renewals of the lease key in it: D5's promise is for an outage
        of any length, not for outages a heartbeat apart, so D5's check waits for a settle."""
        if any((member.ledger.state.last_accepted_sent_at or -1) < self.outage_ended_at
               for member in self.members):
            self.settled = False

    @rule(seconds=st.integers(1, 75))
    def freeze_coordinator(self, seconds: int) -> None:
        coordinator = self.coordinator
        if coordinator.state != "up":
            return
        self.outage_starts()
        coordinator.state = "frozen"
        self.advance(seconds * 1000)
        self.wake_coordinator()

    @rule(seconds=st.integers(0, 75))
    def kill_and_restart_coordinator(self, seconds: int) -> None:
        coordinator = self.coordinator
        if coordinator.state != "up":
            return
        self.outage_starts()
        coordinator.state = "dead"
        coordinator.incarnation += 1
        coordinator.frozen_queue.clear()
        for member in self.members:  # a dead process's sessions break at once (RST)
            if member.session is not None and self.now >= member.frozen_until:
                self.session_failed(member)
        self.advance(seconds * 1000)
        # restarted: everything from its records, a fresh lease for every member (H12)
        coordinator.machine = GroupMachine.from_record(
            PREFIX, GROUP, SETTINGS, coordinator.machine.to_record(), SHARDS, self.now)
        coordinator.continuity = LeaseContinuity(lease_ms=COORDINATOR_LEASE, confirmed_at=self.now)
        coordinator.key_until = self.now + COORDINATOR_LEASE
        coordinator.next_tick = self.now + TICK
        coordinator.state, coordinator.up_since = "up", self.now
        self.outage_ended_at = self.now

    @rule(index=st.integers(0, 1), count=st.integers(1, 3))
    def lose_answers(self, index: int, count: int) -> None:
        self.members[index].lose_answers += count
        self.fault()

    @rule(index=st.integers(0, 1), count=st.integers(1, 4))
    def fail_connects(self, index: int, count: int) -> None:
        self.members[index].fail_connects += count
        self.fault()

    @rule(index=st.integers(0, 1), seconds=st.integers(1, 40))
    def freeze_member(self, index: int, seconds: int) -> None:
        member = self.members[index]
        member.frozen_until = max(member.frozen_until, self.now + seconds * 1000)
        self.fault()

    def recovered(self, member: Member) -> bool:
        """In its group, with a heartbeat accepted since the last fault and none left to play."""
        accepted = member.ledger.state.last_accepted_sent_at
        return (member.ledger.in_group and self.now >= member.frozen_until
                and member.lose_answers == 0 and member.fail_connects == 0
                and accepted is not None and accepted > self.faulted_at)

    def fault(self) -> None:
        self.faulted_at = self.now
        self.settled = False

    # --- simulation --------------------------------------------------------------------

    def advance(self, ms: int) -> None:
        end = self.now + ms
        while self.now < end:
            self.now += STEP
            self.step()

    def wake_coordinator(self) -> None:
        coordinator = self.coordinator
        coordinator.state, coordinator.up_since = "up", self.now
        self.outage_ended_at = self.now
        self.run_coordinator()
        queued, coordinator.frozen_queue = coordinator.frozen_queue, []
        for member, request, sent in queued:  # heartbeats that waited on open sessions
            if member.awaiting is sent and member.session == coordinator.incarnation:
                self.deliver(member, sent, coordinator.answer(self.now, request))

    def run_coordinator(self) -> None:
        for member_id in self.coordinator.run_until(self.now):
            self.push(member_id)

    def push(self, member_id: str) -> None:
        for member in self.members:
            if member.member_id == member_id and member.session is not None:
                member.due = True

    def step(self) -> None:
        self.run_coordinator()
        for member in self.members:
            if self.now >= member.frozen_until:
                self.run_member(member)
        self.check_admissions()
        if not self.settled and self.coordinator.state == "up" and all(
                self.recovered(member) for member in self.members) \
                and self.coordinator.machine.state == GroupState.STABLE:
            self.settled = True
            self.fences_when_settled = [member.fenced for member in self.members]

    def run_member(self, member: Member) -> None:
        now, coordinator, ledger, pacing = self.now, self.coordinator, member.ledger, member.pacing
        self.look(member)
        if member.session is None:
            if member.connect_until is None and now >= member.next_attempt:
                member.connect_until = now + int(pacing.connect_timeout_s(ledger) * 1000)
            if member.connect_until is not None:
                if coordinator.state == "up" and member.fail_connects == 0:
                    member.session, member.connect_until = coordinator.incarnation, None
                    pacing.session_opened()
                    ledger.on_session_lost()
                    member.due = True
                elif coordinator.state == "dead" or now >= member.connect_until:
                    if member.fail_connects and coordinator.state == "up":
                        self.faulted_at = now  # D6 counts from when a fault played out
                    member.fail_connects = max(0, member.fail_connects - 1)
                    member.connect_until = None
                    self.session_failed(member)
            return
        if member.awaiting is not None:
            if now >= member.answer_by:  # given up on: the session goes (D5: it failed)
                if member.awaiting is member.lost:
                    self.faulted_at = now  # D6 counts from when a fault played out
                self.session_failed(member)
            return
        if member.due or now >= member.next_beat:
            member.due = False
            request, sent, actions = ledger.heartbeat(
                now, capacity=2, stream_prefix=PREFIX, consumer_group=GROUP)
            member.apply(actions)
            member.awaiting = sent
            member.answer_by = now + int(pacing.answer_timeout_s(ledger, REQUEST_TIMEOUT_S) * 1000)
            if coordinator.state == "frozen":
                coordinator.frozen_queue.append((member, request, sent))
            elif member.lose_answers:
                member.lose_answers -= 1
                member.lost = sent
                coordinator.answer(now, request)  # the coordinator took it; the answer is lost
            else:
                self.deliver(member, sent, coordinator.answer(now, request))

    def deliver(self, member: Member, sent: SentHeartbeat, response: m.HeartbeatResponse) -> None:
        ledger = member.ledger
        member.awaiting = None
        member.apply(ledger.on_response(sent, response, self.now))
        beat = member.pacing.next_beat(ledger, self.now)
        member.next_beat = self.now + int(beat.wait_ms)
        for member_id in self.coordinator.commit():
            self.push(member_id)

    def session_failed(self, member: Member) -> None:
        member.session, member.awaiting = None, None
        member.ledger.on_session_failed()
        member.apply(member.ledger.check_lease(self.now))
        member.next_attempt = self.now + int(member.pacing.reconnect_delay_s(member.ledger) * 1000)

    def look(self, member: Member) -> None:
        """D5's watcher: the lease key and the owner records, when a look is due."""
        ledger = member.ledger
        if not ledger.observation_due(self.now):
            return
        shards = ledger.observed_shards()
        records = self.coordinator.owner_records
        member.apply(ledger.on_observation(Observation(
            sent_at=self.now, key_absent=self.coordinator.key_absent(self.now),
            owners={shard: records.get(shard) for shard in shards})))

    def check_admissions(self) -> None:
        """Every member runs a handler on every shard its ledger admits now (D1, D5)."""
        admitted: dict[str, str] = {}
        for member in self.members:
            if self.now < member.frozen_until:
                continue  # a frozen process runs nothing
            ledger = member.ledger
            for shard in sorted(ledger.state.reading()):
                verdict, actions = ledger.start_handler(shard, ledger.generation(shard), self.now)
                member.apply(actions)
                if verdict is not Verdict.ALLOWED:
                    continue
                ledger.finished(shard)
                member.handled += 1
                assert shard not in admitted, f"H3: {shard} admitted to {admitted[shard]} and " \
                                              f"{member.member_id} at {self.now}"
                admitted[shard] = member.member_id
                self.assert_owner(member, shard)

    def assert_owner(self, member: Member, shard: str) -> None:
        coordinator = self.coordinator
        if coordinator.state == "up":
            books = coordinator.machine.owners.get(shard)
            assert books == member.member_id, \
                f"D1: {member.member_id} ran {shard} at {self.now}, the books say {books}"
        else:
            record = coordinator.owner_records.get(shard)
            assert record == member.member_id, \
                f"D5: {member.member_id} ran {shard} at {self.now}, the owner record says {record}"

    # --- invariants ---------------------------------------------------------------------

    @invariant()
    def d6_members_answered_by_their_coordinator_are_in_their_group(self) -> None:
        if not hasattr(self, "coordinator"):
            return
        coordinator = self.coordinator
        if coordinator.state != "up":
            return
        since = max(coordinator.up_since, self.faulted_at)
        for member in self.members:
            quiet_since = max(since, member.frozen_until)
            if self.now - quiet_since > LEASE + INTERVAL:
                assert member.ledger.in_group, f"D6: {member.member_id} out at {self.now}"
            if self.now >= member.frozen_until:  # a frozen process answers no probe
                verdict = member.ledger.health_verdict(self.now)
                assert verdict.healthy, verdict.reason

    @invariant()
    def d5_a_coordinator_outage_alone_fences_nobody(self) -> None:
        if getattr(self, "settled", False):
            assert [member.fenced for member in self.members] == self.fences_when_settled, \
                f"D5: a member fenced at {self.now} with only coordinator outages since it settled"


LivenessMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=15,
                                             deadline=None)
test_member_liveness = LivenessMachine.TestCase
