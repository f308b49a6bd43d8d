"""A websocket session with the coordinator: requests with matched responses, and pushes.

Used by the member runtime, the producer and the admin client. One session is
one websocket to `/v1/member` or `/v1/admin`:

    async with open_session("ws://127.0.0.1:8765", "member") as session:
        response = await session.request(GetRouting(request_id=0, stream_prefix="orders"))
        push = await session.pushes.receive()

`request` stamps a fresh `requestId`, so callers may pass any placeholder id.
Requests may be pipelined from several tasks; each gets the response carrying
its id. Messages without a `requestId` (assignmentChanged, routing pushes) go
to `Session.pushes`. When the connection is lost, pending and later requests
raise `SessionClosed` and `pushes` ends.
"""

from __future__ import annotations

import socket
import ssl
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

import attrs
import trio
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    HandshakeError,
    WebSocketConnection,
)

from rsc.common.coordinator_url import handshake_hint, host_port, shown, url_problem
from rsc.common.error_family import ConfigurationError
from rsc.common.errors import unwrap_single
from rsc.common.tls import forget_server, verify_server, websocket_context
from rsc.common.ws_client import connect_websocket
from rsc.common.ws_session import ClientSession, Undecodable
from rsc.protocol import Message, ProtocolError, decode, encode


class SessionClosed(Exception):
    """The session's connection is gone (or never came up); the request has no answer.

    `line` is the one line a console tool prints for it: what happened and the
    likely fix (D3).
    """

    def __init__(self, reason: str, *, line: str | None = None) -> None:
        super().__init__(reason)
        self.line = line or reason


class CoordinatorUnreachable(SessionClosed):
    """No websocket came up: connection refused, unknown host, no answer in time."""


class SessionRefused(SessionClosed):
    """The coordinator answered the handshake with an HTTP error (401, 404, 503)."""

    def __init__(self, reason: str, *, status_code: int, line: str | None = None) -> None:
        super().__init__(reason, line=line)
        self.status_code = status_code


class BadCoordinatorUrl(ConfigurationError):
    """A coordinator URL that no retry can make work (scheme, host or port)."""


class ResponseUndecodable(Exception):
    """The coordinator answered a request with a frame that does not decode."""


class Session(ClientSession[Message]):
    """An open websocket session (rsc/common/ws_session.py read as protocol messages); build it
    with `open_session`."""

    def __init__(self, websocket: WebSocketConnection) -> None:
        super().__init__(websocket, read=_read_message, lost=SessionClosed,
                         undecodable=ResponseUndecodable, closed_reason=_closed_reason)

    async def request(self, message: Message) -> Message:
        """Send `message` with a fresh requestId and return the response carrying that id.

        Raises SessionClosed when the connection is lost before the response
        arrives, and ResponseUndecodable when the response does not decode.
        """
        return await self.exchange(
            lambda request_id: encode(attrs.evolve(message, request_id=request_id)))  # type: ignore[misc]


def _read_message(text: str | bytes) -> tuple[int | None, Message]:
    try:
        message = decode(text)
    except ProtocolError as exc:
        raise Undecodable(exc.message, exc.request_id) from None
    return getattr(message, "request_id", None), message


def _closed_reason(exc: ConnectionClosed | None) -> str:
    return "session closed" if exc is None else f"connection closed: {exc.reason}"


def check_coordinator_url(url: str) -> str:
    """`url` without a trailing slash, or BadCoordinatorUrl naming what is wrong with it
    (rsc/common/coordinator_url.py decides)."""
    problem = url_problem(url)
    if problem is not None:
        raise BadCoordinatorUrl(f"bad coordinator URL {shown(url)!r}: {problem}")
    return url.rstrip("/")


def session_url(url: str, endpoint: Literal["member", "admin"]) -> str:
    """The websocket URL of an endpoint of the coordinator at `url` (ws://host:port).

    A URL that already ends with that endpoint's path is taken as it is.
    """
    base = url.rstrip("/")
    path = f"/v1/{endpoint}"
    return base if base.endswith(path) else base + path


def coordinator_base(url: str, endpoint: Literal["member", "admin"]) -> str:
    """The coordinator URL as a user wrote it, without the endpoint path."""
    return url.rstrip("/").removesuffix(f"/v1/{endpoint}")


def refused(url: str, endpoint: Literal["member", "admin"], status_code: int, *,
            token_given: bool = False) -> SessionRefused:
    """The error for a handshake answered with HTTP `status_code`."""
    target = session_url(url, endpoint)
    reason = f"{target} refused the session: HTTP {status_code}"
    hint = handshake_hint(status_code, endpoint=endpoint, hostport=host_port(url),
                          token_given=token_given)
    line = f"{reason}: {hint}" if hint else reason
    return SessionRefused(reason, status_code=status_code, line=line)


def unreachable(url: str, endpoint: Literal["member", "admin"], exc: BaseException,
                connect_timeout: float) -> CoordinatorUnreachable:
    """The error for a connection that never came up, from the OS error inside `exc`."""
    base = coordinator_base(url, endpoint)
    cause = _os_error(exc)
    if isinstance(cause, ConnectionRefusedError):
        line = f"connection refused: is the coordinator running at {base}?"
    elif isinstance(cause, socket.gaierror):
        host = urllib.parse.urlsplit(base).hostname
        line = f"cannot resolve host {host!r}: is the coordinator URL {base} right?"
    elif cause is None or isinstance(cause, TimeoutError):
        line = (f"no answer from {base} within {connect_timeout:g} s: "
                "is the coordinator running there?")
    else:
        line = f"cannot connect to {base}: {cause.strerror or cause}"
    return CoordinatorUnreachable(f"cannot connect to {session_url(url, endpoint)}: {line}",
                                  line=line)


def _os_error(exc: BaseException | None) -> OSError | None:
    """The most specific OSError in `exc`'s cause chain (trio wraps each attempt's in a group)."""
    seen = 0
    found: OSError | None = None
    while exc is not None and seen < 10:
        seen += 1
        if isinstance(exc, BaseExceptionGroup):
            exc = exc.exceptions[0]
            continue
        if isinstance(exc, OSError):
            found = exc
        exc = exc.__cause__ or exc.__context__
    return found


@asynccontextmanager
async def open_session(
    url: str,
    endpoint: Literal["member", "admin"],
    *,
    token: str | None = None,
    connect_timeout: float = 10.0,
    ca_file: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> AsyncIterator[Session]:
    """Connect to the coordinator at `url` (ws://host:port or wss://) and yield a `Session`.

    Sends `Authorization: Bearer <token>` when `token` is given. A URL no retry
    can fix raises BadCoordinatorUrl; a refused handshake raises SessionRefused
    (with its HTTP status), a connection that never came up CoordinatorUnreachable,
    a wss:// server that does not verify against `ssl_context` (else the system
    trust store and `ca_file`, default $RSC_CA_FILE) TlsFailed, not a SessionClosed (D3).
    """
    check_coordinator_url(url)
    headers = [(b"Authorization", f"Bearer {token.strip()}".encode())] if token else None
    context = websocket_context(url, ca_file=ca_file, ssl_context=ssl_context)
    if context is not None:
        await verify_server(coordinator_base(url, endpoint), context, connect_timeout)
    connected = False
    try:
        async with connect_websocket(session_url(url, endpoint), ssl_context=context,
                                     extra_headers=headers, connect_timeout=connect_timeout) \
                as websocket:
            connected = True
            session = Session(websocket)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(session.receive_loop)
                try:
                    yield session
                finally:
                    session.close("session closed")
                    nursery.cancel_scope.cancel()
    except ConnectionRejected as exc:
        if connected:
            raise
        raise refused(url, endpoint, exc.status_code, token_given=bool(token)) from exc
    except (HandshakeError, OSError, trio.TooSlowError) as exc:
        if connected:
            raise
        if context is not None:
            forget_server(coordinator_base(url, endpoint), context)
        raise unreachable(url, endpoint, exc, connect_timeout) from exc
    except BaseExceptionGroup as group:
        unwrap_single(group)
