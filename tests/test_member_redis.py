"""The data plane's Redis side against a real redis-server: ack fencing, recovery, handlers."""

from __future__ import annotations

import threading

import trio

from rsc.member.listener import Listener
from rsc.member.policies import AckPolicy, IdempotencyMarkers, RetryPolicy
from rsc.member.redis_io.ops import produce_ops, stream_ops
from rsc.member.redis_io.streams import NOT_OWNER, ProduceOps, StreamOps, connect
from rsc.member.session import open_session
from rsc.member.shells.runtime import Message
from rsc.protocol import SetMaxConcurrency, owner_key
from tests.test_member_support import (
    pending_count,
    set_shards,
    write_messages,
)

SHARD, GROUP = "{orders:v1:0}", "billing"


def make_stream(redis_url: str, entries: int) -> None:
    client = connect(redis_url)
    client.xgroup_create(SHARD, GROUP, id="0", mkstream=True)
    for n in range(entries):
        client.xadd(SHARD, {"key": f"k{n}", "value": str(n)})
    client.close()


def test_ack_script_acks_only_for_the_owner_named_by_the_token(redis_url):
    make_stream(redis_url, 2)
    client = connect(redis_url)
    ops = StreamOps(client, GROUP, "member-a", use_xackdel=False)
    ids = [entry.id for entry in ops.read_new([SHARD], count=10, block_ms=100)]
    assert ops.ack({SHARD: ids}) == {SHARD: NOT_OWNER}, "no token: nobody owns it"
    client.set(owner_key(SHARD, GROUP), "member-b")
    assert ops.ack({SHARD: ids}) == {SHARD: NOT_OWNER}
    assert client.xpending(SHARD, GROUP)["pending"] == 2
    client.set(owner_key(SHARD, GROUP), "member-a")
    assert ops.ack({SHARD: ids}) == {SHARD: 2}
    assert client.xpending(SHARD, GROUP)["pending"] == 0
    client.close()


def test_the_factories_build_the_single_redis_commands_for_a_single_redis(redis_url):
    client = connect(redis_url)
    try:
        ops = stream_ops(client, GROUP, "member-a", use_xackdel=False)
        assert type(ops) is StreamOps and not ops.use_xackdel
        assert type(produce_ops(client)) is ProduceOps
    finally:
        client.close()


def test_claim_pending_takes_over_entries_of_an_earlier_owner_and_its_own(redis_url):
    make_stream(redis_url, 5)
    client = connect(redis_url)
    earlier = StreamOps(client, GROUP, "member-a", use_xackdel=False)
    assert len(earlier.read_new([SHARD], count=3, block_ms=100)) == 3
    mine = StreamOps(client, GROUP, "member-b", use_xackdel=False)
    assert len(mine.read_new([SHARD], count=1, block_ms=100)) == 1
    cursor, claimed = mine.claim_pending(SHARD, "0-0", count=100)
    assert cursor == "0-0"
    assert [entry.value for entry in claimed] == ["0", "1", "2", "3"]
    consumers = {c["name"]: c["pending"] for c in client.xinfo_consumers(SHARD, GROUP)}
    assert consumers["member-b"] == 4 and consumers.get("member-a", 0) == 0
    client.close()


def test_idempotency_markers_say_first_time_once(redis_url):
    client = connect(redis_url)
    markers = IdempotencyMarkers(client, ttl_s=60)
    assert markers.first_time(SHARD, "1-0")
    assert not markers.first_time(SHARD, "1-0")
    assert 0 < client.ttl(markers.marker_key(SHARD, "1-0")) <= 60
    markers.forget(SHARD, "1-0")
    assert markers.first_time(SHARD, "1-0")
    client.close()


async def run_until(listener: Listener, condition, timeout: float = 15) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        with trio.fail_after(timeout):
            while not condition():
                await trio.sleep(0.02)
        listener.stop()


def listener_for(coordinator, handler, **options) -> Listener:
    return Listener(handler, stream_prefix="orders", consumer_group=GROUP,
                    coordinator_url=coordinator.url, redis_url=coordinator.redis_url,
                    **options)


async def test_restarted_member_recovers_its_own_pending_entries(coordinator):
    streams = await set_shards(coordinator.url, "orders", GROUP, 2)
    write_messages(coordinator.redis_url, streams, [(f"k{n}", str(n)) for n in range(40)])
    client = connect(coordinator.redis_url)
    for stream in streams:  # a previous life of member-x read these, then crashed
        client.xreadgroup(GROUP, "member-x", {stream: ">"}, count=10)
    client.close()
    seen: list[Message] = []

    async def handle(message: Message) -> None:
        seen.append(message)

    listener = listener_for(coordinator, handle, member_ids=["member-x"])
    await run_until(listener, lambda: len({m.value for m in seen}) == 40
                    and pending_count(coordinator.redis_url, streams, GROUP) == 0)
    assert {m.value for m in seen} == {str(n) for n in range(40)}


async def test_sync_handler_runs_in_a_worker_thread(coordinator):
    streams = await set_shards(coordinator.url, "orders", GROUP, 2)
    write_messages(coordinator.redis_url, streams, [("k", str(n)) for n in range(20)])
    threads: set[int] = set()
    seen: list[str] = []

    def handle(message: Message) -> None:
        threads.add(threading.get_ident())
        seen.append(message.value)

    await run_until(listener_for(coordinator, handle), lambda: len(seen) == 20)
    assert threading.get_ident() not in threads
    assert seen == [str(n) for n in range(20)], "one key: strictly in order"


async def test_retry_policy_dead_letters_after_max_deliveries_and_acks(coordinator):
    streams = await set_shards(coordinator.url, "orders", GROUP, 1)
    write_messages(coordinator.redis_url, streams, [("bad", "boom"), ("good", "ok")])
    attempts: list[tuple[str, int]] = []

    async def handle(message: Message) -> None:
        attempts.append((message.value, message.attempt))
        if message.value == "boom":
            raise RuntimeError("cannot")

    listener = listener_for(coordinator, handle, retry=RetryPolicy(
        max_deliveries=3, dead_letter_stream="orders-dead", backoff_ms=0))
    client = connect(coordinator.redis_url)
    await run_until(listener, lambda: client.xlen("orders-dead") == 1
                    and pending_count(coordinator.redis_url, streams, GROUP) == 0)
    (_, fields), = client.xrange("orders-dead")
    client.close()
    assert fields["value"] == "boom" and fields["rsc-deliveries"] == "3"
    assert fields["rsc-error"] == "RuntimeError: cannot"
    assert [a for a in attempts if a[0] == "boom"] == [("boom", 1), ("boom", 2), ("boom", 3)]
    stats = listener.members[0].stats
    assert (stats.failed, stats.dead_lettered, stats.processed) == (3, 1, 1)


async def test_failing_handler_without_retry_policy_leaves_the_entry_pending(coordinator):
    streams = await set_shards(coordinator.url, "orders", GROUP, 1)
    write_messages(coordinator.redis_url, streams, [("bad", "boom"), ("good", "ok")])
    done: list[str] = []

    async def handle(message: Message) -> None:
        if message.value == "boom":
            done.append("failed")
            raise RuntimeError("cannot")
        done.append(message.value)

    listener = listener_for(coordinator, handle)
    await run_until(listener, lambda: sorted(done) == ["failed", "ok"]
                    and listener.members[0].stats.acked == 1)
    assert pending_count(coordinator.redis_url, streams, GROUP) == 1


async def test_ack_before_policy_acks_before_the_handler_runs(coordinator):
    streams = await set_shards(coordinator.url, "orders", GROUP, 1)
    write_messages(coordinator.redis_url, streams, [("k", "v")])
    pending_seen: list[int] = []

    def handle(message: Message) -> None:
        pending_seen.append(pending_count(coordinator.redis_url, streams, GROUP))

    await run_until(listener_for(coordinator, handle, ack_policy=AckPolicy.BEFORE),
                    lambda: len(pending_seen) == 1)
    assert pending_seen == [0]


async def test_member_fences_itself_for_a_shard_whose_token_names_someone_else(coordinator):
    streams = await set_shards(coordinator.url, "orders", GROUP, 1)
    client = connect(coordinator.redis_url)
    seen: list[str] = []

    async def handle(message: Message) -> None:
        seen.append(message.value)
        client.set(owner_key(message.shard, GROUP), "somebody-else")

    listener = listener_for(coordinator, handle)
    member = listener.members[0]
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        write_messages(coordinator.redis_url, streams, [("k", "1")])
        with trio.fail_after(10):
            while member.stats.ack_refusals == 0:
                await trio.sleep(0.02)
        assert pending_count(coordinator.redis_url, streams, GROUP) == 1
        listener.stop()
    client.close()
    assert seen[0] == "1"


async def test_worker_count_follows_max_concurrency_live(coordinator):
    await set_shards(coordinator.url, "orders", GROUP, 2)

    async def handle(message: Message) -> None:
        pass

    listener = listener_for(coordinator, handle, runtime_max_concurrency=6)
    member = listener.members[0]
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        with trio.fail_after(10):
            while member.stats.workers != 6:
                await trio.sleep(0.02)
            async with open_session(coordinator.url, "admin") as admin:
                await admin.request(SetMaxConcurrency(
                    request_id=0, stream_prefix="orders", consumer_group=GROUP,
                    max_concurrency=2))
            while member.stats.workers != 2:
                await trio.sleep(0.02)
        listener.stop()
