"""The websocket server: `/v1/member` and `/v1/admin` on one port, routing to prefix actors.

Each session has a reader (decode, route) and a writer that sends responses in
request order (a FIFO of reply slots) with pushes in between. Bad input gets an
`error` frame naming the field and touches no state (Transport, PROTOCOL.md).
"""

from __future__ import annotations

import collections
import hmac
import logging
from collections.abc import Callable
from typing import Any

import trio
from trio_websocket import ConnectionClosed, WebSocketConnection, WebSocketRequest

from rsc.actors.actor import Collect, Envelope, PrefixActor, Reply, SummariesRequest, Tick, now_ms
from rsc.protocol import messages as m
from rsc.protocol.codec import ADMIN_REQUESTS, MEMBER_REQUESTS, decode, encode
from rsc.protocol.errors import ProtocolError, Status

log = logging.getLogger("rsc.coordinator")

ENDPOINTS = {"/v1/member": MEMBER_REQUESTS, "/v1/admin": ADMIN_REQUESTS}
MAX_IN_FLIGHT = 256  # per session: requests awaiting their response


class Session:
    """One websocket connection: replies go out in request order, pushes in between.

    No task of its own waits on it: whenever the head of its queue is ready, a
    short flush task is started in the server's nursery (one at a time per
    session), so ten thousand idle sessions cost no parked writer tasks.
    """

    def __init__(self, connection: WebSocketConnection, nursery: trio.Nursery) -> None:
        self.connection = connection
        self.nursery = nursery
        self.queue: collections.deque[Reply] = collections.deque()
        self.room = trio.Semaphore(MAX_IN_FLIGHT)  # requests awaiting their response
        self.flushing = False
        self.closed = False

    async def expect(self) -> Reply:
        """The slot of the next request's response (waits while MAX_IN_FLIGHT are pending)."""
        await self.room.acquire()
        reply = Reply(self)
        self.queue.append(reply)
        return reply

    def push(self, message: m.Message) -> None:
        """Queue a push; dropped when the session is backed up or gone (pushes are only hints)."""
        if self.closed or len(self.queue) >= 2 * MAX_IN_FLIGHT:
            return
        self.queue.append(Reply(self, message, is_push=True))
        self.wake()

    def wake(self) -> None:
        if not self.flushing and not self.closed and self.queue and self.queue[0].message is not None:
            self.flushing = True
            self.nursery.start_soon(self._flush)

    async def _flush(self) -> None:
        try:
            while self.queue and self.queue[0].message is not None:
                reply = self.queue.popleft()
                assert reply.message is not None
                if not reply.is_push:
                    self.room.release()
                await self.connection.send_message(encode(reply.message))
        except (ConnectionClosed, trio.BrokenResourceError, trio.ClosedResourceError):
            self.closed = True
        finally:
            self.flushing = False
        self.wake()  # resolved while the last send was in progress


class Router:
    """Finds (or starts) the actor of a stream prefix and forwards requests to it."""

    def __init__(self, nursery: trio.Nursery, make_actor: Callable[[str], PrefixActor]) -> None:
        self.nursery = nursery
        self.make_actor = make_actor
        self.actors: dict[str, PrefixActor] = {}

    def add(self, actor: PrefixActor) -> None:
        self.actors[actor.prefix] = actor
        self.nursery.start_soon(actor.run)

    def actor(self, prefix: str, *, create: bool) -> PrefixActor | None:
        actor = self.actors.get(prefix)
        if actor is None and create:
            actor = self.make_actor(prefix)
            self.add(actor)
        return actor

    async def tick(self) -> None:
        now = now_ms()
        for actor in list(self.actors.values()):
            await actor.send_channel.send(Envelope(Tick(now), None, None))

    def forget(self, session: Session) -> None:
        for actor in self.actors.values():
            actor.forget_session(session)


class CoordinatorServer:
    """Accepts sessions and dispatches their requests."""

    def __init__(self, router: Router, nursery: trio.Nursery, *, admin_token: str | None,
                 member_token: str | None) -> None:
        self.router = router
        self.nursery = nursery
        self.tokens = {"/v1/admin": admin_token, "/v1/member": member_token}
        self.sessions = 0

    async def handle(self, request: WebSocketRequest) -> None:
        path = request.path.split("?", 1)[0]
        allowed = ENDPOINTS.get(path)
        if allowed is None:
            await request.reject(404, body=f"unknown endpoint {path}; use /v1/member or /v1/admin".encode())
            return
        token = self.tokens[path]
        if token is not None and not _authorized(request.headers, token):
            await request.reject(401, body=b"missing or wrong bearer token")
            return
        connection = await request.accept()
        session = Session(connection, self.nursery)
        self.sessions += 1
        try:
            await self._read(session, allowed)
        finally:
            session.closed = True
            self.sessions -= 1
            self.router.forget(session)

    async def _read(self, session: Session, allowed: frozenset[str]) -> None:
        while True:
            try:
                text = await session.connection.get_message()
            except ConnectionClosed:
                return
            reply = await session.expect()
            try:
                message = decode(text, allowed)
            except ProtocolError as exc:
                reply.resolve(m.ErrorResponse(request_id=exc.request_id,
                                              status=Status.INVALID_REQUEST, error=exc.message))
                continue
            await self._dispatch(message, reply, session)

    async def _dispatch(self, message: Any, reply: Reply, session: Session) -> None:
        if isinstance(message, m.ListGroups):
            groups: list[m.GroupSummary] = []
            for prefix in sorted(self.router.actors):  # each answers after its current batch is durable
                collect = Collect()
                await self.router.actors[prefix].send_channel.send(
                    Envelope(SummariesRequest(), collect, None))  # type: ignore[arg-type]
                await collect.done.wait()
                groups.extend(collect.message)
            reply.resolve(m.Groups(request_id=message.request_id, status=Status.OK, groups=tuple(groups)))
            return
        creates = isinstance(message, (m.Heartbeat, m.GetRouting, m.SetShardCount))
        actor = self.router.actor(message.stream_prefix, create=creates)
        if actor is None:
            reply.resolve(_unknown_group(message))
            return
        await actor.send_channel.send(Envelope(message, reply, session))


def _authorized(headers: list[tuple[bytes, bytes]], token: str) -> bool:
    expected = f"Bearer {token}".encode()
    return any(name.lower() == b"authorization" and hmac.compare_digest(value, expected)
               for name, value in headers)


def _unknown_group(message: Any) -> m.Message:
    """The answer to a request naming a prefix this coordinator has never seen."""
    if isinstance(message, m.SetRetention):
        return message.unknown_stream()
    response: m.Message = message.unknown_group()
    return response
