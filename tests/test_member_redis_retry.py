"""`RedisRetry`, the member side's one Redis retry loop, and its one storeId check (D3, K4).

- a failing call is retried with backoff until Redis answers; the problem is said once
  and its end once;
- a permanent error (refused credentials) raises Unrecoverable at once, without a retry;
- `call_until` gives up when its stop event is set, before a first attempt or while waiting;
- an owner's `on_failure` replaces the default saying;
- `check_store` passes on the coordinator's storeId, raises StoreMismatch on another one.

No Redis is needed: the calls are plain functions that fail as redis-py does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import pytest
import redis
import trio

from rsc.common.backoff import BackoffPreset
from rsc.errors import AuthenticationError, StoreMismatch
from rsc.member.notices import Notices
from rsc.member.redis_io.redis_retry import RedisRetry

URL = "redis://user:secret@127.0.0.1:6390/0"
FAST = BackoffPreset(0.001, 0.004)


def flaky(failures: int, result: str = "PONG") -> tuple[list[int], Callable[[], str]]:
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if len(calls) <= failures:
            raise redis.TimeoutError("Timeout reading from socket")
        return result

    return calls, call


async def test_a_failing_call_is_retried_until_redis_answers_and_said_once_then_over() -> None:
    lines: list[str] = []
    retry = RedisRetry(URL, Notices(lines.append), backoff=FAST)
    calls, call = flaky(3)
    assert await retry.call(call) == "PONG"
    assert len(calls) == 4
    assert len(lines) == 2, lines
    assert "does not answer (timeout)" in lines[0] and lines[0].endswith("retrying")
    assert lines[1] == "Redis at redis://user:***@127.0.0.1:6390/0 answers again"
    assert "secret" not in "".join(lines), "K7: the password is masked"


async def test_a_call_that_answers_at_once_says_nothing() -> None:
    lines: list[str] = []
    assert await RedisRetry(URL, Notices(lines.append)).call(lambda: 7) == 7
    assert lines == []


async def test_a_permanent_error_raises_unrecoverable_without_a_retry() -> None:
    calls: list[int] = []

    def refused() -> None:
        calls.append(1)
        raise redis.AuthenticationError("WRONGPASS invalid username-password pair")

    with pytest.raises(AuthenticationError, match="6390"):
        await RedisRetry(URL, Notices(lambda line: None), backoff=FAST).call(refused)
    assert calls == [1]


async def test_call_until_gives_up_when_stopped_before_or_between_attempts() -> None:
    stop = trio.Event()
    stop.set()
    calls, call = flaky(0)
    retry = RedisRetry(URL, Notices(lambda line: None), backoff=BackoffPreset(60, 60))
    assert await retry.call_until(call, stop) is None
    assert calls == []

    stop = trio.Event()
    calls, call = flaky(100)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(retry.call_until, call, stop)
        while not calls:
            await trio.sleep(0.001)
        with trio.fail_after(5):  # the 30..60 s wait ends with the stop, not its delay
            stop.set()
    assert len(calls) == 1


async def test_call_until_returns_what_the_call_gives() -> None:
    calls, call = flaky(1, "yes")
    retry = RedisRetry(URL, Notices(lambda line: None), backoff=FAST, maximum_s=0.002)
    assert await retry.call_until(call, trio.Event()) == "yes"


async def test_an_owners_on_failure_replaces_the_default_saying() -> None:
    seen: list[BaseException] = []
    lines: list[str] = []
    retry = RedisRetry(URL, Notices(lines.append), backoff=FAST, on_failure=seen.append)
    calls, call = flaky(2)
    await retry.call(call)
    assert [type(exc) for exc in seen] == [redis.TimeoutError, redis.TimeoutError]
    assert lines == [], "nothing said: the owner's on_failure said nothing, so no end either"


class StoreIdRedis:
    """What the storeId check reads: `GET rsc:store-id`."""

    def __init__(self, store_id: str | None) -> None:
        self.store_id = store_id

    def get(self, key: str) -> str | None:
        assert key == "rsc:store-id"
        return self.store_id


async def test_check_store_passes_on_the_coordinators_store_id_and_refuses_another() -> None:
    retry = RedisRetry(URL, Notices(lambda line: None), backoff=FAST)
    same = cast(redis.Redis, StoreIdRedis("a"))
    assert await retry.check_store(same, "a", coordinator_url="ws://c:1") is True
    assert await retry.check_store(same, "a", coordinator_url="ws://c:1",
                                   stop=trio.Event()) is True
    other = cast(redis.Redis, StoreIdRedis("b"))
    with pytest.raises(StoreMismatch, match="holds storeId 'b'.*uses storeId 'a'"):
        await retry.check_store(other, "a", coordinator_url="ws://c:1")


async def test_check_store_stopped_first_is_false() -> None:
    stop = trio.Event()
    stop.set()
    retry = RedisRetry(URL, Notices(lambda line: None))
    assert await retry.check_store(cast(redis.Redis, StoreIdRedis("b")), "a",
                                   coordinator_url="ws://c:1", stop=stop) is False
