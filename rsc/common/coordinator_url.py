"""The coordinator's address as every client checks it, and what a refused handshake means.

One home for two decisions that the member side (member/session.py: members, producers,
`rsc consume`, `rsc produce`) and the admin client (rsc/admin/client.py) used to make each
their own way:

- `url_problem(url)`: what is wrong with a coordinator URL no retry can fix (no scheme, an
  HTTP or a Redis URL, a port out of range, no host, a query), or None. Each tool wraps the
  problem in its own line (where the URL came from, its exit code).
- `handshake_hint(...)`: what an HTTP status on the websocket handshake most likely means
  and how to fix it (400 TLS, 401 token, 404 path, 503 full).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from rsc.common.redact import redact_url
from rsc.common.wording import option

REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+sentinel", "rediss+sentinel")
DEFAULT_HOSTPORT = "127.0.0.1:8765"

_NETLOC = re.compile(r"^(?P<host>\[[^\]]+\]|[^:/\[\]]+)(:(?P<port>[^:/]*))?$")


def url_problem(url: str) -> str | None:
    """What is wrong with `url` as a coordinator URL (ws://HOST:PORT or wss://), or None."""
    if "://" not in url:
        return f"it has no scheme; write it as ws://{url.lstrip('/') or DEFAULT_HOSTPORT}"
    scheme, _, rest = url.partition("://")
    scheme = scheme.lower()
    netloc = rest.split("/")[0]
    if scheme in REDIS_SCHEMES:
        return ("that is a Redis URL; the coordinator URL is the ws://HOST:PORT that "
                "`rsc coordinator` prints as `listening on ...` (its own port, 8765 by default), "
                "and Redis goes in --redis-url (RSC_REDIS_URL)")
    if scheme in ("http", "https"):
        secure = "s" if scheme == "https" else ""
        return (f"the scheme is {scheme}://, the coordinator speaks WebSocket: use "
                f"ws{secure}://{netloc or DEFAULT_HOSTPORT}")
    if scheme not in ("ws", "wss"):
        return f"the scheme is {scheme}://; use ws:// or wss://"
    parts = urlsplit(url)
    match = _NETLOC.match(parts.netloc.rpartition("@")[2])
    if not match:
        return f"it has no host; for example ws://{DEFAULT_HOSTPORT}"
    port = match["port"]
    if port not in (None, "") and (not port.isdigit() or not 1 <= int(port) <= 65535):
        return f"port {port} is not in 1..65535"
    if parts.query or parts.fragment:
        return "it must not have a query or fragment"
    return None


def shown(url: str) -> str:
    """The URL as a line may show it (a Redis URL given by mistake may hold a password)."""
    return redact_url(url) if url.partition("://")[0].lower() in REDIS_SCHEMES else url


def host_port(url: str) -> str:
    """HOST:PORT of a coordinator URL (for the hints), the default port of its scheme if none."""
    parts = urlsplit(url)
    match = _NETLOC.match(parts.netloc.rpartition("@")[2])
    if not match:
        return DEFAULT_HOSTPORT
    port = match["port"] or ("443" if parts.scheme.lower() == "wss" else "80")
    return f"{match['host']}:{port}"


def handshake_hint(status: int, *, endpoint: str, hostport: str, token_given: bool) -> str | None:
    """The likely cause and fix of HTTP `status` on a handshake to /v1/`endpoint`; None for a
    status the coordinator does not answer with."""
    if status == 400:
        return f"the coordinator serves TLS on this port: use wss://{hostport}"
    if status == 401:
        if token_given:
            given = option("token=", "--token or RSC_TOKEN")
            return f"the token from {given} is not the coordinator's {endpoint} token"
        give = option("give it as token=", "pass --token or set RSC_TOKEN")
        return f"the coordinator needs its {endpoint} token: {give}"
    if status == 403:
        return ("the coordinator refuses handshakes that carry an Origin header (browsers send "
                "one): send none, or have the coordinator list the origin in --allowed-origins")
    if status == 429:
        return ("too many refused handshakes from this address: wait a minute and use the "
                "right token")
    if status == 404:
        return (f"no such endpoint: give the coordinator as ws://HOST:PORT, for example "
                f"ws://{hostport}; the tools add /v1/{endpoint}")
    if status == 503:
        return "the coordinator is at its session limit (--max-sessions)"
    return None
