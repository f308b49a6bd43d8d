"""Per-listener choices: when to ack, optional retry with dead letters, idempotency markers."""

from __future__ import annotations

import enum

import attrs
import redis


class AckPolicy(enum.Enum):
    """AFTER (default): ack once the handler returned (at-least-once).
    BEFORE: ack first, then run the handler (at-most-once: a crash loses the message)."""

    AFTER = "after"
    BEFORE = "before"


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


class IdempotencyMarkers:
    """Per-message markers (SET NX with a TTL) so a handler can skip what already ran.

    Use inside a handler: `if markers.first_time(message): do_side_effect()`.
    A marker is written before the side effect, so a crash between the two
    skips that message on redelivery; call `forget` when the side effect failed.
    """

    def __init__(self, client: redis.Redis, *, ttl_s: int = 86400, namespace: str = "rsc:done") -> None:
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
