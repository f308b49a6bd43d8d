"""The server side of one websocket: wsproto over a trio stream, with no task of its own.

trio-websocket gives every connection a reader task, a nursery, a message
channel and a send lock; at ten thousand members those cost more than the
coordinator's own work per heartbeat. Here the session's one task reads the
stream and feeds wsproto itself (`receive_message`), and writes never wait:

- `send_text` writes the frame straight to the socket when nothing is queued
  before it and the kernel takes it whole (the common case, no await, no
  task); otherwise the rest is queued and one short writer task sends it, and
  `writing` stays true until the queue is empty, so a caller can hold back
  what it has not handed over yet (the session's MAX_IN_FLIGHT bound), and
  the session reads nothing more meanwhile (TCP's own backpressure, as
  trio-websocket's awaited sends gave).
- Server frames are built here (FIN + text opcode, unmasked, no extension is
  ever negotiated); what a client sends is parsed by wsproto, which turns
  protocol errors into close codes (1002, 1007).

TLS (wss://) runs in the same task and the same writes: a connection accepted
as rsc/common/tls.py's `TlsStream` is driven through actors/net/tls_transport.py's
`TlsEngine` (an ssl.SSLObject between memory BIOs) over the raw socket stream.
A frame is encrypted and written in place like a plain one; what a slow peer
has not taken yet waits as plaintext and is encrypted in one go by the writer
task (fewer, fuller records); the handshake runs inside `handshake`, under its
timeout, and a plain HTTP request on the TLS port is answered 400 "use
wss://". TLS ends the HTTPS way (trio's `https_compatible`): no close_notify is
sent, and a peer's EOF without one is an ordinary end.

The behaviour is trio-websocket's, held by tests/test_ws_server.py and the
transport tests: a message over `max_message_bytes` (UTF-8 bytes for text) is
answered with close 1009; a ping gets its pong; a peer's close is answered
and the TCP connection closed; a handshake not complete within the timeout
is dropped without a byte sent; a rejected handshake gets its HTTP status and
body. After our own close frame the stream is read (and discarded) until the
peer's close or `CLOSE_WAIT_S`, so the peer reads our close code instead of a
reset.
"""

from __future__ import annotations

import collections
import ssl
import struct
from collections.abc import Callable
from typing import cast

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.connection import Connection, ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import RemoteProtocolError

from rsc.actors.net.tls_transport import TlsEngine
from rsc.actors.net.turns import Turns
from rsc.actors.net.ws_outbox import Outbox
from rsc.common import tls

RECEIVE_BYTES = 16384
CLOSE_WAIT_S = 2.0  # after our close frame: how long the peer has to answer it
ABNORMAL = 1006  # the connection ended without a close frame (RFC 6455 7.1.5)
TOO_BIG = 1009

_HEADER_SHORT = struct.Struct("!BB")
_HEADER_16 = struct.Struct("!BBH")
_HEADER_64 = struct.Struct("!BBQ")
_FIN_TEXT = 0x81


def text_frame(payload: bytes) -> bytes:
    """One unmasked, unfragmented server text frame (RFC 6455 5.2)."""
    size = len(payload)
    if size < 126:
        return _HEADER_SHORT.pack(_FIN_TEXT, size) + payload
    if size < 65536:
        return _HEADER_16.pack(_FIN_TEXT, 126, size) + payload
    return _HEADER_64.pack(_FIN_TEXT, 127, size) + payload


def utf8_bytes(text: str) -> int:
    """A text's size in UTF-8 bytes (what the frame limit counts)."""
    return len(text.encode("utf-8", "surrogatepass"))


class ServerConnection:
    """One accepted connection: handshake, messages in, frames out; see the module text."""

    def __init__(self, stream: trio.abc.Stream, nursery: trio.Nursery, *,
                 max_message_bytes: int, turns: Turns | None = None) -> None:
        self._tls: TlsEngine | None = None
        if isinstance(stream, tls.TlsStream):  # wss://: TLS here, over the socket stream
            self._tls = TlsEngine(stream.context)
            stream = stream.transport
        self._stream = stream
        self._max = max_message_bytes
        self._handshake: WSConnection | None = WSConnection(ConnectionType.SERVER)
        self._proto: Connection | None = None  # after the handshake: the frame protocol only
        self._events: collections.deque[Event] = collections.deque()
        self._parts: list[str | bytes] = []
        self._size = 0
        self._outbox = Outbox(stream, nursery, self._tls)
        self.close_code: int | None = None  # set once either side closed
        # fair turns to parse what arrived (actors/net/turns.py), keyed by the session's prefix
        self.turns = turns
        self.turn_key = ""

    # --- handshake --------------------------------------------------------------------

    async def handshake(self, timeout_s: float) -> Request | None:
        """The client's upgrade request; None when it did not come within `timeout_s`, the
        peer left, or it was malformed (then answered with wsproto's HTTP error)."""
        handshake = self._handshake
        assert handshake is not None
        with trio.move_on_after(timeout_s):
            while True:
                data = await self._receive()
                if not data:
                    return None
                turns = self.turns
                if turns is not None and not turns.admits():
                    await turns.wait("")  # saturated: new connections take turns with the prefixes
                try:
                    handshake.receive_data(data)
                    for event in handshake.events():
                        if isinstance(event, Request):
                            return event
                except RemoteProtocolError as exc:
                    if isinstance(exc.event_hint, RejectConnection):
                        await self._send_now(handshake.send(exc.event_hint))
                    return None
        return None

    async def accept(self) -> None:
        handshake = self._handshake
        assert handshake is not None
        data = handshake.send(AcceptConnection())
        self._proto = handshake.connection  # the HTTP machinery is not kept for the session
        self._handshake = None
        await self._send_now(data)

    async def reject(self, status: int, body: bytes,
                     headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        handshake = self._handshake
        assert handshake is not None
        data = handshake.send(RejectConnection(
            status_code=status, has_body=True,
            headers=[(b"content-type", b"text/plain; charset=utf-8"),
                     (b"content-length", str(len(body)).encode()), *headers]))
        data += handshake.send(RejectData(data=body))
        self.close_code = ABNORMAL
        await self._send_now(data)

    # --- messages in ------------------------------------------------------------------

    async def receive_message(self) -> str | bytes | None:
        """The next whole message; None once the session is over (either side closed it, the
        peer broke the protocol or left). Pings are answered on the way."""
        proto = self._proto
        assert proto is not None
        events = self._events
        while self.close_code is None:
            while events:
                event = events.popleft()
                kind = type(event)
                if kind is TextMessage or kind is BytesMessage:
                    message = self._message(event)  # type: ignore[arg-type]
                    if message is not None:
                        return message
                    if self.close_code is not None:
                        return None
                elif kind is Ping:
                    # events are parsed a chunk at a time: a close later in the same chunk may
                    # already have moved the state on, and then no pong is due
                    if proto.state is ConnectionState.OPEN:
                        self._send_event(event.response())  # type: ignore[attr-defined]
                elif kind is CloseConnection:
                    self._closed_by_peer(event)  # type: ignore[arg-type]
                    return None
            if self.writing:
                # backpressure: what the peer's last bytes asked for (pongs, close answers) has
                # not gone out yet, so read no more until it has: a peer that floods without
                # reading holds one read's worth of answers here, not an unbounded queue
                await self._outbox.all_written()
                continue
            data = await self._receive()
            if not data:
                self._lost()
                return None
            turns = self.turns
            if turns is not None and not turns.admits():
                await turns.wait(self.turn_key)  # saturated: parsed in its prefix's turn
            proto.receive_data(data)
            events.extend(proto.events())
        return None

    def _message(self, event: TextMessage | BytesMessage) -> str | bytes | None:
        data: str | bytes = event.data if isinstance(event.data, str | bytes) else bytes(event.data)
        if event.message_finished and not self._parts:
            size = len(data)
            if size > self._max or (isinstance(data, str) and 4 * size > self._max
                                    and utf8_bytes(data) > self._max):
                self._too_big()
                return None
            return data
        self._parts.append(data)
        self._size += len(data)
        if self._size > self._max:
            self._too_big()
            return None
        if not event.message_finished:
            return None
        parts, self._parts, self._size = self._parts, [], 0
        whole: str | bytes = "".join(parts) if isinstance(data, str) else b"".join(parts)  # type: ignore[arg-type]
        if isinstance(whole, str) and 4 * len(whole) > self._max and utf8_bytes(whole) > self._max:
            self._too_big()
            return None
        return whole

    def _too_big(self) -> None:
        self._parts, self._size = [], 0
        self.start_close(TOO_BIG, f"frame over {self._max} bytes (UTF-8)")

    def _closed_by_peer(self, event: CloseConnection) -> None:
        proto = self._proto
        assert proto is not None
        self.close_code = event.code
        if proto.state is ConnectionState.REMOTE_CLOSING:
            self._send_event(event.response())
        elif proto.state is ConnectionState.OPEN:
            # wsproto reports a frame it could not parse as a close from the peer (1002, 1007):
            # tell the peer why
            self._send_event(CloseConnection(code=event.code, reason=event.reason))

    def _lost(self) -> None:
        if self.close_code is None:
            self.close_code = ABNORMAL
        self._outbox.broken = True

    # the session's view of the outgoing side (actors/server.py)
    @property
    def writing(self) -> bool:
        """Frames wait for the writer task: hold back more replies, read nothing more."""
        return self._outbox.writing

    @property
    def broken(self) -> bool:
        """The stream failed or was closed: nothing more is written."""
        return self._outbox.broken

    def when_written(self, callback: Callable[[], None] | None) -> None:
        """Call `callback` each time the writer task has sent everything queued (None: stop)."""
        self._outbox.on_written = callback


    # --- frames out -------------------------------------------------------------------

    def send_text(self, text: str) -> None:
        """Send one text message; never waits (see the module text). Dropped once closed."""
        if self.close_code is None and not self.broken:
            self._write(text_frame(text.encode("utf-8")))

    def start_close(self, code: int, reason: str | None = None) -> None:
        """Send our close frame; `receive_message` then returns None, `aclose` finishes."""
        proto = self._proto
        if proto is None or proto.state is not ConnectionState.OPEN:
            return
        self.close_code = code
        self._send_event(CloseConnection(code=code, reason=reason))

    async def aclose(self) -> None:
        """End the connection: let queued frames out, wait briefly for the peer's answer to our
        close frame, then close the stream. Idempotent."""
        proto = self._proto
        try:
            with trio.move_on_after(CLOSE_WAIT_S):
                if proto is not None and proto.state is ConnectionState.LOCAL_CLOSING and not self.broken:
                    await self._await_peer_close(proto)
                await self._outbox.all_written()
        finally:  # cancelled too (the coordinator stops): the stream is closed all the same
            await self._outbox.aclose()

    async def _await_peer_close(self, proto: Connection) -> None:
        while proto.state is ConnectionState.LOCAL_CLOSING:
            data = await self._receive()
            if not data:
                return
            proto.receive_data(data)
            for event in proto.events():
                if isinstance(event, CloseConnection):
                    return

    def _send_event(self, event: Event) -> None:
        proto = self._proto
        assert proto is not None
        self._write(proto.send(event))

    def _write(self, data: bytes) -> None:
        outbox = self._outbox
        outbox.write(data)
        if outbox.broken:
            self._lost()

    async def _send_now(self, data: bytes) -> None:
        await self._outbox.send_now(data)

    async def _receive(self) -> bytes | None:
        """The next bytes from the peer (TLS: plaintext); b"" or None once it is gone."""
        if self._tls is not None:
            return await self._receive_tls(self._tls)
        try:
            return cast(bytes, await self._stream.receive_some(RECEIVE_BYTES))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return None

    async def _receive_tls(self, engine: TlsEngine) -> bytes | None:
        """Plaintext from the peer, driving the TLS handshake first; what TLS itself has to
        send (handshake flights, key updates) goes out on the way, in order."""
        while True:
            try:
                data = engine.read(RECEIVE_BYTES)
            except ssl.SSLError as exc:
                if not engine.handshaken and tls.is_plain_http(exc):
                    await tls.refuse_plain_http(self._stream)  # a ws:// client: say wss://
                self._lost()
                return None
            due = engine.data_to_send()
            if due:
                if self._proto is None:  # the handshakes: nothing else is queued, await it here
                    try:
                        await self._stream.send_all(due)
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                        self._lost()
                        return None
                else:
                    self._outbox.write_raw(due)
            if data is not None:
                return data
            try:
                received = await self._stream.receive_some(RECEIVE_BYTES)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                return None
            engine.receive_data(received)
