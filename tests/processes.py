"""Child processes for tests that must kill a real coordinator (SIGKILL) or limit its fds.

`python -m tests.processes [N]` measures the time from process start to
`listening on` N times (a private redis-server; the coordinator restarts after
SIGKILL, so the lease of the killed one is still in Redis) and prints it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import trio

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST_FLAGS = ("--tick-interval-ms", "50", "--lease-ttl-ms", "3000", "--heartbeat-interval-ms", "200",
              "--revoke-timeout-ms", "20000")


def _limit_fds(limit: int):
    def preexec() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    return preexec


async def spawn_coordinator(redis_url: str, *extra: str, fd_limit: int | None = None,
                            fast: bool = True, module: str = "rsc",
                            stderr: int | None = subprocess.DEVNULL) -> tuple[trio.Process, str]:
    """`rsc coordinator` as a child process (short ticks unless `fast=False`); it and its ws url.

    `fd_limit` sets RLIMIT_NOFILE (soft and hard) in the child, like `ulimit -n`.
    """
    process, url, _ = await spawn_coordinator_timed(redis_url, *extra, fd_limit=fd_limit, fast=fast,
                                                    module=module, stderr=stderr)
    return process, url


async def spawn_coordinator_timed(redis_url: str, *extra: str, fd_limit: int | None = None,
                                  fast: bool = True, module: str = "rsc",
                                  stderr: int | None = subprocess.DEVNULL,
                                  ) -> tuple[trio.Process, str, float]:
    """Like `spawn_coordinator`, also returning the seconds from spawn to `listening on`."""
    command = [sys.executable, "-m", module]
    if module == "rsc":
        command.append("coordinator")
    command += ["--redis-url", redis_url, "--port", "0", *(FAST_FLAGS if fast else ()), *extra]
    started = time.monotonic()
    process = await trio.lowlevel.open_process(
        command, stdout=subprocess.PIPE, stderr=stderr, cwd=ROOT,
        preexec_fn=_limit_fds(fd_limit) if fd_limit is not None else None)
    buffer = await read_startup(process, b"listening on ")
    elapsed = time.monotonic() - started
    url = buffer.split(b"listening on ", 1)[1].split(b"\n", 1)[0].decode().strip()
    return process, url, elapsed


async def read_startup(process: trio.Process, marker: bytes) -> bytes:
    """A starting coordinator's stdout up to the end of the line that holds `marker` (20 s at
    most); a process that did not get there is killed, never left running to hold the lease
    of the next test's Redis."""
    assert process.stdout is not None
    buffer = b""
    try:
        with trio.fail_after(20):
            while marker not in buffer or not buffer.endswith(b"\n"):
                chunk = await process.stdout.receive_some(4096)
                assert chunk, f"coordinator exited early: {buffer!r}"
                buffer += chunk
    except BaseException:
        process.kill()
        raise
    return buffer


async def stop(process: trio.Process) -> None:
    """SIGTERM, wait (bounded); SIGKILL if it does not stop."""
    if process.returncode is not None:
        return
    process.terminate()
    with trio.move_on_after(10):
        await process.wait()
        return
    process.kill()
    await process.wait()


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


async def _measure(rounds: int) -> None:
    from rsc.common.redis_server import EmbeddedRedis

    with EmbeddedRedis() as redis_server:
        for module in ("rsc", "rsc.commands.coordinator"):
            times = []
            for _ in range(rounds):
                process, _url, elapsed = await spawn_coordinator_timed(
                    redis_server.url, fast=False, module=module)
                times.append(elapsed)
                process.kill()  # the next one starts while this one's lease is still in Redis
                await process.wait()
            print(f"python -m {module}: start to 'listening on' after SIGKILL of the previous one: "
                  f"min {min(times):.3f} s, median {sorted(times)[len(times) // 2]:.3f} s, "
                  f"max {max(times):.3f} s ({rounds} runs, default 1000 ms tick: 3 s lease)")


if __name__ == "__main__":
    trio.run(_measure, int(sys.argv[1]) if len(sys.argv) > 1 else 5)


LOG_PREFIX = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


def log_message(line: str) -> str:
    """A text log line without its `ts LEVEL ` prefix (rsc/common/logs.py); other lines as they are."""
    return LOG_PREFIX.sub("", line, count=1)
