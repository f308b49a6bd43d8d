"""The console's HTTP: pure request parsing, routing and response bytes (no sockets).

`parse_request_head(bytes)` reads one request head (raising `BadRequest`
with the status to answer), `route(request, files, hosts)` decides what it
gets: a static file of the package, a redirect, an error, or `WEBSOCKET` (the
live feed at `/ws`, same origin only), and `Response.encode()` is the bytes to
send (framed by rsc/common/http_server.py, the HTTP server the probe ports
share). The shell in `rsc.console.server` only moves bytes.

B1: a request whose `Host` is not one of the console's own names (`ConsoleHosts`)
gets 421 and no page, so a page of another site whose name was rebound to this
address (DNS rebinding) reads nothing; over HTTPS every answer carries
`Strict-Transport-Security` (`with_hsts`).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Final
from urllib.parse import unquote, urlsplit

import attrs

from rsc.common.http_server import encode_response

MAX_HEAD_BYTES: Final = 8192
WEBSOCKET_PATH: Final = "/ws"

_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}

# what a page may load: its own scripts, styles and images, and its own websocket; no inline
# script or style (names are data, never markup), no framing
SECURITY_HEADERS: Final = (
    ("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; "
     "img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; "
     "frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-cache"),
)

HSTS: Final = ("Strict-Transport-Security", "max-age=31536000")
LOOPBACK_NAMES: Final = ("localhost", "127.0.0.1", "::1")
_WILDCARDS: Final = ("", "0.0.0.0", "::")

# the pages and files of the console: URL path -> file in rsc/console/static
ROUTES: Final = {"/": "index.html", "/group": "group.html", "/audit": "audit.html",
                 "/messages": "messages.html",
                 "/static/console.js": "console.js",
                 "/static/chart.js": "chart.js", "/static/console.css": "console.css",
                 "/favicon.svg": "favicon.svg"}


class BadRequest(Exception):
    """The peer sent something that is not an HTTP/1.x request head we serve; `status` to answer."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


@attrs.frozen
class Request:
    method: str
    path: str
    query: str
    headers: Mapping[str, str]  # lower-case names; a repeated header keeps its last value

    def header(self, name: str) -> str:
        return self.headers.get(name.lower(), "")


@attrs.frozen
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    extra: tuple[tuple[str, str], ...] = ()
    head_only: bool = False

    def encode(self) -> bytes:
        """The bytes to send: the shared HTTP/1.1 framing, the security headers, then `extra`."""
        return encode_response(self.status, self.body, self.content_type,
                               (*SECURITY_HEADERS, *self.extra), head_only=self.head_only,
                               unknown_reason="Error")


def error(status: int, text: str) -> Response:
    return Response(status, (text + "\n").encode())


WEBSOCKET: Final = "websocket"
"""`route`'s answer for the live feed: hand the connection to the websocket handshake."""


def parse_request_head(head: bytes) -> Request:
    """One request head (up to and including the blank line); BadRequest when malformed."""
    if len(head) > MAX_HEAD_BYTES:
        raise BadRequest(431, "request head too large")
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        raise BadRequest(400, "undecodable request head") from None
    request_line, _, rest = text.partition("\r\n")
    parts = request_line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest(400, f"not an HTTP/1.x request line: {request_line[:80]!r}")
    method, target, _version = parts
    if not target.startswith("/"):
        raise BadRequest(400, "the request target must be a path")
    headers: dict[str, str] = {}
    for line in rest.split("\r\n"):
        if not line:
            continue
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise BadRequest(400, f"malformed header line {line[:80]!r}")
        headers[name.lower()] = value.strip()
    split = urlsplit(target)
    return Request(method=method, path=unquote(split.path), query=split.query, headers=headers)


def same_origin(request: Request) -> bool:
    """A browser's websocket is served only to pages of this console (its Origin names our Host).

    Browsers let any site open a websocket to any address; without this check a page on
    the web could read the console of an operator's coordinator on localhost. A client
    that sends no Origin (not a browser) is let through: the token gate is the
    coordinator's.
    """
    origin = request.header("origin")
    if not origin:
        return True
    host = request.header("host")
    split = urlsplit(origin)
    return bool(host) and split.scheme in ("http", "https") and split.netloc.lower() == host.lower()


def host_name(host: str) -> str | None:
    """The name of a `Host` header value without its port, lower-cased (an IPv6 literal without
    its brackets); None when it is not a host[:port]."""
    host = host.strip().lower()
    if host.startswith("["):
        name, bracket, rest = host[1:].partition("]")
        if not bracket or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        return name or None
    name, colon, port = host.partition(":")
    if colon and not port.isdigit():
        return None
    return name.rstrip(".") or None


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@attrs.frozen
class ConsoleHosts:
    """The names the console answers to (B1, against DNS rebinding): the loopback names, the
    address it listens on, and `--console-hosts`. Bound to a wildcard address, it also
    answers to any IP address literal: a browser that sends one reached this machine by that
    address, and an address, unlike a name, cannot be rebound to another machine."""

    names: frozenset[str]
    any_address: bool = False

    @classmethod
    def serving(cls, bind_host: str, extra: Iterable[str] = ()) -> ConsoleHosts:
        bound = bind_host.strip("[]").lower()
        names = {*LOOPBACK_NAMES, *(name for name in (host_name(item) for item in extra) if name)}
        if bound not in _WILDCARDS:
            names.add(bound)
        return cls(frozenset(names), any_address=bound in _WILDCARDS)

    def allows(self, host: str) -> bool:
        name = host_name(host)
        if name is None:
            return False
        return name in self.names or (self.any_address and _is_address(name))


def with_hsts(response: Response) -> Response:
    """The response as sent over HTTPS: browsers keep to HTTPS for this host from then on."""
    return attrs.evolve(response, extra=(*response.extra, HSTS))


def is_websocket_upgrade(request: Request) -> bool:
    return (request.header("upgrade").lower() == "websocket"
            and "upgrade" in request.header("connection").lower())


def route(request: Request, files: StaticFiles, hosts: ConsoleHosts | None = None) -> Response | str:
    """What `request` gets: a Response, or WEBSOCKET for the live feed. With `hosts`, a `Host`
    that is not one of the console's names gets 421 first (B1)."""
    if hosts is not None and not hosts.allows(request.header("host")):
        return error(421, "this console does not answer to that Host; open it by one of its own "
                          "names (localhost, its address) or add the name to --console-hosts")
    if request.path == WEBSOCKET_PATH:
        if request.method != "GET" or not is_websocket_upgrade(request):
            return error(400, "the live feed at /ws is a websocket")
        if not same_origin(request):
            return error(403, "the live feed serves this console's own pages only")
        return WEBSOCKET
    if request.method not in ("GET", "HEAD"):
        return attrs.evolve(error(405, "the console is read-only: GET only"),
                            extra=(("Allow", "GET, HEAD"),))
    if request.path == "/index.html":
        return Response(301, extra=(("Location", "/"),))
    name = ROUTES.get(request.path)
    if name is None:
        return error(404, f"no page at {request.path}")
    suffix = name[name.rfind("."):]
    return Response(200, files.read(name), _TYPES[suffix], head_only=request.method == "HEAD")


INCLUDE: Final = re.compile(rb"<!--#include ([a-z]+\.html)-->\n?")
"""A page's line that stands for a fragment both pages share (the login form)."""


class StaticFiles:
    """The console's files from the installed package (read once, kept); a page's
    `<!--#include NAME-->` line is replaced by the fragment NAME from the same folder."""

    def __init__(self, package: str = "rsc.console") -> None:
        self._root = resources.files(package) / "static"
        self._cache: dict[str, bytes] = {}

    def read(self, name: str) -> bytes:
        if name not in self._cache:
            data = (self._root / name).read_bytes()
            if name.endswith(".html"):
                data = INCLUDE.sub(lambda found: (self._root / found[1].decode()).read_bytes(), data)
            self._cache[name] = data
        return self._cache[name]
