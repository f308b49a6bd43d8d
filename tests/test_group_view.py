"""GroupView (rsc/admin/group_view.py): a describeGroup answer derived once into what
`rsc admin describe` / `watch` and the console's group page show. Pure: no I/O."""

from __future__ import annotations

from typing import Any

import attrs

from rsc.admin.group_view import group_view, laggiest_shard, migration_view, shard_view
from rsc.protocol import Status
from rsc.protocol.messages import (
    BlockingGroup,
    GroupDescription,
    MemberDescription,
    MigrationDescription,
    Retention,
    RoutingSummary,
    ShardDescription,
)
from rsc.protocol.vocabulary import Cutover, GroupState, MemberState, MigrationState, RetentionMode


def shard(index: int, lag: int | None = 0, pending: int = 0, owner: str | None = "m-a",
          oldest: int | None = None, deliveries: int | None = None) -> ShardDescription:
    return ShardDescription(shard=f"{{orders:v2:{index}}}", version=2, owner=owner, length=100,
                            last_delivered_id=f"1-{index}", lag=lag, pending=pending,
                            oldest_pending_ms=oldest, max_delivery_count=deliveries)


def member(member_id: str, epoch: int = 9, state: MemberState = MemberState.STABLE,
           assigned: tuple[str, ...] = (), revoking: tuple[str, ...] = (),
           target: tuple[str, ...] = (), overdue: bool = False) -> MemberDescription:
    return MemberDescription(member_id=member_id, member_epoch=epoch, state=state, capacity=4,
                             last_heartbeat_ms_ago=100, assigned_shards=assigned,
                             revoking_shards=revoking, target_shards=target, overdue=overdue)


def description(**changes: Any) -> GroupDescription:
    base = GroupDescription(request_id=1, status=Status.OK, stream_prefix="orders",
                            consumer_group="billing", state=GroupState.RECONCILING, group_epoch=9,
                            assignment_epoch=9, routing=RoutingSummary(version=2, shard_count=2))
    return attrs.evolve(base, **changes)


def test_members_are_by_id_with_what_each_holds_against_its_target():
    view = group_view(description(members=(
        member("m-b", epoch=8, state=MemberState.UNREVOKED_SHARDS, assigned=("{orders:v2:1}",),
               revoking=("{orders:v2:0}",), target=("{orders:v2:1}",), overdue=True),
        member("m-a", state=MemberState.UNRELEASED_SHARDS, target=("{orders:v2:0}",)))))
    first, second = view.members
    assert (first.member_id, second.member_id) == ("m-a", "m-b")
    assert first.not_held_yet == {"{orders:v2:0}"} and not first.not_in_target
    assert second.held == {"{orders:v2:0}", "{orders:v2:1}"}
    assert second.not_in_target == {"{orders:v2:0}"} and second.behind and not first.behind
    assert (view.reconciliation.waiting, view.reconciliation.to_release,
            view.reconciliation.behind) == (1, 1, 1)
    assert not view.reconciliation.settled


def test_a_member_needs_attention_when_overdue_unsettled_behind_or_off_target():
    settled = member("m", assigned=("s",), target=("s",))
    assert not group_view(description(members=(settled,))).members[0].needs_attention
    for troubled in (attrs.evolve(settled, overdue=True),
                     attrs.evolve(settled, state=MemberState.UNRELEASED_SHARDS),
                     attrs.evolve(settled, member_epoch=8),
                     attrs.evolve(settled, target_shards=("s", "t")),
                     attrs.evolve(settled, revoking_shards=("u",))):
        assert group_view(description(members=(troubled,))).members[0].needs_attention
    assert group_view(description(members=(settled,))).reconciliation.settled


def test_shards_keep_routing_order_and_name_the_member_revoking_them():
    view = group_view(description(
        members=(member("m-b", revoking=("{orders:v2:0}",)),),
        shards=(shard(0, lag=7, pending=1, oldest=820), shard(1, lag=70))))
    assert [row.shard for row in view.shards] == ["{orders:v2:0}", "{orders:v2:1}"]
    assert [row.revoking_from for row in view.shards] == ["m-b", None]
    assert [row.backlog for row in view.shards] == [8, 70]


def test_the_backlog_sums_the_shards_and_is_unknown_when_one_undelivered_count_is():
    totals = group_view(description(shards=(shard(0, lag=7, pending=1, oldest=820),
                                            shard(1, lag=70, oldest=4200, deliveries=3)))).totals
    assert (totals.undelivered, totals.unacked, totals.backlog) == (77, 1, 78)
    assert (totals.oldest_unacked_ms, totals.max_delivery_count) == (4200, 3)
    unknown = group_view(description(shards=(shard(0, lag=None, pending=5), shard(1, pending=2))))
    assert (unknown.totals.undelivered, unknown.totals.unacked, unknown.totals.backlog) == \
        (None, 7, None)
    empty = group_view(description()).totals
    assert (empty.undelivered, empty.unacked, empty.backlog, empty.oldest_unacked_ms,
            empty.max_delivery_count) == (0, 0, 0, None, 0)


def test_the_laggiest_shard_is_the_one_with_the_largest_backlog_then_most_undelivered():
    def rows(*figures: tuple[int | None, int]) -> tuple:
        return tuple(shard_view(shard(index, lag=lag, pending=pending), None)
                     for index, (lag, pending) in enumerate(figures))

    def laggiest(*figures: tuple[int | None, int]) -> str | None:
        found = laggiest_shard(rows(*figures))
        return None if found is None else found.shard

    assert laggiest((7, 1), (70, 0)) == "{orders:v2:1}"
    assert laggiest((5, 0), (5, 2)) == "{orders:v2:1}", "ties: the larger backlog"
    assert laggiest((5, 0), (0, 9)) == "{orders:v2:1}", "unacked entries are behind too"
    assert laggiest((0, 5), (5, 0)) == "{orders:v2:1}", "equal backlogs: the most undelivered"
    assert laggiest((5, 0), (5, 0)) == "{orders:v2:0}", "then the first in routing order"
    assert laggiest((0, 0)) is None
    assert laggiest((None, 0)) is None
    view = group_view(description(shards=(shard(0, lag=7, pending=1), shard(1, lag=70))))
    assert view.laggiest is view.shards[1]


def test_a_migration_counts_drained_shards_and_orders_its_blockers_most_behind_first():
    migration = MigrationDescription(
        state=MigrationState.DRAINING, from_version=1, to_version=2, cutover=Cutover.PARALLEL,
        drained_shards=("{orders:v1:0}",), remaining_shards=("{orders:v1:1}", "{orders:v1:2}"),
        blocking_groups=(BlockingGroup(consumer_group="billing", undelivered=2, pending=1),
                         BlockingGroup(consumer_group="audit", undelivered=120, pending=0),
                         BlockingGroup(consumer_group="zeta", undelivered=None, pending=3),
                         BlockingGroup(consumer_group="alpha", undelivered=None, pending=3)))
    view = migration_view(migration)
    assert view is not None and (view.drained, view.total) == (1, 3)
    assert [entry.consumer_group for entry in view.blocking_groups] == [
        "billing", "audit", "zeta", "alpha"], "as the coordinator gave them"
    assert [entry.consumer_group for entry in view.most_behind_first()] == [
        "audit", "alpha", "billing", "zeta"]
    assert migration_view(None) is None
    assert group_view(description(migration=migration)).migration == view


def test_retention_is_the_descriptions_or_else_its_routings():
    capped = Retention(mode=RetentionMode.NONE, max_length=5000)
    in_routing = RoutingSummary(version=2, shard_count=2, retention=capped)
    assert group_view(description(routing=in_routing)).retention == capped
    top = Retention(mode=RetentionMode.ACKED)
    assert group_view(description(routing=in_routing, retention=top)).retention == top
    assert group_view(description(routing=None)).retention is None


def test_the_header_figures_come_from_the_description():
    view = group_view(description(max_concurrency=3, store_went_back_at_ms=1_796_000_000_000))
    assert (view.stream_prefix, view.consumer_group, view.state, view.group_epoch,
            view.assignment_epoch, view.max_concurrency) == (
        "orders", "billing", GroupState.RECONCILING, 9, 9, 3)
    assert (view.routing_version, view.shard_count, view.store_went_back_at_ms) == (
        2, 2, 1_796_000_000_000)
    without = group_view(description(routing=None))
    assert (without.routing_version, without.shard_count, without.store_went_back_at_ms) == (
        None, None, None)
