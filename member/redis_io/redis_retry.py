"""`RedisRetry`: a Redis call in a thread, retried with backoff while Redis fails, said (D3).

The one retry loop of the member side's Redis calls: a member's start-up calls (the XACKDEL
probe, K10's permissions, the storeId), the producer's calls, `rsc consume`'s watch.

    retry = RedisRetry(redis_url, notices)
    pong = await retry.call(client.ping)

A failure is said through `notices` (once, then slowly, then that it is over: "Redis at ...
answers again"); a permanent one (a refused password, a bad db index, D3) raises
`Unrecoverable` at once, unless the owner's `on_failure` decides otherwise. `check_store`
is the one storeId check (K4, and L2's start): `StoreMismatch` unless this Redis holds the
coordinator's storeId, a missing one looked at again.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TypeVar

import redis
import trio

from rsc.common.backoff import RETRY, BackoffPreset
from rsc.common.redact import redact_url
from rsc.member.notices import Notices, redis_problem, then
from rsc.member.redis_io.streams import check_store_id
from rsc.member.redis_io.unrecoverable import redis_error_is_permanent, redis_unrecoverable, tls_checked

T = TypeVar("T")

REDIS_TOPIC = "redis"


class _Stopped(enum.Enum):
    STOPPED = enum.auto()


class RedisRetry:
    """See the module text. `backoff` (and `maximum_s`, its ceiling) paces the retries of one
    call; `on_failure` replaces `failed` (say it, or raise what is permanent)."""

    def __init__(self, redis_url: str, notices: Notices, *, backoff: BackoffPreset = RETRY,
                 maximum_s: float | None = None, topic: str = REDIS_TOPIC,
                 on_failure: Callable[[BaseException], None] | None = None) -> None:
        self.redis_url = redis_url
        self.shown_url = redact_url(redis_url)  # K7: what lines say
        self.notices = notices
        self.topic = topic
        self._backoff = backoff
        self._maximum_s = maximum_s
        self._on_failure = on_failure if on_failure is not None else self.failed

    def failed(self, exc: BaseException) -> None:
        """Say a Redis failure (then retried); raise Unrecoverable for a permanent one (D3:
        a bad db index never heals)."""
        if redis_error_is_permanent(exc):
            raise redis_unrecoverable(exc, self.redis_url) from exc
        self.say(exc)

    def say(self, exc: BaseException) -> None:
        """The line for `exc`, then "retrying"."""
        self.notices.say(self.topic, then(redis_problem(exc, self.redis_url), "retrying"))

    def answered(self) -> None:
        """Redis answers: the problem said, if any, is over."""
        self.notices.clear(self.topic, f"Redis at {self.shown_url} answers again")

    async def call(self, call: Callable[[], T]) -> T:
        """`call()` in a thread, retried with backoff while Redis fails; its result."""
        result = await self._attempts(call, None)
        assert not isinstance(result, _Stopped)
        return result

    async def call_until(self, call: Callable[[], T], stop: trio.Event) -> T | None:
        """`call()` as `call` does, given up (None) once `stop` is set, before a first attempt
        too; the wait between attempts ends when `stop` is set."""
        result = await self._attempts(call, stop)
        return None if isinstance(result, _Stopped) else result

    async def check_store(self, client: redis.Redis, expected: str, *, coordinator_url: str,
                          stop: trio.Event | None = None) -> bool:
        """The one storeId check: raise StoreMismatch unless the Redis of `client` holds the
        coordinator's storeId `expected` (Redis errors retried); False when `stop` came first."""
        def check() -> bool:
            check_store_id(client, expected, redis_url=self.redis_url,
                           coordinator_url=coordinator_url)
            return True

        if stop is None:
            return await self.call(check)
        return await self.call_until(check, stop) is not None

    async def _attempts(self, call: Callable[[], T], stop: trio.Event | None) -> T | _Stopped:
        backoff = self._backoff.start(maximum=self._maximum_s)
        while stop is None or not stop.is_set():
            try:
                result: T = await trio.to_thread.run_sync(tls_checked, call, self.redis_url)
            except redis.RedisError as exc:
                self._on_failure(exc)
                with trio.move_on_after(backoff.next()):
                    if stop is None:
                        await trio.sleep_forever()
                    await stop.wait()
                continue
            self.answered()
            return result
        return _Stopped.STOPPED
