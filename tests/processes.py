"""Child processes for tests that must kill a real coordinator (SIGKILL)."""

from __future__ import annotations

import os
import subprocess
import sys

import trio

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


async def spawn_coordinator(redis_url: str, *extra: str) -> tuple[trio.Process, str]:
    """`rsc coordinator` as a child process with short ticks; returns it and its ws url."""
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "rsc", "coordinator", "--redis-url", redis_url, "--port", "0",
         "--tick-interval-ms", "50", "--lease-ttl-ms", "3000", "--heartbeat-interval-ms", "200",
         "--revoke-timeout-ms", "20000", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT)
    buffer = b""
    assert process.stdout is not None
    with trio.fail_after(20):
        while b"listening on " not in buffer or not buffer.endswith(b"\n"):
            chunk = await process.stdout.receive_some(4096)
            assert chunk, f"coordinator exited early: {buffer!r}"
            buffer += chunk
    url = buffer.split(b"listening on ", 1)[1].split(b"\n", 1)[0].decode().strip()
    return process, url
