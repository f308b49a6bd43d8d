"""SIGKILL the coordinator process in the middle of a rebalance, restart it on the same Redis;
and a single prefix actor that fails, reloaded from Redis while the other prefixes carry on.

Members must carry on with their epochs (never UNKNOWN_MEMBER_ID or
FENCED_MEMBER_EPOCH, never a rejoin) and never share a shard (H3, H12).
"""

from __future__ import annotations

import signal
from contextlib import AsyncExitStack

import attrs
import pytest
import trio

from rsc.actors.actor import PrefixActor
from rsc.actors.app import serve
from rsc.actors.config import CoordinatorConfig
from rsc.actors.ops.metrics import CoordinatorMetrics
from rsc.actors.redis_io.store import MetadataStore
from rsc.member.session import SessionClosed, open_session
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from tests.conftest import FAST
from tests.processes import spawn_coordinator
from tests.sim_member import SimMember, assert_no_shard_held_twice

PREFIX, GROUP = "orders", "billing"


async def settle(sessions, members, rounds: int = 60) -> None:
    """Heartbeat every member until nothing changes any more (bounded)."""
    for _ in range(rounds):
        changed = False
        for member in members:
            before = (member.epoch, frozenset(member.held), frozenset(member.revoked_to_report))
            response = await member.beat(sessions[member.member_id])
            assert_no_shard_held_twice(members)
            changed |= before != (member.epoch, frozenset(member.held),
                                  frozenset(member.revoked_to_report))
            changed |= response.status != Status.OK
        if not changed:
            return
    raise AssertionError("members did not settle")


async def test_sigkill_mid_rebalance_then_restart_members_keep_epochs_and_never_share(redis_url):
    process, url = await spawn_coordinator(redis_url)
    try:
        async with open_session(url, "admin") as admin:
            await admin.request(m.SetShardCount(request_id=0, stream_prefix=PREFIX,
                                                consumer_group=GROUP, shard_count=8))
        members = [SimMember(name, PREFIX, GROUP) for name in ("a", "b", "c")]
        async with AsyncExitStack() as stack:
            sessions = {mb.member_id: await stack.enter_async_context(open_session(url, "member"))
                        for mb in members}
            await settle(sessions, members)
            assert sorted(len(mb.held) for mb in members) == [2, 3, 3]
            # the rebalance: d joins; the others are asked to revoke but have not reported yet
            newcomer = SimMember("d", PREFIX, GROUP)
            members.append(newcomer)
            sessions["d"] = await stack.enter_async_context(open_session(url, "member"))
            await newcomer.beat(sessions["d"])
            for member in members[:3]:
                await member.beat(sessions[member.member_id])
            assert any(mb.revoked_to_report for mb in members), "no revoke was in flight"
            epochs_before = {mb.member_id: mb.epoch for mb in members}
            process.send_signal(signal.SIGKILL)
            with trio.fail_after(10):
                await process.wait()
            for session in sessions.values():
                try:
                    await session.request(members[0].request())
                except SessionClosed:
                    pass
        assert_no_shard_held_twice(members)

        process, url = await spawn_coordinator(redis_url)
        async with AsyncExitStack() as stack:
            sessions = {mb.member_id: await stack.enter_async_context(open_session(url, "member"))
                        for mb in members}
            # the first answer after the restart keeps every member at its epoch
            for member in members:
                member.send_full = False
                response = await member.beat(sessions[member.member_id])
                assert response.status == Status.SYNC_METADATA
                assert response.member_epoch == epochs_before[member.member_id]
                assert_no_shard_held_twice(members)
            await settle(sessions, members)
            async with open_session(url, "admin") as admin:
                described = await admin.request(m.DescribeGroup(
                    request_id=0, stream_prefix=PREFIX, consumer_group=GROUP))
        statuses = {status for mb in members for status in mb.statuses}
        assert not statuses & {"UNKNOWN_MEMBER_ID", "FENCED_MEMBER_EPOCH"}, statuses
        assert described.state == "STABLE"
        assert sorted(len(mb.held) for mb in members) == [2, 2, 2, 2]
        assert sum(len(mb.held) for mb in members) == 8
        assert {mb.member_id: sorted(mb.held) for mb in members} == {
            k: sorted(v) for k, v in described.current_assignment.items()}
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            with trio.fail_after(10):
                await process.wait()


async def test_sigterm_stops_cleanly_releases_the_lease_and_keeps_state(redis_url):
    import redis

    from rsc.actors.redis_io.store import LEASE_KEY

    process, url = await spawn_coordinator(redis_url)
    async with open_session(url, "admin") as admin:
        await admin.request(m.SetShardCount(request_id=0, stream_prefix=PREFIX,
                                            consumer_group=GROUP, shard_count=2))
    member = SimMember("a", PREFIX, GROUP)
    async with open_session(url, "member") as session:
        joined = await member.beat(session)
    process.send_signal(signal.SIGTERM)
    with trio.fail_after(10):
        assert await process.wait() == 0
    client = redis.Redis.from_url(redis_url)
    assert client.exists(LEASE_KEY) == 0  # the next coordinator need not wait for it to lapse
    client.close()
    process, url = await spawn_coordinator(redis_url)
    try:
        async with open_session(url, "member") as session:
            member.send_full = True
            again = await member.beat(session)
        assert again.status == Status.OK and again.member_epoch == joined.member_epoch
    finally:
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(10):
            await process.wait()


# --- one prefix actor fails: it is reloaded from Redis, the others see nothing ---------------

def _arm_batch_failure(monkeypatch, prefix: str, armed: list[bool]) -> None:
    original = PrefixActor._handle_batch

    async def failing(self, batch):
        if self.prefix == prefix and armed and any(e.reply is not None for e in batch):
            armed.clear()
            raise RuntimeError("injected failure in the prefix actor")
        await original(self, batch)

    monkeypatch.setattr(PrefixActor, "_handle_batch", failing)


def _arm_store_oserror(monkeypatch, prefix: str, armed: list[bool]) -> None:
    original = MetadataStore.write

    def failing(self, name, fields, owner_changes=()):
        if name == prefix and armed:
            armed.clear()
            raise OSError(24, "Too many open files")  # not a RedisError: the actor's store call converts it
        return original(self, name, fields, owner_changes)

    monkeypatch.setattr(MetadataStore, "write", failing)


@pytest.mark.parametrize(("inject", "restarts"), [(_arm_batch_failure, 1), (_arm_store_oserror, 0)],
                         ids=["exception-in-actor", "oserror-in-store"])
async def test_a_failed_prefix_actor_is_reloaded_from_redis_and_other_prefixes_see_nothing(
        redis_url, nursery, monkeypatch, inject, restarts):
    """An exception in the actor reloads it from Redis; an OSError of the store is a store error
    the prefix core handles (COORDINATOR_NOT_AVAILABLE, rolled back), so nothing restarts."""
    metrics = CoordinatorMetrics()
    config = CoordinatorConfig(redis_url=redis_url, port=0, **FAST)
    url = await nursery.start(lambda task_status: serve(config, metrics=metrics,
                                                        task_status=task_status))
    orders, audit = SimMember("a", "orders", GROUP), SimMember("b", "audit", GROUP)
    with trio.fail_after(30):
        async with open_session(url, "admin") as admin:
            for prefix in ("orders", "audit"):
                await admin.request(m.SetShardCount(request_id=0, stream_prefix=prefix,
                                                    consumer_group=GROUP, shard_count=2))
        async with open_session(url, "member") as session:
            for member in (orders, audit):
                for _ in range(5):
                    await member.beat(session)
            assert len(orders.held) == 2 and len(audit.held) == 2
            epochs = (orders.epoch, audit.epoch)
            statuses_before = len(audit.statuses)

            armed = [True]
            inject(monkeypatch, "orders", armed)
            # a change in "orders" (capacity) forces a write, so the store path is taken too
            failed_at = trio.current_time()
            failed = await session.request(attrs.evolve(orders.request(), capacity=2))
            assert not armed, "the failure was not injected"
            assert failed.status == Status.COORDINATOR_NOT_AVAILABLE
            for _ in range(5):  # the other prefix carries on, untouched
                assert (await audit.beat(session)).status == Status.OK
            # the reloaded actor knows the member from Redis, at its epoch
            while True:
                orders.send_full = True
                response = await orders.beat(session)
                if response.status != Status.COORDINATOR_NOT_AVAILABLE:
                    break
                await trio.sleep(0.05)
            assert response.status == Status.OK, response
            print(f"prefix back from Redis {trio.current_time() - failed_at:.3f} s after the failure")
            assert (orders.epoch, audit.epoch) == epochs
            assert len(orders.held) == 2
            async with open_session(url, "admin") as admin:
                described = await admin.request(m.DescribeGroup(
                    request_id=0, stream_prefix="orders", consumer_group=GROUP))
            assert [mb.member_id for mb in described.members] == ["a"]
    assert set(audit.statuses[statuses_before:]) == {"OK"}
    assert "FENCED_MEMBER_EPOCH" not in orders.statuses and "UNKNOWN_MEMBER_ID" not in orders.statuses
    assert metrics.prefix_actor_restarts.labels("orders")._value.get() == restarts
    assert metrics.prefix_actor_restarts.labels("audit")._value.get() == 0
