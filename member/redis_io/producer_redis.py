"""The producer's Redis side: writes (with WAIT under K5), the storeId check, retries said once.

`ProducerRedis` runs the producer's Redis calls in a thread and says through `notices` what
goes wrong (once, then slowly, then that it is over). A permanent error (a refused password,
a missing permission: K6) ends a producer that holds nothing with `Unrecoverable`; once it
holds input (`holds_input`, D2 wins) it is said and retried like any other.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import redis
import trio

from rsc.common.redact import redact_url
from rsc.common.redis_connect import is_cluster
from rsc.common.wording import log_final
from rsc.member.notices import Notices, then
from rsc.member.redis_io.native_streams import native_produce_ops
from rsc.member.redis_io.ops import produce_ops
from rsc.member.redis_io.redis_retry import REDIS_TOPIC, RedisRetry
from rsc.member.redis_io.streams import (
    StoreMismatch,
    WriteResult,
    read_store_id,
    recheck_store_id,
    store_mismatch_line,
)
from rsc.member.redis_io.unrecoverable import (
    redis_error_is_permanent,
    redis_unrecoverable,
    redis_unrecoverable_line,
    tls_checked,
)

T = TypeVar("T")

log = logging.getLogger("rsc.member.producer")

WAIT_TIMEOUT_MS = 1000  # one WAIT of min_replicas (K5); a shortfall waits again


def check_min_replicas(min_replicas: int, client: object) -> int:
    """`min_replicas` if usable here; ValueError names what is wrong (K5)."""
    if min_replicas < 0:
        raise ValueError(f"min_replicas must be 0 or more, got {min_replicas}")
    if min_replicas and is_cluster(client):
        raise ValueError("min_replicas (--min-replicas) is not supported on a Redis Cluster yet: "
                         "use 0 there")
    return min_replicas


class ProducerRedis:
    """See the module text."""

    def __init__(self, client: redis.Redis, redis_url: str, notices: Notices, *,
                 min_replicas: int) -> None:
        self.redis_url = redis_url
        self.shown_url = redact_url(redis_url)  # K7: what lines say
        self.min_replicas = check_min_replicas(min_replicas, client)
        self.holds_input = False  # K6: once True, a permanent Redis error is said, not raised
        self.store_checked = False
        self.replica_shortfalls = 0  # K11: WAITs that found fewer replicas than asked
        self.store_recheck = False  # K9: a reconnect happened since the storeId was compared
        self._notices = notices
        self._ops = produce_ops(client)
        self._native = native_produce_ops(client)  # writes without a thread hop, one server
        self._native_busy = trio.Lock()
        self._retry = RedisRetry(redis_url, notices, on_failure=self.failed)

    async def write(self, writes: list[tuple[str, list[bytes]]]) -> list[WriteResult]:
        """One pipeline of writes (XADDs through the seal-checking script); their results.
        With `min_replicas`, returned only once that many replicas hold them (WAIT)."""
        if self.min_replicas:
            return await self._write_replicated(writes)
        if self._native is not None and not self._native_busy.locked():
            # one trio connection carries one caller's round trip at a time; a concurrent
            # caller (the sync producer's threads, several tasks) takes the pooled client
            async with self._native_busy:
                return await self._native.write(writes)
        return await trio.to_thread.run_sync(self._ops.write, writes)

    async def aclose(self) -> None:
        """Close the trio-driven connection (the redis-py client is its opener's to close)."""
        if self._native is not None:
            await self._native.aclose()

    async def _write_replicated(self, writes: list[tuple[str, list[bytes]]]) -> list[WriteResult]:
        """K5: write, then WAIT on that connection until `min_replicas` replicas hold it all."""
        wanted = self.min_replicas
        results, waiter = await trio.to_thread.run_sync(
            self._ops.write_and_wait, writes, wanted, WAIT_TIMEOUT_MS)
        try:
            while waiter.replicas < wanted:
                self.replica_shortfalls += 1  # K11: counted, not only said
                self._notices.say("replicas", (
                    f"Redis at {self.shown_url}: {waiter.replicas} of the {wanted} replicas asked "
                    f"for (--min-replicas) acknowledged the last write within {WAIT_TIMEOUT_MS} ms; "
                    "the messages stay unconfirmed, waiting again (WAIT)"))
                await trio.to_thread.run_sync(waiter.wait, wanted, WAIT_TIMEOUT_MS)
        finally:
            waiter.release()
        self._notices.clear("replicas", f"Redis at {self.shown_url}: {waiter.replicas} replicas "
                            "acknowledge the writes again")
        return results

    async def check_store(self, expected: str | None, coordinator_url: str) -> None:
        """Refuse to write into a Redis whose storeId is not the coordinator's (`expected`;
        None: an older coordinator, nothing to compare); load the scripts (K6: a missing
        permission is said now). K9: after a reconnect the storeId is compared again (another
        one raises StoreChanged; none is K8's empty store: compared again on the next call)."""
        if self.store_checked:
            if self.store_recheck and expected is not None:
                held = await self.call(lambda: recheck_store_id(
                    self._ops.client, expected, redis_url=self.redis_url))
                self.store_recheck = not held
            return
        if expected is not None:
            await self._retry.check_store(self._ops.client, expected,
                                          coordinator_url=coordinator_url)
        await self.call(self._ops.prepare)
        self.store_checked = True

    async def check_once(self, expected: str | None, coordinator_url: str) -> None:
        """L2's first attempt at what is final, at the producer's open: one PING (refused
        credentials, a bad db, an unknown Sentinel service, TLS raise their error), and with
        the coordinator's storeId known, one look at this Redis's (another one raises
        StoreMismatch; a missing one is left to the check before the first write, K4).
        Anything else (Redis down, loading) is left to the retries of the writes."""
        ops = self._ops

        def look() -> None:
            ops.client.ping()
            if expected is not None:
                own = read_store_id(ops.client)
                if own is not None and own != expected:
                    raise StoreMismatch(store_mismatch_line(self.redis_url, own, coordinator_url,
                                                            expected))

        try:
            await trio.to_thread.run_sync(tls_checked, look, self.redis_url)
        except redis.RedisError as exc:
            if redis_error_is_permanent(exc):
                error = redis_unrecoverable(exc, self.redis_url)
                log_final(log, error)  # L2: said once, at ERROR
                raise error from exc
        except StoreMismatch as exc:
            log_final(log, exc)
            raise

    async def ping(self) -> None:
        """Return once Redis answers (saying so while it does not)."""
        await self.call(lambda: self._ops.client.ping())

    async def call(self, call: Callable[[], T]) -> T:
        """`call()` in a thread, retried with backoff while Redis fails."""
        return await self._retry.call(call)

    def failed(self, exc: BaseException) -> None:
        """Say a Redis failure (raise Unrecoverable for a permanent one while holding nothing);
        K9: the next call reconnects, so the storeId is compared again before the next write."""
        if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
            self.store_recheck = True
        if redis_error_is_permanent(exc) and self.holds_input:
            # K6 after input was accepted: D2 wins, the accepted messages are kept
            line = redis_unrecoverable_line(exc, self.redis_url)
            self._notices.say(REDIS_TOPIC, then(line, "retrying: the accepted messages are kept (D2)"))
            return
        self._retry.failed(exc)  # said; a permanent error while holding nothing raises (D3)

    def answered(self) -> None:
        self._retry.answered()
