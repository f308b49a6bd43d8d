"""Helpers shared by the member integration tests (no tests here): shards and data."""

from __future__ import annotations

import trio

from rsc.member.redis_io.ops import produce_ops
from rsc.member.redis_io.streams import connect
from rsc.member.session import open_session
from rsc.protocol import (
    DescribeGroup,
    GroupDescription,
    GroupState,
    SetShardCount,
    ShardCountChanged,
    shard_for_key,
)


async def set_shards(url: str, prefix: str, group: str, count: int) -> tuple[str, ...]:
    """Create the prefix's shard streams and the group's consumer groups; return the streams."""
    async with open_session(url, "admin") as session:
        response = await session.request(SetShardCount(
            request_id=0, stream_prefix=prefix, consumer_group=group, shard_count=count))
    assert isinstance(response, ShardCountChanged) and response.routing is not None, response
    return response.routing.streams


async def wait_for_stable_members(url: str, prefix: str, group: str, members: int,
                                  timeout: float = 30) -> None:
    """Wait (bounded) until `members` members hold their target and the group is STABLE."""
    with trio.fail_after(timeout):
        async with open_session(url, "admin") as session:
            while True:
                described = await session.request(DescribeGroup(
                    request_id=0, stream_prefix=prefix, consumer_group=group))
                assert isinstance(described, GroupDescription), described
                if described.state == GroupState.STABLE and len(described.members) == members:
                    return
                await trio.sleep(0.05)


def entry(shard: str, key: str, value: str) -> tuple[str, list[bytes]]:
    """One write of ProduceOps: the shard and the entry's fields (docs/protocol.md M5)."""
    return shard, [b"key", key.encode(), b"value", value.encode()]


def write_messages(redis_url: str, streams: tuple[str, ...],
                   records: list[tuple[str, str]]) -> None:
    """XADD (key, value) records to their shards directly, in pipelines (test data setup)."""
    client = connect(redis_url)
    try:
        ops = produce_ops(client)  # a cluster client gets the cluster commands
        for start in range(0, len(records), 1000):
            chunk = records[start:start + 1000]
            ops.write([entry(streams[shard_for_key(k, len(streams))], k, v) for k, v in chunk])
    finally:
        client.close()


def pending_count(redis_url: str, streams: tuple[str, ...], group: str) -> int:
    client = connect(redis_url)
    try:
        return sum(int(client.xpending(s, group)["pending"]) for s in streams)
    finally:
        client.close()
