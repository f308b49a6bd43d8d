"""TLS settings for every hop: the coordinator's certificate, the clients' trust, rediss:// options.

- `server_context(cert, key)`: what `rsc coordinator --tls-cert --tls-key` serves wss://
  (and, with --metrics-tls, the metrics, health and console ports) with.
- `websocket_context(url, ca_file=, ssl_context=)`: what a client verifies a wss://
  coordinator against: the given context, else the system trust store plus `ca_file`
  (default $RSC_CA_FILE); None for a ws:// URL.
- `own_certificate_context(cert)`: what the coordinator's own web console dials its wss://
  port with (loopback, same process): it trusts exactly that certificate.
- `tls_failure(exc)` / `tls_failure_line(url, error)`: the TLS error inside a failed
  connect and the one line a tool prints for it (D3: waiting cannot heal it).
- `verify_server(url, context)`: a TLS handshake with a wss:// coordinator, once per
  process, raising `TlsFailed` with that line (trio-websocket reports a certificate it
  cannot verify only as a connect timeout).
- `TlsListener`: the coordinator's side, TLS over its admitted connections: each one a
  `TlsStream` naming its transport and context, which the coordinator's websocket
  connection (actors/net/ws_server.py) drives itself, or a trio stream for anyone else; a plain
  HTTP request (a ws:// client) is answered 400 "use wss://" at once (`refuse_plain_http`).
- `redis_tls_options(url)`: the extra redis-py options of a rediss:// URL: the CA from
  $RSC_REDIS_CA_FILE when the URL's query names none (`ssl_ca_certs`, `ssl_certfile`,
  `ssl_keyfile` in the query are read by redis-py itself); every file named must exist.

Apart from `verify_server`, `TlsListener` and `refuse_plain_http` (trio streams), nothing here
touches a socket.
"""

from __future__ import annotations

import functools
import os
import ssl
import urllib.parse
from collections.abc import Mapping

import trio

from rsc.common.error_family import ConfigurationError

CA_FILE_ENV = "RSC_CA_FILE"
REDIS_CA_FILE_ENV = "RSC_REDIS_CA_FILE"
REDIS_TLS_FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")


class TlsConfigError(ConfigurationError):
    """A certificate, key or CA file that cannot be used (missing, unreadable, not PEM, no match)."""


class TlsFailed(ConfigurationError):
    """The coordinator's TLS handshake failed: its certificate does not verify against what we
    trust, or it does not speak TLS. Not a lost session: retrying cannot heal it (D3)."""

    def __init__(self, line: str) -> None:
        super().__init__(line)
        self.line = line


def server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server context holding `cert_file` (the chain, PEM) and its `key_file`. A client's
    renegotiation (TLS 1.2) is refused, so a handshake never starts again under a session
    (actors/net/tls_transport.py encrypts without waiting on the peer)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.options |= ssl.OP_NO_RENEGOTIATION
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"cannot use --tls-cert {cert_file} with --tls-key {key_file}: "
                             f"{_reason(exc)}") from None
    return context


@functools.lru_cache(maxsize=16)
def client_context(ca_file: str | None = None) -> ssl.SSLContext:
    """A client context that verifies the server's certificate and host name against the
    system trust store plus `ca_file` (PEM). One per file per process: reconnects reuse it."""
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"cannot use CA file {ca_file}: {_reason(exc)}") from None


def own_certificate_context(cert_file: str) -> ssl.SSLContext:
    """A client context that trusts exactly the certificate `cert_file` starts with (the
    coordinator's own --tls-cert chain, PEM): for the one connection a process makes to its
    own wss:// port, by a loopback address the certificate need not name.

    The chain is the only trust anchor (partial chains allowed: a leaf or intermediate is
    trusted as given), so the handshake verifies the chain as usual; instead of the host
    name, the peer's certificate must then be that very first certificate, byte for byte
    (a sibling certificate from the same intermediate is refused). Verification stays on.
    """
    begin, end = "-----BEGIN CERTIFICATE-----", "-----END CERTIFICATE-----"
    problem = f"cannot use --tls-cert {cert_file}"
    try:
        with open(cert_file, encoding="ascii") as file:
            pem = file.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise TlsConfigError(f"{problem}: {_reason(exc)}") from None
    start = pem.find(begin)
    stop = pem.find(end, start)
    if start < 0 or stop < 0:
        raise TlsConfigError(f"{problem}: no PEM certificate in it")
    try:
        context = ssl.create_default_context(cadata=pem)
        expected = ssl.PEM_cert_to_DER_cert(pem[start:stop + len(end)])
    except (ValueError, ssl.SSLError) as exc:
        raise TlsConfigError(f"{problem}: {_reason(exc)}") from None
    context.check_hostname = False  # replaced by the exact-certificate check below
    context.verify_mode = ssl.CERT_REQUIRED
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    context.sslobject_class = type("OwnCertificateObject", (_ExactPeerObject,),
                                   {"expected": expected})
    return context


class _ExactPeerObject(ssl.SSLObject):
    """An SSLObject whose handshake also requires the peer's certificate to be `expected` (DER)."""

    expected: bytes = b""

    def do_handshake(self) -> None:
        super().do_handshake()
        if self.getpeercert(binary_form=True) != self.expected:
            error = ssl.SSLCertVerificationError(
                1, "the peer's certificate is not the coordinator's own --tls-cert")
            error.verify_message = "the certificate is not the coordinator's own --tls-cert"
            error.verify_code = 0
            error.reason = "CERTIFICATE_VERIFY_FAILED"
            error.library = "SSL"
            raise error


def websocket_context(url: str, *, ca_file: str | None = None, ssl_context: ssl.SSLContext | None = None,
                      environ: Mapping[str, str] = os.environ) -> ssl.SSLContext | None:
    """The context a client opens `url` with: None for ws://; for wss:// `ssl_context` if
    given, else one trusting the system store and `ca_file` (default $RSC_CA_FILE)."""
    if urllib.parse.urlsplit(url).scheme != "wss":
        return None
    if ssl_context is not None:
        return ssl_context
    return client_context(ca_file or environ.get(CA_FILE_ENV) or None)


def tls_failure(exc: BaseException | None) -> ssl.SSLError | None:
    """The ssl.SSLError in `exc`'s causes (trio wraps it in BrokenResourceError, trio-websocket
    in HandshakeError, nurseries in groups), or None when the failure was not TLS."""
    seen = 0
    while exc is not None and seen < 20:
        seen += 1
        if isinstance(exc, ssl.SSLError):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            found = next((error for inner in exc.exceptions
                          if (error := tls_failure(inner)) is not None), None)
            if found is not None:
                return found
        exc = exc.__cause__ or exc.__context__
    return None


def tls_failure_line(url: str, error: ssl.SSLError) -> str:
    """One line naming `url` and why its TLS handshake failed, with the likely fix."""
    if isinstance(error, ssl.SSLCertVerificationError):
        return (f"TLS verification of {url} failed: {_reason(error)}; pass --ca-file (RSC_CA_FILE) "
                "with the CA that signed the coordinator's certificate")
    return (f"TLS handshake with {url} failed: {_reason(error)}; "
            "does the coordinator serve wss:// (--tls-cert, --tls-key)?")


_verified: set[tuple[str, int, int]] = set()
_checking: dict[tuple[tuple[str, int, int], trio.lowlevel.TrioToken], trio.Event] = {}


def _target(url: str, context: ssl.SSLContext) -> tuple[str, int, int]:
    parts = urllib.parse.urlsplit(url)
    return (parts.hostname or "", parts.port or 443, id(context))


async def verify_server(url: str, context: ssl.SSLContext, timeout: float) -> None:
    """A TLS handshake with the wss:// server of `url`, once per process for each server and
    context: TlsFailed (the one line of `tls_failure_line`) when it fails. A connection that
    does not come up is left to the websocket connect that follows, which names it."""
    target = _target(url, context)
    running = (target, trio.lowlevel.current_trio_token())
    while running in _checking:  # sessions opened together (a listener's members) check once
        await _checking[running].wait()
    if target in _verified:
        return
    _checking[running] = done = trio.Event()
    try:
        await _handshake(url, target, context, timeout)
    finally:
        del _checking[running]
        done.set()


async def _handshake(url: str, target: tuple[str, int, int], context: ssl.SSLContext,
                     timeout: float) -> None:
    host, port, _ = target
    with trio.move_on_after(timeout):
        try:
            stream = await trio.open_ssl_over_tcp_stream(host, port, ssl_context=context,
                                                         https_compatible=True)
        except OSError:
            return  # refused, unknown host, unreachable: not a TLS problem
        try:
            await stream.do_handshake()
        except trio.BrokenResourceError as exc:
            error = tls_failure(exc)
            if error is not None:
                raise TlsFailed(tls_failure_line(url, error)) from None
            return
        finally:
            await trio.aclose_forcefully(stream)
        _verified.add(target)


def forget_server(url: str, context: ssl.SSLContext) -> None:
    """After a failed connect: handshake with that server again next time (its certificate
    may have changed)."""
    _verified.discard(_target(url, context))


PLAIN_ON_TLS_BODY = b"this port serves TLS: connect with wss://\n"
PLAIN_ON_TLS = (b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(PLAIN_ON_TLS_BODY), PLAIN_ON_TLS_BODY))


class TlsListener(trio.abc.Listener[trio.abc.Stream]):
    """Admitted connections that speak TLS with `context` (trio.SSLListener, but over any
    listener: the websocket server only accepts a SocketListener inside that one)."""

    def __init__(self, inner: trio.abc.Listener[trio.abc.Stream], context: ssl.SSLContext) -> None:
        self.inner = inner
        self.context = context

    async def accept(self) -> TlsStream:
        return TlsStream(await self.inner.accept(), self.context)

    async def aclose(self) -> None:
        await self.inner.aclose()


class TlsStream(trio.abc.Stream):
    """An accepted connection that is to speak TLS with `context` over `transport`.

    The coordinator's websocket connection takes `transport` and `context` and runs TLS in its
    own task (actors/net/ws_server.py, actors/net/tls_transport.py). Used as a stream, it is a server-side
    trio.SSLStream (made on first use) that answers a plain HTTP request (a ws:// client) with
    a 400 saying to use wss:// (D3), instead of leaving it waiting for its handshake timeout.
    """

    def __init__(self, transport: trio.abc.Stream, context: ssl.SSLContext) -> None:
        self.transport = transport
        self.context = context
        self._tls: trio.SSLStream[trio.abc.Stream] | None = None

    @property
    def tls(self) -> trio.SSLStream[trio.abc.Stream]:
        if self._tls is None:
            self._tls = trio.SSLStream(self.transport, self.context, server_side=True,
                                       https_compatible=True)
        return self._tls

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.tls.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.tls.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        try:
            return await self.tls.receive_some(max_bytes)
        except trio.BrokenResourceError as exc:
            error = tls_failure(exc)
            if error is not None and is_plain_http(error):
                await refuse_plain_http(self.transport)
                await trio.aclose_forcefully(self.transport)
            raise

    async def aclose(self) -> None:
        if self._tls is None:
            await self.transport.aclose()
        else:
            await self._tls.aclose()


def is_plain_http(error: ssl.SSLError) -> bool:
    """The TLS handshake failed because the client spoke plain HTTP (a ws:// URL)."""
    return error.reason == "HTTP_REQUEST"


async def refuse_plain_http(transport: trio.abc.Stream) -> None:
    """Answer a plain HTTP client of a TLS port with a 400 saying to use wss:// (D3); within 1 s,
    and silently if it has gone."""
    with trio.move_on_after(1):
        try:
            await transport.send_all(PLAIN_ON_TLS)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass


def redis_tls_options(url: str, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Options to pass to redis-py beside a rediss:// `url` (none for redis://).

    ValueError names a TLS file of the URL or of RSC_REDIS_CA_FILE that does not exist.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "rediss":
        return {}
    query = {name: values[-1] for name, values in urllib.parse.parse_qs(parts.query).items()}
    options: dict[str, str] = {}
    ca_file = environ.get(REDIS_CA_FILE_ENV)
    if "ssl_ca_certs" not in query and ca_file:
        options["ssl_ca_certs"] = ca_file
    for name in REDIS_TLS_FILES:
        path = query.get(name) or options.get(name)
        if path and not os.path.isfile(path):
            source = REDIS_CA_FILE_ENV if name in options else name
            raise ValueError(f"{source}: no such file {path!r}")
    return options


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_message:
        return str(exc.verify_message)
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason).replace("_", " ").lower()
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}{f': {exc.filename}' if exc.filename else ''}"
    return str(exc)
