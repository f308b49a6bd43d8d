"""A lean websocket client for the load generator, written directly on non-blocking sockets.

trio-websocket (wsproto + h11, a reader task and a memory channel per connection)
costs the load generator more CPU per heartbeat than the servers under test
spend answering it, so thousands of simulated members saturated one core long
before they reached their offered rate. This client does only what the bench
needs, the RFC 6455 client side on 127.0.0.1:

* the HTTP/1.1 Upgrade handshake (101 and Sec-WebSocket-Accept are checked);
* client frames: FIN + opcode, MASK bit with an all-zero mask key (valid per
  RFC 6455 5.3, and it makes masking a no-op), 7/16/64-bit lengths;
* server frames: text/binary messages (fragments are accumulated until FIN),
  ping -> pong, close -> close reply and `Closed`.

No task of its own: the caller sends with a plain syscall (a rare partial write
is finished by waiting for the socket to be writable) and receives by waiting
for readability, so one simulated member is one task. `connect(url, ssl_context=)`
speaks wss:// over a non-blocking ssl.SSLSocket the same way (a write or read
that TLS cannot finish yet waits like a would-block one).
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import ssl
from urllib.parse import urlsplit

import trio

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_NO_MASK = b"\x00\x00\x00\x00"
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
RECV_SIZE = 65536
_WOULD_BLOCK = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


class Closed(Exception):
    """The connection is closed (close frame, EOF or a socket error)."""


class HandshakeFailed(OSError):
    """The server did not upgrade the connection."""


def frame(payload: bytes, opcode: int = OP_TEXT) -> bytes:
    """One masked client frame (FIN set, zero mask key) carrying `payload`."""
    n = len(payload)
    if n < 126:
        header = bytes((0x80 | opcode, 0x80 | n))
    elif n < 1 << 16:
        header = bytes((0x80 | opcode, 0x80 | 126)) + n.to_bytes(2, "big")
    else:
        header = bytes((0x80 | opcode, 0x80 | 127)) + n.to_bytes(8, "big")
    return header + _NO_MASK + payload


def _unmask(payload: bytes, key: bytes) -> bytes:
    if key == _NO_MASK:
        return payload
    n = len(payload)
    repeated = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "little") ^ int.from_bytes(repeated, "little")).to_bytes(n, "little")


class LeanWebSocket:
    """One client websocket on a non-blocking stdlib socket, driven from one task."""

    __slots__ = ("sock", "buffer", "fragments", "fragment_opcode", "out", "flushing", "closed",
                 "close_sent", "tls")

    def __init__(self, sock: socket.socket, leftover: bytes) -> None:
        self.sock = sock
        self.buffer = leftover
        self.fragments: list[bytes] | None = None
        self.fragment_opcode = OP_TEXT
        self.out = b""
        self.flushing = False
        self.closed = False
        self.close_sent = False
        self.tls = isinstance(sock, ssl.SSLSocket)  # it may hold decrypted bytes: see receive()

    # --- sending -------------------------------------------------------------------

    async def send_raw(self, data: bytes) -> None:
        """Write `data`; one syscall in the usual case (no checkpoint then)."""
        if self.closed:
            raise Closed("closed")
        if self.out:
            self.out += data
        else:
            try:
                sent = self.sock.send(data)
            except _WOULD_BLOCK:
                sent = 0
            except OSError as exc:
                self._drop()
                raise Closed(str(exc)) from exc
            if sent == len(data):
                return
            self.out = data[sent:]
        if self.flushing:  # another task is finishing a partial write; it sends ours too
            return
        self.flushing = True
        try:
            while self.out:
                await trio.lowlevel.wait_writable(self.sock)
                try:
                    sent = self.sock.send(self.out)
                except _WOULD_BLOCK:
                    continue
                except OSError as exc:
                    self._drop()
                    raise Closed(str(exc)) from exc
                self.out = self.out[sent:]
        finally:
            self.flushing = False

    async def send_text(self, payload: bytes) -> None:
        await self.send_raw(frame(payload))

    # --- receiving -----------------------------------------------------------------

    def _next_frame_message(self) -> bytes | None:
        """Parse buffered frames; the next complete message, or None when more bytes are needed.

        Control frames are answered here (pong, close echo); a close raises `Closed`.
        """
        while True:
            buffer = self.buffer
            available = len(buffer)
            if available < 2:
                return None
            b0, b1 = buffer[0], buffer[1]
            length = b1 & 0x7F
            pos = 2
            if length == 126:
                if available < 4:
                    return None
                length = int.from_bytes(buffer[2:4], "big")
                pos = 4
            elif length == 127:
                if available < 10:
                    return None
                length = int.from_bytes(buffer[2:10], "big")
                pos = 10
            key = None
            if b1 & 0x80:  # servers must not mask, but unmask rather than fail
                if available < pos + 4:
                    return None
                key = buffer[pos:pos + 4]
                pos += 4
            end = pos + length
            if available < end:
                return None
            payload = buffer[pos:end]
            self.buffer = buffer[end:]
            if key is not None:
                payload = _unmask(payload, key)
            opcode = b0 & 0x0F
            fin = b0 & 0x80
            if opcode == OP_TEXT or opcode == OP_BINARY:
                if fin:
                    return payload
                self.fragments = [payload]
                self.fragment_opcode = opcode
            elif opcode == OP_CONT:
                if self.fragments is None:  # stray continuation: keep it as its own fragment stream
                    self.fragments = []
                self.fragments.append(payload)
                if fin:
                    message = b"".join(self.fragments)
                    self.fragments = None
                    return message
            elif opcode == OP_PING:
                self._send_control(OP_PONG, payload)
            elif opcode == OP_CLOSE:
                code = payload[:2] if len(payload) >= 2 else b""
                if not self.close_sent:
                    self.close_sent = True
                    self._send_control(OP_CLOSE, code)
                self._drop()
                raise Closed(f"closed by server {int.from_bytes(code, 'big') if code else ''}")
            # pongs and unknown opcodes are ignored

    def _send_control(self, opcode: int, payload: bytes) -> None:
        """Best-effort control frame (pong, close echo); never waits."""
        if self.closed:
            return
        data = frame(payload[:125], opcode)
        if self.out:
            self.out += data
            return
        try:
            sent = self.sock.send(data)
        except OSError:
            return
        if sent < len(data):
            self.out = data[sent:]  # finished by the next send_raw

    async def receive(self) -> bytes:
        """The next text/binary message's payload (bytes; json.loads takes them as they are)."""
        while True:
            message = self._next_frame_message()
            if message is not None:
                return message
            if self.closed:
                raise Closed("closed")
            if not (self.tls and self.sock.pending()):  # type: ignore[attr-defined]
                await trio.lowlevel.wait_readable(self.sock)
            try:
                data = self.sock.recv(RECV_SIZE)
            except _WOULD_BLOCK:
                continue
            except OSError as exc:
                self._drop()
                raise Closed(str(exc)) from exc
            if not data:
                self._drop()
                raise Closed("EOF")
            self.buffer = self.buffer + data if self.buffer else data

    # --- closing -------------------------------------------------------------------

    def _drop(self) -> None:
        if not self.closed:
            self.closed = True
            trio.lowlevel.notify_closing(self.sock)
            self.sock.close()

    def close(self, code: int = 1000) -> None:
        """Send a close frame if it fits in the socket buffer, then drop the connection (no wait)."""
        if not self.closed:
            if not self.close_sent:
                self.close_sent = True
                self._send_control(OP_CLOSE, code.to_bytes(2, "big"))
            self._drop()

    async def aclose(self, code: int = 1000) -> None:
        """The closing handshake: send a close frame, read until the server's close or EOF, drop.

        Bound it with a timeout (the caller's cancel scope); the socket is dropped either way.
        """
        if self.closed:
            return
        try:
            if not self.close_sent:
                self.close_sent = True
                self._send_control(OP_CLOSE, code.to_bytes(2, "big"))
            if self.out and not self.flushing:  # finish a partial write (it ends with the close frame)
                await self.send_raw(b"")
            while True:
                await self.receive()
        except Closed:
            pass
        finally:
            self._drop()


async def connect(url: str, ssl_context: ssl.SSLContext | None = None) -> LeanWebSocket:
    """Open `url` (ws://host:port/path, or wss:// with `ssl_context`) and complete the Upgrade
    handshake."""
    parts = urlsplit(url)
    if parts.scheme != ("wss" if ssl_context else "ws"):
        raise ValueError(f"{url!r}: ws:// without an ssl_context, wss:// with one")
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if ssl_context else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.connect((host, port))
        except BlockingIOError:
            await trio.lowlevel.wait_writable(sock)
            error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if error:
                raise OSError(error, os.strerror(error)) from None
        if ssl_context is not None:
            sock = await _tls_handshake(ssl_context.wrap_socket(
                sock, server_hostname=host, do_handshake_on_connect=False))
        key = base64.b64encode(os.urandom(16))
        request = (f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                   f"Connection: Upgrade\r\nSec-WebSocket-Key: {key.decode()}\r\n"
                   f"Sec-WebSocket-Version: 13\r\n\r\n").encode()
        while request:
            await trio.lowlevel.wait_writable(sock)
            try:
                request = request[sock.send(request):]
            except _WOULD_BLOCK:
                pass
        response = b""
        while b"\r\n\r\n" not in response:
            if len(response) > 16384:
                raise HandshakeFailed("handshake response too long")
            if not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
                await trio.lowlevel.wait_readable(sock)
            try:
                chunk = sock.recv(RECV_SIZE)
            except _WOULD_BLOCK:
                continue
            if not chunk:
                raise HandshakeFailed("connection closed during the handshake")
            response += chunk
        head, leftover = response.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        status = lines[0].split(None, 2)
        if len(status) < 2 or status[1] != b"101":
            raise HandshakeFailed(f"no upgrade: {lines[0].decode(errors='replace')}")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        expected = base64.b64encode(hashlib.sha1(key + _GUID).digest())
        if headers.get(b"sec-websocket-accept") != expected:
            raise HandshakeFailed("bad Sec-WebSocket-Accept")
        return LeanWebSocket(sock, leftover)
    except BaseException:
        trio.lowlevel.notify_closing(sock)
        sock.close()
        raise


async def _tls_handshake(sock: ssl.SSLSocket) -> ssl.SSLSocket:
    while True:
        try:
            sock.do_handshake()
            return sock
        except ssl.SSLWantReadError:
            await trio.lowlevel.wait_readable(sock)
        except ssl.SSLWantWriteError:
            await trio.lowlevel.wait_writable(sock)


__all__ = ["Closed", "HandshakeFailed", "LeanWebSocket", "connect", "frame"]
