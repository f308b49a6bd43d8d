"""The producer for plain threaded code: Django, Flask, Celery workers, scripts.

    from rsc.member.sync import open_producer

    producer = open_producer("ws://127.0.0.1:8765", "redis://127.0.0.1:6379/0", "orders")
    entry_id = producer.send("customer-7", "paid")      # returns once Redis has it (D2)
    producer.send_batch([("customer-9", "shipped"), ("customer-7", "refunded")])
    producer.close()                                     # or `with open_producer(...) as producer:`

It is the trio producer (`rsc.member.producer`) running in a loop of its own, in a daemon
thread (rsc/common/trio_thread.py): every call blocks the calling thread until Redis has
the records, with the same promise (D2: a lost coordinator session, a Redis error, a
sealed or retired shard are retried or re-routed, never dropped). One producer is safe to
share between threads: their calls run concurrently in its loop. A producer still open
when the interpreter exits is closed then (`atexit`); calls after `close()` raise
`ProducerClosed`. Not for asyncio code: use `rsc.member.aio.open_producer` there.
"""

from __future__ import annotations

import atexit
import functools
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Unpack

import trio

from rsc.common.error_family import ProducerClosed, RscError
from rsc.common.trio_thread import LoopClosed, TrioThread
from rsc.member.producer import Producer, ProducerOptions, RoutingTable, TypedRecord, check_options
from rsc.member.producer import open_producer as open_trio_producer

__all__ = ["ProducerClosed", "SyncProducer", "open_producer"]

_open: weakref.WeakSet[SyncProducer] = weakref.WeakSet()
_open_lock = threading.Lock()


class SyncProducer:
    """A producer for threaded code; build it with `open_producer`."""

    def __init__(self, coordinator_url: str, redis_url: str, stream_prefix: str,
                 **options: Unpack[ProducerOptions]) -> None:
        check_options(options, ProducerOptions, "open_producer")
        self.stream_prefix = stream_prefix
        self._loop: TrioThread[Producer] = TrioThread(f"rsc producer {stream_prefix}")
        self._loop.start(lambda: open_trio_producer(coordinator_url, redis_url, stream_prefix,
                                                    **options))
        with _open_lock:
            _open.add(self)

    @property
    def producer(self) -> Producer:
        """The trio producer inside (its counters: `sent`, `retried`, `rerouted`)."""
        producer = self._loop.opened
        assert producer is not None  # __init__ returned: start() opened it
        return producer

    @property
    def routing(self) -> RoutingTable | None:
        return self.producer.routing

    def send(self, key: str | bytes | None, value: object,
             headers: Mapping[str, str | bytes] | None = None, *,
             timeout: float | None = None) -> str:
        """Write one message (as the trio producer's `send`); its entry id once Redis has it.
        `timeout` (default the producer's `send_timeout_s`): SendTimeout after that long (L3)."""
        return self.send_batch([(key, value, headers)], timeout=timeout)[0]

    def send_batch(self, records: Sequence[TypedRecord], *,
                   timeout: float | None = None) -> list[str]:
        """Write (key, value[, headers]) records in one pipeline; their ids once Redis has them
        all. The values go through the producer's `codec=` (if any) on the calling thread.
        `timeout` (seconds; default the producer's `send_timeout_s`, None: as D2 says):
        SendTimeout with `confirmed` and `not_accepted` when Redis does not have them all
        by then (L3); the accepted records are still delivered."""
        producer = self.producer
        try:
            with producer.outgoing(records) as ready:
                located = self._loop.call(functools.partial(producer.deliver, list(ready),
                                                            timeout=timeout))
        except (LoopClosed, trio.Cancelled, trio.RunFinishedError):
            # L1: the loop ended under the call (close() from another thread, or a final
            # error): the caller gets that error or ProducerClosed, never trio's own
            raise self._ended() from None
        return [entry_id for _, entry_id in located]

    def _ended(self) -> RscError:
        """The error for a call on a producer whose loop has ended: the final error that
        ended it (L2), else ProducerClosed."""
        for failure in (self.producer.fatal if self._loop.opened is not None else None,
                        self._loop.failure):
            if isinstance(failure, RscError):
                return failure
        return ProducerClosed(f"the producer of {self.stream_prefix!r} is closed")

    def close(self) -> None:
        """Close the coordinator session and the Redis connection (every finished call
        delivered what it was given); idempotent."""
        self._loop.close()
        with _open_lock:
            _open.discard(self)

    def __enter__(self) -> SyncProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_producer(coordinator_url: str, redis_url: str, stream_prefix: str,
                  **options: Unpack[ProducerOptions]) -> SyncProducer:
    """A producer for threaded code, open: the arguments of `rsc.member.producer.open_producer`
    (`ProducerOptions`: token, ca_file, ssl_context, routing_wait_s, send_timeout_s, ...).
    Use it as a context manager or call `close()`; one left open is closed when the
    interpreter exits. A final error (a refused token, L2) is raised here."""
    return SyncProducer(coordinator_url, redis_url, stream_prefix, **options)


@atexit.register
def _close_open_producers() -> None:
    with _open_lock:
        producers = list(_open)
    for producer in producers:
        producer.close()
