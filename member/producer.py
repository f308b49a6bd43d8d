"""The producer: routes each message by its partition key and writes it to its shard.

    async with open_producer("ws://127.0.0.1:8765", "redis://127.0.0.1:6379/0", "orders") as p:
        ids = await p.send_batch([("customer-7", "paid"), ("customer-9", "shipped")])

Routing comes from the coordinator (`getRouting` with `subscribe`) and is
refreshed on every routing push. A key goes to shard
`zlib.crc32(key.encode("utf-8")) % shardCount` (`protocol.shard_for_key`), the
same in every process and language. One `send_batch` is one pipeline.

A producer never drops what it was given (D2): `send_batch` returns
only once Redis has every record. A lost coordinator session is reopened in the
background with backoff (the producer keeps writing with the routing it has;
it needs routing once, so it may start while the coordinator is down). A Redis
error (refused, reset, timeout, failover, loading) is retried with backoff. A
write to a sealed or retired shard makes it ask for the current routing and
write the record to its new shard. Each problem is said through `notices`
(logged by default) when it starts, again at a slow rate, and when it is over.
A write retried after an error may have landed the first time: that is the
at-least-once duplicate counted in `retried`.

With `min_replicas=N` (K5) a write counts as delivered only once Redis's WAIT, on
the connection that wrote it, reports N replicas holding it: the batch is written
and WAITed on in one round trip, a shortfall waits again on that connection (it
does not write again) and is said every 15 s, and `send_batch` returns only then.
On a Redis Cluster it is refused (ValueError) for now.

A refused password or user, or a permission the Redis user lacks (K6), ends the
producer with `Unrecoverable` while it holds nothing; once it was given messages
(`holds_input`, set by `rsc produce` after its first accepted line) D2 wins: it
keeps them, retries, and says why every 15 s.

Before its first write the producer compares the `storeId` of the coordinator's
routing with the one in its own Redis: a producer pointed at another Redis
raises `StoreMismatch` instead of writing anything. A coordinator that sends no
`storeId` (older versions) skips that check.
"""

from __future__ import annotations

import logging
import math
import ssl
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TypeVar

import redis
import trio

from rsc.common.errors import unwrap_single
from rsc.common.redact import redact_url
from rsc.common.redis_connect import is_cluster
from rsc.member.backoff import Backoff
from rsc.member.entry import DEFAULT_MAX_MESSAGE_BYTES, MessageTooLarge
from rsc.member.native_streams import native_produce_ops
from rsc.member.notices import Notices, redis_problem, then
from rsc.member.ops import produce_ops
from rsc.member.producer_core import (
    Adoption,
    Delivery,
    Next,
    ProducerCore,
    Record,
    Refused,
    RoutingTable,
)
from rsc.member.session import (
    ResponseUndecodable,
    Session,
    SessionClosed,
    SessionRefused,
    check_coordinator_url,
    open_session,
)
from rsc.member.streams import StoreMismatch, WriteResult, check_store_id, connect
from rsc.member.unrecoverable import (
    Unrecoverable,
    redis_error_is_permanent,
    redis_unrecoverable_line,
    refusal_is_permanent,
)
from rsc.member.workqueue import Signal
from rsc.protocol import GetRouting, Routing

__all__ = ["MessageTooLarge", "Producer", "Record", "RoutingTable", "RoutingUnavailable", "StoreMismatch",
           "open_producer"]

log = logging.getLogger(__name__)

T = TypeVar("T")

REDIS_TIMEOUT_S = 5.0  # a stalled Redis is noticed (and said) after this long
WAIT_TIMEOUT_MS = 1000  # one WAIT of min_replicas (K5); a shortfall waits again
REQUEST_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 5.0


class RoutingUnavailable(Exception):
    """The coordinator has no routing for the prefix (no shards yet) within the wait."""


def no_routing_line(stream_prefix: str) -> str:
    """The line for a prefix that has no routing (no shards) yet."""
    return (f"prefix {stream_prefix!r} has no routing yet: create its shards with "
            f"`rsc admin set-shards {stream_prefix} N`; waiting")


def _log_notice(line: str) -> None:
    log.warning("%s", line)


def check_min_replicas(min_replicas: int, client: object) -> int:
    """`min_replicas` if usable here; ValueError names what is wrong (K5)."""
    if min_replicas < 0:
        raise ValueError(f"min_replicas must be 0 or more, got {min_replicas}")
    if min_replicas and is_cluster(client):
        raise ValueError("min_replicas (--min-replicas) is not supported on a Redis Cluster yet: "
                         "use 0 there")
    return min_replicas


class Producer:
    """Writes messages of one stream prefix; build it with `open_producer`.

    The decisions (which routing to write with, what each write's result means)
    are the pure `ProducerCore`'s (producer_core.py); this shell does the I/O.
    """

    def __init__(self, coordinator_url: str, redis_url: str, stream_prefix: str, *,
                 client: redis.Redis, token: str | None = None, subscribe: bool = True,
                 routing_wait_s: float | None = None, notices: Notices | None = None,
                 ca_file: str | None = None, ssl_context: ssl.SSLContext | None = None,
                 min_replicas: int = 0,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        self.coordinator_url = check_coordinator_url(coordinator_url)
        self._ca_file, self._ssl_context = ca_file, ssl_context  # for a wss:// coordinator
        self.redis_url = redis_url
        self.shown_url = redact_url(redis_url)  # K7: what lines say
        self.min_replicas = check_min_replicas(min_replicas, client)
        if max_message_bytes < 1:
            raise ValueError(f"max_message_bytes must be 1 or more, got {max_message_bytes}")
        self.max_message_bytes = max_message_bytes  # M4
        self.holds_input = False  # K6: once True, a permanent Redis error is said, not raised
        self.stream_prefix = stream_prefix
        self.subscribe = subscribe
        self.notices = notices or Notices(_log_notice)
        self._core = ProducerCore()
        self._token = token
        self._ops = produce_ops(client)
        self._native = native_produce_ops(client)  # writes without a thread hop, one server
        self._routing_wait_s = routing_wait_s
        self._session: Session | None = None
        self._changed = Signal()
        self._store_checked = False
        # the refusal last said ((why, routing version), line): repeated as the same line
        self._refusal_said: tuple[tuple[Refused, int], str] | None = None

    @property
    def routing(self) -> RoutingTable | None:
        """The routing written with (None until the coordinator named one)."""
        return self._core.routing

    @property
    def sent(self) -> int:
        """Records in Redis."""
        return self._core.sent

    @property
    def retried(self) -> int:
        """Record writes sent again after a Redis error (each may have landed: a duplicate)."""
        return self._core.retried

    @property
    def rerouted(self) -> int:
        """Record writes refused by a sealed or retired shard (and written again, R5)."""
        return self._core.rerouted

    # --- writing ---------------------------------------------------------------------

    async def send(self, key: str | bytes | None, value: str | bytes,
                   headers: Mapping[str, str | bytes] | None = None) -> str:
        """Write one message; return its stream entry id once Redis has it. Key and value are
        str (sent as UTF-8) or bytes (M1); a key None is keyless, spread over the shards (M3);
        `headers` maps text names to str or bytes (M2)."""
        return (await self.send_batch([(key, value, headers)]))[0]

    async def send_batch(self, records: Sequence[Record]) -> list[str]:
        """Write (key, value) or (key, value, headers) records in one pipeline; return their
        ids once Redis has them all. Before anything is sent, TypeError names the first
        malformed record and MessageTooLarge the first over `max_message_bytes` (M4)."""
        return [entry_id for _, entry_id in await self.send_batch_located(records)]

    async def send_batch_located(self, records: Sequence[Record]) -> list[tuple[str, str]]:
        """Like `send_batch`, returning the (stream, entry id) where each record landed."""
        delivery = self._core.delivery(records, self.max_message_bytes)
        redis_backoff = Backoff(0.05, 2.0)
        refused_backoff = Backoff(0.05, 2.0)
        while not delivery.done:
            writes = delivery.writes(await self.ready())
            try:
                if self.min_replicas:
                    results = await self._write_replicated(writes)
                else:
                    results = await self._native.write(writes) if self._native is not None \
                        else await trio.to_thread.run_sync(self._ops.write, writes)
            except redis.RedisError as exc:
                self._redis_failed(exc)
                step = delivery.write_failed()
            else:
                step = delivery.on_results(results)
                if delivery.failure is not None:
                    self._redis_failed(delivery.failure)
                else:
                    self._redis_ok()
            if step is Next.REFRESH:
                await self._ask_routing(wait_s=2.0)
                step = delivery.refreshed()
            if step is Next.REROUTE:
                self.notices.clear("store")
            elif step is Next.REFUSED_BACKOFF:
                self._refused_in_place(delivery)
                await trio.sleep(refused_backoff.next())
            elif step is Next.REDIS_BACKOFF:
                await trio.sleep(redis_backoff.next())
        return delivery.located()

    async def _write_replicated(self, writes: list[tuple[str, list[bytes]]]) -> list[WriteResult]:
        """K5: write, then WAIT on that connection until `min_replicas` replicas hold it all."""
        wanted = self.min_replicas
        results, waiter = await trio.to_thread.run_sync(
            self._ops.write_and_wait, writes, wanted, WAIT_TIMEOUT_MS)
        try:
            while waiter.replicas < wanted:
                self.notices.say("replicas", (
                    f"Redis at {self.shown_url}: {waiter.replicas} of the {wanted} replicas asked "
                    f"for (--min-replicas) acknowledged the last write within {WAIT_TIMEOUT_MS} ms; "
                    "the messages stay unconfirmed, waiting again (WAIT)"))
                await trio.to_thread.run_sync(waiter.wait, wanted, WAIT_TIMEOUT_MS)
        finally:
            waiter.release()
        self.notices.clear("replicas", f"Redis at {self.shown_url}: {waiter.replicas} replicas "
                           "acknowledge the writes again")
        return results

    def _refused_in_place(self, delivery: Delivery) -> None:
        """The coordinator still routes to shards this Redis refuses: say so (then retry)."""
        assert delivery.refusal is not None and delivery.routing is not None
        (stream, why), version = delivery.refusal, delivery.routing.version
        said = self._refusal_said
        if said is not None and said[0] == (why, version) and self.notices.active("store"):
            # the same problem on another shard of the same version: the same line, so it
            # is said once and then every 15 s, not once per shard and retry (D3)
            self.notices.say("store", said[1])
            return
        if why is Refused.MISSING:
            line = (f"shard {stream} of routing version {version} does not exist in "
                    f"{self.shown_url}: is --redis-url (RSC_REDIS_URL) the coordinator's Redis? "
                    "retrying")
        else:
            line = (f"shard {stream} is sealed but the coordinator still routes version "
                    f"{version} to it; retrying")
        self._refusal_said = ((why, version), line)
        self.notices.say("store", line)

    # --- routing -----------------------------------------------------------------------

    async def ready(self) -> RoutingTable:
        """The routing to write with, once known and once this Redis is the coordinator's.

        Waits (saying why through `notices`) while the coordinator is unreachable or
        the prefix has no routing; raises RoutingUnavailable after `routing_wait_s`
        if one was given, and StoreMismatch when this Redis is another one.
        """
        routing = self.routing
        if routing is not None and self._store_checked:
            return routing
        if not self._store_checked:  # K6: refused credentials are said before any routing wait
            await self.ping()
        wait_s = math.inf if self._routing_wait_s is None else self._routing_wait_s
        backoff = Backoff(0.05, 1.0)
        with trio.move_on_after(wait_s):
            while self.routing is None:
                await self._ask_routing(wait_s=2.0, unless_known=True)
                if self.routing is None:
                    with trio.move_on_after(backoff.next()):
                        await self._changed.wait()
        if self.routing is None:
            raise RoutingUnavailable(f"no routing for stream prefix {self.stream_prefix!r}")
        await self._check_store()
        return self.routing

    async def refresh(self) -> RoutingTable | None:
        """Ask the coordinator for the current routing now (waits for a session up to 10 s)."""
        await self._ask_routing(wait_s=REQUEST_TIMEOUT_S)
        return self.routing

    async def _ask_routing(self, *, wait_s: float, unless_known: bool = False) -> None:
        """One getRouting on the current session, waiting up to `wait_s` for one to be open
        (`unless_known`: not if some routing arrived meanwhile)."""
        with trio.move_on_after(wait_s):
            while self._session is None or self._session.closed:
                await self._changed.wait()
            if unless_known and self.routing is not None:
                return
            try:
                await self._request_routing(self._session)
            except (SessionClosed, ResponseUndecodable, trio.TooSlowError):
                pass  # the session keeper says so and reconnects

    async def _request_routing(self, session: Session) -> None:
        with trio.fail_after(REQUEST_TIMEOUT_S):
            response = await session.request(GetRouting(
                request_id=0, stream_prefix=self.stream_prefix, subscribe=self.subscribe))
        if isinstance(response, Routing):
            self._adopt(response)

    def _adopt(self, message: Routing) -> None:
        adoption = self._core.adopt(message)
        if adoption is Adoption.NO_ROUTING:
            self.notices.say("routing", no_routing_line(self.stream_prefix))
        elif adoption is Adoption.ARRIVED and (table := self._core.routing) is not None:
            self.notices.clear("routing", f"prefix {self.stream_prefix!r} has routing now: "
                               f"version {table.version}, {len(table.streams)} shards")
        self._changed.fire()

    async def _check_store(self) -> None:
        """Refuse to write into a Redis whose storeId is not the coordinator's."""
        if self._store_checked:
            return
        expected = self._core.store_id
        if expected is not None:
            await self._redis_call(lambda: check_store_id(
                self._ops.client, expected, redis_url=self.redis_url,
                coordinator_url=self.coordinator_url))
        await self._redis_call(self._ops.prepare)  # K6: a missing script permission said now
        self._store_checked = True

    # --- Redis -------------------------------------------------------------------------

    async def ping(self) -> None:
        """Return once Redis answers (saying so while it does not)."""
        await self._redis_call(lambda: self._ops.client.ping())

    async def _redis_call(self, call: Callable[[], T]) -> T:
        """`call()` in a thread, retried with backoff while Redis fails."""
        backoff = Backoff(0.05, 2.0)
        while True:
            try:
                result = await trio.to_thread.run_sync(call)
            except redis.RedisError as exc:
                self._redis_failed(exc)
                await trio.sleep(backoff.next())
                continue
            self._redis_ok()
            return result

    def _redis_failed(self, exc: BaseException) -> None:
        if redis_error_is_permanent(exc):  # D3: a bad db index never heals
            line = redis_unrecoverable_line(exc, self.redis_url)
            if not self.holds_input:
                raise Unrecoverable(line) from exc
            # K6 after input was accepted: D2 wins, the accepted messages are kept
            self.notices.say("redis", then(line, "retrying: the accepted messages are kept (D2)"))
            return
        self.notices.say("redis", then(redis_problem(exc, self.redis_url), "retrying"))

    def _redis_ok(self) -> None:
        self.notices.clear("redis", f"Redis at {self.shown_url} answers again")

    # --- the coordinator session ---------------------------------------------------------

    async def keep_session(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                           ) -> None:
        """Keep a coordinator session open (reopened with backoff), adopting routing pushes."""
        task_status.started()
        backoff = Backoff(0.05, 2.0)
        url = self.coordinator_url
        while True:
            try:
                async with open_session(url, "member", token=self._token,
                                        connect_timeout=CONNECT_TIMEOUT_S, ca_file=self._ca_file,
                                        ssl_context=self._ssl_context) as session:
                    if self.subscribe or self.routing is None:
                        await self._request_routing(session)
                    self._session = session  # usable by writers once routing was asked for
                    self._changed.fire()
                    self.notices.clear("coordinator", f"connected to the coordinator at {url}")
                    backoff.reset()
                    async for push in session.pushes:
                        if isinstance(push, Routing) and push.stream_prefix == self.stream_prefix:
                            self._adopt(push)
                    reason = session.close_reason or "connection closed"
                    self._session_trouble(f"lost the coordinator session at {url} ({reason})")
            except SessionRefused as exc:
                if refusal_is_permanent(exc.status_code):  # D3: a wrong token never heals
                    raise Unrecoverable(exc.line) from exc
                self._session_trouble(exc.line)
            except SessionClosed as exc:
                self._session_trouble(exc.line)
            except (ResponseUndecodable, trio.TooSlowError) as exc:
                self._session_trouble(f"the coordinator at {url} did not answer in time or "
                                      f"answered garbage ({exc or type(exc).__name__})")
            finally:
                self._session = None
            await trio.sleep(backoff.next())

    def _session_trouble(self, line: str) -> None:
        if self.routing is None:
            suffix = "retrying (a producer needs routing once: waiting for it)"
        else:
            suffix = f"retrying (writing with routing version {self.routing.version} meanwhile)"
        self.notices.say("coordinator", then(line, suffix))


@asynccontextmanager
async def open_producer(coordinator_url: str, redis_url: str, stream_prefix: str, *,
                        token: str | None = None, routing_wait_s: float | None = None,
                        subscribe: bool = True, notices: Notices | None = None,
                        ca_file: str | None = None, ssl_context: ssl.SSLContext | None = None,
                        min_replicas: int = 0,
                        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
                        ) -> AsyncIterator[Producer]:
    """A producer with its coordinator session (kept open), routing and Redis connection.

    Returns at once, even while the coordinator or Redis is down: writes wait for
    routing (forever, or `routing_wait_s`) and retry Redis. `subscribe=False`
    makes a producer that only learns new routing when a write to a sealed
    version is refused (it still never loses a message). A malformed coordinator
    or Redis URL raises ValueError, and so does `min_replicas` below 0 (or above 0 on a
    Redis Cluster). `min_replicas=N`: a message is delivered once N replicas hold it
    (K5, WAIT). `max_message_bytes` (1 MiB by default) refuses larger messages before
    sending them (M4). A wss:// coordinator is verified against `ssl_context`,
    else the system trust store and `ca_file` (default $RSC_CA_FILE); TlsFailed if it fails.
    """
    check_coordinator_url(coordinator_url)
    client = connect(redis_url, timeout_s=REDIS_TIMEOUT_S, retries=False)
    producer: Producer | None = None
    try:
        producer = Producer(coordinator_url, redis_url, stream_prefix, client=client,
                            token=token, subscribe=subscribe, routing_wait_s=routing_wait_s,
                            notices=notices, ca_file=ca_file, ssl_context=ssl_context,
                            min_replicas=min_replicas, max_message_bytes=max_message_bytes)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(producer.keep_session)
                yield producer
                nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            unwrap_single(group)
    finally:
        try:
            if producer is not None and producer._native is not None:
                await producer._native.aclose()
        finally:
            client.close()
