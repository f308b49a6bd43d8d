"""K10: each role tries every kind of command it needs once at start, on probe keys its
documented ACL pattern covers (docs/examples/redis-acl.conf, docs/operations/redis.md), so a
missing permission is found before anything is accepted, not on the first metadata write.

A NOPERM reply is the missing permission; any other error reply (no such key, no such
group) means the command was allowed, which is all a probe asks. Blocking: run it in a
thread.
"""

from __future__ import annotations

from collections.abc import Sequence

import redis

from rsc.common.lua import Client

__all__ = ["COORDINATOR_PROBES", "MEMBER_PROBES", "PROBE_KEY", "PROBE_STREAM", "PRODUCER_PROBES",
           "MissingPermission", "probe_permissions"]

PROBE_KEY = "rsc:probe"  # the coordinator's ~rsc:* covers it
PROBE_STREAM = "{rsc:probe}"  # every role's ~{* covers it (a member's and a producer's too)
PROBE_GROUP = "rsc:probe"

Probe = tuple[str, tuple[str, ...]]  # (the ACL permission, the command that needs it)

COORDINATOR_PROBES: tuple[Probe, ...] = (
    ("+get", ("GET", PROBE_KEY)),
    ("+set", ("SET", PROBE_KEY, "1", "PX", "60000")),
    ("+pexpire", ("PEXPIRE", PROBE_KEY, "60000")),
    ("+incrby", ("INCRBY", f"{PROBE_KEY}:count", "0")),
    ("+exists", ("EXISTS", PROBE_KEY)),
    ("+hset", ("HSET", f"{PROBE_KEY}:hash", "probe", "1")),
    ("+hget", ("HGET", f"{PROBE_KEY}:hash", "probe")),
    ("+hgetall", ("HGETALL", f"{PROBE_KEY}:hash")),
    ("+hdel", ("HDEL", f"{PROBE_KEY}:hash", "probe")),
    ("+sadd", ("SADD", f"{PROBE_KEY}:set", "probe")),
    ("+smembers", ("SMEMBERS", f"{PROBE_KEY}:set")),
    ("+eval", ("EVAL", "return 1", "0")),
    ("+script|exists", ("SCRIPT", "EXISTS", "0000000000000000000000000000000000000000")),
    ("+xgroup|create", ("XGROUP", "CREATE", PROBE_STREAM, PROBE_GROUP, "0", "MKSTREAM")),
    ("+xinfo|groups", ("XINFO", "GROUPS", PROBE_STREAM)),
    ("+xinfo|stream", ("XINFO", "STREAM", PROBE_STREAM)),
    ("+xlen", ("XLEN", PROBE_STREAM)),
    ("+xpending", ("XPENDING", PROBE_STREAM, PROBE_GROUP)),
    ("+xrange", ("XRANGE", PROBE_STREAM, "-", "+", "COUNT", "1")),
    ("+xrevrange", ("XREVRANGE", PROBE_STREAM, "+", "-", "COUNT", "1")),
    ("+xtrim", ("XTRIM", PROBE_STREAM, "MAXLEN", "0")),
    ("+xgroup|destroy", ("XGROUP", "DESTROY", PROBE_STREAM, PROBE_GROUP)),
    *(("+del", ("DEL", key)) for key in (PROBE_KEY, f"{PROBE_KEY}:count", f"{PROBE_KEY}:hash",
                                          f"{PROBE_KEY}:set", PROBE_STREAM)),
)

MEMBER_PROBES: tuple[Probe, ...] = (
    ("+get", ("GET", "rsc:store-id")),
    ("+exists", ("EXISTS", PROBE_STREAM)),
    ("+xreadgroup", ("XREADGROUP", "GROUP", PROBE_GROUP, "probe", "COUNT", "1", "STREAMS",
                     PROBE_STREAM, ">")),
    ("+xautoclaim", ("XAUTOCLAIM", PROBE_STREAM, PROBE_GROUP, "probe", "0", "0-0", "COUNT", "1")),
    ("+xack", ("XACK", PROBE_STREAM, PROBE_GROUP, "0-1")),
    ("+xinfo|groups", ("XINFO", "GROUPS", PROBE_STREAM)),
    ("+xrange", ("XRANGE", PROBE_STREAM, "-", "+", "COUNT", "1")),
)

PRODUCER_PROBES: tuple[Probe, ...] = (
    ("+get", ("GET", "rsc:store-id")),
    ("+exists", ("EXISTS", PROBE_STREAM)),
    # an empty probe stream: nothing is left for anyone to read
    ("+xadd", ("XADD", PROBE_STREAM, "MAXLEN", "0", "*", "probe", "1")),
)


class MissingPermission(redis.exceptions.NoPermissionError):
    """The role's Redis user lacks `permission` (K6, K10); the text is the one line to say.
    A NOPERM error like any other: the tools' K6 handling (exit 2, exit 1) applies."""

    def __init__(self, permission: str, line: str) -> None:
        super().__init__(line)
        self.permission = permission


def probe_permissions(client: Client, probes: Sequence[Probe], *, role: str,
                      shown_url: str | None = None) -> None:
    """Run each probe once; raise MissingPermission naming the first permission refused.
    Connection errors are raised as they are (the caller retries those)."""
    for permission, command in probes:
        try:
            client.execute_command(*command)  # type: ignore[no-untyped-call]  # redis-py
        except redis.exceptions.NoPermissionError as exc:
            raise MissingPermission(permission, (
                f"{f'Redis at {shown_url}' if shown_url else 'Redis'} refuses the {role}'s user "
                f"the permission {permission} "
                f"({command[0]} {command[1] if len(command) > 1 else ''}: {exc}); grant the "
                "role's ACL (docs/operations/redis.md) or use another user") ) from exc
        except redis.exceptions.ResponseError:
            continue  # allowed (no such key or group): the permission is there
