"""The operator's client of the coordinator's `/v1/admin` endpoint.

    async with open_admin_client("ws://127.0.0.1:8765", token=None) as admin:
        description = await admin.describe_group("orders", "billing")

Requests are the protocol's message classes, written and read through its one codec
(`request_body`, `read_answer`). Every method returns the response for an `OK` status and
raises `AdminError` for any other. The `error` frame a coordinator sends for a request it
could not read becomes that request's own error response (`Request.error`), so a caller
always gets the response class it asked for. An answer the protocol classes cannot decode
(a newer coordinator's) stays the raw JSON object, which the views read too.

A coordinator that cannot be reached or refuses the session raises
`AdminConnectError` with one line that names the URL and the likely fix (D3).

`COORDINATOR_NOT_AVAILABLE` (the coordinator cannot write its store just now, D4) is retried
with backoff, as the status asks, for the requests whose repeat ends where one would: the
reads and the settings set to a value (`RETRIED_WHEN_UNAVAILABLE`). The others are not: the
first attempt's write may still land late (D4), and a repeat of a removal, a deletion, a
reset or a re-drive would then fail or act twice.
"""

from __future__ import annotations

import errno
import json
import logging
import random
import re
import socket
import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Protocol, TypeVar
from urllib.parse import urlsplit

import attrs
import trio
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    ConnectionTimeout,
    HandshakeError,
    WebSocketConnection,
)

from rsc.admin.args import DEFAULT_URL
from rsc.common import tls
from rsc.common.coordinator_url import handshake_hint, shown, url_problem
from rsc.common.error_family import AdminError as RscAdminError
from rsc.common.error_family import AuthenticationError, ConfigurationError, CoordinatorUnavailable
from rsc.common.errors import ErrorBoundary, leaves
from rsc.common.wording import log_final
from rsc.common.ws_client import connect_websocket
from rsc.common.ws_session import ClientSession, Undecodable
from rsc.protocol import (
    Cutover,
    DeadLetters,
    DeadLettersRedriven,
    DeleteGroup,
    DescribeGroup,
    ErrorResponse,
    FormatVersion,
    FormatVersionChanged,
    GetFormatVersion,
    GroupDeleted,
    GroupDescription,
    Groups,
    ListDeadLetters,
    ListGroups,
    MaxConcurrencyChanged,
    MemberRemoved,
    Message,
    OffsetsReset,
    ProtocolError,
    RedriveDeadLetters,
    RemoveMember,
    Request,
    ResetOffsets,
    ResetTo,
    Retention,
    RetentionChanged,
    RetentionMode,
    SetFormatVersion,
    SetMaxConcurrency,
    SetRetention,
    SetShardCount,
    ShardCountChanged,
    Status,
    to_wire,
)
from rsc.protocol.codec import ADMIN_REQUESTS, MESSAGE_TYPES, decode_object
from rsc.protocol.messages import FieldValueError, camel

__all__ = ["DEFAULT_URL", "RETRIED_WHEN_UNAVAILABLE", "UNAVAILABLE_RETRY_S", "AdminClient",
           "AdminConfigError", "AdminConnectError", "AdminError", "AdminTokenRefused", "AdminSession",
           "CoordinatorURL", "Response", "SessionLost", "check_answer", "check_status",
           "decode_response", "open_admin_client", "parse_coordinator_url", "read_answer",
           "request_body"]

log = logging.getLogger(__name__)

ADMIN_PATH = "/v1/admin"
PUSH_BUFFER = 256
# The coordinator bounds what it accepts (--max-frame-bytes), not what it answers: a
# describeGroup of a --max-group-size 20,000 group is about 5 MB, listGroups grows with the
# groups. The client takes any answer up to this (trio-websocket's default is 1 MiB).
MAX_ANSWER_BYTES = 1 << 30

# Requests whose repeat ends where one would: a COORDINATOR_NOT_AVAILABLE answer to them is
# retried (see the module's docstring), for at most UNAVAILABLE_RETRY_S and never past the
# caller's own deadline (`rsc admin --timeout`), FIRST_BACKOFF_S doubling to MAX_BACKOFF_S.
RETRIED_WHEN_UNAVAILABLE: tuple[type[Request], ...] = (
    ListGroups, DescribeGroup, GetFormatVersion, ListDeadLetters,
    SetShardCount, SetMaxConcurrency, SetRetention, SetFormatVersion)
UNAVAILABLE_RETRY_S = 5.0
FIRST_BACKOFF_S = 0.1
MAX_BACKOFF_S = 1.0

Response = Message | dict[str, object]
"""A decoded response, or the raw JSON object of a type the protocol classes do not know."""
ResponseT = TypeVar("ResponseT", bound=Message)
ResponseT_co = TypeVar("ResponseT_co", bound=Message, covariant=True)


class Answered(Protocol[ResponseT_co]):
    """A request, seen through the response class its `error()` builds (the class it is answered with)."""

    def error(self, status: Status, error: str) -> ResponseT_co: ...


class AdminError(RscAdminError):
    """The coordinator refused an admin request: `status` (not OK) and its `error` text.

    `response` is the refusal itself (the request's response class, or the raw JSON object
    of a newer coordinator's), when there was one.
    """

    def __init__(self, status: object, error: object,
                 response: Response | None = None) -> None:
        # a raw JSON refusal's status and error may be any JSON value: both are only printed
        text = str(getattr(status, "value", status))
        self.status: Status | str = Status(text) if text in Status.__members__ else text
        self.error = error or ""
        self.response = response
        super().__init__(f"{text}: {self.error}" if self.error else text)

    @classmethod
    def of(cls, response: Response) -> AdminError:
        """The error of a refusal: its status and text."""
        if isinstance(response, dict):
            return cls(response.get("status", "OK"), response.get("error"), response)
        return cls(getattr(response, "status", Status.OK), getattr(response, "error", None), response)


class AdminConnectError(CoordinatorUnavailable):
    """No admin session: bad URL, unreachable or refusing coordinator; the text is one line."""


class AdminTokenRefused(AdminConnectError, AuthenticationError):
    """The coordinator refused the admin session's token (HTTP 401 or 403): final (L2)."""


class AdminConfigError(AdminConnectError, ConfigurationError):
    """An admin session that cannot come up as configured: a bad URL, a path the coordinator
    does not serve (HTTP 404), a TLS certificate that does not verify: final (L2)."""


class SessionLost(CoordinatorUnavailable):
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
        return AdminConfigError(f"invalid coordinator URL {shown(url)!r} (from {source}): {problem}")

    problem = url_problem(url)
    if problem is not None:
        raise bad(problem)
    scheme = url.partition("://")[0]
    parts = urlsplit(url)
    match = _NETLOC.match(parts.netloc.rpartition("@")[2])
    assert match is not None  # url_problem checked the host
    port_text = match["port"]
    port = int(port_text) if port_text else (443 if scheme.lower() == "wss" else 80)
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
        hint = handshake_hint(status, endpoint="admin", hostport=_hostport(coordinator),
                              token_given=bool(token))
        if status == 503:
            hint = f"{hint}; try again later"
        return f"{where} ({hint or f'is {coordinator.base} a coordinator?'})"
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
        inner = leaves(exc.__cause__)
        if inner and all(type(leaf) is type(inner[0]) for leaf in inner):
            return inner[0]
    return exc


def _hostport(coordinator: CoordinatorURL) -> str:
    host = f"[{coordinator.host}]" if ":" in coordinator.host else coordinator.host
    return f"{host}:{coordinator.port}"


# --- requests ---------------------------------------------------------------------------


def request_body(request: Request) -> dict[str, object]:
    """The JSON object of `request` through the codec, checked as the coordinator decodes it.

    FieldValueError names a field the coordinator would refuse (an unknown cutover, say), so
    nothing is sent. An optional field left at its default (`watch`, the group of
    setShardCount, `timestampMs`) is left out: absent means the default, and a coordinator
    that does not know the field never sees it.
    """
    body = to_wire(request)
    try:
        decode_object(body, ADMIN_REQUESTS)
    except ProtocolError as exc:
        raise FieldValueError(exc.message) from None
    for field in attrs.fields(type(request)):
        if (field.default is None or field.default is False) \
                and getattr(request, field.name) is field.default:
            body.pop(camel(field.name), None)  # (the codec leaves some out itself)
    return body


# --- responses --------------------------------------------------------------------------


def decode_response(body: Mapping[str, object]) -> Response:
    """A response as its protocol class when known (and decodable), else the JSON object."""
    if body.get("type") in MESSAGE_TYPES:
        try:
            return decode_object({"requestId": None, **body})  # a push carries no requestId
        except ProtocolError:
            pass  # a newer coordinator's shape: keep the raw object, the views read both
    return dict(body)


def read_answer(request: Request, body: Mapping[str, object]) -> Response:
    """The answer to `request` (see `decode_response`); an `error` frame, the coordinator's
    answer to a request it could not read, becomes the request's own error response."""
    response = decode_response(body)
    if isinstance(response, ErrorResponse):
        return request.error(response.status, response.error)
    return response


def check_status(response: Response) -> Response:
    """`response` if its status is OK; else raise AdminError with its status and text."""
    refusal = AdminError.of(response)
    if refusal.status != Status.OK:
        raise refusal
    return response


def check_answer(request: Answered[ResponseT], response: Response) -> ResponseT:
    """`response` if it is an OK answer of `request`'s response class; else raise AdminError."""
    check_status(response)
    expected = type(request.error(Status.INVALID_REQUEST, ""))
    if not isinstance(response, expected):
        got = response.get("type") if isinstance(response, dict) else response.TYPE
        raise AdminError.of(request.error(Status.INVALID_REQUEST,
                                          f"expected a {expected.TYPE} response, got {got}"))
    return response


# --- the session ------------------------------------------------------------------------


class AdminSession(ClientSession[dict[str, object]]):
    """One admin websocket (rsc/common/ws_session.py read as raw JSON objects): requests matched
    to their answers by requestId, and pushes."""

    def __init__(self, websocket: WebSocketConnection, coordinator: CoordinatorURL) -> None:
        self.coordinator = coordinator
        super().__init__(websocket, read=_read_object, lost=SessionLost, undecodable=SessionLost,
                         closed_reason=self._closed_reason, push_buffer=PUSH_BUFFER,
                         warn_dropped_pushes=False)  # watch keeps only the latest state anyway

    async def request(self, request: Request) -> dict[str, object]:
        """Send `request` with a fresh requestId (its own is ignored); the JSON object of its answer.

        FieldValueError (nothing sent) when the coordinator would refuse a field of it.
        """
        body = request_body(request)
        return await self.exchange(lambda request_id: json.dumps(
            {**body, "requestId": request_id}, ensure_ascii=False))

    def _closed_reason(self, exc: ConnectionClosed | None) -> str:
        reason = exc.reason if exc is not None else None
        detail = f" (code {reason.code}{': ' + reason.reason if reason and reason.reason else ''})" \
            if reason is not None else ""
        return f"the coordinator at {self.coordinator.base} closed the session{detail}"


def _read_object(text: str | bytes) -> tuple[int | None, dict[str, object]]:
    """An answer or push as its JSON object; its requestId when it has one."""
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise Undecodable(f"not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise Undecodable(f"not a JSON object: {type(body).__name__}")
    request_id = body.get("requestId")
    if request_id is not None and type(request_id) is not int:
        raise Undecodable(f"requestId {request_id!r} is not an integer")
    return request_id, body


class AdminClient:
    """Admin requests over one `AdminSession`; every method raises AdminError unless OK.

    `retry_unavailable_s`: how long a request of `RETRIED_WHEN_UNAVAILABLE` is retried while
    the answer is COORDINATOR_NOT_AVAILABLE (0: never).
    """

    def __init__(self, session: AdminSession, *,
                 retry_unavailable_s: float = UNAVAILABLE_RETRY_S) -> None:
        self.session = session
        self.retry_unavailable_s = retry_unavailable_s

    @property
    def url(self) -> str:
        return self.session.coordinator.base

    async def exchange(self, request: Request) -> tuple[dict[str, object], Response]:
        """Send a request; its raw JSON answer and the OK response it reads as (`read_answer`)."""
        raw, response = await self._answer(request)
        return raw, check_status(response)

    async def ask(self, request: Answered[ResponseT]) -> ResponseT:
        """Send a request; its OK answer, of the request's response class (else AdminError)."""
        assert isinstance(request, Request), request
        return check_answer(request, (await self._answer(request))[1])

    async def _answer(self, request: Request) -> tuple[dict[str, object], Response]:
        """The raw answer and its reading; COORDINATOR_NOT_AVAILABLE retried with backoff
        where the request allows it (`RETRIED_WHEN_UNAVAILABLE`), said once on the log."""
        retried = isinstance(request, RETRIED_WHEN_UNAVAILABLE) and self.retry_unavailable_s > 0
        started = trio.current_time()
        give_up = min(started + self.retry_unavailable_s, trio.current_effective_deadline())
        delay, said = FIRST_BACKOFF_S, False
        while True:
            raw = await self.session.request(request)
            response = read_answer(request, raw)
            if not retried or AdminError.of(response).status != Status.COORDINATOR_NOT_AVAILABLE:
                return raw, response
            wait = delay * random.uniform(0.5, 1.0)
            if trio.current_time() + wait >= give_up:
                if said:
                    log.warning("%s: still %s after %.1f s of retries; giving up", request.TYPE,
                                Status.COORDINATOR_NOT_AVAILABLE.value,
                                trio.current_time() - started)
                return raw, response
            if not said:
                said = True
                log.warning("%s: %s from %s (%s); retrying with backoff for up to %.1f s",
                            request.TYPE, Status.COORDINATOR_NOT_AVAILABLE.value, self.url,
                            AdminError.of(response).error, give_up - started)
            await trio.sleep(wait)
            delay = min(2 * delay, MAX_BACKOFF_S)

    async def list_groups(self) -> Groups:
        """Every group the coordinator knows, with epochs and counts."""
        return await self.ask(ListGroups(request_id=0))

    async def describe_group(self, prefix: str, group: str) -> GroupDescription:
        """Epochs, state, routing, migration, shards and every member of one group."""
        return await self.ask(DescribeGroup(request_id=0, stream_prefix=prefix,
                                            consumer_group=group))

    async def watch_group(self, prefix: str, group: str) -> GroupDescription:
        """describeGroup with `watch`: the first description; later ones arrive on `pushes`."""
        return await self.ask(DescribeGroup(request_id=0, stream_prefix=prefix,
                                            consumer_group=group, watch=True))

    @property
    def pushes(self) -> trio.MemoryReceiveChannel[dict[str, object]]:
        return self.session.pushes

    async def set_shard_count(self, prefix: str, group: str | None, shard_count: int,
                              cutover: Cutover = Cutover.PARALLEL) -> ShardCountChanged:
        """Create routing for `prefix` or reshard it to `shard_count` shards (the group is
        optional, G1)."""
        return await self.ask(SetShardCount(request_id=0, stream_prefix=prefix,
                                            consumer_group=group, shard_count=shard_count,
                                            cutover=cutover))

    async def set_max_concurrency(self, prefix: str, group: str,
                                  max_concurrency: int | None) -> MaxConcurrencyChanged:
        """Set the group's maxConcurrency (None clears it: members use their capacity)."""
        return await self.ask(SetMaxConcurrency(request_id=0, stream_prefix=prefix,
                                                consumer_group=group,
                                                max_concurrency=max_concurrency))

    async def remove_member(self, prefix: str, group: str, member_id: str | None = None, *,
                            instance_id: str | None = None) -> MemberRemoved:
        """Remove a member from the group, by memberId or by instanceId (S5, an AWAY member
        too); its shards are freed at once."""
        return await self.ask(RemoveMember(request_id=0, stream_prefix=prefix,
                                           consumer_group=group, member_id=member_id,
                                           instance_id=instance_id))

    async def delete_group(self, prefix: str, group: str) -> GroupDeleted:
        """G1: delete a group without live members (GROUP_NOT_EMPTY otherwise)."""
        return await self.ask(DeleteGroup(request_id=0, stream_prefix=prefix,
                                          consumer_group=group))

    async def set_retention(self, prefix: str, mode: RetentionMode, max_length: int | None = None,
                            max_age_ms: int | None = None) -> RetentionChanged:
        """T1..T3: replace the prefix's retention."""
        retention = Retention(mode=mode, max_length=max_length, max_age_ms=max_age_ms)
        return await self.ask(SetRetention(request_id=0, stream_prefix=prefix,
                                           retention=retention))

    async def reset_offsets(self, prefix: str, group: str, to: ResetTo,
                            timestamp_ms: int | None = None) -> OffsetsReset:
        """G3: move a memberless group's offsets to earliest, latest or a timestamp."""
        return await self.ask(ResetOffsets(request_id=0, stream_prefix=prefix,
                                           consumer_group=group, to=to, timestamp_ms=timestamp_ms))

    async def dead_letters(self, prefix: str, group: str, *, count: int = 100,
                           after: str | None = None) -> DeadLetters:
        """P3: the group's dead letters: count, oldest and newest, errors by type, a page."""
        return await self.ask(ListDeadLetters(request_id=0, stream_prefix=prefix,
                                              consumer_group=group, count=count, after=after))

    async def redrive(self, prefix: str, group: str, *, dry_run: bool = False, max: int = 1000,
                      ids: tuple[str, ...] = (), force: bool = False) -> DeadLettersRedriven:
        """P3: send the group's dead letters back to their prefix, for this group only."""
        return await self.ask(RedriveDeadLetters(request_id=0, stream_prefix=prefix,
                                                 consumer_group=group, dry_run=dry_run, max=max,
                                                 ids=ids, force=force))

    async def format_version(self) -> FormatVersion:
        """The store's metadata format version, and the newest the coordinator writes."""
        return await self.ask(GetFormatVersion(request_id=0))

    async def set_format_version(self, format_version: int) -> FormatVersionChanged:
        """Raise the store's metadata format version (UNSUPPORTED_FORMAT_VERSION when the
        coordinator does not write it, or it is lower than the one in use)."""
        return await self.ask(SetFormatVersion(request_id=0, format_version=format_version))


@asynccontextmanager
async def open_admin_client(url: str, *, token: str | None = None, connect_timeout: float = 5.0,
                            url_source: str = "--url", ca_file: str | None = None,
                            ssl_context: ssl.SSLContext | None = None,
                            console_client: str | None = None,
                            retry_unavailable_s: float = UNAVAILABLE_RETRY_S,
                            ) -> AsyncIterator[AdminClient]:
    """Connect to the admin endpoint of the coordinator at `url` (ws://host:port or wss://).

    Raises AdminConnectError (one line, D3) when the URL is bad, no session comes up
    within `connect_timeout` seconds, or a wss:// coordinator does not verify against
    `ssl_context` (else the system trust store and `ca_file`, default $RSC_CA_FILE).
    `console_client` is the browser address the console sends (the audit log's peer, C3).
    `retry_unavailable_s` bounds the retries of COORDINATOR_NOT_AVAILABLE (`AdminClient`).
    """
    coordinator = parse_coordinator_url(url, url_source)
    headers = [(b"Authorization", f"Bearer {token.strip()}".encode())] if token else []
    if console_client is not None:  # C3: the console says whose browser it acts for
        headers.append((b"rsc-console-client", console_client.encode("ascii", "replace")))
    context = tls.websocket_context(coordinator.endpoint, ca_file=ca_file, ssl_context=ssl_context)
    if context is not None:
        try:
            await tls.verify_server(coordinator.base, context, connect_timeout)
        except tls.TlsFailed as exc:
            log_final(log, exc.line)  # L2: final, said once
            raise AdminConfigError(exc.line) from None
    failure: AdminConnectError | None = None
    connected = False
    with ErrorBoundary():  # L1: one error, never a group
        try:
            async with connect_websocket(coordinator.endpoint, extra_headers=headers,
                                         ssl_context=context, connect_timeout=connect_timeout,
                                         max_message_size=MAX_ANSWER_BYTES) as websocket:
                connected = True
                session = AdminSession(websocket, coordinator)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(session.receive_loop)
                    try:
                        yield AdminClient(session, retry_unavailable_s=retry_unavailable_s)
                    finally:
                        nursery.cancel_scope.cancel()
        except (HandshakeError, OSError, trio.TooSlowError) as exc:
            if connected:
                raise
            line = connect_failure(coordinator, exc, token=token, timeout=connect_timeout)
            status = exc.status_code if isinstance(exc, ConnectionRejected) else None
            if status in (401, 403):
                failure = AdminTokenRefused(line)
            elif status == 404:
                failure = AdminConfigError(line)
            else:
                failure = AdminConnectError(line)
            if status in (401, 403, 404):
                log_final(log, line)  # L2: final, said once
    if failure is not None:
        raise failure
