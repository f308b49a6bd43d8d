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

import itertools
import logging
import ssl
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, TypedDict, cast

import redis
import trio

from rsc.common.backoff import RETRY
from rsc.common.error_family import ProducerClosed, SendTimeout
from rsc.common.errors import ErrorBoundary
from rsc.member.codecs import Codec, codec_for, encode_records
from rsc.member.notices import Notices
from rsc.member.pure.entry import DEFAULT_MAX_MESSAGE_BYTES, MessageTooLarge
from rsc.member.pure.health import may_take_messages
from rsc.member.pure.producer_core import (
    Delivery,
    Next,
    ProducerCore,
    Record,
    Refused,
    RoutingTable,
)
from rsc.member.redis_io.producer_redis import ProducerRedis
from rsc.member.redis_io.streams import StoreMismatch, connect
from rsc.member.session import check_coordinator_url
from rsc.member.shells.producer_metrics import register_producer
from rsc.member.shells.producer_routing import (
    REQUEST_TIMEOUT_S,
    ProducerRoutingFollower,
    RoutingUnavailable,
    no_routing_line,
)
from rsc.protocol import Routing

if TYPE_CHECKING:
    from rsc.member.shells.otel import ProducerTracing

__all__ = ["MessageTooLarge", "Producer", "ProducerOptions", "Record", "RoutingTable",
           "RoutingUnavailable", "StoreMismatch", "TypedRecord", "no_routing_line", "open_producer"]

log = logging.getLogger(__name__)

REDIS_TIMEOUT_S = 5.0  # a stalled Redis is noticed (and said) after this long
FIRST_CHECK_S = 5.0  # L2: how long the open waits for Redis's first answer


def check_timeout(name: str, value: float | None) -> float | None:
    """A timeout in seconds: None, or a number above 0 (ValueError, TypeError otherwise)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds or None, got {value!r}")
    if not value > 0:
        raise ValueError(f"{name} must be above 0 seconds, got {value!r}")
    return float(value)


def _log_notice(line: str) -> None:
    log.warning("%s", line)


class ProducerOptions(TypedDict, total=False):
    """The keyword arguments of every `open_producer` (trio, asyncio, threads), typed (L6):
    a misspelt one is a mypy error and a TypeError at the call. Their meaning:
    `rsc.member.producer.open_producer`."""

    token: str | None
    routing_wait_s: float | None
    subscribe: bool
    notices: Notices | None
    ca_file: str | None
    ssl_context: ssl.SSLContext | None
    min_replicas: int
    max_message_bytes: int
    codec: object | None
    tracing: object
    send_timeout_s: float | None


def check_options(options: Mapping[str, object], known: type, call: str) -> None:
    """TypeError naming a keyword `call` does not take (L6), before anything starts."""
    unknown = sorted(set(options) - set(known.__annotations__))
    if unknown:
        raise TypeError(f"{call}() got an unexpected keyword argument {unknown[0]!r} "
                        f"(it takes {', '.join(sorted(known.__annotations__))})")


TypedRecord = (tuple[str | bytes | None, object]
               | tuple[str | bytes | None, object, Mapping[str, str | bytes] | None])
"""A record of a producer with a codec: (key, value[, headers]), the value what the codec
encodes (without a codec: str or bytes, a `Record`)."""


class Producer:
    """Writes messages of one stream prefix; build it with `open_producer`.

    The decisions (which routing to write with, what each write's result means) are the
    pure `ProducerCore`'s (producer_core.py); the coordinator side is `ProducerRoutingFollower`
    (producer_routing.py), the Redis side `ProducerRedis` (producer_redis.py); this shell
    encodes, traces and delivers.
    """

    def __init__(self, coordinator_url: str, redis_url: str, stream_prefix: str, *,
                 client: redis.Redis, token: str | None = None, subscribe: bool = True,
                 routing_wait_s: float | None = None, notices: Notices | None = None,
                 ca_file: str | None = None, ssl_context: ssl.SSLContext | None = None,
                 min_replicas: int = 0,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 codec: object | None = None, tracing: object = False,
                 send_timeout_s: float | None = None) -> None:
        self.send_timeout_s = check_timeout("send_timeout_s", send_timeout_s)
        self.codec: Codec | None = None if codec is None else codec_for(codec)
        self._tracing: ProducerTracing | None = None
        if tracing is not False and tracing is not None:
            from rsc.member.shells.otel import ProducerTracing  # the [otel] extra, imported when asked

            self._tracing = ProducerTracing(stream_prefix, tracing)
        if max_message_bytes < 1:
            raise ValueError(f"max_message_bytes must be 1 or more, got {max_message_bytes}")
        self.max_message_bytes = max_message_bytes  # M4
        self.notices = notices or Notices(_log_notice)
        self._core = ProducerCore()
        self._follower = ProducerRoutingFollower(
            coordinator_url, stream_prefix, self._core, self.notices, token=token,
            subscribe=subscribe, routing_wait_s=routing_wait_s, ca_file=ca_file,
            ssl_context=ssl_context)
        self._redis = ProducerRedis(client, redis_url, self.notices, min_replicas=min_replicas)
        # the refusal last said ((why, routing version), line): repeated as the same line
        self._refusal_said: tuple[tuple[Refused, int], str] | None = None
        self.keep_session = self._follower.keep_session
        self.closed = False  # set when its open_producer's block is left
        # L3: where a delivery that outlived its call's timeout goes on (open_producer's nursery)
        self.background: trio.Nursery | None = None
        self.ping = self._redis.ping
        # K11: the records being delivered (a token each: its count and when it was handed in)
        self._unconfirmed: dict[int, tuple[int, float]] = {}
        self._tokens = itertools.count()
        register_producer(self)

    @property
    def stream_prefix(self) -> str:
        return self._follower.stream_prefix

    @property
    def coordinator_url(self) -> str:
        return self._follower.coordinator_url

    @property
    def redis_url(self) -> str:
        return self._redis.redis_url

    @property
    def min_replicas(self) -> int:
        return self._redis.min_replicas

    @property
    def holds_input(self) -> bool:
        """K6: once True (`rsc produce` accepted a line), a permanent Redis error is said and
        retried, not raised: the accepted messages are kept (D2)."""
        return self._redis.holds_input

    @holds_input.setter
    def holds_input(self, holds: bool) -> None:
        self._redis.holds_input = holds

    @property
    def routing(self) -> RoutingTable | None:
        """The routing written with (None until the coordinator named one)."""
        return self._core.routing

    @property
    def sent(self) -> int:
        """Records in Redis."""
        return self._core.sent

    @property
    def unconfirmed(self) -> int:
        """K11: records handed to `deliver` and not yet confirmed (D2; K5 with min_replicas)."""
        return sum(count for count, _ in list(self._unconfirmed.values()))

    def oldest_unconfirmed_seconds(self) -> float:
        """K11: how long the oldest unconfirmed record has waited (0.0 with none)."""
        started = [since for _, since in list(self._unconfirmed.values())]
        return max(0.0, time.monotonic() - min(started)) if started else 0.0

    @property
    def replica_shortfalls(self) -> int:
        """K11: WAITs that found fewer replicas than `min_replicas` (each waited again)."""
        return self._redis.replica_shortfalls

    @property
    def retried(self) -> int:
        """Record writes sent again after a Redis error (each may have landed: a duplicate)."""
        return self._core.retried

    @property
    def rerouted(self) -> int:
        """Record writes refused by a sealed or retired shard (and written again, R5)."""
        return self._core.rerouted

    # --- writing ---------------------------------------------------------------------

    async def send(self, key: str | bytes | None, value: object,
                   headers: Mapping[str, str | bytes] | None = None, *,
                   timeout: float | None = None) -> str:
        """Write one message; return its stream entry id once Redis has it. Key and value are
        str (sent as UTF-8) or bytes (M1), the value anything the `codec` encodes if there is
        one; a key None is keyless, spread over the shards (M3); `headers` maps text names to
        str or bytes (M2). `timeout` (seconds; default the producer's `send_timeout_s`):
        SendTimeout if Redis does not have it by then (L3)."""
        return (await self.send_batch([(key, value, headers)], timeout=timeout))[0]

    async def send_batch(self, records: Sequence[TypedRecord], *,
                         timeout: float | None = None) -> list[str]:
        """Write (key, value) or (key, value, headers) records in one pipeline; return their
        ids once Redis has them all. Before anything is sent, TypeError names the first
        malformed record (or value the codec cannot encode) and MessageTooLarge the first
        over `max_message_bytes` (M4). `timeout` (seconds; default the producer's
        `send_timeout_s`, None: wait as D2 says): SendTimeout when Redis does not have them
        all by then, with `confirmed` and `not_accepted` (L3)."""
        located = await self.send_batch_located(records, timeout=timeout)
        return [entry_id for _, entry_id in located]

    async def send_batch_located(self, records: Sequence[TypedRecord], *,
                                 timeout: float | None = None) -> list[tuple[str, str]]:
        """Like `send_batch`, returning the (stream, entry id) where each record landed."""
        with self.outgoing(records) as ready:
            return await self.deliver(ready, timeout=timeout)

    @contextmanager
    def outgoing(self, records: Sequence[TypedRecord]) -> Iterator[Sequence[Record]]:
        """The records as they are written: each value through the codec, and with `tracing`
        the batch's span (current meanwhile) and its context in the headers. The sync and
        asyncio producers enter it in the caller's thread or task (whose span is the
        parent), then `deliver`."""
        encoded = records if self.codec is None else encode_records(self.codec, records)
        if self._tracing is None:
            yield cast("Sequence[Record]", encoded)
            return
        with self._tracing.sending(encoded) as traced:
            yield cast("Sequence[Record]", traced)

    async def deliver(self, records: Sequence[Record], *,
                      timeout: float | None = None) -> list[tuple[str, str]]:
        """Write records as `outgoing` gave them; the (stream, entry id) of each once Redis
        has them all (D2).

        L3: with `timeout` (else the producer's `send_timeout_s`) the call waits that long at
        most. The records are accepted once the producer has routing for them (and knows
        this Redis is the coordinator's); a timeout before that raises SendTimeout with
        every index in `not_accepted` (nothing was written). Accepted records are delivered
        even when the call times out (D2): the delivery goes on in the background and
        SendTimeout's `confirmed` names those Redis had by then."""
        if self.closed:
            raise ProducerClosed(f"the producer of {self.stream_prefix!r} is closed")
        wait_s = self.send_timeout_s if timeout is None else check_timeout("timeout", timeout)
        delivery = self._core.delivery(records, self.max_message_bytes)
        if wait_s is None or self.background is None:
            await self._deliver(delivery)
            return delivery.located()
        deadline = trio.current_time() + wait_s
        with trio.move_on_at(deadline) as accepting:
            await self.ready()
        if accepting.cancelled_caught:
            raise SendTimeout(
                f"{len(records)} records not accepted within {wait_s:g} s (no routing for "
                f"{self.stream_prefix!r} yet, or Redis does not answer); none was written",
                not_accepted=range(len(records)))
        finished = trio.Event()
        failures: list[Exception] = []
        waiting = True

        async def deliver_all() -> None:
            try:
                await self._deliver(delivery)
            except Exception as exc:  # noqa: BLE001 - the caller's, or said once it has gone
                failures.append(exc)
                if not waiting:
                    log.error("%d accepted records of %r were not delivered: %s",
                              len(records) - len(delivery.confirmed()), self.stream_prefix, exc)
            finally:
                finished.set()

        self.background.start_soon(deliver_all)
        with trio.move_on_at(deadline):
            await finished.wait()
        waiting = False
        if failures:
            raise failures[0]
        if finished.is_set():
            return delivery.located()
        confirmed = delivery.confirmed()
        raise SendTimeout(
            f"{len(records) - len(confirmed)} of {len(records)} records not confirmed by Redis "
            f"within {wait_s:g} s; they were accepted and are still being delivered (D2): do "
            "not send them again", confirmed=confirmed)

    async def _deliver(self, delivery: Delivery) -> None:
        """Write until Redis has every record of `delivery` (D2); its records count as
        unconfirmed meanwhile (K11: `unconfirmed`, `oldest_unconfirmed_seconds`)."""
        token = next(self._tokens)
        self._unconfirmed[token] = (delivery.size, time.monotonic())
        try:
            await self._write_all(delivery)
        finally:
            del self._unconfirmed[token]

    async def _write_all(self, delivery: Delivery) -> None:
        redis_backoff = RETRY.start()
        refused_backoff = RETRY.start()
        store = self._redis
        while not delivery.done:
            self._follower.raise_fatal()
            writes = delivery.writes(await self.ready())
            try:
                results = await store.write(writes)
            except redis.RedisError as exc:
                store.failed(exc)
                step = delivery.write_failed()
            else:
                step = delivery.on_results(results)
                if delivery.failure is not None:
                    store.failed(delivery.failure)
                else:
                    store.answered()
            if step is Next.REFRESH:
                await self._follower.ask(wait_s=2.0)
                step = delivery.refreshed()
            if step is Next.REROUTE:
                self.notices.clear("store")
            elif step is Next.REFUSED_BACKOFF:
                self._refused_in_place(delivery)
                await trio.sleep(refused_backoff.next())
            elif step is Next.REDIS_BACKOFF:
                await trio.sleep(redis_backoff.next())

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
                    f"{self._redis.shown_url}: is --redis-url (RSC_REDIS_URL) the coordinator's "
                    "Redis? retrying")
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
        if routing is not None and may_take_messages(reached=True, store_checked=self._redis.store_checked
                                                     and not self._redis.store_recheck,
                                             store_to_check=True):
            return routing
        if not self._redis.store_checked:  # K6: refused credentials are said before any routing wait
            await self._redis.ping()
        routing = await self._follower.first_routing()
        await self._redis.check_store(self._core.store_id, self.coordinator_url)
        return self.routing or routing

    async def refresh(self) -> RoutingTable | None:
        """Ask the coordinator for the current routing now (waits for a session up to 10 s)."""
        await self._follower.ask(wait_s=REQUEST_TIMEOUT_S)
        return self.routing

    def _adopt(self, message: Routing) -> None:
        self._follower.adopt_now(message)

    async def first_checks(self) -> None:
        """L2 at open: one attempt at Redis's final errors (credentials, db, Sentinel
        service, TLS, another storeId), bounded; the rest is retried by the writes."""
        with trio.move_on_after(FIRST_CHECK_S):
            await self._redis.check_once(self._core.store_id, self.coordinator_url)

    @property
    def fatal(self) -> BaseException | None:
        """The final refusal that ended the producer's coordinator session (L2), if any."""
        return self._follower.fatal

    async def aclose(self) -> None:
        """Close what the producer opened itself (its trio-driven Redis connection)."""
        await self._redis.aclose()


@asynccontextmanager
async def open_producer(coordinator_url: str, redis_url: str, stream_prefix: str, *,
                        token: str | None = None, routing_wait_s: float | None = None,
                        subscribe: bool = True, notices: Notices | None = None,
                        ca_file: str | None = None, ssl_context: ssl.SSLContext | None = None,
                        min_replicas: int = 0,
                        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                        codec: object | None = None, tracing: object = False,
                        send_timeout_s: float | None = None) -> AsyncIterator[Producer]:
    """A producer with its coordinator session (kept open), routing and Redis connection.

    Returns at once, even while the coordinator or Redis is down: writes wait for
    routing (forever, or `routing_wait_s`) and retry Redis. `subscribe=False`
    makes a producer that only learns new routing when a write to a sealed
    version is refused (it still never loses a message). A malformed coordinator
    or Redis URL raises ValueError, and so does `min_replicas` below 0 (or above 0 on a
    Redis Cluster). `min_replicas=N`: a message is delivered once N replicas hold it
    (K5, WAIT). `max_message_bytes` (1 MiB by default) refuses larger messages before
    sending them (M4). `codec=` ("json", a pydantic model or msgspec Struct class, a codec:
    rsc/member/codecs.py) encodes each value. `tracing=True` (the `[otel]` extra,
    rsc/member/shells/otel.py) writes each batch in an OpenTelemetry producer span whose context
    goes into the messages' headers (`traceparent`). `send_timeout_s`: how long a `send`
    waits at most by default (None: as D2 says; L3). A wss:// coordinator is verified against `ssl_context`,
    else the system trust store and `ca_file` (default $RSC_CA_FILE); TlsFailed if it fails.
    """
    check_coordinator_url(coordinator_url)
    client = connect(redis_url, timeout_s=REDIS_TIMEOUT_S, retries=False)
    producer: Producer | None = None
    try:
        producer = Producer(coordinator_url, redis_url, stream_prefix, client=client,
                            token=token, subscribe=subscribe, routing_wait_s=routing_wait_s,
                            notices=notices, ca_file=ca_file, ssl_context=ssl_context,
                            min_replicas=min_replicas, max_message_bytes=max_message_bytes,
                            codec=codec, tracing=tracing, send_timeout_s=send_timeout_s)
        with ErrorBoundary():  # L1: one error, never a group
            async with trio.open_nursery() as nursery:
                producer.background = nursery
                await nursery.start(producer.keep_session)  # L2: after one attempt
                await producer.first_checks()
                yield producer
                nursery.cancel_scope.cancel()
    finally:
        try:
            if producer is not None:
                producer.closed = True
                await producer.aclose()
        finally:
            client.close()
