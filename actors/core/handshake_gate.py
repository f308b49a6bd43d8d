"""Who may open a session (B1, B5): a handshake's origin and token checks, and the refusal
table that counts, logs and throttles. Pure: no sockets, `now` (seconds) is an argument.

The server (actors/server.py) asks `HandshakeGate.check(path, headers, address, now)` once
per handshake on a known endpoint and answers the `Refusal` it gets, if any; it counts and
logs what the refusal says. In order:

- 429 when the (address, endpoint) pair is throttled and the handshake carries no valid
  token (a valid token is never throttled; a 429 is not counted toward the limit);
- 403 when it carries an `Origin` header not in `--allowed-origins` (B1: a browser page of
  another site; our tools and libraries send no Origin);
- 401 when the endpoint has a token and the handshake does not carry exactly one
  `Authorization: Bearer <token>` with it (`token_refusal`: the one place a token is checked).

Throttling (B5): more than `limit` (20) refusals of one (address, endpoint) within
`window_s` (60 s) make that pair's handshakes without a valid token get 429 for the next
`throttle_s` (60 s). Loopback is exempt (the operator's own tools and the console's
sessions), unless `exempt_loopback` is off (the tests, which can only reach a coordinator
on loopback). The table holds at most `max_entries` addresses (least recently refused go
first); IPv6 addresses are counted per /64, as one host usually owns a whole /64.

Logging: every refusal gives a line, except that repeats from one address within
`log_every_s` (10 s) are summed into that address's next line (`repeats`); the token is
never part of it.
"""

from __future__ import annotations

import collections
import enum
import hmac
import ipaddress
from collections.abc import Mapping, Sequence
from typing import Final
from urllib.parse import urlsplit

import attrs

Headers = Sequence[tuple[bytes, bytes]]

REFUSALS_BEFORE_THROTTLE: Final = 20
WINDOW_S: Final = 60.0
THROTTLE_S: Final = 60.0
LOG_EVERY_S: Final = 10.0
MAX_ENTRIES: Final = 10_000
_DEFAULT_PORTS = {"http": 80, "https": 443}


class Reason(enum.StrEnum):
    """Why a handshake was refused: the `reason` label of `rsc_auth_failures_total`."""

    TOKEN_MISSING = "token_missing"
    TOKEN_WRONG = "token_wrong"
    ORIGIN = "origin"
    THROTTLED = "throttled"


@attrs.frozen
class LogLine:
    """What to log for a refusal: `repeats` more from the same address were not logged."""

    address: str
    endpoint: str
    reason: Reason
    repeats: int
    throttled: bool  # this refusal started a throttle of (address, endpoint)


@attrs.frozen
class Refusal:
    """A refused handshake: the HTTP answer, why, and the line to log (None: summed into a
    later one)."""

    status: int
    reason: Reason
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ()
    log: LogLine | None = None


def origin_key(origin: str) -> str | None:
    """`scheme://host[:port]` lower-cased, default port dropped; None when `origin` is not one."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/") \
            or parts.query or parts.fragment or parts.username or parts.password:
        return None
    host = parts.hostname.lower()
    shown = f"[{host}]" if ":" in host else host
    default_port = port is None or port == _DEFAULT_PORTS[scheme]
    return f"{scheme}://{shown}" + ("" if default_port else f":{port}")


def parse_allowed_origins(text: str | Sequence[str]) -> tuple[str, ...]:
    """`--allowed-origins` (a comma list, or its items) as origin keys; ValueError naming a bad one."""
    items = text.split(",") if isinstance(text, str) else list(text)
    keys: list[str] = []
    for item in (item.strip() for item in items):
        if not item:
            continue
        key = origin_key(item)
        if key is None:
            raise ValueError(f"--allowed-origins: {item!r} is not an origin; give "
                             "scheme://host[:port] with scheme http or https, for example "
                             "https://ops.example.com")
        keys.append(key)
    return tuple(keys)


def header_values(headers: Headers, name: bytes) -> list[bytes]:
    return [value for key, value in headers if key.lower() == name]


def token_refusal(headers: Headers, token: str | None) -> Reason | None:
    """None when the handshake may pass the token check of an endpoint whose token is `token`
    (None: the endpoint has none); else why not. Exactly one `Authorization` header, scheme
    `Bearer` in any case (RFC 7235), the right token, compared in constant time."""
    if token is None:
        return None
    values = header_values(headers, b"authorization")
    if not values:
        return Reason.TOKEN_MISSING
    if len(values) != 1:
        return Reason.TOKEN_WRONG
    scheme, _, credentials = values[0].strip().partition(b" ")
    if scheme.lower() != b"bearer" or not hmac.compare_digest(credentials.strip(), token.encode()):
        return Reason.TOKEN_WRONG
    return None


def authorized(headers: Headers, token: str) -> bool:
    """Whether the handshake carries exactly one `Authorization: Bearer` with `token`."""
    return token_refusal(headers, token) is None


def origin_refused(headers: Headers, allowed: frozenset[str]) -> bool:
    """B1: True when the handshake carries an Origin (a browser's) that is not allowed."""
    values = header_values(headers, b"origin")
    if not values:
        return False
    key = origin_key(values[-1].decode("latin-1"))
    return len(values) != 1 or key is None or key not in allowed


def address_key(address: str) -> str:
    """The throttling table's key of a peer address: IPv4 as it is, IPv6 by its /64."""
    try:
        parsed = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.IPv6Network((parsed, 64), strict=False))
    return str(parsed)


def is_loopback(address: str) -> bool:
    try:
        parsed = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        parsed = parsed.ipv4_mapped
    return parsed.is_loopback


@attrs.define
class _Entry:
    """One address's refusals: per endpoint, the times within the window and the throttle."""

    refused_at: dict[str, collections.deque[float]] = attrs.Factory(dict)
    throttled_until: dict[str, float] = attrs.Factory(dict)
    logged_at: float | None = None
    unlogged: int = 0


class RefusalTable:
    """B5's table: refusals by (address, endpoint), the throttles they start, and which
    refusals to log. Bounded: at most `max_entries` addresses, least recently refused first out."""

    def __init__(self, *, limit: int = REFUSALS_BEFORE_THROTTLE, window_s: float = WINDOW_S,
                 throttle_s: float = THROTTLE_S, log_every_s: float = LOG_EVERY_S,
                 max_entries: int = MAX_ENTRIES, exempt_loopback: bool = True) -> None:
        self.limit = limit
        self.window_s = window_s
        self.throttle_s = throttle_s
        self.log_every_s = log_every_s
        self.max_entries = max_entries
        self.exempt_loopback = exempt_loopback
        self._entries: collections.OrderedDict[str, _Entry] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def throttled(self, address: str, endpoint: str, now: float) -> bool:
        """Whether handshakes without a valid token from `address` on `endpoint` get 429 now."""
        entry = self._entries.get(address_key(address))
        if entry is None:
            return False
        until = entry.throttled_until.get(endpoint)
        if until is None:
            return False
        if now < until:
            return True
        del entry.throttled_until[endpoint]
        return False

    def refused(self, address: str, endpoint: str, reason: Reason, now: float) -> LogLine | None:
        """Record a refusal; the line to log for it (None: it is summed into a later one).
        A 429 (`Reason.THROTTLED`) is logged the same way but never counts toward the limit."""
        key = address_key(address)
        entry = self._entries.pop(key, None) or _Entry()
        self._entries[key] = entry  # the most recently refused last
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        started = False
        if reason is not Reason.THROTTLED and not (self.exempt_loopback and is_loopback(address)):
            times = entry.refused_at.setdefault(endpoint, collections.deque())
            times.append(now)
            while times and times[0] <= now - self.window_s:
                times.popleft()
            while len(times) > self.limit + 1:  # only whether the limit is passed matters
                times.popleft()
            if len(times) > self.limit:
                started = endpoint not in entry.throttled_until
                entry.throttled_until[endpoint] = now + self.throttle_s
                times.clear()
        if entry.logged_at is not None and now - entry.logged_at < self.log_every_s and not started:
            entry.unlogged += 1
            return None
        line = LogLine(address=address, endpoint=endpoint, reason=reason, repeats=entry.unlogged,
                       throttled=started)
        entry.logged_at, entry.unlogged = now, 0
        return line


@attrs.frozen
class HandshakeGate:
    """B1 and B5 at a handshake: the endpoint tokens, the allowed origins and the table."""

    tokens: Mapping[str, str | None]  # endpoint path -> its token (None: open)
    allowed_origins: frozenset[str] = frozenset()
    table: RefusalTable = attrs.Factory(RefusalTable)
    # endpoint path -> more tokens it takes (C1: the viewer token on /v1/admin, reads only)
    more_tokens: Mapping[str, tuple[str, ...]] = attrs.Factory(dict)

    def token_problem(self, path: str, headers: Headers) -> Reason | None:
        """Why the handshake of `path` fails its token check (None: it passes): the endpoint's
        token, or one of its `more_tokens`."""
        problem = token_refusal(headers, self.tokens.get(path))
        if problem is not None and any(token_refusal(headers, more) is None
                                       for more in self.more_tokens.get(path, ())):
            return None
        return problem

    def check(self, path: str, headers: Headers, address: str, now: float) -> Refusal | None:
        """None to go on with the handshake of `path` (a known endpoint); else the refusal."""
        token_problem = self.token_problem(path, headers)
        valid_token = token_problem is None and self.tokens.get(path) is not None
        if not valid_token and self.table.throttled(address, path, now):
            return self._refuse(429, Reason.THROTTLED, path, address, now, (
                f"too many refused handshakes from this address on {path}; retry after "
                f"{round(self.table.throttle_s)} s with the right token").encode(),
                headers=((b"retry-after", str(round(self.table.throttle_s)).encode()),))
        if origin_refused(headers, self.allowed_origins):
            return self._refuse(403, Reason.ORIGIN, path, address, now, (
                b"a handshake with an Origin header (a browser page) is refused unless the "
                b"coordinator lists that origin in --allowed-origins; a client that is no browser "
                b"sends no Origin header"))
        if token_problem is not None:
            return self._refuse(401, token_problem, path, address, now,
                                b"exactly one 'Authorization: Bearer <token>' header with the "
                                b"right token is required")
        return None

    def _refuse(self, status: int, reason: Reason, path: str, address: str, now: float,
                body: bytes, headers: tuple[tuple[bytes, bytes], ...] = ()) -> Refusal:
        return Refusal(status=status, reason=reason, body=body, headers=headers,
                       log=self.table.refused(address, path, reason, now))
