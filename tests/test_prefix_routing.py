"""Named rule tests of actors/core/prefix_routing.py (R1..R4, G2), on the part alone. Pure."""

from __future__ import annotations

from rsc.actors.core.group import GroupMachine, GroupSettings
from rsc.actors.core.prefix_io import MIGRATION_COMPLETE, MIGRATION_RETIRED, CreateConsumerGroups
from rsc.actors.core.prefix_routing import Resharding
from rsc.actors.core.records import GroupSnapshot, MemberRecord
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import Cutover, MigrationState

PREFIX = "orders"
SETTINGS = GroupSettings(heartbeat_interval_ms=3000, lease_ttl_ms=10_000, revoke_timeout_ms=60_000)


def v(version: int, count: int) -> tuple[str, ...]:
    return tuple(f"{{{PREFIX}:v{version}:{index}}}" for index in range(count))


def count(shards: int, cutover: Cutover = Cutover.PARALLEL) -> m.SetShardCount:
    return m.SetShardCount(request_id=1, stream_prefix=PREFIX, consumer_group=None,
                           shard_count=shards, cutover=cutover)


def routed(shards: int = 2, groups: tuple[str, ...] = ("billing",)) -> Resharding:
    part = Resharding(PREFIX)
    assert part.reshard(count(shards), groups).status == Status.OK
    part.create, part.seal = [], []
    return part


def test_r1_a_new_count_creates_the_next_version_first_and_seals_the_old_one():
    part = routed(2)
    response = part.reshard(count(3), ("billing", "audit"))
    assert response.status == Status.OK and response.routing is not None
    assert response.routing.version == 2 and response.routing.streams == v(2, 3)
    assert part.create == [CreateConsumerGroups(v(2, 3), ("billing", "audit"))]
    assert part.seal == list(v(1, 2))
    migration = part.migration
    assert migration is not None and migration.from_streams == v(1, 2)
    assert migration.state == MigrationState.DRAINING and part.drain_check_due


def test_r1_the_first_count_creates_version_one_and_seals_nothing():
    part = Resharding(PREFIX)
    part.reshard(count(2), ())
    assert part.routing is not None and part.routing.streams == v(1, 2)
    assert part.seal == [] and part.migration is None


def test_r4_the_same_count_changes_nothing():
    part = routed(2)
    before = part.routing
    assert part.reshard(count(2), ("billing",)).status == Status.OK
    assert part.routing is before and part.create == [] and part.seal == []


def test_r4_a_draining_migration_refuses_the_next_count_a_complete_one_does_not():
    part = routed(2)
    part.reshard(count(3), ("billing",))
    refused = part.reshard(count(4), ("billing",))
    assert refused.status == Status.MIGRATION_IN_PROGRESS
    assert part.routing is not None and part.routing.version == 2
    assert part.drained(v(1, 2))
    assert part.migration is not None and part.migration.state == MigrationState.COMPLETE
    assert part.reshard(count(4), ("billing",)).status == Status.OK
    assert part.routing.version == 3
    assert part.migration is not None and part.migration.retiring == v(1, 2)


def test_r2_a_stream_is_drained_when_no_group_has_undelivered_or_pending_entries():
    part = routed(2)
    part.reshard(count(3), ("billing", "audit"))
    old = v(1, 2)
    report = {old[0]: {"billing": (0, 0), "audit": (0, 0)},
              old[1]: {"billing": (0, 0), "audit": (0, 1)}}
    blocking_changed, reassign = part.drain_measured(report, ("billing", "audit"))
    assert reassign and blocking_changed
    assert part.migration is not None and part.migration.remaining == (old[1],)
    assert part.blocking == (m.BlockingGroup(consumer_group="audit", undelivered=0, pending=1),)


def test_r2_a_stream_already_gone_counts_as_drained_and_all_drained_is_complete():
    part = routed(1)
    part.reshard(count(2), ("billing",))
    part.drain_measured({v(1, 1)[0]: None}, ("billing",))
    assert part.migration is not None and part.migration.state == MigrationState.COMPLETE
    assert [event.kind for event in part.take_events()] == [MIGRATION_COMPLETE]


def test_r2_old_streams_wait_for_a_group_to_drain_them():
    part = routed(2, groups=())
    part.reshard(count(3), ())
    assert part.drain_query(()) is None  # no group: nothing is measured, nothing drains
    part.tick()
    query = part.drain_query(("billing",))
    assert query is not None and query.streams == v(1, 2) and query.groups == ("billing",)


def test_r3_ordered_holds_the_new_shards_back_until_the_old_ones_drained():
    part = routed(2)
    part.reshard(count(3, Cutover.ORDERED), ("billing",))
    assert part.assignable_shards() == v(1, 2)
    part.drained(v(1, 2)[:1])
    assert part.assignable_shards() == v(1, 2)[1:]
    part.drained(v(1, 2))
    assert part.assignable_shards() == v(2, 3)


def test_r3_parallel_assigns_both_versions_at_once():
    part = routed(2)
    part.reshard(count(3), ("billing",))
    assert part.assignable_shards() == v(1, 2) + v(2, 3)
    assert part.live_streams() == v(1, 2) + v(2, 3)
    assert part.shard_versions() == {**dict.fromkeys(v(1, 2), 1), **dict.fromkeys(v(2, 3), 2)}


def test_r4_a_complete_migration_retires_only_once_redis_knows_it_and_nobody_holds_it():
    part = routed(1)
    part.reshard(count(2), ("billing",))
    part.drained(v(1, 1))
    group = GroupMachine(PREFIX, "billing", SETTINGS, v(2, 2))
    groups = {"billing": group}
    part.retire_check_due = True
    # Redis does not know it is complete
    assert part.retirement(groups, durable=None, durable_groups={}) is None
    assert part.migration is not None
    part.retire_check_due = True
    retired = part.retirement(groups, durable=part.migration, durable_groups={})
    assert retired is not None and retired.streams == v(1, 1) and retired.groups == ("billing",)
    assert part.migration is None
    assert [event.kind for event in part.take_events()] == [MIGRATION_COMPLETE, MIGRATION_RETIRED]


def test_r4_a_stream_a_member_holds_in_what_redis_holds_is_not_retired():
    part = routed(1)
    part.reshard(count(2), ("billing",))
    part.drained(v(1, 1))
    groups = {"billing": GroupMachine(PREFIX, "billing", SETTINGS, v(2, 2))}  # memory: released
    durable_groups = {"billing": GroupSnapshot(members={"a": MemberRecord(
        epoch=1, previous_epoch=0, capacity=None, revoking=frozenset(v(1, 1)))})}
    part.retire_check_due = True
    # the release is not durable yet: a failed write would give v1 back to a
    assert part.retirement(groups, durable=part.migration, durable_groups=durable_groups) is None
    assert part.migration is not None
    part.retire_check_due = True
    retired = part.retirement(groups, durable=part.migration, durable_groups={})
    assert retired is not None and retired.streams == v(1, 1)


def test_r1_a_seal_of_a_failed_checkpoint_is_undone_while_that_version_stays_current():
    part = routed(2)
    part.reshard(count(3), ("billing",))
    sealed = tuple(part.seal)
    part.seal = []
    part.restore(routed(2).routing, None)  # the write failed: back to v1, as Redis holds it
    part.seal_failed(sealed, ())
    assert part.take_unseal() == v(1, 2)
    assert part.take_unseal() == ()  # once
