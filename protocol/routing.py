"""Shard routing: the stable key hash and the stream key layout."""

from __future__ import annotations

import zlib

HASH_NAME = "crc32"


def shard_for_key(key: str | bytes, shard_count: int) -> int:
    """Shard index of a partition key: zlib CRC-32 (unsigned) of its UTF-8 bytes mod count."""
    if shard_count < 1:
        raise ValueError(f"shard_count must be >= 1, got {shard_count}")
    data = key.encode("utf-8") if isinstance(key, str) else key
    return zlib.crc32(data) % shard_count


def stream_key(prefix: str, version: int, index: int) -> str:
    """Redis key of shard `index` of routing `version`.

    The whole shard name is the Redis Cluster hash tag, so the stream and its
    seal and owner keys (`shard_tag_key`) live in one slot.
    """
    return f"{{{prefix}:v{version}:{index}}}"


def shard_tag_key(shard: str, suffix: str) -> str:
    """A key that shares `shard`'s hash tag, e.g. its seal marker or owner token."""
    return f"{shard}:{suffix}"


def seal_key(shard: str) -> str:
    """Marker that version of `shard` is sealed: writes to the stream are refused once it exists."""
    return shard_tag_key(shard, "sealed")


def owner_key(shard: str, consumer_group: str) -> str:
    """Owner token of `shard` for `consumer_group`, written by the coordinator.

    Its value is the owning memberId; the member's ack script refuses to ack
    when the token names someone else (a fenced or stale owner).
    """
    return shard_tag_key(shard, f"owner:{consumer_group}")
