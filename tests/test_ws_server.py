"""The coordinator's own websocket connection (actors/ws_server.py): trio-websocket's behaviour
without its tasks. Frames in are parsed by wsproto, frames out are written in place.

Over a real coordinator and real sockets: pings, closes from either side and their codes,
fragmented and pipelined requests, malformed HTTP, bad frames, and that none of it stops the
others being served. Without the network: a fuzz over memory streams (whatever bytes come,
the connection returns exactly the messages a reference parser finds, or ends with a close
code, and never hangs), and the direct-write path over a socket pair whose peer does not read.
"""

from __future__ import annotations

import json
import os
import socket
import struct
from typing import Any

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

from rsc.actors.ws_server import ServerConnection, text_frame
from rsc.protocol import messages as m
from rsc.protocol.codec import encode


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


class RawClient:
    """A websocket client over a plain TCP stream: wsproto parses what the server sends."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.pending: list[Any] = []
        self.eof = False

    @classmethod
    async def open(cls, url: str, path: str = "/v1/member") -> RawClient:
        host, port = url.removeprefix("ws://").rsplit(":", 1)
        client = cls(await trio.open_tcp_stream(host, int(port)))
        await client.stream.send_all(client.ws.send(Request(host=host, target=path)))
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
                self.ws.receive_data(data)
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


async def test_a_ping_gets_its_pong(coordinator):
    async with open_websocket_url(coordinator.url + "/v1/member") as ws:
        with trio.fail_after(5):
            await ws.ping(b"are you there")  # returns once the matching pong came
            await ws.send_message(join(1))
            assert json.loads(await ws.get_message())["status"] == "OK"


async def test_a_client_close_is_answered_with_its_code_and_the_tcp_connection_ends(coordinator):
    with trio.fail_after(10):
        client = await RawClient.open(coordinator.url)
        await client.send(client.ws.send(CloseConnection(code=4000, reason="bye")))
        answered = await client.next_event()
        assert isinstance(answered, CloseConnection) and answered.code == 4000
        assert await client.next_event() is None  # and then the server closed the stream
        await client.aclose()


async def test_a_fragmented_request_with_a_ping_between_its_parts_is_answered(coordinator):
    text = join(7).encode()
    third = len(text) // 3
    with trio.fail_after(10):
        client = await RawClient.open(coordinator.url)
        await client.send(raw_frame(0x1, text[:third], fin=False)
                          + raw_frame(0x9, b"mid")  # a control frame may come between fragments
                          + raw_frame(0x0, text[third:2 * third], fin=False)
                          + raw_frame(0x0, text[2 * third:]))
        pong = await client.next_event()
        assert isinstance(pong, Pong) and bytes(pong.payload) == b"mid"
        answer = await client.next_message()
        assert (answer["requestId"], answer["status"]) == (7, "OK")
        await client.aclose()


async def test_pipelined_requests_are_answered_in_request_order(coordinator):
    with trio.fail_after(20):
        client = await RawClient.open(coordinator.url)
        frames = []
        for request_id in range(1, 301):  # more than MAX_IN_FLIGHT, sent before reading any
            text = join(request_id, f"m-{request_id % 3}") if request_id % 2 else routing(request_id)
            frames.append(client.ws.send(TextMessage(data=text)))
        await client.send(b"".join(frames))
        answers = [await client.next_message() for _ in range(300)]
        assert [answer["requestId"] for answer in answers] == list(range(1, 301))
        await client.aclose()


async def test_a_binary_request_is_refused_by_name_and_the_session_carries_on(coordinator):
    with trio.fail_after(10):
        client = await RawClient.open(coordinator.url)
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
async def test_a_frame_that_breaks_the_protocol_is_closed_with_its_code(coordinator, frame, code):
    with trio.fail_after(10):
        client = await RawClient.open(coordinator.url)
        await client.send(frame)
        assert await client.close_code() == code
        await client.aclose()


async def test_fragments_that_add_up_past_the_limit_are_closed_with_1009(coordinator_factory):
    coordinator = await coordinator_factory(max_frame_bytes=4096)
    with trio.fail_after(10):
        client = await RawClient.open(coordinator.url)
        await client.send(raw_frame(0x1, b"[" + b" " * 2000, fin=False)
                          + raw_frame(0x0, b" " * 2000, fin=False)
                          + raw_frame(0x0, b" " * 2000 + b"]"))
        assert await client.close_code() == 1009
        await client.aclose()


async def test_malformed_http_gets_an_http_error_and_nothing_else_notices(coordinator):
    host, port = coordinator.url.removeprefix("ws://").rsplit(":", 1)
    with trio.fail_after(10):
        for request in (b"POST /v1/member HTTP/1.1\r\nHost: x\r\n\r\n",
                        b"GET /v1/member HTTP/1.1\r\nHost: x\r\n\r\n",  # no upgrade headers
                        b"\x16\x03\x01\x00\xa5 not http at all\r\n\r\n"):
            stream = await trio.open_tcp_stream(host, int(port))
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
        async with open_websocket_url(coordinator.url + "/v1/member") as ws:
            await ws.send_message(join(1))
            assert json.loads(await ws.get_message())["status"] == "OK"


async def test_garbage_after_the_handshake_ends_only_that_session(coordinator):
    with trio.fail_after(20):
        async with open_websocket_url(coordinator.url + "/v1/member") as steady:
            await steady.send_message(join(1, "steady"))
            assert json.loads(await steady.get_message())["status"] == "OK"
            for garbage in (os.urandom(64), b"\x81\xff" + b"\xff" * 8, b"\x88\x80\x00\x00\x00\x00"):
                client = await RawClient.open(coordinator.url)
                await client.send(garbage)
                await client.send(b"")  # nothing more
                while await client.next_event() is not None:
                    pass  # whatever the server says, it then closes
                await client.aclose()
            await steady.send_message(join(2, "steady"))
            assert json.loads(await steady.get_message())["status"] == "OK"


# --- without the network ------------------------------------------------------------------


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


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=_EVENTS, chunk=st.integers(min_value=1, max_value=97), garbage=st.binary(max_size=40))
def test_fuzz_whatever_the_client_sends_the_connection_returns_what_it_said_or_closes(events, chunk,
                                                                                     garbage):
    limit = 200

    async def main() -> None:
        client_stream, server_stream = trio.testing.memory_stream_pair()
        wire = WSConnection(ConnectionType.CLIENT).send(Request(host="x", target="/v1/member"))
        client = Connection(ConnectionType.CLIENT)  # its frames, as after the handshake
        sent_close = False
        for kind, value in events:
            if kind == "text":
                wire += client.send(TextMessage(data=value))
            elif kind == "bytes":
                wire += client.send(BytesMessage(data=value))
            elif kind == "ping":
                wire += client.send(Ping(payload=value))
            else:
                wire += client.send(CloseConnection(code=value))
                sent_close = True
                break
        if not sent_close:
            wire += garbage  # what follows a well-formed start may be anything
        expected, code = _reference_messages(list(events), limit)
        async with trio.open_nursery() as nursery:
            connection = ServerConnection(server_stream, nursery, max_message_bytes=limit)

            async def feed() -> None:
                handshake = wire.index(b"\r\n\r\n") + 4
                try:
                    await client_stream.send_all(wire[:handshake])
                    for start in range(handshake, len(wire), chunk):
                        await client_stream.send_all(wire[start:start + chunk])
                    await client_stream.send_eof()
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass  # the server closed first (1009, a protocol error)

            async def drain_client() -> None:
                while await client_stream.receive_some(65536):
                    pass

            nursery.start_soon(feed)
            nursery.start_soon(drain_client)
            with trio.fail_after(10):
                request = await connection.handshake(5)
                assert request is not None and request.target == "/v1/member"
                await connection.accept()
                got: list[str | bytes] = []
                while (message := await connection.receive_message()) is not None:
                    got.append(message)
                    assert len(message.encode() if isinstance(message, str) else message) <= limit
                assert connection.close_code is not None  # ended by a close, a break or EOF
                # every message the client completed comes first, in order; after a close or a
                # message over the limit nothing more; garbage may add messages or end it
                assert got[:len(expected)] == expected
                if code != 1006 or not garbage:
                    assert got == expected and connection.close_code == code
                await connection.aclose()

    trio.run(main)


async def test_a_peer_that_does_not_read_gets_the_rest_by_task_in_order(nursery):
    left, right = socket.socketpair()
    left.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    right.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    server = trio.SocketStream(trio.socket.from_stdlib_socket(left))
    peer = trio.SocketStream(trio.socket.from_stdlib_socket(right))
    connection = ServerConnection(server, nursery, max_message_bytes=1 << 20)
    written: list[bool] = []
    connection.on_written = lambda: written.append(True)
    texts = [json.dumps({"n": n, "pad": "x" * 500}) for n in range(400)]  # about 200 KB
    for text in texts:
        connection.send_text(text)
    assert connection.writing and not written  # the kernel took only part: the rest is queued
    frames = Connection(ConnectionType.CLIENT)  # a client past its handshake: frames only
    got: list[str] = []
    part = ""
    with trio.fail_after(10):
        while len(got) < len(texts):
            frames.receive_data(bytes(await peer.receive_some(65536)))
            for event in frames.events():
                assert isinstance(event, TextMessage)
                part += event.data  # a frame arrives in pieces
                if event.message_finished:
                    got.append(part)
                    part = ""
        while not written:
            await trio.sleep(0.01)
    assert got == texts and not connection.writing and written == [True]
    await connection.aclose()
    connection.send_text("after the end")  # never written: the descriptor may name another socket
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


async def test_a_stopping_coordinator_closes_its_sessions_with_1001(coordinator_factory):
    from trio_websocket import ConnectionClosed

    coordinator = await coordinator_factory()
    with trio.fail_after(10):
        async with open_websocket_url(coordinator.url + "/v1/member") as ws:
            await ws.send_message(join(1))
            assert json.loads(await ws.get_message())["status"] == "OK"
            await coordinator.stop()
            with pytest.raises(ConnectionClosed) as closed:
                await ws.get_message()
    assert closed.value.reason.code == 1001


async def test_a_ping_flood_from_a_peer_that_never_reads_holds_a_bounded_backlog(nursery):
    from rsc.actors.ws_server import RECEIVE_BYTES

    left, right = socket.socketpair()
    for sock in (left, right):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    server = trio.SocketStream(trio.socket.from_stdlib_socket(left))
    peer = trio.SocketStream(trio.socket.from_stdlib_socket(right))
    connection = ServerConnection(server, nursery, max_message_bytes=1 << 20)
    handshake = WSConnection(ConnectionType.CLIENT).send(Request(host="x", target="/v1/member"))
    client = Connection(ConnectionType.CLIENT)
    ping = client.send(Ping(payload=b"x" * 100))  # 106 bytes in, a 102-byte pong out
    pings = 20_000  # 2 MB of pings, 2 MB of pongs owed
    sent = 0

    async def flood() -> None:
        nonlocal sent
        await peer.send_all(handshake)
        for _ in range(pings):
            await peer.send_all(ping)
            sent += 1

    async def serve() -> None:
        request = await connection.handshake(5)
        assert request is not None
        await connection.accept()
        await connection.receive_message()

    backlog = 0
    async with trio.open_nursery() as flooding:
        flooding.start_soon(serve)
        flooding.start_soon(flood)
        with trio.move_on_after(2):  # the peer never reads: both directions fill and stay full
            while True:
                backlog = max(backlog, sum(map(len, connection._out)))
                await trio.sleep(0.01)
        flooding.cancel_scope.cancel()
    assert sent < pings  # the server stopped reading: the flood is held back by TCP
    assert connection.writing  # its pongs wait for the peer to read
    assert backlog <= RECEIVE_BYTES  # at most one read's worth of answers queued
    await connection.aclose()
    await peer.aclose()
