"""One client session over a websocket: requests matched to their answers by requestId, and pushes.

Both client sessions (a member's or producer's, member/session.py, and the admin client's,
rsc/admin/client.py) are this class with their own reading of a frame. `request` stamps a
fresh requestId; requests may be pipelined from several tasks, each waiting for the answer
that carries its id. A frame without a requestId is a push (assignmentChanged, routing,
a watched group's state) and goes to `pushes`. When the connection is lost, pending and
later requests raise the caller's `lost` error and `pushes` ends.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Generic, TypeVar

import attrs
import trio
from trio_websocket import ConnectionClosed, WebSocketConnection

log = logging.getLogger(__name__)

PUSH_BUFFER = 1024

T = TypeVar("T")


class Undecodable(Exception):
    """A frame the session's reader cannot read; `request_id` when it still names a request."""

    def __init__(self, message: str, request_id: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.request_id = request_id


@attrs.define(eq=False)
class _Waiter(Generic[T]):
    done: trio.Event = attrs.field(factory=trio.Event)
    answer: T | None = None
    error: BaseException | None = None


class ClientSession(Generic[T]):
    """See the module text. `read(text)` gives a frame's (requestId or None, value) or raises
    Undecodable; `lost(reason)` builds the error a request gets once the session is gone;
    `undecodable(text)` the error for an answer that does not decode; `closed_reason(exc)` says
    why the connection ended (exc: the ConnectionClosed, or None when we closed it)."""

    def __init__(self, websocket: WebSocketConnection, *,
                 read: Callable[[str | bytes], tuple[int | None, T]],
                 lost: Callable[[str], Exception],
                 undecodable: Callable[[str], Exception],
                 closed_reason: Callable[[ConnectionClosed | None], str],
                 push_buffer: int = PUSH_BUFFER, warn_dropped_pushes: bool = True) -> None:
        self._websocket = websocket
        self._read = read
        self._lost = lost
        self._undecodable = undecodable
        self._closed_reason = closed_reason
        self._warn_dropped = warn_dropped_pushes
        self._request_ids = itertools.count(1)
        self._waiting: dict[int, _Waiter[T]] = {}
        self._send_lock = trio.Lock()
        self._closed_because: str | None = None
        self._push_sender, self.pushes = trio.open_memory_channel[T](push_buffer)

    @property
    def close_reason(self) -> str | None:
        """Why the session ended (None while it is open)."""
        return self._closed_because

    @property
    def closed(self) -> bool:
        """True once the connection is lost or the session was closed."""
        return self._closed_because is not None

    async def exchange(self, encode: Callable[[int], str]) -> T:
        """Send `encode(requestId)` with a fresh requestId and return the answer carrying it."""
        if self._closed_because is not None:
            raise self._lost(self._closed_because)
        request_id = next(self._request_ids)
        text = encode(request_id)
        waiter: _Waiter[T] = _Waiter()
        self._waiting[request_id] = waiter
        try:
            async with self._send_lock:
                try:
                    await self._websocket.send_message(text)
                except ConnectionClosed as exc:
                    self.close(self._closed_reason(exc))
            await waiter.done.wait()
        finally:
            self._waiting.pop(request_id, None)
        if waiter.error is not None:
            raise waiter.error
        if waiter.answer is None:
            raise self._lost(self._closed_because or "session closed")
        return waiter.answer

    async def receive_loop(self) -> None:
        """Deliver every incoming frame to its waiter or to `pushes`, until the connection ends."""
        try:
            while True:
                try:
                    text = await self._websocket.get_message()
                except ConnectionClosed as exc:
                    self.close(self._closed_reason(exc))
                    return
                self._deliver(text)
        finally:
            self.close(self._closed_reason(None))

    def _deliver(self, text: str | bytes) -> None:
        try:
            request_id, value = self._read(text)
        except Undecodable as exc:
            waiter = self._waiting.get(exc.request_id) if exc.request_id is not None else None
            if waiter is None:
                log.warning("ignoring an undecodable frame from the coordinator: %s", exc.message)
                return
            waiter.error = self._undecodable(exc.message)
            waiter.done.set()
            return
        if request_id is None:
            try:
                self._push_sender.send_nowait(value)
            except trio.WouldBlock:
                if self._warn_dropped:
                    log.warning("push buffer full; dropping a push")
            except trio.ClosedResourceError:
                pass
            return
        waiter = self._waiting.get(request_id)
        if waiter is None:
            return  # the requester was cancelled; nobody wants this answer any more
        waiter.answer = value
        waiter.done.set()

    def close(self, reason: str) -> None:
        """End the session: pending requests raise `lost(reason)`, `pushes` ends. Idempotent."""
        if self._closed_because is not None:
            return
        self._closed_because = reason
        for waiter in self._waiting.values():
            if not waiter.done.is_set():
                waiter.error = self._lost(reason)
                waiter.done.set()
        self._push_sender.close()
