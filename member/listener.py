"""The listener API: what applications import to consume a group.

    from rsc.member.listener import listener

    @listener("orders", "billing", coordinator_url="ws://127.0.0.1:8765",
              redis_url="redis://127.0.0.1:6379/0", concurrency=2, runtime_max_concurrency=8)
    async def handle(message):
        print(message.shard, message.id, message.key, message.value)

    trio.run(handle.run)          # until handle.stop(): drains, leaves, returns

`concurrency=N` runs N independent members (own memberId, heartbeat and
assignment); `runtime_max_concurrency` is each member's worker capacity,
reported to the coordinator; the workers actually used follow the
coordinator's `maxConcurrency`. Sync handlers run in worker threads.

Before its first read each member checks that its Redis is the coordinator's
(the heartbeat routing's `storeId`); another Redis makes `run` raise
`StoreMismatch` naming both URLs (`check_store_id=False` skips this, for a
caller that checked already). A join refused by a coordinator cap is retried
with backoff and said once as a warning (and a `join refused` event).

`codec=` (rsc/member/codecs.py: "json", a pydantic model or a msgspec Struct class, or a
codec object) decodes each value before the handler, which then takes the value, or the
value and the message; a value that does not decode goes to the retry policy's dead-letter
stream with the error named, without retries in place. `tracing=True` (the `[otel]` extra,
rsc/member/shells/otel.py) runs each handler call in an OpenTelemetry consumer span linked to the
producer's.

Static membership (S1..S6): `instance_id="pod-0"` makes the members static (with
`concurrency=N`, member `i` uses `pod-0-i`). Then `stop()` leaves for a while
(memberEpoch -2, S2): the group keeps the shards for a member that comes back
with the same instance id, whatever its memberId, and moves nothing;
`stop(leave=True)` leaves for real (-1, a scale-down). A second live process
with the same instance id waits, retrying its join with backoff and saying so
(UNRELEASED_INSTANCE_ID, S4); a member whose instance id a newer one took over
stops for good and `run` raises `InstanceFenced` naming it (S3).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Mapping
from typing import Required, TypedDict, Unpack, cast

import trio

from rsc.common.error_family import Unrecoverable
from rsc.common.errors import ErrorBoundary
from rsc.common.wording import log_final
from rsc.member.codecs import AnyHandler, codec_for, typed_handler
from rsc.member.ids import make_member_id
from rsc.member.notices import Notices
from rsc.member.policies import AckPolicy, RetryPolicy
from rsc.member.pure.budget import ReadBudget
from rsc.member.pure.health import ListenerStatus, listener_status
from rsc.member.shells.runtime import (
    AckObserver,
    EventCallback,
    Handler,
    Member,
    MemberConfig,
    ReadObserver,
)
from rsc.protocol.messages import FieldValueError, check_name

log = logging.getLogger(__name__)


class ListenerOptions(TypedDict, total=False):
    """The keyword arguments of `listener(...)` and `AioListener(...)` besides the prefix and
    group, typed (L6): a misspelt one is a mypy error and a TypeError at the call. Their
    meaning: `Listener`."""

    coordinator_url: Required[str]
    redis_url: Required[str]
    concurrency: int
    runtime_max_concurrency: int
    ack_policy: AckPolicy
    retry: RetryPolicy | None
    token: str | None
    read_count: int
    block_ms: int
    member_ids: list[str] | None
    on_event: EventCallback | None
    read_observer: ReadObserver | None
    ack_observer: AckObserver | None
    check_store_id: bool
    notices: Notices | None
    ca_file: str | None
    ssl_context: ssl.SSLContext | None
    instance_id: str | None
    codec: object | None
    tracing: object
    read_budget: ReadBudget | None


class ListenerArguments(ListenerOptions):
    """Every keyword a `Listener` was built with (its `options`), the prefix and group too."""

    stream_prefix: Required[str]
    consumer_group: Required[str]


def check_listener_options(options: Mapping[str, object], call: str) -> None:
    """TypeError naming a keyword a listener does not take (L6), at the call."""
    known = ListenerOptions.__annotations__
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError(f"{call}() got an unexpected keyword argument {unknown[0]!r} "
                        f"(it takes stream_prefix, consumer_group, {', '.join(sorted(known))})")


class Listener:
    """N members of one group running one handler (`listener(...)` is its decorator form).

    Every keyword is typed (`ListenerOptions`); see the module for what each does."""

    def __init__(self, handler: AnyHandler, *, stream_prefix: str, consumer_group: str,
                 coordinator_url: str, redis_url: str, concurrency: int = 1,
                 runtime_max_concurrency: int = 4, ack_policy: AckPolicy = AckPolicy.AFTER,
                 retry: RetryPolicy | None = None, token: str | None = None,
                 read_count: int = 100, block_ms: int = 200,
                 member_ids: list[str] | None = None,
                 on_event: EventCallback | None = None,
                 read_observer: ReadObserver | None = None,
                 ack_observer: AckObserver | None = None,
                 check_store_id: bool = True, notices: Notices | None = None,
                 ca_file: str | None = None, ssl_context: ssl.SSLContext | None = None,
                 instance_id: str | None = None, codec: object | None = None,
                 tracing: object = False, read_budget: ReadBudget | None = None) -> None:
        self.options = cast("ListenerArguments", {  # what it was built with (rsc.testing's `bind`)
            name: value for name, value in locals().items() if name not in ("self", "handler")})
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if runtime_max_concurrency < 1:
            raise ValueError(f"runtime_max_concurrency must be >= 1, got {runtime_max_concurrency}")
        ids = member_ids or [make_member_id(index) for index in range(concurrency)]
        instances = member_instance_ids(instance_id, concurrency)
        for instance in instances:
            if instance is not None:
                try:
                    check_name("instance_id", instance, allow_braces=True)  # S1
                except FieldValueError as exc:
                    raise ValueError(f"instance_id {instance_id!r}: {exc}") from None
        self.handler = handler
        self.stream_prefix, self.consumer_group = stream_prefix, consumer_group
        run: Handler = handler if codec is None else typed_handler(handler, codec_for(codec))
        if tracing is not False and tracing is not None:
            from rsc.member.shells.otel import traced_handler  # the [otel] extra, imported when asked

            run = traced_handler(run, stream_prefix=stream_prefix,
                                 consumer_group=consumer_group, tracing=tracing)
        self._running = False
        self._stopping = False
        self._failure: str | None = None
        self.members = [
            Member(MemberConfig(coordinator_url=coordinator_url, redis_url=redis_url,
                                stream_prefix=stream_prefix, consumer_group=consumer_group,
                                member_id=member_id, instance_id=instance,
                                capacity=runtime_max_concurrency,
                                token=token, ack_policy=ack_policy, retry=retry,
                                read_count=read_count, block_ms=block_ms,
                                check_store_id=check_store_id, ca_file=ca_file,
                                ssl_context=ssl_context),
                   run, on_event=on_event, read_observer=read_observer,
                   ack_observer=ack_observer, notices=notices, read_budget=read_budget)
            for member_id, instance in zip(ids[:concurrency], instances, strict=False)
        ]

    def __call__(self, *args: object, **kwargs: object) -> object:
        """The decorated function stays callable."""
        return self.handler(*args, **kwargs)

    def status(self) -> ListenerStatus:
        """D7, for a health or readiness probe: `ready` while every member is in its group
        now; `healthy` unless a member is kept out of a group whose coordinator answers and
        would admit it for longer than D6 allows (then a restart should cure it), or the
        listener stopped on its own (`failure`); `reason` names the first member that is
        not, and why. `to_json()` gives it as a health route returns it."""
        return listener_status((member.status() for member in self.members),
                               running=self._running, stopping=self._stopping,
                               failure=self._failure)

    def stop(self, *, leave: bool = False) -> None:
        """Ask every member to drain, leave and return; static members leave for a while
        (-2, S2) unless `leave=True`."""
        self._stopping = True
        for member in self.members:
            member.stop(leave=leave)

    def say_final(self, failure: BaseException) -> None:
        """L2: a final error that stopped the listener, logged once at ERROR."""
        if isinstance(failure, Unrecoverable):
            where = f"{self.stream_prefix}/{self.consumer_group}"
            log_final(log, f"listener {where} stopped: {failure}")  # L2: said once

    async def run(self, *, task_status: trio.TaskStatus[Listener] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Run every member; `started` once all have joined; return once all have left.

        Raises one error of `rsc.errors`, never a group (L1): StoreMismatch when the members'
        Redis is not the coordinator's, AuthenticationError for a refused token or Redis
        credentials, ConfigurationError for a URL, TLS setup, db or Sentinel service that
        cannot work (L2: after one attempt), InstanceFenced when a newer member took over an
        instance id (S3).
        """
        self._running, self._failure = True, None
        try:
            with ErrorBoundary(on_failure=self.say_final):  # L1: one error, never a group
                async with trio.open_nursery() as nursery:
                    for member in self.members:
                        await nursery.start(member.run)
                    task_status.started(self)
        except Exception as exc:
            self._failure = str(exc)
            raise
        finally:
            self._running = False


def member_instance_ids(instance_id: str | None, concurrency: int) -> list[str | None]:
    """S1: the instanceId of each of `concurrency` members: the one given for a single member,
    `<id>-<i>` for member i of several, none for dynamic members."""
    if instance_id is None:
        return [None] * concurrency
    if concurrency == 1:
        return [instance_id]
    return [f"{instance_id}-{index}" for index in range(concurrency)]



def listener(stream_prefix: str, consumer_group: str, **options: Unpack[ListenerOptions]
             ) -> Callable[[AnyHandler], Listener]:
    """Decorator form of `Listener`: `@listener("orders", "billing", coordinator_url=..., ...)`.
    A keyword it does not take is a TypeError here (and a mypy error: `ListenerOptions`)."""
    check_listener_options(options, "listener")

    def wrap(handler: AnyHandler) -> Listener:
        return Listener(handler, stream_prefix=stream_prefix, consumer_group=consumer_group,
                        **options)

    return wrap
