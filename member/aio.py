"""The asyncio host: listeners and producers inside an asyncio application (FastAPI, aiohttp).

    from rsc.member.aio import listener, open_producer

    @listener("orders", "billing", coordinator_url="ws://127.0.0.1:8765",
              redis_url="redis://127.0.0.1:6379/0", runtime_max_concurrency=8)
    async def handle(message):
        await some_asyncio_client.write(message.key, message.value)

    async with handle.running():      # e.g. in a FastAPI lifespan
        ...                           # members joined (or joining): the app serves
    # leaving the block drains in-flight work and leaves the group

    await handle.run()                # or: until handle.stop(), then drain and leave

`listener(...)` takes the arguments of `rsc.member.listener.listener`. The
member runtime stays trio inside, run in trio's guest mode on the running
asyncio loop (aio_guest.py); an `async def` handler is awaited by long-lived
asyncio worker tasks on the application's loop, in a copy of the context
`running()` was entered in (aio_workers.py); a plain `def` handler runs in a
worker thread. The guarantees are the trio host's: D1 (docs/protocol.md: no
handler after the lease, its check and the handler's first step in one loop
step), per-key order, ack after the handler, retries and dead letters, D3's
messages, a clean leave on exit; a handler's exception is logged and counted,
the message stays pending (or is retried, or dead-lettered).

`running()` yields once every member has joined (a Redis that is not the
coordinator's raises `StoreMismatch` there), or after `join_wait_s` seconds
with the members still joining in the background (a service must start while
the coordinator is down). `stop()` may be called from any code on the loop: a
task, a handler, a signal handler (`loop.add_signal_handler`).

`open_producer(...)` is the trio producer (same arguments) as an async context
manager of the asyncio loop; `send_batch` returns the ids once Redis has every
record. One loop runs one trio guest run, shared by all its listeners and
producers.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Unpack

import trio

from rsc.common.error_family import ProducerClosed
from rsc.common.errors import ErrorBoundary
from rsc.member.aio_workers import AioWorkers
from rsc.member.codecs import AnyHandler
from rsc.member.listener import Listener, ListenerArguments, ListenerOptions, check_listener_options
from rsc.member.producer import Producer, ProducerOptions, RoutingTable, TypedRecord, check_options
from rsc.member.producer import open_producer as open_trio_producer
from rsc.member.pure.health import ListenerStatus, listener_status
from rsc.member.shells.aio_guest import GuestHost, HostStopped
from rsc.member.shells.runtime import Member, StoreMismatch

__all__ = ["AioListener", "AioProducer", "HostStopped", "StoreMismatch", "listener",
           "open_producer"]

log = logging.getLogger(__name__)

JOIN_WAIT_S = 10.0


class _Started:
    """A `task_status` for `Member.run` that calls back once the member has started."""

    def __init__(self, callback: Callable[[], None]) -> None:
        self._callback = callback

    def started(self, value: object = None) -> None:
        self._callback()


class AioListener:
    """N members of one group running one handler, hosted by the running asyncio loop."""

    def __init__(self, handler: AnyHandler, *, stream_prefix: str, consumer_group: str,
                 **options: Unpack[ListenerOptions]) -> None:
        check_listener_options(options, "AioListener")
        self.handler = handler
        self._listener = Listener(handler, stream_prefix=stream_prefix,  # checks, builds members
                                  consumer_group=consumer_group, **options)
        self._used = False
        self._stopping = False
        self._leave = False  # S2: stop(leave=True) asked for a real leave
        self._host: GuestHost | None = None
        self._finished: asyncio.Future[None] | None = None
        self._joined = 0

    def __call__(self, *args: object, **kwargs: object) -> object:
        """The decorated function stays callable."""
        return self.handler(*args, **kwargs)

    @property
    def members(self) -> list[Member]:
        return self._listener.members

    @property
    def options(self) -> ListenerArguments:
        """What it was built with (the keywords of `Listener`)."""
        return self._listener.options

    def status(self) -> ListenerStatus:
        """D7, as `Listener.status()`, for a FastAPI (or any asyncio) health route, called
        from code on the loop that hosts the members; `to_json()` is what the route returns.
        `running` is false once the members stopped, `failure` says why if on their own."""
        finished = self._finished
        failure: str | None = None
        if finished is not None and finished.done() and not finished.cancelled():
            error = finished.exception()
            failure = None if error is None else repr(error)
        return listener_status((member.status() for member in self.members),
                               running=finished is not None and not finished.done(),
                               stopping=self._stopping, failure=failure)

    def stop(self, *, leave: bool = False) -> None:
        """Ask every member to drain, leave and return (from any code on the loop, or a
        signal handler); `running()`'s exit and `run()` then return. Static members leave
        for a while (-2, S2) unless `leave=True`."""
        self._stopping = True
        self._leave = self._leave or leave
        if self._host is not None and self._host.token is not None:
            self._host.soon(functools.partial(self._listener.stop, leave=self._leave))

    @asynccontextmanager
    async def running(self, *, join_wait_s: float | None = JOIN_WAIT_S
                      ) -> AsyncIterator[AioListener]:
        """Start the members on the running loop; on exit, drain, leave and return.

        Yields once every member has joined, or after `join_wait_s` (None: no limit) with
        the rest joining in the background. Raises StoreMismatch at entry when the
        members' Redis is not the coordinator's (and at exit if that was found later).
        """
        if self._used:
            raise RuntimeError("a listener runs once: build another one to run again")
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise TypeError("an AioListener runs on a running asyncio loop, and none runs here "
                            "(a trio program or test? use rsc.member.listener there)") from None
        self._used = True
        host = await GuestHost.acquire()
        self._host = host
        context = contextvars.copy_context()  # the application's: handlers see asyncio
        for member in self.members:
            member.make_workers = functools.partial(  # type: ignore[assignment]  # one .run()
                AioWorkers, host=host, context=context)
        joined: asyncio.Future[None] = loop.create_future()
        finished = self._finished = host.call(self._serve, joined)
        try:
            first: list[asyncio.Future[None]] = [joined, finished]
            await asyncio.wait(first, timeout=join_wait_s,
                               return_when=asyncio.FIRST_COMPLETED)
            if finished.done():
                finished.result()  # what stopped the members before they all joined
        except BaseException:
            await self._end(host, finished)
            raise
        try:
            yield self
        except BaseException:
            await self._end(host, finished, reraise=False)
            raise
        await self._end(host, finished)

    async def _end(self, host: GuestHost, finished: asyncio.Future[None], *,
                   reraise: bool = True) -> None:
        self.stop()
        try:
            await asyncio.shield(finished)
        except Exception as exc:
            if reraise:
                raise
            log.warning("listener stopped with %r", exc)
        finally:
            await host.release()

    async def run(self) -> None:
        """Run until `stop()` (or the task is cancelled): then drain, leave and return.

        Raises StoreMismatch when the members' Redis is not the coordinator's.
        """
        async with self.running(join_wait_s=0):
            assert self._finished is not None
            await asyncio.shield(self._finished)

    async def _serve(self, joined: asyncio.Future[None]) -> None:
        """The trio side: every member at once (none waits for another's join)."""
        members = self.members
        if self._stopping:
            self._listener.stop(leave=self._leave)

        def one_started() -> None:
            self._joined += 1
            if self._joined == len(members) and not joined.done():
                joined.set_result(None)

        with ErrorBoundary(on_failure=self._listener.say_final):  # L1: one error, never a group
            async with trio.open_nursery() as nursery:
                for member in members:
                    nursery.start_soon(functools.partial(
                        member.run, task_status=_Started(one_started)))



def listener(stream_prefix: str, consumer_group: str, **options: Unpack[ListenerOptions]
             ) -> Callable[[AnyHandler], AioListener]:
    """Decorator form of `AioListener`: `@listener("orders", "billing", coordinator_url=...)`.
    A keyword it does not take is a TypeError here (and a mypy error: `ListenerOptions`)."""
    check_listener_options(options, "listener")

    def wrap(handler: AnyHandler) -> AioListener:
        return AioListener(handler, stream_prefix=stream_prefix, consumer_group=consumer_group,
                           **options)

    return wrap


class AioProducer:
    """The trio producer, called from asyncio code (each call runs in the guest run)."""

    def __init__(self, host: GuestHost, producer: Producer) -> None:
        self._host = host
        self.producer = producer

    @property
    def routing(self) -> RoutingTable | None:
        return self.producer.routing

    async def send(self, key: str | bytes | None, value: object,
                   headers: Mapping[str, str | bytes] | None = None, *,
                   timeout: float | None = None) -> str:
        """Write one message (as the trio producer's `send`); its entry id. `timeout`
        (default the producer's `send_timeout_s`): SendTimeout after that long (L3)."""
        return (await self.send_batch([(key, value, headers)], timeout=timeout))[0]

    async def send_batch(self, records: Sequence[TypedRecord], *,
                         timeout: float | None = None) -> list[str]:
        """Write (key, value[, headers]) records in one pipeline; return the ids once Redis has
        them. `timeout` (seconds; default the producer's `send_timeout_s`, None: as D2
        says): SendTimeout with `confirmed` and `not_accepted` when Redis does not have
        them all by then (L3); the accepted records are still delivered."""
        located = await self.send_batch_located(records, timeout=timeout)
        return [entry_id for _, entry_id in located]

    async def send_batch_located(self, records: Sequence[TypedRecord], *,
                                 timeout: float | None = None) -> list[tuple[str, str]]:
        """Like `send_batch`, returning the (stream, entry id) where each record landed. The
        values go through the producer's `codec=` (if any) in the calling task."""
        producer = self.producer
        if producer.closed:
            raise ProducerClosed(f"the producer of {producer.stream_prefix!r} is closed")
        with producer.outgoing(records) as ready:
            return await self._host.call(functools.partial(producer.deliver, list(ready),
                                                           timeout=timeout))


@asynccontextmanager
async def open_producer(coordinator_url: str, redis_url: str, stream_prefix: str,
                        **options: Unpack[ProducerOptions]) -> AsyncIterator[AioProducer]:
    """`rsc.member.producer.open_producer` (same arguments, `ProducerOptions`) on the running
    asyncio loop. A final error (a refused token, L2) is raised at the open."""
    check_options(options, ProducerOptions, "open_producer")
    loop = asyncio.get_running_loop()
    host = await GuestHost.acquire()
    opened: asyncio.Future[Producer] = loop.create_future()
    closing = trio.Event()

    async def serve() -> None:
        async with open_trio_producer(coordinator_url, redis_url, stream_prefix,
                                      **options) as producer:
            opened.set_result(producer)
            await closing.wait()

    served = host.call(serve)
    try:
        first: list[asyncio.Future[Producer] | asyncio.Future[None]] = [opened, served]
        await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
        if not opened.done():
            served.result()  # why it did not open
            raise HostStopped("the producer ended before it opened")
        yield AioProducer(host, opened.result())
    finally:
        host.soon(closing.set)
        try:
            await asyncio.shield(served)
        finally:
            await host.release()
