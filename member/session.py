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

import itertools
import logging
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
    open_websocket_url,
)

from rsc.protocol import Message, ProtocolError, decode, encode

log = logging.getLogger(__name__)

PUSH_BUFFER = 1024


class SessionClosed(Exception):
    """The session's connection is gone (or never came up); the request has no answer."""


class ResponseUndecodable(Exception):
    """The coordinator answered a request with a frame that does not decode."""


@attrs.define
class _Waiter:
    done: trio.Event = attrs.field(factory=trio.Event)
    response: Message | None = None
    error: BaseException | None = None


class Session:
    """An open websocket session; build it with `open_session`."""

    def __init__(self, websocket: WebSocketConnection) -> None:
        self._websocket = websocket
        self._request_ids = itertools.count(1)
        self._waiting: dict[int, _Waiter] = {}
        self._send_lock = trio.Lock()
        self._closed_because: str | None = None
        self._push_sender, self.pushes = trio.open_memory_channel[Message](PUSH_BUFFER)

    @property
    def closed(self) -> bool:
        """True once the connection is lost or the session was closed."""
        return self._closed_because is not None

    async def request(self, message: Message) -> Message:
        """Send `message` with a fresh requestId and return the response carrying that id.

        Raises SessionClosed when the connection is lost before the response
        arrives, and ResponseUndecodable when the response does not decode.
        """
        if self._closed_because is not None:
            raise SessionClosed(self._closed_because)
        request_id = next(self._request_ids)
        waiter = _Waiter()
        self._waiting[request_id] = waiter
        try:
            async with self._send_lock:
                try:
                    await self._websocket.send_message(
                        encode(attrs.evolve(message, request_id=request_id))  # type: ignore[misc]
                    )
                except ConnectionClosed as exc:
                    self._close(f"connection closed: {exc.reason}")
            await waiter.done.wait()
        finally:
            self._waiting.pop(request_id, None)
        if waiter.error is not None:
            raise waiter.error
        assert waiter.response is not None
        return waiter.response

    async def receive_loop(self) -> None:
        """Deliver every incoming frame to its waiter or to `pushes`, until the connection ends."""
        try:
            while True:
                try:
                    text = await self._websocket.get_message()
                except ConnectionClosed as exc:
                    self._close(f"connection closed: {exc.reason}")
                    return
                self._deliver(text)
        finally:
            self._close("session closed")

    def _deliver(self, text: str | bytes) -> None:
        try:
            message = decode(text)
        except ProtocolError as exc:
            waiter = self._waiting.get(exc.request_id) if exc.request_id is not None else None
            if waiter is None:
                log.warning("ignoring an undecodable frame from the coordinator: %s", exc.message)
                return
            waiter.error = ResponseUndecodable(exc.message)
            waiter.done.set()
            return
        request_id = getattr(message, "request_id", None)
        if request_id is None:
            try:
                self._push_sender.send_nowait(message)
            except trio.WouldBlock:
                log.warning("push buffer full; dropping %s", message.TYPE)
            except trio.ClosedResourceError:
                pass
            return
        waiter = self._waiting.get(request_id)
        if waiter is None:
            return  # the requester was cancelled; nobody wants this answer any more
        waiter.response = message
        waiter.done.set()

    def _close(self, reason: str) -> None:
        if self._closed_because is not None:
            return
        self._closed_because = reason
        for waiter in self._waiting.values():
            if not waiter.done.is_set():
                waiter.error = SessionClosed(reason)
                waiter.done.set()
        self._push_sender.close()


def session_url(url: str, endpoint: Literal["member", "admin"]) -> str:
    """The websocket URL of an endpoint of the coordinator at `url` (ws://host:port)."""
    return f"{url.rstrip('/')}/v1/{endpoint}"


@asynccontextmanager
async def open_session(
    url: str,
    endpoint: Literal["member", "admin"],
    *,
    token: str | None = None,
    connect_timeout: float = 10.0,
) -> AsyncIterator[Session]:
    """Connect to the coordinator at `url` (ws://host:port) and yield a `Session`.

    Sends `Authorization: Bearer <token>` when `token` is given. A refused or
    failed handshake raises SessionClosed naming the reason (HTTP status).
    """
    headers = [(b"Authorization", f"Bearer {token}".encode())] if token else None
    connected = False
    try:
        async with open_websocket_url(
            session_url(url, endpoint),
            extra_headers=headers,
            message_queue_size=64,
            connect_timeout=connect_timeout,
            disconnect_timeout=2.0,
        ) as websocket:
            connected = True
            session = Session(websocket)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(session.receive_loop)
                try:
                    yield session
                finally:
                    session._close("session closed")
                    nursery.cancel_scope.cancel()
    except ConnectionRejected as exc:
        if connected:
            raise
        raise SessionClosed(
            f"{session_url(url, endpoint)} refused the session: HTTP {exc.status_code}"
        ) from exc
    except (HandshakeError, OSError) as exc:
        if connected:
            raise
        raise SessionClosed(f"cannot connect to {session_url(url, endpoint)}: {exc!r}") from exc
    except BaseExceptionGroup as group:
        leaf = _single(group)
        if leaf is group:
            raise
        context = leaf.__context__
        try:
            raise leaf
        finally:
            leaf.__context__ = context


def _single(group: BaseExceptionGroup) -> BaseException:
    """The exception a tiny session nursery wraps: the body's own, not the group."""
    leaves: list[BaseException] = []

    def collect(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                collect(inner)
        else:
            leaves.append(exc)

    collect(group)
    real = [exc for exc in leaves if not isinstance(exc, trio.Cancelled)]
    if len(real) == 1:
        return real[0]
    return leaves[0] if not real else group
