"""Counters and gauges of one member, for callers and metrics exporters to read."""

from __future__ import annotations

from collections.abc import Mapping

import attrs


@attrs.define
class MemberStats:
    """Live numbers of a member runtime; read them, never write them from outside.

    processed / failed count handler outcomes (a retried message counts each
    failure); acked counts entries Redis acknowledged; in_flight is per shard
    (handed to a worker, not yet acked or dropped: a read-only view of the
    ledger's books, which decide with it); lag is per owned shard (entries the
    group has not been delivered yet), refreshed every few seconds.
    """

    member_id: str
    member_epoch: int = 0
    processed: int = 0
    failed: int = 0
    acked: int = 0
    dead_lettered: int = 0
    redelivered: int = 0  # claimed with a delivery count of 10 or more (P1: a crash loop)
    gone_pending: int = 0  # pending entries whose body was gone (trimmed), acked (P1)
    redrives_passed: int = 0  # entries sent back for another group, acked without a call (P3)
    ack_refusals: int = 0
    fences: int = 0
    workers: int = 0
    in_flight: Mapping[str, int] = attrs.field(factory=dict)
    lag: dict[str, int | None] = attrs.field(factory=dict)
    owned_shards: tuple[str, ...] = ()
