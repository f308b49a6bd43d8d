"""What the Redis server can do, asked of the server itself: never inferred from its version.

Valkey 9 reports `redis_version:7.2.4` and Redis 8.2 reports 8.2; only the
server knows which commands it has. Both sides (the coordinator's shard reads,
the member's ack script) ask here, once at start.
"""

from __future__ import annotations

import redis


def names_command(reply: object) -> bool:
    """Whether a `COMMAND INFO <name>` reply describes the command (an unknown one is nil).

    RESP2 gives a list with one entry per name asked (nil when unknown); a client that
    parses it may give a mapping of name to description instead.
    """
    if isinstance(reply, dict):
        return any(value is not None for value in reply.values())
    return isinstance(reply, list | tuple) and bool(reply) and reply[0] is not None


def supports_xackdel(client: redis.Redis | redis.RedisCluster) -> bool:
    """Whether XACKDEL exists: `COMMAND INFO XACKDEL` names it, on every master of a cluster
    (the command names no key, so each master is asked). Redis errors are raised."""
    servers = ([node.redis_connection
                for node in client.get_primaries()]  # type: ignore[no-untyped-call]  # redis-py's
               if isinstance(client, redis.RedisCluster) else [client])
    return bool(servers) and all(names_command(server.execute_command("COMMAND INFO", "XACKDEL"))
                                 for server in servers)
