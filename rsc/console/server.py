"""The console's I/O shell: an HTTP listener and the live feed, on the caller's trio loop.

`serve_console(coordinator_url, host, port)` listens on host:port (0 picks a
free port; `task_status.started(port)` once listening) and serves the pages of
`rsc.console.http`. A page's websocket at `/ws` is a feed: its first message
names the view (and carries the token the operator typed); only then does the
console open an admin session to the coordinator's own `/v1/admin` endpoint
(so a wrong token is refused by the coordinator itself, HTTP 401) and follow
it: the group page with `describeGroup` and `watch: true` (the coordinator's
pushes), the overview with `listGroups` once a second (one request at a time,
never piling up) plus one watch per prefix for its migration. Frames to the
page go at most 10 a second, the latest state winning (`views.Throttle`).

Nothing runs while no page is open: one listening socket; no admin session and
no request reaches the coordinator, so the heartbeat path pays nothing.

TLS: with `https` (the coordinator's --metrics-tls) the pages are HTTPS and the feed
wss://, with the coordinator's certificate. A wss:// coordinator is dialled (on loopback)
trusting exactly its own --tls-cert (`tls.own_certificate_context`): the same process,
so no CA file is needed and no host name has to match the loopback address.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Final
from urllib.parse import urlsplit, urlunsplit

import attrs
import trio
from trio_websocket import ConnectionClosed, WebSocketConnection, wrap_server_stream

from rsc.actors.core.handshake_gate import Reason, RefusalTable
from rsc.actors.server import admin_role
from rsc.admin.client import (
    AdminClient,
    AdminConnectError,
    SessionLost,
    open_admin_client,
)
from rsc.common import tls
from rsc.common.errors import leaves, single_exception
from rsc.common.http_server import read_request_head, serve_capped
from rsc.console import views
from rsc.console.http import (
    MAX_HEAD_BYTES,
    WEBSOCKET,
    BadRequest,
    ConsoleHosts,
    Response,
    StaticFiles,
    error,
    parse_request_head,
    route,
    with_hsts,
)
from rsc.protocol.errors import ProtocolError
from rsc.protocol.messages import DescribeGroup, ListDeadLetters, ListGroups, ListPending, ReadAudit

log = logging.getLogger("rsc.console")

MAX_CONNECTIONS: Final = 64  # pages and files served at once; past it HTTP 503
HEAD_TIMEOUT_S: Final = 10.0  # as the coordinator's handshake timeout (A1)
HELLO_TIMEOUT_S: Final = 10.0
SEND_TIMEOUT_S: Final = 10.0
CONNECT_TIMEOUT_S: Final = 5.0
OVERVIEW_REFRESH_S: Final = 1.0
UNKNOWN_GROUP_RETRY_S: Final = 1.0
FEED_QUEUE: Final = 4
AUDIT_REFRESH_S: Final = 1.0
DEAD_LETTERS_REFRESH_S: Final = 2.0  # P3: a group page reads its dead letters' count again


class ConsoleError(Exception):
    """The console cannot start (its port is taken, say); the text is one line."""


def loopback_url(coordinator_url: str) -> str:
    """The coordinator's URL as the console dials it: a wildcard bind address becomes loopback."""
    parts = urlsplit(coordinator_url)
    host = parts.hostname or "127.0.0.1"
    loop = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)
    netloc = f"[{loop}]" if ":" in loop else loop
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def console_url(host: str, port: int, *, https: bool = False) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"{'https' if https else 'http'}://{shown}:{port}/"


class ReplayStream(trio.abc.Stream):
    """A socket stream whose first bytes (the request head already read) are received again,
    so the websocket handshake sees the whole request."""

    def __init__(self, stream: trio.abc.Stream, first: bytes) -> None:
        self._stream = stream
        self._first = first

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self._first:
            size = len(self._first) if max_bytes is None else max_bytes
            chunk, self._first = self._first[:size], self._first[size:]
            return chunk
        return await self._stream.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self._stream.aclose()


async def serve_console(coordinator_url: str, host: str, port: int, *, tls_cert: str | None = None,
                        tls_key: str | None = None, https: bool = False,
                        console_hosts: tuple[str, ...] = (), throttle_loopback: bool = False,
                        admin_token: str | None = None, viewer_token: str | None = None,
                        task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve the console on host:port until cancelled; it follows the coordinator at
    `coordinator_url` (ws:// or wss://) for each open page.

    `tls_cert`/`tls_key` are the coordinator's own (--tls-cert, --tls-key): a wss://
    coordinator is trusted as exactly `tls_cert` (without it: the system store and
    $RSC_CA_FILE), and with `https` the console serves HTTPS with them (and HSTS).
    `console_hosts`: names it answers to besides loopback's and `host` (B1).
    Logins (a page's token) are throttled by the browser's address as the coordinator's
    handshakes are (B5); loopback is exempt unless `throttle_loopback` (tests).
    """
    if https and not (tls_cert and tls_key):
        raise ValueError("serving the console over HTTPS needs tls_cert and tls_key")
    server_tls = tls.server_context(tls_cert, tls_key) if https and tls_cert and tls_key else None
    dial = loopback_url(coordinator_url)
    client_tls = tls.own_certificate_context(tls_cert) \
        if tls_cert and urlsplit(dial).scheme == "wss" else None
    try:
        sockets = await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        raise ConsoleError(f"cannot serve the console on {console_url(host, port, https=https)}: "
                           f"{exc.strerror or exc}") from None
    files = StaticFiles()
    files.read("index.html")  # a broken install fails here, at start, not on the first page
    console = _Console(dial, files, client_tls, hosts=ConsoleHosts.serving(host, console_hosts),
                       https=server_tls is not None,
                       logins=RefusalTable(exempt_loopback=not throttle_loopback),
                       roles=Roles(admin_token, viewer_token))
    listeners: list[trio.abc.Listener[trio.abc.Stream]] = list(sockets) if server_tls is None else [
        trio.SSLListener(socket, server_tls, https_compatible=True) for socket in sockets]
    bound_port = int(sockets[0].socket.getsockname()[1])
    slots = trio.CapacityLimiter(MAX_CONNECTIONS)  # the cap is the listeners' together
    task_status.started(bound_port)
    async with trio.open_nursery() as nursery:
        for listener in listeners:
            nursery.start_soon(functools.partial(serve_capped, listener, console.handle, bound_port,
                                                 when_full=console.refuse, slots=slots))


@attrs.frozen
class Roles:
    """C1: the coordinator's tokens, so the console knows what a page's token may do. The
    coordinator still checks every request itself (the page's token is its session's)."""

    admin_token: str | None = None
    viewer_token: str | None = None

    def role(self, token: str | None) -> str | None:
        headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
        return admin_role(headers, self.admin_token, self.viewer_token)

    def may_act(self, token: str | None) -> bool:
        """Actions (and message contents): only with an admin token configured, and given."""
        return self.admin_token is not None and self.role(token) == "admin"


class _Console:
    def __init__(self, coordinator_url: str, files: StaticFiles,
                 coordinator_tls: ssl.SSLContext | None = None, *,
                 hosts: ConsoleHosts | None = None, https: bool = False,
                 logins: RefusalTable | None = None, roles: Roles | None = None) -> None:
        self.roles = roles or Roles()
        self.coordinator_url = coordinator_url
        self.hosts = hosts or ConsoleHosts.serving("127.0.0.1")
        self.https = https
        self.logins = logins if logins is not None else RefusalTable()
        self.files = files
        self.coordinator_tls = coordinator_tls
        self.history = views.LagHistory()  # shared by the pages of this console

    async def handle(self, stream: trio.abc.Stream) -> None:
        """One connection within MAX_CONNECTIONS (`serve_capped` holds the count)."""
        async with stream:
            try:
                await self._serve(stream, browser_address(stream))
            except Exception as exc:  # noqa: BLE001 - one page never ends the coordinator (A1)
                if not went_away(exc):
                    log.warning("console connection failed: %s: %s", type(exc).__name__, exc)

    async def refuse(self, stream: trio.abc.Stream) -> None:
        """A connection past MAX_CONNECTIONS: HTTP 503, then closed."""
        async with stream:
            await self._send(stream, error(503, "too many console connections; try again"))

    async def _serve(self, stream: trio.abc.Stream, address: str) -> None:
        """One connection: its request head (over TLS, the handshake comes first, within the
        same HEAD_TIMEOUT_S), then a page, a file or the feed."""
        received = b""
        with trio.move_on_after(HEAD_TIMEOUT_S):
            received = await read_request_head(stream, MAX_HEAD_BYTES)
        if b"\r\n\r\n" not in received:
            if len(received) > MAX_HEAD_BYTES:
                await self._send(stream, error(431, "request head too large"))
            return
        head = received[:received.index(b"\r\n\r\n") + 4]
        try:
            request = parse_request_head(head)
        except BadRequest as exc:
            await self._send(stream, error(exc.status, str(exc)))
            return
        answer = route(request, self.files, self.hosts)
        if answer == WEBSOCKET:
            await self._feed(ReplayStream(stream, received), Login(self.logins, address),
                             browser_host_port(stream))
        elif isinstance(answer, Response):
            await self._send(stream, answer)

    async def _send(self, stream: trio.abc.Stream, response: Response) -> None:
        await _send(stream, with_hsts(response) if self.https else response)

    async def _feed(self, stream: ReplayStream, login: Login, browser: str) -> None:
        async with trio.open_nursery() as nursery:
            request = await wrap_server_stream(nursery, stream, message_queue_size=FEED_QUEUE,
                                               max_message_size=views.MAX_HELLO_BYTES)
            websocket = await request.accept()
            try:
                await Feed(websocket, self.coordinator_url, self.coordinator_tls,
                           history=self.history, login=login, browser=browser,
                           roles=self.roles).run()
            finally:
                with trio.move_on_after(2.0):
                    await websocket.aclose()
                nursery.cancel_scope.cancel()


def browser_host_port(stream: object) -> str:
    """`host:port` of the browser at the other end of an accepted stream (plain or TLS)."""
    for _ in range(3):
        sock = getattr(stream, "socket", None)
        if sock is not None:
            try:
                host, port = sock.getpeername()[:2]
            except OSError:
                break
            return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        stream = getattr(stream, "transport_stream", None)
    return "unknown"


_GONE = (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionClosed)


def browser_address(stream: trio.abc.Stream) -> str:
    """The peer address of an accepted console connection (over HTTPS too); "" if unknown."""
    inner = stream.transport_stream if isinstance(stream, trio.SSLStream) else stream
    sock = getattr(inner, "socket", None)
    try:
        peer = sock.getpeername() if sock is not None else None
    except OSError:
        return ""
    return str(peer[0]) if isinstance(peer, tuple) else ""


class Login:
    """B5 for the console's login: a page's token the coordinator refused counts against the
    browser's address; past the limit the page is told `throttled` (a valid token still gets
    in: the coordinator decides that, as for every handshake)."""

    ENDPOINT: Final = "console"

    def __init__(self, table: RefusalTable, address: str) -> None:
        self.table = table
        self.address = address

    def refused(self) -> str:
        """A token of this page was refused: the `auth` status to answer, counted and logged."""
        now = trio.current_time()
        throttled = self.table.throttled(self.address, self.ENDPOINT, now)
        reason = Reason.THROTTLED if throttled else Reason.TOKEN_WRONG
        line = self.table.refused(self.address, self.ENDPOINT, reason, now)
        if line is not None:
            log.warning("console.login_refused address=%s reason=%s%s%s", line.address,
                        line.reason.value, f" repeats={line.repeats}" if line.repeats else "",
                        f" throttled_s={round(self.table.throttle_s)}" if line.throttled else "")
        return "throttled" if throttled else "unauthorized"


def went_away(exc: BaseException) -> bool:
    """True when `exc` (or every exception of its group) says the browser went away."""
    if isinstance(exc, BaseExceptionGroup):
        return all(isinstance(leaf, _GONE) for leaf in leaves(exc))
    return isinstance(exc, _GONE)


async def _send(stream: trio.abc.Stream, response: Response) -> None:
    """Send a whole response; a peer that does not read it within SEND_TIMEOUT_S is dropped."""
    with trio.move_on_after(SEND_TIMEOUT_S):
        try:
            await stream.send_all(response.encode())
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


class Feed:
    """One page's live feed: hello, an admin session with the page's token, then its view."""

    def __init__(self, websocket: WebSocketConnection, coordinator_url: str,
                 coordinator_tls: ssl.SSLContext | None = None, *,
                 history: views.LagHistory | None = None, login: Login | None = None,
                 browser: str | None = None, roles: Roles | None = None) -> None:
        self.websocket = websocket
        self.login = login
        self.roles = roles or Roles()
        self.browser = browser  # C3: the audit log's peer for what this page asks
        self.history = history if history is not None else views.LagHistory()
        self.coordinator_url = coordinator_url
        self.coordinator_tls = coordinator_tls
        self.throttle: views.Throttle[Mapping[str, object]] = views.Throttle()
        self.offered = trio.Event()
        self.last_offered: dict[str, Mapping[str, object]] = {}
        self.group_view: views.GroupPage | None = None  # the group page's last view
        self.group_view_at_ms = 0  # when it came (_now_ms): C4's ages in it are as old as that
        self.dead_letters: dict[str, object] | None = None  # P3: its dead letters, as last read

    async def send(self, body: Mapping[str, object]) -> None:
        await self.websocket.send_message(json.dumps(body, ensure_ascii=False, separators=(",", ":")))

    def offer(self, kind: str, body: Mapping[str, object]) -> None:
        self.throttle.offer(kind, body)
        self.offered.set()

    def offer_changed(self, kind: str, body: Mapping[str, object]) -> None:
        """Offer `body` unless it is what was offered last (a quiet overview sends nothing)."""
        if self.last_offered.get(kind) != body:
            self.last_offered[kind] = body
            self.offer(kind, body)

    async def run(self) -> None:
        text: str | bytes | None = None
        with trio.move_on_after(HELLO_TIMEOUT_S):
            text = await self.websocket.get_message()
        if text is None:
            return  # a page that never says what it wants gets nothing
        try:
            hello = views.parse_hello(text)
        except views.HelloError as exc:
            await self.send({"type": "error", "error": str(exc)})
            return
        try:
            await self._follow(hello)
        except AdminConnectError as exc:
            if views.refused_status(str(exc)) == 401:
                given = hello.token is not None
                # only a token the page sent is a login attempt; a page opened without one is asked
                status = self.login.refused() if given and self.login is not None else "unauthorized"
                await self.send({"type": "auth", "status": status, "tokenGiven": given})
            else:
                await self.send({"type": "error", "error": str(exc)})
        except SessionLost as exc:
            await self.send({"type": "error", "error": str(exc)})

    async def _follow(self, hello: views.Hello) -> None:
        """An admin session with the page's token, then the view until the page or it closes."""
        async with _admin(self.coordinator_url, hello.token, self.coordinator_tls,
                          self.browser) as admin:
            may_act = self.roles.may_act(hello.token)
            await self.send({"type": "auth", "status": "ok", "role": self.roles.role(hello.token),
                             "actions": may_act})
            follow: Callable[[AdminClient], Awaitable[None]] = \
                self.follow_overview if hello.view == "overview" else \
                self.follow_audit if hello.view == "audit" else \
                (lambda client: self.follow_messages(client, hello, may_act)) \
                if hello.view == "messages" else \
                (lambda client: self.follow_group(client, hello))
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._read_page, nursery.cancel_scope, admin, hello,
                                       may_act)
                    nursery.start_soon(self._sender)
                    if hello.view == "group":
                        nursery.start_soon(self.follow_dead_letters, admin, hello)
                    await follow(admin)
            except BaseExceptionGroup as group:
                leaf = single_exception(group)
                if leaf is group:
                    raise
                raise leaf from None

    async def _read_page(self, scope: trio.CancelScope, admin: AdminClient, hello: views.Hello,
                         may_act: bool) -> None:
        """After its hello a page sends only C1 actions (group page); reading also notices
        when it goes away. One action at a time, answered with an `actionResult`."""
        try:
            while True:
                text = await self.websocket.get_message()
                if hello.view == "messages":
                    await self.send(await self.read(admin, hello, may_act, text))
                else:
                    await self.send(await self.act(admin, hello, may_act, text))
        except ConnectionClosed:
            scope.cancel()

    async def act(self, admin: AdminClient, hello: views.Hello, may_act: bool,
                  text: str | bytes) -> dict[str, object]:
        """C1: one action of a page, through the same admin request `rsc admin` sends, on this
        page's own admin session (its token, the browser's address for the audit log)."""
        if hello.view != "group" or hello.stream_prefix is None or hello.consumer_group is None:
            return {"type": "actionResult", "status": "INVALID_REQUEST",
                    "error": "actions are sent from a group page"}
        try:
            action = views.parse_action(text, hello.stream_prefix, hello.consumer_group)
        except views.ActionError as exc:
            return {"type": "actionResult", "status": "INVALID_REQUEST", "error": str(exc)}
        result: dict[str, object] = {"type": "actionResult", "id": action.action_id,
                                     "action": action.request.TYPE, "dryRun": action.dry_run}
        if not may_act:
            return {**result, "status": "NOT_AUTHORIZED",
                    "error": "actions need the admin token (and a coordinator that has one)"}
        request, checked = views.confirmed_request(action)  # the coordinator checks with it
        if not checked:
            described = await admin.session.request(DescribeGroup(
                request_id=0, stream_prefix=hello.stream_prefix,
                consumer_group=hello.consumer_group))
            moved = views.stale_confirmation(action, described)
            if moved is not None:
                return {**result, "status": "STALE_CONFIRMATION", "error": moved}
        answer = await admin.session.request(request)
        return {**result, "status": answer.get("status"), "error": answer.get("error"),
                "answer": answer}

    async def read(self, admin: AdminClient, hello: views.Hello, may_act: bool,
                   text: str | bytes) -> dict[str, object]:
        """C2: one read of a messages page (a shard's page, a key's entries, pending entries),
        on the page's own admin session; contents only with the admin token."""
        assert hello.stream_prefix is not None and hello.consumer_group is not None
        try:
            read = views.parse_read(text, hello.stream_prefix, hello.consumer_group)
        except views.ActionError as exc:
            return {"type": "readResult", "status": "INVALID_REQUEST", "error": str(exc)}
        result: dict[str, object] = {"type": "readResult", "id": read.read_id,
                                     "request": read.request.TYPE}
        if not may_act and not isinstance(read.request, ListPending):
            return {**result, "status": "NOT_AUTHORIZED",
                    "error": "message contents need the admin token (and a coordinator that "
                             "has one)"}
        answer = await admin.session.request(read.request)
        return {**result, "status": answer.get("status"), "error": answer.get("error"),
                "answer": answer}

    async def follow_messages(self, admin: AdminClient, hello: views.Hello,
                              may_act: bool) -> None:
        """C2: the group's shards once (the page asks for pages itself), then nothing."""
        assert hello.stream_prefix is not None and hello.consumer_group is not None
        described = await admin.session.request(DescribeGroup(
            request_id=0, stream_prefix=hello.stream_prefix, consumer_group=hello.consumer_group))
        found = described.get("shards")
        shards = [item.get("shard") for item in found if isinstance(item, dict)] \
            if isinstance(found, list) else []
        self.offer("messages", {"type": "messages", "status": described.get("status"),
                                "error": described.get("error"), "contents": may_act,
                                "shards": [shard for shard in shards if isinstance(shard, str)]})
        await trio.sleep_forever()

    async def _sender(self) -> None:
        while True:
            await self.offered.wait()
            self.offered = trio.Event()
            wait_ms = self.throttle.wait_ms(_now_ms())
            if wait_ms:
                await trio.sleep(wait_ms / 1000)
            for body in self.throttle.take(_now_ms()):
                await self.send(body)

    async def follow_overview(self, admin: AdminClient) -> None:
        """listGroups every OVERVIEW_REFRESH_S (the next only after the last answered) and one
        describe watch per prefix for its migration, pushed as it changes."""
        migrations: dict[str, object] = {}
        watched: dict[str, str] = {}
        while True:
            answer = await _checked(admin, ListGroups(request_id=0))
            listed = answer.get("groups")
            groups = [entry for entry in listed if isinstance(entry, dict)] \
                if isinstance(listed, list) else []
            wanted = views.prefixes_to_watch(groups, watched)
            for prefix, group in list(wanted.items()):
                if watched.get(prefix) != group:
                    described = await admin.session.request(
                        _watch_request(prefix, group))
                    if described.get("status") != "OK":
                        del wanted[prefix]  # gone since the listing: the next one picks again
                        continue
                    migrations[prefix] = described.get("migration")
            watched = wanted
            self.offer_changed("overview", {"type": "overview",
                                            **views.overview(groups, migrations, watched)})
            with trio.move_on_after(OVERVIEW_REFRESH_S):
                while True:
                    push = await _next_push(admin)
                    pushed = push.get("streamPrefix")
                    if push.get("type") != "groupDescription" or not isinstance(pushed, str) \
                            or watched.get(pushed) != push.get("consumerGroup"):
                        continue
                    if push.get("status") != "OK":
                        watched.pop(pushed, None)  # deleted: the next listing picks another group
                        continue
                    migrations[pushed] = push.get("migration")
                    self.offer_changed("overview", {"type": "overview",
                                                    **views.overview(groups, migrations, watched)})

    async def follow_audit(self, admin: AdminClient) -> None:
        """C3: the newest audit entries, read again every AUDIT_REFRESH_S (one at a time)."""
        while True:
            answer = await admin.session.request(
                ReadAudit(request_id=0, count=views.AUDIT_PAGE_ENTRIES))
            _raise_unless_ok(answer)
            found = answer.get("entries")
            entries = [entry for entry in found if isinstance(entry, dict)] \
                if isinstance(found, list) else []
            self.offer_changed("audit", {"type": "audit", "rows": views.audit_rows(entries)})
            await trio.sleep(AUDIT_REFRESH_S)

    async def follow_dead_letters(self, admin: AdminClient, hello: views.Hello) -> None:
        """P3, C1: the group's dead letters (count, stream, errors, retention; no contents),
        read again every DEAD_LETTERS_REFRESH_S and sent with the group's view (its frame's
        `deadLetters`) when they changed."""
        assert hello.stream_prefix is not None and hello.consumer_group is not None
        while True:
            answer = await admin.session.request(ListDeadLetters(
                request_id=0, stream_prefix=hello.stream_prefix,
                consumer_group=hello.consumer_group, count=1))
            summary = views.dead_letters_summary(answer)
            if summary != self.dead_letters:
                self.dead_letters = summary
                if self.group_view is not None:  # else it goes with the first view
                    self._offer_group(self.group_view)
            await trio.sleep(DEAD_LETTERS_REFRESH_S)

    async def follow_group(self, admin: AdminClient, hello: views.Hello) -> None:
        """describeGroup with watch; each push is the page's next state. An unknown (or deleted)
        group is said so and asked for again every UNKNOWN_GROUP_RETRY_S."""
        assert hello.stream_prefix is not None and hello.consumer_group is not None
        prefix, group = hello.stream_prefix, hello.consumer_group
        key = (prefix, group)
        history, first = self.history, True
        history.follow(key)
        try:
            while True:
                described = await admin.session.request(_watch_request(prefix, group))
                if described.get("status") == "UNKNOWN_GROUP":
                    self.offer("group", _unknown(prefix, group))
                    await trio.sleep(UNKNOWN_GROUP_RETRY_S)
                    continue
                _raise_unless_ok(described)
                view = _group_page(described)
                earlier = history.points(key, _wall_ms()) if first else []
                first = False
                self._offer_view(key, view)
                if earlier:  # what other pages (or this one, before a reload) saw of it
                    self.offer("history", {"type": "history", "points": earlier})
                while True:
                    push = await _next_push(admin)
                    if push.get("type") != "groupDescription" or push.get("streamPrefix") != prefix \
                            or push.get("consumerGroup") != group:
                        continue
                    if push.get("status") != "OK":
                        self.offer("group", _unknown(prefix, group))
                        break  # the watch is over (G1: deleted); wait for the group to come back
                    self._offer_view(key, _group_page(push))
        finally:
            history.unfollow(key, _wall_ms())

    def _offer_view(self, key: tuple[str, str], view: views.GroupPage) -> None:
        self.history.record(key, _wall_ms(), view["lag"], view["pending"],
                            view["oldestUndeliveredAgeMs"], view["oldestPendingEntryAgeMs"])
        self.group_view_at_ms = _now_ms()
        self._offer_group(view)

    def _offer_group(self, view: views.GroupPage) -> None:
        """The group's frame; `viewMsAgo` is how long ago the view came (0 but when it is sent
        again with new dead letters), so the page knows how much older its ages are by now."""
        self.group_view = view
        self.offer("group", {"type": "group", "status": "OK", "view": view,
                             "viewMsAgo": max(0, _now_ms() - self.group_view_at_ms),
                             "deadLetters": self.dead_letters})


def _group_page(answer: Mapping[str, object]) -> views.GroupPage:
    """The group page of a describeGroup answer or push. One that does not decode (the console
    and its coordinator are one release: a bug) ends the page's session, saying why."""
    try:
        return views.group_view(answer)
    except ProtocolError as exc:
        raise SessionLost(f"the coordinator's groupDescription does not decode: {exc.message}") \
            from None


def _unknown(prefix: str, group: str) -> dict[str, object]:
    return {"type": "group", "status": "UNKNOWN_GROUP", "streamPrefix": prefix,
            "consumerGroup": group}


def _now_ms() -> int:
    return math.floor(trio.current_time() * 1000)


def _wall_ms() -> int:
    """The history's clock: wall time, as the page's `Date.now()` reads it."""
    return math.floor(time.time() * 1000)


class _AdminRefused(SessionLost):
    """An admin request the coordinator answered with an error status."""


def _raise_unless_ok(answer: Mapping[str, object]) -> None:
    if answer.get("status") != "OK":
        raise _AdminRefused(f"{answer.get('status')}: {answer.get('error') or ''}".rstrip(": "))


def _watch_request(prefix: str, group: str) -> DescribeGroup:
    return DescribeGroup(request_id=0, stream_prefix=prefix, consumer_group=group, watch=True)


async def _checked(admin: AdminClient, request: ListGroups) -> dict[str, object]:
    answer = await admin.session.request(request)
    _raise_unless_ok(answer)
    return answer


async def _next_push(admin: AdminClient) -> dict[str, object]:
    try:
        return await admin.pushes.receive()
    except trio.EndOfChannel:
        raise SessionLost(f"the coordinator at {admin.url} closed the session") from None


def _admin(url: str, token: str | None, context: ssl.SSLContext | None,
           browser: str | None = None) -> AbstractAsyncContextManager[AdminClient]:
    return open_admin_client(url, token=token, connect_timeout=CONNECT_TIMEOUT_S,
                             url_source="the coordinator", ssl_context=context,
                             console_client=browser)
