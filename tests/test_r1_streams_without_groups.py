"""R1 against a real coordinator and redis-server: `setShardCount` on a prefix without any
group creates every stream of the new version, so a producer that starts first delivers."""

from __future__ import annotations

import redis
import trio

from rsc.member.session import open_session
from rsc.protocol import SetShardCount, ShardCountChanged
from tests.test_console_failures import run_tool


async def set_shards_without_group(url: str, prefix: str, count: int) -> ShardCountChanged:
    async with open_session(url, "admin") as session:
        response = await session.request(SetShardCount(
            request_id=0, stream_prefix=prefix, consumer_group=None, shard_count=count))
    assert isinstance(response, ShardCountChanged) and response.routing is not None, response
    return response


async def test_r1_set_shard_count_without_groups_creates_every_stream_of_the_version(coordinator):
    first = await set_shards_without_group(coordinator.url, "np", 4)
    client = redis.Redis.from_url(coordinator.redis_url, decode_responses=True)
    try:
        assert first.routing is not None
        for stream in first.routing.streams:
            assert client.type(stream) == "stream", stream
            assert client.xinfo_groups(stream) == [], "no placeholder group is left"
        resharded = await set_shards_without_group(coordinator.url, "np", 6)  # R1: next version
        assert resharded.routing is not None and resharded.routing.version == 2
        for stream in resharded.routing.streams:
            assert client.type(stream) == "stream", stream
    finally:
        client.close()


async def test_r1_a_producer_that_starts_before_any_group_delivers(coordinator):
    await set_shards_without_group(coordinator.url, "np", 4)
    lines = b"".join(f"k{n}\tv{n}\n".encode() for n in range(20))
    with trio.fail_after(60):
        code, err = await run_tool("produce", "np", "--coordinator", coordinator.url,
                                   "--redis-url", coordinator.redis_url, stdin=lines)
    assert code == 0, err
    assert err == ["rsc produce: sent 20, retried 0, rerouted 0"]
