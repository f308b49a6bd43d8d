"""Stateful property test of the prefix machine: random joins, leaves, reports, reshards, drains,
deletes, failed writes and restarts, with the invariants of R1..R5, G1 and H12 checked after
every step. Pure: the shell is tests/prefix_driver.py, the Redis hash a dict.
"""

from __future__ import annotations

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from rsc.actors.core.records import replay
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import JOIN_EPOCH, LEAVE_EPOCH, Cutover, MigrationState
from tests.prefix_driver import Batch, Driver, delete_group, heartbeat, set_shards

GROUPS = ("billing", "audit")
MEMBERS = ("a", "b", "c")


class PrefixStateMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.driver = Driver()
        self.sealed: set[str] = set()  # streams a durable checkpoint sealed
        self.retired: set[str] = set()

    # --- the shell's view of each batch ------------------------------------------------

    def run(self, batch: Batch, durable: bool) -> None:
        machine = self.driver.machine
        checkpoint = batch.checkpoint
        if checkpoint.retire is not None:
            held = {s for group in machine.groups.values() for s in group.owners}
            assert not set(checkpoint.retire.streams) & held, "retired while held"
            assert not set(checkpoint.retire.streams) & set(machine.live_streams())
        if durable:
            self.sealed |= set(checkpoint.seal)
            if checkpoint.retire is not None:
                self.retired |= set(checkpoint.retire.streams)
                event("old streams retired")
            if checkpoint.seal:
                event("a version sealed")
            migration = self.driver.machine.migration
            if migration is not None and migration.state == MigrationState.COMPLETE:
                event("a migration complete")
            if checkpoint.cleanup is not None:
                event("a group deleted")

    # --- rules -------------------------------------------------------------------------

    @rule(member=st.sampled_from(MEMBERS), group=st.sampled_from(GROUPS), durable=st.booleans())
    def join(self, member: str, group: str, durable: bool) -> None:
        batch = self.driver.batch([heartbeat(member, JOIN_EPOCH, owned=(), group=group)],
                                  durable=durable)
        self.run(batch, durable)

    @rule(member=st.sampled_from(MEMBERS), group=st.sampled_from(GROUPS), durable=st.booleans())
    def leave(self, member: str, group: str, durable: bool) -> None:
        batch = self.driver.batch([heartbeat(member, LEAVE_EPOCH, group=group)], durable=durable)
        assert batch.responses[0].status in (Status.OK, Status.COORDINATOR_NOT_AVAILABLE)
        self.run(batch, durable)

    @rule(group=st.sampled_from(GROUPS), durable=st.booleans())
    def report_all(self, group: str, durable: bool) -> None:
        machine = self.driver.machine.groups.get(group)
        for member_id in sorted(machine.members) if machine else ():
            if member_id in self.driver.machine.groups[group].members:
                member = self.driver.machine.groups[group].members[member_id]
                batch = self.driver.batch([heartbeat(
                    member_id, member.member_epoch, owned=sorted(member.held - member.revoking),
                    revoked=sorted(member.revoking), group=group)], durable=durable)
                self.run(batch, durable)

    @rule(count=st.integers(1, 4), cutover=st.sampled_from(Cutover), durable=st.booleans(),
          named=st.booleans())
    def reshard(self, count: int, cutover: Cutover, durable: bool, named: bool) -> None:
        machine = self.driver.machine
        before = machine.migration
        batch = self.driver.batch([set_shards(count, group=GROUPS[0] if named else None,
                                              cutover=cutover)], durable=durable)
        status = batch.responses[0].status
        if before is not None and before.state == MigrationState.DRAINING:
            assert status in (Status.MIGRATION_IN_PROGRESS, Status.OK, Status.UNKNOWN_GROUP,
                              Status.COORDINATOR_NOT_AVAILABLE)
            if status == Status.OK:  # only the same count is OK while draining (R4)
                assert machine.routing is not None and machine.routing.shard_count == count
        self.run(batch, durable)

    @rule(data=st.data(), durable=st.booleans())
    def tick_and_drain(self, data: st.DataObject, durable: bool) -> None:
        migration = self.driver.machine.migration
        remaining = list(migration.remaining) if migration else []
        drained = data.draw(st.lists(st.sampled_from(remaining), unique=True)) if remaining else []
        self.run(self.driver.tick(drained=drained, durable=durable), durable)

    @rule(group=st.sampled_from(GROUPS), durable=st.booleans())
    def delete(self, group: str, durable: bool) -> None:
        machine = self.driver.machine.groups.get(group)
        batch = self.driver.batch([delete_group(group)], durable=durable)
        status = batch.responses[0].status
        if machine is not None and machine.members:
            assert status == Status.GROUP_NOT_EMPTY
        if durable and status == Status.OK:
            assert group not in self.driver.machine.groups
        self.run(batch, durable)

    @rule()
    def drain_everything_and_settle(self) -> None:
        """Every old shard drains and every member reports until the groups are stable."""
        migration = self.driver.machine.migration
        self.run(self.driver.tick(drained=migration.remaining if migration else ()), True)
        for _ in range(4):
            for group in GROUPS:
                self.report_all(group, True)
            self.run(self.driver.tick(drained=()), True)

    @rule()
    def restart(self) -> None:
        before = self.driver.machine
        restored = self.driver.replayed()
        assert restored.persisted == before.persisted
        for name, group in before.persisted.groups.items():
            assert restored.groups[name].to_record() == group
        self.driver.machine = restored

    # --- invariants --------------------------------------------------------------------

    @invariant()
    def persisted_copy_is_the_replayed_hash(self) -> None:
        assert replay(self.driver.hash) == self.driver.machine.persisted

    @invariant()
    def undrained_old_shards_stay_assignable(self) -> None:  # R2, R5
        machine = self.driver.machine
        migration = machine.migration
        if migration is None:
            return
        assignable = set(machine.assignable_shards())
        assert set(migration.remaining) <= assignable
        if migration.cutover == Cutover.ORDERED and migration.remaining:
            assert machine.routing is not None and not set(machine.routing.streams) & assignable
        for group in machine.groups.values():
            assert set(migration.remaining) <= set(group.shards)

    @invariant()
    def the_persisted_old_version_is_sealed_and_nothing_live_is_retired(self) -> None:  # R1
        persisted = self.driver.machine.persisted
        if persisted.migration is not None:
            assert set(persisted.migration.from_streams) <= self.sealed
        assert not self.retired & set(self.driver.machine.live_streams())

    @invariant()
    def one_owner_per_shard(self) -> None:  # H3 within each group
        for group in self.driver.machine.groups.values():
            held: dict[str, str] = {}
            for member_id, member in group.members.items():
                for shard in member.held:
                    assert shard not in held, (shard, held[shard], member_id)
                    held[shard] = member_id


PrefixStateMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40,
                                                deadline=None)
TestPrefixStateMachine = PrefixStateMachine.TestCase
