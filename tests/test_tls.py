"""TLS on every hop, with real certificates made by trustme: wss:// to the coordinator, rediss:// to Redis.

- a coordinator on wss:// serves members (the listener API, on the trio and the asyncio
  host), a producer and the admin client, each verifying it against the test CA (`ca_file=`
  or `ssl_context=`);
- `rsc coordinator --tls-cert --tls-key` prints `listening on wss://H:P`, and `rsc admin`,
  `rsc produce` and `rsc consume` work through it (--ca-file, RSC_CA_FILE);
- a client that does not trust the coordinator's CA says so in one line naming the URL and
  the reason: consume and produce exit 2 (D3: waiting cannot heal it), admin exits 1;
- --metrics-tls puts /healthz on HTTPS with the same certificate;
- a redis-server listening only on --tls-port, through rediss://, for the coordinator,
  consume and produce (the CA from the URL's query or RSC_REDIS_CA_FILE), and a 3-master
  cluster over TLS (--tls-cluster yes) once;
- the pure helpers of rsc/common/tls.py.
"""

from __future__ import annotations

import json
import signal
import ssl
import subprocess
import urllib.error
import urllib.parse
import urllib.request

import pytest
import redis
import trio

from rsc.actors.config import CoordinatorConfig
from rsc.admin.client import open_admin_client
from rsc.common import tls
from rsc.common.redis_connect import connect, is_cluster
from rsc.common.redis_server import EmbeddedRedis, free_port
from rsc.member.listener import Listener
from rsc.member.producer import open_producer
from rsc.member.session import SessionRefused, open_session
from rsc.protocol import ShardCountChanged
from tests.conftest import RunningCoordinator, start_coordinator
from tests.conftest_tls import Certs
from tests.processes import log_message, spawn_coordinator, stop
from tests.redis_rigs import LocalCluster
from tests.test_console_failures import assert_no_traceback, run_tool, spawn_tool, tool_env

PREFIX, GROUP = "orders", "billing"
RECORDS = [(f"customer-{n % 7}", str(n)) for n in range(40)]


async def tls_coordinator(coordinator_factory, certs: Certs) -> RunningCoordinator:
    coordinator: RunningCoordinator = await coordinator_factory(tls_cert=certs.cert_file,
                                                                tls_key=certs.key_file)
    return coordinator


async def consume_until(count: int, *args: str, env: dict[str, str]) -> list[dict]:
    """Run `rsc consume PREFIX GROUP *args` until it printed `count` messages, then SIGINT it
    (it drains and leaves: exit 0); its stdout lines, parsed."""
    tool = await spawn_tool("consume", PREFIX, GROUP, *args, env=env, stdout=subprocess.PIPE)
    assert tool.process.stdout is not None
    lines: list[dict] = []
    rest = b""
    try:
        with trio.fail_after(60):
            while len(lines) < count:
                chunk = await tool.process.stdout.receive_some(65536)
                assert chunk, f"consume exited: {tool.lines}"
                *complete, rest = (rest + chunk).split(b"\n")
                lines.extend(json.loads(line) for line in complete if line)
        assert await tool.stop(signal.SIGINT) == 0, tool.lines
        assert_no_traceback(tool)
    finally:
        tool.kill()
    return lines


def produce_input() -> bytes:
    return "".join(f"{key}\t{value}\n" for key, value in RECORDS).encode()


# --- wss:// to the coordinator ---------------------------------------------------------


async def test_members_a_producer_and_admin_work_through_a_wss_coordinator(
        certs, coordinator_factory, redis_url):
    coordinator = await tls_coordinator(coordinator_factory, certs)
    assert coordinator.url.startswith("wss://127.0.0.1:")
    async with open_admin_client(coordinator.url, ca_file=certs.ca_file) as admin:
        changed = await admin.set_shard_count(PREFIX, GROUP, 4)
    assert isinstance(changed, ShardCountChanged) and changed.routing is not None

    received: list[tuple[str, str]] = []

    async def handle(message) -> None:
        received.append((message.key, message.value))

    consumers = Listener(handle, stream_prefix=PREFIX, consumer_group=GROUP,
                         coordinator_url=coordinator.url, redis_url=redis_url, concurrency=2,
                         ca_file=certs.ca_file)
    trusting = ssl.create_default_context(cafile=certs.ca_file)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumers.run)
        async with open_producer(coordinator.url, redis_url, PREFIX, ssl_context=trusting) as producer:
            await producer.send_batch(RECORDS)
        with trio.fail_after(30):
            while len(received) < len(RECORDS):
                await trio.sleep(0.05)
        async with open_admin_client(coordinator.url, ca_file=certs.ca_file) as admin:
            described = await admin.describe_group(PREFIX, GROUP)
        consumers.stop()
    assert sorted(received) == sorted(RECORDS)
    assert len(described.members) == 2


async def test_the_asyncio_host_listens_and_produces_through_a_wss_coordinator(
        certs, coordinator_factory, redis_url):
    from rsc.member import aio
    from tests.test_aio_listener import in_asyncio, until

    coordinator = await tls_coordinator(coordinator_factory, certs)
    async with open_admin_client(coordinator.url, ca_file=certs.ca_file) as admin:
        await admin.set_shard_count(PREFIX, GROUP, 4)
    received: list[tuple[str, str]] = []

    async def main() -> list[bool]:
        @aio.listener(PREFIX, GROUP, coordinator_url=coordinator.url, redis_url=redis_url,
                      concurrency=2, ca_file=certs.ca_file)
        async def handle(message) -> None:
            received.append((message.key, message.value))

        async with handle.running():
            joined = [member["joined"] for member in handle.status().to_json()["members"]]
            async with aio.open_producer(coordinator.url, redis_url, PREFIX,
                                         ca_file=certs.ca_file) as producer:
                await producer.send_batch(RECORDS)
            await until(lambda: len(received) >= len(RECORDS))
        return joined

    joined = await in_asyncio(main)
    assert joined == [True, True]  # both members joined over wss:// before any message
    assert sorted(received) == sorted(RECORDS)


async def test_rsc_coordinator_prints_listening_on_wss_and_the_tools_work_through_it(certs, redis_url):
    process, url = await spawn_coordinator(redis_url, "--tls-cert", certs.cert_file,
                                           "--tls-key", certs.key_file)
    try:
        assert url.startswith("wss://127.0.0.1:")
        code, lines = await run_tool("admin", "--url", url, "--ca-file", certs.ca_file,
                                     "set-shards", PREFIX, GROUP, "3")
        assert code == 0, lines
        code, lines = await run_tool("produce", PREFIX, stdin=produce_input(), env=tool_env(
            RSC_COORDINATOR_URL=url, RSC_REDIS_URL=redis_url, RSC_CA_FILE=certs.ca_file))
        assert code == 0, lines
        assert lines == [f"rsc produce: sent {len(RECORDS)}, retried 0, rerouted 0"]
        consumed = await consume_until(len(RECORDS), "--coordinator", url, "--redis-url", redis_url,
                                       "--ca-file", certs.ca_file, env=tool_env())
        assert sorted((line["key"], line["value"]) for line in consumed) == sorted(RECORDS)
    finally:
        await stop(process)


@pytest.mark.parametrize("tool,trust,exit_code", [
    ("consume", "wrong CA", 2), ("consume", "system store only", 2), ("produce", "wrong CA", 2),
    ("admin", "wrong CA", 1)])
async def test_d3_a_coordinator_certificate_the_client_does_not_trust_is_one_line_and_an_exit(
        tool, trust, exit_code, certs, coordinator_factory, redis_url):
    coordinator = await tls_coordinator(coordinator_factory, certs)
    ca = ["--ca-file", certs.wrong_ca_file] if trust == "wrong CA" else []
    if tool == "admin":
        code, lines = await run_tool("admin", "--url", coordinator.url, *ca, "list")
        prefix = "error: "
    else:
        args = [PREFIX] if tool == "produce" else [PREFIX, GROUP]
        code, lines = await run_tool(tool, *args, "--coordinator", coordinator.url,
                                     "--redis-url", redis_url, *ca, stdin=b"k\tv\n")
        prefix = f"rsc {tool}: "
    assert code == exit_code, lines
    assert lines == [f"{prefix}TLS verification of {coordinator.url} failed: unable to get local "
                     "issuer certificate; pass --ca-file (RSC_CA_FILE) with the CA that signed "
                     "the coordinator's certificate"]


async def test_a_wss_client_of_a_plain_ws_coordinator_is_told_it_does_not_serve_tls(
        coordinator, redis_url):
    url = coordinator.url.replace("ws://", "wss://")
    code, lines = await run_tool("produce", PREFIX, "--coordinator", url, "--redis-url", redis_url,
                                 stdin=b"k\tv\n")
    assert code == 2, lines
    assert len(lines) == 1 and lines[0].startswith(f"rsc produce: TLS handshake with {url} failed: ")
    assert lines[0].endswith("does the coordinator serve wss:// (--tls-cert, --tls-key)?")


async def test_the_bench_load_generators_lean_client_speaks_wss(certs, coordinator_factory):
    from bench import wire

    coordinator = await tls_coordinator(coordinator_factory, certs)
    trusting = ssl.create_default_context(cafile=certs.ca_file)
    websocket = await wire.connect(coordinator.url + "/v1/member", trusting)
    try:
        for request_id in (1, 2):
            await websocket.send_text(json.dumps({"type": "getRouting", "requestId": request_id,
                                                  "streamPrefix": PREFIX}).encode())
            answer = json.loads(await websocket.receive())
            assert answer["requestId"] == request_id and answer["status"] == "UNKNOWN_STREAM"
    finally:
        with trio.move_on_after(5):
            await websocket.aclose()
    with pytest.raises(ValueError, match="wss:// with one"):
        await wire.connect(coordinator.url + "/v1/member")


async def test_a_ws_client_of_a_wss_coordinator_is_told_at_once_to_use_wss(
        certs, coordinator_factory):
    coordinator = await tls_coordinator(coordinator_factory, certs)
    plain = coordinator.url.replace("wss://", "ws://")
    with trio.fail_after(5), pytest.raises(SessionRefused) as refused:  # not the handshake timeout
        async with open_session(plain, "member"):
            pass
    assert refused.value.line == (f"{plain}/v1/member refused the session: HTTP 400: the coordinator "
                                  f"serves TLS on this port: use {coordinator.url}")
    code, lines = await run_tool("admin", "--url", plain, "list")
    assert (code, lines) == (1, [f"error: {plain}/v1/admin refused the session: HTTP 400 "
                                 f"(the coordinator serves TLS on this port: use "
                                 f"{coordinator.url})"])


async def test_metrics_tls_serves_health_over_https_with_the_coordinators_certificate(certs, redis_url):
    port = free_port()
    process, _url = await spawn_coordinator(redis_url, "--tls-cert", certs.cert_file, "--tls-key",
                                            certs.key_file, "--metrics-port", str(port), "--metrics-tls")
    trusting = ssl.create_default_context(cafile=certs.ca_file)

    def get(scheme: str) -> int:
        with urllib.request.urlopen(f"{scheme}://127.0.0.1:{port}/healthz", timeout=5,
                                    context=trusting if scheme == "https" else None) as answer:
            return int(answer.status)

    try:
        assert await trio.to_thread.run_sync(get, "https") == 200
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            await trio.to_thread.run_sync(get, "http")  # plaintext gets no answer
    finally:
        await stop(process)


async def test_a_bad_certificate_stops_rsc_coordinator_with_one_line(certs, redis_url):
    code, lines = await run_tool("coordinator", "--redis-url", redis_url, "--port", "0",
                                 "--tls-cert", certs.cert_file, "--tls-key", certs.ca_file)
    assert code == 1
    assert log_message(lines[-1]).startswith(f"rsc coordinator: cannot use --tls-cert {certs.cert_file} with "
                                f"--tls-key {certs.ca_file}: ")
    assert_no_traceback(lines)
    code, lines = await run_tool("coordinator", "--redis-url", redis_url, "--tls-cert", certs.cert_file)
    assert (code, log_message(lines[-1])) == (1, "rsc coordinator: --tls-cert and --tls-key go together: "
                                    "give both or neither")


# --- rediss:// to Redis ----------------------------------------------------------------


def test_the_tls_redis_server_has_no_plaintext_port_and_rejects_a_wrong_ca(
        tls_redis_server: EmbeddedRedis, certs: Certs):
    plain = redis.Redis(host="127.0.0.1", port=tls_redis_server.port, socket_timeout=2,
                        socket_connect_timeout=2)
    with pytest.raises(redis.ConnectionError):
        plain.ping()
    wrong = connect(f"rediss://127.0.0.1:{tls_redis_server.port}/0?ssl_ca_certs={certs.wrong_ca_file}",
                    socket_timeout=2)
    with pytest.raises(redis.ConnectionError, match="certificate verify failed"):
        wrong.ping()
    with connect(tls_redis_server.url) as client:
        assert client.ping()


async def test_the_coordinator_consume_and_produce_work_through_rediss(certs, rediss_url):
    bare = rediss_url.split("?", 1)[0]  # the tools take the CA from RSC_REDIS_CA_FILE
    assert bare.startswith("rediss://")
    process, url = await spawn_coordinator(rediss_url)
    try:
        code, lines = await run_tool("admin", "--url", url, "set-shards", PREFIX, GROUP, "3")
        assert code == 0, lines
        env = tool_env(RSC_REDIS_CA_FILE=certs.ca_file)
        code, lines = await run_tool("produce", PREFIX, "--coordinator", url, "--redis-url", bare,
                                     stdin=produce_input(), env=env)
        assert code == 0, lines
        consumed = await consume_until(len(RECORDS), "--coordinator", url, "--redis-url", bare, env=env)
        assert sorted((line["key"], line["value"]) for line in consumed) == sorted(RECORDS)
    finally:
        await stop(process)
    with connect(rediss_url, decode_responses=True) as client:
        assert client.get("rsc:store-id")  # the coordinator's metadata went through rediss:// too


@pytest.mark.cluster
async def test_a_cluster_over_tls_serves_the_coordinator_a_producer_and_members(
        tls_cluster: LocalCluster, certs, nursery, monkeypatch):
    tls_cluster.flush()
    assert tls_cluster.url.startswith("rediss://")
    client = connect(tls_cluster.url)
    try:
        assert is_cluster(client)
    finally:
        client.close()
    coordinator = await start_coordinator(nursery, tls_cluster.url)
    async with open_admin_client(coordinator.url) as admin:
        await admin.set_shard_count(PREFIX, GROUP, 6)
    received: list[tuple[str, str]] = []

    async def handle(message) -> None:
        received.append((message.key, message.value))

    monkeypatch.setenv(tls.REDIS_CA_FILE_ENV, certs.ca_file)
    bare = tls_cluster.url.split("?", 1)[0]
    consumers = Listener(handle, stream_prefix=PREFIX, consumer_group=GROUP,
                         coordinator_url=coordinator.url, redis_url=tls_cluster.url, concurrency=2)
    async with trio.open_nursery() as inner:
        await inner.start(consumers.run)
        async with open_producer(coordinator.url, bare, PREFIX) as producer:
            await producer.send_batch(RECORDS)
        with trio.fail_after(30):
            while len(received) < len(RECORDS):
                await trio.sleep(0.05)
        consumers.stop()
    assert sorted(received) == sorted(RECORDS)
    await coordinator.stop()


# --- the pure helpers --------------------------------------------------------------------


def test_a_ws_url_gets_no_context_and_a_wss_url_one_that_verifies_the_host(certs):
    assert tls.websocket_context("ws://127.0.0.1:1", ca_file=certs.ca_file) is None
    context = tls.websocket_context("wss://127.0.0.1:1", ca_file=certs.ca_file, environ={})
    assert context is not None
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context is tls.client_context(certs.ca_file)  # one per file: reconnects reuse it
    from_env = tls.websocket_context("wss://h:1", environ={tls.CA_FILE_ENV: certs.ca_file})
    assert from_env is context
    given = ssl.create_default_context()
    assert tls.websocket_context("wss://h:1", ca_file=certs.ca_file, ssl_context=given) is given


def test_files_that_cannot_be_used_are_named(certs, tmp_path):
    missing = str(tmp_path / "nope.pem")
    with pytest.raises(tls.TlsConfigError, match=f"cannot use CA file {missing}"):
        tls.client_context(missing)
    with pytest.raises(tls.TlsConfigError, match=f"--tls-cert {certs.cert_file} with --tls-key {missing}"):
        tls.server_context(certs.cert_file, missing)
    assert tls.server_context(certs.cert_file, certs.key_file).verify_mode == ssl.CERT_NONE


def test_rediss_takes_the_ca_from_the_environment_only_when_the_url_names_none(certs):
    env = {tls.REDIS_CA_FILE_ENV: certs.ca_file}
    assert tls.redis_tls_options("redis://h:1/0", env) == {}
    assert tls.redis_tls_options("rediss://h:1/0", {}) == {}
    assert tls.redis_tls_options("rediss://h:1/0", env) == {"ssl_ca_certs": certs.ca_file}
    query = urllib.parse.urlencode({"ssl_ca_certs": certs.wrong_ca_file})
    assert tls.redis_tls_options(f"rediss://h:1/0?{query}", env) == {}  # the URL wins


def test_a_rediss_file_that_does_not_exist_is_named(tmp_path):
    missing = str(tmp_path / "nope.pem")
    with pytest.raises(ValueError, match=f"RSC_REDIS_CA_FILE: no such file '{missing}'"):
        tls.redis_tls_options("rediss://h:1/0", {tls.REDIS_CA_FILE_ENV: missing})
    with pytest.raises(ValueError, match=f"ssl_certfile: no such file '{missing}'"):
        tls.redis_tls_options(f"rediss://h:1/0?ssl_certfile={missing}", {})
    with pytest.raises(ValueError, match="ssl_certfile: no such file"):
        connect(f"rediss://127.0.0.1:1/0?ssl_certfile={missing}")


def test_the_tls_error_inside_a_failed_connect_is_found_and_named():
    error = ssl.SSLCertVerificationError(1, "certificate verify failed")
    error.verify_message = "certificate has expired"
    wrapped = trio.BrokenResourceError()
    wrapped.__cause__ = error
    assert tls.tls_failure(BaseExceptionGroup("connect", [wrapped])) is error
    assert tls.tls_failure(OSError("refused")) is None
    assert tls.tls_failure_line("wss://h:1", error).startswith(
        "TLS verification of wss://h:1 failed: certificate has expired; pass --ca-file")


def test_the_certificate_and_key_go_together_and_metrics_tls_needs_them():
    with pytest.raises(ValueError, match="--tls-cert and --tls-key go together"):
        CoordinatorConfig(tls_cert="c.pem")
    with pytest.raises(ValueError, match="--metrics-tls needs --tls-cert and --tls-key"):
        CoordinatorConfig(metrics_tls=True)
    assert CoordinatorConfig(tls_cert="c.pem", tls_key="k.pem", metrics_tls=True).metrics_tls


async def test_the_listener_and_producer_apis_raise_tls_failed_for_an_untrusted_coordinator(
        certs, coordinator_factory, redis_url):
    coordinator = await tls_coordinator(coordinator_factory, certs)
    async with open_admin_client(coordinator.url, ca_file=certs.ca_file) as admin:
        await admin.set_shard_count(PREFIX, GROUP, 2)

    async def handle(message) -> None:
        raise AssertionError("nothing is delivered without a session")

    consumers = Listener(handle, stream_prefix=PREFIX, consumer_group=GROUP,
                         coordinator_url=coordinator.url, redis_url=redis_url, concurrency=3,
                         ca_file=certs.wrong_ca_file)
    with trio.fail_after(20), pytest.raises(tls.TlsFailed, match="TLS verification of wss://"):
        await consumers.run()
    with trio.fail_after(20), pytest.raises(tls.TlsFailed, match="unable to get local issuer"):
        async with open_producer(coordinator.url, redis_url, PREFIX,
                                 ca_file=certs.wrong_ca_file) as producer:
            await producer.send("k", "v")
