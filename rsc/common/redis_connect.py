"""Connect to one Redis server or to a Redis Cluster through any one of its nodes.

The URL names one node; `INFO cluster` says whether it runs in cluster mode
(`cluster_enabled:1`), and then the client is redis-py's `RedisCluster`, which
learns the slot map from that node and follows MOVED and ASK redirections.
A `rediss://` URL speaks TLS to every node: the CA and an optional client
certificate come from the URL's query (`ssl_ca_certs`, `ssl_certfile`,
`ssl_keyfile`, read by redis-py) or RSC_REDIS_CA_FILE (rsc/common/tls.py).
The coordinator (actors/) and the members (member/) both connect through here.
"""

from __future__ import annotations

from typing import Any

import redis

from rsc.common.tls import redis_tls_options


def connect(url: str, **options: Any) -> redis.Redis | redis.RedisCluster:
    """A sync client for `url`: `RedisCluster` when that node is in cluster mode, else `Redis`.

    `options` go to both (e.g. decode_responses, socket_timeout). Asks the node
    once; when it cannot be reached (or refuses us) the answer is the plain
    client, which connects lazily and reports the error at its first use, as
    before: cluster mode is found only on a node that answers. A URL that is
    not a Redis URL, or names a TLS file that does not exist, raises ValueError.
    """
    options = {**redis_tls_options(url), **options}
    probe = redis.Redis.from_url(url, **options)
    try:
        enabled = str(probe.info("cluster").get("cluster_enabled", 0)) == "1"
    except redis.ResponseError:
        if _cluster_node_at_database_0(probe):  # the SELECT of the URL's database failed
            probe.close()
            raise ValueError(f"{url} names a database other than 0, but it is a Redis Cluster "
                             "node: use database 0") from None
        enabled = False  # a server without the cluster section
    except (redis.ConnectionError, redis.TimeoutError):
        enabled = False  # unreachable: the plain client reports it at its first use
    if not enabled:
        return probe
    probe.close()
    return redis.RedisCluster.from_url(url, **options)


def _cluster_node_at_database_0(probe: redis.Redis) -> bool:
    pool = probe.connection_pool
    if int(pool.connection_kwargs.get("db") or 0) == 0:
        return False
    at_0 = redis.ConnectionPool(connection_class=pool.connection_class,
                                **{**pool.connection_kwargs, "db": 0})
    try:
        return str(redis.Redis(connection_pool=at_0).info("cluster").get("cluster_enabled", 0)) == "1"
    except redis.RedisError:
        return False
    finally:
        at_0.disconnect()


def is_cluster(client: Any) -> bool:
    """True for a cluster client (its pipelines route each command to its slot's node)."""
    return isinstance(client, redis.RedisCluster)
