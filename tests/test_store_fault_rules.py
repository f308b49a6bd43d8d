"""Pure tests of the prefix machine's A1 caps and of its repair of failed writes (H12, D4).

Driven like tests/test_prefix_rules.py (tests/prefix_driver.py plays the shell). No Redis,
no trio. A "landed" failed write is simulated by folding its checkpoint into the fake hash
although the machine was told it failed (a half-written or late write).
"""

from __future__ import annotations

from rsc.actors.core.prefix import Checkpoint, GroupBudget, PrefixMachine
from rsc.actors.core.records import encode, replay
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import JOIN_EPOCH
from tests.prefix_driver import (
    GROUP,
    PREFIX,
    SETTINGS,
    Driver,
    delete_group,
    describe,
    heartbeat,
    ok,
    set_shards,
)


def capped(*, max_groups: int = 100, max_group_size: int | None = None,
           budget: GroupBudget | None = None, prefix: str = PREFIX) -> Driver:
    driver = Driver()
    driver.machine = PrefixMachine(prefix, SETTINGS, budget=budget or GroupBudget(max_groups),
                                   max_group_size=max_group_size)
    return driver


def join(member_id: str, group: str = GROUP, prefix: str = PREFIX) -> m.Heartbeat:
    return m.Heartbeat(request_id=9, stream_prefix=prefix, consumer_group=group,
                       member_id=member_id, member_epoch=JOIN_EPOCH, owned_shards=())


def land(driver: Driver, checkpoint: Checkpoint, tokens: dict[tuple[str, str], str]) -> None:
    """Redis took a write the machine was told had failed (the hash, and its owner tokens)."""
    for field, value in encode(checkpoint.changes).items():
        if value is None:
            driver.hash.pop(field, None)
        else:
            driver.hash[field] = value
    apply_tokens(checkpoint, tokens)


def apply_tokens(checkpoint: Checkpoint, tokens: dict[tuple[str, str], str]) -> None:
    for token in checkpoint.owners:
        if token.member_id is None:
            tokens.pop((token.shard, token.group), None)
        else:
            tokens[(token.shard, token.group)] = token.member_id


def memory_tokens(driver: Driver) -> dict[tuple[str, str], str]:
    return {(shard, name): owner for name, group in driver.machine.groups.items()
            for shard, owner in group.owners.items()}


def assert_redis_matches_memory(driver: Driver, tokens: dict[tuple[str, str], str]) -> None:
    stored = replay(driver.hash)
    machine = driver.machine
    assert stored.routing == machine.routing and stored.migration == machine.migration
    assert set(stored.groups) == set(machine.groups)
    for name, group in machine.groups.items():
        assert stored.groups[name].group == group.persistent_group()
        assert stored.groups[name].members == {mid: group.persistent_member(mid)
                                               for mid in group.members}
    assert tokens == memory_tokens(driver)


# --- A1: --max-groups ------------------------------------------------------------------


def test_a1_join_past_max_groups_is_group_limit_reached_and_changes_nothing():
    driver = capped(max_groups=1)
    ok(driver.join("a", group="one"))
    before = dict(driver.hash)
    batch = driver.batch([join("b", group="two")])
    assert batch.responses[0].status == Status.GROUP_LIMIT_REACHED
    assert "--max-groups (1)" in (batch.responses[0].error or "")
    assert "two" not in driver.machine.groups and driver.hash == before
    assert batch.checkpoint.empty
    # a join into the existing group is not a new group
    ok(driver.join("c", group="one"))


def test_a1_max_groups_counts_groups_of_every_prefix_of_the_coordinator():
    budget = GroupBudget(2)
    orders, invoices = capped(budget=budget), capped(budget=budget, prefix="invoices")
    ok(orders.join("a", group="one"))
    assert invoices.machine.handle(join("b", "x", "invoices"), 0).response.status == Status.OK
    invoices.machine.checkpoint()
    assert budget.total == 2
    refused = orders.one(join("c", group="two"))
    assert refused.status == Status.GROUP_LIMIT_REACHED


def test_a1_groups_registered_by_set_shard_count_count_against_max_groups():
    driver = capped(max_groups=1)
    ok(driver.one(set_shards(2, group="one")))  # no routing yet: registers "one"
    assert driver.machine.budget is not None and driver.machine.budget.total == 1
    driver2 = capped(budget=driver.machine.budget, prefix="other")
    refused = driver2.machine.handle(m.SetShardCount(request_id=3, stream_prefix="other",
                                                     consumer_group="two", shard_count=2), 0)
    assert refused.response is not None and refused.response.status == Status.GROUP_LIMIT_REACHED
    assert driver2.machine.routing is None and not driver2.machine.groups
    assert driver2.machine.checkpoint().empty


def test_a1_a_deleted_group_or_a_rolled_back_join_frees_its_place():
    driver = capped(max_groups=1)
    failed = driver.batch([join("a", group="one")], durable=False)
    assert failed.responses[0].status == Status.COORDINATOR_NOT_AVAILABLE
    assert driver.machine.budget is not None and driver.machine.budget.total == 0
    ok(driver.join("a", group="one"))
    ok(driver.one(heartbeat("a", -1, group="one")))
    ok(driver.one(delete_group("one")))
    assert driver.machine.budget.total == 0
    ok(driver.join("b", group="two"))


def test_a1_restored_groups_count_against_max_groups():
    driver = capped()
    ok(driver.join("a", group="one"))
    ok(driver.join("b", group="two"))
    budget = GroupBudget(2)
    restored = PrefixMachine(PREFIX, SETTINGS, budget=budget)
    restored.restore(replay(driver.hash), 0)
    assert budget.total == 2
    assert restored.handle(join("c", "three"), 0).response.status == Status.GROUP_LIMIT_REACHED


# --- A1: --max-group-size --------------------------------------------------------------


def test_a1_join_past_max_group_size_is_group_max_size_reached_and_changes_nothing():
    driver = capped(max_group_size=2)
    ok(driver.one(set_shards(4)))
    first = ok(driver.join("a"))
    ok(driver.join("b"))
    epoch = driver.machine.groups[GROUP].group_epoch
    before = dict(driver.hash)
    batch = driver.batch([join("c")])
    refused = batch.responses[0]
    assert refused.status == Status.GROUP_MAX_SIZE_REACHED
    assert "--max-group-size (2)" in (refused.error or "")
    assert set(driver.machine.groups[GROUP].members) == {"a", "b"}
    assert driver.machine.groups[GROUP].group_epoch == epoch and driver.hash == before
    description = driver.one(describe())
    assert {member.member_id for member in description.members} == {"a", "b"}
    # a live member rejoining (epoch 0) is no new member: it is answered like a join
    assert driver.join("a").status == Status.OK and first.status == Status.OK


def test_a1_a_leave_makes_room_in_a_full_group():
    driver = capped(max_group_size=1)
    ok(driver.join("a"))
    assert driver.one(join("b")).status == Status.GROUP_MAX_SIZE_REACHED
    ok(driver.one(heartbeat("a", -1)))
    ok(driver.join("b"))


# --- repair of failed writes (D4) -----------------------------------------------------


def test_a_failed_write_that_landed_anyway_is_overwritten_by_the_next_checkpoint():
    driver = Driver()
    tokens: dict[tuple[str, str], str] = {}
    ok(driver.one(set_shards(4)))
    joined = driver.batch([join("a")])
    apply_tokens(joined.checkpoint, tokens)
    # b's join: memory rolls back, but Redis ran the write (late, or its second step failed)
    failed = driver.batch([join("b")], durable=False)
    assert failed.responses[0].status == Status.COORDINATOR_NOT_AVAILABLE
    land(driver, failed.checkpoint, tokens)
    assert "b" in replay(driver.hash).groups[GROUP].members
    assert "b" not in driver.machine.groups[GROUP].members
    assert driver.machine.repair_pending
    repair = driver.tick()  # nothing new: the checkpoint only repairs
    assert repair.checkpoint.repair_only and not repair.checkpoint.empty
    apply_tokens(repair.checkpoint, tokens)
    assert_redis_matches_memory(driver, tokens)
    assert not driver.machine.repair_pending
    assert driver.tick().checkpoint.empty


def test_half_written_owner_tokens_are_repaired_with_the_next_write():
    driver = Driver()
    tokens: dict[tuple[str, str], str] = {}
    ok(driver.one(set_shards(2)))
    a = ok(driver.join("a"))
    apply_tokens(driver.batch([]).checkpoint, tokens)
    tokens.update({(shard, GROUP): "a" for shard in a.assignment.assigned_shards})
    failed = driver.batch([join("b")], durable=False)
    for field, value in encode(failed.checkpoint.changes).items():  # the hash landed, tokens not
        if value is None:
            driver.hash.pop(field, None)
        else:
            driver.hash[field] = value
    again = driver.batch([join("b")])  # a new change plus the repair, in one checkpoint
    assert not again.checkpoint.repair_only
    apply_tokens(again.checkpoint, tokens)
    assert_redis_matches_memory(driver, tokens)


def test_a_batch_that_only_repairs_answers_as_usual_when_its_write_fails_too():
    driver = Driver()
    ok(driver.one(set_shards(2)))
    a = ok(driver.join("a"))
    driver.batch([join("b")], durable=False)
    again = driver.batch([heartbeat("a", a.member_epoch, owned=a.assignment.assigned_shards)],
                         durable=False)
    assert again.checkpoint.repair_only
    assert again.responses[0].status == Status.OK
    assert again.responses[0].member_epoch == a.member_epoch
    assert driver.machine.repair_pending  # still owed


def test_h12_a_member_that_stops_heartbeating_while_the_store_fails_does_not_expire():
    driver = Driver()
    ok(driver.one(set_shards(2)))
    a = ok(driver.join("a"))
    driver.now += SETTINGS.lease_ttl_ms + 1
    expired = driver.tick(durable=False)  # the expiry is a write that fails
    assert expired.committed is None and "a" in driver.machine.groups[GROUP].members
    late = driver.one(heartbeat("a", a.member_epoch, owned=a.assignment.assigned_shards))
    assert late.status == Status.OK and late.member_epoch == a.member_epoch


def test_d4_an_abandoned_write_that_landed_after_all_is_adopted_not_reverted():
    driver = Driver()
    tokens: dict[tuple[str, str], str] = {}
    ok(driver.one(set_shards(4)))
    apply_tokens(driver.batch([join("a")]).checkpoint, tokens)
    failed = driver.batch([join("b")], durable=False)  # abandoned: answered unavailable
    assert failed.responses[0].status == Status.COORDINATOR_NOT_AVAILABLE
    land(driver, failed.checkpoint, tokens)  # it finished in the background
    driver.machine.adopt(failed.checkpoint, driver.now)
    assert "b" in driver.machine.groups[GROUP].members
    assert_redis_matches_memory(driver, tokens)
    repair = driver.tick()  # the repair rewrites what already is there: nothing flips back
    apply_tokens(repair.checkpoint, tokens)
    assert_redis_matches_memory(driver, tokens)
    assert "b" in replay(driver.hash).groups[GROUP].members
    # b learns its join from its retry: a live member rejoining is answered like a join
    assert driver.join("b").status == Status.OK


def test_d5_a_tick_in_the_fresh_lease_window_after_a_lapse_expires_nobody():
    # after the coordinator took a lapsed lease back, its ticks expire nobody for a member
    # lease TTL (H12) but still run: the same silent member goes once expiry is allowed again
    driver = Driver()
    ok(driver.one(set_shards(2)))
    ok(driver.join("a"))
    driver.now += SETTINGS.lease_ttl_ms + 1
    driver.machine.tick(driver.now, expire=False)
    assert "a" in driver.machine.groups[GROUP].members
    driver.machine.tick(driver.now)
    assert "a" not in driver.machine.groups[GROUP].members
