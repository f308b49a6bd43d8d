"""describeGroup watches and storeId against a real coordinator, redis-server and websockets.

docs/protocol.md Admin (watch pushes, at most 10 a second, UNKNOWN_GROUP ends them,
A1: they live only as long as their session) and Producer routing (storeId).
"""

from __future__ import annotations

import json

import redis
import trio

from rsc.actors.redis_io.shard_ops import STORE_ID_KEY, ensure_store_id
from rsc.member.session import Session, SessionClosed, open_session
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import JOIN_EPOCH, LEAVE_EPOCH
from tests.helpers.actors import live_watch_count

PREFIX, GROUP = "orders", "billing"


def join(member_id: str, group: str = GROUP) -> m.Heartbeat:
    return m.Heartbeat(request_id=0, stream_prefix=PREFIX, consumer_group=group,
                       member_id=member_id, member_epoch=JOIN_EPOCH, owned_shards=())


def leave(member_id: str) -> m.Heartbeat:
    return m.Heartbeat(request_id=0, stream_prefix=PREFIX, consumer_group=GROUP,
                       member_id=member_id, member_epoch=LEAVE_EPOCH)


def watch(group: str = GROUP) -> m.DescribeGroup:
    return m.DescribeGroup(request_id=0, stream_prefix=PREFIX, consumer_group=group, watch=True)


async def set_shards(admin: Session, count: int) -> None:
    response = await admin.request(m.SetShardCount(request_id=0, stream_prefix=PREFIX,
                                                   consumer_group=GROUP, shard_count=count))
    assert isinstance(response, m.ShardCountChanged) and response.status == Status.OK, response


async def start_watch(admin: Session, group: str = GROUP) -> m.GroupDescription:
    """A watch of `group`, answered OK. D4: a store call past its deadline (a loaded machine, a
    long collection in this process) answers COORDINATOR_NOT_AVAILABLE and starts no watch; a
    client retries that, and so does this."""
    with trio.fail_after(10):
        while True:
            response = await admin.request(watch(group))
            if not (isinstance(response, m.GroupDescription)
                    and response.status == Status.COORDINATOR_NOT_AVAILABLE):
                break
            await trio.sleep(0.05)
    assert isinstance(response, m.GroupDescription) and response.status == Status.OK, response
    return response


async def next_push(session: Session, timeout: float = 5) -> m.GroupDescription:
    with trio.fail_after(timeout):
        push = await session.pushes.receive()
    assert isinstance(push, m.GroupDescription) and push.request_id is None, push
    return push


async def push_where(session: Session, condition, timeout: float = 5) -> m.GroupDescription:
    with trio.fail_after(timeout):
        while True:
            push = await next_push(session, timeout)
            if condition(push):
                return push


async def test_watch_answers_then_pushes_a_join_and_a_removal(coordinator):
    async with open_session(coordinator.url, "admin") as admin, \
            open_session(coordinator.url, "member") as member:
        await set_shards(admin, 2)
        first = await start_watch(admin)
        assert first.request_id is not None and first.members == ()
        joined = await member.request(join("a"))
        assert joined.status == Status.OK
        push = await push_where(admin, lambda p: [d.member_id for d in p.members] == ["a"])
        assert push.stream_prefix == PREFIX and push.consumer_group == GROUP
        removed = await admin.request(m.RemoveMember(request_id=0, stream_prefix=PREFIX,
                                                     consumer_group=GROUP, member_id="a"))
        assert removed.status == Status.OK
        gone = await push_where(admin, lambda p: p.members == ())
        assert gone.group_epoch is not None and push.group_epoch is not None
        assert gone.group_epoch > push.group_epoch


async def test_a_burst_of_changes_is_pushed_at_most_ten_times_a_second(coordinator_factory):
    coordinator = await coordinator_factory(lease_ttl_ms=60_000)  # members join once and stay
    async with open_session(coordinator.url, "admin") as admin, \
            open_session(coordinator.url, "member") as member:
        await set_shards(admin, 4)
        await start_watch(admin)
        started = trio.current_time()
        joins = 0
        while joins < 30 or trio.current_time() - started < 1.0:  # a change every round trip
            response = await member.request(join(f"m{joins}"))
            assert response.status == Status.OK
            joins += 1
        pushes: list[m.GroupDescription] = []
        while not pushes or len(pushes[-1].members) < joins:  # the latest state comes last
            pushes.append(await next_push(admin))
        elapsed = trio.current_time() - started
        # 10 a second, plus one for the last state after the burst
        assert 2 <= len(pushes) <= 10 * elapsed + 1, (len(pushes), elapsed, joins)
        counts = [len(push.members) for push in pushes]
        assert counts == sorted(set(counts)) and counts[-1] == joins


async def test_last_push_is_unknown_group_after_delete_and_the_watch_ends(coordinator):
    async with open_session(coordinator.url, "admin") as admin, \
            open_session(coordinator.url, "member") as member:
        await set_shards(admin, 2)
        joined = await member.request(join("a"))
        assert isinstance(joined, m.HeartbeatResponse) and joined.member_epoch is not None
        await start_watch(admin)
        assert live_watch_count() == 1
        left = await member.request(leave("a"))
        assert left.status == Status.OK
        await push_where(admin, lambda p: p.members == ())
        deleted = await admin.request(m.DeleteGroup(request_id=0, stream_prefix=PREFIX,
                                                    consumer_group=GROUP))
        assert deleted.status == Status.OK, deleted
        last = await push_where(admin, lambda p: p.status != Status.OK)
        assert last.status == Status.UNKNOWN_GROUP and last.request_id is None
        assert live_watch_count() == 0
        # the group comes back: nobody watches it any more, so nothing is pushed
        assert (await member.request(join("b"))).status == Status.OK
        described = await admin.request(m.DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                                        consumer_group=GROUP))
        assert [d.member_id for d in described.members] == ["b"]  # type: ignore[attr-defined]
        assert admin.pushes.statistics().current_buffer_used == 0


async def test_a_watch_dies_with_its_session(coordinator):
    async with open_session(coordinator.url, "member") as member:
        async with open_session(coordinator.url, "admin") as admin:
            await set_shards(admin, 2)
            await start_watch(admin)
            await admin.request(watch("audit"))  # a group never seen: answered, not watched
            assert live_watch_count() == 1
        with trio.fail_after(5):
            while live_watch_count():
                await trio.sleep(0.01)
        assert (await member.request(join("a"))).status == Status.OK  # no session to push to
        assert live_watch_count() == 0


async def test_watch_of_an_unknown_group_is_answered_unknown_group_and_nothing_more(coordinator):
    async with open_session(coordinator.url, "admin") as admin:
        response = await admin.request(watch())
        assert response.status == Status.UNKNOWN_GROUP
        assert live_watch_count() == 0


# --- storeId ------------------------------------------------------------------------------


async def test_routing_and_heartbeat_routing_carry_the_store_id_of_the_redis(coordinator):
    client = redis.Redis.from_url(coordinator.redis_url, decode_responses=True)
    try:
        assert client.get(STORE_ID_KEY) is None  # K8: none until routing exists or a client presents one
        async with open_session(coordinator.url, "admin") as admin, \
                open_session(coordinator.url, "member") as member:
            await set_shards(admin, 2)  # the first routing of a new store: a new storeId
            with trio.fail_after(5):
                while (stored := client.get(STORE_ID_KEY)) is None:
                    await trio.sleep(0.02)
            assert len(stored) == 32
            routing = await member.request(m.GetRouting(request_id=0, stream_prefix=PREFIX))
            assert isinstance(routing, m.Routing) and routing.store_id == stored
            joined = await member.request(join("a"))
            assert isinstance(joined, m.HeartbeatResponse) and joined.routing is not None
            assert joined.routing.store_id == stored
            client.delete(STORE_ID_KEY)  # K3: a store that went back; written back within a tick
            with trio.fail_after(5):  # written again, the same id, a few ticks later
                while client.get(STORE_ID_KEY) is None:
                    await trio.sleep(0.02)
            assert client.get(STORE_ID_KEY) == stored
        # the write-back closed the sessions (as a restart does): a new one sees the same id
        with trio.fail_after(10):
            while True:
                try:
                    async with open_session(coordinator.url, "member") as member:
                        again = await member.request(m.GetRouting(request_id=0, stream_prefix=PREFIX))
                    break
                except (OSError, SessionClosed):  # refused while the write-back runs
                    await trio.sleep(0.05)
        assert isinstance(again, m.Routing) and again.store_id == stored
    finally:
        client.close()


async def test_a_restarted_coordinator_keeps_the_store_id(coordinator, coordinator_factory):
    client = redis.Redis.from_url(coordinator.redis_url, decode_responses=True)
    try:
        async with open_session(coordinator.url, "admin") as admin:
            await set_shards(admin, 1)  # K8: a store gets its storeId with its first routing
        with trio.fail_after(5):
            while (stored := client.get(STORE_ID_KEY)) is None:
                await trio.sleep(0.02)
        await coordinator.stop()
        restarted = await coordinator_factory()
        async with open_session(restarted.url, "member") as member:
            routing = await member.request(m.GetRouting(request_id=0, stream_prefix=PREFIX))
        assert isinstance(routing, m.Routing) and routing.store_id == stored
    finally:
        client.close()


def test_ensure_store_id_writes_once_keeps_what_redis_holds_and_rewrites_the_known_one(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        client.delete(STORE_ID_KEY)
        first = ensure_store_id(client)
        assert client.get(STORE_ID_KEY) == first
        assert ensure_store_id(client) == first  # never overwritten
        client.delete(STORE_ID_KEY)
        assert ensure_store_id(client, first) == first  # missing: the same id again
        client.set(STORE_ID_KEY, "someone-else")
        assert ensure_store_id(client, first) == "someone-else"  # what Redis holds wins
    finally:
        client.delete(STORE_ID_KEY)
        client.close()


async def test_rsc_admin_watch_follows_the_real_coordinators_pushes(coordinator_factory, nursery):
    """`rsc admin watch` with a 5 s poll interval sees three changes at once: pushes, no polls."""
    from tests.test_admin_cli import Output, rsc_admin, wait_for_lines

    coordinator = await coordinator_factory(lease_ttl_ms=60_000)
    output = Output()
    finished = trio.Event()
    result: dict[str, tuple[int, str, str]] = {}

    async def run_watch() -> None:
        result["watch"] = await rsc_admin(coordinator.url, "watch", PREFIX, GROUP, "--json",
                                          "--interval", "5", "--changes", "3", "--duration", "25",
                                          stdout=output)
        finished.set()

    async with open_session(coordinator.url, "admin") as admin, \
            open_session(coordinator.url, "member") as member:
        await set_shards(admin, 2)
        with trio.fail_after(8):  # polling every 5 s could not see three changes in time
            nursery.start_soon(run_watch)
            await wait_for_lines(output, 1)
            assert (await member.request(join("a"))).status == Status.OK
            await wait_for_lines(output, 2)
            changed = await admin.request(m.SetMaxConcurrency(
                request_id=0, stream_prefix=PREFIX, consumer_group=GROUP, max_concurrency=3))
            assert changed.status == Status.OK
            await finished.wait()
    code, _, err = result["watch"]
    assert (code, err) == (0, "")
    lines = [json.loads(line) for line in output.lines()]
    assert [len(line["members"]) for line in lines] == [0, 1, 1]
    assert lines[-1]["maxConcurrency"] == 3
