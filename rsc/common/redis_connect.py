"""Connect to one Redis server, to a Redis Cluster through any one of its nodes, or to the master
that Redis Sentinel names (docs/protocol.md K1, K2, K7).

- `redis://` / `rediss://` / `unix://`: the URL names one node; `INFO cluster` says whether
  it runs in cluster mode (`cluster_enabled:1`), and then the client is redis-py's
  `RedisCluster`, which learns the slot map from that node and follows MOVED and ASK
  redirections and a cluster failover.
- `redis+sentinel://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB]` (and
  `rediss+sentinel://`, TLS to the master): redis-py's `Sentinel(...).master_for(SERVICE)`,
  which asks the sentinels for the master again on every reconnect. The sentinels' own
  credentials come from the query (`sentinel_username=`, `sentinel_password=`) or
  RSC_SENTINEL_PASSWORD. Sentinels that are all unreachable are an unreachable Redis (a
  ConnectionError at first use); a SERVICE that no reachable sentinel knows is
  `SentinelServiceUnknown`, a configuration error.
- A URL without a password takes it from RSC_REDIS_PASSWORD (empty = unset): the URL wins.
- A connection to a plain URL whose address now serves a replica (a failover promoted
  another server; READONLY) is dropped and the error is `ReplicaNow`, a ConnectionError that
  every caller retries; a Sentinel-managed one does the same through redis-py and asks the
  sentinels again.
- A NOPERM reply names the command and its first key (Redis names neither for a key).

A `rediss://` URL speaks TLS to every node: the CA and an optional client certificate come
from the URL's query (`ssl_ca_certs`, `ssl_certfile`, `ssl_keyfile`) or RSC_REDIS_CA_FILE
(rsc/common/tls.py). The coordinator (actors/) and the members (member/) both connect
through here.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import threading
import time
import urllib.parse
import weakref
from collections.abc import Mapping

import attrs
import redis
from redis.backoff import NoBackoff
from redis.connection import parse_url
from redis.retry import Retry
from redis.sentinel import (
    MasterNotFoundError,
    Sentinel,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)

from rsc.common.redact import redact_url, remember_secret
from rsc.common.redis_sentinel_api import base_discover_master, master_for, new_sentinel
from rsc.common.tls import REDIS_CA_FILE_ENV, REDIS_TLS_FILES, redis_tls_options

REDIS_PASSWORD_ENV = "RSC_REDIS_PASSWORD"
SENTINEL_PASSWORD_ENV = "RSC_SENTINEL_PASSWORD"
PLAIN_SCHEMES = ("redis", "rediss", "unix")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
SCHEMES = (*PLAIN_SCHEMES, *SENTINEL_SCHEMES)
DEFAULT_SENTINEL_PORT = 26379
SENTINEL_TIMEOUT_S = 2.0  # a sentinel that does not answer within this is passed over
SENTINEL_FORM = "redis+sentinel://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB]"
# query options a Sentinel URL may carry besides the sentinels' credentials
_SENTINEL_QUERY = frozenset({"sentinel_username", "sentinel_password", *REDIS_TLS_FILES,
                             "ssl_cert_reqs", "ssl_check_hostname"})


class SentinelServiceUnknown(redis.RedisError):
    """No reachable sentinel knows the URL's SERVICE: a configuration error (K1), never retried."""


class ReplicaNow(redis.ConnectionError):
    """The server at a plain URL answered READONLY: it serves a replica now (a failover, K2).
    The connection was dropped; a retry connects again (to the new master, where the address
    follows it)."""


@attrs.frozen
class SentinelTarget:
    """What a `redis+sentinel://` URL names."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None
    tls: bool = False
    tls_options: Mapping[str, str] = attrs.field(factory=dict)


def url_scheme(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


def is_sentinel_url(url: str) -> bool:
    return url_scheme(url) in SENTINEL_SCHEMES


def check_redis_url(url: str) -> None:
    """ValueError naming what is wrong with `url` as a Redis URL (scheme, hosts, service, db)."""
    scheme = url_scheme(url)
    if scheme not in SCHEMES:
        raise ValueError(f"a Redis URL starts with one of {', '.join(s + '://' for s in SCHEMES)}"
                         f", not {scheme + '://' if scheme else 'no scheme'}")
    if scheme in SENTINEL_SCHEMES:
        parse_sentinel_url(url)


def parse_sentinel_url(url: str, environ: Mapping[str, str] = os.environ) -> SentinelTarget:
    """The sentinels, service, db and credentials of a Sentinel URL; ValueError names what is wrong.

    Passwords absent from the URL come from RSC_REDIS_PASSWORD (the master's) and
    RSC_SENTINEL_PASSWORD (the sentinels'); an empty variable is unset.
    """
    scheme, _, rest = url.partition("://")
    if scheme.lower() not in SENTINEL_SCHEMES:
        raise ValueError(f"not a Sentinel URL ({SENTINEL_FORM})")
    rest, _, query_text = rest.partition("?")
    rest = rest.split("#", 1)[0]
    netloc, _, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user_text, colon, password_text = userinfo.partition(":")
        username = urllib.parse.unquote(user_text) or None
        password = urllib.parse.unquote(password_text) if colon and password_text else None
    sentinels = tuple(_sentinel_address(part) for part in hosts.split(","))
    segments = [urllib.parse.unquote(part) for part in path.split("/")] if path else []
    if not segments or not segments[0]:
        raise ValueError(f"no SERVICE: the master's name as the sentinels know it "
                         f"({SENTINEL_FORM})")
    if len(segments) > 2 or (len(segments) == 2 and not segments[1].isdigit()):
        raise ValueError(f"after the SERVICE {segments[0]!r} only a db number may "
                         f"follow, got {'/'.join(segments[1:])!r} ({SENTINEL_FORM})")
    query: dict[str, str] = {}
    for name, values in urllib.parse.parse_qs(query_text, keep_blank_values=True).items():
        if name not in _SENTINEL_QUERY:
            raise ValueError(f"unknown query option {name!r} (known: "
                             f"{', '.join(sorted(_SENTINEL_QUERY))})")
        query[name] = values[-1]
    tls = scheme.lower() == "rediss+sentinel"
    tls_options = {name: query[name] for name in ("ssl_cert_reqs", "ssl_check_hostname", *REDIS_TLS_FILES)
                   if query.get(name)}
    if tls:
        ca_file = environ.get(REDIS_CA_FILE_ENV)
        if "ssl_ca_certs" not in tls_options and ca_file:
            tls_options["ssl_ca_certs"] = ca_file
        for name in REDIS_TLS_FILES:
            if (file := tls_options.get(name)) and not os.path.isfile(file):
                raise ValueError(f"{name}: no such file {file!r}")
    elif tls_options:
        raise ValueError("TLS options need rediss+sentinel://")
    return SentinelTarget(
        sentinels=sentinels, service=segments[0], db=int(segments[1]) if len(segments) == 2 else 0,
        username=username, password=password or environ.get(REDIS_PASSWORD_ENV) or None,
        sentinel_username=query.get("sentinel_username") or None,
        sentinel_password=query.get("sentinel_password") or environ.get(SENTINEL_PASSWORD_ENV) or None,
        tls=tls, tls_options=tls_options)


def _sentinel_address(text: str) -> tuple[str, int]:
    text = text.strip()
    if text.startswith("["):  # [IPv6]:PORT
        host, _, port_text = text[1:].partition("]")
        port_text = port_text.removeprefix(":")
    else:
        host, _, port_text = text.rpartition(":") if ":" in text else (text, "", "")
    if not host:
        raise ValueError("a sentinel address is empty, expected HOST:PORT[,HOST:PORT...]")
    if not port_text:
        return host, DEFAULT_SENTINEL_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"sentinel {text!r}: the port {port_text!r} is not a port number")
    return host, int(port_text)


def connect(url: str, **options: object) -> redis.Redis | redis.RedisCluster:
    """A sync client for `url`: `RedisCluster` when that node is in cluster mode, a Sentinel-managed
    master for a Sentinel URL, else `Redis`.

    `options` go to the client (e.g. decode_responses, socket_timeout). Asks the node (or
    the sentinels) once; when it cannot be reached (or refuses us) the answer is the plain
    client, which connects lazily and reports the error at its first use, as before:
    cluster mode is found only on a node that answers. A URL that is not a Redis URL, or
    names a TLS file that does not exist, raises ValueError; a Sentinel SERVICE that the
    sentinels that answer do not know raises SentinelServiceUnknown.
    """
    check_redis_url(url)
    if is_sentinel_url(url):
        return _connect_sentinel(parse_sentinel_url(url), options)
    parts = urllib.parse.urlsplit(url)
    remember_secret(urllib.parse.unquote(parts.password or ""))
    options = {**redis_tls_options(url), **options}
    env_password = os.environ.get(REDIS_PASSWORD_ENV) or None
    if not parts.password and env_password and "password" not in options:
        options["password"] = env_password
        remember_secret(env_password)
    if parts.scheme in ("redis", "rediss") and "connection_class" not in options:
        options["connection_class"] = (FollowingSSLConnection if parts.scheme == "rediss"
                                       else FollowingConnection)
    probe = redis.Redis.from_url(url, **options)
    try:
        enabled = str(probe.info("cluster").get("cluster_enabled", 0)) == "1"
    except redis.ResponseError:
        if _cluster_node_at_database_0(probe):  # the SELECT of the URL's database failed
            probe.close()
            raise ValueError(f"{redact_url(url)} names a database other than 0, but it is a Redis "
                             "Cluster node: use database 0") from None
        enabled = False  # a server without the cluster section, or a user without INFO
    except (redis.ConnectionError, redis.TimeoutError):
        enabled = False  # unreachable: the plain client reports it at its first use
    if not enabled:
        if options.get("connection_class") in (FollowingConnection, FollowingSSLConnection):
            # what its pool was built from, kept as given (the URL's words win, as in redis-py)
            from_url: dict[str, object] = parse_url(url)  # type: ignore[no-untyped-call]
            kept = {**options, **from_url}
            kept.pop("connection_class", None)
            _PLAIN[probe] = PlainOptions(
                kept, tls=options["connection_class"] is FollowingSSLConnection)
        return probe
    probe.close()
    options.pop("connection_class", None)
    return redis.RedisCluster.from_url(url, **options)


def _cluster_node_at_database_0(probe: redis.Redis) -> bool:
    pool = probe.connection_pool
    if int(pool.connection_kwargs.get("db") or 0) == 0:
        return False
    at_0 = redis.ConnectionPool(connection_class=pool.connection_class,
                                **{**pool.connection_kwargs, "db": 0})
    try:
        return str(redis.Redis(connection_pool=at_0).info("cluster").get("cluster_enabled", 0)) == "1"
    except redis.RedisError:
        return False
    finally:
        at_0.disconnect()


def is_cluster(client: object) -> bool:
    """True for a cluster client (its pipelines route each command to its slot's node)."""
    return isinstance(client, redis.RedisCluster)


# --- connections --------------------------------------------------------------------------


class _NamesDenials:
    """A connection mixin: a NOPERM reply names the command and its first key (K6)."""

    _last_command: tuple[str, ...] = ()

    def send_command(self, *args: object, **kwargs: object) -> None:
        super().send_command(*args, **kwargs)  # type: ignore[misc]
        # after the send: a pipeline's packed send (below) clears it, a single command sets it
        words = _text(args[0]).split() if args else []
        if not words or words[0].upper() in ("AUTH", "HELLO"):
            self._last_command = ()
        elif len(words) == 1 and len(args) > 1 and _is_key_like(args[1]):
            self._last_command = (words[0].upper(), _text(args[1]))  # the command and its key
        else:
            self._last_command = tuple(word.upper() for word in words)

    def send_packed_command(self, *args: object, **kwargs: object) -> None:
        self._last_command = ()
        super().send_packed_command(*args, **kwargs)  # type: ignore[misc]

    def read_response(self, *args: object, **kwargs: object) -> object:
        try:
            return super().read_response(*args, **kwargs)  # type: ignore[misc]
        except redis.exceptions.NoPermissionError as exc:
            if not self._last_command:
                raise
            called = " ".join(_text(part) for part in self._last_command)
            raise redis.exceptions.NoPermissionError(f"{exc} (command: {called})") from None


def _is_key_like(part: object) -> bool:
    text = _text(part)
    return 0 < len(text) <= 200 and not any(char.isspace() for char in text)


def _text(part: object) -> str:
    return part.decode("utf-8", "replace") if isinstance(part, bytes) else str(part)


class FollowingConnection(_NamesDenials, redis.Connection):
    """A connection to a plain URL that drops itself when the server answers READONLY (K2)."""

    def read_response(self, *args: object, **kwargs: object) -> object:
        try:
            return super().read_response(*args, **kwargs)
        except redis.ReadOnlyError as exc:
            self.disconnect()  # type: ignore[no-untyped-call]
            raise ReplicaNow(f"{self.host}:{self.port} serves a read-only replica now ({exc}): "
                             "a failover moved the master") from None


class FollowingSSLConnection(FollowingConnection, redis.SSLConnection):
    """`FollowingConnection` over TLS (rediss://)."""


class _SentinelConnection(_NamesDenials, SentinelManagedConnection):
    """redis-py's Sentinel-managed connection (READONLY: disconnect and ask the sentinels again)."""


class _SentinelSSLConnection(_NamesDenials, SentinelManagedSSLConnection):
    """The same over TLS (rediss+sentinel://)."""


# --- Sentinel ----------------------------------------------------------------------------


class _Sentinel(Sentinel):
    """redis-py's Sentinel, telling an unknown SERVICE (a configuration error) from a master
    that is down or being replaced, or sentinels that do not answer (an outage:
    MasterNotFoundError, a ConnectionError), each said in one short line."""

    def discover_master(self, service_name: str) -> tuple[str, int]:
        try:
            return base_discover_master(self, service_name)
        except MasterNotFoundError:
            answered, known = sentinel_view(self, service_name)
            addresses = sentinel_addresses(self)
            if answered and not known:
                raise SentinelServiceUnknown(unknown_service_line(self, service_name)) from None
            if not answered:
                raise MasterNotFoundError(f"No master found for {service_name!r}: no sentinel "
                                          f"at {addresses} answers") from None
            raise MasterNotFoundError(f"No master found for {service_name!r}: the sentinels at "
                                      f"{addresses} name no live master now (a failover?)") from None


@attrs.frozen
class PlainOptions:
    """What `connect` built a client of one plain server (redis://, rediss://) from: the
    connection options (host, port, db, credentials, timeouts, TLS files) and whether it speaks
    TLS. What another connection to the same server needs (rsc/common/trio_redis.py)."""

    options: Mapping[str, object]
    tls: bool


_PLAIN: weakref.WeakKeyDictionary[redis.Redis, PlainOptions] = weakref.WeakKeyDictionary()


def plain_options(client: object) -> PlainOptions | None:
    """The options `connect` kept for `client`, None for a client it did not build for one
    plain server (a cluster, a Sentinel-managed master, a unix socket, a client made elsewhere)."""
    return _PLAIN.get(client) if isinstance(client, redis.Redis) else None


class SentinelRedis(redis.Redis):
    """The master's client of a Sentinel URL; closing it closes the sentinels' clients too."""

    sentinel_manager: Sentinel | None = None

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.sentinel_manager is not None:
                self.sentinel_manager.close()


def sentinel_view(sentinel: Sentinel, service: str) -> tuple[bool, bool]:
    """(whether any sentinel answered, whether one that answered knows `service`)."""
    answered = False
    for client in sentinel.sentinels:
        try:
            masters = client.sentinel_masters()
        except redis.RedisError:
            continue
        answered = True
        if service in masters:
            return True, True
    return answered, False


def service_unknown(sentinel: Sentinel, service: str) -> bool:
    """True when at least one sentinel answered and none of those knows `service`."""
    answered, known = sentinel_view(sentinel, service)
    return answered and not known


def sentinel_addresses(sentinel: Sentinel) -> str:
    return ",".join("{host}:{port}".format_map(client.connection_pool.connection_kwargs)
                    for client in sentinel.sentinels)


def unknown_service_line(sentinel: Sentinel, service: str) -> str:
    addresses = sentinel_addresses(sentinel)
    return (f"no sentinel at {addresses} knows the service {service!r}: check the SERVICE of "
            f"the URL ({SENTINEL_FORM}) against `SENTINEL MASTERS`")


def _connect_sentinel(target: SentinelTarget, options: Mapping[str, object]) -> SentinelRedis:
    remember_secret(target.password)
    remember_secret(target.sentinel_password)
    # one try per sentinel and no backoff: redis-py's discovery goes on to the next sentinel,
    # and the master's client retries as configured (a retry per sentinel would multiply it)
    sentinel_options: dict[str, object] = {"socket_timeout": SENTINEL_TIMEOUT_S,
                                        "socket_connect_timeout": SENTINEL_TIMEOUT_S,
                                        "retry": Retry(NoBackoff(), 0)}
    sentinel_options.update({name: value for name, value in options.items()
                             if name in ("socket_timeout", "socket_connect_timeout", "socket_keepalive")
                             and value is not None})
    if target.sentinel_username:
        sentinel_options["username"] = target.sentinel_username
    if target.sentinel_password:
        sentinel_options["password"] = target.sentinel_password
    master_options: dict[str, object] = {**options, "db": target.db}
    if target.username:
        master_options["username"] = target.username
    if target.password:
        master_options["password"] = target.password
    if target.tls:
        master_options.update(ssl=True, **target.tls_options)
        master_options["connection_class"] = _SentinelSSLConnection
    else:
        master_options["connection_class"] = _SentinelConnection
    sentinel = new_sentinel(_Sentinel, target.sentinels, sentinel_options)
    try:
        if service_unknown(sentinel, target.service):
            raise SentinelServiceUnknown(unknown_service_line(sentinel, target.service))
    except BaseException:
        sentinel.close()
        raise
    # master_for builds its `redis_class`
    client = master_for(sentinel, target.service, SentinelRedis, master_options)
    client.sentinel_manager = sentinel
    return client


# --- errors for people -------------------------------------------------------------------

ACL_DOC = "docs/operations/redis.md"


# what Redis answers when a script calls a command or key its user's ACL does not grant
_SCRIPT_DENIALS = ("user executing the script can't", "No permissions to access")
_SCRIPT_PLACE = re.compile(r"script: ([0-9a-f]{40}), on @user_script:(\d+)")
_CALLED = re.compile(r"redis\.p?call\(\s*'([A-Za-z]+)'(?:,\s*'([A-Z]+)')?")
_scripts: dict[str, str] = {}


def remember_script(text: str) -> str:
    """Know a Lua script by its SHA1, so that a denial inside it names the command (K6)."""
    sha = hashlib.sha1(text.encode("utf-8")).hexdigest()
    _scripts[sha] = text
    return sha


def script_denial(text: str) -> str | None:
    """The command a script was refused (e.g. "XACK", from the script's own line), if known."""
    place = _SCRIPT_PLACE.search(text)
    if place is None or place[1] not in _scripts:
        return None
    lines = _scripts[place[1]].splitlines()  # as sent: line 1 may be the empty first one
    index = int(place[2]) - 1
    called = _CALLED.search(lines[index]) if 0 <= index < len(lines) else None
    if called is None:
        return None
    return " ".join(word.upper() for word in called.groups() if word)


def is_permission_error(exc: BaseException) -> bool:
    """NOPERM, or the same refusal inside a script (a plain error reply there)."""
    if isinstance(exc, redis.exceptions.NoPermissionError):
        return True
    return isinstance(exc, redis.ResponseError) and any(text in str(exc) for text in _SCRIPT_DENIALS)


def is_access_error(exc: BaseException) -> bool:
    """A refused password or user, or a command or key the user's ACL does not grant (K6):
    a configuration error, never an outage."""
    return is_permission_error(exc) or isinstance(
        exc, redis.AuthenticationError | redis.exceptions.AuthorizationError | SentinelServiceUnknown)


def error_text(exc: BaseException) -> str:
    """`exc` as one line: a permission or credentials error says it is a configuration error."""
    if is_permission_error(exc):
        called = script_denial(str(exc))
        if called is not None:
            return (f"{exc} (the script's {called}: a configuration error, the Redis user lacks a "
                    f"permission; see {ACL_DOC})")
        return f"{exc} (a configuration error: the Redis user lacks a permission; see {ACL_DOC})"
    if isinstance(exc, redis.AuthenticationError | redis.exceptions.AuthorizationError):
        return f"{exc} (a configuration error: the Redis user or password is refused)"
    if isinstance(exc, SentinelServiceUnknown):
        return f"{exc} (a configuration error)"
    return str(exc)


# --- a rediss:// URL pointed at a plain port ----------------------------------------------

PLAIN_PROBE_TIMEOUT_S = 2.0
PLAIN_PROBE_AGAIN_S = 60.0  # an address found not answering plain Redis is probed again after this
_plain_probes: dict[tuple[str, int], tuple[bool, float]] = {}
_plain_probes_lock = threading.Lock()


def answers_plain_redis(host: str, port: int, timeout_s: float = PLAIN_PROBE_TIMEOUT_S) -> bool:
    """Whether the server at host:port answers a plain-text PING with a Redis reply (`+PONG`,
    or an error such as `-NOAUTH`): a port that speaks Redis without TLS."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw:
            raw.settimeout(timeout_s)
            raw.sendall(b"PING\r\n")
            first = raw.recv(64)
    except OSError:
        return False
    return first.startswith((b"+PONG", b"-NOAUTH", b"-ERR", b"-DENIED", b"-WRONGPASS"))


def tls_mismatch_line(exc: BaseException, redis_url: str) -> str | None:
    """The one line for a rediss:// URL pointed at a plain port (see `tls_mismatch`)."""
    mismatch = tls_mismatch(exc, redis_url)
    return None if mismatch is None else f"Redis at {redact_url(redis_url)} {mismatch}"


def tls_mismatch(exc: BaseException, redis_url: str) -> str | None:
    """For a rediss:// URL whose connection failed (a plain Redis port leaves a TLS handshake
    hanging, or answers it with bytes that are no TLS): the line naming the mismatch when the
    port answers plain Redis, else None. The probe is blocking (a thread's) and remembered."""
    parts = urllib.parse.urlsplit(redis_url)
    if parts.scheme.lower() != "rediss" or not isinstance(
            exc, redis.ConnectionError | redis.TimeoutError | OSError):
        return None
    try:
        address = (parts.hostname or "localhost", parts.port or 6379)
    except ValueError:
        return None
    now = time.monotonic()
    with _plain_probes_lock:
        known = _plain_probes.get(address)
    if known is not None and (known[0] or now - known[1] < PLAIN_PROBE_AGAIN_S):
        plain = known[0]
    else:
        plain = answers_plain_redis(*address)
        with _plain_probes_lock:
            _plain_probes[address] = (plain, now)
    if not plain:
        return None
    shown = redact_url(redis_url)
    plain_url = "redis" + shown[len("rediss"):]
    return (f"does not speak TLS on that port (it answers plain Redis): write {plain_url}, or "
            "give rediss:// the server's TLS port (its tls-port)")


def failure_text(exc: BaseException, redis_url: str) -> str:
    """`error_text(exc)`, or the line naming a rediss:// URL pointed at a plain port."""
    mismatch = tls_mismatch(exc, redis_url)
    return f"the server {mismatch}" if mismatch else error_text(exc)
