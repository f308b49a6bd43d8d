"""Safe by default, the web half (docs/protocol.md B1, B2, B5): what a web page, a DNS-rebound
name, a coordinator started beyond loopback without tokens and a token guesser can do.

Real coordinators (child processes where the flags matter, in-process where the metrics are
read), real sockets; a browser's handshake is written by hand, a few header lines, since a
browser is exactly a client that sends `Origin` and may pipeline nothing else we could use.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import os
import subprocess
import sys

import pytest
import redis
import trio
from trio_websocket import open_websocket_url

from rsc.actors.app import serve
from rsc.actors.config import CoordinatorConfig, is_loopback_host
from rsc.actors.core.handshake_gate import (
    HandshakeGate,
    Reason,
    RefusalTable,
    address_key,
    origin_key,
    parse_allowed_origins,
)
from rsc.actors.ops.metrics import CoordinatorMetrics
from rsc.common.coordinator_url import handshake_hint
from rsc.console.http import ConsoleHosts, host_name
from rsc.protocol import messages as m
from rsc.protocol.codec import encode
from rsc.protocol.vocabulary import RetentionMode
from tests.conftest import FAST
from tests.processes import ROOT, read_startup, spawn_coordinator, stop
from tests.test_ws_server import raw_frame

EVIL = "https://evil.example"


# --- a browser's handshake, by hand ---------------------------------------------------------


def upgrade_request(path: str, host: str, *extra: str) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}", "Upgrade: websocket", "Connection: Upgrade",
             f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def exchange(port: int, request: bytes, *after: bytes) -> tuple[int, bytes, bytes]:
    """Send `request` (and `after`, pipelined at once) to 127.0.0.1:`port`; the status, the head
    and what followed it until the server closed (a 101 is returned at its head)."""
    with trio.fail_after(15):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(request + b"".join(after))
            raw = b""
            while True:
                try:
                    chunk = await stream.receive_some(65536)
                except trio.BrokenResourceError:
                    break
                if not chunk:
                    break
                raw += chunk
                if raw.startswith(b"HTTP/1.1 101") and b"\r\n\r\n" in raw:
                    break
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head, body


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])


async def admin_request(url: str, message: m.Request, **kwargs: object) -> dict[str, object]:
    async with open_websocket_url(url + "/v1/admin", **kwargs) as ws:  # type: ignore[arg-type]
        await ws.send_message(encode(message))
        with trio.fail_after(10):
            return dict(json.loads(await ws.get_message()))


async def join_and_leave(url: str, prefix: str, group: str) -> None:
    """A group with no members: one member joins and leaves (deleteGroup needs it empty)."""
    async with open_websocket_url(url + "/v1/member") as ws:
        with trio.fail_after(10):
            await ws.send_message(encode(m.Heartbeat(request_id=1, stream_prefix=prefix,
                                                     consumer_group=group, member_id="m-1",
                                                     member_epoch=0)))
            joined = json.loads(await ws.get_message())
            assert joined["status"] == "OK", joined
            await ws.send_message(encode(m.Heartbeat(request_id=2, stream_prefix=prefix,
                                                     consumer_group=group, member_id="m-1",
                                                     member_epoch=-1)))
            assert json.loads(await ws.get_message())["status"] == "OK"


def describe(prefix: str, group: str) -> m.DescribeGroup:
    return m.DescribeGroup(request_id=1, stream_prefix=prefix, consumer_group=group)


ATTACK = (encode(m.SetRetention(request_id=1, stream_prefix="orders",
                                retention=m.Retention(mode=RetentionMode.NONE, max_length=1))),
          encode(m.DeleteGroup(request_id=2, stream_prefix="orders", consumer_group="billing")))


# --- B1: browsers from elsewhere ------------------------------------------------------------


async def test_b1_a_cross_origin_handshake_on_admin_is_refused_and_changes_nothing(redis_url):
    """The issue's attack: a page on another site opens /v1/admin of a coordinator started as
    the quick start starts it, and sends setRetention {none, maxLength 1} and deleteGroup."""
    process, url = await spawn_coordinator(redis_url)
    client = redis.Redis.from_url(redis_url)
    try:
        await join_and_leave(url, "orders", "billing")
        resharded = await admin_request(url, m.SetShardCount(request_id=1, stream_prefix="orders",
                                                             consumer_group="billing", shard_count=1))
        assert resharded["status"] == "OK", resharded
        async with open_websocket_url(url + "/v1/member") as ws:
            await ws.send_message(encode(m.GetRouting(request_id=1, stream_prefix="orders")))
            with trio.fail_after(10):
                [shard] = json.loads(await ws.get_message())["streams"]
        for n in range(3):
            client.xadd(shard, {"key": str(n), "value": "unconsumed"})
        port = port_of(url)
        status, _head, body = await exchange(
            port, upgrade_request("/v1/admin", f"127.0.0.1:{port}", f"Origin: {EVIL}"),
            *(raw_frame(0x1, frame.encode()) for frame in ATTACK))
        assert status == 403 and b"--allowed-origins" in body
        described = await admin_request(url, describe("orders", "billing"))
        assert described["status"] == "OK"  # not deleted
        assert described["retention"] == {"mode": "acked", "maxLength": None, "maxAgeMs": None}
        assert client.xlen(shard) == 3
        # the same frames without Origin (a non-browser client, no token configured) do what
        # they say: the refusal above was the Origin, nothing else
        async with open_websocket_url(url + "/v1/admin") as ws:
            with trio.fail_after(10):
                for frame in ATTACK:
                    await ws.send_message(frame)
                    assert json.loads(await ws.get_message())["status"] == "OK"
        assert (await admin_request(url, describe("orders", "billing")))["status"] == "UNKNOWN_GROUP"
    finally:
        client.close()
        await stop(process)


async def test_b1_a_cross_origin_join_on_member_is_refused(redis_url):
    process, url = await spawn_coordinator(redis_url)
    try:
        port = port_of(url)
        join = encode(m.Heartbeat(request_id=1, stream_prefix="orders", consumer_group="billing",
                                  member_id="m-1", member_epoch=0))
        for origin in (EVIL, "null", f"http://127.0.0.1:{port}"):
            status, _, body = await exchange(
                port, upgrade_request("/v1/member", f"127.0.0.1:{port}", f"Origin: {origin}"),
                raw_frame(0x1, join.encode()))
            assert status == 403 and b"--allowed-origins" in body, origin
        groups = await admin_request(url, m.ListGroups(request_id=1))
        assert groups["groups"] == []  # nobody joined
    finally:
        await stop(process)


async def test_b1_an_origin_listed_in_allowed_origins_is_accepted_and_only_it(redis_url):
    process, url = await spawn_coordinator(
        redis_url, "--allowed-origins", "https://ops.example.com, http://localhost:3000")
    try:
        port = port_of(url)
        host = f"127.0.0.1:{port}"
        for origin, expected in (("https://ops.example.com", 101), ("HTTPS://OPS.example.com:443", 101),
                                 ("http://localhost:3000", 101), ("http://ops.example.com", 403),
                                 ("https://ops.example.com:8443", 403), ("http://localhost", 403)):
            status, _, _ = await exchange(port, upgrade_request("/v1/admin", host, f"Origin: {origin}"))
            assert status == expected, origin
        status, _, _ = await exchange(port, upgrade_request("/v1/admin", host))  # no Origin
        assert status == 101
    finally:
        await stop(process)


def test_b1_origins_are_compared_as_scheme_host_and_port():
    assert origin_key("HTTPS://Ops.Example.com:443/") == "https://ops.example.com"
    assert origin_key("http://[::1]:8080") == "http://[::1]:8080"
    for bad in ("ops.example.com", "ftp://x", "https://x/path", "null", "https://", "https://u:p@x"):
        assert origin_key(bad) is None, bad
    assert parse_allowed_origins("https://a.example, ,http://b.example:81") == (
        "https://a.example", "http://b.example:81")
    with pytest.raises(ValueError, match="--allowed-origins: 'a.example' is not an origin"):
        parse_allowed_origins("a.example")


def test_b1_a_bad_allowed_origin_stops_the_coordinator_with_one_line():
    done = subprocess.run([sys.executable, "-m", "rsc", "coordinator", "--allowed-origins",
                           "ops.example.com", "--no-embedded-redis"], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 1
    assert "--allowed-origins: 'ops.example.com' is not an origin" in done.stderr
    assert "Traceback" not in done.stderr


def test_b1_a_refused_origin_tells_a_client_what_to_do():
    hint = handshake_hint(403, endpoint="admin", hostport="h:1", token_given=False)
    assert hint is not None and "Origin" in hint and "--allowed-origins" in hint


def test_b1_the_console_answers_only_to_its_own_names():
    local = ConsoleHosts.serving("127.0.0.1", ["rsc.example.com"])
    for host in ("localhost:8080", "127.0.0.1:8080", "[::1]:8080", "LOCALHOST", "rsc.example.com",
                 "rsc.example.com.:1"):
        assert local.allows(host), host
    for host in ("evil.example:8080", "", "10.0.0.7:8080", "localhost:x", "[::1", "127.0.0.1.evil.example"):
        assert not local.allows(host), host
    wildcard = ConsoleHosts.serving("0.0.0.0")
    assert wildcard.allows("10.0.0.7:8080") and wildcard.allows("[fd00::7]:80")
    assert not wildcard.allows("evil.example:8080")  # a name can be rebound; an address cannot
    bound = ConsoleHosts.serving("10.0.0.7")
    assert bound.allows("10.0.0.7:8080") and not bound.allows("10.0.0.8:8080")
    assert host_name("[fd00::7]:80") == "fd00::7" and host_name("a.example:") is None


async def http(port: int, request: bytes) -> tuple[int, bytes, bytes]:
    with trio.fail_after(15):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(request)
            raw = b""
            while chunk := await stream.receive_some(65536):
                raw += chunk
                if raw.startswith(b"HTTP/1.1 101") and b"\r\n\r\n" in raw:
                    break
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head, body


async def test_b1_a_dns_rebound_host_gets_no_console_page_and_no_feed(redis_url):
    """DNS rebinding: evil.example resolves to 127.0.0.1 after the page loaded; the browser
    then sends `Host: evil.example:PORT` and, for the websocket, the matching Origin."""
    process, _url = await spawn_coordinator(redis_url, "--console-port", "0",
                                            "--console-hosts", "rsc.example.com")
    try:
        console = (await read_startup(process, b"console at ")).split(b"console at ", 1)[1]
        port = int(console.split(b":")[2].split(b"/")[0])
        rebound = f"evil.example:{port}"
        status, _, body = await http(port, f"GET / HTTP/1.1\r\nHost: {rebound}\r\n\r\n".encode())
        assert status == 421 and b"<html" not in body.lower() and b"--console-hosts" in body
        status, _, _ = await http(port, upgrade_request("/ws", rebound, f"Origin: http://{rebound}"))
        assert status == 421
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"rsc.example.com:{port}"):
            status, _, body = await http(port, f"GET / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            assert status == 200 and b"<html" in body.lower(), host
            status, _, _ = await http(port, upgrade_request("/ws", host, f"Origin: http://{host}"))
            assert status == 101, host
        # the same-origin rule of /ws stays: a page of another site on a name we answer to
        status, _, _ = await http(port, upgrade_request("/ws", f"localhost:{port}", f"Origin: {EVIL}"))
        assert status == 403
    finally:
        await stop(process)


# --- B2: no open coordinator beyond loopback -----------------------------------------------


def coordinator_run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`rsc coordinator` that is expected to stop at once (a configuration error)."""
    base = {key: value for key, value in os.environ.items() if not key.startswith("RSC_")}
    return subprocess.run([sys.executable, "-m", "rsc", "coordinator", "--no-embedded-redis", *args],
                          capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env={**base, **(env or {})})


@pytest.mark.parametrize(("tokens", "missing"), [
    ((), "--admin-token and --member-token"),
    (("--admin-token", "a" * 64), "--member-token"),
    (("--member-token", "m" * 64), "--admin-token")])
def test_b2_beyond_loopback_without_both_tokens_the_coordinator_does_not_start(tokens, missing):
    done = coordinator_run("--host", "0.0.0.0", "--port", "0", "--redis-url", "redis://127.0.0.1:1",
                           *tokens)
    assert done.returncode == 1
    [line] = [line for line in done.stderr.splitlines() if "listens beyond loopback" in line]
    assert f"without {missing}:" in line and "--allow-unauthenticated" in line
    assert "listening on" not in done.stdout and "Traceback" not in done.stderr


@pytest.mark.parametrize("flag", ["--admin-token", "--member-token"])
def test_b2_an_empty_token_flag_is_a_configuration_error(flag):
    done = coordinator_run(flag, "", "--redis-url", "redis://127.0.0.1:1")
    assert done.returncode == 1
    assert f"{flag} is empty" in done.stderr and "openssl rand -hex 32" in done.stderr
    assert "Traceback" not in done.stderr


async def test_b2_an_empty_token_variable_stays_unset(redis_url, tmp_path):
    """The environment rule: RSC_ADMIN_TOKEN='' is no token (loopback: the endpoint is open)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("RSC_")}
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "rsc", "coordinator", "--redis-url", redis_url, "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT,
        env={**env, "RSC_ADMIN_TOKEN": "", "PYTHONUNBUFFERED": "1"})
    try:
        startup = await read_startup(process, b"listening on ")
        url = startup.split(b"listening on ", 1)[1].split()[0].decode()
        assert (await admin_request(url, m.ListGroups(request_id=1)))["status"] == "OK"
    finally:
        await stop(process)


async def test_b2_allow_unauthenticated_starts_and_warns_at_every_start(redis_url, tmp_path):
    log_file = tmp_path / "coordinator.log"
    for _ in range(2):
        with log_file.open("wb") as stderr:
            process, url = await spawn_coordinator(redis_url, "--host", "0.0.0.0",
                                                   "--allow-unauthenticated",
                                                   "--member-token", "m" * 64, stderr=stderr.fileno())
            await stop(process)
        text = log_file.read_text()
        [warning] = [line for line in text.splitlines() if "coordinator.unauthenticated" in line]
        assert "WARNING" in warning and "/v1/admin" in warning and "/v1/member" not in warning
        # a token beyond loopback without TLS travels in the clear: said too
        assert "coordinator.tokens_in_clear" in text
        assert url.startswith("ws://0.0.0.0:")


async def test_b2_loopback_needs_no_token_and_says_nothing(redis_url, tmp_path):
    """The quick start and `rsc demo`: loopback, no tokens, no warning."""
    log_file = tmp_path / "coordinator.log"
    with log_file.open("wb") as stderr:
        process, url = await spawn_coordinator(redis_url, stderr=stderr.fileno())
        assert (await admin_request(url, m.ListGroups(request_id=1)))["status"] == "OK"
        await stop(process)
    text = log_file.read_text()
    assert "coordinator.unauthenticated" not in text and "tokens_in_clear" not in text


def test_b2_loopback_hosts_are_told_apart_from_the_rest():
    for host in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"):
        assert is_loopback_host(host), host
    for host in ("0.0.0.0", "::", "", "10.0.0.7", "rsc.example.com"):
        assert not is_loopback_host(host), host
    CoordinatorConfig(host="0.0.0.0", admin_token="a", member_token="m")
    CoordinatorConfig(host="0.0.0.0", allow_unauthenticated=True)
    with pytest.raises(ValueError, match="listens beyond loopback"):
        CoordinatorConfig(host="10.0.0.7", admin_token="a")


# --- B5: refusals counted, said and throttled -----------------------------------------------


async def start_in_process(nursery: trio.Nursery, redis_url: str,
                           **overrides: object) -> tuple[str, CoordinatorMetrics]:
    metrics = CoordinatorMetrics()
    config = CoordinatorConfig(redis_url=redis_url, port=0, **{**FAST, **overrides})  # type: ignore[arg-type]
    url = await nursery.start(lambda task_status: serve(config, metrics=metrics,
                                                        task_status=task_status))
    return url, metrics


def failures(metrics: CoordinatorMetrics, endpoint: str, reason: str) -> float:
    return float(metrics.auth_failures.labels(endpoint, reason)._value.get())


async def test_b5_wrong_token_handshakes_are_counted_said_and_throttled(redis_url, nursery, caplog):
    """The issue's guesser, scaled down: 25 wrong-token handshakes from one address. Loopback is
    exempt from throttling; this coordinator is told not to exempt it (`throttle_loopback`)."""
    token = "t" * 64
    url, metrics = await start_in_process(nursery, redis_url, admin_token=token, member_token=token,
                                          throttle_loopback=True)
    port = port_of(url)
    host = f"127.0.0.1:{port}"
    caplog.set_level(logging.WARNING, logger="rsc.coordinator")
    statuses = []
    for attempt in range(25):
        status, head, body = await exchange(port, upgrade_request(
            "/v1/admin", host, f"Authorization: Bearer guess-{attempt:04d}"))
        statuses.append(status)
    assert statuses == [401] * 21 + [429] * 4  # more than 20 within 60 s: throttled
    assert b"retry-after: 60" in head.lower() and b"too many refused handshakes" in body
    assert failures(metrics, "/v1/admin", "token_wrong") == 21
    assert failures(metrics, "/v1/admin", "throttled") == 4
    # a valid token is never throttled; the other endpoint is another pair
    status, _, _ = await exchange(port, upgrade_request("/v1/admin", host, f"Authorization: Bearer {token}"))
    assert status == 101
    status, _, _ = await exchange(port, upgrade_request("/v1/member", host))
    assert status == 401
    assert failures(metrics, "/v1/member", "token_missing") == 1
    lines = [record for record in caplog.records if record.getMessage() == "auth.refused"]
    text = "\n".join(caplog.text.splitlines())
    assert "guess-" not in text and token not in text  # never the token
    assert 2 <= len(lines) < 26  # repeats within 10 s are summed, not one line each
    fields = [record.__dict__.get("rsc_fields") or {} for record in lines]
    assert any(field.get("throttled_s") == 60 for field in fields)
    assert all(field.get("address") == "127.0.0.1" for field in fields)


async def test_b5_origin_refusals_are_counted_and_loopback_is_never_throttled(redis_url, nursery):
    url, metrics = await start_in_process(nursery, redis_url, admin_token="a" * 64, member_token="m" * 64)
    port = port_of(url)
    host = f"127.0.0.1:{port}"
    for _ in range(25):
        status, _, _ = await exchange(port, upgrade_request("/v1/member", host, f"Origin: {EVIL}"))
        assert status == 403
    status, _, _ = await exchange(port, upgrade_request("/v1/member", host, "Authorization: Bearer x"))
    assert status == 401  # loopback: still no 429
    assert failures(metrics, "/v1/member", "origin") == 25
    assert failures(metrics, "/v1/member", "throttled") == 0


async def test_b5_refusals_show_on_the_metrics_port_of_a_coordinator_process(redis_url):
    from tests.helpers.http import http_get
    from tests.test_env_processes import free_port

    metrics_port = await free_port()
    process, url = await spawn_coordinator(redis_url, "--admin-token", "a" * 64,
                                           "--metrics-port", str(metrics_port))
    try:
        port = port_of(url)
        for attempt in range(25):
            await exchange(port, upgrade_request("/v1/admin", f"127.0.0.1:{port}",
                                                 f"Authorization: Bearer wrong-{attempt}"))
        await exchange(port, upgrade_request("/v1/admin", f"127.0.0.1:{port}", f"Origin: {EVIL}"))
        scraped = (await http_get(metrics_port, "/metrics")).body.decode()
        assert 'rsc_auth_failures_total{endpoint="/v1/admin",reason="token_wrong"} 25.0' in scraped
        assert 'rsc_auth_failures_total{endpoint="/v1/admin",reason="origin"} 1.0' in scraped
    finally:
        await stop(process)


def test_b5_the_table_throttles_after_twenty_in_sixty_seconds_and_lets_go():
    table = RefusalTable(exempt_loopback=False)
    for second in range(20):
        table.refused("10.0.0.7", "/v1/admin", Reason.TOKEN_WRONG, float(second))
    assert not table.throttled("10.0.0.7", "/v1/admin", 20.0)
    # the first of them leaves the window: twenty in the last 60 s is not more than twenty
    table.refused("10.0.0.7", "/v1/admin", Reason.TOKEN_WRONG, 60.0)
    assert not table.throttled("10.0.0.7", "/v1/admin", 60.0)
    line = table.refused("10.0.0.7", "/v1/admin", Reason.TOKEN_WRONG, 60.5)  # 21 in 60 s
    assert table.throttled("10.0.0.7", "/v1/admin", 60.5)
    assert line is not None and line.throttled
    assert not table.throttled("10.0.0.7", "/v1/member", 60.5)  # per (address, endpoint)
    for _ in range(100):  # 429s count for nothing: the throttle is not extended by them
        table.refused("10.0.0.7", "/v1/admin", Reason.THROTTLED, 100.0)
    assert table.throttled("10.0.0.7", "/v1/admin", 120.4)
    assert not table.throttled("10.0.0.7", "/v1/admin", 120.5)


def test_b5_loopback_is_exempt_and_ipv6_is_counted_per_64():
    table = RefusalTable()
    for second in range(50):
        table.refused("127.0.0.1", "/v1/admin", Reason.TOKEN_WRONG, float(second))
        table.refused("::ffff:127.0.0.1", "/v1/admin", Reason.TOKEN_WRONG, float(second))
    assert not table.throttled("127.0.0.1", "/v1/admin", 50.0)
    for n in range(21):  # one host rotating through its /64
        table.refused(f"2001:db8:1:2::{n + 1:x}", "/v1/admin", Reason.TOKEN_WRONG, 1.0)
    assert table.throttled("2001:db8:1:2:ffff::1", "/v1/admin", 2.0)
    assert not table.throttled("2001:db8:1:3::1", "/v1/admin", 2.0)
    assert address_key("2001:db8:1:2::9") == "2001:db8:1:2::/64"


def test_b5_the_table_is_bounded_least_recently_refused_first_out():
    table = RefusalTable(max_entries=100, exempt_loopback=False)
    for _ in range(21):
        table.refused("10.0.0.1", "/v1/admin", Reason.TOKEN_WRONG, 0.0)
    assert table.throttled("10.0.0.1", "/v1/admin", 1.0)
    for n in range(1000):
        table.refused(f"10.1.{n // 256}.{n % 256}", "/v1/admin", Reason.TOKEN_WRONG, 1.0)
        assert len(table) <= 100
    assert not table.throttled("10.0.0.1", "/v1/admin", 1.0)  # pushed out by newer ones


def test_b5_repeats_from_one_address_within_ten_seconds_are_summed_into_the_next_line():
    table = RefusalTable(exempt_loopback=False)
    first = table.refused("10.0.0.7", "/v1/member", Reason.ORIGIN, 0.0)
    assert first is not None and first.repeats == 0
    assert [table.refused("10.0.0.7", "/v1/member", Reason.ORIGIN, t) for t in (1.0, 5.0, 9.9)] == \
        [None, None, None]
    other = table.refused("10.0.0.8", "/v1/member", Reason.ORIGIN, 9.9)
    assert other is not None and other.repeats == 0  # another address has its own lines
    later = table.refused("10.0.0.7", "/v1/admin", Reason.TOKEN_MISSING, 10.0)
    assert later is not None and later.repeats == 3 and later.reason is Reason.TOKEN_MISSING


def test_b5_a_valid_token_is_never_throttled_and_checks_come_in_order():
    table = RefusalTable(exempt_loopback=False)
    gate = HandshakeGate(tokens={"/v1/admin": "s3cret", "/v1/member": None},
                         allowed_origins=frozenset({"https://ops.example.com"}), table=table)
    wrong = [(b"authorization", b"Bearer nope")]
    for _ in range(21):
        refusal = gate.check("/v1/admin", wrong, "10.0.0.7", 0.0)
        assert refusal is not None and refusal.status == 401
    refusal = gate.check("/v1/admin", wrong, "10.0.0.7", 1.0)
    assert refusal is not None and refusal.status == 429
    assert gate.check("/v1/admin", [(b"Authorization", b"bearer s3cret")], "10.0.0.7", 1.0) is None
    refusal = gate.check("/v1/admin", [(b"authorization", b"Bearer s3cret"), (b"origin", EVIL.encode())],
                         "10.0.0.8", 1.0)
    assert refusal is not None and refusal.status == 403  # a valid token from a browser: B1 still
    assert gate.check("/v1/member", [(b"origin", b"https://ops.example.com")], "10.0.0.8", 1.0) is None
    refusal = gate.check("/v1/member", [(b"origin", b"https://ops.example.com"),
                                        (b"origin", EVIL.encode())], "10.0.0.8", 1.0)
    assert refusal is not None and refusal.reason is Reason.ORIGIN  # two Origins: refused



@pytest.mark.parametrize(("tool", "code"), [
    (("admin", "--url", "ws://127.0.0.1:1", "--token", "", "list"), 1),
    (("produce", "orders", "--token", "", "--redis-url", "redis://127.0.0.1:1"), 2),
    (("consume", "orders", "billing", "--token", "", "--redis-url", "redis://127.0.0.1:1"), 2)],
    ids=["admin", "produce", "consume"])
def test_b2_a_clients_empty_token_flag_is_a_configuration_error(tool, code):
    base = {key: value for key, value in os.environ.items() if not key.startswith("RSC_")}
    done = subprocess.run([sys.executable, "-m", "rsc", *tool], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, input="k\tv\n", env=base)
    assert done.returncode == code, done.stderr
    assert "--token is empty" in done.stderr and "Traceback" not in done.stderr


async def test_b5_the_console_throttles_wrong_logins_by_the_browsers_address(redis_url, nursery, caplog):
    """The console's login (a page's token) under the same rule, by the browser's address: past
    20 wrong tokens the page is told `throttled`; the right token still gets in."""
    from rsc.console import serve_console

    token = "c" * 64
    url, _metrics = await start_in_process(nursery, redis_url, admin_token=token, member_token=token)
    port = await nursery.start(functools.partial(serve_console, url, "127.0.0.1", 0,
                                                 throttle_loopback=True))
    caplog.set_level(logging.WARNING, logger="rsc.console")

    async def login(guess: str | None) -> dict[str, object]:
        async with open_websocket_url(f"ws://127.0.0.1:{port}/ws") as ws:
            await ws.send_message(json.dumps({"view": "overview", "token": guess}))
            with trio.fail_after(15):
                return dict(json.loads(await ws.get_message()))

    answers = [(await login(f"guess-{n}"))["status"] for n in range(22)]
    assert answers == ["unauthorized"] * 21 + ["throttled"]
    assert (await login(None))["status"] == "unauthorized"  # no token sent: asked for one, not counted
    welcome = await login(token)  # C1: the auth frame also says the role and the actions
    assert (welcome["type"], welcome["status"]) == ("auth", "ok")
    lines = [record.getMessage() for record in caplog.records
             if record.getMessage().startswith("console.login_refused")]
    assert lines and any("throttled_s=60" in line for line in lines)
    assert not [line for line in lines if "guess-" in line]


async def test_b1_the_console_over_https_sends_hsts_and_checks_the_host_too(certs, redis_url):
    import ssl

    process, _url = await spawn_coordinator(redis_url, "--console-port", "0", "--tls-cert",
                                            certs.cert_file, "--tls-key", certs.key_file,
                                            "--metrics-tls")
    trusting = ssl.create_default_context(cafile=certs.ca_file)
    try:
        console = (await read_startup(process, b"console at ")).split(b"console at ", 1)[1]
        port = int(console.split(b":")[2].split(b"/")[0])

        async def get(host: str) -> bytes:
            stream = await trio.open_ssl_over_tcp_stream("127.0.0.1", port, ssl_context=trusting,
                                                         https_compatible=True)
            received = b""
            async with stream:
                await stream.send_all(f"GET / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
                with trio.fail_after(15):
                    while chunk := await stream.receive_some(65536):
                        received += chunk
            return received

        page = await get(f"127.0.0.1:{port}")
        assert page.startswith(b"HTTP/1.1 200") and b"\r\nStrict-Transport-Security: max-age=" in page
        refused = await get(f"evil.example:{port}")
        assert refused.startswith(b"HTTP/1.1 421") and b"Strict-Transport-Security" in refused
    finally:
        await stop(process)


async def test_b1_the_plain_http_console_sends_no_hsts(redis_url):
    process, _url = await spawn_coordinator(redis_url, "--console-port", "0")
    try:
        console = (await read_startup(process, b"console at ")).split(b"console at ", 1)[1]
        port = int(console.split(b":")[2].split(b"/")[0])
        status, head, _ = await http(port, f"GET / HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n".encode())
        assert status == 200 and b"strict-transport-security" not in head.lower()
    finally:
        await stop(process)


def image_environment() -> dict[str, str]:
    """The final stage's ENV of the Dockerfile, as the image's coordinator sees it."""
    import shlex

    from tests.test_deploy_image import DOCKERFILE, stages

    final = dict(stages(DOCKERFILE.read_text(encoding="utf-8"))[-1])
    pairs = dict(item.split("=", 1) for item in shlex.split(final["ENV"]))
    return {name: value for name, value in pairs.items() if name.startswith("RSC_")}


async def test_b2_the_images_coordinator_needs_both_tokens_and_with_them_refuses_browsers(
        redis_url, tmp_path):
    """The image's default command (`rsc coordinator` with the Dockerfile's ENV: 0.0.0.0)."""
    image = {**image_environment(), "RSC_REDIS_URL": redis_url, "RSC_PORT": "0",
             "RSC_METRICS_PORT": "0"}
    assert image["RSC_HOST"] == "0.0.0.0"
    base = {key: value for key, value in os.environ.items() if not key.startswith("RSC_")}
    refused = subprocess.run([sys.executable, "-m", "rsc", "coordinator"], capture_output=True,
                             text=True, timeout=60, cwd=ROOT, env={**base, **image})
    assert refused.returncode == 1 and "listens beyond loopback" in refused.stderr
    tokens = {"RSC_ADMIN_TOKEN": "a" * 64, "RSC_MEMBER_TOKEN": "m" * 64}
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "rsc", "coordinator"], stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, cwd=ROOT, env={**base, **image, **tokens, "PYTHONUNBUFFERED": "1"})
    try:
        startup = await read_startup(process, b"listening on ")
        port = port_of(startup.split(b"listening on ", 1)[1].split()[0].decode())
        status, _, _ = await exchange(port, upgrade_request(
            "/v1/admin", f"127.0.0.1:{port}", f"Origin: {EVIL}", f"Authorization: Bearer {'a' * 64}"))
        assert status == 403
    finally:
        await stop(process)
