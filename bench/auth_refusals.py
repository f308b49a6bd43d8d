"""Refused handshakes (B5): N wrong-token handshakes, and what is counted, logged and throttled.

    python -m bench.auth_refusals [N]      # N defaults to 2000, the issue's guesser

On a private redis-server, two runs:

- `rsc coordinator` as a process, started with tokens and `--metrics-port`: N wrong-token
  handshakes from loopback (exempt from throttling), then its `rsc_auth_failures_total` as
  scraped and the number of `auth.refused` lines it logged;
- a coordinator in this process that does not exempt loopback (`throttle_loopback`, as the
  tests do, since they can only reach loopback): the statuses the N handshakes got (401 until
  the limit, then 429) and its counters.
"""

from __future__ import annotations

import base64
import collections
import logging
import os
import re
import subprocess
import sys
import tempfile
import time

import trio

from rsc.actors.app import serve
from rsc.actors.config import CoordinatorConfig
from rsc.actors.ops.metrics import CoordinatorMetrics
from rsc.common.redis_server import EmbeddedRedis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKEN = "b" * 64


def upgrade(path: str, port: int, guess: str) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    return (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"Authorization: Bearer {guess}\r\n\r\n").encode()


async def status_of(port: int, guess: str) -> int:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(upgrade("/v1/admin", port, guess))
        head = b""
        while b"\r\n" not in head:
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            head += chunk
    return int(head.split(b" ", 2)[1])


async def guesses(port: int, count: int) -> tuple[collections.Counter[int], float]:
    started = time.monotonic()
    statuses: collections.Counter[int] = collections.Counter()
    for attempt in range(count):
        statuses[await status_of(port, f"guess-{attempt}")] += 1
    return statuses, time.monotonic() - started


async def scrape(port: int) -> str:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        raw = b""
        while chunk := await stream.receive_some(65536):
            raw += chunk
    return raw.decode()


async def free_port() -> int:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = int(listener.socket.getsockname()[1])
    await listener.aclose()
    return port


async def process_run(redis_url: str, count: int) -> None:
    metrics_port = await free_port()
    with tempfile.TemporaryFile() as log:
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "rsc", "coordinator", "--redis-url", redis_url, "--port", "0",
             "--admin-token", TOKEN, "--member-token", TOKEN, "--metrics-port", str(metrics_port)],
            stdout=subprocess.PIPE, stderr=log.fileno(), cwd=ROOT)
        try:
            assert process.stdout is not None
            out = b""
            with trio.fail_after(30):
                while b"listening on " not in out or not out.endswith(b"\n"):
                    out += await process.stdout.receive_some(4096)
            port = int(out.split(b"listening on ", 1)[1].split()[0].rsplit(b":", 1)[1])
            statuses, seconds = await guesses(port, count)
            counted = re.findall(r'^rsc_auth_failures_total\{([^}]*)\} (\S+)$', await scrape(metrics_port),
                                 re.MULTILINE)
        finally:
            process.terminate()
            await process.wait()
        log.seek(0)
        lines = [line for line in log.read().decode().splitlines() if "auth.refused" in line]
    print(f"process, loopback (exempt): {count} wrong-token handshakes in {seconds:.1f} s "
          f"({count / seconds:.0f}/s): statuses {dict(statuses)}; counted "
          f"{', '.join(f'{labels} = {value}' for labels, value in counted)}; "
          f"{len(lines)} auth.refused lines")
    for line in lines[:3]:
        print(f"  {line}")


async def throttled_run(redis_url: str, count: int) -> None:
    metrics = CoordinatorMetrics()
    config = CoordinatorConfig(redis_url=redis_url, port=0, admin_token=TOKEN, member_token=TOKEN,
                               throttle_loopback=True)
    lines = LineCount()
    coordinator_log = logging.getLogger("rsc.coordinator")
    coordinator_log.addHandler(lines)
    coordinator_log.propagate = False
    async with trio.open_nursery() as nursery:
        url = await nursery.start(lambda task_status: serve(config, metrics=metrics,
                                                            task_status=task_status))
        statuses, seconds = await guesses(int(url.rsplit(":", 1)[1]), count)
        valid = await status_of(int(url.rsplit(":", 1)[1]), TOKEN)
        nursery.cancel_scope.cancel()
    counted = {reason: metrics.auth_failures.labels("/v1/admin", reason)._value.get()
               for reason in ("token_wrong", "throttled")}
    print(f"in-process, loopback not exempt: {count} wrong-token handshakes in {seconds:.1f} s: "
          f"statuses {dict(statuses)}; counted {counted}; {lines.refused} auth.refused lines; "
          f"then the valid token: {valid}")


class LineCount(logging.Handler):
    """Counts the coordinator's `auth.refused` lines instead of printing them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.refused = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == "auth.refused":
            self.refused += 1


async def main(count: int) -> None:
    with EmbeddedRedis() as redis_server:
        await process_run(redis_server.url, count)
        await throttled_run(redis_server.url, count)


if __name__ == "__main__":
    trio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
