"""D6 and D7 with real processes: `rsc consume --health-port` against a real coordinator.

- a member in its group: `/healthz` and `/readyz` 200, any other path 404;
- a member kept out by a cap (A1): `/healthz` 200, `/readyz` 503 with the reason;
- a member fenced by the coordinator (removed by an operator) comes back at once (D6):
  `/healthz` stays 200 and `/readyz` is 200 again;
- the same with the test fault `RSC_MEMBER_FAULT=no-rejoin` (it never sends its rejoin, the
  bug D6 forbids): `/healthz` turns 503 within a lease TTL plus a heartbeat interval.

The coordinator runs in the test (lease 1 s, heartbeat 200 ms); consumers are processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import trio

from rsc.admin.client import open_admin_client
from rsc.common.redis_server import free_port
from tests.processes import ROOT, stop
from tests.test_member_support import set_shards, wait_for_stable_members

PREFIX, GROUP = "health", "billing"


async def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
    except OSError:
        return 0, ""
    async with stream:
        await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        response = b""
        while chunk := await stream.receive_some(65536):
            response += chunk
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body.decode()


async def until_status(port: int, path: str, status: int, timeout: float) -> str:
    """Poll `path` until it answers `status`; its body."""
    with trio.fail_after(timeout):
        while True:
            code, body = await http_get(port, path)
            if code == status:
                return body
            await trio.sleep(0.05)


async def spawn_consume(coordinator, health_port: int, **env: str) -> trio.Process:
    return await trio.lowlevel.open_process(
        [sys.executable, "-m", "rsc", "consume", PREFIX, GROUP, "--coordinator", coordinator.url,
         "--redis-url", coordinator.redis_url, "--health-port", str(health_port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT,
        env={**os.environ, **env})


async def member_ids(url: str) -> list[str]:
    async with open_admin_client(url) as admin:
        description = await admin.describe_group(PREFIX, GROUP)
    return [member.member_id for member in description.members]


async def test_d7_a_member_in_its_group_answers_200_and_404_elsewhere(coordinator):
    await set_shards(coordinator.url, PREFIX, GROUP, 2)
    port = free_port()
    process = await spawn_consume(coordinator, port)
    try:
        assert await until_status(port, "/readyz", 200, 20) == "ready\n"
        assert await http_get(port, "/healthz") == (200, "ok\n")
        code, body = await http_get(port, "/metrics")
        assert code == 404 and "/healthz" in body and "/readyz" in body
    finally:
        await stop(process)


async def test_d7_a_member_refused_by_a_cap_is_healthy_and_not_ready(coordinator_factory):
    coordinator = await coordinator_factory(max_group_size=1)
    await set_shards(coordinator.url, PREFIX, GROUP, 2)
    first, second = free_port(), free_port()
    inside = await spawn_consume(coordinator, first)
    outside = None
    try:
        await until_status(first, "/readyz", 200, 20)
        outside = await spawn_consume(coordinator, second)
        reason = await until_status(second, "/readyz", 503, 20)
        with trio.fail_after(20):
            while "GROUP_MAX_SIZE_REACHED" not in reason:  # until its join was answered
                await trio.sleep(0.05)
                reason = (await http_get(second, "/readyz"))[1]
        assert await http_get(second, "/healthz") == (200, "ok\n")
    finally:
        await stop(inside)
        if outside is not None:
            await stop(outside)


async def removed_then(coordinator, port: int) -> float:
    """Once the consumer is in its group, remove it as an operator would; when that was."""
    await until_status(port, "/readyz", 200, 20)
    [member_id] = await member_ids(coordinator.url)
    async with open_admin_client(coordinator.url) as admin:
        await admin.remove_member(PREFIX, GROUP, member_id)
    return time.monotonic()


async def test_d6_a_member_the_coordinator_fenced_is_back_in_its_group_at_once(coordinator):
    await set_shards(coordinator.url, PREFIX, GROUP, 2)
    port = free_port()
    process = await spawn_consume(coordinator, port)
    try:
        removed = await removed_then(coordinator, port)
        config = coordinator.config
        window = (config.lease_ttl_ms + config.heartbeat_interval_ms) / 1000 + 1
        codes = set()
        while time.monotonic() - removed < window:  # D6: never stuck out, so never 503
            codes.add((await http_get(port, "/healthz"))[0])
            await trio.sleep(0.05)
        assert codes == {200}
        await until_status(port, "/readyz", 200, 20)
        await wait_for_stable_members(coordinator.url, PREFIX, GROUP, 1)
    finally:
        await stop(process)


async def test_d7_a_member_kept_out_while_its_coordinator_answers_turns_unhealthy(coordinator):
    await set_shards(coordinator.url, PREFIX, GROUP, 2)
    port = free_port()
    process = await spawn_consume(coordinator, port, RSC_MEMBER_FAULT="no-rejoin")
    try:
        removed = await removed_then(coordinator, port)
        config = coordinator.config
        allowed = (config.lease_ttl_ms + config.heartbeat_interval_ms) / 1000
        reason = await until_status(port, "/healthz", 503, allowed + 10)
        took = time.monotonic() - removed
        print(f"/healthz 503 {took:.2f} s after the removal (D6 allows {allowed:g} s)")
        assert "a restart should cure it" in reason
        assert took >= allowed - 0.1, "not before D6's allowance"
        assert (await http_get(port, "/readyz"))[0] == 503
    finally:
        await stop(process)
