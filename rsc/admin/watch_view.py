"""`rsc admin watch`'s words: its header, its waiting line, and what changed between two
descriptions of a group, one short phrase per change. Pure, no I/O.

A change is what `watch_signature` keeps: members, epochs, state, assignment, routing,
migration, retention and maxConcurrency; never the request id or the ages, and the shards'
moving figures only where they count (`watch --json`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, TypedDict

import attrs
from rich.text import Text

from rsc.admin.group_view import held_shards, retention_of
from rsc.admin.view_text import (
    display_name,
    format_age,
    format_count,
    group_text,
    max_concurrency_summary,
    migration_summary,
    name_text,
    plain,
    retention_summary,
    routing_summary,
    shards_text,
    short_shard,
    text_value,
)
from rsc.protocol import (
    GroupDescription,
    MemberDescription,
    MemberState,
    MigrationDescription,
    ShardDescription,
)


def waiting_view(prefix: str, group: str) -> Text:
    return plain("waiting for group ", group_text(prefix, group),
                 " to appear (no member has joined and set-shards was not called)")


def watch_header(url: str, prefix: str, group: str, mode: str) -> Text:
    """The line that keeps the coordinator's URL on screen while watching."""
    return plain(Text("watching ", style="bold"), group_text(prefix, group, "bold cyan"),
                 Text(" on ", style="bold"), name_text(url, "bold"),
                 Text(f" ({mode}); Ctrl-C to stop", style="dim"))


MEMBERS_NAMED_FIRST = 5  # watch's first line names the members up to this many
SHARD_FIGURES = ("length", "last_delivered_id", "lag", "pending", "oldest_pending_ms",
                 "max_delivery_count", "oldest_undelivered_age_ms", "oldest_pending_entry_age_ms")
SHARD_AGES = ("oldest_pending_ms", "oldest_undelivered_age_ms", "oldest_pending_entry_age_ms")
"""A shard's moving figures: `watch` shows them in its table, never as a change line."""


class _DescriptionChanges(TypedDict, total=False):
    """The fields `watch_signature` blanks or replaces in a GroupDescription."""

    request_id: int | None
    members: tuple[MemberDescription, ...]
    shards: tuple[ShardDescription, ...]
    migration: MigrationDescription
    oldest_undelivered_age_ms: int | None
    oldest_pending_entry_age_ms: int | None


def watch_signature(description: GroupDescription, figures: bool = False) -> GroupDescription:
    """What counts as a change for `watch`: everything but the request id and the ages.

    Without `figures` the shards' lengths, offsets and backlog and the blocking groups'
    counts are left out too: they move with every entry produced or acked, and a line a
    second saying so is noise. Members, epochs, state, assignment, routing, migration,
    retention and maxConcurrency stay.
    """
    members = tuple(attrs.evolve(member, last_heartbeat_ms_ago=None, away_ms=None)
                    for member in description.members)
    changes: _DescriptionChanges = {"request_id": None, "members": members,
                                    "oldest_undelivered_age_ms": None,  # C4: ages tick
                                    "oldest_pending_entry_age_ms": None}
    if description.shards:
        # the signature is only compared: None stands for "not counted", whatever the type
        blank: dict[str, Any] = dict.fromkeys(SHARD_FIGURES if not figures else SHARD_AGES)
        changes["shards"] = tuple(attrs.evolve(shard, **blank) for shard in description.shards)
    migration = description.migration
    if not figures and migration is not None:
        changes["migration"] = attrs.evolve(migration, blocking_groups=tuple(
            attrs.evolve(entry, undelivered=None, pending=0) for entry in migration.blocking_groups))
    return attrs.evolve(description, **changes)


def change_lines(before: GroupDescription | None, after: GroupDescription) -> list[str]:
    """What changed between two descriptions of a group, one short phrase per change."""
    if before is None:
        names = sorted(display_name(member.member_id) for member in after.members)
        listed = f": {', '.join(names)}" if names and len(names) <= MEMBERS_NAMED_FIRST else ""
        return [f"group {text_value(after.state)} at epoch {after.group_epoch}, "
                f"{len(after.members)} member(s){listed}"]
    lines: list[str] = []
    if before.group_epoch != after.group_epoch:
        lines.append(f"group epoch {before.group_epoch} -> {after.group_epoch}")
    if before.assignment_epoch != after.assignment_epoch:
        lines.append(f"assignment epoch {before.assignment_epoch} -> {after.assignment_epoch}")
    if before.state != after.state:
        lines.append(f"state {text_value(before.state)} -> {text_value(after.state)}")
    old = {member.member_id: member for member in before.members}
    new = {member.member_id: member for member in after.members}
    # S3: a return under a new memberId replaces the old one, instanceId for instanceId
    old_by_instance = {mb.instance_id: mid for mid, mb in old.items() if mb.instance_id}
    replaced: dict[str, str] = {}
    for member_id in sorted(new.keys() - old.keys()):
        instance = new[member_id].instance_id
        previous = old_by_instance.get(instance) if instance else None
        if instance and previous is not None and previous not in new:
            replaced[previous] = member_id
            lines.append(f"instance {display_name(instance)} returned as member "
                         f"{display_name(member_id)} (replacing {display_name(previous)})")
        else:
            lines.append(f"member {display_name(member_id)} joined")
    lines += [f"member {display_name(member_id)} left or expired"
              for member_id in sorted(old.keys() - new.keys()) if member_id not in replaced]
    for member_id in sorted(new.keys() & old.keys()):
        lines += _member_changes(member_id, old[member_id], new[member_id], after.stream_prefix)
    if before.routing != after.routing and after.routing is not None:
        lines.append(f"routing: {routing_summary(after)}")
    if migration_summary(before.migration) != migration_summary(after.migration):
        lines.append(f"migration: {migration_summary(after.migration)}")
    lines += _blocking_changes(before.migration, after.migration)
    if retention_of(before) != retention_of(after):
        lines.append(f"retention: {retention_summary(retention_of(after))}")
    if before.max_concurrency != after.max_concurrency:
        lines.append(f"maxConcurrency: {max_concurrency_summary(after.max_concurrency)}")
    if not lines:
        lines += _other_changes(before, after)
    return lines


def _other_changes(before: GroupDescription, after: GroupDescription) -> list[str]:
    """Changes no phrase above names (shard owners, member epochs), named briefly."""
    owners = {shard.shard: shard.owner for shard in before.shards}
    moved = [shard for shard in after.shards if owners.get(shard.shard, shard.owner) != shard.owner]
    if moved:
        prefix = after.stream_prefix
        return [f"owner of {short_shard(shard.shard, prefix)} "
                f"{text_value(owners[shard.shard])} -> {text_value(shard.owner)}"
                for shard in moved]
    def figures(description: GroupDescription) -> list[tuple[object, ...]]:
        return [tuple(getattr(shard, name) for name in SHARD_FIGURES)
                for shard in description.shards]
    epochs = {member.member_id: member.member_epoch for member in before.members}
    bumped = [f"member {display_name(member.member_id)} epoch {epochs[member.member_id]} -> "
              f"{member.member_epoch}" for member in sorted(after.members, key=lambda m: m.member_id)
              if epochs.get(member.member_id, member.member_epoch) != member.member_epoch]
    if bumped:
        return bumped
    if figures(before) != figures(after):
        return ["backlog figures changed"]  # a change only where figures count (watch --json)
    return ["assignment details changed (describe shows them)"]


def _blocking_changes(before: MigrationDescription | None,
                      after: MigrationDescription | None) -> list[str]:
    """Groups a migration starts or stops waiting on (G2); their counts are not changes."""
    def names(migration: MigrationDescription | None) -> set[str]:
        return set() if migration is None else {
            entry.consumer_group for entry in migration.blocking_groups}
    old, new = names(before), names(after)
    return ([f"migration waits on group {display_name(name)}" for name in sorted(new - old)]
            + [f"migration no longer waits on group {display_name(name)}"
               for name in sorted(old - new)])


def _member_changes(member_id: str, old: MemberDescription, new: MemberDescription,
                    prefix: str) -> Iterator[str]:
    name = display_name(member_id)
    if old.state != new.state:
        yield f"member {name} {text_value(old.state)} -> {text_value(new.state)}"
        if new.state == MemberState.AWAY:  # S2, S5: its shards wait for it
            yield f"member {name} is away; its target waits for it"
    gained = frozenset(new.assigned_shards) - frozenset(old.assigned_shards)
    if gained:
        yield f"member {name} got {shards_text(gained, prefix).plain}"
    released = held_shards(old) - held_shards(new)
    if released:
        yield f"member {name} released {shards_text(released, prefix).plain}"
    if new.overdue and not old.overdue:
        yield f"member {name} is overdue (no heartbeat for {format_age(new.last_heartbeat_ms_ago)})"
    elif old.overdue and not new.overdue:
        yield f"member {name} heartbeats again"
    if old.capacity != new.capacity:
        yield f"member {name} capacity {format_count(old.capacity)} -> {format_count(new.capacity)}"


def change_event_text(clock: str, lines: Sequence[str]) -> Text:
    """One line per change event: its wall-clock time and what changed."""
    return Text(f"{clock}  " + "; ".join(lines))

