"""The web console with TLS, with real certificates made by trustme:

- `rsc coordinator --tls-cert --tls-key --metrics-tls --console-port` serves the console
  over HTTPS and its feed over wss:// with the coordinator's certificate, and says so in
  its `console at https://` line; the feed follows the wss:// coordinator;
- without --metrics-tls the console stays plain HTTP while the coordinator is wss://, and
  its admin session to the coordinator still works;
- the console's own admin session trusts exactly the coordinator's --tls-cert
  (`tls.own_certificate_context`): a certificate that names no loopback address is
  accepted by the loopback connection, a sibling certificate of the same CA is refused.
"""

from __future__ import annotations

import functools
import json
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trustme
from trio_websocket import WebSocketConnection, open_websocket_url

from rsc.admin.client import open_admin_client
from rsc.common import tls
from rsc.console import serve_console
from tests.conftest import start_coordinator
from tests.conftest_tls import Certs
from tests.processes import FAST_FLAGS, ROOT, read_startup, stop
from tests.test_web_console_feed import WAIT_S, console_get, frame, frame_where

PREFIX, GROUP = "orders", "billing"


async def spawn_with_console(redis_url: str, *extra: str) -> tuple[trio.Process, str, str]:
    """`rsc coordinator --console-port 0 ...` as a child process: it, its url and its
    `console at ...` line."""
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "rsc", "coordinator", "--redis-url", redis_url, "--port", "0",
         *FAST_FLAGS, "--console-port", "0", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT)
    buffer = await read_startup(process, b"console at ")
    lines = buffer.decode().splitlines()
    url = next(line.removeprefix("listening on ") for line in lines if line.startswith("listening on "))
    return process, url, next(line for line in lines if line.startswith("console at "))


def console_port(line: str) -> int:
    return int(line.rstrip("/").rsplit(":", 1)[1])


async def https_get(port: int, context: ssl.SSLContext, path: str = "/") -> tuple[int, bytes]:
    stream = await trio.open_ssl_over_tcp_stream("127.0.0.1", port, ssl_context=context,
                                                 https_compatible=True)
    async with stream:
        await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        received = b""
        with trio.fail_after(WAIT_S):
            while chunk := await stream.receive_some(65536):
                received += chunk
    return int(received.split(b" ", 2)[1]), received.split(b"\r\n\r\n", 1)[1]


async def plain_answer(port: int) -> bytes:
    """What a plain-HTTP request to `port` gets back before the connection ends."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    received = b""
    async with stream:
        await stream.send_all(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        with trio.fail_after(WAIT_S):
            try:
                while chunk := await stream.receive_some(65536):
                    received += chunk
            except trio.BrokenResourceError:
                pass  # reset: no answer either
    return received


@asynccontextmanager
async def overview_feed(url: str, *, context: ssl.SSLContext | None = None,
                        origin: str | None = None) -> AsyncIterator[WebSocketConnection]:
    headers = [(b"Origin", origin.encode())] if origin else None
    async with open_websocket_url(url, ssl_context=context, extra_headers=headers) as websocket:
        await websocket.send_message(json.dumps({"view": "overview", "token": None}))
        yield websocket


def rows(overview: dict[str, Any]) -> list[tuple[str, str]]:
    return [(row["streamPrefix"], row["consumerGroup"]) for row in overview["rows"]]


async def assert_overview_names_the_group(websocket: WebSocketConnection) -> None:
    assert await frame(websocket) == {"type": "auth", "status": "ok", "role": "open", "actions": False}
    overview = await frame_where(websocket, lambda body: body.get("type") == "overview")
    assert rows(overview) == [(PREFIX, GROUP)]


# --- rsc coordinator, a real process -------------------------------------------------------


async def test_metrics_tls_serves_the_console_over_https_and_its_feed_through_a_wss_coordinator(
        certs: Certs, redis_url: str):
    process, url, line = await spawn_with_console(
        redis_url, "--tls-cert", certs.cert_file, "--tls-key", certs.key_file, "--metrics-tls")
    trusting = ssl.create_default_context(cafile=certs.ca_file)
    try:
        assert url.startswith("wss://127.0.0.1:")
        port = console_port(line)
        assert line == f"console at https://127.0.0.1:{port}/"
        async with open_admin_client(url, ca_file=certs.ca_file) as admin:
            await admin.set_shard_count(PREFIX, GROUP, 2)
        status, body = await https_get(port, trusting)
        assert status == 200 and b"rsc console" in body
        assert (await https_get(port, trusting, "/static/console.js"))[0] == 200
        assert not (await plain_answer(port)).startswith(b"HTTP/")  # the port speaks only TLS
        async with overview_feed(f"wss://127.0.0.1:{port}/ws", context=trusting,
                                 origin=f"https://127.0.0.1:{port}") as websocket:
            await assert_overview_names_the_group(websocket)
    finally:
        await stop(process)


async def test_without_metrics_tls_the_console_stays_plain_http_beside_a_wss_coordinator(
        certs: Certs, redis_url: str):
    process, url, line = await spawn_with_console(
        redis_url, "--tls-cert", certs.cert_file, "--tls-key", certs.key_file)
    try:
        assert url.startswith("wss://127.0.0.1:")
        port = console_port(line)
        assert line == f"console at http://127.0.0.1:{port}/"
        async with open_admin_client(url, ca_file=certs.ca_file) as admin:
            await admin.set_shard_count(PREFIX, GROUP, 2)
        status, body = await console_get(port, "/")
        assert status == 200 and b"rsc console" in body
        async with overview_feed(f"ws://127.0.0.1:{port}/ws") as websocket:
            await assert_overview_names_the_group(websocket)  # its admin session is wss://
    finally:
        await stop(process)


# --- the console's own admin session: exactly the coordinator's certificate -----------------


@attrs.frozen
class Issued:
    chain: str
    key: str


@pytest.fixture(scope="module")
def own_and_sibling(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Issued, Issued]:
    """A root CA (its file), and two certificates from one intermediate of it: the
    coordinator's own, naming only coord.internal (no loopback address), and a sibling
    naming 127.0.0.1 too, which any client trusting the root accepts."""
    folder: Path = tmp_path_factory.mktemp("own-certs")
    root = trustme.CA()
    intermediate = root.create_child_ca()
    root.cert_pem.write_to_path(str(folder / "root.pem"))

    def write(name: str, issued: trustme.LeafCert) -> Issued:
        for index, pem in enumerate(issued.cert_chain_pems):  # the leaf, then the intermediate
            pem.write_to_path(str(folder / f"{name}.pem"), append=index > 0)
        issued.private_key_pem.write_to_path(str(folder / f"{name}.key"))
        return Issued(chain=str(folder / f"{name}.pem"), key=str(folder / f"{name}.key"))

    own = write("own", intermediate.issue_cert("coord.internal"))
    sibling = write("sibling", intermediate.issue_cert("coord.internal", "127.0.0.1"))
    return str(folder / "root.pem"), own, sibling


async def handshake(served: Issued, context: ssl.SSLContext, server_hostname: str) -> ssl.SSLError | None:
    """A TLS handshake with a server holding `served`, verified with `context`: None when it
    succeeded, else the client's TLS error."""
    server = tls.server_context(served.chain, served.key)

    async def answer(stream: trio.SSLStream[trio.SocketStream]) -> None:
        try:
            await stream.do_handshake()
            await stream.receive_some()
        except trio.BrokenResourceError:
            pass  # the client refused us
        finally:
            await trio.aclose_forcefully(stream)

    failure: ssl.SSLError | None = None
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(
            trio.serve_ssl_over_tcp, answer, 0, server, host="127.0.0.1", https_compatible=True))
        port = listeners[0].transport_listener.socket.getsockname()[1]
        try:
            with trio.fail_after(WAIT_S):
                transport = await trio.open_tcp_stream("127.0.0.1", port)
                client = trio.SSLStream(transport, context, server_hostname=server_hostname,
                                        https_compatible=True)
                try:
                    await client.do_handshake()
                except trio.BrokenResourceError as exc:
                    failure = tls.tls_failure(exc)
                    assert failure is not None, exc
                finally:
                    await trio.aclose_forcefully(client)
        finally:
            nursery.cancel_scope.cancel()
    return failure


async def test_the_own_certificate_context_trusts_exactly_that_certificate_not_its_ca(own_and_sibling):
    root_file, own, sibling = own_and_sibling
    pinned = tls.own_certificate_context(own.chain)
    assert pinned.verify_mode == ssl.CERT_REQUIRED  # verification stays on
    assert await handshake(own, pinned, "127.0.0.1") is None  # an address it does not name
    trusting_root = ssl.create_default_context(cafile=root_file)
    assert await handshake(sibling, trusting_root, "127.0.0.1") is None  # a valid certificate...
    error = await handshake(sibling, pinned, "127.0.0.1")  # ...but not the coordinator's own
    assert isinstance(error, ssl.SSLCertVerificationError)
    assert error.verify_message == "the certificate is not the coordinator's own --tls-cert"


def test_an_unusable_own_certificate_file_is_one_clear_error(own_and_sibling, tmp_path):
    _, own, _ = own_and_sibling
    with pytest.raises(tls.TlsConfigError, match=f"cannot use --tls-cert {own.key}: no PEM certificate"):
        tls.own_certificate_context(own.key)
    missing = str(tmp_path / "missing.pem")
    with pytest.raises(tls.TlsConfigError, match=f"cannot use --tls-cert {missing}: No such file"):
        tls.own_certificate_context(missing)


async def test_the_console_follows_a_wss_coordinator_whose_certificate_names_no_loopback_address(
        own_and_sibling, redis_url: str, nursery: trio.Nursery):
    _, own, sibling = own_and_sibling
    coordinator = await start_coordinator(nursery, redis_url, tls_cert=own.chain, tls_key=own.key)
    async with open_admin_client(coordinator.url,
                                 ssl_context=tls.own_certificate_context(own.chain)) as admin:
        await admin.set_shard_count(PREFIX, GROUP, 2)
    port = await nursery.start(functools.partial(serve_console, coordinator.url, "127.0.0.1", 0,
                                                 tls_cert=own.chain, tls_key=own.key))
    async with overview_feed(f"ws://127.0.0.1:{port}/ws") as websocket:
        await assert_overview_names_the_group(websocket)
    # a console that holds another certificate (even one of the same CA) does not trust it
    wrong = await nursery.start(functools.partial(serve_console, coordinator.url, "127.0.0.1", 0,
                                                  tls_cert=sibling.chain, tls_key=sibling.key))
    async with overview_feed(f"ws://127.0.0.1:{wrong}/ws") as websocket:
        answer = await frame(websocket)
    assert answer["type"] == "error"
    assert answer["error"].startswith(f"TLS verification of {coordinator.url} failed: the certificate "
                                      "is not the coordinator's own --tls-cert")
