"""The websocket server: `/v1/member` and `/v1/admin` on one port, handing requests to the router.

Each session is one task that reads (actors/net/ws_server.py), decodes and routes;
responses go out in request order (a FIFO of reply slots) with pushes in
between, written by whichever task resolved them. Bad input gets an `error`
frame naming the field and touches no state (Transport, docs/protocol.md).

At the handshake: unknown path 404; then actors/core/handshake_gate.py decides (B1, B5): 429
for a throttled address without a valid token, 403 for a browser's Origin not in
`--allowed-origins`, 401 without exactly one `Authorization: Bearer` header (scheme in
any case) with the endpoint's token; each refusal is counted
(`rsc_auth_failures_total{endpoint,reason}`) and logged (`auth.refused`, never the
token); past `--max-sessions` 503 (A1).
A frame over `--max-frame-bytes` in UTF-8 bytes closes the session with 1009.

C1 roles: `/v1/admin` takes the admin token (every request) or the viewer token (reads
only: a change is answered NOT_AUTHORIZED); `admin_role` is the one place that decides.
C3: every change, and every refused request or handshake on `/v1/admin`, is appended to
the audit log (actors/admin/audit.py) before its answer goes out.
"""

from __future__ import annotations

import collections
import functools
import logging
import time
from collections.abc import Callable
from typing import cast

import attrs
import trio

from rsc.actors.admin import audit
from rsc.actors.admin.dead_letter_admin import DeadLetterAdmin
from rsc.actors.admin.format_admin import FormatVersionAdmin
from rsc.actors.admin.message_admin import MessageAdmin
from rsc.actors.core.group import malformed_join
from rsc.actors.core.handshake_gate import HandshakeGate, Refusal, RefusalTable, authorized
from rsc.actors.core.prefix_admission import REFUSALS
from rsc.actors.core.subscriptions import Admit, Holdings, routing_refused, watch_refused
from rsc.actors.logs import log_event
from rsc.actors.net.admission import Admission
from rsc.actors.net.turns import Turns
from rsc.actors.net.ws_server import ServerConnection
from rsc.actors.ops import latency
from rsc.actors.ports import AuthMetrics, SessionMetrics
from rsc.actors.router import Router, unavailable_response
from rsc.protocol import messages as m
from rsc.protocol.codec import ADMIN_REQUESTS, MEMBER_REQUESTS, decode, encode
from rsc.protocol.errors import ProtocolError, Status

log = logging.getLogger("rsc.coordinator")

ENDPOINTS = {"/v1/member": MEMBER_REQUESTS, "/v1/admin": ADMIN_REQUESTS}
MAX_IN_FLIGHT = 256  # per session: requests awaiting their response


@attrs.define(eq=False, slots=True)
class Reply:
    """A response slot of a session: the session writes responses in request order as they
    resolve. Every response a session gets goes through `resolve`, so A1's refusals are
    counted here, in one place (`rsc_joins_refused_total`)."""

    owner: Session
    message: m.Message | None = None
    is_push: bool = False
    received: float = 0.0  # perf_counter when its request arrived (0: a push)

    @property
    def resolved(self) -> bool:
        return self.message is not None

    def resolve(self, message: m.Response) -> None:
        self.message = message
        refused = REFUSALS.get(message.status)
        if refused is not None:
            self.owner.refused(refused)
        self.owner.wake()


class Collect:
    """A reply slot for a request from inside the coordinator (or a test): awaited, not sent."""

    def __init__(self) -> None:
        self.message: m.Response | None = None
        self.done = trio.Event()

    @property
    def resolved(self) -> bool:
        return self.done.is_set()

    def resolve(self, message: m.Response) -> None:
        self.message = message
        self.done.set()

    async def wait(self) -> m.Response:
        await self.done.wait()
        assert self.message is not None
        return self.message


class Session:
    """One websocket connection: replies go out in request order, pushes in between.

    No task of its own waits on it: whenever the head of its queue is ready, it
    is written in place, in the task that resolved it (actors/net/ws_server.py: a
    frame the kernel takes whole costs no task and no await). While the
    connection still has bytes queued, replies wait here, and a request's slot
    is given back only once its reply has been handed over, so a client that
    does not read holds at most MAX_IN_FLIGHT replies.

    Once closed, the session waits until every request it handed to an actor
    is answered (the actor may still track it while handling them) and then
    calls its `on_idle` callback exactly once: the router forgets it then,
    after the last actor that could register it is done with it.
    """

    def __init__(self, connection: ServerConnection,
                 metrics: SessionMetrics | None = None) -> None:
        self.connection = connection
        self.metrics = metrics
        self.queue: collections.deque[Reply] = collections.deque()
        self.room = trio.Semaphore(MAX_IN_FLIGHT)  # requests awaiting their response
        self.closed = False
        self._on_idle: Callable[[], None] | None = None
        self.holdings = Holdings()  # B4: its watches and routing subscriptions
        # B4: the queued, unwritten push of each watched group; a newer description replaces it
        self._queued_descriptions: dict[tuple[str, str], Reply] = {}
        connection.when_written(self.wake)

    async def expect(self) -> Reply:
        """The slot of the next request's response (waits while MAX_IN_FLIGHT are pending)."""
        room = self.room
        if room.value:
            room.acquire_nowait()  # the read that brought the request was the checkpoint
        else:
            await room.acquire()
        reply = Reply(self)
        self.queue.append(reply)
        return reply

    def push(self, message: m.Message) -> None:
        """Queue a push; dropped when the session is backed up or gone (pushes are only hints).
        B4: a group description replaces the one of its group still queued (the latest wins),
        so one watched group holds at most one place in the queue."""
        if self.closed:
            return
        key = _described_group(message)
        if key is not None:
            queued = self._queued_descriptions.get(key)
            if queued is not None:
                queued.message = message
                return
        if len(self.queue) >= 2 * MAX_IN_FLIGHT:
            return
        reply = Reply(self, message, is_push=True)
        if key is not None:
            self._queued_descriptions[key] = reply
        self.queue.append(reply)
        self.wake()

    def refused(self, limit: str) -> None:
        """A1: a request of this session was refused by a cap."""
        if self.metrics is not None:
            self.metrics.join_refused(limit)

    def wake(self) -> None:
        """Write every ready reply at the head of the queue, unless the connection is busy."""
        if self.closed:
            self._forget_if_idle()
            return
        queue, connection = self.queue, self.connection
        try:
            while queue and not connection.writing:
                reply = queue[0]
                message = reply.message
                if message is None:
                    return
                queue.popleft()
                if not reply.is_push:
                    self.room.release()
                elif self._queued_descriptions:
                    key = _described_group(message)
                    if key is not None and self._queued_descriptions.get(key) is reply:
                        del self._queued_descriptions[key]
                connection.send_text(encode(message))
                if reply.received:
                    latency.requests.observe(time.perf_counter() - reply.received)
        except Exception as exc:  # noqa: BLE001 - one session's failure never ends an actor
            log_event(log, "session.failed", level=logging.WARNING, error=f"{type(exc).__name__}: {exc}")
            connection.start_close(1011, "the coordinator failed to encode a response")
        if connection.broken:
            self.closed = True

    def close(self, on_idle: Callable[[], None]) -> None:
        """The connection is gone: call `on_idle` once no request of it is still being handled."""
        self.closed = True
        self._on_idle = on_idle
        self._forget_if_idle()

    def _forget_if_idle(self) -> None:
        if self._on_idle is None or any(reply.message is None for reply in self.queue):
            return
        on_idle, self._on_idle = self._on_idle, None
        self.queue.clear()
        # the connection's hook was its one reference back: without it a closed session and
        # its connection are freed as soon as they are dropped, not by a full collection
        self.connection.when_written(None)
        on_idle()


def _described_group(message: m.Message) -> tuple[str, str] | None:
    """The (prefix, group) of a watch's push; None for any other message."""
    if isinstance(message, m.GroupDescription) and message.request_id is None:
        return message.stream_prefix, message.consumer_group
    return None


class CoordinatorServer:
    """Accepts sessions (A1 admission, auth, frame limit) and dispatches their requests."""

    def __init__(self, router: Router, nursery: trio.Nursery, *, admin_token: str | None,
                 member_token: str | None, admission: Admission | None = None,
                 metrics: SessionMetrics | None = None,
                 max_frame_bytes: int = 1 << 20, handshake_timeout_s: float = 10.0,
                 format_admin: FormatVersionAdmin | None = None,
                 allowed_origins: tuple[str, ...] = (), throttle_loopback: bool = False,
                 auth_metrics: AuthMetrics | None = None,
                 dead_letters: DeadLetterAdmin | None = None,
                 viewer_token: str | None = None, audit_log: audit.AuditLog | None = None) -> None:
        if viewer_token is not None and admin_token is None:
            raise ValueError("--viewer-token needs --admin-token: a viewer token alone would "
                             "leave every change open")
        self.router = router
        self.viewer_token = viewer_token
        self.audit_log = audit_log
        self.format_admin = format_admin  # the store-wide format version requests
        self.dead_letters = dead_letters  # P3: a group's dead letters, read and sent back
        self.messages: MessageAdmin | None = None  # C2: a shard's messages, pending entries
        self.handshake_timeout_s = handshake_timeout_s
        self.nursery = nursery
        self.admin_token = admin_token
        self.gate = HandshakeGate(tokens={"/v1/admin": admin_token, "/v1/member": member_token},
                                  more_tokens={"/v1/admin": (viewer_token,)} if viewer_token else {},
                                  allowed_origins=frozenset(allowed_origins),
                                  table=RefusalTable(exempt_loopback=not throttle_loopback))
        self.auth_metrics = auth_metrics
        self.admission = admission or Admission(max_sessions=1 << 30, max_connections=1 << 30)
        self.max_frame_bytes = max_frame_bytes
        self.metrics = metrics
        self.turns = Turns()  # fair turns to read requests while saturated (one busy group)
        nursery.start_soon(self.turns.run)

    @property
    def sessions(self) -> int:
        return self.admission.sessions

    async def serve(self, stream: trio.abc.Stream) -> None:
        """One accepted connection, from its handshake to its close."""
        address = peer_address(stream)
        connection = ServerConnection(stream, self.nursery, max_message_bytes=self.max_frame_bytes,
                                      turns=self.turns)
        try:
            request = await connection.handshake(self.handshake_timeout_s)
            if request is not None:
                await self.handle(connection, request.target, request.extra_headers, address,
                                  peer=peer_host_port(stream))
        except trio.Cancelled:
            connection.start_close(1001, "the coordinator is stopping")  # written in place, if at all
            raise
        except Exception as exc:  # noqa: BLE001 - one peer never ends the process (A1)
            log_event(log, "session.failed", level=logging.WARNING, error=f"{type(exc).__name__}: {exc}")
            connection.start_close(1011, "the coordinator failed to serve this session")
        finally:
            await connection.aclose()

    async def handle(self, connection: ServerConnection, target: str,
                     headers: list[tuple[bytes, bytes]], address: str = "", *,
                     peer: str = "unknown") -> None:
        path = target.split("?", 1)[0]
        allowed = ENDPOINTS.get(path)
        if allowed is None:
            await connection.reject(404, f"unknown endpoint {path}; use /v1/member or /v1/admin".encode())
            return
        refusal = self.gate.check(path, headers, address, trio.current_time())
        client: audit.Client | None = None
        if path == "/v1/admin":  # C1, C3: the session's role, and whom the audit log names
            role = admin_role(headers, self.admin_token, self.viewer_token)
            vouched = console_client(headers, peer)
            client = audit.Client(peer=vouched or peer, role=role or "none",
                                  via="console" if vouched else None)
            if refusal is not None and refusal.status == 401:
                await self._audit(audit.refused_handshake(client, "no or a wrong token",
                                                          time_ms=audit.now_ms()))
        if refusal is not None:
            self._report(refusal, path)
            await connection.reject(refusal.status, refusal.body, headers=refusal.headers)
            return
        if not self.admission.open_session():
            await connection.reject(503, f"the coordinator holds its limit of "
                                         f"{self.admission.max_sessions} sessions; retry later".encode())
            return
        session = Session(connection, self.metrics)
        try:
            await connection.accept()
            await self._read(session, allowed, client)
        finally:
            self.admission.close_session()
            session.close(functools.partial(self.router.forget, session))

    def _report(self, refusal: Refusal, path: str) -> None:
        """B5: count every refusal; log the line the gate gave (never the token)."""
        if self.auth_metrics is not None:
            self.auth_metrics.auth_failed(path, refusal.reason.value)
        line = refusal.log
        if line is not None:
            extra: dict[str, object] = {}
            if line.repeats:
                extra["repeats"] = line.repeats  # refusals from this address not logged since
            if line.throttled:
                extra["throttled_s"] = round(self.gate.table.throttle_s)
            log_event(log, "auth.refused", level=logging.WARNING, address=line.address,
                      endpoint=line.endpoint, reason=line.reason.value, status=refusal.status,
                      **extra)

    async def _read(self, session: Session, allowed: frozenset[str],
                    client: audit.Client | None = None) -> None:
        connection = session.connection
        text: str | bytes | None = None
        message: m.Request | None = None
        reply: Reply | None = None
        while True:
            # nothing of the last request stays referenced by this frame while it waits
            text = message = reply = None
            text = await connection.receive_message()
            if text is None:
                return  # closed by either side (a frame over the limit: 1009) or lost
            received = time.perf_counter()
            reply = await session.expect()
            reply.received = received
            try:
                message = cast(m.Request, decode(text, allowed))  # `allowed` holds requests only
                _check_before_lookup(message)
                connection.turn_key = getattr(message, "stream_prefix", connection.turn_key)
            except ProtocolError as exc:
                reply.resolve(m.ErrorResponse(request_id=exc.request_id,
                                              status=Status.INVALID_REQUEST, error=exc.message))
                continue
            if client is not None and (isinstance(message, audit.ADMIN_ONLY)
                                       or client.role == "viewer"):
                self.nursery.start_soon(self._answer_audited, message, reply, session, client)
                continue
            try:
                await self._dispatch(message, reply, session)
            except Exception as exc:  # noqa: BLE001 - a bug met by one request ends only that request
                log_event(log, "request.failed", level=logging.ERROR, type=message.TYPE,
                          error=f"{type(exc).__name__}: {exc}")
                if reply.message is None:
                    reply.resolve(unavailable_response(message, "the coordinator failed to handle "
                                                                "this request; retry with backoff"))

    async def _answer_audited(self, message: m.Request, reply: Reply, session: Session,
                              client: audit.Client) -> None:
        """C1, C3: a change (or any request of a viewer): refused for a viewer, else handled;
        either way appended to the audit log when it must be, then answered."""
        response: m.Response
        try:
            if client.role == "viewer" and isinstance(message, audit.CHANGING):
                response = message.error(Status.NOT_AUTHORIZED,
                                         f"{message.TYPE} needs the admin token; the viewer "
                                         f"token reads only")
                before = None
            elif client.role != "admin" and isinstance(message, audit.READS_CONTENTS):
                response = message.error(Status.NOT_AUTHORIZED,
                                         f"{message.TYPE} shows message contents: it needs the "
                                         f"admin token (a coordinator without --admin-token "
                                         f"shows none)")
                before = None
            else:
                before = await self._before(message)
                collect = Collect()
                await self._dispatch(message, collect, session)
                response = await collect.wait()
            if audit.audited(message, response):
                await self._audit(audit.entry(client, message, response, time_ms=audit.now_ms(),
                                              before=before))
        except Exception as exc:  # noqa: BLE001 - a bug met by one request ends only that request
            log_event(log, "request.failed", level=logging.ERROR, type=message.TYPE,
                      error=f"{type(exc).__name__}: {exc}")
            response = unavailable_response(message, "the coordinator failed to handle this "
                                                     "request; retry with backoff")
        reply.resolve(response)

    async def _before(self, message: m.Request) -> dict[str, object] | None:
        """C3: what a reshard, a reset or a deletion is about to change, as the router says."""
        if not isinstance(message, audit.WITH_BEFORE):
            return None
        description = routing = None
        if isinstance(message, m.SetShardCount):
            routing = await self._ask(m.GetRouting(request_id=0, stream_prefix=message.stream_prefix))
        else:
            description = await self._ask(m.DescribeGroup(
                request_id=0, stream_prefix=message.stream_prefix,
                consumer_group=message.consumer_group))
        return audit.before_of(message, description, routing)

    async def _ask(self, request: m.Request) -> m.Response:
        collect = Collect()
        await self.router.route(request, collect, None)
        return await collect.wait()

    async def _audit(self, body: dict[str, object]) -> None:
        if self.audit_log is not None:
            await self.audit_log.append(body)

    async def _dispatch(self, message: m.Request, reply: Reply | Collect,
                        session: Session | None) -> None:
        if isinstance(message, m.ReadAudit):
            reply.resolve(await self._read_audit(message))
            return
        if isinstance(message, m.ListGroups):
            reply.resolve(m.Groups(request_id=message.request_id, status=Status.OK,
                                   groups=await self.router.list_groups()))
            return
        if isinstance(message, m.GetFormatVersion | m.SetFormatVersion):
            reply.resolve(await self.format_admin.answer(message) if self.format_admin is not None
                          else unavailable_response(message, "no store to ask"))
            return
        if isinstance(message, m.ReadShard | m.FindKey | m.ListPending):
            reply.resolve(await self.messages.answer(message) if self.messages is not None
                          else unavailable_response(message, "no Redis to read messages from"))
            return
        if isinstance(message, m.ListDeadLetters | m.RedriveDeadLetters) or (
                isinstance(message, m.SetRetention) and message.dead_letters_of is not None):
            reply.resolve(await self.dead_letters.answer(message) if self.dead_letters is not None
                          else unavailable_response(message, "no Redis to read dead letters from"))
            return
        if session is not None:
            refusal = _over_the_cap(message, session.holdings)  # B4
            if refusal is not None:
                reply.resolve(refusal)
                return
        await self.router.route(message, reply, session)

    async def ask(self, request: m.Request) -> m.Response:
        """A request from inside the coordinator, answered as a session's would be."""
        collect = Collect()
        await self.router.route(request, collect, None)
        return await collect.wait()

    async def _read_audit(self, message: m.ReadAudit) -> m.Response:
        if self.audit_log is None:
            return message.error(Status.COORDINATOR_NOT_AVAILABLE, "no store to read the audit from")
        try:
            found = await self.audit_log.read(message.count, message.before_id)
        except Exception as exc:  # noqa: BLE001 - Redis failed or was too slow: say so
            return message.error(Status.COORDINATOR_NOT_AVAILABLE,
                                 f"cannot read the audit log: {type(exc).__name__}: {exc}")
        return m.AuditEntries(request_id=message.request_id, status=Status.OK,
                              entries=audit.entries_of(found))


def peer_address(stream: trio.abc.Stream) -> str:
    """The peer's IP address of an accepted connection (TLS or not); "" when it has none."""
    inner = getattr(stream, "transport", stream)  # rsc.common.tls.TlsStream: the socket's stream
    sock = getattr(inner, "socket", None)
    if sock is None:
        return ""
    try:
        peer = sock.getpeername()
    except OSError:
        return ""
    return str(peer[0]) if isinstance(peer, tuple) else ""


def _over_the_cap(message: m.Request, holdings: Holdings) -> m.Response | None:
    """B4: the refusal of a subscription past the session's cap, before anything is looked up
    (a watch is counted when it starts, actors/delivery.py; this spares the work)."""
    if isinstance(message, m.GetRouting) and message.subscribe:
        if holdings.admit_routing(message.stream_prefix) is Admit.REFUSED:
            return routing_refused(message, holdings.max_routing)
    elif isinstance(message, m.DescribeGroup) and message.watch:
        if holdings.over_watch_cap(message.stream_prefix, message.consumer_group):
            return watch_refused(message, holdings.max_watches)
    return None


CONSOLE_CLIENT_HEADER = b"rsc-console-client"
"""C3: the browser's address, sent by the console (which dials the coordinator on loopback)."""


def admin_role(headers: list[tuple[bytes, bytes]], admin_token: str | None,
               viewer_token: str | None) -> str | None:
    """C1: the role an `/v1/admin` handshake gets: `admin` (the admin token), `viewer` (the
    viewer token: reads only), `open` (no admin token configured: everyone is admin, as
    before roles), or None (refused: no token, a wrong one, or more than one header)."""
    if admin_token is None:
        return "open"
    if authorized(headers, admin_token):
        return "admin"
    if viewer_token is not None and authorized(headers, viewer_token):
        return "viewer"
    return None


def console_client(headers: list[tuple[bytes, bytes]], peer: str) -> str | None:
    """C3: the browser's address the console vouches for; only believed from a loopback peer
    (the console runs in the coordinator's process and dials it on loopback)."""
    values = [value for name, value in headers if name.lower() == CONSOLE_CLIENT_HEADER]
    if len(values) != 1 or not _loopback(peer):
        return None
    text = values[0].decode("ascii", "replace").strip()
    return text[:100] or None


def _loopback(peer: str) -> bool:
    host = peer[1:peer.index("]")] if peer.startswith("[") else peer.rsplit(":", 1)[0]
    return host == "::1" or host.startswith(("127.", "::ffff:127."))


def peer_host_port(stream: object) -> str:
    """`host:port` of the peer of an accepted stream (through its wrappers), or "unknown"."""
    for _ in range(4):
        sock = getattr(stream, "socket", None)
        if sock is not None:
            try:
                address = sock.getpeername()
            except OSError:
                return "unknown"
            host, port = address[0], address[1]
            return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        stream = getattr(stream, "transport", None) or getattr(stream, "_stream", None)
        if stream is None:
            break
    return "unknown"



def _check_before_lookup(message: m.Request) -> None:
    """Malformed requests that decode: INVALID_REQUEST typed `error`, before anything is looked up."""
    if isinstance(message, m.Heartbeat):
        invalid = malformed_join(message)
        if invalid is not None:
            raise ProtocolError(invalid, message.request_id)
