"""What waiting cannot heal (D3, docs/protocol.md): decided here; the tools exit 2.

`rsc consume` and `rsc produce` retry what may heal (a coordinator or Redis that
is down, a prefix without routing). These never do: a session refused with
HTTP 401, 403 or 404 (a wrong token, a path the coordinator does not serve), a
Redis URL whose db is not a number, a db index the server does not have, a
Redis password it refuses. Each ends the tool with one line and exit code 2.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

import redis

EXIT_UNRECOVERABLE = 2
PERMANENT_HTTP_STATUS = frozenset({401, 403, 404})
_PERMANENT_REDIS_ERRORS = ("DB index is out of range", "invalid DB index", "WRONGPASS",
                           "invalid password", "invalid username-password")


class Unrecoverable(Exception):
    """A failure no retry can fix; its text is the one line the tool prints before exit 2."""


def refusal_is_permanent(status_code: int) -> bool:
    """An HTTP refusal of the handshake that a retry cannot change (401, 403, 404)."""
    return status_code in PERMANENT_HTTP_STATUS


def redis_url_problem(url: str) -> str | None:
    """Why `url` can never work (a db that is not a number), None when nothing is seen."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        return None
    db = unquote(parts.path).strip("/")
    if db and not db.isdigit():
        return (f"bad Redis URL {url}: the db {db!r} is not a number "
                "(redis://HOST:PORT/N, N from 0)")
    return None


def redis_error_is_permanent(exc: BaseException) -> bool:
    """A Redis error that every retry would get again (a bad db index, a refused password)."""
    if not isinstance(exc, redis.ResponseError | redis.AuthenticationError):
        return False
    text = str(exc)
    return any(marker in text for marker in _PERMANENT_REDIS_ERRORS)


def redis_unrecoverable_line(exc: BaseException, redis_url: str) -> str:
    """The line for a permanent Redis error."""
    return f"Redis at {redis_url} refuses this URL: {exc} (fix --redis-url / RSC_REDIS_URL)"
