"""COORDINATOR_NOT_AVAILABLE to an admin request: retried with backoff where a repeat ends where
one attempt would (the status table of docs/protocol.md: "retry with backoff"), not where a late
write of the first attempt (D4) would make a repeat fail or act twice.

A real coordinator (lease 1500 ms, so its store deadline is 500 ms) on its own redis-server,
which the test SIGSTOPs: every write the coordinator starts then outlives the deadline and is
answered COORDINATOR_NOT_AVAILABLE. The retried request succeeds once Redis is back (SIGCONT);
the others are answered at once with the refusal.
"""

from __future__ import annotations

import io
import logging
import os
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import pytest
import trio

from rsc.admin.cli import execute
from rsc.admin.client import RETRIED_WHEN_UNAVAILABLE, AdminError, open_admin_client
from rsc.common.redis_server import EmbeddedRedis
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from tests.conftest import start_coordinator
from tests.test_admin_cli import parse

pytestmark = pytest.mark.faults  # the fault step of .ci/run: python -m pytest -q -m faults

PREFIX, GROUP = "retry", "billing"
LEASE_MS = 1500  # the store deadline (D4) is a third of it


@contextmanager
def stopped(redis_server: EmbeddedRedis) -> Iterator[None]:
    """Redis SIGSTOPped for the block, and always SIGCONTed after it."""
    assert redis_server.process is not None
    pid = redis_server.process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@asynccontextmanager
async def coordinator_and_redis(nursery: trio.Nursery) -> AsyncIterator[tuple[str, EmbeddedRedis]]:
    with EmbeddedRedis() as redis_server:
        coordinator = await start_coordinator(nursery, redis_server.url, lease_ttl_ms=LEASE_MS,
                                              heartbeat_interval_ms=300, tick_interval_ms=50)
        async with open_admin_client(coordinator.url) as admin:
            await admin.set_shard_count(PREFIX, GROUP, 4)
        try:
            yield coordinator.url, redis_server
        finally:
            coordinator.scope.cancel()
            await coordinator.stopped.wait()


async def wait_for_log(caplog: pytest.LogCaptureFixture, text: str) -> None:
    while not any(text in record.getMessage() for record in caplog.records):
        await trio.sleep(0.02)


def test_the_retried_requests_are_the_reads_and_the_settings_set_to_a_value():
    retried = {kind.TYPE for kind in RETRIED_WHEN_UNAVAILABLE}
    assert retried == {"listGroups", "describeGroup", "getFormatVersion", "listDeadLetters",
                       "setShardCount", "setMaxConcurrency", "setRetention", "setFormatVersion"}
    # a late write of the first attempt would make a repeat of these fail or act twice
    assert not retried & {"removeMember", "deleteGroup", "resetOffsets", "redriveDeadLetters"}


async def test_a_setting_refused_while_redis_stalls_is_retried_until_it_lands(nursery, caplog):
    caplog.set_level(logging.WARNING, logger="rsc.admin.client")
    async with coordinator_and_redis(nursery) as (url, redis_server):
        async with open_admin_client(url, retry_unavailable_s=30) as admin:
            answer: list[m.MaxConcurrencyChanged] = []

            async def set_it() -> None:
                answer.append(await admin.set_max_concurrency(PREFIX, GROUP, 3))

            with trio.fail_after(30):
                async with trio.open_nursery() as inner:
                    with stopped(redis_server):
                        inner.start_soon(set_it)
                        # the first attempt was answered COORDINATOR_NOT_AVAILABLE, said once
                        await wait_for_log(caplog, "retrying with backoff")
                        assert not answer
                assert answer and answer[0].status == Status.OK
                description = await admin.describe_group(PREFIX, GROUP)
            assert description.max_concurrency == 3
    said = [r.getMessage() for r in caplog.records if "COORDINATOR_NOT_AVAILABLE" in r.getMessage()]
    assert len(said) == 1 and "setMaxConcurrency" in said[0], said


async def test_a_group_deletion_refused_while_redis_stalls_is_not_retried(nursery, caplog):
    caplog.set_level(logging.WARNING, logger="rsc.admin.client")
    async with coordinator_and_redis(nursery) as (url, redis_server):
        async with open_admin_client(url, retry_unavailable_s=30) as admin:
            with trio.fail_after(20), stopped(redis_server):
                started = trio.current_time()
                with pytest.raises(AdminError) as refused:
                    await admin.delete_group(PREFIX, GROUP)
                took = trio.current_time() - started
            assert refused.value.status == Status.COORDINATOR_NOT_AVAILABLE
            assert took < 10, took  # one attempt (its store deadline), not the 30 s of retries
    assert not any("retrying" in r.getMessage() for r in caplog.records)


async def test_the_retries_end_at_their_budget_with_the_last_refusal(nursery, caplog):
    caplog.set_level(logging.WARNING, logger="rsc.admin.client")
    async with coordinator_and_redis(nursery) as (url, redis_server):
        async with open_admin_client(url, retry_unavailable_s=1.5) as admin:
            with trio.fail_after(20), stopped(redis_server):
                with pytest.raises(AdminError) as refused:
                    await admin.set_retention(PREFIX, m.RetentionMode.NONE)
            assert refused.value.status == Status.COORDINATOR_NOT_AVAILABLE
    messages = [r.getMessage() for r in caplog.records]
    assert any("retrying with backoff" in text for text in messages), messages
    assert any("giving up" in text for text in messages), messages


async def test_rsc_admin_rides_out_a_redis_stall_within_its_timeout(nursery):
    async with coordinator_and_redis(nursery) as (url, redis_server):
        out, err = io.StringIO(), io.StringIO()
        args = parse(["admin", "--url", url, "--timeout", "20",
                      "set-max-concurrency", PREFIX, GROUP, "2"])
        codes: list[int] = []

        async def run_cli() -> None:  # the CLI owns its own trio.run: in a thread
            codes.append(await trio.to_thread.run_sync(execute, args, out, err))

        with trio.fail_after(30):
            async with trio.open_nursery() as inner:
                with stopped(redis_server):
                    inner.start_soon(run_cli)
                    while "retrying" not in err.getvalue():  # said on stderr, once
                        await trio.sleep(0.02)
                    assert not codes
            assert codes == [0], err.getvalue()
            assert err.getvalue().count("COORDINATOR_NOT_AVAILABLE") == 1, err.getvalue()
            async with open_admin_client(url) as admin:
                assert (await admin.describe_group(PREFIX, GROUP)).max_concurrency == 2


async def test_an_admin_client_without_retries_gives_the_refusal_at_once(nursery, caplog):
    caplog.set_level(logging.WARNING, logger="rsc.admin.client")
    async with coordinator_and_redis(nursery) as (url, redis_server):
        async with open_admin_client(url, retry_unavailable_s=0) as admin:
            with trio.fail_after(20), stopped(redis_server):
                started = trio.current_time()
                with pytest.raises(AdminError) as refused:
                    await admin.set_max_concurrency(PREFIX, GROUP, 5)
                took = trio.current_time() - started
            assert refused.value.status == Status.COORDINATOR_NOT_AVAILABLE
            assert took < 10, took  # one attempt (its 500 ms store deadline), no retries
    assert not any("retrying" in r.getMessage() for r in caplog.records)
