"""The client side of a websocket to the coordinator: connect with a deadline that holds.

`connect_websocket(url, ...)` is the one way every client (a member's session, a producer's,
the admin client) opens a websocket. It runs trio-websocket's `connect_websocket_url` in a
nursery of its own under its own deadline: trio-websocket's `open_websocket_url` leaves its
connection's reader task running when its connect timeout fires, and then waits for that
reader, for ever when the peer accepted the TCP connection and answers nothing (a frozen
coordinator: the kernel completes the TCP handshake from its listen backlog). A member stuck
there never sent another heartbeat: docs/protocol.md D6.

Failures are raised as trio-websocket and the OS report them (`ConnectionRejected` for an
HTTP refusal, `HandshakeError`, `OSError`, `trio.TooSlowError` past the deadline); each
caller turns them into its own one-line message (D3).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import trio
from trio_websocket import WebSocketConnection, connect_websocket_url

from rsc.common.errors import unwrap_single

DISCONNECT_TIMEOUT_S = 2.0


@asynccontextmanager
async def connect_websocket(url: str, *, connect_timeout: float,
                            extra_headers: Sequence[tuple[bytes, bytes]] | None = None,
                            ssl_context: ssl.SSLContext | None = None,
                            message_queue_size: int = 64,
                            max_message_size: int = 1 << 20) -> AsyncIterator[WebSocketConnection]:
    """A websocket to `url`, opened within `connect_timeout` seconds (else `trio.TooSlowError`,
    with nothing left running), closed on exit (at most DISCONNECT_TIMEOUT_S)."""
    try:
        async with trio.open_nursery() as nursery:
            with trio.fail_after(connect_timeout):
                # the reader task lives in `nursery`: a failure here cancels it with the nursery
                websocket = await connect_websocket_url(
                    nursery, url, ssl_context=ssl_context,
                    extra_headers=list(extra_headers) if extra_headers else None,
                    message_queue_size=message_queue_size, max_message_size=max_message_size)
            try:
                yield websocket
            finally:
                with trio.move_on_after(DISCONNECT_TIMEOUT_S):
                    await websocket.aclose()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # the body's own exception, or (before the session) a refusal that the reader task
        # raised (HTTP 401, 404, 503), or the deadline: never a group of one
        unwrap_single(group)
