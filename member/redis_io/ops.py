"""The data-plane command objects for a client: one Redis, or a Redis Cluster.

`streams.py` holds the commands over one Redis, `cluster_streams.py` their
cluster variants (one node per shard); these two factories pick by the
client, so neither module needs the other's name at run time.
"""

from __future__ import annotations

import redis

from rsc.member.redis_io.cluster_streams import ClusterProduceOps, ClusterStreamOps
from rsc.member.redis_io.streams import ProduceOps, StreamOps

Client = redis.Redis | redis.RedisCluster  # what `streams.connect` returns, as the URL says


def stream_ops(client: Client, consumer_group: str, consumer: str, *,
               use_xackdel: bool | None = None) -> StreamOps:
    """Reads, claims, acks and lag of one consumer (memberId) of one consumer group."""
    if isinstance(client, redis.RedisCluster):
        return ClusterStreamOps(client, consumer_group, consumer, use_xackdel=use_xackdel)
    return StreamOps(client, consumer_group, consumer, use_xackdel=use_xackdel)


def produce_ops(client: Client) -> ProduceOps:
    """Writes of a producer (and dead letters): XADD through the seal-checking script."""
    if isinstance(client, redis.RedisCluster):
        return ClusterProduceOps(client)
    return ProduceOps(client)
