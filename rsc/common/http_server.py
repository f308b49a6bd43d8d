"""The one small HTTP/1.1 server: the metrics and health ports (coordinator and `rsc consume`)
and the web console (rsc/console/) read requests, write responses and accept connections here.

What both share: `read_request_head` (bytes up to the blank line, bounded), `encode_response`
(status line, `Content-Type`, `Content-Length`, `Connection: close`, then the caller's own
headers), and `serve_capped`, the accept loop that bounds what a peer can hold: at most
`MAX_CONNECTIONS` at once (one more is closed at accept, or given the caller's `when_full`
answer, the console's 503), and when `accept` fails for want of file descriptors (EMFILE,
ENFILE) the port says so in one line (`http.fd_exhausted`, then a reminder at most every 10 s
and `http.fd_available` once it accepts again) and backs off, instead of trio's traceback on
every retry.

The probe ports: a few fixed `GET` paths, each answered by a `Route` (a call returning status,
body and content type), one short-lived connection per request, no threads: what Prometheus
and Kubernetes probes need, nothing more. `render_http_response` is its pure core.

- `GET` (or `HEAD`) of a known path: that route's answer (`HEAD` without the body);
- another path: 404 naming the paths served; another method: 405; an unreadable request
  line: 400. The connection is always closed after.

A probe connection has `REQUEST_READ_TIMEOUT_S` for its TLS handshake, its request head and
its answer. The console's pages, their parsing and its headers (CSP, HSTS) are
rsc/console/http.py; its shell, rsc/console/server.py.
"""

from __future__ import annotations

import errno
import logging
import os
import ssl
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Final, TypeVar

import attrs
import trio

from rsc.common.logs import log_event

log = logging.getLogger("rsc.http")

MAX_REQUEST_HEAD_BYTES = 8192
REQUEST_READ_TIMEOUT_S = 5.0
MAX_CONNECTIONS = 64  # probes and scrapes at once; one more is closed at accept
CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
BACKOFF_START_S = 0.01
BACKOFF_MAX_S = 0.5
REMINDER_S = 10.0
TEXT = "text/plain; charset=utf-8"
REASONS: Final = {200: "OK", 301: "Moved Permanently", 400: "Bad Request", 403: "Forbidden",
                  404: "Not Found", 405: "Method Not Allowed", 421: "Misdirected Request",
                  431: "Request Header Fields Too Large", 503: "Service Unavailable"}


@attrs.frozen
class Answer:
    """What one route answers."""

    status: int
    body: bytes
    content_type: str = TEXT


Route = Callable[[], Answer]


def text(status: int, line: str) -> Answer:
    """A one-line plain-text answer."""
    return Answer(status, (line + "\n").encode("utf-8", "replace"))


def probe(ok: bool, line: str) -> Answer:
    """A probe's answer: 200 while `ok`, else 503; the line says why."""
    return text(200 if ok else 503, line)


def render_http_response(request_head: bytes, routes: Mapping[str, Route]) -> bytes:
    """The whole HTTP/1.1 response to one request head (request line plus headers)."""
    request_line = request_head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = request_line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return _http(text(400, "bad request"))
    method, target, _version = parts
    route = routes.get(target.split("?", 1)[0])
    if route is None:
        return _http(text(404, "not found; this port serves " + ", ".join(sorted(routes))))
    if method not in ("GET", "HEAD"):
        return _http(text(405, "method not allowed"), allow="GET, HEAD")
    answer = route()
    response = _http(answer)
    if method == "HEAD":
        return response[: len(response) - len(answer.body)]
    return response


def _http(answer: Answer, *, allow: str | None = None) -> bytes:
    return encode_response(answer.status, answer.body, answer.content_type,
                           (("Allow", allow),) if allow else ())


def encode_response(status: int, body: bytes, content_type: str,
                    headers: Iterable[tuple[str, str]] = (), *, head_only: bool = False,
                    unknown_reason: str = "") -> bytes:
    """The bytes of one HTTP/1.1 response: the status line (`unknown_reason` for a status
    REASONS does not name), `Content-Type`, `Content-Length`, `Connection: close`, then
    `headers` in order; `head_only` leaves the body out (a `HEAD`)."""
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, unknown_reason)}".rstrip(),
             f"Content-Type: {content_type}", f"Content-Length: {len(body)}", "Connection: close",
             *(f"{name}: {value}" for name, value in headers)]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + body


async def serve_http(routes: Mapping[str, Route], host: str, port: int, *,
                     ssl_context: ssl.SSLContext | None = None,
                     task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve `routes` on host:port until cancelled; `task_status.started(bound_port)` once
    listening (`port` 0 picks a free port). With `ssl_context` it is HTTPS (a failed TLS
    handshake reads as a peer gone away)."""
    sockets = await trio.open_tcp_listeners(port, host=host)
    bound_port = int(sockets[0].socket.getsockname()[1])
    listeners: list[trio.abc.Listener[trio.abc.Stream]] = list(sockets) if ssl_context is None else [
        trio.SSLListener(listener, ssl_context, https_compatible=True) for listener in sockets]

    async def handle(stream: trio.abc.Stream) -> None:
        async with stream:
            with trio.move_on_after(REQUEST_READ_TIMEOUT_S):
                head = await read_request_head(stream)
                if b"\r\n\r\n" in head:
                    try:
                        await stream.send_all(render_http_response(head, routes))
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass  # the prober went away; nothing to tell it

    task_status.started(bound_port)
    async with trio.open_nursery() as nursery:
        for listener in listeners:
            nursery.start_soon(serve_capped, listener, handle, bound_port)


StreamT = TypeVar("StreamT", bound=trio.abc.Stream)


async def serve_capped(listener: trio.abc.Listener[StreamT], handle: Callable[[StreamT], Awaitable[None]],
                       port: int, *, max_connections: int = MAX_CONNECTIONS,
                       when_full: Callable[[StreamT], Awaitable[None]] | None = None,
                       slots: trio.CapacityLimiter | None = None) -> None:
    """Accept on `listener` and run `handle` for each connection, at most `max_connections` at
    once (one more is closed at accept, or handed to `when_full`, which answers it and closes
    it); out of descriptors, one line and a back-off. `slots`, given to the serve_capped of
    several listeners, makes the cap theirs together (default: this listener's own)."""
    shortage = FdShortage(port)
    held = trio.CapacityLimiter(max_connections) if slots is None else slots

    async def run(stream: StreamT) -> None:
        try:
            await handle(stream)
        finally:
            held.release_on_behalf_of(stream)

    async with trio.open_nursery() as nursery:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in CAPACITY_ERRNOS:
                    raise
                await trio.sleep(shortage.failed(exc, trio.current_time()))
                continue
            shortage.recovered()
            try:
                held.acquire_on_behalf_of_nowait(stream)
            except trio.WouldBlock:
                if when_full is None:
                    await trio.aclose_forcefully(stream)
                else:
                    nursery.start_soon(when_full, stream)
                continue
            nursery.start_soon(run, stream)


class FdShortage:
    """How a port says it is out of file descriptors: a line when it starts, a reminder at most
    every REMINDER_S with the count, a line when it ends; and how long to back off."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.since: float | None = None
        self.reminded = 0.0
        self.failures = 0
        self.backoff = BACKOFF_START_S

    def failed(self, exc: OSError, now: float) -> float:
        """One failed accept; the seconds to wait before the next."""
        self.failures += 1
        if self.since is None:
            self.since = self.reminded = now
            log_event(log, "http.fd_exhausted", level=logging.WARNING, port=self.port,
                      error=os.strerror(exc.errno or 0))
        elif now - self.reminded >= REMINDER_S:
            self.reminded = now
            log_event(log, "http.fd_exhausted", level=logging.WARNING, port=self.port,
                      error=os.strerror(exc.errno or 0), failed_accepts=self.failures)
        wait, self.backoff = self.backoff, min(self.backoff * 2, BACKOFF_MAX_S)
        return wait

    def recovered(self) -> None:
        self.backoff = BACKOFF_START_S
        if self.since is not None:
            log_event(log, "http.fd_available", port=self.port, failed_accepts=self.failures)
            self.since, self.failures = None, 0


async def read_request_head(stream: trio.abc.Stream, max_bytes: int = MAX_REQUEST_HEAD_BYTES) -> bytes:
    """Bytes until the head's blank line, or what came before the peer stopped, went away or
    sent more than `max_bytes` without one (the caller tells these apart by the blank line)."""
    buffer = b""
    while b"\r\n\r\n" not in buffer and len(buffer) <= max_bytes:
        try:
            chunk = await stream.receive_some(4096)
        except trio.BrokenResourceError:
            break
        if not chunk:
            break
        buffer += chunk
    return buffer
