"""The coordinator's own websocket connection (actors/net/ws_server.py): trio-websocket's behaviour
without its tasks. Frames in are parsed by wsproto, frames out are written in place, over
ws:// and over wss:// (TLS driven by the session's task, actors/net/tls_transport.py) alike.

Over a real coordinator and real sockets, each on ws:// and wss://: pings, closes from either
side and their codes, fragmented and pipelined requests, malformed HTTP, bad frames, the
404/401/503 answers, and that none of it stops the others being served; over wss:// only:
bytes that break TLS end only their session, a TLS 1.2 client, and the TLS handshake inside
the websocket handshake timeout. Without the network: a fuzz over memory streams (whatever
bytes come, the connection returns exactly the messages a reference parser finds, or ends
with a close code, and never hangs), on both schemes, and a fuzz of TLS bytes cut anywhere
(handshake messages and records split, several records in one read); the direct-write path
over a socket pair whose peer does not read (order kept, nothing written after the close).
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trio_websocket import open_websocket_url
from wsproto import ConnectionType, WSConnection
from wsproto.connection import Connection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    Pong,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)

from rsc.actors.app import serve
from rsc.actors.config import CoordinatorConfig
from rsc.actors.net.ws_server import RECEIVE_BYTES, ServerConnection, text_frame
from rsc.actors.ops.metrics import CoordinatorMetrics
from rsc.common import tls
from rsc.protocol import messages as m
from rsc.protocol.codec import encode
from tests.conftest import FAST, RunningCoordinator
from tests.conftest_tls import Certs

SCHEMES = ["ws", "wss"]


def join(request_id: int, member: str = "m-1") -> str:
    return encode(m.Heartbeat(request_id=request_id, stream_prefix="orders", consumer_group="billing",
                              member_id=member, member_epoch=0))


def routing(request_id: int) -> str:
    return encode(m.GetRouting(request_id=request_id, stream_prefix="nowhere"))


def raw_frame(opcode: int, payload: bytes, *, fin: bool = True, mask: bool = True, rsv: int = 0) -> bytes:
    """A client frame built by hand, so that it can also be wrong."""
    first = (0x80 if fin else 0) | (rsv << 4) | opcode
    size = len(payload)
    if size < 126:
        header = struct.pack("!BB", first, (0x80 if mask else 0) | size)
    elif size < 65536:
        header = struct.pack("!BBH", first, (0x80 if mask else 0) | 126, size)
    else:
        header = struct.pack("!BBQ", first, (0x80 if mask else 0) | 127, size)
    if not mask:
        return header + payload
    key = os.urandom(4)
    return header + key + bytes(byte ^ key[i % 4] for i, byte in enumerate(payload))


def client_context(certs: Certs, maximum: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    """What a wss:// client of the test coordinator verifies it with (the test CA)."""
    context = ssl.create_default_context(cafile=certs.ca_file)
    if maximum is not None:
        context.maximum_version = maximum
    return context


async def open_stream(url: str, context: ssl.SSLContext | None) -> trio.abc.Stream:
    """A TCP stream to the coordinator of `url`, inside TLS for wss:// (no close_notify, as
    HTTPS clients do)."""
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    if url.startswith("wss://"):
        return await trio.open_ssl_over_tcp_stream(host, int(port), ssl_context=context,
                                                   https_compatible=True)
    return await trio.open_tcp_stream(host, int(port))


@attrs.define
class Endpoint:
    """The coordinator of a test on one scheme: ws://, or wss:// with the test CA's certificate."""

    scheme: str
    factory: Callable[..., Awaitable[RunningCoordinator]]
    certs: Certs

    @property
    def context(self) -> ssl.SSLContext | None:
        return client_context(self.certs) if self.scheme == "wss" else None

    async def start(self, **overrides: Any) -> RunningCoordinator:
        if self.scheme == "wss":
            overrides.update(tls_cert=self.certs.cert_file, tls_key=self.certs.key_file)
        coordinator = await self.factory(**overrides)
        assert coordinator.url.startswith(f"{self.scheme}://")
        return coordinator


@pytest.fixture(params=SCHEMES)
def endpoint(request, coordinator_factory, certs) -> Endpoint:
    return Endpoint(request.param, coordinator_factory, certs)


class RawClient:
    """A websocket client over a TCP (or TLS) stream: wsproto parses what the server sends."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.pending: list[Any] = []
        self.eof = False

    @classmethod
    async def open(cls, url: str, context: ssl.SSLContext | None = None,
                   path: str = "/v1/member") -> RawClient:
        client = cls(await open_stream(url, context))
        await client.stream.send_all(client.ws.send(Request(host="127.0.0.1", target=path)))
        accepted = await client.next_event()
        assert isinstance(accepted, AcceptConnection), accepted
        return client

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def next_event(self) -> Any:
        """The next event from the server; None once it closed the TCP connection."""
        while not self.pending:
            if self.eof:
                return None
            try:
                data = await self.stream.receive_some(65536)
            except trio.BrokenResourceError:
                data = b""
            if not data:
                self.eof = True
            else:
                self.ws.receive_data(bytes(data))
            self.pending.extend(self.ws.events())
        return self.pending.pop(0)

    async def next_message(self) -> dict[str, Any]:
        parts: list[str] = []
        while True:
            event = await self.next_event()
            assert isinstance(event, TextMessage), event
            parts.append(event.data)
            if event.message_finished:
                return json.loads("".join(parts))

    async def close_code(self) -> int:
        """Read until the server's close frame; its code."""
        while True:
            event = await self.next_event()
            assert event is not None, "the server dropped the connection without a close frame"
            if isinstance(event, CloseConnection):
                return event.code

    async def aclose(self) -> None:
        await self.stream.aclose()


# --- over a real coordinator --------------------------------------------------------------


async def test_a_ping_gets_its_pong(endpoint):
    coordinator = await endpoint.start()
    async with open_websocket_url(coordinator.url + "/v1/member", endpoint.context) as ws:
        with trio.fail_after(5):
            await ws.ping(b"are you there")  # returns once the matching pong came
            await ws.send_message(join(1))
            assert json.loads(await ws.get_message())["status"] == "OK"


async def test_a_client_close_is_answered_with_its_code_and_the_tcp_connection_ends(endpoint):
    coordinator = await endpoint.start()
    with trio.fail_after(10):
        client = await RawClient.open(coordinator.url, endpoint.context)
        await client.send(client.ws.send(CloseConnection(code=4000, reason="bye")))
        answered = await client.next_event()
        assert isinstance(answered, CloseConnection) and answered.code == 4000
        assert await client.next_event() is None  # and then the server closed the stream
        await client.aclose()


async def test_a_fragmented_request_with_a_ping_between_its_parts_is_answered(endpoint):
    coordinator = await endpoint.start()
    text = join(7).encode()
    third = len(text) // 3
    with trio.fail_after(10):
        client = await RawClient.open(coordinator.url, endpoint.context)
        await client.send(raw_frame(0x1, text[:third], fin=False)
                          + raw_frame(0x9, b"mid")  # a control frame may come between fragments
                          + raw_frame(0x0, text[third:2 * third], fin=False)
                          + raw_frame(0x0, text[2 * third:]))
        pong = await client.next_event()
        assert isinstance(pong, Pong) and bytes(pong.payload) == b"mid"
        answer = await client.next_message()
        assert (answer["requestId"], answer["status"]) == (7, "OK")
        await client.aclose()


async def test_pipelined_requests_are_answered_in_request_order(endpoint):
    coordinator = await endpoint.start()
    with trio.fail_after(20):
        client = await RawClient.open(coordinator.url, endpoint.context)
        frames = []
        for request_id in range(1, 301):  # more than MAX_IN_FLIGHT, sent before reading any
            text = join(request_id, f"m-{request_id % 3}") if request_id % 2 else routing(request_id)
            frames.append(client.ws.send(TextMessage(data=text)))
        await client.send(b"".join(frames))
        answers = [await client.next_message() for _ in range(300)]
        assert [answer["requestId"] for answer in answers] == list(range(1, 301))
        await client.aclose()


async def test_a_binary_request_is_refused_by_name_and_the_session_carries_on(endpoint):
    coordinator = await endpoint.start()
    with trio.fail_after(10):
        client = await RawClient.open(coordinator.url, endpoint.context)
        await client.send(client.ws.send(BytesMessage(data=join(3).encode())))
        refused = await client.next_message()
        assert refused["status"] == "INVALID_REQUEST" and "binary" in refused["error"]
        await client.send(client.ws.send(TextMessage(data=join(4))))
        assert (await client.next_message())["status"] == "OK"
        await client.aclose()


@pytest.mark.parametrize(("frame", "code"), [
    (raw_frame(0x1, b"\xff\xfe not utf-8"), 1007),  # invalid UTF-8 in a text frame
    (raw_frame(0x1, join(1).encode(), mask=False), 1002),  # clients must mask
    (raw_frame(0x3, b"x"), 1002),  # a reserved opcode
    (raw_frame(0x1, b"{}", rsv=4), 1002),  # an RSV bit without an extension
    (raw_frame(0x0, b"orphan"), 1002),  # a continuation with no message to continue
    (raw_frame(0x9, b"p" * 126), 1002),  # a control frame over 125 bytes
], ids=["utf8", "unmasked", "opcode", "rsv", "continuation", "control-size"])
async def test_a_frame_that_breaks_the_protocol_is_closed_with_its_code(endpoint, frame, code):
    coordinator = await endpoint.start()
    with trio.fail_after(10):
        client = await RawClient.open(coordinator.url, endpoint.context)
        await client.send(frame)
        assert await client.close_code() == code
        await client.aclose()


async def test_fragments_that_add_up_past_the_limit_are_closed_with_1009(endpoint):
    coordinator = await endpoint.start(max_frame_bytes=4096)
    with trio.fail_after(10):
        client = await RawClient.open(coordinator.url, endpoint.context)
        await client.send(raw_frame(0x1, b"[" + b" " * 2000, fin=False)
                          + raw_frame(0x0, b" " * 2000, fin=False)
                          + raw_frame(0x0, b" " * 2000 + b"]"))
        assert await client.close_code() == 1009
        await client.aclose()


async def test_malformed_http_gets_an_http_error_and_nothing_else_notices(endpoint):
    coordinator = await endpoint.start()
    with trio.fail_after(10):
        for request in (b"POST /v1/member HTTP/1.1\r\nHost: x\r\n\r\n",
                        b"GET /v1/member HTTP/1.1\r\nHost: x\r\n\r\n",  # no upgrade headers
                        b"\x16\x03\x01\x00\xa5 not http at all\r\n\r\n"):
            stream = await open_stream(coordinator.url, endpoint.context)
            await stream.send_all(request)
            answer = b""
            while True:
                try:
                    data = await stream.receive_some(4096)
                except trio.BrokenResourceError:
                    break
                if not data:
                    break
                answer += data
            await stream.aclose()
            assert answer.startswith(b"HTTP/1.1 4"), (request, answer[:60])
        async with open_websocket_url(coordinator.url + "/v1/member", endpoint.context) as ws:
            await ws.send_message(join(1))
            assert json.loads(await ws.get_message())["status"] == "OK"


async def test_garbage_after_the_handshake_ends_only_that_session(endpoint):
    coordinator = await endpoint.start()
    with trio.fail_after(20):
        async with open_websocket_url(coordinator.url + "/v1/member", endpoint.context) as steady:
            await steady.send_message(join(1, "steady"))
            assert json.loads(await steady.get_message())["status"] == "OK"
            for garbage in (os.urandom(64), b"\x81\xff" + b"\xff" * 8, b"\x88\x80\x00\x00\x00\x00"):
                client = await RawClient.open(coordinator.url, endpoint.context)
                await client.send(garbage)
                await client.send(b"")  # nothing more
                while await client.next_event() is not None:
                    pass  # whatever the server says, it then closes
                await client.aclose()
            await steady.send_message(join(2, "steady"))
            assert json.loads(await steady.get_message())["status"] == "OK"


# --- over wss:// only -----------------------------------------------------------------------


async def start_serving(nursery: trio.Nursery, redis_url: str, certs: Certs | None,
                        **overrides: Any) -> tuple[str, CoordinatorMetrics]:
    """A coordinator with its metrics at hand (A1's counters); wss:// when given `certs`."""
    if certs is not None:
        overrides.update(tls_cert=certs.cert_file, tls_key=certs.key_file)
    metrics = CoordinatorMetrics()
    config = CoordinatorConfig(redis_url=redis_url, port=0, **{**FAST, **overrides})
    url = await nursery.start(lambda task_status: serve(config, metrics=metrics,
                                                        task_status=task_status))
    return url, metrics


async def test_bytes_that_break_tls_end_only_that_session(coordinator_factory, certs):
    coordinator = await Endpoint("wss", coordinator_factory, certs).start()
    context = client_context(certs)
    record_that_does_not_decrypt = b"\x17\x03\x03\x00\x20" + os.urandom(32)
    alert_in_the_clear = b"\x15\x03\x03\x00\x02\x02\x28"  # not encrypted once keys are set
    with trio.fail_after(20):
        async with open_websocket_url(coordinator.url + "/v1/member", context) as steady:
            await steady.send_message(join(1, "steady"))
            assert json.loads(await steady.get_message())["status"] == "OK"
            for garbage in (b"\xff" + os.urandom(63), record_that_does_not_decrypt, alert_in_the_clear):
                client = await RawClient.open(coordinator.url, context)
                assert isinstance(client.stream, trio.SSLStream)
                await client.stream.transport_stream.send_all(garbage)  # under TLS, outside it
                assert await client.next_event() is None  # dropped: no frame, the TCP stream ends
                await client.aclose()
            await steady.send_message(join(2, "steady"))
            assert json.loads(await steady.get_message())["status"] == "OK"


async def test_a_tls_1_2_client_is_served_like_a_tls_1_3_one(coordinator_factory, certs):
    coordinator = await Endpoint("wss", coordinator_factory, certs).start()
    context = client_context(certs, ssl.TLSVersion.TLSv1_2)
    with trio.fail_after(10):
        client = await RawClient.open(coordinator.url, context)
        assert isinstance(client.stream, trio.SSLStream) and client.stream.version() == "TLSv1.2"
        await client.send(b"".join(client.ws.send(TextMessage(data=join(n))) for n in (1, 2, 3))
                          + client.ws.send(Ping(payload=b"twelve")))
        pong = await client.next_event()
        assert isinstance(pong, Pong) and bytes(pong.payload) == b"twelve"
        assert [(await client.next_message())["requestId"] for _ in range(3)] == [1, 2, 3]
        await client.aclose()


async def test_the_tls_handshake_counts_inside_the_websocket_handshake_timeout(redis_url, nursery,
                                                                             certs):
    url, metrics = await start_serving(nursery, redis_url, certs, handshake_timeout_s=0.3)
    hello = TlsPeer(client_context(certs)).first_flight()
    with trio.fail_after(5):  # well inside the default 10 s: the configured timeout applies
        # half a ClientHello: nothing is ever answered; dropped and counted (A1)
        stream = await open_stream(url.replace("wss://", "ws://"), None)
        await stream.send_all(hello[:len(hello) // 2])
        assert await read_to_end(stream) == b""
        await stream.aclose()
        while metrics.handshakes_timed_out._value.get() != 1:
            await trio.sleep(0.01)
        # TLS done but no HTTP request: dropped by the same timeout
        secure = await open_stream(url, client_context(certs))
        assert isinstance(secure, trio.SSLStream)
        await secure.do_handshake()
        assert await read_to_end(secure) == b""
        await secure.aclose()
    assert metrics.handshakes_timed_out._value.get() == 1  # that one was answered (its TLS)


@pytest.mark.parametrize("scheme", SCHEMES)
async def test_the_handshake_answers_404_401_and_503_on_either_scheme(scheme, redis_url, nursery,
                                                                     certs):
    from trio_websocket import ConnectionRejected

    url, metrics = await start_serving(nursery, redis_url, certs if scheme == "wss" else None,
                                       member_token="s3cret", max_sessions=1)
    context = client_context(certs) if scheme == "wss" else None
    with trio.fail_after(20):
        for path, headers, status, body in (
                ("/nope", None, 404, b"unknown endpoint /nope"),
                ("/v1/member", [(b"Authorization", b"Bearer wrong")], 401, b"Authorization: Bearer"),
        ):
            with pytest.raises(ConnectionRejected) as refused:
                async with open_websocket_url(url + path, context, extra_headers=headers):
                    pass
            assert refused.value.status_code == status and body in (refused.value.body or b"")
        async with open_websocket_url(url + "/v1/admin", context) as admitted:
            with pytest.raises(ConnectionRejected) as refused:
                async with open_websocket_url(url + "/v1/admin", context):
                    pass
            assert refused.value.status_code == 503
            await admitted.send_message(encode(m.ListGroups(request_id=1)))
            assert json.loads(await admitted.get_message())["status"] == "OK"
    assert metrics.sessions_refused.labels("max_sessions")._value.get() == 1


async def read_to_end(stream: trio.abc.Stream) -> bytes:
    """Everything `stream` receives until the peer closes it (a reset counts as closed)."""
    data = b""
    while True:
        try:
            chunk = await stream.receive_some(65536)
        except trio.BrokenResourceError:
            return data
        if not chunk:
            return data
        data += chunk


# --- without the network ------------------------------------------------------------------


def pieces(data: bytes, sizes: Iterator[int]) -> Iterator[bytes]:
    """`data` cut into consecutive pieces of the sizes `sizes` yields."""
    start = 0
    while start < len(data):
        size = next(sizes)
        yield data[start:start + size]
        start += size


class TlsPeer:
    """A TLS client as bytes: the test's own ssl.SSLObject over memory BIOs, so that what it
    sends can be cut anywhere (inside handshake messages and records)."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_hostname="127.0.0.1")

    def first_flight(self) -> bytes:
        """The ClientHello."""
        with pytest.raises(ssl.SSLWantReadError):
            self.tls.do_handshake()
        return self.outgoing.read()

    async def handshake(self, stream: trio.abc.Stream, cuts: Iterator[int]) -> bytes:
        """The TLS handshake over `stream`, our flights sent in pieces of the sizes `cuts`
        yields; the last one (TLS 1.3's Finished) is returned unsent, to go with what follows."""
        while True:
            try:
                self.tls.do_handshake()
                done = True
            except ssl.SSLWantReadError:
                done = False
            flight = self.outgoing.read()
            if done:
                return flight
            for piece in pieces(flight, cuts):
                await stream.send_all(piece)
            data = await stream.receive_some(65536)
            assert data, "the server ended the connection during the TLS handshake"
            self.incoming.write(data)

    def encrypt(self, data: bytes, records: Iterator[int]) -> bytes:
        """`data` as TLS records holding the sizes `records` yields (a record may end anywhere:
        inside a frame, inside the HTTP request)."""
        for piece in pieces(data, records):
            self.tls.write(piece)
        return self.outgoing.read()


def _client_wire(events: list[tuple[str, Any]], garbage: bytes) -> tuple[bytes, bytes]:
    """What the fuzzed client sends: its upgrade request; then, once answered, its frames (up
    to a close), then `garbage` when it did not close."""
    request = WSConnection(ConnectionType.CLIENT).send(Request(host="x", target="/v1/member"))
    return request, _frames(events, garbage)


def _frames(events: list[tuple[str, Any]], garbage: bytes) -> bytes:
    wire = b""
    client = Connection(ConnectionType.CLIENT)  # its frames, as after the handshake
    for kind, value in events:
        if kind == "text":
            wire += client.send(TextMessage(data=value))
        elif kind == "bytes":
            wire += client.send(BytesMessage(data=value))
        elif kind == "ping":
            wire += client.send(Ping(payload=value))
        else:
            return wire + client.send(CloseConnection(code=value))
    return wire + garbage  # what follows a well-formed start may be anything


async def _serve_fuzzed(wire: tuple[bytes, bytes], limit: int, cuts: Iterator[int], *,
                        tls_pair: tuple[ssl.SSLContext, ssl.SSLContext] | None = None,
                        records: Iterator[int] | None = None,
                        after_tls: bytes = b"") -> tuple[list[str | bytes], int | None]:
    """One connection fed `wire` (the upgrade request; then, once the server answered it, as
    RFC 6455 4.1 has a client wait, the rest) in pieces of the sizes `cuts` yields, each piece
    one read (a lockstep stream: nothing coalesces). Over TLS (`tls_pair`: server and client
    contexts) the client's TLS bytes are cut so, handshake included (its Finished goes with
    the request), its plaintext in `records`-sized records, then `after_tls` raw. The messages
    the connection returned and its close code."""
    request, frames = wire
    answered = trio.Event()
    client_stream, server_stream = trio.testing.lockstep_stream_pair()
    got: list[str | bytes] = []
    async with trio.open_nursery() as nursery:
        server: trio.abc.Stream = server_stream
        if tls_pair is not None:
            server = tls.TlsStream(server_stream, tls_pair[0])
        connection = ServerConnection(server, nursery, max_message_bytes=limit)

        async def drain_client() -> None:
            try:
                while await client_stream.receive_some(65536):
                    answered.set()  # the first bytes after the handshake carry the 101
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            answered.set()

        async def send(data: bytes) -> None:
            for piece in pieces(data, cuts):
                await client_stream.send_all(piece)

        async def feed() -> None:
            try:
                if tls_pair is None:
                    nursery.start_soon(drain_client)
                    await send(request)
                    await answered.wait()
                    await send(frames)
                else:
                    peer = TlsPeer(tls_pair[1])
                    finished = await peer.handshake(client_stream, cuts)
                    nursery.start_soon(drain_client)
                    assert records is not None
                    await send(finished + peer.encrypt(request, records))
                    await answered.wait()
                    await send(peer.encrypt(frames, records) + after_tls)
                await client_stream.send_eof()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # the server closed first (1009, a protocol error)

        nursery.start_soon(feed)
        with trio.fail_after(20):
            upgrade = await connection.handshake(10)
            assert upgrade is not None and upgrade.target == "/v1/member"
            await connection.accept()
            while (message := await connection.receive_message()) is not None:
                got.append(message)
                assert len(message.encode() if isinstance(message, str) else message) <= limit
            code = connection.close_code
            await connection.aclose()
    return got, code


def _reference_messages(frames: list[tuple[str, Any]], limit: int) -> tuple[list[str | bytes], int]:
    """What the connection must return for these client events: the whole messages before the
    first close, and the close code it ends with (theirs, 1009 for a message over the limit,
    or 1006 when the stream just ends)."""
    messages: list[str | bytes] = []
    for kind, value in frames:
        if kind == "close":
            return messages, value
        if kind in ("text", "bytes"):
            size = len(value.encode()) if kind == "text" else len(value)
            if size > limit:
                return messages, 1009
            messages.append(value)
    return messages, 1006


_EVENTS = st.lists(st.one_of(
    st.tuples(st.just("text"), st.text(max_size=300)),
    st.tuples(st.just("bytes"), st.binary(max_size=300)),
    st.tuples(st.just("ping"), st.binary(max_size=125)),
    st.tuples(st.just("close"), st.sampled_from([1000, 1001, 4000])),
), max_size=12)


_EVENTS = st.lists(st.one_of(
    st.tuples(st.just("text"), st.text(max_size=300)),
    st.tuples(st.just("bytes"), st.binary(max_size=300)),
    st.tuples(st.just("ping"), st.binary(max_size=125)),
    st.tuples(st.just("close"), st.sampled_from([1000, 1001, 4000])),
), max_size=12)
FUZZ_LIMIT = 200


@pytest.fixture(scope="module")
def tls_pair(certs) -> dict[str, tuple[ssl.SSLContext, ssl.SSLContext]]:
    """Server and client contexts for each TLS version a client may speak."""
    server = tls.server_context(certs.cert_file, certs.key_file)
    return {"TLSv1.3": (server, client_context(certs)),
            "TLSv1.2": (server, client_context(certs, ssl.TLSVersion.TLSv1_2))}


@pytest.mark.parametrize("scheme", SCHEMES)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=_EVENTS, chunk=st.integers(min_value=1, max_value=97), garbage=st.binary(max_size=40))
def test_fuzz_whatever_the_client_sends_the_connection_returns_what_it_said_or_closes(
        scheme, tls_pair, events, chunk, garbage):
    wire = _client_wire(events, garbage)
    expected, code = _reference_messages(list(events), FUZZ_LIMIT)
    pair = tls_pair["TLSv1.3"] if scheme == "wss" else None
    # over wss:// the records hold three pieces' worth: some end inside a piece, some span two
    got, close_code = trio.run(functools.partial(_serve_fuzzed, wire, FUZZ_LIMIT,
                                                 itertools.repeat(chunk), tls_pair=pair,
                                                 records=itertools.repeat(3 * chunk)))
    assert close_code is not None  # ended by a close, a break or EOF
    # every message the client completed comes first, in order; after a close or a message
    # over the limit nothing more; garbage may add messages or end it
    assert got[:len(expected)] == expected
    if code != 1006 or not garbage:
        assert got == expected and close_code == code


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=_EVENTS, version=st.sampled_from(["TLSv1.3", "TLSv1.2"]),
       cuts=st.lists(st.integers(min_value=1, max_value=700), min_size=1, max_size=8),
       records=st.lists(st.integers(min_value=1, max_value=3000), min_size=1, max_size=8),
       after_tls=st.binary(max_size=30))
def test_fuzz_tls_bytes_cut_anywhere_give_the_same_messages_in_order(tls_pair, events, version,
                                                                    cuts, records, after_tls):
    """The client's TLS bytes in reads of any sizes (ClientHello and Finished split, a record
    split over reads, several records and a handshake message with data in one read), its
    plaintext in records of any sizes, and anything after: the connection returns exactly the
    messages it sent, in order, and the close code they call for (bytes that break TLS end it
    as a lost connection, 1006, like an EOF)."""
    wire = _client_wire(events, b"")
    expected, code = _reference_messages(list(events), FUZZ_LIMIT)
    got, close_code = trio.run(functools.partial(
        _serve_fuzzed, wire, FUZZ_LIMIT, itertools.cycle(cuts), tls_pair=tls_pair[version],
        records=itertools.cycle(records), after_tls=after_tls))
    assert got == expected and close_code == code


async def socket_session(nursery: trio.Nursery, scheme: str, certs: Certs, *, buffer: int,
                         both_ways: bool = False) -> tuple[ServerConnection, trio.abc.Stream,
                                                          WSConnection, int]:
    """A ServerConnection over one end of a socket pair with small kernel buffers, its
    websocket handshake done from the other end (inside TLS for wss://): the connection, the
    peer's stream, the peer's websocket state and the server socket's descriptor."""
    left, right = socket.socketpair()
    left.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer)
    right.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer)
    if both_ways:
        left.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer)
        right.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer)
    server: trio.abc.Stream = trio.SocketStream(trio.socket.from_stdlib_socket(left))
    peer: trio.abc.Stream = trio.SocketStream(trio.socket.from_stdlib_socket(right))
    if scheme == "wss":
        server = tls.TlsStream(server, tls.server_context(certs.cert_file, certs.key_file))
        peer = trio.SSLStream(peer, client_context(certs), server_hostname="127.0.0.1",
                              https_compatible=True)
    connection = ServerConnection(server, nursery, max_message_bytes=1 << 20)
    client = WSConnection(ConnectionType.CLIENT)
    with trio.fail_after(10):
        async with trio.open_nursery() as both:
            both.start_soon(peer.send_all, client.send(Request(host="x", target="/v1/member")))
            assert await connection.handshake(5) is not None
        await connection.accept()
        accepted: list[Any] = []
        while not accepted:
            client.receive_data(bytes(await peer.receive_some(65536)))
            accepted.extend(client.events())
        assert isinstance(accepted[0], AcceptConnection) and len(accepted) == 1
    return connection, peer, client, left.fileno()


def queued(connection: ServerConnection) -> int:
    """Bytes the connection holds for a peer that is not reading (TLS: before and after
    encryption)."""
    outbox = connection._outbox
    return sum(map(len, outbox.out)) + sum(map(len, outbox.plain))


@pytest.mark.parametrize("scheme", SCHEMES)
async def test_a_peer_that_does_not_read_gets_the_rest_by_task_in_order(scheme, certs, nursery):
    connection, peer, client, number = await socket_session(nursery, scheme, certs, buffer=4096)
    written: list[bool] = []
    connection.when_written(lambda: written.append(True))
    texts = [json.dumps({"n": n, "pad": "x" * 500}) for n in range(400)]  # about 200 KB
    for text in texts:
        connection.send_text(text)
    assert connection.writing and not written  # the kernel took only part: the rest is queued
    assert queued(connection) > 0
    got: list[str] = []
    part = ""
    with trio.fail_after(10):
        while len(got) < len(texts):
            client.receive_data(bytes(await peer.receive_some(65536)))
            for event in client.events():
                assert isinstance(event, TextMessage)
                part += event.data  # a frame arrives in pieces
                if event.message_finished:
                    got.append(part)
                    part = ""
        while not written:
            await trio.sleep(0.01)
    assert got == texts and not connection.writing and written == [True] and queued(connection) == 0
    await connection.aclose()
    # never written again: the descriptor's number may soon name another socket; make it so
    one, two = socket.socketpair()
    taken = number in (one.fileno(), two.fileno())
    if not taken:
        os.dup2(one.fileno(), number)  # `number` now writes into `one`, read at `two`
    receiver = one if two.fileno() == number else two
    try:
        receiver.setblocking(False)
        connection.send_text("after the end")
        with pytest.raises(BlockingIOError):
            receiver.recv(4096)
    finally:
        if not taken:
            os.close(number)
        one.close()
        two.close()
    with trio.fail_after(5):
        assert await read_to_end(peer) == b""  # the peer got the end and nothing after it
    await peer.aclose()


def test_server_frames_carry_the_length_in_all_three_sizes():
    for size in (0, 125, 126, 65535, 65536, 70000):
        frames = Connection(ConnectionType.CLIENT)
        frames.receive_data(text_frame(b"a" * size))
        (event,) = list(frames.events())
        assert isinstance(event, TextMessage) and event.data == "a" * size and event.message_finished


async def test_a_rejected_handshake_carries_its_status_and_body(nursery):
    client_stream, server_stream = trio.testing.memory_stream_pair()
    connection = ServerConnection(server_stream, nursery, max_message_bytes=1024)
    client = WSConnection(ConnectionType.CLIENT)
    await client_stream.send_all(client.send(Request(host="x", target="/nope")))
    with trio.fail_after(5):
        request = await connection.handshake(5)
        assert request is not None
        await connection.reject(404, b"unknown endpoint /nope")
        await connection.aclose()
        data = b""
        while chunk := await client_stream.receive_some(4096):
            data += chunk
    client.receive_data(data)
    events = list(client.events())
    assert isinstance(events[0], RejectConnection) and events[0].status_code == 404
    assert b"".join(e.data for e in events if isinstance(e, RejectData)) == b"unknown endpoint /nope"
    assert not any(isinstance(e, Message) for e in events)


async def test_a_stopping_coordinator_closes_its_sessions_with_1001(endpoint):
    from trio_websocket import ConnectionClosed

    coordinator = await endpoint.start()
    with trio.fail_after(10):
        async with open_websocket_url(coordinator.url + "/v1/member", endpoint.context) as ws:
            await ws.send_message(join(1))
            assert json.loads(await ws.get_message())["status"] == "OK"
            await coordinator.stop()
            with pytest.raises(ConnectionClosed) as closed:
                await ws.get_message()
    assert closed.value.reason.code == 1001


@pytest.mark.parametrize("scheme", SCHEMES)
async def test_a_ping_flood_from_a_peer_that_never_reads_holds_a_bounded_backlog(scheme, certs,
                                                                                nursery):
    connection, peer, client, _ = await socket_session(nursery, scheme, certs, buffer=4096,
                                                       both_ways=True)
    pings = 20_000  # 2 MB of pings, 2 MB of pongs owed
    batch = 100  # pings a write (over wss:// one TLS record of 10,600 bytes)
    pinging = client.send(Ping(payload=b"x" * 100)) * batch  # 106 bytes in, a 102-byte pong out each
    sent = 0

    async def flood() -> None:
        nonlocal sent
        for _ in range(pings // batch):
            await peer.send_all(pinging)
            sent += batch

    backlog = 0
    async with trio.open_nursery() as flooding:
        flooding.start_soon(connection.receive_message)
        flooding.start_soon(flood)
        with trio.move_on_after(2):  # the peer never reads: both directions fill and stay full
            while True:
                backlog = max(backlog, queued(connection))
                await trio.sleep(0.01)
        flooding.cancel_scope.cancel()
    assert sent < pings  # the server stopped reading: the flood is held back by TCP
    assert connection.writing  # its pongs wait for the peer to read
    assert backlog <= RECEIVE_BYTES  # at most one read's worth of answers queued
    await connection.aclose()
    await peer.aclose()
