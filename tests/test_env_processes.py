"""The tools configured by `RSC_*` variables alone (rsc/common/env_config.py), as processes:
a real coordinator on a real redis-server, `rsc admin`, `rsc produce` and `rsc consume`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import trio

from tests.processes import ROOT

RSC = [sys.executable, "-m", "rsc"]


def clean_environment(**variables: str) -> dict[str, str]:
    """This process's environment without any RSC_* variable, plus `variables`."""
    base = {key: value for key, value in os.environ.items() if not key.startswith("RSC_")}
    return {**base, "PYTHONUNBUFFERED": "1", **variables}


async def free_port() -> int:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    await listener.aclose()
    return port


async def start_coordinator(env: dict[str, str]) -> tuple[trio.Process, str]:
    """`rsc coordinator` without arguments; it and the URL it printed."""
    process = await trio.lowlevel.open_process([*RSC, "coordinator"], stdout=subprocess.PIPE,
                                               stderr=subprocess.PIPE, env=env, cwd=ROOT)
    assert process.stdout is not None
    buffer = b""
    with trio.fail_after(30):
        while b"listening on " not in buffer or not buffer.endswith(b"\n"):
            chunk = await process.stdout.receive_some(4096)
            assert chunk, f"the coordinator exited: {buffer!r}"
            buffer += chunk
    return process, buffer.decode().split("listening on ", 1)[1].split()[0]


async def stop(process: trio.Process) -> bytes:
    """SIGTERM, wait for the exit (bounded), and the stderr it wrote."""
    process.terminate()
    assert process.stderr is not None
    err = b""
    with trio.fail_after(30):
        while chunk := await process.stderr.receive_some(65536):
            err += chunk
        await process.wait()
    return err


async def run(argv: list[str], env: dict[str, str], stdin: bytes = b"") -> subprocess.CompletedProcess:
    with trio.fail_after(60):
        return await trio.run_process([*RSC, *argv], stdin=stdin, capture_stdout=True,
                                      capture_stderr=True, check=False, env=env, cwd=ROOT)


async def test_a_coordinator_and_a_consumer_configured_by_the_environment_alone(redis_url):
    port, metrics_port = await free_port(), await free_port()
    coordinator_env = clean_environment(
        RSC_REDIS_URL=redis_url, RSC_NO_EMBEDDED_REDIS="1", RSC_PORT=str(port),
        RSC_METRICS_PORT=str(metrics_port), RSC_TICK_INTERVAL_MS="50", RSC_LEASE_TTL_MS="3000",
        RSC_HEARTBEAT_INTERVAL_MS="200", RSC_LOG_FORMAT="json", RSC_MEMBER_TOKEN="m-secret",
        RSC_ADMIN_TOKEN="a-secret")
    coordinator, url = await start_coordinator(coordinator_env)
    try:
        assert url == f"ws://127.0.0.1:{port}"  # RSC_PORT, not the default 8765

        def health() -> int:
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/healthz", timeout=5) as answer:
                return int(answer.status)

        assert await trio.to_thread.run_sync(health) == 200  # RSC_METRICS_PORT
        admin_env = clean_environment(RSC_COORDINATOR_URL=url, RSC_TOKEN="a-secret", RSC_TIMEOUT="10")
        shards = await run(["admin", "set-shards", "orders", "billing", "2"], admin_env)
        assert shards.returncode == 0, shards.stderr
        tool_env = clean_environment(RSC_COORDINATOR_URL=url, RSC_REDIS_URL=redis_url,
                                     RSC_TOKEN="m-secret")
        lines = "".join(f"k{i % 3}\tv{i}\n" for i in range(6)).encode()
        produce = await run(["produce", "orders"], tool_env, stdin=lines)
        assert produce.returncode == 0, produce.stderr
        consume = await run(["consume", "orders", "billing"],
                            {**tool_env, "RSC_MAX_MESSAGES": "6", "RSC_WORKERS": "2"})
        assert consume.returncode == 0, consume.stderr
        values = sorted(json.loads(line)["value"] for line in consume.stdout.decode().splitlines())
        assert values == sorted(f"v{i}" for i in range(6))
    finally:
        err = await stop(coordinator)
    records = [json.loads(line) for line in err.decode().splitlines()]  # RSC_LOG_FORMAT=json
    assert records and all("ts" in record and "level" in record for record in records)
    stopped = [record for record in records if record["event"] == "coordinator.stopped"]
    assert stopped and stopped[0]["lease_released"] is True


async def test_a_variable_that_does_not_parse_is_one_line_naming_it():
    env = clean_environment(RSC_LEASE_TTL_MS="ten seconds", RSC_REDIS_URL="redis://127.0.0.1:1/0")
    result = await run(["coordinator"], env)
    lines = result.stderr.decode().splitlines()
    assert result.returncode == 2
    assert len(lines) == 1 and "RSC_LEASE_TTL_MS='ten seconds'" in lines[0], lines
    admin = await run(["admin", "list"], clean_environment(RSC_TIMEOUT="never"))
    lines = admin.stderr.decode().splitlines()
    assert admin.returncode == 1  # rsc admin: every error is exit code 1
    assert len(lines) == 1 and lines[0].startswith("error: rsc admin: RSC_TIMEOUT='never'"), lines


async def test_no_embedded_redis_without_a_url_exits_1_with_one_line():
    for env, argv in ((clean_environment(RSC_NO_EMBEDDED_REDIS="1"), ["coordinator"]),
                      (clean_environment(RSC_REDIS_URL=""), ["coordinator", "--no-embedded-redis"])):
        result = await run(argv, env)
        lines = result.stderr.decode().splitlines()
        assert result.returncode == 1, lines
        assert len(lines) == 1 and "no Redis URL" in lines[0] and "RSC_REDIS_URL" in lines[0], lines
        assert result.stdout == b""  # nothing started, nothing listening
