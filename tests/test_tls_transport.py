"""actors/net/tls_transport.py's TlsEngine without sockets: a client SSLObject and the engine pass
bytes by hand.

- the handshake in either TLS version, then plaintext both ways;
- TLS 1.3 session tickets are held back until the first bytes the server encrypts, and go
  out in front of them;
- the ends: a peer that leaves during the handshake or after it (with or without
  close_notify) reads as b""; a plain HTTP request fails the handshake as one
  (`tls.is_plain_http`, answered 400 by the connection); bytes that break TLS raise;
- the server context refuses renegotiation (the engine encrypts without waiting on the peer).
"""

from __future__ import annotations

import ssl

import pytest

from rsc.actors.net.tls_transport import TlsEngine
from rsc.common import tls
from tests.conftest_tls import Certs


class Client:
    """The client side of TLS over memory BIOs."""

    def __init__(self, certs: Certs, maximum: ssl.TLSVersion | None = None) -> None:
        context = ssl.create_default_context(cafile=certs.ca_file)
        if maximum is not None:
            context.maximum_version = maximum
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_hostname="127.0.0.1")

    def step(self, from_server: bytes) -> tuple[bool, bytes]:
        """Feed the server's bytes; whether the handshake is done, and what to send back."""
        self.incoming.write(from_server)
        try:
            self.tls.do_handshake()
            done = True
        except ssl.SSLWantReadError:
            done = False
        return done, self.outgoing.read()

    def decrypt(self, data: bytes) -> bytes:
        self.incoming.write(data)
        out = b""
        while True:
            try:
                chunk = self.tls.read(65536)
            except ssl.SSLWantReadError:
                return out
            if not chunk:
                return out
            out += chunk


def engine_for(certs: Certs) -> TlsEngine:
    return TlsEngine(tls.server_context(certs.cert_file, certs.key_file))


def handshake(client: Client, engine: TlsEngine) -> bytes:
    """Run the handshake to its end; the client's last flight, not yet given to the engine
    (TLS 1.3: its Finished), or b"" when the engine already has everything (TLS 1.2)."""
    done, to_server = client.step(b"")
    while not done:
        engine.receive_data(to_server)
        assert engine.read(16384) is None  # the handshake wants the client's next flight
        done, to_server = client.step(engine.data_to_send())
    return to_server


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_after_the_handshake_plaintext_goes_both_ways(certs, version):
    client, engine = Client(certs, version), engine_for(certs)
    last = handshake(client, engine)
    engine.receive_data(last + _written(client, b"GET / HTTP/1.1\r\n\r\n"))
    assert engine.read(16384) == b"GET / HTTP/1.1\r\n\r\n"
    assert engine.handshaken and client.tls.version() == version.name.replace("_", ".")
    assert engine.read(16384) is None  # nothing more buffered: read the socket
    assert client.decrypt(engine.encrypt(b"HTTP/1.1 101 Switching Protocols\r\n\r\n")) == \
        b"HTTP/1.1 101 Switching Protocols\r\n\r\n"
    for size in (1, 100, 16384, 40000):  # several records for the big one
        engine.receive_data(_written(client, b"x" * size))
        got = b""
        while (chunk := engine.read(16384)) is not None:
            assert chunk
            got += chunk
        assert got == b"x" * size
        assert client.decrypt(engine.encrypt(b"y" * size)) == b"y" * size


def test_tls_1_3_session_tickets_wait_for_the_first_answer(certs):
    client, engine = Client(certs, ssl.TLSVersion.TLSv1_3), engine_for(certs)
    engine.receive_data(handshake(client, engine))
    assert engine.read(16384) is None and engine.handshaken
    assert engine.data_to_send() == b""  # the tickets are held, not sent at a peer still sending
    answer = engine.encrypt(b"HTTP/1.1 101 Switching Protocols\r\n\r\n")
    assert client.decrypt(answer) == b"HTTP/1.1 101 Switching Protocols\r\n\r\n"
    session = client.tls.session
    assert session is not None and session.has_ticket  # they came in front of the answer
    assert engine.data_to_send() == b""


@pytest.mark.parametrize("close_notify", [True, False])
def test_a_peer_that_leaves_reads_as_the_end(certs, close_notify):
    client, engine = Client(certs), engine_for(certs)
    engine.receive_data(handshake(client, engine))
    assert engine.read(16384) is None
    if close_notify:
        with pytest.raises(ssl.SSLWantReadError):
            client.tls.unwrap()  # sends close_notify, then would wait for ours
        engine.receive_data(client.outgoing.read())
    else:
        engine.receive_data(b"")
    assert engine.read(16384) == b""


def test_a_peer_that_leaves_during_the_handshake_or_mid_record_reads_as_the_end(certs):
    client, engine = Client(certs), engine_for(certs)
    _, hello = client.step(b"")
    engine.receive_data(hello[:40])
    assert engine.read(16384) is None
    engine.receive_data(b"")
    assert engine.read(16384) == b""
    client, engine = Client(certs), engine_for(certs)
    engine.receive_data(handshake(client, engine))
    record = _written(client, b"a whole record")
    engine.receive_data(record[:-3])
    assert engine.read(16384) is None  # part of a record: wait for the rest
    engine.receive_data(b"")
    assert engine.read(16384) == b""


def test_a_plain_http_request_fails_the_handshake_as_one(certs):
    engine = engine_for(certs)
    engine.receive_data(b"GET /v1/member HTTP/1.1\r\nHost: x\r\n\r\n")
    with pytest.raises(ssl.SSLError) as failed:
        engine.read(16384)
    assert tls.is_plain_http(failed.value)


def test_bytes_that_break_tls_raise(certs):
    client, engine = Client(certs), engine_for(certs)
    engine.receive_data(handshake(client, engine))
    assert engine.read(16384) is None
    engine.receive_data(b"\x17\x03\x03\x00\x20" + bytes(32))  # a record that does not decrypt
    with pytest.raises(ssl.SSLError) as failed:
        engine.read(16384)
    assert not tls.is_plain_http(failed.value)


def test_the_server_context_refuses_renegotiation(certs):
    context = tls.server_context(certs.cert_file, certs.key_file)
    assert context.options & ssl.OP_NO_RENEGOTIATION


def _written(client: Client, data: bytes) -> bytes:
    client.tls.write(data)
    return client.outgoing.read()
