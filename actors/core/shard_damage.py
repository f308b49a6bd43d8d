"""B7: damage a Redis user can do to a shard that the coordinator can see, and what it repairs.

Redis ACLs cannot say "only through our scripts" (docs/operations/redis.md), so a producer's
or member's user can still, for example, `XADD` the largest id to a shard (no later write fits:
`maxId`), create a key at a current version's seal marker (producers refuse to write:
`falseSeal`), or delete a sealed version's marker (a stale producer's write lands in a
draining stream: `missingSeal`).

`find_damage` is pure: from the confirmed metadata (the prefix's persisted routing and
migration, read while no batch of the prefix runs) and what Redis says of each stream, the
damage of each shard and the repair that is safe: a false seal marker is removed and a
missing one written, since the confirmed metadata says which versions are current and which
are sealed; a stream at the largest id is only reported (nothing can take it back).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import attrs

from rsc.actors.core.records import MigrationRecord, RoutingRecord

MAX_STREAM_ID = "18446744073709551615-18446744073709551615"
CHECK_INTERVAL_S = 60.0  # every shard of every live version, once a minute


class Damage(enum.StrEnum):
    MAX_ID = "maxId"
    FALSE_SEAL = "falseSeal"
    MISSING_SEAL = "missingSeal"


@attrs.frozen
class StreamFacts:
    """What Redis says of one shard: whether the stream exists, its last id, its seal marker."""

    exists: bool
    last_id: str | None
    sealed: bool


@attrs.frozen
class Finding:
    shard: str
    damage: Damage
    repair: str | None  # "unseal" or "seal": what the coordinator does about it; None: nothing


def streams_to_check(routing: RoutingRecord | None,
                     migration: MigrationRecord | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(current streams, sealed streams) of the confirmed metadata: the routing's version, and
    a migration's old version still draining or kept (not yet retired)."""
    current = routing.streams if routing is not None else ()
    sealed = migration.from_streams if migration is not None else ()
    return current, tuple(stream for stream in sealed if stream not in current)


def find_damage(current: tuple[str, ...], sealed: tuple[str, ...],
                facts: Mapping[str, StreamFacts]) -> list[Finding]:
    """Every damage of these shards, in shard order, with its safe repair."""
    findings: list[Finding] = []
    for stream in current:
        fact = facts.get(stream)
        if fact is None:
            continue
        if fact.last_id == MAX_STREAM_ID:
            findings.append(Finding(stream, Damage.MAX_ID, None))
        if fact.sealed:
            findings.append(Finding(stream, Damage.FALSE_SEAL, "unseal"))
    for stream in sealed:
        fact = facts.get(stream)
        if fact is None or not fact.exists:
            continue  # retired (deleted with its marker): nothing to seal
        if fact.last_id == MAX_STREAM_ID:
            findings.append(Finding(stream, Damage.MAX_ID, None))
        if not fact.sealed:
            findings.append(Finding(stream, Damage.MISSING_SEAL, "seal"))
    return findings
