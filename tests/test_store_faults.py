"""Store faults against a real redis-server (H12, D4): I/O errors, ordering, atomicity,
repair of a half-written checkpoint, and stalled writes abandoned at a third of the lease.

The prefix actor is driven directly (requests in through its mailbox, answers out through
reply slots); faults are injected by store subclasses that fail or block one step.
"""

from __future__ import annotations

import errno
import threading
from typing import Any

import pytest
import redis
import trio

from rsc.actors.actor import PrefixActor, Tick, now_ms
from rsc.actors.core.group import GroupSettings
from rsc.actors.core.records import Changes, GroupRecord, OwnerToken, replay
from rsc.actors.redis_io import shard_ops
from rsc.actors.redis_io.store import (
    MetadataStore,
    StoreError,
    StoreFenced,
    StoreStale,
    StreamAdmin,
    meta_key,
)
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.routing import owner_key
from rsc.protocol.vocabulary import JOIN_EPOCH, MigrationState
from tests.helpers.actors import Served, serve

PREFIX, GROUP = "faults", "billing"
LEASE_MS = 1500
SETTINGS = GroupSettings(heartbeat_interval_ms=200, lease_ttl_ms=LEASE_MS, revoke_timeout_ms=5000)


def group_changes(epoch: int) -> Changes:
    changes = Changes()
    changes.groups[GROUP] = GroupRecord(group_epoch=epoch, assignment_epoch=epoch)
    return changes


def stored(redis_url: str) -> dict[str, str]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        return client.hgetall(meta_key(PREFIX))  # type: ignore[return-value]
    finally:
        client.close()


def token(redis_url: str, shard: str) -> str | None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        return client.get(owner_key(shard, GROUP))  # type: ignore[return-value]
    finally:
        client.close()


def new_store(redis_url: str, cls: type[MetadataStore] = MetadataStore) -> MetadataStore:
    store = cls(redis_url, lease_ms=2000)
    store.acquire(2000)
    return store


# --- the store on its own -------------------------------------------------------------


class HeldFirstWrite(MetadataStore):
    """The first hash write waits (its sequence number taken) until `go` is set."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.go = threading.Event()
        self.held = threading.Event()
        self.calls = 0

    def _write_hash(self, prefix: str, keys: list[str], args: list[Any]) -> None:
        self.calls += 1
        if self.calls == 1:
            self.held.set()
            assert self.go.wait(10)
        super()._write_hash(prefix, keys, args)


def test_d4_a_write_that_arrives_after_a_later_one_is_refused_and_changes_nothing(redis_url):
    store = new_store(redis_url, HeldFirstWrite)
    assert isinstance(store, HeldFirstWrite)
    outcome: list[BaseException | None] = []

    def first() -> None:
        try:
            store.write(PREFIX, group_changes(1))
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            outcome.append(exc)

    thread = threading.Thread(target=first)
    thread.start()
    assert store.held.wait(10)
    store.write(PREFIX, group_changes(2))  # the later write lands first
    store.go.set()
    thread.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], StoreStale), outcome
    assert replay(stored(redis_url)).groups[GROUP].group.group_epoch == 2
    store.close()


def test_d4_a_newer_coordinator_resets_the_sequence_and_fences_the_older_one(redis_url):
    old = new_store(redis_url)
    old.write(PREFIX, group_changes(1))
    old.write(PREFIX, group_changes(2))
    old.release()
    new = new_store(redis_url)  # a higher coordinator epoch, its sequence starts at 1 again
    new.write(PREFIX, group_changes(3))
    assert replay(stored(redis_url)).groups[GROUP].group.group_epoch == 3
    with pytest.raises(StoreFenced):
        old.write(PREFIX, group_changes(4))
    assert replay(stored(redis_url)).groups[GROUP].group.group_epoch == 3
    old.close()
    new.close()


def test_on_one_server_the_hash_and_the_owner_tokens_are_one_atomic_step(redis_url):
    store = new_store(redis_url)
    shard = "{faults:v1:0}"
    store.write(PREFIX, group_changes(1), [OwnerToken(shard, GROUP, "a")])
    assert token(redis_url, shard) == "a"
    store.write(PREFIX, group_changes(2), [OwnerToken(shard, GROUP, None)])
    assert token(redis_url, shard) is None
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    client.hset(meta_key(PREFIX), "coordinatorEpoch", store.coordinator_epoch + 1)
    with pytest.raises(StoreFenced):  # the check failed: neither the hash nor the token moved
        store.write(PREFIX, group_changes(3), [OwnerToken(shard, GROUP, "b")])
    assert token(redis_url, shard) is None
    assert replay(stored(redis_url)).groups[GROUP].group.group_epoch == 2
    client.close()
    store.close()


def emfile(*_args: Any, **_kwargs: Any) -> Any:
    raise OSError(errno.EMFILE, "Too many open files")


def test_every_io_failure_of_the_store_is_a_store_error(redis_url):
    store = new_store(redis_url)
    streams = StreamAdmin(store.client)
    store.client.connection_pool.get_connection = emfile  # type: ignore[method-assign]
    calls = {
        "write": lambda: store.write(PREFIX, group_changes(1), [OwnerToken("{s}", GROUP, "a")]),
        "load_all": store.load_all,
        "load_prefix": lambda: store.load_prefix(PREFIX),
        "renew": store.renew,
        "release": store.release,
        "create_consumer_groups": lambda: store.create_consumer_groups(["{s}"], [GROUP]),
        "seal": lambda: streams.seal(["{s}"]),
        "drain_counts": lambda: shard_ops.drain_counts(store.client, ["{s}"], [GROUP]),
        "shard_lag": lambda: shard_ops.shard_lag(store.client, ["{s}"], GROUP),
        "retire": lambda: streams.retire(["{s}"], [GROUP]),
    }
    for name, call in calls.items():
        with pytest.raises(StoreError, match="Too many open files"):
            call()
        assert name  # every call above raised a StoreError (not a bare OSError)
    store.client.connection_pool.disconnect()
    store.close()


# --- the actor and a store that fails or stalls ------------------------------------------


def join(member_id: str) -> m.Heartbeat:
    return m.Heartbeat(request_id=1, stream_prefix=PREFIX, consumer_group=GROUP,
                       member_id=member_id, member_epoch=JOIN_EPOCH, owned_shards=())


def beat(response: m.HeartbeatResponse) -> m.Heartbeat:
    assert response.member_epoch is not None and response.assignment is not None
    return m.Heartbeat(request_id=2, stream_prefix=PREFIX, consumer_group=GROUP,
                       member_id=response.member_id, member_epoch=response.member_epoch,
                       owned_shards=response.assignment.assigned_shards)


async def ask(actor: Served, request: Any) -> Any:
    return await actor.ask(request)


async def tick(actor: Served) -> None:
    await ask(actor, m.GetRouting(request_id=3, stream_prefix=PREFIX))  # a batch of its own
    await actor.tick()
    await ask(actor, m.GetRouting(request_id=4, stream_prefix=PREFIX))


def assert_redis_matches_memory(redis_url: str, actor: Served) -> None:
    snapshot = replay(stored(redis_url))
    group = actor.machine.groups[GROUP]
    assert snapshot.groups[GROUP].group == group.persistent_group()
    assert snapshot.groups[GROUP].members == {mid: group.persistent_member(mid)
                                              for mid in group.members}
    for shard in actor.machine.assignable_shards():
        assert token(redis_url, shard) == group.owners.get(shard), shard


async def start_actor(nursery: trio.Nursery, store: MetadataStore) -> Served:
    actor = serve(nursery, PrefixActor(PREFIX, store, SETTINGS))
    routing = await ask(actor, m.SetShardCount(request_id=5, stream_prefix=PREFIX,
                                               consumer_group=GROUP, shard_count=4))
    assert routing.status == Status.OK
    return actor


class SecondStepFailsOnce(MetadataStore):
    """A cluster-like store (the owner tokens are a second step) whose token step fails once."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.atomic_owner_tokens = False
        self.failures = 0

    def _write_owner_tokens(self, tokens: list[OwnerToken]) -> None:
        if self.failures == 0:
            self.failures += 1
            raise OSError(errno.EMFILE, "Too many open files")
        super()._write_owner_tokens(tokens)


async def test_a_checkpoint_whose_owner_token_step_failed_is_repaired_by_the_next_one(redis_url):
    store = new_store(redis_url, SecondStepFailsOnce)
    async with trio.open_nursery() as nursery:
        actor = await start_actor(nursery, store)
        refused = await ask(actor, join("a"))
        assert refused.status == Status.COORDINATOR_NOT_AVAILABLE
        # half-written: Redis has the member, its tokens are missing, memory rolled back
        assert "a" in replay(stored(redis_url)).groups[GROUP].members
        assert "a" not in actor.machine.groups[GROUP].members
        assert actor.machine.repair_pending
        await tick(actor)  # the next checkpoint carries the repair
        assert not actor.machine.repair_pending
        assert "a" not in replay(stored(redis_url)).groups[GROUP].members
        assert_redis_matches_memory(redis_url, actor)
        joined = await ask(actor, join("a"))  # and the retried join lands whole
        assert joined.status == Status.OK and joined.assignment.assigned_shards
        assert_redis_matches_memory(redis_url, actor)
        nursery.cancel_scope.cancel()
    store.close()


async def test_an_oserror_in_a_write_is_answered_not_raised_and_the_actor_carries_on(redis_url):
    store = new_store(redis_url)
    async with trio.open_nursery() as nursery:
        actor = await start_actor(nursery, store)
        real = store.client.connection_pool.get_connection
        store.client.connection_pool.get_connection = emfile  # type: ignore[method-assign]
        refused = await ask(actor, join("a"))
        assert refused.status == Status.COORDINATOR_NOT_AVAILABLE
        store.client.connection_pool.get_connection = real  # type: ignore[method-assign]
        joined = await ask(actor, join("a"))
        assert joined.status == Status.OK
        assert_redis_matches_memory(redis_url, actor)
        nursery.cancel_scope.cancel()
    store.close()


class Stall(MetadataStore):
    """Hash writes block while `stalled` is clear (Redis not answering)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.running = threading.Event()
        self.running.set()
        self.blocked = 0

    def _write_hash(self, prefix: str, keys: list[str], args: list[Any]) -> None:
        if not self.running.is_set():
            self.blocked += 1
            assert self.running.wait(20)
        super()._write_hash(prefix, keys, args)


async def test_d4_a_stalled_write_is_abandoned_at_a_third_of_the_lease(redis_url):
    store = new_store(redis_url, Stall)
    assert isinstance(store, Stall)
    async with trio.open_nursery() as nursery:
        actor = await start_actor(nursery, store)
        a = await ask(actor, join("a"))
        assert a.status == Status.OK
        store.running.clear()  # Redis stops answering
        started = trio.current_time()
        refused = await ask(actor, join("b"))
        waited = trio.current_time() - started
        assert refused.status == Status.COORDINATOR_NOT_AVAILABLE
        assert LEASE_MS / 3000 - 0.05 <= waited <= LEASE_MS / 3000 + 0.3, waited
        # while the abandoned write still runs: a write is refused at once, and nothing is sent
        started = trio.current_time()
        again = await ask(actor, join("c"))
        assert again.status == Status.COORDINATOR_NOT_AVAILABLE
        assert trio.current_time() - started < 0.2
        assert store.blocked == 1
        # a member that only heartbeats is answered as usual (its batch only repairs)
        kept = await ask(actor, beat(a))
        assert kept.status == Status.OK and kept.member_epoch == a.member_epoch
        assert actor.actor.calls.abandoned_calls == 1
        assert "b" not in actor.machine.groups[GROUP].members
        store.running.set()  # Redis answers again: the abandoned write lands and is adopted
        with trio.fail_after(5):
            while "b" not in actor.machine.groups[GROUP].members or actor.machine.repair_pending:
                await tick(actor)
        assert_redis_matches_memory(redis_url, actor)
        b = await ask(actor, join("b"))  # b retries its join: a live member rejoining
        assert b.status == Status.OK
        assert_redis_matches_memory(redis_url, actor)
        nursery.cancel_scope.cancel()
    store.close()


class StalledDrain:
    """Drain checks block while `running` is clear."""

    def __init__(self) -> None:
        self.running = threading.Event()
        self.running.set()
        self.real = shard_ops.drain_counts

    def __call__(self, *args: Any) -> Any:
        assert self.running.wait(20)
        return self.real(*args)


async def test_d4_a_stalled_drain_check_is_abandoned_and_its_batch_answered_unavailable(
        redis_url, monkeypatch):
    store = new_store(redis_url)
    async with trio.open_nursery() as nursery:
        actor = await start_actor(nursery, store)
        stalled = StalledDrain()
        monkeypatch.setattr(shard_ops, "drain_counts", stalled)
        a = await ask(actor, join("a"))
        assert a.status == Status.OK
        client = redis.Redis.from_url(redis_url)
        for shard in actor.machine.routing.streams:  # undelivered entries: v1 stays DRAINING
            client.xadd(shard, {"k": "v"})
        client.close()
        # a reshard starts a migration (R1) and asks for a drain check in the same batch
        await ask(actor, m.SetShardCount(request_id=6, stream_prefix=PREFIX, consumer_group=GROUP,
                                         shard_count=2))
        assert actor.machine.migration is not None
        assert actor.machine.migration.state == MigrationState.DRAINING
        stalled.running.clear()
        started = trio.current_time()
        actor.queue(Tick(now_ms()))  # one batch: a drain check, a join
        refused = await ask(actor, join("b"))
        assert refused.status == Status.COORDINATOR_NOT_AVAILABLE
        assert trio.current_time() - started <= LEASE_MS / 3000 + 0.3
        assert actor.actor.calls.abandoned_calls == 1
        stalled.running.set()
        with trio.fail_after(5):
            while (await ask(actor, join("b"))).status != Status.OK:
                await trio.sleep(0.05)
        assert_redis_matches_memory(redis_url, actor)
        nursery.cancel_scope.cancel()
    store.close()
