"""The data plane's fast paths: message building, the tuple-keyed queue, pipelined reads,
chunked and script-cached acks, batching, and key order with real parallelism."""

from __future__ import annotations

import pytest
import trio

import rsc.member.redis_io.stream_commands as commands_module
from rsc.member.listener import Listener
from rsc.member.pure.ordering import KeyOrderedQueue
from rsc.member.redis_io.streams import StreamOps, connect
from rsc.member.shells.runtime import Message, queued_entries
from rsc.protocol import owner_key
from tests.test_member_support import pending_count, set_shards, write_messages

SHARD, GROUP = "{orders:v1:0}", "billing"


def test_a_message_is_immutable_and_gives_both_forms_of_key_and_value():
    message = Message("s", "1-0", "clé".encode(), b"\xff\x00v", "m", {"trace": b"t"})
    assert (message.key, message.key_bytes) == ("clé", "clé".encode())
    assert message.value_bytes == b"\xff\x00v" and message.value == "\ufffd\x00v"
    assert message.attempt == 1 and message.headers == {"trace": b"t"}
    assert message.fields == {"key": "clé", "value": "\ufffd\x00v", "h:trace": "t"}
    assert message._replace(attempt=2).attempt == 2 and message.attempt == 1
    with pytest.raises(AttributeError):
        message.value_bytes = b"changed"  # type: ignore[misc]
    assert Message("s", "2-0", None, b"v", "m").key is None  # keyless (M3)


def test_queued_entries_from_server_replies():
    entries = [[b"1-0", [b"key", b"a", b"value", b"x"]],
               [b"2-0", [b"value", b"y", b"key", b"b"]],
               [b"3-0", [b"key", b"c", b"value", b"z", b"h:trace", b"t"]],
               [b"4-0", [b"value", b"keyless"]],
               ["5-0", ["key", "d", "value", "text reply"]],
               [b"6-0", None],
               [None, None]]
    assert queued_entries("s", entries, 7) == [
        (("s", b"a"), "1-0", b"a", b"x", {}, 7),
        (("s", b"b"), "2-0", b"b", b"y", {}, 7),
        (("s", b"c"), "3-0", b"c", b"z", {"trace": b"t"}, 7),
        (("s", "4-0"), "4-0", None, b"keyless", {}, 7),  # keyless: ordered by nothing but itself
        (("s", b"d"), "5-0", b"d", b"text reply", {}, 7),
        (("s", "6-0"), "6-0", None, b"", {}, 7),
    ]


def test_queue_with_an_order_key_function_keeps_key_order_and_drops_followers():
    queue: KeyOrderedQueue[tuple[tuple[str, str], int]] = KeyOrderedQueue(lambda item: item[0])
    for seq, key in enumerate(["a", "b", "a", "b", "c"]):
        queue.push((("s", key), seq))
    queue.push((("t", "a"), 5))
    first = queue.pop_ready()
    assert first == (("s", "a"), 0) and queue.ready == 3
    # "a" runs; "b" and "c" wait at the head; followers of both are dropped with the shard
    assert sorted(queue.drop_shard("s")) == [(("s", "a"), 2), (("s", "b"), 1), (("s", "b"), 3),
                                             (("s", "c"), 4)]
    assert len(queue) == 1
    queue.push((("s", "a"), 6))
    assert queue.pop_ready() == (("t", "a"), 5)
    assert queue.pop_ready() is None, "s/a still runs"
    assert queue.done(first)
    assert queue.pop_ready() == (("s", "a"), 6)


def make_stream(redis_url: str, entries: int) -> None:
    client = connect(redis_url)
    client.xgroup_create(SHARD, GROUP, id="0", mkstream=True)
    pipe = client.pipeline(transaction=False)
    for n in range(entries):
        pipe.xadd(SHARD, {"key": f"k{n}", "value": str(n)})
    pipe.execute()
    client.close()


def test_pipelined_reads_answer_in_order_with_disjoint_entries(redis_url):
    make_stream(redis_url, 25)
    client = connect(redis_url)
    ops = StreamOps(client, GROUP, "member-a", use_xackdel=False)
    ops.send_read([SHARD], count=10, block_ms=100)
    ops.send_read([SHARD], count=10, block_ms=100)
    assert ops.reads_sent == 2
    first = ops.receive_read()
    ops.send_read([SHARD], count=10, block_ms=100)
    second, third = ops.receive_read(), ops.receive_read()
    assert ops.reads_sent == 0
    values = [flat[3] for reply in (first, second, third) for _, entries in reply
              for _, flat in entries]
    assert values == [str(n) for n in range(25)]
    ops.send_read([SHARD], count=10, block_ms=100)
    ops.reset_reads()  # what was in flight is dropped with the connection
    assert ops.reads_sent == 0
    with pytest.raises(RuntimeError):
        ops.receive_read()
    client.close()


def test_acks_are_chunked_and_survive_a_script_flush(redis_url, monkeypatch):
    make_stream(redis_url, 12)
    client = connect(redis_url)
    client.set(owner_key(SHARD, GROUP), "member-a")
    ops = StreamOps(client, GROUP, "member-a", use_xackdel=False)
    ids = [entry.id for entry in ops.read_new([SHARD], count=100, block_ms=100)]
    monkeypatch.setattr(commands_module, "ACK_CHUNK", 5)
    assert ops.ack({SHARD: ids[:6]}) == {SHARD: 6}
    client.script_flush()  # a restarted or flushed server: the script is loaded again
    assert ops.ack({SHARD: ids[6:]}) == {SHARD: 6}
    assert client.xpending(SHARD, GROUP)["pending"] == 0
    client.close()


async def test_acks_go_in_batches_not_one_round_trip_per_message(coordinator):
    streams = await set_shards(coordinator.url, "orders", GROUP, 1)
    total = 3000
    write_messages(coordinator.redis_url, streams, [(f"k{n}", str(n)) for n in range(total)])
    acked: list[int] = []
    all_acked = trio.Event()

    def on_acked(member_id: str, count: int) -> None:
        acked.append(count)
        if sum(acked) >= total:
            all_acked.set()

    async def handle(message: Message) -> None:
        pass

    listener = Listener(handle, stream_prefix="orders", consumer_group=GROUP,
                        coordinator_url=coordinator.url, redis_url=coordinator.redis_url,
                        read_count=500, ack_observer=on_acked)
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        with trio.fail_after(20):
            await all_acked.wait()
        listener.stop()
    assert sum(acked) == total
    assert len(acked) <= total // 50, f"{len(acked)} ack round trips for {total} messages"
    assert pending_count(coordinator.redis_url, streams, GROUP) == 0


async def test_before_ack_runs_before_every_ack_batch_and_holds_back_what_it_refuses(coordinator):
    """`rsc consume` flushes its stdout lines in `before_ack`: every acked entry was handled
    before a `before_ack` that said yes, and a batch it refuses is not acked (pending)."""
    streams = await set_shards(coordinator.url, "orders", GROUP, 1)
    total = 400
    write_messages(coordinator.redis_url, streams, [(f"k{n}", str(n)) for n in range(total)])
    handled = 0
    covered = 0  # handled entries a yes of before_ack covered
    acked: list[int] = []
    refusing = True
    asked = trio.Event()
    all_acked = trio.Event()

    def before_ack() -> bool:
        nonlocal covered
        asked.set()
        if refusing:
            return False
        covered = handled
        return True

    def on_acked(member_id: str, count: int) -> None:
        acked.append(count)
        assert sum(acked) <= covered, "an entry was acked before before_ack covered it"
        if sum(acked) >= total:
            all_acked.set()

    async def handle(message: Message) -> None:
        nonlocal handled
        handled += 1

    def member_listener() -> Listener:
        made = Listener(handle, stream_prefix="orders", consumer_group=GROUP,
                        coordinator_url=coordinator.url, redis_url=coordinator.redis_url,
                        read_count=50, ack_observer=on_acked)
        for member in made.members:
            member.core.observers.before_ack = before_ack
        return made

    listener = member_listener()
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        with trio.fail_after(20):
            await asked.wait()
            while handled < total:
                await trio.sleep(0.01)
        assert acked == [] and pending_count(coordinator.redis_url, streams, GROUP) == total
        listener.stop(leave=True)
    # refused batches stay pending; a new member (same group) gets them again and acks them
    refusing = False
    handled = covered = 0
    listener = member_listener()
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        with trio.fail_after(20):
            await all_acked.wait()
        listener.stop()
    assert sum(acked) == total
    assert pending_count(coordinator.redis_url, streams, GROUP) == 0


async def test_different_keys_run_in_parallel_and_each_key_in_order(coordinator):
    streams = await set_shards(coordinator.url, "orders", GROUP, 1)
    keys, per_key = 20, 10
    write_messages(coordinator.redis_url, streams,
                   [(f"k{n % keys}", str(n)) for n in range(keys * per_key)])
    running: set[str] = set()
    most_at_once = 0
    order: dict[str, list[int]] = {}
    done = trio.Event()

    async def handle(message: Message) -> None:
        nonlocal most_at_once
        assert message.key is not None
        assert message.key not in running, "one key runs one message at a time"
        running.add(message.key)
        most_at_once = max(most_at_once, len(running))
        for _ in range(3):  # awaited work: lets the other workers run meanwhile
            await trio.lowlevel.checkpoint()
        order.setdefault(message.key, []).append(int(message.value))
        running.discard(message.key)
        if sum(map(len, order.values())) == keys * per_key:
            done.set()

    listener = Listener(handle, stream_prefix="orders", consumer_group=GROUP,
                        coordinator_url=coordinator.url, redis_url=coordinator.redis_url,
                        runtime_max_concurrency=16)
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        with trio.fail_after(20):
            await done.wait()
        assert listener.members[0].stats.workers == 16
        listener.stop()
    assert most_at_once > 1, "different keys ran in parallel"
    for values in order.values():
        assert values == sorted(values)


@pytest.mark.parametrize("executor", ["native", "redis-py"])
async def test_both_executors_read_ahead_and_ack_alike(redis_url, executor):
    """The one async protocol (member/redis_io/dataplane.py): native and redis-py in a thread answer
    the same reads (sent one ahead, answered in order) and acks (owner checked, NOSCRIPT
    loaded again)."""
    from rsc.member.redis_io.dataplane import ThreadedStreamOps, open_stream_ops
    from rsc.member.redis_io.native_streams import NativeStreamOps
    from rsc.member.redis_io.stream_commands import NOT_OWNER

    client = connect(redis_url, decode=False)
    client.xgroup_create(SHARD, GROUP, id="0", mkstream=True)
    for n in range(5):
        client.xadd(SHARD, {"key": f"k{n}", "value": str(n)})
    sync_ops = StreamOps(client, GROUP, "member-a", use_xackdel=False)
    ops = open_stream_ops(sync_ops) if executor == "native" else ThreadedStreamOps(sync_ops)
    assert isinstance(ops, NativeStreamOps if executor == "native" else ThreadedStreamOps)
    try:
        first = await ops.read([[SHARD], [SHARD]], count=2, block_ms=100)
        assert ops.reads_sent == 1, "the second read stays in flight"
        second = await ops.read([], count=2, block_ms=100)
        assert ops.reads_sent == 0 and await ops.read([], count=2, block_ms=100) == []
        ids = [entry[0].decode() for _, entries in first + second for entry in entries]
        assert [shard for shard, _ in first + second] == [SHARD, SHARD] and len(ids) == 4
        assert await ops.ack({SHARD: ids}) == {SHARD: NOT_OWNER}
        client.set(owner_key(SHARD, GROUP), "member-a")
        client.script_flush()
        assert await ops.ack({SHARD: ids}) == {SHARD: 4} and await ops.ack({}) == {}
        await ops.read([[SHARD]], count=10, block_ms=5000)  # the last entry, at once
        await ops.reset_reads()
        assert ops.reads_sent == 0
    finally:
        await ops.aclose()
        client.close()


@pytest.mark.parametrize("executor", ["native", "redis-py"])
async def test_both_executors_record_an_attempt_alike(redis_url, executor):
    """P1's attempt records go through the same async protocol: owner checked, NOSCRIPT loaded
    again, and as many at once as workers ask (each on a connection of its own)."""
    from rsc.member.redis_io.dataplane import ThreadedStreamOps, open_stream_ops
    from rsc.member.redis_io.native_streams import NativeStreamOps
    from rsc.member.redis_io.stream_commands import NOT_OWNER, NOT_PENDING, RECORDED

    client = connect(redis_url)
    client.xgroup_create(SHARD, GROUP, id="0", mkstream=True)
    ids = [client.xadd(SHARD, {"key": f"k{n}", "value": str(n)}) for n in range(8)]
    client.xreadgroup(GROUP, "member-a", {SHARD: ">"}, count=8)
    sync_ops = StreamOps(client, GROUP, "member-a", use_xackdel=False)
    ops = open_stream_ops(sync_ops) if executor == "native" else ThreadedStreamOps(sync_ops)
    assert isinstance(ops, NativeStreamOps if executor == "native" else ThreadedStreamOps)

    def counts() -> dict[str, int]:
        return {row["message_id"]: row["times_delivered"]
                for row in client.xpending_range(SHARD, GROUP, min="-", max="+", count=100)}

    try:
        client.set(owner_key(SHARD, GROUP), "member-b")
        assert await ops.record_attempt(SHARD, ids[0], 2) == NOT_OWNER
        assert counts()[ids[0]] == 1, "refused: nothing recorded"
        client.set(owner_key(SHARD, GROUP), "member-a")
        client.script_flush()
        outcomes: dict[str, int] = {}

        async def record(entry_id: str) -> None:
            outcomes[entry_id] = await ops.record_attempt(SHARD, entry_id, 3)

        async with trio.open_nursery() as nursery:
            for entry_id in ids:
                nursery.start_soon(record, entry_id)
        assert outcomes == dict.fromkeys(ids, RECORDED) and counts() == dict.fromkeys(ids, 3)
        client.xack(SHARD, GROUP, ids[0])
        assert await ops.record_attempt(SHARD, ids[0], 4) == NOT_PENDING
    finally:
        await ops.aclose()
        client.close()
