"""What waiting cannot heal (D3, docs/protocol.md): decided here; the tools exit 2.

`rsc consume` and `rsc produce` retry what may heal (a coordinator or Redis that
is down, a prefix without routing). These never do: a session refused with
HTTP 401, 403 or 404 (a wrong token, a path the coordinator does not serve), a
Redis URL whose db is not a number, a db index the server does not have, a
Redis password or user it refuses (WRONGPASS, NOAUTH), a command or key its ACL
does not grant (NOPERM, K6), a Sentinel SERVICE that no sentinel knows (K1), a Redis
server certificate that does not verify or a TLS handshake it refuses, a redis:// URL
whose port speaks TLS (`tls_checked` finds it by a handshake, off the event loop), and a
rediss:// URL whose port answers plain Redis (found by a plain PING, the same way).
Each ends the tool with one line and exit code 2.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable
from typing import TypeVar
from urllib.parse import unquote, urlsplit

import redis

from rsc.common.error_family import AuthenticationError, ConfigurationError
from rsc.common.error_family import Unrecoverable as Unrecoverable  # re-exported
from rsc.common.redact import redact_url
from rsc.common.redis_connect import (
    SentinelServiceUnknown,
    is_access_error,
    is_permission_error,
    is_sentinel_url,
    parse_sentinel_url,
    script_denial,
    tls_mismatch_line,
)
from rsc.common.wording import option

T = TypeVar("T")

EXIT_UNRECOVERABLE = 2
TLS_PROBE_TIMEOUT_S = 2.0
_CREDENTIALS_REFUSED = ("WRONGPASS", "NOAUTH", "invalid password", "invalid username-password")
PERMANENT_HTTP_STATUS = frozenset({401, 403, 404})
_PERMANENT_REDIS_ERRORS = ("DB index is out of range", "invalid DB index", "WRONGPASS",
                           "invalid password", "invalid username-password")




class RedisNeedsTls(redis.ConnectionError):
    """A redis:// URL whose server speaks TLS on that port: its text is the line to print."""


class RedisWithoutTls(redis.ConnectionError):
    """A rediss:// URL whose server answers plain Redis on that port: its text is the line."""


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
    if is_access_error(exc) or isinstance(exc, RedisNeedsTls | RedisWithoutTls) \
            or tls_error(exc) is not None:
        return True
    if not isinstance(exc, redis.ResponseError):
        return False
    text = str(exc)
    return any(marker in text for marker in _PERMANENT_REDIS_ERRORS)


def redis_unrecoverable(exc: BaseException, redis_url: str) -> Unrecoverable:
    """The error to raise for a permanent Redis error (L1): AuthenticationError for refused
    credentials or a missing permission, ConfigurationError for the rest (TLS, db, Sentinel)."""
    line = redis_unrecoverable_line(exc, redis_url)
    refused = (is_permission_error(exc)
               or isinstance(exc, redis.AuthenticationError | redis.exceptions.AuthorizationError)
               or any(marker in str(exc) for marker in _CREDENTIALS_REFUSED))
    if refused and tls_error(exc) is None and not isinstance(exc, RedisNeedsTls):
        return AuthenticationError(line)
    return ConfigurationError(line)


def refusal_error(status_code: int, line: str) -> Unrecoverable:
    """The error to raise for a handshake refused for good (L1): 401 and 403 are a token
    refused (AuthenticationError), 404 a path the coordinator does not serve."""
    if status_code in (401, 403):
        return AuthenticationError(line)
    return ConfigurationError(line)


def redis_unrecoverable_line(exc: BaseException, redis_url: str) -> str:
    """The line for a permanent Redis error, naming what to fix (the library's parameter,
    or in `rsc` the flags)."""
    shown = redact_url(redis_url)
    url_option = option("redis_url", "--redis-url / RSC_REDIS_URL")
    ca_option = option("redis_url", "--redis-url or RSC_REDIS_CA_FILE")
    if isinstance(exc, RedisNeedsTls | RedisWithoutTls):
        return str(exc)
    failure = tls_error(exc)
    if isinstance(failure, ssl.SSLCertVerificationError):
        return (f"TLS verification of Redis at {shown} failed: {tls_reason(failure)}; give the CA "
                f"that signed its certificate as ssl_ca_certs=FILE in {ca_option}")
    if failure is not None:
        return (f"TLS handshake with Redis at {shown} failed: {tls_reason(failure)} (does that port "
                "serve TLS? does the server want a client certificate, ssl_certfile= and "
                f"ssl_keyfile= in {url_option}?)")
    if is_permission_error(exc):
        called = script_denial(str(exc))
        what = f"{exc} (the script's {called})" if called else str(exc)
        return (f"Redis at {shown} refuses this user a permission: {what} (grant the role's ACL, "
                f"docs/operations/redis.md, or use another user in {url_option})")
    if isinstance(exc, redis.AuthenticationError | redis.exceptions.AuthorizationError):
        what = option("redis_url", "--redis-url / RSC_REDIS_URL or RSC_REDIS_PASSWORD")
        return f"Redis at {shown} refuses the credentials: {exc} (fix the user and password of {what})"
    if isinstance(exc, SentinelServiceUnknown):
        return f"{exc} (fix {url_option})"
    return f"Redis at {shown} refuses this URL: {exc} (fix {url_option})"


def check_permanent(exc: BaseException, redis_url: str) -> None:
    """Raise Unrecoverable (with its line) when `exc` is a permanent Redis error (D3, K6)."""
    if redis_error_is_permanent(exc):
        raise redis_unrecoverable(exc, redis_url) from exc


def tls_error(exc: BaseException) -> ssl.SSLError | None:
    """The ssl.SSLError behind a Redis connection error, None when it was not TLS."""
    seen = 0
    cause: BaseException | None = exc
    while cause is not None and seen < 10:
        if isinstance(cause, ssl.SSLError):
            return cause
        cause = cause.__cause__ or cause.__context__
        seen += 1
    return None


def tls_reason(error: ssl.SSLError) -> str:
    if isinstance(error, ssl.SSLCertVerificationError) and error.verify_message:
        return str(error.verify_message)
    return str(error.reason or error).replace("_", " ").lower()


_PLAIN_PORTS: set[tuple[str, int]] = set()  # addresses a probe found not speaking TLS


def tls_checked(call: Callable[[], T], redis_url: str) -> T:
    """`call()` (blocking, in a thread); a reset connection of a redis:// URL whose port
    speaks TLS raises RedisNeedsTls, with the line saying to write rediss://, and a failed
    connection of a rediss:// URL whose port answers plain Redis raises RedisWithoutTls."""
    try:
        return call()
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        if isinstance(exc, redis.ConnectionError):
            line = _needs_tls(exc, redis_url)
            if line is not None:
                raise RedisNeedsTls(line) from exc
        plain = tls_mismatch_line(exc, redis_url)
        if plain is not None:
            raise RedisWithoutTls(plain) from exc
        raise


def _needs_tls(exc: redis.ConnectionError, redis_url: str) -> str | None:
    parts = urlsplit(redis_url)
    if parts.scheme.lower() != "redis" or isinstance(exc, redis.TimeoutError):
        return None
    text = str(exc)
    cause = exc.__cause__ or exc.__context__
    if not (isinstance(cause, ConnectionResetError | BrokenPipeError)
            or "reset by peer" in text or "Connection closed by server" in text):
        return None
    try:
        address = (parts.hostname or "localhost", parts.port or 6379)
    except ValueError:
        return None
    if address in _PLAIN_PORTS or not speaks_tls(*address):
        _PLAIN_PORTS.add(address)
        return None
    rediss = "rediss" + redact_url(redis_url)[len("redis"):]
    return (f"Redis at {redact_url(redis_url)} speaks TLS on that port: write {rediss} (the CA "
            "as ssl_ca_certs=FILE in the URL or RSC_REDIS_CA_FILE)")


def speaks_tls(host: str, port: int, timeout_s: float = TLS_PROBE_TIMEOUT_S) -> bool:
    """Whether the server at host:port answers a TLS handshake (certificate not checked):
    a handshake that completes, or one the server ends with a TLS alert."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw, \
                context.wrap_socket(raw, server_hostname=host):
            return True
    except ssl.SSLError as exc:  # an alert is TLS; bytes that are no TLS record are not
        return "WRONG_VERSION_NUMBER" not in str(exc) and "record layer failure" not in str(exc) \
            and exc.reason not in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "HTTP_REQUEST")
    except OSError:
        return False
