"""OpenTelemetry tracing of producers and handlers (`tracing=True`, the `[otel]` extra).

    pip install 'redis-stream-coordinator[otel]'      # opentelemetry-api; bring your SDK

    producer = open_producer(..., tracing=True)        # the global tracer provider
    @listener("orders", "billing", ..., tracing=True)  # or tracing=<a TracerProvider>

A producer with tracing opens a PRODUCER span `send <prefix>` around each batch (a child of
the caller's current span, if any) and writes its context into every message's headers with
the configured propagator (W3C `traceparent`, and `tracestate`/`baggage` when set) unless
the record sets that header itself. A listener with tracing runs each handler call (each
attempt) in a CONSUMER span `process <prefix>` whose parent is the context the message
carries, and which links to it (the messaging conventions' creation context), so one trace
goes from the request that produced to every handler call that consumed. A handler's
exception (or a value that does not decode) is recorded on the span as an exception event,
with error status and `error.type`.

Attributes (OpenTelemetry messaging semantic conventions): `messaging.system`
("redis_streams"), `messaging.destination.name` (the shard stream on the consumer side, the
prefix on the producer side), `messaging.destination.template` (the prefix),
`messaging.operation.type` and `messaging.operation` ("send" / "process"),
`messaging.operation.name`, `messaging.message.id`, `messaging.consumer.group.name`,
`messaging.client.id` (the member id), `messaging.message.body.size`,
`messaging.batch.message_count`, and `rsc.attempt`.

Without the `[otel]` extra, `tracing=True` raises `MissingExtra` naming it; without an SDK
(no tracer provider set) the spans are OpenTelemetry's no-op ones and nothing is injected.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from importlib import metadata
from typing import Protocol

from rsc.common.extras import require
from rsc.member.message import Handler, Message

__all__ = ["SYSTEM", "ProducerTracing", "traced_handler"]

SYSTEM = "redis_streams"
FEATURE = "tracing=True (OpenTelemetry)"


class Span(Protocol):
    """What this module calls on an OpenTelemetry span (`opentelemetry.trace.Span`)."""

    def set_attribute(self, key: str, value: str) -> None: ...

    def record_exception(self, exception: BaseException) -> None: ...

    def set_status(self, status: object) -> None: ...


class Tracer(Protocol):
    """What this module calls on an OpenTelemetry tracer (`opentelemetry.trace.Tracer`)."""

    def start_span(self, name: str, *, context: object, kind: object, links: Sequence[object],
                   attributes: Mapping[str, object]) -> Span: ...

    def start_as_current_span(self, name: str, *, kind: object,
                              attributes: Mapping[str, object]
                              ) -> AbstractContextManager[Span]: ...


def _tracer(tracing: object) -> Tracer:
    """The tracer of `tracing=`: True for the global tracer provider, or a provider."""
    trace = require("opentelemetry.trace", extra="otel", feature=FEATURE)
    try:
        version: str | None = metadata.version("redis-stream-coordinator")
    except metadata.PackageNotFoundError:  # a checkout on sys.path, not installed
        version = None
    provider = None if tracing is True else tracing
    tracer: Tracer = trace.get_tracer("rsc", version, tracer_provider=provider)
    return tracer


class ProducerTracing:
    """A producer's spans and the context written into its messages' headers."""

    def __init__(self, stream_prefix: str, tracing: object) -> None:
        self._tracer = _tracer(tracing)
        self._trace = require("opentelemetry.trace", extra="otel", feature=FEATURE)
        self._propagate = require("opentelemetry.propagate", extra="otel", feature=FEATURE)
        self.stream_prefix = stream_prefix
        self.name = f"send {stream_prefix}"

    @contextmanager
    def sending(self, records: Sequence[object]) -> Iterator[list[object]]:
        """The batch's span (current while it is written) and the records with its context
        in their headers; an exception out of the block is recorded on the span."""
        attributes = {"messaging.system": SYSTEM,
                      "messaging.destination.name": self.stream_prefix,
                      "messaging.destination.template": self.stream_prefix,
                      "messaging.operation.type": "send", "messaging.operation": "send",
                      "messaging.operation.name": "send",
                      "messaging.batch.message_count": len(records)}
        with self._tracer.start_as_current_span(
                self.name, kind=self._trace.SpanKind.PRODUCER, attributes=attributes) as span:
            carrier: dict[str, str] = {}
            self._propagate.inject(carrier)
            if not carrier:
                yield list(records)
                return
            try:
                yield [with_headers(record, carrier) for record in records]
            except Exception as exc:
                span.set_attribute("error.type", type(exc).__qualname__)
                raise


def with_headers(record: object, carrier: dict[str, str]) -> object:
    """A record with the trace context's headers added (a header the record sets wins; a
    malformed record is left for the producer's check to name)."""
    if not isinstance(record, tuple | list) or len(record) not in (2, 3):
        return record
    key, value, *rest = record
    headers = rest[0] if rest else None
    if headers is None:
        return (key, value, dict(carrier))
    if not hasattr(headers, "items"):
        return record
    return (key, value, {**carrier, **headers})


def traced_handler(handler: Handler, *, stream_prefix: str, consumer_group: str,
                   tracing: object) -> Handler:
    """`handler` with each call in a CONSUMER span whose parent is the message's context and
    which links to it; async stays async, plain stays plain."""
    tracer = _tracer(tracing)
    trace = require("opentelemetry.trace", extra="otel", feature=FEATURE)
    propagate = require("opentelemetry.propagate", extra="otel", feature=FEATURE)
    status = require("opentelemetry.trace.status", extra="otel", feature=FEATURE)
    consumer, name = trace.SpanKind.CONSUMER, f"process {stream_prefix}"

    def start(message: Message) -> Span:
        carrier = {header: data.decode("utf-8", "replace")
                   for header, data in message.headers.items()}
        parent = propagate.extract(carrier)
        context = trace.get_current_span(parent).get_span_context()
        links = [trace.Link(context)] if context.is_valid else []
        attributes = {"messaging.system": SYSTEM,
                      "messaging.destination.name": message.shard,
                      "messaging.destination.template": stream_prefix,
                      "messaging.consumer.group.name": consumer_group,
                      "messaging.operation.type": "process", "messaging.operation": "process",
                      "messaging.operation.name": "process",
                      "messaging.message.id": message.id,
                      "messaging.client.id": message.member_id,
                      "messaging.message.body.size": len(message.value_bytes),
                      "rsc.attempt": message.attempt}
        span: Span = tracer.start_span(name, context=parent, kind=consumer, links=links,
                                       attributes=attributes)
        return span

    def failed(span: Span, error: Exception) -> None:
        span.record_exception(error)
        span.set_attribute("error.type", type(error).__qualname__)
        span.set_status(status.Status(status.StatusCode.ERROR,
                                      f"{type(error).__name__}: {error}"))

    def using(span: Span) -> AbstractContextManager[object]:
        used: AbstractContextManager[object] = trace.use_span(
            span, end_on_exit=True, record_exception=False, set_status_on_exception=False)
        return used

    if inspect.iscoroutinefunction(handler):
        async def run_async(message: Message) -> None:
            span = start(message)
            with using(span):
                try:
                    await handler(message)
                except Exception as exc:
                    failed(span, exc)
                    raise

        return run_async

    def run_sync(message: Message) -> None:
        span = start(message)
        with using(span):
            try:
                handler(message)
            except Exception as exc:
                failed(span, exc)
                raise

    return run_sync
