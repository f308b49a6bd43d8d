"""The member runtime's own checks, against a real Redis and an in-process scripted coordinator.

- A1/D3: a join refused by a cap (GROUP_MAX_SIZE_REACHED, GROUP_LIMIT_REACHED) holds
  nothing, is retried with backoff, and is said once (event and warning line);
- storeId: another Redis stops the member before its first read (it leaves first);
- start-up: a Redis that does not answer yet is retried with backoff and said;
- retention (T1/T3): acks delete (XACKDEL ... ACKED) only with `acked` on a server that
  has XACKDEL; plain XACK otherwise; the owner-token check holds on both paths.

The coordinator is scripted in-process (the heartbeat shell's `open_session` is
replaced), so a routing can carry `storeId` and `retention` whatever the codec of
this checkout decodes.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import pytest
import redis
import trio

import rsc.member.shells.heartbeat as heartbeat_shell
from rsc.common.redis_server import EmbeddedRedis, free_port
from rsc.member.config import MemberConfig
from rsc.member.listener import Listener
from rsc.member.message import Message
from rsc.member.notices import Notices
from rsc.member.pure.reconcile import Event
from rsc.member.redis_io.streams import STORE_ID_KEY, StoreMismatch, StreamOps, supports_xackdel
from rsc.member.shells.runtime import Member
from rsc.protocol import JOIN_EPOCH, LEAVE_EPOCH, Assignment, Heartbeat, HeartbeatResponse, Status
from rsc.protocol.routing import owner_key
from rsc.protocol.vocabulary import RetentionMode

PREFIX, GROUP, MEMBER = "orders", "billing", "10.0.0.7-42-0-test"
SHARD = "orders:v1:0"
COORDINATOR_URL = "ws://127.0.0.1:1/scripted-coordinator"
CAPS = [Status.GROUP_MAX_SIZE_REACHED, Status.GROUP_LIMIT_REACHED]

Answer = Callable[[Heartbeat], HeartbeatResponse]


def routing(store_id: str | None = None, mode: str | None = None) -> Any:
    """A heartbeat routing with the fields the coordinator adds (read with getattr)."""
    # the mode as the codec decodes it: the enum (the ledger compares by identity)
    retention = None if mode is None else SimpleNamespace(mode=RetentionMode(mode), max_length=None,
                                                          max_age_ms=None)
    return SimpleNamespace(version=1, shard_count=1, store_id=store_id, retention=retention)


def accept(request: Heartbeat, route: Any = None) -> HeartbeatResponse:
    """OK: a join gets epoch 1 and the one shard; a leave is answered as left."""
    if request.member_epoch == LEAVE_EPOCH:
        return HeartbeatResponse(request_id=request.request_id, status=Status.OK,
                                 member_id=request.member_id, member_epoch=LEAVE_EPOCH)
    return HeartbeatResponse(
        request_id=request.request_id, status=Status.OK, member_id=request.member_id,
        member_epoch=max(1, request.member_epoch), group_epoch=1, assignment_epoch=1,
        heartbeat_interval_ms=100, lease_ttl_ms=5000, max_concurrency=2,
        routing=route if route is not None else routing(),
        assignment=Assignment(assigned_shards=(SHARD,)))


class ScriptedCoordinator:
    """Answers every heartbeat with `answer(request)`, and records when it came."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[tuple[float, Heartbeat]] = []

    @asynccontextmanager
    async def open_session(self, url: str, endpoint: str, **_: Any) -> AsyncIterator[Any]:
        pushes_in, pushes = trio.open_memory_channel[Any](0)
        coordinator = self

        class Session:
            def __init__(self) -> None:
                self.pushes = pushes
                self._keep = pushes_in  # never closed: no pushes, the stream stays open

            async def request(self, message: Heartbeat) -> HeartbeatResponse:
                await trio.lowlevel.checkpoint()
                coordinator.requests.append((trio.current_time(), message))
                return coordinator.answer(message)

        yield Session()

    def epochs(self) -> list[int]:
        return [request.member_epoch for _, request in self.requests]


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> Callable[[Answer], ScriptedCoordinator]:
    def install(answer: Answer) -> ScriptedCoordinator:
        coordinator = ScriptedCoordinator(answer)
        monkeypatch.setattr(heartbeat_shell, "open_session", coordinator.open_session)
        return coordinator

    return install


def prepare(redis_url: str, *values: str, store_id: str | None = None) -> redis.Redis:
    """The shard stream with its consumer group and entries, owned by MEMBER (the
    coordinator's owner token), and optionally the coordinator's storeId."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    client.xgroup_create(SHARD, GROUP, id="0", mkstream=True)
    for value in values:
        client.xadd(SHARD, {"key": value, "value": value})
    client.set(owner_key(SHARD, GROUP), MEMBER)
    if store_id is not None:
        client.set(STORE_ID_KEY, store_id)
    return client


def config(redis_url: str, **overrides: Any) -> MemberConfig:
    settings: dict[str, Any] = dict(
        coordinator_url=COORDINATOR_URL, redis_url=redis_url, stream_prefix=PREFIX,
        consumer_group=GROUP, member_id=MEMBER, capacity=2, block_ms=50, ack_linger_ms=1.0,
        default_heartbeat_interval_ms=50, join_retry_initial_s=0.05, join_retry_max_s=0.2,
        redis_retry_max_s=0.2, drain_timeout_s=5.0, leave_timeout_s=2.0)
    settings.update(overrides)
    return MemberConfig(**settings)


class Recorder:
    """The handler and the event callback of a member under test."""

    def __init__(self) -> None:
        self.handled: list[str] = []
        self.events: list[Event] = []

    async def handle(self, message: Message) -> None:
        self.handled.append(message.value)

    def on_event(self, member_id: str, event: Event) -> None:
        self.events.append(event)


async def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while not condition():
            await trio.sleep(0.01)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "rsc.member.core" and r.levelno == logging.WARNING]


# --- A1 / D3: a join refused by a cap -------------------------------------------------------------


@pytest.mark.parametrize("status", CAPS)
async def test_join_refused_by_a_cap_holds_nothing_retries_with_backoff_and_says_so(
        redis_url, scripted, caplog, nursery, status):
    caplog.set_level(logging.WARNING, logger="rsc.member.core")
    client = prepare(redis_url, "after-the-refusals")
    refusals = 3

    def answer(request: Heartbeat) -> HeartbeatResponse:
        if len(coordinator.requests) <= refusals:
            return HeartbeatResponse(request_id=request.request_id, status=status,
                                     member_id=request.member_id, error="cap reached")
        return accept(request)

    coordinator = scripted(answer)
    recorder = Recorder()
    member = Member(config(redis_url, join_retry_initial_s=0.2, join_retry_max_s=0.4),
                    recorder.handle, on_event=recorder.on_event)
    nursery.start_soon(member.run)
    await wait_for(lambda: recorder.handled == ["after-the-refusals"])
    member.stop()
    await wait_for(lambda: member.core.life.left.is_set())

    refused = [request for _, request in coordinator.requests[:refusals]]
    assert all(r.member_epoch == JOIN_EPOCH and r.owned_shards == () for r in refused)
    assert coordinator.epochs()[refusals] == JOIN_EPOCH  # the join that was taken
    times = [when for when, _ in coordinator.requests[:refusals + 1]]
    gaps = [later - earlier for earlier, later in zip(times, times[1:], strict=False)]
    assert min(gaps) >= 0.1, gaps  # the backoff (>= 0.5 x 0.2 s), not the 50 ms interval
    names = [event.name for event in recorder.events]
    assert names[:3] == ["join refused", "joined", "assigned"]
    assert recorder.events[0].reason == f"{status.value}: cap reached"
    lines = warnings_of(caplog)
    said = [line for line in lines if status.value in line]
    assert len(said) == 1, lines  # rate-limited: once for three refusals
    assert COORDINATOR_URL in said[0] and MEMBER in said[0] and "retrying the join" in said[0]
    assert f"member {MEMBER} joined group {GROUP!r} on prefix {PREFIX!r}" in lines, lines
    client.close()


async def test_members_sharing_notices_say_a_refused_join_once_while_others_are_in(
        redis_url, scripted, nursery):
    """As rsc consume runs them: one Notices for all; the member in never clears the line of
    the member kept out, so it is neither repeated nor flapping."""
    client = prepare(redis_url)
    kept_out = "10.0.0.7-42-1-test"

    def answer(request: Heartbeat) -> HeartbeatResponse:
        if request.member_id == kept_out and request.member_epoch != LEAVE_EPOCH:
            return HeartbeatResponse(request_id=request.request_id,
                                     status=Status.GROUP_MAX_SIZE_REACHED,
                                     member_id=request.member_id)
        return accept(request)

    coordinator = scripted(answer)
    lines: list[str] = []
    notices = Notices(lines.append)
    inside = Member(config(redis_url), Recorder().handle, notices=notices)
    outside = Member(config(redis_url, member_id=kept_out), Recorder().handle, notices=notices)
    nursery.start_soon(inside.run)
    nursery.start_soon(outside.run)
    await wait_for(lambda: sum(r.member_id == kept_out for _, r in coordinator.requests) >= 6)
    assert inside.core.life.joined.is_set() and not outside.core.life.joined.is_set()
    assert outside.state.holds == {}
    assert len(lines) == 1 and kept_out in lines[0] and "GROUP_MAX_SIZE_REACHED" in lines[0], lines
    inside.stop()
    outside.stop()
    await wait_for(lambda: inside.core.life.left.is_set() and outside.core.life.left.is_set())
    client.close()


# --- storeId --------------------------------------------------------------------------------


async def test_store_id_of_another_redis_stops_the_member_before_any_read(redis_url, scripted):
    client = prepare(redis_url, "never-read", store_id="this-redis")
    coordinator = scripted(lambda request: accept(request, routing(store_id="coordinators")))
    recorder = Recorder()
    member = Member(config(redis_url), recorder.handle, on_event=recorder.on_event)
    with trio.fail_after(15), pytest.raises(StoreMismatch) as raised:
        await member.run()
    line = str(raised.value)
    assert redis_url in line and COORDINATOR_URL in line
    assert "'this-redis'" in line and "'coordinators'" in line
    assert recorder.handled == []
    group = client.xinfo_groups(SHARD)[0]
    assert group["pending"] == 0 and group["last-delivered-id"] == "0-0"  # nothing read
    assert coordinator.epochs()[-1] == LEAVE_EPOCH  # it left its shards for the others
    client.close()


async def test_listener_of_two_members_raises_one_store_mismatch_and_starts_nothing(
        redis_url, scripted):
    client = prepare(redis_url, "never-read", store_id="this-redis")
    scripted(lambda request: accept(request, routing(store_id="coordinators")))
    recorder = Recorder()
    consumers = Listener(recorder.handle, stream_prefix=PREFIX, consumer_group=GROUP,
                         coordinator_url=COORDINATOR_URL, redis_url=redis_url, concurrency=2,
                         member_ids=[MEMBER, "10.0.0.7-42-1-test"], block_ms=50)
    with trio.fail_after(15), pytest.raises(StoreMismatch, match="is not the coordinator's Redis"):
        await consumers.run()
    assert recorder.handled == []
    assert not consumers.members[1].core.life.joined.is_set()  # the first one stopped the start
    client.close()


async def test_matching_store_id_lets_the_member_read(redis_url, scripted, nursery):
    client = prepare(redis_url, "read-me", store_id="same")
    scripted(lambda request: accept(request, routing(store_id="same")))
    recorder = Recorder()
    member = Member(config(redis_url), recorder.handle)
    nursery.start_soon(member.run)
    await wait_for(lambda: recorder.handled == ["read-me"])
    member.stop()
    await wait_for(lambda: member.core.life.left.is_set())
    client.close()


# --- start-up: Redis not answering yet --------------------------------------------------------


async def test_redis_down_at_start_is_retried_with_backoff_and_said(scripted, caplog, nursery):
    caplog.set_level(logging.WARNING, logger="rsc.member.core")
    server = EmbeddedRedis(port=free_port())
    scripted(accept)
    recorder = Recorder()
    member = Member(config(server.url), recorder.handle)
    nursery.start_soon(member.run)
    try:
        await wait_for(lambda: any(f"cannot reach Redis at {server.url}" in line
                                   for line in warnings_of(caplog)))
        assert not member.core.life.joined.is_set()
        await trio.to_thread.run_sync(server.start)
        client = prepare(server.url, "after-redis-came")
        await wait_for(lambda: recorder.handled == ["after-redis-came"])
        lines = warnings_of(caplog)
        assert sum("cannot reach Redis" in line for line in lines) == 1, lines
        assert f"Redis at {server.url} answers again" in lines
        member.stop()
        await wait_for(lambda: member.core.life.left.is_set())
        client.close()
    finally:
        server.stop()


async def test_stop_while_redis_is_down_at_start_returns(scripted):
    scripted(accept)
    consumers = Listener(Recorder().handle, stream_prefix=PREFIX, consumer_group=GROUP,
                         coordinator_url=COORDINATOR_URL,
                         redis_url=f"redis://127.0.0.1:{free_port()}/0", member_ids=[MEMBER])
    member = consumers.members[0]
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(consumers.run)
            await wait_for(lambda: member.core.notices.active("redis"))
            consumers.stop()
    assert not member.core.life.joined.is_set()


# --- retention: what an ack does ---------------------------------------------------------------


def server_has_xackdel(redis_url: str) -> bool:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        return supports_xackdel(client)
    finally:
        client.close()


async def consume_and_ack(redis_url: str, scripted: Any, nursery: trio.Nursery,
                          mode: str | None) -> redis.Redis:
    """One member reads and acks two entries under retention `mode`; the client is returned."""
    client = prepare(redis_url, "one", "two")
    scripted(lambda request: accept(request, routing(mode=mode)))
    recorder = Recorder()
    member = Member(config(redis_url), recorder.handle)
    nursery.start_soon(member.run)
    await wait_for(lambda: len(recorder.handled) == 2 and member.stats.acked == 2)
    member.stop()
    await wait_for(lambda: member.core.life.left.is_set())
    assert client.xinfo_groups(SHARD)[0]["pending"] == 0
    return client


@pytest.mark.parametrize("mode", ["none", None])
async def test_acks_are_plain_xack_with_retention_none_or_unknown(redis_url, scripted, nursery,
                                                                  mode):
    client = await consume_and_ack(redis_url, scripted, nursery, mode)
    assert client.xlen(SHARD) == 2  # acked, kept
    client.close()


async def test_acks_are_plain_xack_with_retention_acked_on_a_server_without_xackdel(
        redis_url, scripted, nursery):
    if server_has_xackdel(redis_url):
        pytest.skip("this server has XACKDEL (Redis >= 8.2)")
    client = await consume_and_ack(redis_url, scripted, nursery, "acked")
    assert client.xlen(SHARD) == 2  # the coordinator trims what every group acked (T1)
    client.close()


@pytest.mark.valkey  # the server matrix runs it on Redis 8.2, the only server here with XACKDEL
async def test_acks_delete_with_retention_acked_on_a_server_with_xackdel(redis_url, scripted,
                                                                         nursery):
    if not server_has_xackdel(redis_url):
        pytest.skip("XACKDEL needs Redis >= 8.2 (RSC_TEST_SERVER=redis8)")
    client = await consume_and_ack(redis_url, scripted, nursery, "acked")
    assert client.xlen(SHARD) == 0  # the only group acked them: gone
    client.close()


async def test_xackdel_acked_keeps_what_another_group_has_not_acked(redis_url):
    if not server_has_xackdel(redis_url):
        pytest.skip("XACKDEL needs Redis >= 8.2 (RSC_TEST_SERVER=redis8)")
    client = prepare(redis_url, "one")
    client.xgroup_create(SHARD, "audit", id="0")
    ops = StreamOps(client, GROUP, MEMBER, use_xackdel=True)
    [(_, [(entry_id, _)])] = client.xreadgroup(GROUP, MEMBER, {SHARD: ">"})
    assert ops.ack({SHARD: [entry_id]}) == {SHARD: 1}
    assert client.xlen(SHARD) == 1  # "audit" still needs it
    client.close()


@pytest.mark.parametrize("use_xackdel", [False, True])
async def test_the_owner_token_check_holds_on_both_ack_paths(redis_url, use_xackdel):
    if use_xackdel and not server_has_xackdel(redis_url):
        pytest.skip("XACKDEL needs Redis >= 8.2 (RSC_TEST_SERVER=redis8)")
    client = prepare(redis_url, "one")
    [(_, [(entry_id, _)])] = client.xreadgroup(GROUP, MEMBER, {SHARD: ">"})
    client.set(owner_key(SHARD, GROUP), "someone-else")
    ops = StreamOps(client, GROUP, MEMBER, use_xackdel=use_xackdel)
    assert ops.ack({SHARD: [entry_id]}) == {SHARD: -1}
    assert client.xinfo_groups(SHARD)[0]["pending"] == 1 and client.xlen(SHARD) == 1
    client.close()


def test_heartbeat_jitter_is_a_fraction_of_the_interval():
    from rsc.member.config import MemberConfig

    base = dict(coordinator_url="ws://127.0.0.1:1", redis_url="redis://127.0.0.1:1",
                stream_prefix="p", consumer_group="g", member_id="m-1")
    assert MemberConfig(**base).heartbeat_jitter == 0.2
    assert MemberConfig(**base, heartbeat_jitter=0.0).heartbeat_jitter == 0.0
    for bad in (-0.1, 1.0, 1.5):
        with pytest.raises(ValueError, match="heartbeat_jitter"):
            MemberConfig(**base, heartbeat_jitter=bad)

