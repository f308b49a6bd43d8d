"""The server side of TLS as a buffer machine: ciphertext in, plaintext out, and back.

`TlsEngine` is an `ssl.SSLObject` between two `ssl.MemoryBIO`s and does no
I/O itself: whoever holds the connection (actors/net/ws_server.py) reads the
socket, hands the bytes to `receive_data`, takes plaintext from `read` and
sends what `data_to_send` and `encrypt` return, in that order, to the socket.
So a frame is encrypted and written in the task that resolved it, exactly
like a plain one, with no task, lock or await in between.

The rules that make this safe, in the order the bytes flow:

- Every byte taken from the outgoing BIO goes to the socket in the order it
  was taken: TLS records carry sequence numbers (and, after a TLS 1.3
  KeyUpdate, new keys), so the record layer's order is the wire's order.
  Plaintext may wait before it is encrypted (the connection coalesces what a
  slow peer has not read yet), never ciphertext before it is sent.
- `read` drives the handshake until it is done, then decrypts. It returns
  None when it needs more ciphertext first (the caller sends what is due,
  then reads the socket), and b"" once the peer ended: a close_notify, or a
  bare EOF, which HTTPS-style peers send (trio's `https_compatible`).
- At the end of a TLS 1.3 handshake OpenSSL has already written its session
  tickets; they are held back and go out in front of the first bytes we
  encrypt (the HTTP answer), rather than at a peer that may still be
  sending and not yet reading.
- Renegotiation is refused by the server context (`OP_NO_RENEGOTIATION`,
  rsc/common/tls.py `server_context`), and TLS 1.3 has none, so once the
  handshake is done `encrypt` never has to wait for the peer: a
  `SSLWantReadError` there is a failure like any `ssl.SSLError`.
"""

from __future__ import annotations

import ssl


class TlsEngine:
    """One server-side TLS connection without its socket; see the module text."""

    __slots__ = ("_object", "_incoming", "_outgoing", "_delayed", "_eof", "handshaken")

    def __init__(self, context: ssl.SSLContext) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._object = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._delayed = b""  # TLS 1.3 session tickets, sent before the first bytes we encrypt
        self._eof = False
        self.handshaken = False

    def receive_data(self, data: bytes | bytearray) -> None:
        """Ciphertext read from the socket; b"" when the peer closed its side."""
        if data:
            self._incoming.write(data)
        else:
            self._incoming.write_eof()
            self._eof = True

    def read(self, max_bytes: int) -> bytes | None:
        """Plaintext the peer sent (at most one record's worth); None when more ciphertext is
        needed first; b"" once the peer ended the connection. Drives the handshake while it is
        not done. Raises ssl.SSLError when the peer breaks TLS."""
        tls = self._object
        if not self.handshaken:
            try:
                tls.do_handshake()
            except ssl.SSLWantReadError:
                return b"" if self._eof and not self._incoming.pending else None
            except (ssl.SSLEOFError, ssl.SSLSyscallError):
                return b""  # the peer left during the handshake (OpenSSL names it either way)
            except ssl.SSLError as exc:
                if _is_eof(exc):
                    return b""
                raise
            self.handshaken = True
            if tls.version() == "TLSv1.3" and self._outgoing.pending:
                self._delayed = self._outgoing.read()
        if not self._incoming.pending and not self._eof and not tls.pending():
            return None  # nothing buffered: read the socket first (no exception on the hot path)
        try:
            return tls.read(max_bytes)
        except ssl.SSLWantReadError:
            return b"" if self._eof else None  # part of a record: wait for the rest
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            return b""
        except ssl.SSLError as exc:
            if _is_eof(exc):
                return b""
            raise

    def data_to_send(self) -> bytes:
        """What TLS itself has to send now (handshake flights, alerts, key updates)."""
        if not self._outgoing.pending:
            return b""
        data = self._outgoing.read()
        if self._delayed:
            data, self._delayed = self._delayed + data, b""
        return data

    def encrypt(self, data: bytes) -> bytes:
        """`data` as TLS records, after anything TLS still had to send. Only after the
        handshake; raises ssl.SSLError (SSLWantReadError included) when it cannot."""
        self._object.write(data)
        out = self._outgoing.read()
        if self._delayed:
            out, self._delayed = self._delayed + out, b""
        return out


def _is_eof(error: ssl.SSLError) -> bool:
    """OpenSSL 3 reports an EOF without close_notify as a plain SSLError on some Pythons."""
    return getattr(error, "reason", None) == "UNEXPECTED_EOF_WHILE_READING"
