"""The outgoing half of one server websocket: bytes to the socket, in place or by a short task.

actors/net/ws_server.py's `ServerConnection` parses what comes in; this holds what goes out.
A frame is written straight to the socket's descriptor when nothing is queued before it
and the kernel takes it whole (no await, no task). Otherwise the rest is queued in order
and one writer task sends it; `writing` stays true until the queue is empty, so the
session holds back what it has not handed over (MAX_IN_FLIGHT) and reads nothing more
meanwhile (TCP's own backpressure). With TLS (`engine` given) a frame is encrypted and
written the same way; what waits behind queued bytes stays plaintext and is encrypted by
the writer in one go (fewer, fuller records). Once `broken`, nothing is written again,
and a closed stream's descriptor is forgotten: the number may soon name another socket.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable

import trio

from rsc.actors.net.tls_transport import TlsEngine

STREAM_GONE = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)  # ssl.SSLError too


class Outbox:
    """What one connection sends; see the module text."""

    def __init__(self, stream: trio.abc.Stream, nursery: trio.Nursery,
                 engine: TlsEngine | None) -> None:
        self.stream = stream
        self._nursery = nursery
        self._tls = engine
        self._fd = socket_fd(stream)  # None (a test stream): every write goes by task
        self.out: list[bytes] = []  # bytes for the socket, in order (TLS: ciphertext)
        self.plain: list[bytes] = []  # TLS only: plaintext queued behind `out`, not encrypted yet
        self.writing = False
        self._written: trio.Event | None = None
        self.on_written: Callable[[], None] | None = None  # called once the queue has gone out
        self.broken = False  # the stream failed or was closed: nothing more is written

    def write(self, data: bytes) -> None:
        """Plaintext for the peer (encrypted here under TLS): in place, or queued in order."""
        if self._tls is not None:
            encrypted = self._encrypt(data)
            if not encrypted:
                return
            data = encrypted
        self.write_raw(data)

    def _encrypt(self, data: bytes) -> bytes | None:
        """TLS: `data` as records to write now; None when it waits behind queued bytes (it is
        encrypted by the writer, with whatever joins it) or the connection is broken."""
        if self.broken:
            return None
        if self.writing:
            self.plain.append(data)
            return None
        assert self._tls is not None
        try:
            return self._tls.encrypt(data)
        except ssl.SSLError:
            self.broken = True
            return None

    def write_raw(self, data: bytes) -> None:
        """Bytes for the socket (TLS: ciphertext): written in place, or queued in order."""
        if self.broken:
            return
        if self.writing:
            self.out.append(data)
            return
        fd = self._fd
        if fd is not None:
            try:
                sent = os.write(fd, data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                self.broken = True
                return
            if sent == len(data):
                return
            data = data[sent:]
        self.out.append(data)
        self.writing = True
        self._nursery.start_soon(self._writer)

    async def _writer(self) -> None:
        out, plain = self.out, self.plain
        try:
            while (out or plain) and not self.broken:
                if plain:  # TLS: what waited as plaintext goes after the ciphertext before it
                    assert self._tls is not None
                    joined = plain[0] if len(plain) == 1 else b"".join(plain)
                    plain.clear()
                    out.append(self._tls.encrypt(joined))
                data = out[0] if len(out) == 1 else b"".join(out)
                out.clear()
                await self.stream.send_all(data)
        except STREAM_GONE:
            self.broken = True
        finally:
            out.clear()
            plain.clear()
            self.writing = False
            written, self._written = self._written, None
            if written is not None:
                written.set()
        if self.on_written is not None and not self.broken:
            self.on_written()

    async def all_written(self) -> None:
        """Wait until the queue has gone out (or the stream broke)."""
        while self.writing and not self.broken:
            if self._written is None:
                self._written = trio.Event()
            await self._written.wait()

    async def send_now(self, data: bytes) -> bool:
        """Handshake answers: nothing else is queued yet, so they go out in place (awaited).
        False when the stream is gone."""
        try:
            if self._tls is not None:
                data = self._tls.encrypt(data)
            await self.stream.send_all(data)
        except STREAM_GONE:
            self.broken = True
            return False
        return True

    async def aclose(self) -> None:
        """Nothing is written again; the stream is closed (forcefully: the caller waited)."""
        self.broken = True
        self._fd = None  # never written again: the number may soon name another socket
        await trio.aclose_forcefully(self.stream)


def socket_fd(stream: trio.abc.Stream) -> int | None:
    """The descriptor of a TCP stream (direct writes); None for anything else (a test stream)."""
    sock = getattr(stream, "socket", None)
    if sock is None or os.name != "posix":  # a socket is a file descriptor only on POSIX
        return None
    try:
        fd = sock.fileno()
    except (AttributeError, OSError):
        return None
    return fd if isinstance(fd, int) and fd >= 0 else None
