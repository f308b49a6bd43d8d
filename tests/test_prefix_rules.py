"""Pure tests of the prefix machine: one named test (or more) per rule R1..R5, H12, H13.

Like tests/test_group_rules.py: the machine is driven synchronously (tests/prefix_driver.py
plays the shell: handle a batch, write the checkpoint into a dict standing in for the
Redis hash, report the outcome, resolve the answers). No Redis, no trio.
"""

from __future__ import annotations

from rsc.actors.core.prefix import (
    CreateConsumerGroups,
    DestroyConsumerGroups,
    MoveOffsets,
    RetireStreams,
)
from rsc.actors.core.records import PrefixSnapshot, replay
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import JOIN_EPOCH, LEAVE_EPOCH, Cutover, MigrationState
from tests.prefix_driver import (
    GROUP,
    PREFIX,
    Driver,
    delete_group,
    describe,
    get_routing,
    heartbeat,
    ok,
    reset_offsets,
    set_shards,
    streams,
)

V1, V2, V3 = streams(1, 2), streams(2, 3), streams(3, 1)


def resharded(members: tuple[str, ...] = ("a",), cutover: Cutover = Cutover.PARALLEL) -> Driver:
    """v1 with 2 shards held by settled members, then a reshard to 3 shards (v2) started."""
    driver = Driver()
    ok(driver.one(set_shards(2)))
    for member_id in members:
        driver.join(member_id)
    driver.settle()
    ok(driver.one(set_shards(3, cutover=cutover)))
    return driver


def drain_all(driver: Driver, shards: tuple[str, ...]) -> None:
    driver.tick(drained=shards)
    driver.settle()


# --- R1 ------------------------------------------------------------------------------


def test_r1_first_count_creates_version_1_streams_with_every_group_and_routing():
    driver = Driver()
    batch = driver.batch([set_shards(2)])
    changed = ok(batch.responses[0])
    assert isinstance(changed, m.ShardCountChanged)
    assert changed.routing is not None and changed.routing.streams == V1
    assert changed.routing.version == 1 and changed.migration is None
    assert batch.checkpoint.create == (CreateConsumerGroups(V1, (GROUP,)),)
    assert batch.checkpoint.seal == ()
    assert batch.checkpoint.changes.routing is not None
    assert batch.committed is not None and batch.committed.routing is not None
    assert batch.committed.routing.streams == V1


def test_r1_new_count_creates_v2_for_every_group_seals_v1_and_bumps_group_epochs():
    driver = Driver()
    ok(driver.one(set_shards(2)))
    driver.join("a", group="audit")
    epochs = {name: group.group_epoch for name, group in driver.machine.groups.items()}
    batch = driver.batch([set_shards(3)])
    changed = ok(batch.responses[0])
    assert isinstance(changed, m.ShardCountChanged) and changed.routing is not None
    assert changed.routing.version == 2 and changed.routing.streams == V2
    assert changed.migration is not None and changed.migration.state == MigrationState.DRAINING
    assert (changed.migration.from_version, changed.migration.to_version) == (1, 2)
    # new streams exist and v1 is sealed in the same checkpoint that switches routing
    assert batch.checkpoint.create == (CreateConsumerGroups(V2, (GROUP, "audit")),)
    assert batch.checkpoint.seal == V1
    assert batch.checkpoint.changes.routing_changed and batch.checkpoint.changes.migration_changed
    assert all(group.group_epoch > epochs[name] for name, group in driver.machine.groups.items())
    assert batch.committed is not None and batch.committed.routing is not None
    assert batch.committed.routing.version == 2
    assert [push.member_id for push in batch.committed.pushes] == ["a"]


# --- R2 ------------------------------------------------------------------------------


def test_r2_old_shards_stay_assigned_until_drained_then_leave_by_revoke():
    driver = resharded()
    assert set(V1) <= set(driver.machine.assignable_shards())
    batch = driver.tick(drained=())
    assert batch.checkpoint.retire is None
    driver.settle()
    assert set(V1) <= driver.held()  # nothing drained yet: a keeps reading v1
    driver.tick(drained=V1[:1])
    assert V1[0] not in driver.machine.assignable_shards()
    first = driver.report("a")
    assert first.status == Status.REVOKE_PENDING  # it leaves through the normal revoke path
    assert first.assignment is not None and V1[0] not in first.assignment.assigned_shards
    driver.settle()
    assert V1[0] not in driver.held() and V1[1] in driver.held()
    migration = driver.machine.migration
    assert migration is not None and migration.state == MigrationState.DRAINING
    assert migration.remaining == V1[1:]


def test_r2_all_drained_is_complete_and_retired_once_nobody_holds_them():
    driver = resharded()
    driver.tick(drained=V1)
    migration = driver.machine.migration
    assert migration is not None and migration.state == MigrationState.COMPLETE
    assert driver.tick().checkpoint.retire is None  # a still holds v1 shards (revoking)
    driver.settle()
    batch = driver.tick()
    assert batch.checkpoint.retire == RetireStreams(V1, (GROUP,))
    assert batch.checkpoint.changes.migration_changed and driver.machine.migration is None
    assert batch.committed is not None
    assert [e.kind for e in batch.committed.prefix_events] == ["migration.retired"]


def test_r2_streams_are_retired_only_once_their_drain_is_durable():
    driver = Driver()
    ok(driver.one(set_shards(2)))
    ok(driver.one(set_shards(3)))
    failed = driver.tick(drained=V1, durable=False)  # complete, retirable, but not in Redis
    assert failed.checkpoint.retire is None
    migration = driver.machine.migration
    assert migration is not None and migration.state == MigrationState.DRAINING
    driver.tick(drained=V1)
    assert driver.tick().checkpoint.retire == RetireStreams(V1, (GROUP,))


def held_by_anyone(driver: Driver) -> set[str]:
    return {s for group in driver.machine.groups.values() for s in group.owners}


def test_r2_complete_migration_streams_are_not_retired_while_held_after_a_restart():
    driver = Driver()
    ok(driver.one(set_shards(2, group=None)))
    driver.join("c")
    ok(driver.one(set_shards(1, group=None)))
    driver.tick(drained=V1)  # COMPLETE and durable, but c still holds both v1 shards
    assert set(V1) <= driver.held()
    driver.machine = driver.replayed()  # a restart checks retirement with its first batch
    # c rejoins (H1: it dropped what it held), but that release does not land: memory rolls
    # back to what Redis holds, where c still holds v1, so its streams must not be deleted
    failed = driver.batch([heartbeat("c", JOIN_EPOCH, owned=())], durable=False)
    assert failed.responses[0].status == Status.COORDINATOR_NOT_AVAILABLE
    assert failed.checkpoint.retire is None
    assert set(V1) <= held_by_anyone(driver)
    migration = driver.machine.migration
    assert migration is not None and migration.state == MigrationState.COMPLETE
    # once the release is durable, the next check retires them
    ok(driver.batch([heartbeat("c", JOIN_EPOCH, owned=())]).responses[0])
    assert not set(V1) & held_by_anyone(driver)
    retired = driver.tick()
    assert retired.checkpoint.retire == RetireStreams(V1, (GROUP,))
    assert driver.machine.migration is None


def test_r2_a_release_whose_write_fails_retires_nothing_in_a_tick():
    driver = Driver()
    ok(driver.one(set_shards(2)))
    driver.join("c")
    ok(driver.one(set_shards(1)))
    driver.tick(drained=V1)
    failed = driver.batch([heartbeat("c", JOIN_EPOCH, owned=())], tick=True, drained=(),
                          durable=False)
    assert failed.checkpoint.retire is None
    assert set(V1) <= held_by_anyone(driver)


def test_r2_drain_query_names_the_remaining_old_shards_and_every_group():
    driver = resharded()
    driver.join("b", group="audit")
    driver.tick(drained=V1[:1])
    driver.machine.tick(driver.now)
    query = driver.machine.drain_query()
    assert query is not None
    assert query.streams == V1[1:] and set(query.groups) == {GROUP, "audit"}
    assert driver.machine.drain_query() is None  # one measurement per tick


def test_r2_keep_drained_streams_ends_the_migration_without_deleting():
    driver = Driver(keep_drained_streams=True)
    ok(driver.one(set_shards(2)))
    ok(driver.one(set_shards(3)))
    driver.tick(drained=V1)
    batch = driver.tick()
    assert driver.machine.migration is None and batch.checkpoint.retire is None


# --- R3 ------------------------------------------------------------------------------


def test_r3_parallel_cutover_assigns_the_new_shards_at_once():
    driver = resharded(cutover=Cutover.PARALLEL)
    driver.settle()
    assert set(V1) | set(V2) == driver.held()


def test_r3_ordered_cutover_assigns_new_shards_only_after_every_old_one_drained():
    driver = resharded(cutover=Cutover.ORDERED)
    driver.settle()
    assert driver.held() == set(V1)
    driver.tick(drained=V1[:1])
    driver.settle()
    assert driver.held() == set(V1[1:])  # one still draining: still nothing of v2
    driver.tick(drained=V1[1:])
    driver.settle()
    assert driver.held() == set(V2)


# --- R4 ------------------------------------------------------------------------------


def test_r4_second_set_shard_count_while_draining_is_migration_in_progress_and_changes_nothing():
    driver = resharded()
    before = (driver.machine.routing, driver.machine.migration, dict(driver.hash))
    batch = driver.batch([set_shards(5)])
    refused = batch.responses[0]
    assert refused.status == Status.MIGRATION_IN_PROGRESS
    assert isinstance(refused, m.ShardCountChanged) and refused.routing is None
    assert "COMPLETE" in (refused.error or "")
    assert batch.checkpoint.empty
    assert (driver.machine.routing, driver.machine.migration, driver.hash) == before


def test_r4_same_count_as_now_is_ok_and_changes_nothing():
    driver = resharded()
    before = dict(driver.hash)
    batch = driver.batch([set_shards(3)])
    same = ok(batch.responses[0])
    assert isinstance(same, m.ShardCountChanged) and same.routing is not None
    assert same.routing.version == 2
    assert batch.checkpoint.empty and driver.hash == before


def test_r4_once_complete_the_next_set_shard_count_is_accepted():
    driver = resharded()
    driver.tick(drained=V1)  # COMPLETE, and a still holds its v1 shards: not retired yet
    shown = ok(driver.one(describe()))
    assert isinstance(shown, m.GroupDescription) and shown.migration is not None
    assert shown.migration.state == MigrationState.COMPLETE
    batch = driver.batch([set_shards(1)])
    changed = ok(batch.responses[0])
    assert isinstance(changed, m.ShardCountChanged) and changed.routing is not None
    assert changed.routing.version == 3 and changed.routing.streams == V3
    migration = driver.machine.migration
    assert migration is not None and (migration.from_version, migration.to_version) == (2, 3)
    assert migration.retiring == V1  # v1 still gets deleted, once released
    assert batch.checkpoint.seal == V2
    driver.settle()
    retired = driver.tick().checkpoint.retire
    assert retired == RetireStreams(V1, (GROUP,))
    assert driver.machine.migration is not None and driver.machine.migration.retiring == ()


# --- R5 ------------------------------------------------------------------------------


def test_r5_nothing_of_a_sealed_version_leaves_the_assignment_before_it_is_drained():
    driver = resharded(members=("a", "b"))
    for step in range(4):  # ticks, rebalances and members coming and going: no drain yet
        driver.tick(drained=())
        if step == 1:
            driver.join("c")
        if step == 2:
            driver.one(heartbeat("b", LEAVE_EPOCH))
        driver.settle()
        assert set(V1) <= set(driver.machine.assignable_shards())
        assert set(V1) <= driver.held()


def test_r5_a_group_that_appears_mid_migration_gets_consumer_groups_on_undrained_old_shards():
    driver = resharded()
    driver.tick(drained=V1[:1])
    batch = driver.batch([heartbeat("x", JOIN_EPOCH, owned=(), group="late")])
    assert batch.checkpoint.create == (CreateConsumerGroups(V1[1:] + V2, ("late",)),)
    assert set(driver.machine.groups["late"].shards) == set(V1[1:]) | set(V2)


def test_r5_a_drain_report_for_a_stream_of_no_migration_changes_nothing():
    driver = resharded()
    driver.machine.drained({"{orders:v9:0}", *V2})
    migration = driver.machine.migration
    assert migration is not None and migration.drained == frozenset()


# --- H12 -----------------------------------------------------------------------------


def test_h12_failed_write_answers_coordinator_not_available_and_rolls_back():
    driver = resharded()
    driver.settle()
    before = driver.machine.persisted
    hash_before = dict(driver.hash)
    batch = driver.batch([heartbeat("b", JOIN_EPOCH, owned=()), set_shards(9)], durable=False)
    join, ignored = batch.responses
    assert join.status == Status.COORDINATOR_NOT_AVAILABLE
    assert isinstance(join, m.HeartbeatResponse) and join.member_id == "b"
    assert join.assignment is None and join.member_epoch is None
    assert ignored.status == Status.MIGRATION_IN_PROGRESS  # an error reveals nothing: kept
    assert batch.committed is None  # nothing pushed
    assert set(driver.machine.groups) == {GROUP}
    assert "b" not in driver.machine.groups[GROUP].members
    assert driver.machine.persisted == before and driver.hash == hash_before


def test_h12_failed_write_of_a_reshard_keeps_the_old_routing():
    driver = Driver()
    ok(driver.one(set_shards(2)))
    refused = driver.one(set_shards(3), durable=False)
    assert refused.status == Status.COORDINATOR_NOT_AVAILABLE
    assert isinstance(refused, m.ShardCountChanged) and refused.routing is None
    assert driver.machine.routing is not None and driver.machine.routing.version == 1
    assert driver.machine.migration is None
    routing = ok(driver.one(get_routing()))
    assert isinstance(routing, m.Routing) and routing.version == 1


def test_r1_a_failed_reshard_unseals_the_version_that_stays_current():
    driver = Driver()
    ok(driver.one(set_shards(2)))
    failed = driver.batch([set_shards(3)], durable=False)
    assert failed.checkpoint.seal == V1  # it may have landed before the hash write failed
    assert driver.tick().checkpoint.unseal == V1
    assert driver.tick().checkpoint.unseal == ()
    again = driver.batch([set_shards(3)], durable=False)
    retried = driver.batch([set_shards(3)])  # the operator retries: sealed again, not unsealed
    assert again.checkpoint.seal == retried.checkpoint.seal == V1
    assert retried.checkpoint.unseal == ()


def test_h12_routing_and_description_after_a_failed_write_show_only_what_is_durable():
    driver = Driver()
    routing = driver.batch([set_shards(2), get_routing(), describe()], durable=False).responses
    assert [r.status for r in routing] == [Status.COORDINATOR_NOT_AVAILABLE,
                                           Status.UNKNOWN_STREAM, Status.UNKNOWN_GROUP]


def test_h12_a_steady_heartbeat_writes_nothing():
    driver = resharded()
    driver.settle()
    member = driver.machine.groups[GROUP].members["a"]
    batch = driver.batch([heartbeat("a", member.member_epoch)])
    assert ok(batch.responses[0]) and batch.checkpoint.empty


def test_h12_one_checkpoint_per_batch_holds_every_change_of_the_batch():
    driver = Driver()
    ok(driver.one(set_shards(4)))
    driver.join("a")
    driver.settle()
    epoch = driver.machine.groups[GROUP].group_epoch
    batch = driver.batch([heartbeat("d", JOIN_EPOCH, owned=()), heartbeat("e", JOIN_EPOCH, owned=())])
    assert [r.status for r in batch.responses] == [Status.OK, Status.OK]
    assert {(GROUP, "d"), (GROUP, "e")} <= set(batch.checkpoint.changes.members)
    group = batch.checkpoint.changes.groups[GROUP]
    assert group is not None and group.group_epoch == epoch + 2


def test_h12_restart_from_the_replayed_hash_equals_the_state_before():
    driver = resharded(members=("a", "b"))
    driver.tick(drained=V1[:1])
    driver.settle()
    restored = driver.replayed()
    assert restored.persisted == driver.machine.persisted
    assert restored.routing == driver.machine.routing
    assert restored.migration == driver.machine.migration
    for name, group in driver.machine.groups.items():
        assert restored.groups[name].to_record() == group.to_record()
        assert restored.groups[name].shards == group.shards
        assert restored.groups[name].owners == group.owners


def test_h12_restarted_members_carry_on_with_their_epochs():
    driver = resharded()
    driver.settle()
    epoch = driver.machine.groups[GROUP].members["a"].member_epoch
    driver.machine = driver.replayed()
    assert driver.one(heartbeat("a", epoch)).status == Status.SYNC_METADATA
    assert ok(driver.report("a")).member_epoch == epoch


def test_h12_persisted_copy_is_what_replay_of_the_written_hash_gives():
    driver = resharded(members=("a", "b"))
    driver.one(heartbeat("b", LEAVE_EPOCH))
    driver.tick(drained=V1)
    driver.settle()
    driver.tick()
    assert replay(driver.hash) == driver.machine.persisted


# --- H13 -----------------------------------------------------------------------------


def test_h13_first_join_registers_the_group_with_consumer_groups_on_live_streams():
    driver = Driver()
    ok(driver.one(set_shards(2)))
    batch = driver.batch([heartbeat("a", JOIN_EPOCH, owned=(), group="new")])
    assert ok(batch.responses[0])
    assert batch.checkpoint.create == (CreateConsumerGroups(V1, ("new",)),)
    assert "new" in batch.checkpoint.changes.groups


def test_h13_join_before_routing_registers_the_group_without_streams():
    driver = Driver()
    batch = driver.batch([heartbeat("a", JOIN_EPOCH, owned=())])
    joined = ok(batch.responses[0])
    assert isinstance(joined, m.HeartbeatResponse) and joined.routing is None
    assert joined.assignment == m.Assignment()
    assert batch.checkpoint.create == () and GROUP in driver.machine.groups
    changed = driver.batch([set_shards(2)])
    assert changed.checkpoint.create == (CreateConsumerGroups(V1, (GROUP,)),)
    driver.settle()
    assert driver.held() == set(V1)


def test_h13_a_leave_for_an_unknown_group_is_ok_and_registers_nothing():
    driver = Driver()
    batch = driver.batch([heartbeat("a", LEAVE_EPOCH, group="typo")])
    left = ok(batch.responses[0])
    assert isinstance(left, m.HeartbeatResponse) and left.member_epoch == LEAVE_EPOCH
    assert "typo" not in driver.machine.groups and batch.checkpoint.empty


def test_h13_a_stale_epoch_for_an_unknown_group_is_unknown_member_and_registers_nothing():
    driver = Driver()
    batch = driver.batch([heartbeat("a", 4, group="typo")])
    assert batch.responses[0].status == Status.UNKNOWN_MEMBER_ID
    assert "typo" not in driver.machine.groups and batch.checkpoint.empty


def test_h13_admin_requests_on_an_unknown_group_are_unknown_group_and_register_nothing():
    driver = Driver()
    requests: list[m.Request] = [
        describe("ghost"),
        m.SetMaxConcurrency(request_id=8, stream_prefix=PREFIX, consumer_group="ghost",
                            max_concurrency=2),
        m.RemoveMember(request_id=9, stream_prefix=PREFIX, consumer_group="ghost", member_id="x"),
    ]
    batch = driver.batch(requests)
    for request, response in zip(requests, batch.responses, strict=True):
        assert response.status == Status.UNKNOWN_GROUP
        assert isinstance(response, (m.GroupDescription, m.MaxConcurrencyChanged, m.MemberRemoved))
        assert response.request_id == request.request_id
        assert (response.stream_prefix, response.consumer_group) == (PREFIX, "ghost")
        assert response.error == "group 'ghost' of 'orders' was never seen"
    assert not driver.machine.groups and batch.checkpoint.empty


def test_h13_set_shard_count_registers_its_group():
    driver = Driver()
    batch = driver.batch([set_shards(2, group="fresh")])
    assert ok(batch.responses[0])
    assert "fresh" in driver.machine.groups and "fresh" in batch.checkpoint.changes.groups
    assert driver.replayed().groups["fresh"].summary().members == 0


def test_h13_prefix_snapshot_of_a_new_machine_is_empty():
    assert Driver().machine.persisted == PrefixSnapshot()


# --- G1 ------------------------------------------------------------------------------


def test_g1_set_shard_count_on_a_prefix_with_routing_names_an_existing_group_or_is_unknown_group():
    driver = Driver()
    ok(driver.one(set_shards(2)))
    before = dict(driver.hash)
    batch = driver.batch([set_shards(4, group="x:y")])
    refused = batch.responses[0]
    assert refused.status == Status.UNKNOWN_GROUP
    assert isinstance(refused, m.ShardCountChanged) and refused.routing is None
    assert refused.error == "group 'x:y' of 'orders' was never seen"
    assert "x:y" not in driver.machine.groups and batch.checkpoint.empty and driver.hash == before


def test_g1_set_shard_count_without_a_group_reshards_and_names_no_group():
    driver = Driver()
    changed = ok(driver.one(set_shards(2, group=None)))
    assert isinstance(changed, m.ShardCountChanged) and changed.consumer_group is None
    assert changed.routing is not None and changed.routing.streams == V1
    assert not driver.machine.groups
    ok(driver.one(set_shards(3, group=None)))
    assert driver.machine.routing is not None and driver.machine.routing.version == 2


def test_g1_delete_with_live_members_is_group_not_empty_and_changes_nothing():
    driver = resharded()
    before = dict(driver.hash)
    batch = driver.batch([delete_group()])
    refused = batch.responses[0]
    assert refused.status == Status.GROUP_NOT_EMPTY and isinstance(refused, m.GroupDeleted)
    assert "1 live member" in (refused.error or "")
    assert GROUP in driver.machine.groups and batch.checkpoint.empty and driver.hash == before


def test_g1_delete_of_an_unknown_group_is_unknown_group():
    response = Driver().one(delete_group("ghost"))
    assert response.status == Status.UNKNOWN_GROUP and isinstance(response, m.GroupDeleted)


def test_g1_delete_of_an_empty_group_removes_its_records_then_its_consumer_groups():
    driver = resharded()
    driver.join("z", group="orphan")
    driver.one(heartbeat("z", LEAVE_EPOCH, group="orphan"))
    batch = driver.batch([delete_group("orphan")])
    assert ok(batch.responses[0])
    assert batch.checkpoint.changes.groups == {"orphan": None}
    assert not any(field.startswith("group:orphan") or ":orphan:" in field for field in driver.hash)
    assert batch.checkpoint.cleanup == DestroyConsumerGroups(V1 + V2, ("orphan",))
    assert "orphan" not in driver.machine.groups and "orphan" not in driver.replayed().groups
    assert batch.committed is not None and batch.committed.deleted == ("orphan",)
    assert driver.one(describe("orphan")).status == Status.UNKNOWN_GROUP


def test_g1_a_deleted_group_no_longer_holds_up_the_drain():
    driver = resharded()
    ok(driver.one(m.SetMaxConcurrency(request_id=1, stream_prefix=PREFIX, consumer_group=GROUP,
                                      max_concurrency=1)))
    driver.join("z", group="orphan")
    driver.one(heartbeat("z", LEAVE_EPOCH, group="orphan"))
    stuck = {stream: {GROUP: (0, 0), "orphan": (5, 0)} for stream in V1}
    driver.tick(report=stuck)
    assert driver.machine.migration is not None and driver.machine.migration.remaining == V1
    driver.batch([delete_group("orphan")], report=stuck)
    migration = driver.machine.migration
    assert migration is not None and migration.state == MigrationState.COMPLETE


def test_g1_a_failed_delete_leaves_the_group_as_it_was():
    driver = resharded()
    driver.join("z", group="orphan")
    driver.one(heartbeat("z", LEAVE_EPOCH, group="orphan"))
    batch = driver.batch([delete_group("orphan")], durable=False)
    assert batch.responses[0].status == Status.COORDINATOR_NOT_AVAILABLE
    assert "orphan" in driver.machine.groups
    assert driver.machine.checkpoint().cleanup is None  # nothing to destroy after the rollback
    assert ok(driver.one(describe("orphan")))


def test_g1_a_failed_cleanup_is_retried_unless_the_group_came_back():
    driver = resharded()
    driver.join("z", group="orphan")
    driver.one(heartbeat("z", LEAVE_EPOCH, group="orphan"))
    batch = driver.batch([delete_group("orphan")])
    driver.machine.cleanup_failed(batch.checkpoint)
    again = driver.machine.checkpoint()
    assert again.cleanup == DestroyConsumerGroups(V1 + V2, ("orphan",))
    driver.machine.cleanup_failed(again)
    driver.join("z", group="orphan")  # registered again: its consumer groups must stay
    assert driver.machine.checkpoint().cleanup is None


# --- G2 ------------------------------------------------------------------------------


def test_g2_describe_names_the_groups_that_hold_the_migration_up_with_their_counts():
    driver = resharded()
    driver.join("q", group="audit")
    report = {V1[0]: {GROUP: (0, 0), "audit": (120, 3)},
              V1[1]: {GROUP: (0, 2), "audit": (None, 0)}}
    driver.tick(report=report)
    shown = ok(driver.one(describe()))
    assert isinstance(shown, m.GroupDescription) and shown.migration is not None
    assert shown.migration.blocking_groups == (
        m.BlockingGroup(consumer_group="audit", undelivered=None, pending=3),
        m.BlockingGroup(consumer_group=GROUP, undelivered=0, pending=2))
    driver.tick(drained=V1)
    shown = ok(driver.one(describe()))
    assert isinstance(shown, m.GroupDescription) and shown.migration is not None
    assert shown.migration.state == MigrationState.COMPLETE
    assert shown.migration.blocking_groups == ()


def test_g2_a_group_without_its_consumer_group_on_an_old_stream_blocks_it():
    driver = resharded()
    driver.tick(report={V1[0]: {}, V1[1]: {GROUP: (0, 0)}})
    migration = driver.machine.migration
    assert migration is not None and migration.remaining == V1[:1]
    assert driver.machine.blocking == (
        m.BlockingGroup(consumer_group=GROUP, undelivered=None, pending=0),)


def test_r2_a_prefix_without_groups_measures_no_drain():
    driver = Driver()
    ok(driver.one(set_shards(2, group=None)))
    ok(driver.one(set_shards(3, group=None)))
    driver.tick(drained=V1)
    assert driver.queries[-1] is None
    migration = driver.machine.migration
    assert migration is not None and migration.remaining == V1


# --- G3 ------------------------------------------------------------------------------


def test_g3_reset_with_live_members_is_group_not_empty_and_moves_nothing():
    driver = resharded()
    batch = driver.batch([reset_offsets()])
    refused = batch.responses[0]
    assert refused.status == Status.GROUP_NOT_EMPTY and isinstance(refused, m.OffsetsReset)
    assert batch.checkpoint.moves == () and batch.checkpoint.empty


def test_g3_reset_of_an_unknown_group_is_unknown_group():
    response = Driver().one(reset_offsets(group="ghost"))
    assert response.status == Status.UNKNOWN_GROUP and isinstance(response, m.OffsetsReset)


def test_g3_reset_moves_every_shard_of_the_live_versions_and_lists_them():
    driver = resharded()
    driver.tick(drained=V1[:1])
    driver.settle()
    driver.one(heartbeat("a", LEAVE_EPOCH))
    batch = driver.batch([reset_offsets("timestamp", timestamp_ms=1_700_000_000_000)])
    (move,) = batch.checkpoint.moves
    assert isinstance(move, MoveOffsets)
    assert (move.streams, move.group, move.to, move.timestamp_ms) == (
        V1[1:] + V2, GROUP, "timestamp", 1_700_000_000_000)  # a drained old shard is not moved
    reset = ok(batch.responses[0])
    assert isinstance(reset, m.OffsetsReset)
    assert reset.shards == tuple(m.ShardOffset(shard=stream, last_delivered_id=f"{index}-0")
                                 for index, stream in enumerate(V1[1:] + V2))


def test_g3_a_move_that_did_not_land_is_coordinator_not_available():
    driver = resharded()
    driver.one(heartbeat("a", LEAVE_EPOCH))
    driver.moves_fail = True
    assert driver.one(reset_offsets("latest")).status == Status.COORDINATOR_NOT_AVAILABLE
    driver.moves_fail = False
    assert driver.one(reset_offsets("latest"), durable=False).status == (
        Status.COORDINATOR_NOT_AVAILABLE)
