"""Per-listener choices: when to ack, optional retry with dead letters, idempotency markers.

Pure: the retry policy decides what follows a failed handler call
(`RetryPolicy.after_failure`), the worker shell does it. Every call it
decides on but the first, and the dead-letter write, is admitted by the
ledger first (D1), as a handler call is.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Protocol

import attrs


class AckPolicy(enum.Enum):
    """AFTER (default): ack once the handler returned (at-least-once).
    BEFORE: ack first, then run the handler (at-most-once: a crash loses the message)."""

    AFTER = "after"
    BEFORE = "before"


@attrs.frozen
class RetryLater:
    """Run the handler again, attempt `attempt`, after `delay_s`."""

    attempt: int
    delay_s: float


@attrs.frozen
class DeadLetter:
    """Every attempt failed: write the message to `stream` (with the last error), then ack it."""

    stream: str
    attempts: int


@attrs.frozen
class LeavePending:
    """Every attempt failed and there is no dead-letter stream: no ack, so the entry stays
    pending in Redis and is delivered again when its shard changes owner or the member restarts."""

    attempts: int


AfterFailure = RetryLater | DeadLetter | LeavePending


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """Retry a failing handler in place, then dead-letter it (off unless given to a listener).

    max_deliveries: handler attempts for one delivery, including the first.
    dead_letter_stream: where the message goes (with the last error) once every
    attempt failed; it is then acked. Without one it stays pending in Redis and
    is delivered again when its shard changes owner or the member restarts.
    backoff_ms: pause between attempts.
    """

    max_deliveries: int = attrs.field(default=3, validator=attrs.validators.ge(1))
    dead_letter_stream: str | None = None
    backoff_ms: int = attrs.field(default=100, validator=attrs.validators.ge(0))

    def after_failure(self, attempt: int) -> AfterFailure:
        """What follows the failure of handler attempt `attempt` (1 is the first)."""
        if attempt < self.max_deliveries:
            return RetryLater(attempt=attempt + 1, delay_s=self.backoff_ms / 1000)
        if self.dead_letter_stream is not None:
            return DeadLetter(stream=self.dead_letter_stream, attempts=attempt)
        return LeavePending(attempts=attempt)

    def after_permanent_failure(self, attempt: int) -> DeadLetter | LeavePending:
        """What follows a failure that another attempt would repeat (a value that does not
        decode): no retry in place, the dead-letter stream if there is one."""
        if self.dead_letter_stream is not None:
            return DeadLetter(stream=self.dead_letter_stream, attempts=attempt)
        return LeavePending(attempts=attempt)


NO_RETRY = RetryPolicy(max_deliveries=1)
"""A listener without a retry policy: one attempt, then the entry stays pending."""


def dead_letter_fields(message: DeadMessage, *, error: BaseException | None, attempts: int,
                       consumer_group: str) -> dict[str, str | bytes]:
    """The fields of a dead-letter entry: the message as it was (its key, value and headers
    laid out as in a shard, docs/protocol.md M5: bytes kept, M1), where it came from, and why
    it failed."""
    fields: dict[str, str | bytes] = {}
    if message.key_bytes is not None:
        fields["key"] = message.key_bytes
    fields["value"] = message.value_bytes
    for name, data in message.headers.items():
        fields["h:" + name] = data
    fields.update({"shard": message.shard, "id": message.id, "error": repr(error),
                   "attempts": str(attempts), "consumerGroup": consumer_group,
                   "memberId": message.member_id})
    return fields


class DeadMessage(Protocol):
    """What a dead letter records of a message (a handler's `Message`)."""

    @property
    def shard(self) -> str: ...

    @property
    def id(self) -> str: ...

    @property
    def key_bytes(self) -> bytes | None: ...

    @property
    def value_bytes(self) -> bytes: ...

    @property
    def headers(self) -> Mapping[str, bytes]: ...

    @property
    def member_id(self) -> str: ...


class MarkerStore(Protocol):
    """The two commands the markers use (a sync redis client has them)."""

    def set(self, name: str, value: str, *, nx: bool, ex: int) -> object: ...

    def delete(self, *names: str) -> object: ...


class IdempotencyMarkers:
    """Per-message markers (SET NX with a TTL) so a handler can skip what already ran.

    Use inside a handler: `if markers.first_time(message): do_side_effect()`.
    A marker is written before the side effect, so a crash between the two
    skips that message on redelivery; call `forget` when the side effect failed.
    """

    def __init__(self, client: MarkerStore, *, ttl_s: int = 86400, namespace: str = "rsc:done") -> None:
        self.client = client
        self.ttl_s = ttl_s
        self.namespace = namespace

    def marker_key(self, shard: str, message_id: str) -> str:
        """The marker of one message; it shares the shard's hash tag."""
        return f"{shard}:{self.namespace}:{message_id}"

    def first_time(self, shard: str, message_id: str) -> bool:
        """True exactly once per (shard, message id) within the TTL (blocking; use in threads)."""
        return bool(self.client.set(self.marker_key(shard, message_id), "1", nx=True, ex=self.ttl_s))

    def forget(self, shard: str, message_id: str) -> None:
        """Remove a marker so the message runs again on redelivery."""
        self.client.delete(self.marker_key(shard, message_id))
