"""Shared fixtures: a real redis-server per test session, flushed per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from hypothesis import settings

from rsc.common import gc_policy
from rsc.common.redis_server import EmbeddedRedis
from tests.conftest_cluster import *  # noqa: F403  (server choice, cluster fixtures)
from tests.conftest_sentinel import *  # noqa: F403  (primary, replica and sentinels)
from tests.conftest_tls import *  # noqa: F403  (certificates, TLS redis-server and cluster)
from tests.redis_rigs import server_binary

# property tests check results, not CPU time: on a shared, loaded machine a first example can
# take longer than hypothesis's 200 ms default deadline (a failure that says nothing)
settings.register_profile("rsc", deadline=None)
settings.load_profile("rsc")

# This process hosts every in-process coordinator of the run, and the first one to start would
# install the tuned GC policy for the whole process (one policy per process, the first owner's
# mode stays): freezing, then full collections over the heap that a thousand earlier tests
# left behind, late in a run a pause long enough to put a coordinator's store calls past their
# deadline (an answer COORDINATOR_NOT_AVAILABLE, a watch not started). The test process keeps
# CPython's own collector; coordinators and members started as processes still run the policy
# RSC_GC gives them, and tests/test_gc_control.py tests the tuned mode on its own objects.
gc_policy.install(environ={"RSC_GC": "default"})


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedRedis]:
    """A real redis-server on a free port, stopped (by pid) after the session."""
    # RSC_TEST_SERVER: redis (default), valkey, redis8 or a path
    with EmbeddedRedis(binary=server_binary()) as server:
        yield server


@pytest.fixture
def redis_url(redis_server: EmbeddedRedis) -> Iterator[str]:
    """URL of the session's redis-server, emptied before each test."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    yield redis_server.url


# --- a real coordinator over real websockets ------------------------------------------

import functools  # noqa: E402
from collections.abc import Awaitable, Callable  # noqa: E402
from typing import Any  # noqa: E402

import attrs  # noqa: E402
import trio  # noqa: E402

from rsc.actors.app import serve  # noqa: E402
from rsc.actors.config import CoordinatorConfig  # noqa: E402

FAST = {"tick_interval_ms": 50, "lease_ttl_ms": 1000, "heartbeat_interval_ms": 200,
        "revoke_timeout_ms": 5000}


@attrs.define
class RunningCoordinator:
    """A coordinator started in the test's nursery; `stop()` cancels it (like SIGTERM)."""

    url: str
    redis_url: str
    config: CoordinatorConfig
    scope: trio.CancelScope
    stopped: trio.Event

    async def stop(self) -> None:
        self.scope.cancel()
        with trio.fail_after(10):
            await self.stopped.wait()


async def start_coordinator(
    nursery: trio.Nursery, redis_url: str, **overrides: Any
) -> RunningCoordinator:
    """Start a coordinator with short ticks and leases (FAST), overridable per test."""
    config = CoordinatorConfig(redis_url=redis_url, port=0, **{**FAST, **overrides})
    scope = trio.CancelScope()
    stopped = trio.Event()

    async def run(task_status: trio.TaskStatus[str]) -> None:
        try:
            with scope:
                await serve(config, task_status=task_status)
        finally:
            stopped.set()

    url = await nursery.start(run)
    return RunningCoordinator(url=url, redis_url=redis_url, config=config, scope=scope, stopped=stopped)


@pytest.fixture
async def coordinator_factory(
    redis_url: str, nursery: trio.Nursery
) -> Callable[..., Awaitable[RunningCoordinator]]:
    """`await coordinator_factory(**config_overrides)` starts one more coordinator."""
    return functools.partial(start_coordinator, nursery, redis_url)


@pytest.fixture
async def coordinator(
    coordinator_factory: Callable[..., Awaitable[RunningCoordinator]],
) -> RunningCoordinator:
    """A coordinator on the test's redis-server with short tick, lease and heartbeat."""
    return await coordinator_factory()
