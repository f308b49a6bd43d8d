"""One Redis connection driven by trio itself: a trio socket stream (TLS for rediss://) and
hiredis' `Reader` parsing the replies, with no thread hop per command.

The member's data plane (rsc/member/redis_io/native_streams.py) reads and acks over these where
its Redis URL names one plain server (`redis://`, `rediss://`): the same server, user,
password, database and TLS settings as the redis-py client `connect` built for that URL
(rsc/common/redis_connect.py), from the options `connect` kept for it (`plain_options`), never
read back from redis-py's pool. A Cluster, a Sentinel URL or a `unix://` socket keep redis-py's
connections (`settings_of` says None). A script runs by its plan (`run`: rsc/common/lua.py's one
NOSCRIPT fallback).

The same rules as the redis-py connections there:
- an error reply is redis-py's exception for it (NoScriptError, NoPermissionError, ...),
  returned as a value by `execute` and raised by `call`;
- READONLY (the address serves a replica now, K2) drops the connection and raises
  `ReplicaNow`, which every caller retries;
- a NOPERM reply names the command and its first key (K6);
- a refused password or user (WRONGPASS, NOAUTH at connect) is redis-py's
  AuthenticationError, a configuration error for the callers (D3);
- a broken, closed or unreachable connection is a `redis.ConnectionError`; a connect
  that does not finish within its bound a `redis.TimeoutError`.
A connection that failed, or whose task was cancelled with a command in flight, is closed:
its replies could no longer be matched to their commands.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable, Mapping, Sequence

import attrs
import hiredis
import redis
import trio
from redis._parsers.base import BaseParser
from redis.credentials import CredentialProvider

from rsc.common.lua import Reply, ScriptPlan, Word
from rsc.common.redis_connect import ReplicaNow, plain_options

CONNECT_TIMEOUT_S = 10.0  # when the URL's client names no connect timeout
RECEIVE_SIZE = 65536



@attrs.frozen
class Settings:
    """Where and how to connect: what a redis-py client for a plain URL was built with."""

    host: str
    port: int
    db: int = 0
    username: str | None = None
    password: str | None = None
    tls: ssl.SSLContext | None = None
    connect_timeout_s: float = CONNECT_TIMEOUT_S
    reply_timeout_s: float | None = None  # each reply (redis-py's socket_timeout); None: none

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def settings_of(client: object) -> Settings | None:
    """The settings `connect` (rsc/common/redis_connect.py) kept for a client of one plain server
    (redis://, rediss://), None for anything else (a cluster, a Sentinel-managed master, a unix
    socket, a client built elsewhere)."""
    kept = plain_options(client)
    return None if kept is None else settings_from(kept.options, tls=kept.tls)


def settings_from(options: Mapping[str, object], *, tls: bool) -> Settings:
    """The settings of a connection built from redis-py's connection `options` (TLS when `tls`)."""
    password, username = _optional_text(options.get("password")), _optional_text(options.get("username"))
    provider = options.get("credential_provider")
    if isinstance(provider, CredentialProvider):
        username, password = _credentials(provider.get_credentials())
    return Settings(host=str(options.get("host") or "localhost"),
                    port=int(str(options.get("port") or 6379)),
                    db=int(str(options.get("db") or 0)), username=username or None,
                    password=password or None, tls=_tls_context(options) if tls else None,
                    connect_timeout_s=_seconds(options.get("socket_connect_timeout"))
                    or CONNECT_TIMEOUT_S,  # none, or 0: the default bound
                    reply_timeout_s=_seconds(options.get("socket_timeout")))


def _optional_text(value: object) -> str | None:
    return None if value is None else str(value)


def _seconds(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _credentials(given: tuple[str] | tuple[str, str]) -> tuple[str | None, str | None]:
    if len(given) == 1:
        return None, given[0]
    return given[0], given[1]


_CERT_REQS = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def _tls_context(options: Mapping[str, object]) -> ssl.SSLContext:
    """The TLS client context redis-py's SSLConnection would make from the same options."""
    context = ssl.create_default_context(cafile=_optional_text(options.get("ssl_ca_certs")),
                                         capath=_optional_text(options.get("ssl_ca_path")))
    reqs = options.get("ssl_cert_reqs", "required")
    verify = (_CERT_REQS.get(reqs.lower(), ssl.CERT_REQUIRED) if isinstance(reqs, str)
              else ssl.VerifyMode(reqs) if isinstance(reqs, int) else ssl.CERT_REQUIRED)
    check_hostname = bool(options.get("ssl_check_hostname", True)) and verify != ssl.CERT_NONE
    context.check_hostname = check_hostname
    context.verify_mode = verify
    certfile = _optional_text(options.get("ssl_certfile"))
    if certfile:
        context.load_cert_chain(certfile, _optional_text(options.get("ssl_keyfile")),
                                _optional_text(options.get("ssl_password")))
    return context


def _error(reply: hiredis.ReplyError) -> redis.RedisError:
    return BaseParser.parse_error(str(reply))  # type: ignore[no-untyped-call,no-any-return]


class TrioRedis:
    """One connection; `execute` sends commands in one write and reads their replies in order,
    `send` and `receive` split that for a command whose reply is awaited later (pipelining)."""

    def __init__(self, stream: trio.abc.Stream, settings: Settings, *, decode: bool) -> None:
        self._stream = stream
        self.settings = settings
        self._reader = hiredis.Reader(encoding="utf-8") if decode else hiredis.Reader()
        self._sent: list[tuple[str, ...]] = []  # per command awaiting its reply: what it was
        self.closed = False

    @classmethod
    async def open(cls, settings: Settings, *, decode: bool = False) -> TrioRedis:
        """Connect, authenticate and select the database; errors as described above."""
        try:
            with trio.fail_after(settings.connect_timeout_s):
                tcp = await trio.open_tcp_stream(settings.host, settings.port)
                tcp.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)  # as redis-py's members
                stream: trio.abc.Stream = tcp
                if settings.tls is not None:
                    stream = trio.SSLStream(stream, settings.tls, server_hostname=settings.host,
                                            https_compatible=True)
                    try:
                        await stream.do_handshake()
                    except BaseException:
                        await trio.aclose_forcefully(stream)
                        raise
        except trio.TooSlowError:
            raise redis.TimeoutError(f"Timeout connecting to {settings.address}") from None
        except (OSError, trio.BrokenResourceError, ssl.SSLError) as exc:
            raise redis.ConnectionError(f"Error connecting to {settings.address}: {exc}") from None
        connection = cls(stream, settings, decode=decode)
        try:
            setup: list[Sequence[Word]] = []
            if settings.password is not None:
                setup.append(("AUTH", settings.username, settings.password) if settings.username
                             else ("AUTH", settings.password))
            if settings.db:
                setup.append(("SELECT", settings.db))
            for reply in await connection.execute(setup):
                if isinstance(reply, redis.ResponseError) and str(reply).startswith(
                        ("WRONGPASS", "invalid", "NOAUTH")):
                    raise redis.AuthenticationError(str(reply))
                if isinstance(reply, Exception):
                    raise reply
        except BaseException:
            await connection.aclose()
            raise
        return connection

    @property
    def in_flight(self) -> int:
        """Commands sent whose replies were not received yet."""
        return len(self._sent)

    async def send(self, commands: Sequence[Sequence[Word]]) -> None:
        """Write `commands` in one write; their replies come from `receive`, in order."""
        if self.closed:
            raise redis.ConnectionError(f"connection to {self.settings.address} is closed")
        if not commands:
            return
        data = b"".join(_pack(tuple(command)) for command in commands)
        self._sent.extend(_named(command) for command in commands)
        try:
            await self._stream.send_all(data)
        except BaseException as exc:
            await self.aclose()
            if isinstance(exc, (OSError, trio.BrokenResourceError, trio.ClosedResourceError)):
                raise redis.ConnectionError(
                    f"Error writing to {self.settings.address}: {exc}") from None
            raise

    async def receive(self) -> Reply:
        """The reply to the oldest command sent; an error reply as redis-py's exception value."""
        if not self._sent:
            raise RuntimeError("no command in flight")
        reader = self._reader
        try:
            reply = reader.gets()
            if reply is False:
                timeout = self.settings.reply_timeout_s
                with trio.fail_after(float("inf") if timeout is None else timeout):
                    while reply is False:
                        data = await self._stream.receive_some(RECEIVE_SIZE)
                        if not data:
                            raise redis.ConnectionError(
                                f"Connection to {self.settings.address} closed by server")
                        reader.feed(bytes(data))
                        reply = reader.gets()
        except BaseException as exc:
            await self.aclose()
            if isinstance(exc, trio.TooSlowError):
                raise redis.TimeoutError(f"Timeout reading from {self.settings.address}") from None
            if isinstance(exc, (OSError, trio.BrokenResourceError, trio.ClosedResourceError,
                                hiredis.ProtocolError)):
                raise redis.ConnectionError(
                    f"Error reading from {self.settings.address}: {exc}") from None
            raise
        command = self._sent.pop(0)
        if isinstance(reply, hiredis.ReplyError):
            return await self._error_reply(_error(reply), command)
        return reply

    async def _error_reply(self, error: redis.RedisError, command: tuple[str, ...]) -> redis.RedisError:
        if isinstance(error, redis.ReadOnlyError):
            await self.aclose()
            raise ReplicaNow(f"{self.settings.address} serves a read-only replica now ({error}): "
                             "a failover moved the master")
        if isinstance(error, redis.exceptions.NoPermissionError) and command:
            return redis.exceptions.NoPermissionError(f"{error} (command: {' '.join(command)})")
        return error

    async def execute(self, commands: Sequence[Sequence[Word]]) -> list[Reply]:
        """Send `commands` in one write and receive their replies; errors as values."""
        if self._sent:
            raise RuntimeError("execute with replies still awaited")
        await self.send(commands)
        return [await self.receive() for _ in commands]

    async def call(self, *words: Word) -> Reply:
        """One command; its error reply raised."""
        [reply] = await self.execute([words])
        if isinstance(reply, Exception):
            raise reply
        return reply

    async def run(self, plan: ScriptPlan) -> list[Reply]:
        """A script's calls by EVALSHA in one write, with the plan's NOSCRIPT fallback (load it,
        send those calls again; rsc/common/lua.py). Replies in order, errors as values."""
        results = await self.execute([command for _, command in plan.commands])
        again = plan.resend(results)
        if again:
            await self.call("SCRIPT", "LOAD", plan.text)
            plan.merge(results, await self.execute([command for _, command in again]))
        return results

    async def aclose(self) -> None:
        """Close at once (safe under cancellation); whatever was in flight is dropped."""
        self.closed = True
        self._sent.clear()
        await trio.aclose_forcefully(self._stream)


def pack_command(command: Sequence[Word]) -> bytes:
    """One command in RESP (hiredis' `pack_command` where its version has it)."""
    parts = [b"*%d\r\n" % len(command)]
    for word in command:
        data = word if isinstance(word, bytes) else str(word).encode("utf-8")
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


_pack: Callable[[tuple[Word, ...]], bytes] = getattr(hiredis, "pack_command", None) or pack_command


def _named(command: Sequence[Word]) -> tuple[str, ...]:
    """How a NOPERM names `command`: its name, and its first key when it has one (K6)."""
    words = [_text(word) for word in command[:2]]
    if not words:
        return ()
    name = words[0].upper()
    if name in ("AUTH", "HELLO"):
        return ()
    if name in ("EVALSHA", "EVAL") or len(words) < 2:
        return (name,)
    second = words[1]
    if 0 < len(second) <= 200 and not any(char.isspace() for char in second):
        return (name, second)
    return (name,)


def _text(word: Word) -> str:
    return word.decode("utf-8", "replace") if isinstance(word, bytes) else str(word)
