"""L1 and L2 (docs/protocol.md, "The Python library"): one error family, final errors at once.

Every public call of `rsc.member`, `rsc.admin.client` and `rsc.testing` is driven into its
failure paths (a wrong token, an http:// URL, an unreachable coordinator, a closed producer,
Redis credentials or a db the server refuses) from the three hosts an application has: trio,
asyncio (`asyncio.run` in a worker thread) and plain threads. What comes out must be one
error of `rsc.errors` (or Python's own TypeError/ValueError): no trio exception and no
exception group. A real redis-server and a real coordinator over real websockets.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest
import redis
import trio

from rsc.admin.client import open_admin_client
from rsc.errors import (
    AuthenticationError,
    ConfigurationError,
    CoordinatorUnavailable,
    ProducerClosed,
    RscError,
    Unrecoverable,
)
from rsc.member import aio, sync
from rsc.member.listener import Listener
from rsc.member.producer import open_producer

PREFIX, GROUP = "orders", "billing"
UNREACHABLE = "ws://127.0.0.1:1"  # nothing listens on port 1


def assert_public(exc: BaseException | None) -> BaseException:
    """L1: one error of the family (or Python's argument errors), never trio's or a group."""
    assert exc is not None, "the call raised nothing"
    assert not isinstance(exc, BaseExceptionGroup), repr(exc)
    assert not type(exc).__module__.startswith(("trio", "outcome")), repr(exc)
    assert isinstance(exc, RscError | TypeError | ValueError), repr(exc)
    return exc


async def raised(call: Callable[[], Awaitable[object]], timeout: float = 20) -> BaseException:
    """What `await call()` raised (bounded); AssertionError if it returned."""
    with trio.fail_after(timeout):
        try:
            await call()
        except BaseException as exc:  # noqa: BLE001 - a Cancelled or a group is what we look for
            return exc
    raise AssertionError("the call returned without an error")


def in_asyncio(main: Callable[[], Coroutine[Any, Any, object]]) -> Awaitable[BaseException]:
    """Run `main()` under `asyncio.run` in a worker thread; what it raised."""
    def run() -> BaseException:
        try:
            asyncio.run(main())
        except BaseException as exc:  # noqa: BLE001
            return exc
        raise AssertionError("the asyncio program returned without an error")

    return trio.to_thread.run_sync(run)


def in_thread(call: Callable[[], object]) -> Awaitable[BaseException]:
    """Run `call()` in a worker thread (the sync host); what it raised."""
    def run() -> BaseException:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001
            return exc
        raise AssertionError("the call returned without an error")

    return trio.to_thread.run_sync(run)


async def handler(message: object) -> None:
    pass


def trio_listener(url: str, redis_url: str, **options: Any) -> Listener:
    return Listener(handler, stream_prefix=PREFIX, consumer_group=GROUP, coordinator_url=url,
                    redis_url=redis_url, **options)


async def every_host(url: str, redis_url: str, *, token: str | None = None,
                     admin: bool = True) -> dict[str, BaseException]:
    """Open a producer (trio, asyncio, threads), run a listener (trio, asyncio) and open an
    admin client against `url`; what each raised."""

    async def trio_producer() -> None:
        async with open_producer(url, redis_url, PREFIX, token=token) as producer:
            await producer.send("k", "v")

    async def aio_producer() -> None:
        async with aio.open_producer(url, redis_url, PREFIX, token=token) as producer:
            await producer.send("k", "v")

    async def aio_listener() -> None:
        handle = aio.AioListener(handler, stream_prefix=PREFIX, consumer_group=GROUP,
                                 coordinator_url=url, redis_url=redis_url, token=token)
        await handle.run()

    def sync_producer() -> None:
        with sync.open_producer(url, redis_url, PREFIX, token=token) as producer:
            producer.send("k", "v")

    async def admin_client() -> None:
        async with open_admin_client(url, token=token) as client:
            await client.list_groups()

    results = {
        "trio producer": await raised(trio_producer),
        "trio listener": await raised(trio_listener(url, redis_url, token=token).run),
        "asyncio producer": await in_asyncio(aio_producer),
        "asyncio listener": await in_asyncio(aio_listener),
        "thread producer": await in_thread(sync_producer),
    }
    if admin:
        results["admin client"] = await raised(admin_client)
    for exc in results.values():
        assert_public(exc)
    return results


async def test_l1_l2_a_wrong_token_is_an_authentication_error_at_open_in_every_host(
        coordinator_factory, caplog):
    coordinator = await coordinator_factory(member_token="m-secret", admin_token="a-secret")
    with caplog.at_level(logging.ERROR, logger="rsc"):
        results = await every_host(coordinator.url, coordinator.redis_url, token="wrong")
    for host, exc in results.items():
        assert isinstance(exc, AuthenticationError), (host, exc)
        assert "HTTP 401" in str(exc), (host, exc)
        assert "token=" in str(exc) and "--token" not in str(exc), (host, exc)  # L2: the library's words
    logged = [record for record in caplog.records if record.levelno == logging.ERROR
              and "HTTP 401" in record.getMessage()]
    assert 1 <= len(logged) <= len(results), [r.getMessage() for r in logged]


async def test_l1_l2_an_http_url_is_a_configuration_error_in_every_host(redis_url):
    results = await every_host("http://127.0.0.1:1", redis_url)
    for host, exc in results.items():
        assert isinstance(exc, ConfigurationError) and isinstance(exc, ValueError), (host, exc)
        assert "http://127.0.0.1:1" in str(exc), (host, exc)


async def test_l1_l2_redis_credentials_refused_are_final_in_every_host(coordinator):
    host_port = coordinator.redis_url.split("//", 1)[1].split("/", 1)[0]
    wrong_user = f"redis://nosuchuser:nopass@{host_port}/0"
    results = await every_host(coordinator.url, wrong_user, admin=False)
    for host, exc in results.items():
        assert isinstance(exc, AuthenticationError), (host, exc)
        assert "nosuchuser" in str(exc) or "WRONGPASS" in str(exc), (host, exc)
        assert "redis_url" in str(exc) and "--redis-url" not in str(exc), (host, exc)


async def test_l1_l2_a_db_the_server_lacks_is_a_configuration_error_in_every_host(coordinator):
    host_port = coordinator.redis_url.split("//", 1)[1].split("/", 1)[0]
    results = await every_host(coordinator.url, f"redis://{host_port}/999", admin=False)
    for host, exc in results.items():
        assert isinstance(exc, ConfigurationError), (host, exc)
        assert isinstance(exc, Unrecoverable), (host, exc)


async def test_l1_an_unreachable_coordinator_is_coordinator_unavailable_not_final(redis_url):
    async def trio_send() -> None:
        async with open_producer(UNREACHABLE, redis_url, PREFIX, routing_wait_s=0.3) as producer:
            await producer.send("k", "v")

    async def aio_send() -> None:
        async with aio.open_producer(UNREACHABLE, redis_url, PREFIX,
                                     routing_wait_s=0.3) as producer:
            await producer.send("k", "v")

    def sync_send() -> None:
        with sync.open_producer(UNREACHABLE, redis_url, PREFIX, routing_wait_s=0.3) as producer:
            producer.send("k", "v")

    async def admin() -> None:
        async with open_admin_client(UNREACHABLE, connect_timeout=2):
            pass

    results = {"trio": await raised(trio_send), "asyncio": await in_asyncio(aio_send),
               "threads": await in_thread(sync_send), "admin": await raised(admin)}
    for host, exc in results.items():
        assert_public(exc)
        assert isinstance(exc, CoordinatorUnavailable), (host, exc)
        assert not isinstance(exc, Unrecoverable), (host, exc)  # L2: retried, not final


async def test_l1_a_closed_producer_raises_producer_closed_in_every_host(coordinator):
    url, redis_url = coordinator.url, coordinator.redis_url

    async def trio_after_close() -> None:
        async with open_producer(url, redis_url, PREFIX) as producer:
            pass
        await producer.send("k", "v")

    async def aio_after_close() -> None:
        async with aio.open_producer(url, redis_url, PREFIX) as producer:
            pass
        await producer.send("k", "v")

    def sync_after_close() -> None:
        producer = sync.open_producer(url, redis_url, PREFIX)
        producer.close()
        producer.send("k", "v")

    for host, exc in {"trio": await raised(trio_after_close),
                      "asyncio": await in_asyncio(aio_after_close),
                      "threads": await in_thread(sync_after_close)}.items():
        assert isinstance(assert_public(exc), ProducerClosed), (host, exc)


async def test_l1_closing_a_sync_producer_under_a_sending_thread_gives_it_producer_closed(
        coordinator):
    # the prefix has no routing: the send waits for it until close() ends the producer
    producer = await trio.to_thread.run_sync(
        lambda: sync.open_producer(coordinator.url, coordinator.redis_url, "nowhere"))
    outcome: list[BaseException] = []
    sending = threading.Event()

    def send() -> None:
        sending.set()
        try:
            producer.send("k", "v")
        except BaseException as exc:  # noqa: BLE001 - a trio.Cancelled is what L1 forbids
            outcome.append(exc)

    sender = threading.Thread(target=send)
    sender.start()
    await trio.to_thread.run_sync(sending.wait)
    await trio.to_thread.run_sync(producer.close)
    with trio.fail_after(20):
        await trio.to_thread.run_sync(sender.join)
    assert len(outcome) == 1
    assert isinstance(assert_public(outcome[0]), ProducerClosed), outcome


@pytest.mark.parametrize("fault", ["token", "url"])
def test_l1_the_kit_and_sync_calls_raise_from_the_family_without_an_event_loop(fault, redis_url):
    # a plain (non-async) test: the thread host without any loop of the caller's
    url = "http://127.0.0.1:1" if fault == "url" else UNREACHABLE
    try:
        with sync.open_producer(url, redis_url, PREFIX, routing_wait_s=0.3) as producer:
            producer.send("k", "v")
    except BaseException as exc:  # noqa: BLE001
        assert_public(exc)
    else:
        raise AssertionError("no error")


async def test_l2_a_redis_with_another_store_id_is_store_mismatch_at_open_in_every_host(
        coordinator):
    from rsc.common.redis_server import EmbeddedRedis
    from rsc.errors import StoreMismatch
    from tests.redis_rigs import server_binary
    from tests.test_member_support import set_shards

    await set_shards(coordinator.url, PREFIX, GROUP, 2)  # the producers get routing and storeId
    with EmbeddedRedis(binary=server_binary()) as other:
        client = redis.Redis.from_url(other.url)
        client.set("rsc:store-id", "another-store")  # another coordinator's Redis
        client.close()

        async def trio_open() -> None:
            async with open_producer(coordinator.url, other.url, PREFIX):
                pass  # L2: never reached, the open fails

        async def aio_open() -> None:
            async with aio.open_producer(coordinator.url, other.url, PREFIX):
                pass

        def sync_open() -> None:
            sync.open_producer(coordinator.url, other.url, PREFIX).close()

        results = {"trio": await raised(trio_open), "asyncio": await in_asyncio(aio_open),
                   "threads": await in_thread(sync_open)}
        for host, exc in results.items():
            assert isinstance(assert_public(exc), StoreMismatch), (host, exc)
            assert "another-store" in str(exc), (host, exc)
        assert redis.Redis.from_url(other.url).dbsize() == 1  # nothing was written there


async def test_l1_admin_refusals_and_a_lost_session_are_of_the_family(coordinator_factory):
    from rsc.admin.client import AdminError, SessionLost

    coordinator = await coordinator_factory()
    async with open_admin_client(coordinator.url) as admin:
        refusal = await raised(lambda: admin.describe_group("nowhere", "nobody"))
        assert isinstance(assert_public(refusal), AdminError), refusal
        await coordinator.stop()  # the session goes with it
        lost = await raised(lambda: admin.list_groups())
        assert isinstance(assert_public(lost), SessionLost | CoordinatorUnavailable), lost
