"""Per-listener choices: when to ack, optional retry with dead letters, idempotency markers.

Pure: `RetryPolicy` holds the limits, rsc/member/pure/attempts.py decides what follows
from the delivery count Redis keeps (P1), and `dead_letter_fields` lays out a
dead letter (P2); the worker shell does the I/O. Every call but the first, and
the dead-letter write, is admitted by the ledger first (D1), as a handler call is.
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


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """Retry a failing handler, counting attempts in Redis, then dead-letter it (off unless
    given to a listener; docs/protocol.md P1, P2).

    max_deliveries: handler calls a message gets in all processes together, the first
    included (Redis keeps the count on the pending entry, so a crash counts too). An entry
    claimed with that many calls behind it is dead-lettered without another call.
    dead_letter_stream: where it then goes (the message as it was, with its story), before
    it is acked; None: `{<prefix>}:dead:<group>`.
    backoff_ms: pause between two calls in one process; the waiting message holds its key.
    """

    max_deliveries: int = attrs.field(default=10, validator=attrs.validators.ge(1))
    dead_letter_stream: str | None = None
    backoff_ms: int = attrs.field(default=100, validator=attrs.validators.ge(0))

    def stream_for(self, stream_prefix: str, consumer_group: str) -> str:
        """The dead-letter stream of a group: the policy's, or the group's default."""
        if self.dead_letter_stream is not None:
            return self.dead_letter_stream
        return default_dead_letter_stream(stream_prefix, consumer_group)


def default_dead_letter_stream(stream_prefix: str, consumer_group: str) -> str:
    """`{<prefix>}:dead:<group>`: the prefix's hash tag, so it sits by the prefix's keys."""
    return f"{{{stream_prefix}}}:dead:{consumer_group}"


def dead_letter_fields(message: DeadMessage, *, error: str, deliveries: int,
                       consumer_group: str, now_ms: int) -> dict[str, str | bytes]:
    """The fields of a dead-letter entry (P2): the message as it was (its key, value and
    headers laid out as in a shard, docs/protocol.md M5: bytes kept, M1), then its story;
    `error` is `rsc-error` (`error_text` of rsc/member/shells/workers.py: masked, at most 1 KiB)."""
    fields: dict[str, str | bytes] = {}
    if message.key_bytes is not None:
        fields["key"] = message.key_bytes
    fields["value"] = message.value_bytes
    for name, data in message.headers.items():
        fields["h:" + name] = data
    fields.update({
        "rsc-source-stream": message.shard, "rsc-source-id": message.id,
        "rsc-group": consumer_group, "rsc-deliveries": str(deliveries),
        "rsc-error": error, "rsc-member": message.member_id,
        "rsc-dead-at-ms": str(now_ms)})
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
