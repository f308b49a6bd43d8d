"""The one redis-server starter (rsc/common/redis_server.py): its own session, stopped by pid,
TLS only on the TLS port; and the binary probe of the test rigs (tests/redis_rigs.py)."""

from __future__ import annotations

import os

import pytest
import redis

from rsc.common.redis_server import EmbeddedRedis, EmbeddedRedisError, find_redis_server
from tests.redis_rigs import supports_tls


def test_a_started_server_runs_in_a_session_of_its_own_and_stops_by_pid() -> None:
    with EmbeddedRedis() as server:
        assert server.process is not None
        pid = server.process.pid
        # a terminal's Ctrl-C goes to its foreground process group: not to this one
        assert os.getsid(pid) == pid != os.getsid(0)
        with redis.Redis.from_url(server.url) as client:
            assert client.ping()
    assert server.process is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        pass
    else:
        raise AssertionError(f"redis-server {pid} still runs after stop()")


def test_a_tls_server_url_is_rediss_with_the_ca_in_the_query(tls_redis_server, certs) -> None:
    assert tls_redis_server.url == (f"rediss://127.0.0.1:{tls_redis_server.port}/0"
                                    f"?ssl_ca_certs={certs.ca_file.replace('/', '%2F')}")


def test_the_tls_probe_says_yes_exactly_when_a_tls_server_starts(certs) -> None:
    binary = find_redis_server()
    server = EmbeddedRedis(binary=binary, tls=certs.server)
    if supports_tls(binary):
        with server, redis.Redis.from_url(server.url) as client:
            assert client.ping()
    else:
        with pytest.raises(EmbeddedRedisError, match="exited at start"):
            server.start()
        server.stop()
    assert not supports_tls("/bin/true")  # accepts anything and says nothing: no TLS build
