"""B6: groups nobody uses expire after `--empty-group-retention-ms`, as Kafka's offsets do.

Pure tests of the group and prefix machines (tests/prefix_driver.py runs the machine as its
shell does, with a fake hash for the records), then a real coordinator and redis-server with
a short retention from the coordinator's settings.
"""

from __future__ import annotations

import json

import redis
import trio

from rsc.actors.core.group import GroupSettings
from rsc.actors.core.prefix import EXPIRY_WARNING_MS, expiry_warning_ms
from rsc.actors.core.prefix_io import DrainQuery
from rsc.actors.core.records import GroupRecord, encode, group_value, replay
from rsc.commands import coordinator as coordinator_command
from rsc.member.session import open_session
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import JOIN_EPOCH, LEAVE_EPOCH
from tests.prefix_driver import GROUP, PREFIX, Driver, heartbeat, ok, set_shards

RETENTION_MS = 60_000


def driver(retention_ms: int = RETENTION_MS) -> Driver:
    """A prefix machine whose groups expire after `retention_ms` of being empty."""
    driven = Driver()
    driven.machine.settings = GroupSettings(heartbeat_interval_ms=3000, lease_ttl_ms=10_000,
                                            revoke_timeout_ms=60_000,
                                            empty_group_retention_ms=retention_ms)
    return driven


def leave(driven: Driver, member_id: str, group: str = GROUP) -> None:
    ok(driven.one(heartbeat(member_id, LEAVE_EPOCH, group=group)))


def described(driven: Driver, group: str = GROUP) -> m.GroupDescription:
    response = driven.one(m.DescribeGroup(request_id=4, stream_prefix=PREFIX,
                                          consumer_group=group), lags={group: []})
    assert isinstance(response, m.GroupDescription)
    return response


# --- pure -----------------------------------------------------------------------------------


def test_b6_an_empty_group_shows_when_it_expires_and_a_join_stops_the_clock():
    driven = driver()
    ok(driven.one(set_shards(2)))
    driven.join("a")
    assert described(driven).expires_at_ms is None  # a live member: no expiry
    driven.now = 1_000
    leave(driven, "a")
    assert described(driven).expires_at_ms == 1_000 + RETENTION_MS
    summary = driven.machine.summaries()[0]
    assert summary.expires_at_ms == 1_000 + RETENTION_MS  # listGroups too
    driven.now = 30_000
    driven.join("b")  # back in use: the clock stops
    assert described(driven).expires_at_ms is None
    driven.now = 40_000
    leave(driven, "b")  # and starts again from this leave
    assert described(driven).expires_at_ms == 40_000 + RETENTION_MS


def test_b6_an_empty_group_is_deleted_at_its_expiry_and_logged_and_counted_as_expired():
    driven = driver()
    ok(driven.one(set_shards(2)))  # registered, never joined: empty from the start
    driven.tick()
    since = driven.machine.groups[GROUP].empty_since_ms
    assert since == 0
    driven.now = RETENTION_MS - 1
    driven.tick()
    assert GROUP in driven.machine.groups
    driven.now = RETENTION_MS
    batch = driven.tick()
    assert GROUP not in driven.machine.groups
    assert batch.checkpoint.changes.groups == {GROUP: None}  # deleted as deleteGroup does
    assert f"group:{GROUP}" not in driven.hash
    assert batch.committed is not None
    assert [(name, event.kind) for name, event in batch.committed.events] == [
        (GROUP, "group_expired")]
    assert batch.checkpoint.cleanup is not None and batch.checkpoint.cleanup.groups == (GROUP,)
    again = driven.join("late")  # it joins again: created anew
    assert again.status == Status.OK and GROUP in driven.machine.groups


def test_b6_an_expired_group_no_longer_holds_a_drain():
    driven = driver()
    ok(driven.one(set_shards(2)))
    driven.join("a", group="audit")  # a throw-away group: one join, one leave
    leave(driven, "a", group="audit")
    driven.join("m")
    driven.settle()
    ok(driven.one(set_shards(4)))  # a resharding: v1 drains for every group
    driven.tick()
    assert any(isinstance(step, DrainQuery) and "audit" in step.groups for step in driven.steps)
    driven.now = RETENTION_MS + 1
    driven.tick()
    assert "audit" not in driven.machine.groups
    driven.now += 1
    driven.tick()
    queries = [step for step in driven.steps if isinstance(step, DrainQuery)]
    assert queries and all("audit" not in query.groups for query in queries)


def test_b6_a_static_member_away_counts_as_live():
    driven = driver()
    ok(driven.one(set_shards(2)))
    joined = driven.one(m.Heartbeat(request_id=1, stream_prefix=PREFIX, consumer_group=GROUP,
                                    member_id="s", member_epoch=JOIN_EPOCH, owned_shards=(),
                                    instance_id="static-1"))
    assert joined.status == Status.OK
    ok(driven.one(heartbeat("s", -2)))  # S2: a temporary leave, AWAY
    driven.tick()
    assert driven.machine.groups[GROUP].members and described(driven).expires_at_ms is None


def test_b6_zero_retention_keeps_empty_groups_for_ever():
    driven = driver(0)
    ok(driven.one(set_shards(2)))
    driven.tick()
    driven.now = 10 * 365 * 86_400_000
    driven.tick()
    assert GROUP in driven.machine.groups and described(driven).expires_at_ms is None


def test_b6_the_expiry_is_warned_of_a_day_ahead_or_at_once_for_a_shorter_retention():
    assert expiry_warning_ms(7 * 86_400_000) == EXPIRY_WARNING_MS == 86_400_000
    assert expiry_warning_ms(60_000) == 60_000
    long = driver(2 * 86_400_000)
    ok(long.one(set_shards(2)))
    long.tick()
    assert long.machine.take_expiry_notices() == []
    long.now = 86_400_000 - 1
    long.tick()
    assert long.machine.take_expiry_notices() == []
    long.now = 86_400_000
    long.tick()
    assert long.machine.take_expiry_notices() == [{
        "prefix": PREFIX, "group": GROUP, "empty_since_ms": 0, "expires_at_ms": 2 * 86_400_000}]
    long.now += 1000
    long.tick()
    assert long.machine.take_expiry_notices() == []  # once
    short = driver()
    ok(short.one(set_shards(2)))
    short.tick()
    short.tick()
    assert [notice["group"] for notice in short.machine.take_expiry_notices()] == [GROUP]


def test_b6_the_empty_since_time_is_stored_from_format_2_and_survives_a_restart():
    driven = driver()
    driven.now = 5_000
    ok(driven.one(set_shards(2)))  # registered empty: its clock starts with this batch
    driven.now = 9_000
    driven.tick()
    stored = json.loads(driven.hash[f"group:{GROUP}"])
    assert stored["emptySinceMs"] == 5_000
    restored = driven.replayed()
    assert restored.groups[GROUP].empty_since_ms == 5_000  # a restart does not reset it
    record = GroupRecord(group_epoch=1, empty_since_ms=5_000)
    assert "emptySinceMs" not in group_value(record, 1)  # a format 1 store: memory only
    assert replay({k: v for k, v in encode_format_1(driven).items() if v is not None}
                  ).groups[GROUP].group.empty_since_ms is None


def encode_format_1(driven: Driver) -> dict[str, str | None]:
    from rsc.actors.core.records import changes_of
    return encode(changes_of(replay(driven.hash)), 1)


def test_b6_the_coordinator_flag_defaults_to_7_days_and_0_is_never():
    import argparse
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers()
    coordinator_command.add_parser(commands)
    default = parser.parse_args(["coordinator"])
    assert coordinator_command.config_from_args(default).empty_group_retention_ms == 604_800_000
    never = parser.parse_args(["coordinator", "--empty-group-retention-ms", "0"])
    assert coordinator_command.config_from_args(never).empty_group_retention_ms == 0


# --- a real coordinator and redis-server ------------------------------------------------------


async def test_b6_a_throw_away_group_expires_releases_its_consumer_groups_and_comes_back_anew(
        coordinator_factory):
    coordinator = await coordinator_factory(empty_group_retention_ms=1500)
    client = redis.Redis.from_url(coordinator.redis_url, decode_responses=True)
    async with open_session(coordinator.url, "admin") as admin, \
            open_session(coordinator.url, "member") as member:
        changed = await admin.request(m.SetShardCount(request_id=0, stream_prefix=PREFIX,
                                                      consumer_group="keep", shard_count=2))
        assert isinstance(changed, m.ShardCountChanged) and changed.status == Status.OK
        streams = changed.routing.streams if changed.routing else ()
        joined = await member.request(m.Heartbeat(
            request_id=0, stream_prefix=PREFIX, consumer_group="throwaway", member_id="t",
            member_epoch=JOIN_EPOCH, owned_shards=()))
        assert joined.status == Status.OK
        keeper = await member.request(m.Heartbeat(
            request_id=0, stream_prefix=PREFIX, consumer_group="keep", member_id="k",
            member_epoch=JOIN_EPOCH, owned_shards=()))
        assert keeper.status == Status.OK
        left = await member.request(m.Heartbeat(
            request_id=0, stream_prefix=PREFIX, consumer_group="throwaway", member_id="t",
            member_epoch=LEAVE_EPOCH))
        assert left.status == Status.OK
        with trio.fail_after(10):
            while True:
                shown = await admin.request(m.DescribeGroup(
                    request_id=0, stream_prefix=PREFIX, consumer_group="throwaway"))
                assert isinstance(shown, m.GroupDescription)
                if shown.status != Status.OK or shown.expires_at_ms is not None:
                    break
                await trio.sleep(0.05)
        assert shown.status == Status.OK and shown.expires_at_ms is not None
        stored = json.loads(client.hget(f"rsc:meta:{{{PREFIX}}}", "group:throwaway") or "{}")
        assert "emptySinceMs" in stored  # a fresh store is in format 2
        with trio.fail_after(20):
            while shown.status == Status.OK:
                await trio.sleep(0.1)
                shown = await admin.request(m.DescribeGroup(
                    request_id=0, stream_prefix=PREFIX, consumer_group="throwaway"))
                assert isinstance(shown, m.GroupDescription)
        assert shown.status == Status.UNKNOWN_GROUP
        assert client.hget(f"rsc:meta:{{{PREFIX}}}", "group:throwaway") is None
        with trio.fail_after(10):  # its consumer groups go with the cleanup after the checkpoint
            while any(group["name"] == "throwaway" for stream in streams
                      for group in client.xinfo_groups(stream)):
                await trio.sleep(0.05)
        kept = await admin.request(m.DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                                   consumer_group="keep"))
        assert kept.status == Status.OK  # a group with a live member stays
        back = await member.request(m.Heartbeat(
            request_id=0, stream_prefix=PREFIX, consumer_group="throwaway", member_id="t2",
            member_epoch=JOIN_EPOCH, owned_shards=()))
        assert back.status == Status.OK  # created anew (H13)
        assert all(group["last-delivered-id"] == "0-0" for stream in streams
                   for group in client.xinfo_groups(stream) if group["name"] == "throwaway")
    client.close()


async def test_b6_group_expiry_pending_is_logged_for_a_group_that_would_lose_entries(
        coordinator_factory, caplog):
    caplog.set_level("INFO", logger="rsc.coordinator")
    coordinator = await coordinator_factory(empty_group_retention_ms=4000)  # < a day: at once
    client = redis.Redis.from_url(coordinator.redis_url, decode_responses=True)
    async with open_session(coordinator.url, "admin") as admin, \
            open_session(coordinator.url, "member") as member:
        changed = await admin.request(m.SetShardCount(request_id=0, stream_prefix=PREFIX,
                                                      consumer_group="keep", shard_count=1))
        assert isinstance(changed, m.ShardCountChanged) and changed.routing is not None
        shard = changed.routing.streams[0]

        async def beat(group: str, epoch: int) -> None:
            answer = await member.request(m.Heartbeat(
                request_id=0, stream_prefix=PREFIX, consumer_group=group, member_id=group,
                member_epoch=epoch, owned_shards=() if epoch == JOIN_EPOCH else None))
            assert answer.status == Status.OK, answer

        for group in ("unread", "caught-up"):
            await beat(group, JOIN_EPOCH)
        client.xadd(shard, {"key": "k", "value": "v"})
        client.xgroup_setid(shard, "caught-up", "$")  # it read everything
        for group in ("unread", "caught-up"):  # one join, one leave: empty from now
            await beat(group, LEAVE_EPOCH)

    def pending_for() -> dict[str | None, dict]:
        return {getattr(record, "rsc_fields", {}).get("group"): getattr(record, "rsc_fields", {})
                for record in caplog.records if record.getMessage() == "group.expiry_pending"}

    with trio.fail_after(10):
        while "unread" not in pending_for():
            await trio.sleep(0.05)
    warned = pending_for()["unread"]
    assert warned["undelivered"] == 1 and warned["pending"] == 0
    assert warned["expires_at_ms"] - warned["empty_since_ms"] == 4000
    with trio.fail_after(15):  # then both expire; the caught-up one was never warned of
        while not {"unread", "caught-up"} <= {
                getattr(record, "rsc_fields", {}).get("group") for record in caplog.records
                if record.getMessage() == "group.expired"}:
            await trio.sleep(0.05)
    assert "caught-up" not in pending_for()
    client.close()


def test_b6_an_idle_prefix_is_woken_for_its_empty_groups_warning_and_expiry():
    from rsc.actors.core.prefix_schedule import Activity, Schedule
    schedule = Schedule(100)
    schedule.report("idle", Activity(), 0)
    schedule.report("empty", Activity(expiry_due_ms=5_000), 0)
    assert schedule.due(4_900) == []  # nothing else to do: idle until the expiry is due
    assert [wake.prefix for wake in schedule.due(5_000)] == ["empty"]
    driven = driver()
    ok(driven.one(set_shards(2)))
    # the prefix says when: its warning first (the retention is under a day: at once)
    assert driven.machine.activity().expiry_due_ms == 0
    driven.tick()
    assert driven.machine.activity().expiry_due_ms == RETENTION_MS  # then its expiry


async def test_b6_raising_a_format_1_store_to_2_writes_the_empty_since_times_kept_in_memory(
        redis_url, coordinator_factory):
    from tests.test_deploy_format_version import LONG_LEASE, load_fixture
    load_fixture(redis_url)  # a store of the released layout: format 1
    coordinator = await coordinator_factory(**LONG_LEASE)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    field = "group:oneoff"
    async with open_session(coordinator.url, "admin") as admin, \
            open_session(coordinator.url, "member") as member:
        for epoch in (JOIN_EPOCH, LEAVE_EPOCH):  # a throw-away group on the stored prefix
            answer = await member.request(m.Heartbeat(
                request_id=0, stream_prefix="orders", consumer_group="oneoff", member_id="o",
                member_epoch=epoch, owned_shards=() if epoch == JOIN_EPOCH else None))
            assert answer.status == Status.OK
        with trio.fail_after(10):
            while True:
                shown = await admin.request(m.DescribeGroup(
                    request_id=0, stream_prefix="orders", consumer_group="oneoff"))
                assert isinstance(shown, m.GroupDescription)
                if shown.expires_at_ms is not None:
                    break
                await trio.sleep(0.05)
        stored = json.loads(client.hget("rsc:meta:{orders}", field) or "{}")
        assert stored and "emptySinceMs" not in stored  # format 1: kept in memory only
        raised = await admin.request(m.SetFormatVersion(request_id=0, format_version=2))
        assert raised.status == Status.OK, raised
        with trio.fail_after(20):
            while "emptySinceMs" not in json.loads(client.hget("rsc:meta:{orders}", field) or "{}"):
                await trio.sleep(0.05)
        stored = json.loads(client.hget("rsc:meta:{orders}", field) or "{}")
        assert stored["emptySinceMs"] == shown.expires_at_ms - 604_800_000
    client.close()


def test_p2_an_expired_group_says_its_dead_letters_are_kept():
    driven = driver()
    ok(driven.one(set_shards(2)))  # registered, never joined: empty from the start
    driven.tick()
    driven.now = RETENTION_MS
    batch = driven.tick()
    assert batch.committed is not None
    [(name, event)] = batch.committed.events
    assert (name, event.kind) == (GROUP, "group_expired")
    assert event.fields["dead_letters"] == "kept"  # in the group.expired log line (B6)
