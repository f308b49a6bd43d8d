"""The metrics and health port (rsc/common/http_server.py) under a peer that holds connections:
a cap on connections, and one line, not a traceback a retry, when descriptors run out."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import trio

from rsc.common.http_server import MAX_CONNECTIONS
from tests.helpers.http import http_get
from tests.processes import ROOT, spawn_coordinator, stop
from tests.test_env_processes import free_port


async def closed_at_once(port: int) -> bool:
    """Connect and wait (bounded) for the server to close without a byte: True if it did."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        with trio.move_on_after(10):
            try:
                return await stream.receive_some(100) == b""
            except trio.BrokenResourceError:
                return True
    return False


async def test_the_metrics_port_holds_at_most_its_cap_of_idle_connections(redis_url):
    metrics_port = await free_port()
    process, _url = await spawn_coordinator(redis_url, "--metrics-port", str(metrics_port))
    idle: list[trio.SocketStream] = []
    try:
        with trio.fail_after(30):
            for _ in range(MAX_CONNECTIONS):
                idle.append(await trio.open_tcp_stream("127.0.0.1", metrics_port))
            # the server takes them in order: the cap is reached once each has been accepted
            extra = [await closed_at_once(metrics_port) for _ in range(5)]
        assert extra == [True] * 5
        for stream in idle:
            await stream.aclose()
        with trio.fail_after(30):
            while True:
                try:
                    answer = await http_get(metrics_port, "/healthz", timeout_s=5)
                except (trio.TooSlowError, trio.BrokenResourceError, OSError):
                    continue
                if answer.status == 200:
                    break
    finally:
        for stream in idle:
            await stream.aclose()
        await stop(process)


SERVER = textwrap.dedent("""
    import os, resource, trio
    from rsc.common.logs import configure_logging
    from rsc.common.http_server import serve_http, text

    async def run():
        async with trio.open_nursery() as nursery:
            port = await nursery.start(lambda task_status: serve_http(
                {"/healthz": lambda: text(200, "ok")}, "127.0.0.1", 0, task_status=task_status))
            used = len(os.listdir("/proc/self/fd"))
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, (used + 8, hard))
            print(port, flush=True)

    configure_logging("info", "text")
    trio.run(run)
""")


async def test_out_of_descriptors_the_port_says_so_in_one_line_and_serves_again():
    process = await trio.lowlevel.open_process([sys.executable, "-c", SERVER], cwd=ROOT,
                                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    held: list[trio.SocketStream] = []
    errors = b""
    try:
        assert process.stdout is not None and process.stderr is not None
        with trio.fail_after(20):
            line = b""
            while not line.endswith(b"\n"):
                line += await process.stdout.receive_some(100)
        port = int(line)
        with trio.fail_after(30):
            for _ in range(30):  # more than the descriptors it has left
                held.append(await trio.open_tcp_stream("127.0.0.1", port))
            while b"http.fd_exhausted" not in errors:  # the port noticed
                errors += await process.stderr.receive_some(65536)
        for stream in held:
            await stream.aclose()
        held.clear()
        with trio.fail_after(30):
            while True:
                try:
                    answer = await http_get(port, "/healthz", timeout_s=5)
                except (trio.TooSlowError, trio.BrokenResourceError, OSError):
                    continue
                if answer.status == 200:
                    break
    finally:
        for stream in held:
            await stream.aclose()
        process.terminate()
        with trio.fail_after(10):
            await process.wait()
        if process.stderr is not None:
            while chunk := await process.stderr.receive_some(65536):
                errors += chunk
    text = errors.decode()
    assert "Traceback" not in text and "retrying" not in text
    exhausted = [line for line in text.splitlines() if "http.fd_exhausted" in line]
    assert 1 <= len(exhausted) <= 3, text  # one line, a reminder at most every 10 s
    assert "http.fd_available" in text
