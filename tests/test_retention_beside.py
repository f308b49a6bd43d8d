"""Retention passes run beside the prefix actor's batches (T1 with a real redis-server).

A pass over thousands of shards takes tens of milliseconds of Redis time; run inline it
held every heartbeat of the prefix for that long every ten ticks. These tests hold a pass
on purpose (the real `apply_retention` behind a gate) and show that heartbeats are
answered meanwhile, and that a checkpoint which creates consumer groups (a new group
starts at id 0) waits for the running pass, so a pass computed without that group never
trims what it has not acked.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis
import trio

from rsc.actors.actor import PrefixActor, now_ms
from rsc.actors.core.group import GroupSettings
from rsc.actors.core.prefix import RETENTION_EVERY_TICKS
from rsc.actors.redis_io import shard_ops
from rsc.actors.redis_io.store import MetadataStore
from rsc.actors.server import Collect
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import JOIN_EPOCH
from tests.helpers.actors import Served, serve

PREFIX = "beside"
# a long lease: the held pass must stay inside the store deadline (a third of it)
SETTINGS = GroupSettings(heartbeat_interval_ms=1000, lease_ttl_ms=30000, revoke_timeout_ms=5000)


class HeldRetention:
    """`shard_ops.apply_retention`, held at its start while `go` is clear."""

    def __init__(self) -> None:
        self.real = shard_ops.apply_retention
        self.go = threading.Event()
        self.entered = threading.Event()
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        self.entered.set()
        assert self.go.wait(20)
        return self.real(*args, **kwargs)


async def ask(actor: Served, request: Any) -> Any:
    return await actor.ask(request)


def join(group: str, member_id: str) -> m.Heartbeat:
    return m.Heartbeat(request_id=1, stream_prefix=PREFIX, consumer_group=group,
                       member_id=member_id, member_epoch=JOIN_EPOCH, owned_shards=())


def beat(group: str, response: m.HeartbeatResponse) -> m.Heartbeat:
    assert response.member_epoch is not None and response.assignment is not None
    return m.Heartbeat(request_id=2, stream_prefix=PREFIX, consumer_group=group,
                       member_id=response.member_id, member_epoch=response.member_epoch,
                       owned_shards=response.assignment.assigned_shards)


async def make_a_pass_due(actor: Served) -> None:
    for _ in range(RETENTION_EVERY_TICKS):
        await actor.tick()
    await ask(actor, m.GetRouting(request_id=3, stream_prefix=PREFIX))  # after the ticks' batch


async def wait_entered(held: HeldRetention) -> None:
    with trio.fail_after(10):
        while not held.entered.is_set():
            await trio.sleep(0.01)


async def start_with_a_member(nursery: trio.Nursery, store: MetadataStore,
                              shards: int) -> tuple[Served, m.HeartbeatResponse]:
    """An actor whose passes run in `nursery`, routing of `shards`, member "a" of billing."""
    actor = serve(nursery, PrefixActor(PREFIX, store, SETTINGS, background=nursery))
    routed = await ask(actor, m.SetShardCount(request_id=5, stream_prefix=PREFIX,
                                              consumer_group="billing", shard_count=shards))
    assert routed.status == Status.OK
    joined = await ask(actor, join("billing", "a"))
    assert joined.status == Status.OK
    return actor, joined


async def audit_appears(client: redis.Redis, shard: str, within_s: float = 1.0) -> bool:
    """Whether group audit's consumer group shows up on `shard` within `within_s` (a join
    that did not wait for the held pass creates it in milliseconds)."""
    with trio.move_on_after(within_s):
        while not any(g["name"] == "audit" for g in client.xinfo_groups(shard)):
            await trio.sleep(0.01)
        return True
    return False


@pytest.fixture
def store(redis_url: str):
    store = MetadataStore(redis_url, lease_ms=30000)
    store.acquire(30000)
    yield store
    store.close()


async def test_t1_heartbeats_are_answered_while_a_retention_pass_runs(store, monkeypatch):
    held = HeldRetention()
    monkeypatch.setattr(shard_ops, "apply_retention", held)
    async with trio.open_nursery() as nursery:
        actor, a = await start_with_a_member(nursery, store, shards=4)
        await make_a_pass_due(actor)
        await wait_entered(held)
        with trio.fail_after(5):  # the pass is held: the batches go on
            for _ in range(3):
                a = await ask(actor, beat("billing", a))
                assert a.status == Status.OK
        await make_a_pass_due(actor)  # due again while the first still runs: held
        assert held.calls == 1
        held.go.set()
        with trio.fail_after(10):
            while not actor.actor.retention.done.is_set():
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()


async def test_t1_a_new_group_waits_for_the_running_pass_and_keeps_its_entries(
        store, redis_url, monkeypatch):
    held = HeldRetention()
    monkeypatch.setattr(shard_ops, "apply_retention", held)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    async with trio.open_nursery() as nursery:
        actor, a = await start_with_a_member(nursery, store, shards=1)
        (shard,) = actor.machine.routing.streams  # type: ignore[union-attr]
        ids = [client.xadd(shard, {"n": str(n)}) for n in range(5)]
        # billing reads and acks everything: a pass computed now may trim all five
        read = client.xreadgroup("billing", "a", {shard: ">"}, count=10)
        assert [entry_id for entry_id, _ in read[0][1]] == ids
        assert client.xack(shard, "billing", *ids) == 5
        await make_a_pass_due(actor)
        await wait_entered(held)  # the pass is computed for billing alone, and held
        joined = Collect()
        await actor.send(join("audit", "x"), joined)
        assert not await audit_appears(client, shard)  # its consumer groups wait for the pass
        assert not joined.done.is_set()
        held.go.set()
        with trio.fail_after(10):
            await joined.done.wait()
        assert joined.message.status == Status.OK
        # the held pass trimmed what billing acked before audit existed (a serial order:
        # trim, then create); audit, created at id 0 afterwards, loses nothing from now on
        later = client.xadd(shard, {"n": "late"})
        await make_a_pass_due(actor)
        with trio.fail_after(10):
            while held.calls < 2 or not actor.actor.retention.done.is_set():
                await trio.sleep(0.01)
        assert [entry_id for entry_id, _ in client.xrange(shard)] == [later]
        nursery.cancel_scope.cancel()
    client.close()


async def test_t1_a_pass_in_slices_trims_every_shard(store, redis_url, monkeypatch):
    from rsc.actors.redis_io import retention_runner
    monkeypatch.setattr(retention_runner, "RETENTION_SLICE", 2)  # five shards: three slices
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    async with trio.open_nursery() as nursery:
        actor, _ = await start_with_a_member(nursery, store, shards=5)
        shards = actor.machine.routing.streams  # type: ignore[union-attr]
        for shard in shards:
            ids = [client.xadd(shard, {"n": str(n)}) for n in range(3)]
            client.xreadgroup("billing", "a", {shard: ">"}, count=10)
            assert client.xack(shard, "billing", *ids) == 3
        await make_a_pass_due(actor)
        with trio.fail_after(10):
            while any(client.xlen(shard) for shard in shards) or not actor.actor.retention.done.is_set():
                await trio.sleep(0.01)
        assert [client.xlen(shard) for shard in shards] == [0] * 5
        nursery.cancel_scope.cancel()
    client.close()


async def test_t1_an_actor_reloaded_during_a_pass_still_waits_for_it(store, redis_url, monkeypatch):
    """A prefix actor that fails is replaced by one reloaded from Redis (router.py); a pass its
    predecessor started may still run, and the new actor's consumer groups wait for it too."""
    held = HeldRetention()
    monkeypatch.setattr(shard_ops, "apply_retention", held)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    async with trio.open_nursery() as nursery:
        old, _ = await start_with_a_member(nursery, store, shards=1)
        await make_a_pass_due(old)
        await wait_entered(held)
        old.actor.send_channel.close()  # the old actor is gone; its pass still runs
        reloaded = PrefixActor(PREFIX, store, SETTINGS, background=nursery)
        snapshot = store.load_prefix(PREFIX)
        assert snapshot is not None
        reloaded.restore(snapshot, now_ms())
        reloaded.take_over(old.actor)
        new = serve(nursery, reloaded)
        (shard,) = new.machine.routing.streams  # type: ignore[union-attr]
        joined = Collect()
        await new.send(join("audit", "x"), joined)
        assert not await audit_appears(client, shard)  # the predecessor's pass still runs
        assert not joined.done.is_set()
        held.go.set()
        with trio.fail_after(10):
            await joined.done.wait()
        assert joined.message.status == Status.OK
        nursery.cancel_scope.cancel()
    client.close()
