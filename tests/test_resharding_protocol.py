"""Resharding at the protocol level (R1..R4): real Redis, real coordinator, simulated members.

Messages are written and consumed with plain redis-py here so each drain step
is explicit; the data-plane tests with producers and consumers running the
whole time are in test_resharding_data.py.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import pytest
import redis
import trio

from rsc.member.session import open_session
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.routing import owner_key, seal_key
from rsc.protocol.vocabulary import LEAVE_EPOCH, Cutover, MigrationState
from tests.sim_member import SimMember, assert_no_shard_held_twice

PREFIX, GROUP = "orders", "billing"


async def admin_request(url: str, message: m.Message) -> m.Message:
    async with open_session(url, "admin") as admin:
        return await admin.request(message)


def set_count(count: int, cutover: Cutover = Cutover.PARALLEL, group: str = GROUP) -> m.SetShardCount:
    return m.SetShardCount(request_id=0, stream_prefix=PREFIX, consumer_group=group,
                           shard_count=count, cutover=cutover)


def describe() -> m.DescribeGroup:
    return m.DescribeGroup(request_id=0, stream_prefix=PREFIX, consumer_group=GROUP)


async def beat_until(sessions, members, done, timeout: float = 15) -> None:
    """Heartbeat every member (checking H3 after each answer) until `done()` holds."""
    with trio.fail_after(timeout):
        while not done():
            for member in members:
                await member.beat(sessions[member.member_id])
                assert_no_shard_held_twice(members)
            await trio.sleep(0.02)


def drain(client: redis.Redis, streams, consumer: str = "c") -> int:
    """Read and ack everything in `streams` for GROUP (what members' data planes do)."""
    total = 0
    for stream in streams:
        while True:
            batch: Any = client.xreadgroup(GROUP, consumer, {stream: ">"}, count=500)
            ids = [entry_id for _, entries in batch for entry_id, _ in entries]
            if not ids:
                break
            client.xack(stream, GROUP, *ids)
            total += len(ids)
    return total


@pytest.fixture
def client(redis_url):
    c = redis.Redis.from_url(redis_url, decode_responses=True)
    yield c
    c.close()


async def test_r1_new_version_streams_groups_seal_routing_push_and_epoch(coordinator, client):
    first = await admin_request(coordinator.url, set_count(4))
    for stream in first.routing.streams:  # undelivered data keeps v1 (and its seals) alive
        client.xadd(stream, {"key": "x"})
    async with open_session(coordinator.url, "member") as producer:
        await producer.request(m.GetRouting(request_id=0, stream_prefix=PREFIX, subscribe=True))
        before = await admin_request(coordinator.url, describe())
        changed = await admin_request(coordinator.url, set_count(8))
        assert changed.status == Status.OK
        assert changed.routing.version == 2 and changed.routing.shard_count == 8
        assert changed.migration.from_version == 1 and changed.migration.to_version == 2
        assert changed.migration.cutover == Cutover.PARALLEL
        with trio.fail_after(5):
            push = await producer.pushes.receive()
        assert push.version == 2 and push.streams == changed.routing.streams
    for stream in changed.routing.streams:
        assert {g["name"] for g in client.xinfo_groups(stream)} == {GROUP}
    for stream in first.routing.streams:
        assert client.exists(seal_key(stream)) == 1
    after = await admin_request(coordinator.url, describe())
    assert after.group_epoch > before.group_epoch


async def test_r4_one_migration_at_a_time_and_same_count_is_a_no_op(coordinator, client):
    await admin_request(coordinator.url, set_count(2))
    client.xadd("{orders:v1:0}", {"k": "v"})  # keeps v1 from draining
    changed = await admin_request(coordinator.url, set_count(3))
    assert changed.status == Status.OK
    same = await admin_request(coordinator.url, set_count(3))
    assert same.status == Status.OK and same.routing == changed.routing
    busy = await admin_request(coordinator.url, set_count(5))
    assert busy.status == Status.MIGRATION_IN_PROGRESS and "migrating" in busy.error


async def test_r2_old_shards_stay_until_drained_then_leave_by_revoke_and_are_retired(coordinator, client):
    old = (await admin_request(coordinator.url, set_count(2))).routing.streams
    members = [SimMember("a", PREFIX, GROUP), SimMember("b", PREFIX, GROUP)]
    async with AsyncExitStack() as stack:
        sessions = {mb.member_id: await stack.enter_async_context(open_session(coordinator.url, "member"))
                    for mb in members}
        await beat_until(sessions, members, lambda: all(len(mb.held) == 1 for mb in members))
        for i in range(10):
            client.xadd(old[i % 2], {"key": str(i)})
        new = (await admin_request(coordinator.url, set_count(4))).routing.streams
        # parallel: new shards assigned at once, the undrained old ones stay with their owners
        await beat_until(sessions, members,
                         lambda: sum(len(mb.held) for mb in members) == 6)
        holders = {shard: mb.member_id for mb in members for shard in mb.held}
        d = await admin_request(coordinator.url, describe())
        assert d.migration.state == MigrationState.DRAINING and d.migration.remaining_shards == old
        # drain one old shard fully: it leaves; the other keeps its owner
        drain(client, [old[0]])
        await beat_until(sessions, members, lambda: old[0] not in {s for mb in members for s in mb.held})
        assert any(old[1] in mb.held for mb in members)
        assert holders[old[1]] in [mb.member_id for mb in members if old[1] in mb.held]
        d = await admin_request(coordinator.url, describe())
        assert d.migration.drained_shards == (old[0],) and d.migration.remaining_shards == (old[1],)
        drain(client, [old[1]])
        await beat_until(sessions, members,
                         lambda: {s for mb in members for s in mb.held} == set(new)
                         and sorted(len(mb.held) for mb in members) == [2, 2])
        # once nobody holds them, the old streams are retired and the migration is gone
        with trio.fail_after(10):
            while (await admin_request(coordinator.url, describe())).migration is not None:
                for member in members:
                    await member.beat(sessions[member.member_id])
                await trio.sleep(0.05)
    assert all(client.exists(s, seal_key(s), owner_key(s, GROUP)) == 0 for s in old)


async def test_r2_pending_entries_keep_a_shard_from_draining(coordinator, client):
    old = (await admin_request(coordinator.url, set_count(1))).routing.streams
    client.xadd(old[0], {"key": "x"})
    client.xreadgroup(GROUP, "c", {old[0]: ">"}, count=10)  # delivered, not acked
    await admin_request(coordinator.url, set_count(2))
    await trio.sleep(0.3)  # several drain checks (tick 50 ms) must not drain it
    d = await admin_request(coordinator.url, describe())
    assert d.migration.remaining_shards == old
    entry_id = client.xpending_range(old[0], GROUP, "-", "+", 10)[0]["message_id"]
    client.xack(old[0], GROUP, entry_id)
    with trio.fail_after(10):
        while (await admin_request(coordinator.url, describe())).migration is not None:
            await trio.sleep(0.05)


async def test_r3_ordered_cutover_assigns_new_shards_only_after_all_old_are_drained(coordinator, client):
    old = (await admin_request(coordinator.url, set_count(2))).routing.streams
    client.xadd(old[1], {"key": "late"})
    members = [SimMember("a", PREFIX, GROUP)]
    async with open_session(coordinator.url, "member") as session:
        sessions = {"a": session}
        await beat_until(sessions, members, lambda: members[0].held == set(old))
        new = (await admin_request(coordinator.url, set_count(3, cutover=Cutover.ORDERED))).routing.streams
        await beat_until(sessions, members, lambda: members[0].held == {old[1]})
        for _ in range(5):  # new shards stay unassigned while v1 still has undelivered data
            response = await members[0].beat(session)
            assert not set(new) & set(response.assignment.assigned_shards)
            assert not set(new) & set(response.assignment.pending_shards)
            await trio.sleep(0.05)
        drain(client, [old[1]])
        await beat_until(sessions, members, lambda: members[0].held == set(new))


async def test_r2_restart_in_the_middle_of_a_migration_completes_it(coordinator_factory, client):
    first = await coordinator_factory()
    old = (await admin_request(first.url, set_count(2))).routing.streams
    client.xadd(old[0], {"key": "x"})
    await admin_request(first.url, set_count(3))
    await first.stop()
    second = await coordinator_factory()
    d = await admin_request(second.url, describe())
    assert d.migration is not None and d.migration.remaining_shards == (old[0],)
    assert d.routing.version == 2
    drain(client, [old[0]])
    with trio.fail_after(10):
        while (await admin_request(second.url, describe())).migration is not None:
            await trio.sleep(0.05)
    assert client.exists(*old) == 0


async def test_r4_once_describe_shows_complete_the_next_set_shard_count_is_accepted(
        coordinator_factory, client):
    coordinator = await coordinator_factory(lease_ttl_ms=30_000)  # a keeps its v1 shards
    old = (await admin_request(coordinator.url, set_count(2))).routing.streams
    member = SimMember("a", PREFIX, GROUP)
    async with open_session(coordinator.url, "member") as session:
        await beat_until({"a": session}, [member], lambda: member.held == set(old))
        middle = (await admin_request(coordinator.url, set_count(3))).routing.streams
        with trio.fail_after(10):  # nothing to drain: COMPLETE, not retired (a holds v1)
            while ((await admin_request(coordinator.url, describe())).migration.state
                   != MigrationState.COMPLETE):
                await trio.sleep(0.02)
        changed = await admin_request(coordinator.url, set_count(1))
        assert changed.status == Status.OK, changed
        assert changed.routing.version == 3
        assert (changed.migration.from_version, changed.migration.to_version) == (2, 3)
        # a lets go of what it is asked to: v1 and v2 are retired once drained and released
        await beat_until({"a": session}, [member], lambda: member.held == set(changed.routing.streams))
        with trio.fail_after(10):
            while (await admin_request(coordinator.url, describe())).migration is not None:
                await member.beat(session)
                await trio.sleep(0.05)
    assert client.exists(*old, *middle) == 0
    assert client.exists(*changed.routing.streams) == 1


def group_names(client: redis.Redis, stream: str) -> set[str]:
    infos: Any = client.xinfo_groups(stream)
    return {info["name"] for info in infos}


async def test_g1_set_shards_with_a_typo_group_is_unknown_group_and_creates_nothing(coordinator, client):
    old = (await admin_request(coordinator.url, set_count(2))).routing.streams
    typo = await admin_request(coordinator.url, set_count(4, group="x:y"))
    assert typo.status == Status.UNKNOWN_GROUP and "x:y" in typo.error
    assert all(group_names(client, s) == {GROUP} for s in old)
    d = await admin_request(coordinator.url, describe())
    assert d.routing.shard_count == 2 and d.migration is None
    async with open_session(coordinator.url, "admin") as admin:
        groups = await admin.request(m.ListGroups(request_id=0))
    assert [g.consumer_group for g in groups.groups] == [GROUP]
    unnamed = await admin_request(coordinator.url, m.SetShardCount(
        request_id=0, stream_prefix=PREFIX, shard_count=3))
    assert unnamed.status == Status.OK and unnamed.consumer_group is None
    assert unnamed.routing.version == 2


async def test_g1_g2_an_orphan_group_blocks_the_drain_is_named_then_deleted_and_it_completes(
        coordinator, client):
    old = (await admin_request(coordinator.url, set_count(2, group="orphan"))).routing.streams
    member = SimMember("a", PREFIX, GROUP)
    async with open_session(coordinator.url, "member") as session:
        await beat_until({"a": session}, [member], lambda: member.held == set(old))
        for i in range(6):
            client.xadd(old[i % 2], {"key": str(i)})
        drain(client, old)  # billing consumed everything; orphan never will
        new = (await admin_request(coordinator.url, set_count(3))).routing.streams
        with trio.fail_after(10):
            while not (await admin_request(coordinator.url, describe())).migration.blocking_groups:
                await member.beat(session)
                await trio.sleep(0.02)
        migration = (await admin_request(coordinator.url, describe())).migration
        assert migration.state == MigrationState.DRAINING
        assert migration.blocking_groups == (
            m.BlockingGroup(consumer_group="orphan", undelivered=6, pending=0),)
        busy = await admin_request(coordinator.url, m.DeleteGroup(
            request_id=0, stream_prefix=PREFIX, consumer_group=GROUP))
        assert busy.status == Status.GROUP_NOT_EMPTY
        deleted = await admin_request(coordinator.url, m.DeleteGroup(
            request_id=0, stream_prefix=PREFIX, consumer_group="orphan"))
        assert deleted.status == Status.OK, deleted
        gone = await admin_request(coordinator.url, m.DescribeGroup(
            request_id=0, stream_prefix=PREFIX, consumer_group="orphan"))
        assert gone.status == Status.UNKNOWN_GROUP
        assert all("orphan" not in group_names(client, s) for s in (*old, *new))
        await beat_until({"a": session}, [member], lambda: member.held == set(new))
        with trio.fail_after(10):
            while (await admin_request(coordinator.url, describe())).migration is not None:
                await member.beat(session)
                await trio.sleep(0.05)
    assert client.exists(*old) == 0
    assert all(group_names(client, s) == {GROUP} for s in new)


def reset(to: m.ResetTo, timestamp_ms: int | None = None) -> m.ResetOffsets:
    return m.ResetOffsets(request_id=0, stream_prefix=PREFIX, consumer_group=GROUP, to=to,
                          timestamp_ms=timestamp_ms)


def group_info(client: redis.Redis, stream: str) -> dict[str, Any]:
    infos: Any = client.xinfo_groups(stream)
    return next(info for info in infos if info["name"] == GROUP)


async def test_g3_reset_offsets_refused_with_live_members_then_to_earliest_latest_and_a_timestamp(
        coordinator, client):
    streams = (await admin_request(coordinator.url, set_count(2))).routing.streams
    ids = {stream: [client.xadd(stream, {"key": str(i)}, id=f"{1000 * (i + 1)}-0")
                    for i in range(3)] for stream in streams}
    client.xreadgroup(GROUP, "c", {stream: ">" for stream in streams})  # 3 pending on each
    member = SimMember("a", PREFIX, GROUP)
    async with open_session(coordinator.url, "member") as session:
        await member.beat(session)
        busy = await admin_request(coordinator.url, reset("earliest"))
        assert busy.status == Status.GROUP_NOT_EMPTY and "live member" in busy.error
        assert group_info(client, streams[0])["pending"] == 3
        left = await session.request(m.Heartbeat(
            request_id=0, stream_prefix=PREFIX, consumer_group=GROUP, member_id="a",
            member_epoch=LEAVE_EPOCH))
        assert left.status == Status.OK
    earliest = await admin_request(coordinator.url, reset("earliest"))
    assert earliest.status == Status.OK, earliest
    assert earliest.shards == tuple(m.ShardOffset(shard=s, last_delivered_id="0-0") for s in streams)
    for stream in streams:
        info = group_info(client, stream)
        assert info["pending"] == 0 and info["last-delivered-id"] == "0-0"
    latest = await admin_request(coordinator.url, reset("latest"))
    assert [s.last_delivered_id for s in latest.shards] == ["3000-0", "3000-0"]
    assert client.xreadgroup(GROUP, "c", {streams[0]: ">"}) == []
    moved = await admin_request(coordinator.url, reset("timestamp", 2000))
    assert [s.last_delivered_id for s in moved.shards] == ["1999-18446744073709551615"] * 2
    batch: Any = client.xreadgroup(GROUP, "c", {streams[0]: ">"})
    assert [entry_id for entry_id, _ in batch[0][1]] == ids[streams[0]][1:]
    future = await admin_request(coordinator.url, reset("timestamp", 10**12))
    assert [s.last_delivered_id for s in future.shards] == ["3000-0", "3000-0"]  # like latest
    unknown = await admin_request(coordinator.url, m.ResetOffsets(
        request_id=0, stream_prefix=PREFIX, consumer_group="ghost", to="latest"))
    assert unknown.status == Status.UNKNOWN_GROUP


def test_r1_stream_admin_seals_and_unseals(client):
    from rsc.actors.redis_io.store import StreamAdmin

    admin = StreamAdmin(client)
    streams = ("{orders:v1:0}", "{orders:v1:1}")
    admin.seal(streams)
    assert client.exists(*(seal_key(s) for s in streams)) == 2
    admin.unseal(streams)
    assert client.exists(*(seal_key(s) for s in streams)) == 0
