"""The producer: routing, sealed-shard rerouting, and the `rsc produce` console contract."""

from __future__ import annotations

import json
import sys
import zlib

import pytest
import trio
from trio_websocket import ConnectionClosed, serve_websocket

from rsc.member.cli import LineSplitter, MalformedLine, parse_line
from rsc.member.producer import open_producer
from rsc.member.streams import ProduceOps, Refused, connect
from rsc.protocol import seal_key, shard_for_key
from tests.test_member_support import set_shards


def test_parse_line_accepts_tab_and_json_forms():
    assert parse_line("k1\thello\tworld") == ("k1", "hello\tworld")
    assert parse_line('{"key": "k2", "value": "v"}') == ("k2", "v")
    assert parse_line('{"key": "k3", "value": {"n": 1}}') == ("k3", '{"n": 1}')


@pytest.mark.parametrize("line", ["no tab here", "", '{"key": "k"}', '{"key": 1, "value": "v"}',
                                  "{not json", "[1, 2]"])
def test_parse_line_refuses_malformed_lines(line):
    with pytest.raises(MalformedLine):
        parse_line(line)


def test_line_splitter_yields_complete_lines_and_the_unterminated_tail():
    splitter = LineSplitter()
    assert splitter.feed(b"a\tb\nc\t") == [b"a\tb"]
    assert splitter.feed(b"d\n") == [b"c\td"]
    assert splitter.feed(b"e\tf") == []
    assert splitter.finish() == [b"e\tf"]


def test_routing_hash_is_zlib_crc32_of_utf8_mod_count():
    assert shard_for_key("customer-7", 8) == zlib.crc32(b"customer-7") % 8


async def test_producer_writes_each_key_to_its_shard(coordinator):
    streams = await set_shards(coordinator.url, "orders", "billing", 4)
    async with open_producer(coordinator.url, coordinator.redis_url, "orders") as producer:
        ids = await producer.send_batch([(f"k{n}", str(n)) for n in range(50)])
    assert len(ids) == 50
    client = connect(coordinator.redis_url)
    for stream_index, stream in enumerate(streams):
        for _, fields in client.xrange(stream):
            assert shard_for_key(fields["key"], 4) == stream_index
    assert sum(client.xlen(s) for s in streams) == 50
    client.close()


async def test_sealed_shard_write_is_rerouted_after_a_routing_refresh(nursery, redis_url):
    """A scripted coordinator answers v1 first, v2 after; v1 is sealed in the real Redis."""
    v1 = tuple(f"{{orders:v1:{i}}}" for i in range(2))
    v2 = tuple(f"{{orders:v2:{i}}}" for i in range(4))
    answers = iter([(1, v1)] + [(2, v2)] * 10)

    async def handler(request):
        connection = await request.accept()
        try:
            while True:
                frame = json.loads(await connection.get_message())
                version, streams = next(answers)
                await connection.send_message(json.dumps({
                    "type": "routing", "requestId": frame["requestId"], "status": "OK",
                    "streamPrefix": "orders", "version": version, "shardCount": len(streams),
                    "hash": "crc32", "streams": list(streams)}))
        except ConnectionClosed:
            pass

    server = await nursery.start(serve_websocket, handler, "127.0.0.1", 0, None)
    client = connect(redis_url)
    for stream in v1 + v2:  # the coordinator creates every shard stream of a live version
        client.xgroup_create(stream, "billing", id="0", mkstream=True)
    for stream in v1:
        client.set(seal_key(stream), "1")
    async with open_producer(f"ws://127.0.0.1:{server.port}", redis_url, "orders") as producer:
        ids = await producer.send_batch([("a", "1"), ("b", "2"), ("c", "3")])
        assert producer.routing is not None and producer.routing.version == 2
        assert producer.rerouted == 3
    assert len(ids) == 3
    assert sum(client.xlen(s) for s in v1) == 0
    assert sum(client.xlen(s) for s in v2) == 3
    client.close()


async def test_write_to_a_retired_stream_is_refused_not_recreated(redis_url):
    """A retired version's streams are deleted; a stale write must not bring one back."""
    client = connect(redis_url)
    try:
        results = ProduceOps(client).write([("{orders:v1:0}", "k", "v")])
        assert results == [Refused.MISSING]
        assert client.exists("{orders:v1:0}") == 0
    finally:
        client.close()


async def test_rsc_produce_reports_malformed_lines_and_exits_1(coordinator):
    streams = await set_shards(coordinator.url, "orders", "billing", 2)
    stdin = b'k1\tv1\nbroken\n{"key": "k2", "value": "v2"}\nk3\tv3'
    with trio.fail_after(30):
        result = await trio.run_process(
            [sys.executable, "-m", "rsc", "produce", "orders", "--coordinator", coordinator.url,
             "--redis-url", coordinator.redis_url],
            stdin=stdin, capture_stdout=True, capture_stderr=True, check=False)
    assert result.returncode == 1
    assert b"line 2" in result.stderr
    client = connect(coordinator.redis_url)
    values = sorted(fields["value"] for s in streams for _, fields in client.xrange(s))
    client.close()
    assert values == ["v1", "v2", "v3"]


async def test_rsc_produce_exits_0_when_every_line_is_written(coordinator):
    await set_shards(coordinator.url, "orders", "billing", 2)
    with trio.fail_after(30):
        result = await trio.run_process(
            [sys.executable, "-m", "rsc", "produce", "orders", "--coordinator", coordinator.url,
             "--redis-url", coordinator.redis_url],
            stdin=b"".join(b"k%d\tv\n" % n for n in range(500)), capture_stderr=True,
            check=False)
    assert result.returncode == 0, result.stderr
