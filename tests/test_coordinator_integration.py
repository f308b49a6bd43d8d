"""The coordinator end to end: a real redis-server, a real coordinator, real websockets.

Rules of docs/protocol.md that need the shell (transport, durability, pushes,
restart, admin) are tested here; the pure rules are in test_group_rules.py.
"""

from __future__ import annotations

import json

import pytest
import redis
import trio
from trio_websocket import ConnectionClosed, ConnectionRejected, open_websocket_url

from rsc.actors.app import serve
from rsc.actors.config import CoordinatorConfig
from rsc.actors.core.records import GroupSnapshot
from rsc.actors.redis_io.store import MetadataStore
from rsc.common.redis_server import EmbeddedRedis
from rsc.member.session import SessionClosed, open_session
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.routing import owner_key
from rsc.protocol.vocabulary import GroupState, RevokeState

PREFIX, GROUP = "orders", "billing"


def heartbeat(member_id: str, epoch: int, *, owned: list[str] | None = None,
              revoked: tuple[str, ...] = (), capacity: int | None = None, group: str = GROUP) -> m.Heartbeat:
    return m.Heartbeat(
        request_id=0, stream_prefix=PREFIX, consumer_group=group, member_id=member_id,
        member_epoch=epoch, capacity=capacity,
        owned_shards=None if owned is None else tuple(owned),
        revoking_shards=tuple(m.RevokingShard(shard=s, state=RevokeState.REVOKED) for s in revoked))


async def set_shards(url: str, count: int, group: str = GROUP) -> m.ShardCountChanged:
    async with open_session(url, "admin") as admin:
        response = await admin.request(m.SetShardCount(
            request_id=0, stream_prefix=PREFIX, consumer_group=group, shard_count=count))
    assert isinstance(response, m.ShardCountChanged) and response.status == Status.OK, response
    return response


def stored_group(redis_url: str, group: str = GROUP) -> GroupSnapshot:
    store = MetadataStore(redis_url, lease_ms=1000)
    try:
        snapshot = store.load_all()[PREFIX]
        assert store.load_prefix(PREFIX) == snapshot and store.load_prefix("nothing") is None
        return snapshot.groups[group]
    finally:
        store.close()


# --- transport -------------------------------------------------------------------------


async def test_transport_unknown_path_is_refused_with_404(coordinator):
    with pytest.raises(ConnectionRejected) as refused:
        async with open_websocket_url(coordinator.url + "/v2/member"):
            pass
    assert refused.value.status_code == 404


async def test_transport_bearer_tokens_guard_each_endpoint(coordinator_factory):
    secured = await coordinator_factory(admin_token="adm1n", member_token="m3mber")
    for endpoint in ("admin", "member"):
        with pytest.raises(SessionClosed, match="401"):
            async with open_session(secured.url, endpoint):
                pass
        with pytest.raises(SessionClosed, match="401"):
            async with open_session(secured.url, endpoint, token="wrong"):
                pass
    async with open_session(secured.url, "admin", token="adm1n") as admin:
        assert (await admin.request(m.ListGroups(request_id=0))).status == Status.OK
    async with open_session(secured.url, "member", token="m3mber") as member:
        assert (await member.request(heartbeat("a", 0))).status == Status.OK


async def test_transport_malformed_frames_get_invalid_request_naming_the_field(coordinator):
    async with open_websocket_url(coordinator.url + "/v1/member") as ws:
        cases = [
            ("not json", None, "not valid JSON"),
            ("[1, 2]", None, "JSON object"),
            (json.dumps({"type": "heartbeat", "requestId": 5}), 5, "streamPrefix"),
            (json.dumps({"type": "listGroups", "requestId": 6}), 6, "type"),
            (json.dumps({"type": "heartbeat", "requestId": 7, "streamPrefix": "orders",
                         "consumerGroup": "billing", "memberId": "a", "memberEpoch": "1"}),
             7, "memberEpoch"),
            (json.dumps({"type": "heartbeat", "requestId": 8, "streamPrefix": "orders",
                         "consumerGroup": "billing", "memberId": "a", "memberEpoch": -3}),
             8, "memberEpoch"),
        ]
        for text, request_id, named in cases:
            await ws.send_message(text)
            reply = json.loads(await ws.get_message())
            assert reply["type"] == "error"
            assert reply["status"] == "INVALID_REQUEST"
            assert reply["requestId"] == request_id
            assert named in reply["error"]
        await ws.send_message(b"\x00binary")
        reply = json.loads(await ws.get_message())
        assert reply["status"] == "INVALID_REQUEST" and "binary" in reply["error"]
        # the session is still open and serves a good request
        await ws.send_message(json.dumps({"type": "getRouting", "requestId": 9, "streamPrefix": "x"}))
        reply = json.loads(await ws.get_message())
        assert reply == {**reply, "type": "routing", "requestId": 9, "status": "UNKNOWN_STREAM"}


async def test_transport_join_listing_shards_is_invalid_and_changes_nothing(coordinator):
    async with open_session(coordinator.url, "member") as session:
        response = await session.request(heartbeat("a", 0, owned=["{orders:v1:0}"]))
        assert response.status == Status.INVALID_REQUEST
        assert "ownedShards" in response.error
    async with open_session(coordinator.url, "admin") as admin:
        description = await admin.request(m.DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                                          consumer_group=GROUP))
    assert description.members == ()


async def test_transport_oversized_frame_closes_with_1009_and_others_are_unaffected(coordinator_factory):
    small = await coordinator_factory(max_frame_bytes=1000)
    async with open_session(small.url, "member") as bystander:
        async with open_websocket_url(small.url + "/v1/member") as ws:
            await ws.send_message(json.dumps({"type": "getRouting", "requestId": 1,
                                              "streamPrefix": "x" * 2000}))
            with pytest.raises(ConnectionClosed) as closed:
                with trio.fail_after(5):
                    await ws.get_message()
            assert closed.value.reason.code == 1009
        assert (await bystander.request(heartbeat("a", 0))).status == Status.OK


async def test_transport_responses_come_in_request_order_when_pipelined(coordinator):
    await set_shards(coordinator.url, 2)
    async with open_websocket_url(coordinator.url + "/v1/member") as ws:
        for request_id in range(1, 21):
            kind = request_id % 3
            if kind == 0:
                body = {"type": "getRouting", "requestId": request_id, "streamPrefix": PREFIX}
            elif kind == 1:
                body = {"type": "heartbeat", "requestId": request_id, "streamPrefix": PREFIX,
                        "consumerGroup": GROUP, "memberId": f"m{request_id}", "memberEpoch": 0}
            else:
                body = {"type": "heartbeat", "requestId": request_id}  # malformed
            await ws.send_message(json.dumps(body))
        ids: list[int] = []
        with trio.fail_after(10):
            while len(ids) < 20:
                frame = json.loads(await ws.get_message())
                if "requestId" in frame:  # pushes (no requestId) may come in between
                    ids.append(frame["requestId"])
    assert ids == list(range(1, 21))


# --- heartbeat over the wire -----------------------------------------------------------


async def test_h13_member_joins_before_routing_then_gets_shards_when_they_exist(coordinator):
    async with open_session(coordinator.url, "member") as session:
        joined = await session.request(heartbeat("a", 0, capacity=2))
        assert joined.status == Status.OK and joined.routing is None
        assert joined.assignment.assigned_shards == ()
        routing = await set_shards(coordinator.url, 3)
        with trio.fail_after(5):
            push = await session.pushes.receive()
        assert isinstance(push, m.AssignmentChanged) and push.member_id == "a"
        response = await session.request(heartbeat("a", joined.member_epoch, owned=[]))
        assert response.status == Status.OK
        assert response.assignment.assigned_shards == routing.routing.streams
        assert (response.routing.version, response.routing.shard_count) == (1, 3)
        assert response.routing.store_id and response.routing.retention == m.Retention()


async def test_h10_push_tells_a_member_its_answer_changed_but_not_the_cause(coordinator):
    await set_shards(coordinator.url, 4)
    async with open_session(coordinator.url, "member") as a, open_session(coordinator.url, "member") as b:
        a_join = await a.request(heartbeat("a", 0))
        assert len(a_join.assignment.assigned_shards) == 4
        b_join = await b.request(heartbeat("b", 0))
        assert b_join.assignment.assigned_shards == () and len(b_join.assignment.pending_shards) == 2
        with trio.fail_after(5):
            push = await a.pushes.receive()
        assert push == m.AssignmentChanged(stream_prefix=PREFIX, consumer_group=GROUP, member_id="a",
                                           group_epoch=b_join.group_epoch)
        revoke = await a.request(heartbeat("a", a_join.member_epoch))
        assert revoke.status == Status.REVOKE_PENDING
        released = sorted(set(a_join.assignment.assigned_shards) - set(revoke.assignment.assigned_shards))
        done = await a.request(heartbeat("a", a_join.member_epoch,
                                         owned=list(revoke.assignment.assigned_shards), revoked=released))
        assert done.status == Status.OK and done.member_epoch == b_join.group_epoch
        # b waits for the freed shards; the release pushes b, not a
        with trio.fail_after(5):
            push_b = await b.pushes.receive()
        assert push_b.member_id == "b"
        assert a.pushes.statistics().current_buffer_used == 0
        got = await b.request(heartbeat("b", b_join.member_epoch))
        assert sorted(got.assignment.assigned_shards) == released


async def _push_at(session, epoch: int) -> m.AssignmentChanged:
    """The next push that names `epoch` or a later one (earlier hints may still be queued)."""
    with trio.fail_after(5):
        while True:
            push = await session.pushes.receive()
            if push.group_epoch >= epoch:
                return push


async def test_h10_catch_up_brings_newcomers_behind_a_settled_epoch_to_stable(coordinator_factory):
    # a 30 s interval: no member would reach the epoch with a regular heartbeat before the
    # test ends, and these raw sessions never beat on their own anyway
    slow = await coordinator_factory(heartbeat_interval_ms=30_000, lease_ttl_ms=60_000)
    await set_shards(slow.url, 2)
    async with open_session(slow.url, "member") as a, open_session(slow.url, "member") as b, \
            open_session(slow.url, "member") as c, open_session(slow.url, "member") as d, \
            open_session(slow.url, "admin") as admin:
        a_join = await a.request(heartbeat("a", 0))
        b_join = await b.request(heartbeat("b", 0))  # a must give b a shard: nobody is STABLE
        c_join = await c.request(heartbeat("c", 0))  # 2 shards, 3 members: c gets none
        d_join = await d.request(heartbeat("d", 0))  # nor does d; c's target stays as it was
        assert c_join.assignment.assigned_shards == d_join.assignment.assigned_shards == ()
        assert c_join.member_epoch < d_join.group_epoch  # c is behind, and no bump pushes it
        revoke = await a.request(heartbeat("a", a_join.member_epoch))
        kept = list(revoke.assignment.assigned_shards)
        released = tuple(sorted(set(a_join.assignment.assigned_shards) - set(kept)))
        a_done = await a.request(heartbeat("a", a_join.member_epoch, owned=kept, revoked=released))
        await _push_at(b, b_join.group_epoch)  # the shard it waited for is free
        b_done = await b.request(heartbeat("b", b_join.member_epoch, owned=[]))
        assert b_done.assignment.assigned_shards == released
        assert a_done.member_epoch == b_done.member_epoch == d_join.group_epoch
        # the moves are done and the epoch has settled: the catch-up pushes c, once
        push = await _push_at(c, d_join.group_epoch)
        assert push.member_id == "c"
        caught_up = await c.request(heartbeat("c", c_join.member_epoch, owned=[]))
        assert caught_up.status == Status.OK and caught_up.member_epoch == d_join.group_epoch
        describe = m.DescribeGroup(request_id=0, stream_prefix=PREFIX, consumer_group=GROUP)
        assert (await admin.request(describe)).state == GroupState.STABLE
        # a's only push is the one b's join sent (its target shrank); d joined at the epoch
        assert [a.pushes.receive_nowait().group_epoch
                for _ in range(a.pushes.statistics().current_buffer_used)] == [b_join.group_epoch]
        assert d.pushes.statistics().current_buffer_used == 0


async def test_h10_no_pushes_when_disabled(coordinator_factory):
    quiet = await coordinator_factory(push=False)
    await set_shards(quiet.url, 2)
    async with open_session(quiet.url, "member") as a:
        await a.request(heartbeat("a", 0))
        async with open_session(quiet.url, "member") as b:
            await b.request(heartbeat("b", 0))
        # a heartbeat answered after b's join: any push would have been queued before it
        await a.request(heartbeat("a", 1))
        assert a.pushes.statistics().current_buffer_used == 0


async def test_h6_lease_expiry_over_the_wire_frees_shards_and_answers_unknown(coordinator):
    await set_shards(coordinator.url, 2)
    async with open_session(coordinator.url, "member") as a, open_session(coordinator.url, "member") as b:
        a_join = await a.request(heartbeat("a", 0))
        b_join = await b.request(heartbeat("b", 0))
        assert b_join.assignment.pending_shards
        # a goes silent; b keeps heartbeating until it owns everything
        with trio.fail_after(10):
            while True:
                got = await b.request(heartbeat("b", b_join.member_epoch if b_join else 0))
                if got.status == Status.OK and len(got.assignment.assigned_shards) == 2:
                    break
                b_join = got
                await trio.sleep(0.05)
        late = await a.request(heartbeat("a", a_join.member_epoch))
        assert late.status == Status.UNKNOWN_MEMBER_ID


# --- durability and restart (H12) -------------------------------------------------------


async def test_h12_state_is_in_redis_before_the_response_reveals_it(coordinator):
    await set_shards(coordinator.url, 2)
    async with open_session(coordinator.url, "member") as session:
        joined = await session.request(heartbeat("a", 0))
        record = stored_group(coordinator.redis_url)
        assert record.members["a"].epoch == joined.member_epoch
        assert record.members["a"].assigned == set(joined.assignment.assigned_shards)
        assert record.group.group_epoch == joined.group_epoch
        client = redis.Redis.from_url(coordinator.redis_url, decode_responses=True)
        for shard in joined.assignment.assigned_shards:
            assert client.get(owner_key(shard, GROUP)) == "a"
        client.close()


async def test_h12_restart_restores_groups_and_members_carry_on_with_their_epochs(coordinator_factory):
    first = await coordinator_factory()
    await set_shards(first.url, 4)
    async with open_session(first.url, "member") as a, open_session(first.url, "member") as b:
        a_join = await a.request(heartbeat("a", 0))
        b_join = await b.request(heartbeat("b", 0))
    await first.stop()
    second = await coordinator_factory()
    async with open_session(second.url, "member") as a:
        sync = await a.request(heartbeat("a", a_join.member_epoch))
        assert sync.status == Status.SYNC_METADATA
        assert sync.member_epoch == a_join.member_epoch
        full = await a.request(heartbeat("a", a_join.member_epoch,
                                         owned=list(a_join.assignment.assigned_shards)))
        assert full.status == Status.REVOKE_PENDING  # b joined after a: a still has to give up two
        assert full.group_epoch == b_join.group_epoch
    async with open_session(second.url, "admin") as admin:
        groups = await admin.request(m.ListGroups(request_id=0))
    assert [(g.consumer_group, g.members, g.shards) for g in groups.groups] == [(GROUP, 2, 4)]


async def test_h12_store_unavailable_answers_coordinator_not_available_and_expires_nobody(nursery):
    server = EmbeddedRedis().start()
    try:
        config = CoordinatorConfig(redis_url=server.url, port=0, tick_interval_ms=50,
                                   lease_ttl_ms=600, heartbeat_interval_ms=100)
        url = await nursery.start(lambda task_status: serve(config, task_status=task_status))
        await set_shards(url, 2)
        async with open_session(url, "member") as a, open_session(url, "member") as b:
            joined = await a.request(heartbeat("a", 0))
            server.stop()  # Redis is gone
            steady = await a.request(heartbeat("a", joined.member_epoch))
            assert steady.status == Status.OK  # reveals nothing new: no write needed
            change = await b.request(heartbeat("b", 0))
            assert change.status == Status.COORDINATOR_NOT_AVAILABLE
            # longer than a lease without heartbeats from a: it must not expire
            await trio.sleep(1.0)
            async with open_session(url, "admin") as admin:
                described = await admin.request(m.DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                                                consumer_group=GROUP))
            assert [mb.member_id for mb in described.members] == ["a"]
    finally:
        server.stop()


async def test_d5_second_coordinator_on_the_same_redis_waits_instead_of_serving(coordinator, caplog):
    config = CoordinatorConfig(redis_url=coordinator.redis_url, port=0, tick_interval_ms=50)
    started = trio.Event()

    class Status_:  # what serve() calls once it accepts sessions
        def started(self, value: object = None) -> None:
            started.set()

    async def second() -> None:
        await serve(config, task_status=Status_())  # type: ignore[arg-type]

    caplog.set_level("INFO", logger="rsc.coordinator")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(second)
        with trio.fail_after(10):
            while not any(r.getMessage() == "coordinator.waiting" for r in caplog.records):
                await trio.sleep(0.02)
        assert not started.is_set()
        nursery.cancel_scope.cancel()
    async with open_session(coordinator.url, "member") as session:  # the first still serves
        assert (await session.request(heartbeat("a", 0))).status == Status.OK


# --- admin ------------------------------------------------------------------------------


async def test_admin_set_shard_count_creates_streams_and_consumer_groups(coordinator):
    async with open_session(coordinator.url, "member") as session:
        await session.request(heartbeat("a", 0, group="audit"))
    changed = await set_shards(coordinator.url, 3)
    assert changed.routing.version == 1 and changed.routing.hash == "crc32"
    assert changed.migration is None
    client = redis.Redis.from_url(coordinator.redis_url, decode_responses=True)
    try:
        for stream in changed.routing.streams:
            groups = {g["name"]: g for g in client.xinfo_groups(stream)}
            assert set(groups) == {"audit", GROUP}
            assert groups[GROUP]["last-delivered-id"] == "0-0"
    finally:
        client.close()
    again = await set_shards(coordinator.url, 3)  # R4: same count is a no-op OK
    assert again.routing == changed.routing


async def test_admin_get_routing_subscribe_pushes_routing_when_created(coordinator):
    async with open_session(coordinator.url, "member") as producer:
        none_yet = await producer.request(m.GetRouting(request_id=0, stream_prefix=PREFIX, subscribe=True))
        assert none_yet.status == Status.UNKNOWN_STREAM
        changed = await set_shards(coordinator.url, 2)
        with trio.fail_after(5):
            push = await producer.pushes.receive()
        assert isinstance(push, m.Routing) and push.request_id is None
        assert push.streams == changed.routing.streams and push.version == 1


async def test_admin_describe_group_shows_epochs_target_and_current(coordinator):
    await set_shards(coordinator.url, 4)
    async with open_session(coordinator.url, "member") as a, open_session(coordinator.url, "member") as b:
        a_join = await a.request(heartbeat("a", 0, capacity=8))
        await b.request(heartbeat("b", 0, capacity=2))
        async with open_session(coordinator.url, "admin") as admin:
            d = await admin.request(m.DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                                    consumer_group=GROUP))
    assert d.status == Status.OK and d.state == GroupState.RECONCILING
    assert d.group_epoch == d.assignment_epoch == 3
    assert d.routing is not None and (d.routing.version, d.routing.shard_count) == (1, 4)
    members = {mb.member_id: mb for mb in d.members}
    assert members["a"].state == "UNREVOKED_SHARDS" and members["a"].capacity == 8
    assert members["a"].member_epoch == a_join.member_epoch
    assert members["b"].state == "UNRELEASED_SHARDS" and len(members["b"].pending_shards) == 2
    assert sorted(d.current_assignment["a"]) == sorted(a_join.assignment.assigned_shards)
    assert len(d.target_assignment["a"]) == len(d.target_assignment["b"]) == 2
    assert all(mb.last_heartbeat_ms_ago is not None and mb.last_heartbeat_ms_ago >= 0 for mb in d.members)


async def test_admin_set_max_concurrency_bumps_epoch_and_reaches_members(coordinator):
    await set_shards(coordinator.url, 2)
    async with open_session(coordinator.url, "member") as a:
        joined = await a.request(heartbeat("a", 0, capacity=8))
        assert joined.max_concurrency == 8
        async with open_session(coordinator.url, "admin") as admin:
            changed = await admin.request(m.SetMaxConcurrency(
                request_id=0, stream_prefix=PREFIX, consumer_group=GROUP, max_concurrency=3))
            assert changed.status == Status.OK and changed.max_concurrency == 3
            assert changed.group_epoch == joined.group_epoch + 1
            unknown = await admin.request(m.SetMaxConcurrency(
                request_id=0, stream_prefix=PREFIX, consumer_group="nope", max_concurrency=3))
            assert unknown.status == Status.UNKNOWN_GROUP
        with trio.fail_after(5):
            await a.pushes.receive()
        after = await a.request(heartbeat("a", joined.member_epoch))
        assert after.max_concurrency == 3 and after.member_epoch == changed.group_epoch


async def test_admin_remove_member_frees_shards_and_the_member_is_unknown(coordinator):
    await set_shards(coordinator.url, 2)
    async with open_session(coordinator.url, "member") as a:
        joined = await a.request(heartbeat("a", 0))
        async with open_session(coordinator.url, "admin") as admin:
            removed = await admin.request(m.RemoveMember(request_id=0, stream_prefix=PREFIX,
                                                         consumer_group=GROUP, member_id="a"))
            assert removed.status == Status.OK and removed.group_epoch == joined.group_epoch + 1
            again = await admin.request(m.RemoveMember(request_id=0, stream_prefix=PREFIX,
                                                       consumer_group=GROUP, member_id="a"))
            assert again.status == Status.UNKNOWN_MEMBER_ID
            nogroup = await admin.request(m.RemoveMember(request_id=0, stream_prefix="zzz",
                                                         consumer_group=GROUP, member_id="a"))
            assert nogroup.status == Status.UNKNOWN_GROUP
        late = await a.request(heartbeat("a", joined.member_epoch))
        assert late.status == Status.UNKNOWN_MEMBER_ID
    client = redis.Redis.from_url(coordinator.redis_url, decode_responses=True)
    assert all(client.get(owner_key(s, GROUP)) is None for s in joined.assignment.assigned_shards)
    client.close()


async def test_admin_list_groups_and_unknown_group_describe(coordinator):
    await set_shards(coordinator.url, 2)
    async with open_session(coordinator.url, "admin") as admin:
        listed = await admin.request(m.ListGroups(request_id=0))
        (summary,) = listed.groups
        assert summary.expires_at_ms is not None  # B6: an empty group says when it expires
        assert summary == m.GroupSummary(stream_prefix=PREFIX, consumer_group=GROUP,
                                         group_epoch=1, members=0, shards=2, state=GroupState.EMPTY,
                                         lag=0, pending=0, expires_at_ms=summary.expires_at_ms)
        missing = await admin.request(m.DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                                      consumer_group="ghost"))
        assert missing.status == Status.UNKNOWN_GROUP and "ghost" in missing.error


async def test_g1_g3_delete_and_reset_on_a_prefix_never_seen_are_unknown_group(coordinator):
    async with open_session(coordinator.url, "admin") as admin:
        deleted = await admin.request(m.DeleteGroup(request_id=1, stream_prefix="never",
                                                    consumer_group="g"))
        reset = await admin.request(m.ResetOffsets(request_id=2, stream_prefix="never",
                                                   consumer_group="g", to="latest"))
    assert isinstance(deleted, m.GroupDeleted) and deleted.status == Status.UNKNOWN_GROUP
    assert isinstance(reset, m.OffsetsReset) and reset.status == Status.UNKNOWN_GROUP


async def test_a1_h13_only_a_join_creates_a_group_on_a_prefix_never_seen(coordinator):
    """A heartbeat at a stale epoch or a leave for a prefix never seen allocates nothing."""
    async with open_session(coordinator.url, "member") as member:
        stale = await member.request(m.Heartbeat(request_id=1, stream_prefix="never", consumer_group="g",
                                                 member_id="m1", member_epoch=5))
        leave = await member.request(m.Heartbeat(request_id=2, stream_prefix="never", consumer_group="g",
                                                 member_id="m1", member_epoch=-1))
    assert stale.status == Status.UNKNOWN_MEMBER_ID and "rejoin" in stale.error
    assert leave.status == Status.OK and leave.member_epoch == -1
    async with open_session(coordinator.url, "admin") as admin:
        listed = await admin.request(m.ListGroups(request_id=3))
    assert listed.groups == ()
    client = redis.Redis.from_url(coordinator.redis_url)
    try:
        assert not [key for key in client.keys("rsc:meta:*")]
    finally:
        client.close()
