"""Pure tests of shard routing (docs/protocol.md Producer routing) and the Redis key layout."""

from __future__ import annotations

import zlib
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsc.protocol.routing import HASH_NAME, owner_key, seal_key, shard_for_key, stream_key

# --- shard_for_key: crc32(utf8(k)) mod shardCount, zlib's CRC-32, unsigned ---------------------


def test_hash_name() -> None:
    assert HASH_NAME == "crc32"


@pytest.mark.parametrize(("key", "count", "shard"), [
    # crc32(b"123456789") == 0xCBF43926, the CRC-32 check value; it is >= 2**31, so a signed
    # CRC would give another shard (Python: 6 for count 10, Java/C '%': -4).
    ("123456789", 10, 2),
    ("123456789", 1000, 262),
    ("123456789", 4096, 2342),
    ("", 7, 0),
    ("orders-42", 1000, 680),
    ("customer-1001", 10, 9),
    ("zürich", 8, 2),  # UTF-8 bytes; latin-1 would give 6
])
def test_pinned_vectors(key: str, count: int, shard: int) -> None:
    assert shard_for_key(key, count) == shard


def test_check_value_is_unsigned() -> None:
    assert zlib.crc32(b"123456789") == 0xCBF43926
    assert shard_for_key("123456789", 2**32) == 0xCBF43926
    assert shard_for_key("123456789", 10) != (0xCBF43926 - 2**32) % 10


@pytest.mark.parametrize("key", ["a", "orders-42", "user:1001", "訂單-7", "🙂", " ", "x" * 1000])
@pytest.mark.parametrize("count", [1, 2, 3, 4, 8, 16, 100, 4096])
def test_matches_zlib(key: str, count: int) -> None:
    assert shard_for_key(key, count) == zlib.crc32(key.encode("utf-8")) % count


@settings(max_examples=200, deadline=None)
@given(key=st.text(), count=st.integers(min_value=1, max_value=4096))
def test_any_key_lands_in_range_and_matches_zlib(key: str, count: int) -> None:
    shard = shard_for_key(key, count)
    assert 0 <= shard < count
    assert shard == (zlib.crc32(key.encode("utf-8")) & 0xFFFFFFFF) % count
    assert shard == shard_for_key(key.encode("utf-8"), count)  # bytes keys are the UTF-8 bytes
    assert shard_for_key(key, count) == shard  # stable


def test_one_shard_takes_every_key() -> None:
    assert {shard_for_key(f"k{i}", 1) for i in range(500)} == {0}


@pytest.mark.parametrize("count", [2, 3, 8, 16])
def test_spread_is_uniform_ish(count: int) -> None:
    keys = 16_000
    counts = Counter(shard_for_key(f"key-{i}", count) for i in range(keys))
    assert set(counts) == set(range(count))
    expected = keys / count
    for shard, n in counts.items():
        assert abs(n - expected) < 0.1 * expected, (shard, n, expected)


@pytest.mark.parametrize("count", [0, -1, -4096])
def test_count_below_one_is_refused(count: int) -> None:
    with pytest.raises(ValueError):
        shard_for_key("k", count)


# --- keys: stream, seal and owner share one Redis Cluster hash tag ----------------------------


def hash_tag(key: str) -> str:
    """The part of `key` Redis Cluster hashes (cluster spec: first '{', the next '}', non-empty)."""
    start = key.find("{")
    if start != -1:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start + 1:end]
    return key


def crc16_xmodem(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def key_slot(key: str) -> int:
    return crc16_xmodem(hash_tag(key).encode("utf-8")) % 16384


def test_cluster_slot_helper_matches_redis_vectors() -> None:
    # From the Redis Cluster specification: CRC16("123456789") == 0x31C3.
    assert crc16_xmodem(b"123456789") == 0x31C3
    assert key_slot("{user1000}.following") == key_slot("{user1000}.followers")
    assert hash_tag("foo{}{bar}") == "foo{}{bar}"
    assert hash_tag("foo{{bar}}zap") == "{bar"


def test_known_layout() -> None:
    shard = stream_key("orders", 1, 0)
    assert shard == "{orders:v1:0}"
    assert seal_key(shard) == "{orders:v1:0}:sealed"
    assert owner_key(shard, "billing") == "{orders:v1:0}:owner:billing"


NAME_CHARS = st.characters(exclude_categories=("Cc", "Cs"), exclude_characters="{}")
names = st.text(NAME_CHARS, min_size=1, max_size=200)


@settings(max_examples=150, deadline=None)
@given(prefix=names, group=names, version=st.integers(1, 10**6), index=st.integers(0, 4095))
def test_stream_seal_and_owner_keys_share_the_hash_tag(prefix: str, group: str, version: int,
                                                       index: int) -> None:
    shard = stream_key(prefix, version, index)
    tag = hash_tag(shard)
    assert tag and tag != shard  # the stream key carries a real hash tag
    assert prefix in tag and f"v{version}" in tag
    keys = [shard, seal_key(shard), owner_key(shard, group)]
    assert {hash_tag(key) for key in keys} == {tag}
    assert len({key_slot(key) for key in keys}) == 1
    assert len(set(keys)) == 3


def test_owner_keys_differ_per_group_and_shards_differ_per_version_and_index() -> None:
    shards = {stream_key("orders", v, i) for v in (1, 2, 3) for i in range(64)}
    assert len(shards) == 3 * 64
    assert len({hash_tag(s) for s in shards}) == 3 * 64  # distinct tags: shards spread over slots
    shard = stream_key("orders", 2, 5)
    assert owner_key(shard, "billing") != owner_key(shard, "audit")
    # Prefixes that look alike never collide: "a:v1" version 2 vs "a" version 1.
    assert stream_key("a", 1, 12) != stream_key("a", 11, 2)
    assert stream_key("a:v1", 2, 0) != stream_key("a", 1, 2)
