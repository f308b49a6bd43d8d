"""`rsc consume --max-messages N` and `rsc consume PREFIX --peek` as real processes
(docs/protocol.md, Command line): what `rsc consume ... | head -3` users want, without acking
what nobody saw, and a look at the shards without joining a group."""

from __future__ import annotations

import io
import json
import subprocess

import pytest
import redis
import trio

from rsc.member.session import open_session
from rsc.protocol import DescribeGroup
from rsc.tools.output_lines import PipeClosed, StdoutLines
from rsc.tools.peek import MessageQuota
from tests.test_console_failures import assert_no_traceback, spawn_tool
from tests.test_member_support import set_shards

BACKLOG = 500


def fill(redis_url: str, streams: tuple[str, ...], count: int = BACKLOG) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        pipe = client.pipeline(transaction=False)
        for n in range(count):
            pipe.xadd(streams[n % len(streams)], {"key": f"k{n}", "value": str(n)})
        pipe.execute()
    finally:
        client.close()


async def read_all(stream) -> bytes:
    data = b""
    while chunk := await stream.receive_some(65536):
        data += chunk
    return data


class RecordingStream(io.StringIO):
    """stdout as the consumer sees it: what was flushed so far, and a reader that may go."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed = ""
        self.reader_gone = False

    def flush(self) -> None:
        if self.reader_gone:
            raise BrokenPipeError
        self.flushed = self.getvalue()


def test_consume_lines_wait_in_the_buffer_until_the_flush_before_their_ack() -> None:
    closed: list[bool] = []
    stream = RecordingStream()
    out = StdoutLines(on_closed=lambda: closed.append(True), stream=stream)
    out.write('{"id":"1-0"}', flush=False)
    out.write('{"id":"2-0"}', flush=False)
    assert stream.flushed == ""  # one flush per ack batch, not one per line
    assert out.flush() is True
    assert stream.flushed == '{"id":"1-0"}\n{"id":"2-0"}\n'
    out.write('{"id":"3-0"}')  # the default still flushes at once
    assert stream.flushed.endswith('{"id":"3-0"}\n')
    out.write('{"id":"4-0"}', flush=False)
    stream.reader_gone = True
    assert out.flush() is False  # the acker holds the batch back: line 4 was never seen
    assert closed == [True]
    with pytest.raises(PipeClosed):
        out.write('{"id":"5-0"}', flush=False)
    assert out.flush() is False


def test_max_messages_quota_lets_exactly_n_handler_calls_print():
    quota = MessageQuota(3)
    assert [quota.take() for _ in range(5)] == [True, True, True, False, False]
    assert quota.reached
    unlimited = MessageQuota(None)
    assert all(unlimited.take() for _ in range(1000)) and not unlimited.reached


async def test_consume_max_messages_prints_and_acks_exactly_n_then_leaves_and_exits_0(coordinator):
    streams = await set_shards(coordinator.url, "orders", "billing", 4)
    fill(coordinator.redis_url, streams)
    consume = await spawn_tool("consume", "orders", "billing", "--coordinator", coordinator.url,
                               "--redis-url", coordinator.redis_url, "--max-messages", "3",
                               "--workers", "8", stdout=subprocess.PIPE)
    assert consume.process.stdout is not None
    with trio.fail_after(30):
        out = await read_all(consume.process.stdout)
        assert await consume.finish() == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == 3, lines
    assert_no_traceback(consume)
    client = redis.Redis.from_url(coordinator.redis_url, decode_responses=True)
    try:
        groups = [g for s in streams for g in client.xinfo_groups(s) if g["name"] == "billing"]
        delivered_not_acked = sum(int(g["pending"]) for g in groups)
        undelivered = sum(int(g["lag"]) for g in groups)
    finally:
        client.close()
    # exactly the 3 shown were acked: everything else is still there for the group
    assert delivered_not_acked + undelivered == BACKLOG - 3
    async with open_session(coordinator.url, "admin") as session:  # it left: no lease wait
        described = await session.request(DescribeGroup(
            request_id=0, stream_prefix="orders", consumer_group="billing"))
    assert described.members == ()


async def test_consume_peek_prints_the_shards_without_a_group_and_acks_nothing(coordinator):
    streams = await set_shards(coordinator.url, "orders", "billing", 2)
    fill(coordinator.redis_url, streams, 10)
    consume = await spawn_tool("consume", "orders", "--peek", "--coordinator", coordinator.url,
                               "--redis-url", coordinator.redis_url, stdout=subprocess.PIPE)
    assert consume.process.stdout is not None
    with trio.fail_after(30):
        out = await read_all(consume.process.stdout)
        assert await consume.finish() == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert sorted(int(line["value"]) for line in lines) == list(range(10))
    assert {line["shard"] for line in lines} == set(streams)
    assert all(line["memberId"] is None for line in lines)
    client = redis.Redis.from_url(coordinator.redis_url, decode_responses=True)
    try:
        for stream in streams:
            (group,) = client.xinfo_groups(stream)
            assert (group["name"], group["pending"], group["last-delivered-id"]) == (
                "billing", 0, "0-0"), "nothing delivered, nothing acked"
            assert len(client.xinfo_groups(stream)) == 1, "no group of its own"
    finally:
        client.close()
    async with open_session(coordinator.url, "admin") as session:
        described = await session.request(DescribeGroup(
            request_id=0, stream_prefix="orders", consumer_group="billing"))
    assert described.members == (), "it joined nothing"


async def test_consume_peek_max_messages_stops_after_n(coordinator):
    streams = await set_shards(coordinator.url, "orders", "billing", 3)
    fill(coordinator.redis_url, streams, 1200)
    consume = await spawn_tool("consume", "orders", "--peek", "--max-messages", "700",
                               "--coordinator", coordinator.url,
                               "--redis-url", coordinator.redis_url, stdout=subprocess.PIPE)
    assert consume.process.stdout is not None
    with trio.fail_after(30):
        out = await read_all(consume.process.stdout)
        assert await consume.finish() == 0
    values = [json.loads(line)["value"] for line in out.splitlines()]
    assert len(values) == 700 and len(set(values)) == 700


async def test_consume_peek_on_a_prefix_without_routing_says_how_to_create_it(coordinator):
    consume = await spawn_tool("consume", "nothing", "--peek", "--coordinator", coordinator.url,
                               "--redis-url", coordinator.redis_url)
    assert await consume.finish(timeout=30) == 1
    assert len(consume.lines) == 1 and "nothing" in consume.lines[0], consume.lines
