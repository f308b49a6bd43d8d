"""The operator's client of the coordinator's `/v1/admin` endpoint.

    async with open_admin_client("ws://127.0.0.1:8765", token=None) as admin:
        description = await admin.describe_group("orders", "billing")

Every method returns the response for an `OK` status and raises `AdminError`
for any other status (including the `error` response to a malformed request).
A response whose `type` the protocol classes know is decoded into its class;
any other (a newer coordinator's) stays the raw JSON object, so requests the
protocol classes do not have yet (`deleteGroup`, `setRetention`,
`resetOffsets`, `describeGroup` with `watch`) are built here as JSON objects
(`*_request` functions) and sent as they are.

A coordinator that cannot be reached or refuses the session raises
`AdminConnectError` with one line that names the URL and the likely fix (D3).
"""

from __future__ import annotations

import errno
import itertools
import json
import re
import socket
import ssl
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, TypeVar
from urllib.parse import urlsplit

import attrs
import trio
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    ConnectionTimeout,
    HandshakeError,
    WebSocketConnection,
    connect_websocket_url,
)

from rsc.common import tls
from rsc.member.session import single_exception
from rsc.protocol import (
    Cutover,
    DescribeGroup,
    GroupDescription,
    Groups,
    ListGroups,
    MaxConcurrencyChanged,
    MemberRemoved,
    Message,
    ProtocolError,
    RemoveMember,
    SetMaxConcurrency,
    SetShardCount,
    ShardCountChanged,
    Status,
    to_wire,
)
from rsc.protocol.codec import MESSAGE_TYPES, decode_object
from rsc.protocol.messages import FieldValueError, camel, check_name

__all__ = ["AdminClient", "AdminConnectError", "AdminError", "AdminSession", "CoordinatorURL",
           "Response", "SessionLost", "open_admin_client", "parse_coordinator_url"]

DEFAULT_URL = "ws://127.0.0.1:8765"
ADMIN_PATH = "/v1/admin"
PUSH_BUFFER = 256

Response = Message | dict[str, Any]
"""A decoded response, or the raw JSON object of a type the protocol classes do not know."""
ResponseT = TypeVar("ResponseT", bound=Message)


class AdminError(Exception):
    """The coordinator refused an admin request: `status` (not OK) and its `error` text."""

    def __init__(self, status: Status | str, error: str | None) -> None:
        text = str(getattr(status, "value", status))
        self.status: Status | str = Status(text) if text in Status.__members__ else text
        self.error = error or ""
        super().__init__(f"{text}: {self.error}" if self.error else text)


class AdminConnectError(Exception):
    """No admin session: bad URL, unreachable or refusing coordinator; the text is one line."""


class SessionLost(Exception):
    """The admin session closed before the answer came."""


# --- the coordinator's URL --------------------------------------------------------------

_NETLOC = re.compile(r"^(?P<host>\[[^\]]+\]|[^:/\[\]]+)(:(?P<port>[^:/]*))?$")


@attrs.frozen
class CoordinatorURL:
    """A checked coordinator address: `base` (ws://host:port as given) and its admin endpoint."""

    base: str
    endpoint: str
    host: str
    port: int


def parse_coordinator_url(url: str, source: str = "--url") -> CoordinatorURL:
    """Check `url` (ws://HOST:PORT or wss://...); AdminConnectError names what is wrong.

    `source` says where the URL came from (`--url` or `RSC_COORDINATOR_URL`). A path
    other than `/` or `/v1/admin` is kept (the coordinator then refuses it with 404).
    """
    def bad(problem: str) -> AdminConnectError:
        return AdminConnectError(f"invalid coordinator URL {url!r} (from {source}): {problem}")

    if "://" not in url:
        return_hint = f"ws://{url}" if url else DEFAULT_URL
        raise bad(f"it has no scheme; write it as {return_hint}")
    scheme, _, rest = url.partition("://")
    if scheme.lower() not in ("ws", "wss"):
        raise bad(f"the scheme is {scheme}://, the coordinator speaks WebSocket: use "
                  f"ws://{rest.split('/')[0] or '127.0.0.1:8765'}")
    parts = urlsplit(url)
    match = _NETLOC.match(parts.netloc.rpartition("@")[2])
    if not match:
        raise bad("it has no host; for example ws://127.0.0.1:8765")
    port_text = match["port"]
    default_port = 443 if scheme.lower() == "wss" else 80
    if port_text is None or port_text == "":
        port = default_port
    elif not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise bad(f"port {port_text} is not in 1..65535")
    else:
        port = int(port_text)
    if parts.query or parts.fragment:
        raise bad("it must not have a query or fragment")
    path = parts.path.rstrip("/")
    base = f"{scheme.lower()}://{parts.netloc}{path if path != ADMIN_PATH else ''}"
    endpoint = f"{scheme.lower()}://{parts.netloc}{path if path.endswith(ADMIN_PATH) else path + ADMIN_PATH}"
    return CoordinatorURL(base=base, endpoint=endpoint, host=match["host"].strip("[]"), port=port)


_HTTP_REASONS = {401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
                 503: "Service Unavailable"}


def connect_failure(coordinator: CoordinatorURL, exc: BaseException, *, token: str | None,
                    timeout: float) -> str:
    """The one line (D3) for a failed admin handshake: what happened, the URL, the likely fix."""
    if isinstance(exc, ConnectionRejected):
        status = exc.status_code
        reason = f"HTTP {status} {_HTTP_REASONS.get(status, '')}".rstrip()
        where = f"{coordinator.endpoint} refused the session: {reason}"
        if status == 401:
            if token:
                return (f"{where} (the token from --token or RSC_TOKEN is not the coordinator's "
                        "admin token)")
            return f"{where} (the coordinator needs its admin token: pass --token or set RSC_TOKEN)"
        if status == 404:
            return (f"{where} (the admin endpoint is {ADMIN_PATH}: give --url as ws://HOST:PORT, "
                    f"for example ws://{_hostport(coordinator)})")
        if status == 400:
            return f"{where} (the coordinator serves TLS on this port: use wss://{_hostport(coordinator)})"
        if status == 503:
            return (f"{where} (the coordinator is at its session limit, --max-sessions; "
                    "try again later)")
        return f"{where} (is {coordinator.base} a coordinator?)"
    cannot = f"cannot connect to {coordinator.base}"
    if isinstance(exc, ConnectionTimeout | trio.TooSlowError):
        return (f"{cannot}: no answer within {timeout:g}s (is a coordinator listening there? "
                "start it with rsc coordinator)")
    cause = _root_cause(exc.__cause__ if isinstance(exc, HandshakeError) else exc)
    if isinstance(cause, socket.gaierror):
        return f"{cannot}: unknown host {coordinator.host} (check --url or RSC_COORDINATOR_URL)"
    if isinstance(cause, ConnectionRefusedError):
        return (f"{cannot}: connection refused (is the coordinator running? "
                "start it with rsc coordinator)")
    if isinstance(cause, OSError):
        text = cause.strerror or errno.errorcode.get(cause.errno or 0, "") or str(cause)
        return f"{cannot}: {text.lower() if text else type(cause).__name__}"
    if isinstance(cause, ConnectionClosed):
        return f"{cannot}: the connection closed during the handshake (is it a coordinator?)"
    return f"{cannot}: the WebSocket handshake failed (is {coordinator.base} a coordinator?)"


def _root_cause(exc: BaseException | None) -> BaseException | None:
    """trio's "all attempts to connect failed" OSError stands for its attempts' errors:
    when they are all of one kind (refused, say), that kind is the cause."""
    if isinstance(exc, OSError) and isinstance(exc.__cause__, BaseExceptionGroup):
        leaves = list(_leaves(exc.__cause__))
        if leaves and all(type(leaf) is type(leaves[0]) for leaf in leaves):
            return leaves[0]
    return exc


def _leaves(group: BaseExceptionGroup) -> Iterator[BaseException]:
    for inner in group.exceptions:
        if isinstance(inner, BaseExceptionGroup):
            yield from _leaves(inner)
        else:
            yield inner


def _hostport(coordinator: CoordinatorURL) -> str:
    host = f"[{coordinator.host}]" if ":" in coordinator.host else coordinator.host
    return f"{host}:{coordinator.port}"


# --- requests the protocol classes do not have yet --------------------------------------


def _names(**names: str | None) -> dict[str, str]:
    """Check each given name like the coordinator does; FieldValueError names the field."""
    checked: dict[str, str] = {}
    for attribute, value in names.items():
        if value is not None:
            check_name(attribute, value)
            checked[camel(attribute)] = value
    return checked


def set_shard_count_request(prefix: str, group: str | None, shard_count: int,
                            cutover: str = "parallel") -> dict[str, Any]:
    """setShardCount; without a group (allowed since G2) it is built as JSON."""
    try:
        mode = Cutover(cutover)
    except ValueError:
        raise FieldValueError(f"field 'cutover' must be 'parallel' or 'ordered', got {cutover!r}") from None
    if group is not None:
        return to_wire(SetShardCount(request_id=0, stream_prefix=prefix, consumer_group=group,
                                     shard_count=shard_count, cutover=mode))
    # the message class validates the count; the group is left out of the request
    SetShardCount(request_id=0, stream_prefix=prefix, consumer_group="-",
                  shard_count=shard_count, cutover=mode)
    return {"type": "setShardCount", "requestId": 0, **_names(stream_prefix=prefix),
            "shardCount": shard_count, "cutover": mode.value}


def describe_group_request(prefix: str, group: str, *, watch: bool = False) -> dict[str, Any]:
    body = to_wire(DescribeGroup(request_id=0, stream_prefix=prefix, consumer_group=group))
    body.pop("watch", None)  # sent only when asked: a coordinator without watch rejects the field
    if watch:
        body["watch"] = True
    return body


def delete_group_request(prefix: str, group: str) -> dict[str, Any]:
    return {"type": "deleteGroup", "requestId": 0,
            **_names(stream_prefix=prefix, consumer_group=group)}


def set_retention_request(prefix: str, mode: str, max_length: int | None,
                          max_age_ms: int | None) -> dict[str, Any]:
    if mode not in ("acked", "none"):
        raise FieldValueError(f"field 'retention.mode' must be 'acked' or 'none', got {mode!r}")
    for name, value in (("maxLength", max_length), ("maxAgeMs", max_age_ms)):
        if value is not None and value < 1:
            raise FieldValueError(f"field 'retention.{name}' must be >= 1, got {value}")
    return {"type": "setRetention", "requestId": 0, **_names(stream_prefix=prefix),
            "retention": {"mode": mode, "maxLength": max_length, "maxAgeMs": max_age_ms}}


def reset_offsets_request(prefix: str, group: str, to: str,
                          timestamp_ms: int | None = None) -> dict[str, Any]:
    if to not in ("earliest", "latest", "timestamp"):
        raise FieldValueError(f"field 'to' must be earliest, latest or timestamp, got {to!r}")
    if (to == "timestamp") != (timestamp_ms is not None):
        raise FieldValueError("field 'timestampMs' goes with to=timestamp, and only with it")
    body: dict[str, Any] = {"type": "resetOffsets", "requestId": 0,
                            **_names(stream_prefix=prefix, consumer_group=group), "to": to}
    if timestamp_ms is not None:
        body["timestampMs"] = timestamp_ms
    return body


# --- responses --------------------------------------------------------------------------


def decode_response(body: Mapping[str, Any]) -> Response:
    """A response as its protocol class when known (and decodable), else the JSON object."""
    if body.get("type") in MESSAGE_TYPES:
        try:
            return decode_object({"requestId": None, **body})  # a push carries no requestId
        except ProtocolError:
            pass  # a newer coordinator's shape: keep the raw object, the views read both
    return dict(body)


def check_status(response: Response) -> Response:
    """`response` if its status is OK; else raise AdminError with its status and text."""
    if isinstance(response, dict):
        status, error = response.get("status", "OK"), response.get("error")
    else:
        status, error = getattr(response, "status", Status.OK), getattr(response, "error", None)
    if status != Status.OK:
        raise AdminError(status, error)
    return response


def check_response(response: Response, expected: type[ResponseT]) -> ResponseT:
    """`response` if it is an OK `expected`; else raise AdminError."""
    check_status(response)
    if not isinstance(response, expected):
        got = response.get("type") if isinstance(response, dict) else response.TYPE
        raise AdminError(Status.INVALID_REQUEST, f"expected a {expected.TYPE} response, got {got}")
    return response


# --- the session ------------------------------------------------------------------------


@attrs.define(eq=False)
class _Waiter:
    done: trio.Event = attrs.field(factory=trio.Event)
    body: dict[str, Any] | None = None


class AdminSession:
    """One admin websocket: JSON requests matched to responses by requestId, and pushes."""

    def __init__(self, websocket: WebSocketConnection, coordinator: CoordinatorURL) -> None:
        self.coordinator = coordinator
        self._websocket = websocket
        self._ids = itertools.count(1)
        self._waiting: dict[int, _Waiter] = {}
        self._lost: str | None = None
        self._push_sender, self.pushes = trio.open_memory_channel[dict[str, Any]](PUSH_BUFFER)

    async def request(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Send `body` with a fresh requestId; the JSON object of its response."""
        if self._lost is not None:
            raise SessionLost(self._lost)
        request_id = next(self._ids)
        waiter = _Waiter()
        self._waiting[request_id] = waiter
        try:
            try:
                await self._websocket.send_message(
                    json.dumps({**body, "requestId": request_id}, ensure_ascii=False))
            except ConnectionClosed as exc:
                self._lose(exc)
            await waiter.done.wait()
        finally:
            self._waiting.pop(request_id, None)
        if waiter.body is None:
            raise SessionLost(self._lost or "session closed")
        return waiter.body

    async def receive_loop(self) -> None:
        try:
            while True:
                try:
                    text = await self._websocket.get_message()
                except ConnectionClosed as exc:
                    self._lose(exc)
                    return
                self._deliver(text)
        finally:
            self._lose(None)

    def _deliver(self, text: str | bytes) -> None:
        try:
            body = json.loads(text)
        except ValueError:
            return  # not ours to interpret; the request it answered times out
        if not isinstance(body, dict):
            return
        request_id = body.get("requestId")
        if request_id is None:
            try:
                self._push_sender.send_nowait(body)
            except (trio.WouldBlock, trio.ClosedResourceError):
                pass  # watch keeps only the latest state anyway
            return
        waiter = self._waiting.get(request_id) if type(request_id) is int else None
        if waiter is not None:
            waiter.body = body
            waiter.done.set()

    def _lose(self, exc: ConnectionClosed | None) -> None:
        if self._lost is not None:
            return
        reason = exc.reason if exc is not None else None
        detail = f" (code {reason.code}{': ' + reason.reason if reason and reason.reason else ''})" \
            if reason is not None else ""
        self._lost = f"the coordinator at {self.coordinator.base} closed the session{detail}"
        for waiter in self._waiting.values():
            waiter.done.set()
        self._push_sender.close()


class AdminClient:
    """Admin requests over one `AdminSession`; every method raises AdminError unless OK."""

    def __init__(self, session: AdminSession) -> None:
        self.session = session

    @property
    def url(self) -> str:
        return self.session.coordinator.base

    async def exchange(self, body: Mapping[str, Any]) -> tuple[dict[str, Any], Response]:
        """Send a request object; its raw JSON answer and the OK response it decodes to."""
        raw = await self.session.request(body)
        return raw, check_status(decode_response(raw))

    async def call(self, body: Mapping[str, Any]) -> Response:
        """Send a request object; its OK response (decoded when the type is known)."""
        return (await self.exchange(body))[1]

    async def _typed(self, body: Mapping[str, Any], expected: type[ResponseT]) -> ResponseT:
        return check_response(decode_response(await self.session.request(body)), expected)

    async def list_groups(self) -> Groups:
        """Every group the coordinator knows, with epochs and counts."""
        return await self._typed(to_wire(ListGroups(request_id=0)), Groups)

    async def describe_group(self, prefix: str, group: str) -> GroupDescription:
        """Epochs, state, routing, migration, shards and every member of one group."""
        return await self._typed(describe_group_request(prefix, group), GroupDescription)

    async def watch_group(self, prefix: str, group: str) -> GroupDescription:
        """describeGroup with `watch`: the first description; later ones arrive on `pushes`."""
        return await self._typed(describe_group_request(prefix, group, watch=True),
                                 GroupDescription)

    @property
    def pushes(self) -> trio.MemoryReceiveChannel[dict[str, Any]]:
        return self.session.pushes

    async def set_shard_count(self, prefix: str, group: str | None, shard_count: int,
                              cutover: str = "parallel") -> ShardCountChanged:
        """Create routing for `prefix` or reshard it to `shard_count` shards."""
        return await self._typed(set_shard_count_request(prefix, group, shard_count, cutover),
                                 ShardCountChanged)

    async def set_max_concurrency(self, prefix: str, group: str,
                                  max_concurrency: int | None) -> MaxConcurrencyChanged:
        """Set the group's maxConcurrency (None clears it: members use their capacity)."""
        request = SetMaxConcurrency(request_id=0, stream_prefix=prefix, consumer_group=group,
                                    max_concurrency=max_concurrency)
        return await self._typed(to_wire(request), MaxConcurrencyChanged)

    async def remove_member(self, prefix: str, group: str, member_id: str) -> MemberRemoved:
        """Remove a member from the group; its shards are freed at once."""
        request = RemoveMember(request_id=0, stream_prefix=prefix, consumer_group=group,
                               member_id=member_id)
        return await self._typed(to_wire(request), MemberRemoved)

    async def delete_group(self, prefix: str, group: str) -> Response:
        """G1: delete a group without live members (GROUP_NOT_EMPTY otherwise)."""
        return await self.call(delete_group_request(prefix, group))

    async def set_retention(self, prefix: str, mode: str, max_length: int | None = None,
                            max_age_ms: int | None = None) -> Response:
        """T1..T3: replace the prefix's retention."""
        return await self.call(set_retention_request(prefix, mode, max_length, max_age_ms))

    async def reset_offsets(self, prefix: str, group: str, to: str,
                            timestamp_ms: int | None = None) -> Response:
        """G3: move a memberless group's offsets to earliest, latest or a timestamp."""
        return await self.call(reset_offsets_request(prefix, group, to, timestamp_ms))


@asynccontextmanager
async def open_admin_client(url: str, *, token: str | None = None, connect_timeout: float = 5.0,
                            url_source: str = "--url", ca_file: str | None = None,
                            ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[AdminClient]:
    """Connect to the admin endpoint of the coordinator at `url` (ws://host:port or wss://).

    Raises AdminConnectError (one line, D3) when the URL is bad, no session comes up
    within `connect_timeout` seconds, or a wss:// coordinator does not verify against
    `ssl_context` (else the system trust store and `ca_file`, default $RSC_CA_FILE).
    """
    coordinator = parse_coordinator_url(url, url_source)
    headers = [(b"Authorization", f"Bearer {token}".encode())] if token else None
    context = tls.websocket_context(coordinator.endpoint, ca_file=ca_file, ssl_context=ssl_context)
    if context is not None:
        try:
            await tls.verify_server(coordinator.base, context, connect_timeout)
        except tls.TlsFailed as exc:
            raise AdminConnectError(exc.line) from None
    failure: str | None = None
    connected = False
    try:
        async with trio.open_nursery() as nursery:
            try:
                # our own deadline and nursery: trio-websocket's connect timeout leaves its
                # reader waiting on a peer that accepted the TCP connection and never answers
                with trio.fail_after(connect_timeout):
                    websocket = await connect_websocket_url(nursery, coordinator.endpoint,
                                                            extra_headers=headers, ssl_context=context)
            except (HandshakeError, OSError, trio.TooSlowError) as exc:
                failure = connect_failure(coordinator, exc, token=token, timeout=connect_timeout)
                nursery.cancel_scope.cancel()
            else:
                connected = True
                session = AdminSession(websocket, coordinator)
                nursery.start_soon(session.receive_loop)
                try:
                    yield AdminClient(session)
                finally:
                    with trio.move_on_after(2.0):
                        await websocket.aclose()
                    nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        leaf = single_exception(group)
        if leaf is group:
            raise
        if not connected and isinstance(leaf, HandshakeError | OSError):
            # a refusal (HTTP 401, 404, 503) is raised by the connection's reader task
            failure = connect_failure(coordinator, leaf, token=token, timeout=connect_timeout)
        else:
            raise leaf from None
    if failure is not None:
        raise AdminConnectError(failure)
