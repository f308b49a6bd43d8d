"""Shared fixtures: a real redis-server per test session, flushed per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from actors.embedded_redis import EmbeddedRedis


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedRedis]:
    """A real redis-server on a free port, stopped (by pid) after the session."""
    with EmbeddedRedis() as server:
        yield server


@pytest.fixture
def redis_url(redis_server: EmbeddedRedis) -> Iterator[str]:
    """URL of the session's redis-server, emptied before each test."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    yield redis_server.url
