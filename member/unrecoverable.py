"""What waiting cannot heal (D3, docs/protocol.md): decided here; the tools exit 2.

`rsc consume` and `rsc produce` retry what may heal (a coordinator or Redis that
is down, a prefix without routing). These never do: a session refused with
HTTP 401, 403 or 404 (a wrong token, a path the coordinator does not serve), a
Redis URL whose db is not a number, a db index the server does not have, a
Redis password or user it refuses (WRONGPASS, NOAUTH), a command or key its ACL
does not grant (NOPERM, K6), a Sentinel SERVICE that no sentinel knows (K1).
Each ends the tool with one line and exit code 2.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

import redis

from rsc.common.redact import redact_url
from rsc.common.redis_connect import (
    SentinelServiceUnknown,
    is_access_error,
    is_permission_error,
    is_sentinel_url,
    parse_sentinel_url,
    script_denial,
)

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
    """Why `url` can never work (a db that is not a number, a malformed Sentinel URL), None
    when nothing is seen."""
    if is_sentinel_url(url):
        try:
            parse_sentinel_url(url)
        except ValueError as exc:
            return f"bad Redis URL {redact_url(url)}: {exc}"
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        return None
    db = unquote(parts.path).strip("/")
    if db and not db.isdigit():
        return (f"bad Redis URL {redact_url(url)}: the db {db!r} is not a number "
                "(redis://HOST:PORT/N, N from 0)")
    return None


def redis_error_is_permanent(exc: BaseException) -> bool:
    """A Redis error that every retry would get again: a bad db index, a refused password or
    user, a missing ACL permission, an unknown Sentinel SERVICE (K6, K1)."""
    if is_access_error(exc):
        return True
    if not isinstance(exc, redis.ResponseError):
        return False
    text = str(exc)
    return any(marker in text for marker in _PERMANENT_REDIS_ERRORS)


def redis_unrecoverable_line(exc: BaseException, redis_url: str) -> str:
    """The line for a permanent Redis error, naming what to fix."""
    shown = redact_url(redis_url)
    if is_permission_error(exc):
        called = script_denial(str(exc))
        what = f"{exc} (the script's {called})" if called else str(exc)
        return (f"Redis at {shown} refuses this user a permission: {what} (grant the role's ACL, "
                "docs/operations/redis.md, or use another user in --redis-url / RSC_REDIS_URL)")
    if isinstance(exc, redis.AuthenticationError | redis.exceptions.AuthorizationError):
        return (f"Redis at {shown} refuses the credentials: {exc} (fix the user and password of "
                "--redis-url / RSC_REDIS_URL or RSC_REDIS_PASSWORD)")
    if isinstance(exc, SentinelServiceUnknown):
        return f"{exc} (fix --redis-url / RSC_REDIS_URL)"
    return f"Redis at {shown} refuses this URL: {exc} (fix --redis-url / RSC_REDIS_URL)"


def check_permanent(exc: BaseException, redis_url: str) -> None:
    """Raise Unrecoverable (with its line) when `exc` is a permanent Redis error (D3, K6)."""
    if redis_error_is_permanent(exc):
        raise Unrecoverable(redis_unrecoverable_line(exc, redis_url)) from exc
