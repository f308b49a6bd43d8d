"""D4 and `/readyz`: a SIGSTOPped Redis makes the coordinator unready within a third of the lease.

A stalled Redis answers nothing, so without a deadline the lease renewal (a metadata write)
would only fail at the Redis client's socket timeout (5 s). The renewal is abandoned at
D4's deadline (a third of `--lease-ttl-ms`) and counted as a failed write, so `/readyz`
turns 503 that soon; after SIGCONT the next renewal makes it 200 again.
"""

from __future__ import annotations

import os
import signal

import pytest
import trio

from rsc.actors.app import serve
from rsc.actors.config import CoordinatorConfig
from rsc.common.redis_server import EmbeddedRedis, free_port
from tests.helpers.http import http_get
from tests.test_metrics_coordinator import http_status

pytestmark = pytest.mark.faults  # the fault step of .ci/run: python -m pytest -q -m faults

LEASE_MS = 3000
TICK_MS = 100
SOCKET_TIMEOUT_S = 5.0  # the metadata store's Redis client (actors/redis_io/store.py)
SLACK_S = 2.0  # scheduling on a shared 2-core machine; still well under the socket timeout


async def test_d4_readyz_turns_503_within_a_third_of_the_lease_of_a_redis_sigstop(nursery):
    deadline_s = LEASE_MS / 3000
    bound_s = TICK_MS / 1000 + deadline_s + SLACK_S
    assert bound_s < SOCKET_TIMEOUT_S  # so a coordinator waiting for the socket timeout fails
    with EmbeddedRedis() as redis_server:
        assert redis_server.process is not None
        pid = redis_server.process.pid
        metrics_port = free_port()
        config = CoordinatorConfig(redis_url=redis_server.url, port=0, metrics_port=metrics_port,
                                   tick_interval_ms=TICK_MS, lease_ttl_ms=LEASE_MS,
                                   heartbeat_interval_ms=500)
        scope = trio.CancelScope()

        async def run(task_status: trio.TaskStatus[str]) -> None:
            with scope:
                await serve(config, task_status=task_status)

        await nursery.start(run)
        with trio.fail_after(20):
            while await http_status(metrics_port, "/readyz") != 200:
                await trio.sleep(0.02)
        os.kill(pid, signal.SIGSTOP)
        stopped_at = trio.current_time()
        try:
            with trio.fail_after(bound_s):
                while await http_status(metrics_port, "/readyz") != 503:
                    await trio.sleep(0.02)
            unready_after = trio.current_time() - stopped_at
            assert b"lease renewal" in (await http_get(metrics_port, "/readyz")).body
            assert await http_status(metrics_port, "/healthz") == 200
        finally:
            os.kill(pid, signal.SIGCONT)
        with trio.fail_after(20):
            while await http_status(metrics_port, "/readyz") != 200:
                await trio.sleep(0.02)
        print(f"\n/readyz 503 {unready_after:.2f} s after SIGSTOP "
              f"(deadline {deadline_s:.2f} s + a tick of {TICK_MS} ms)")
        scope.cancel()
