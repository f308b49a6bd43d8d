"""A rediss:// URL pointed at a plain Redis port (the reverse of tests/test_console_findings.py's
redis:// against a TLS port): one line naming the mismatch, from the coordinator and the tools,
instead of "Timeout connecting to server" and retries for ever. Real processes, a real
redis-server on a plain port."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rsc.common.redis_connect import answers_plain_redis, tls_mismatch_line
from rsc.common.redis_server import free_port
from tests.processes import ROOT
from tests.test_console_failures import assert_no_traceback, run_tool


def rediss(redis_url: str) -> str:
    return "rediss" + redis_url[len("redis"):]


def test_the_plain_probe_tells_a_plain_port_from_a_tls_one(redis_url, tls_redis_server):
    plain_port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    assert answers_plain_redis("127.0.0.1", plain_port)
    assert not answers_plain_redis("127.0.0.1", tls_redis_server.port)
    assert not answers_plain_redis("127.0.0.1", free_port())
    assert tls_mismatch_line(ConnectionError("x"), redis_url) is None  # redis://: not this case


@pytest.mark.slow  # 15 s or more: CI's slow step (README)
def test_the_coordinator_names_a_rediss_url_to_a_plain_port_in_one_line(redis_url):
    url = rediss(redis_url)
    done = subprocess.run([sys.executable, "-m", "rsc", "coordinator", "--redis-url", url,
                           "--port", "0"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 1
    plain = redis_url
    assert (f"cannot use Redis at {url}: the server does not speak TLS on that port (it answers "
            f"plain Redis): write {plain}, or give rediss:// the server's TLS port") in done.stderr
    assert "Traceback" not in done.stderr and "listening on" not in done.stdout


TOOLS = [("produce", "orders"), ("consume", "orders", "billing")]


@pytest.mark.slow  # 15 s or more: CI's slow step (README)
@pytest.mark.parametrize("args", TOOLS, ids=[" ".join(args) for args in TOOLS])
async def test_the_tools_name_a_rediss_url_to_a_plain_port_in_one_line_and_exit_2(
        args, redis_url, coordinator):
    url = rediss(redis_url)
    code, lines = await run_tool(*args, "--coordinator", coordinator.url, "--redis-url", url,
                                 stdin=b"k\tv\n")
    assert code == 2, lines
    assert lines[-1] == (f"rsc {args[0]}: Redis at {url} does not speak TLS on that port (it "
                         f"answers plain Redis): write {redis_url}, or give rediss:// the "
                         "server's TLS port (its tls-port)")
    assert_no_traceback(lines)
