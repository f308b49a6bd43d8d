"""The pictures of `rsc admin`: pure functions of protocol responses -> rich renderables.

No I/O here. Every name that came from the wire (prefix, group, member id, shard)
enters rich only as `Text` built by `name_text`, never as a markup string, so
`p[/]`, `[red]x[/red]` and `:smile:` print literally. Characters that would
move the cursor or reorder the line (format and other non-printing characters)
are shown as `\\uXXXX` escapes.

Responses are read through `field`, which takes a protocol object or the raw
JSON object of a response this version's protocol classes do not know yet
(`groupDeleted`, `retentionChanged`, `offsetsReset`), and newer fields
(`shards`, `overdue`, `blockingGroups`, `retention`, `lag`) are read with a
default, so the views work whether or not the protocol carries them.
"""

from __future__ import annotations

import datetime
import io
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypedDict

import attrs
from rich.console import Console, ConsoleOptions, Group, JustifyMethod, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

from rsc.common.lag import backlog, backlog_floor, total_backlog
from rsc.member.attempts import is_crash_loop
from rsc.protocol import (
    FormatVersion,
    FormatVersionChanged,
    GroupDeleted,
    GroupDescription,
    Groups,
    GroupState,
    MaxConcurrencyChanged,
    MemberDescription,
    MemberRemoved,
    MemberState,
    MigrationDescription,
    OffsetsReset,
    RetentionChanged,
    RetentionMode,
    ShardCountChanged,
    ShardDescription,
)
from rsc.protocol.messages import (
    DeadLetters,
    DeadLettersRedriven,
    KeyEntries,
    Message,
    PendingEntries,
    ShardEntries,
    camel,
)

Column = tuple[str, JustifyMethod]
"""A table column: its header and how its cells are justified."""

PLAIN_OUTPUT_WIDTH = 200
NARROW_BELOW = 120
"""Columns below which `describe` switches to its narrow layout (80-column terminals)."""
SHARDS_SHOWN_BY_DEFAULT = 16
MEMBERS_SHOWN_BY_DEFAULT = 50  # describe shows every member up to this many, else a summary
MEMBER_ROWS_IN_SUMMARY = 20
"""describe shows the per-shard table by itself up to this many shards (else `--shards`)."""

GROUP_STATE_STYLES: dict[str, str] = {GroupState.STABLE: "green", GroupState.RECONCILING: "yellow",
                                      GroupState.EMPTY: "dim"}
MEMBER_STATE_STYLES: dict[str, str] = {MemberState.STABLE: "green", MemberState.UNRELEASED_SHARDS: "yellow",
                                       MemberState.UNREVOKED_SHARDS: "red", MemberState.AWAY: "cyan"}
WAITING_STYLE = "bold yellow"
REVOKING_STYLE = "bold red"
BEHIND_STYLE = "yellow"
BLOCKING_STYLE = "bold red"
OVERDUE_STYLE = "bold red"
NOT_HELD_MARKER = "*"
NOT_TARGET_MARKER = "!"


# --- reading responses ------------------------------------------------------------------


def field(obj: object, name: str, default: object = None) -> Any:
    """Field `name` (snake_case) of a protocol object or of a raw JSON object; `default` if absent."""
    if obj is None:
        return default
    if isinstance(obj, Mapping):
        value = obj.get(camel(name), default)
    else:
        value = getattr(obj, name, default)
    return default if value is None else value


def text_value(value: object) -> str:
    """A wire value as text: enums by their value, None as `-`."""
    if value is None:
        return "-"
    return str(getattr(value, "value", value))


# --- names, literally -------------------------------------------------------------------


def display_name(name: str) -> str:
    """`name` as it is printed: itself, with non-printing characters as `\\uXXXX`."""
    if name.isprintable():
        return name
    return "".join(char if char.isprintable() else f"\\u{ord(char):04x}" for char in name)


def name_text(name: object, style: str = "") -> Text:
    """A wire name as rich Text: never parsed as markup or emoji codes."""
    return Text(display_name(text_value(name)), style=style)


def group_text(prefix: str, group: str | None, style: str = "") -> Text:
    """`prefix / group` (or the prefix alone) as literal Text."""
    text = name_text(prefix, style)
    if group is not None:
        text.append(" / ", style=style)
        text.append(display_name(group), style=style)
    return text


def plain(*parts: str | Text) -> Text:
    """Concatenate literal strings and Text pieces (strings are never markup)."""
    text = Text()
    for part in parts:
        text.append(part)
    return text


# --- shards -----------------------------------------------------------------------------

_SHARD_PATTERN = re.compile(r"^\{(?P<prefix>.*):v(?P<version>\d+):(?P<index>\d+)\}$")


@attrs.frozen
class ShardRun:
    """Consecutive shards shown as one label (`v1:0-3`), highlighted or not."""

    label: str
    highlighted: bool


def short_shard(shard: str, prefix: str) -> str:
    """`{orders:v1:3}` of prefix `orders` is `v1:3`; ids of another layout stay as they are."""
    match = _SHARD_PATTERN.match(shard)
    if match and match["prefix"] == prefix:
        return f"v{match['version']}:{match['index']}"
    return shard


def shard_runs(shards: Iterable[str], prefix: str,
               highlighted: frozenset[str] = frozenset()) -> list[ShardRun]:
    """Short labels for shard ids, consecutive indices of one version folded into ranges.

    Shards in `highlighted` never share a run with the others.
    """
    parsed: list[tuple[int, int, bool]] = []
    others: list[ShardRun] = []
    for shard in shards:
        match = _SHARD_PATTERN.match(shard)
        if match and match["prefix"] == prefix:
            parsed.append((int(match["version"]), int(match["index"]), shard in highlighted))
        else:
            others.append(ShardRun(shard, shard in highlighted))
    runs: list[ShardRun] = []
    for version, (start, end), flag in _fold(sorted(set(parsed))):
        label = f"v{version}:{start}" if start == end else f"v{version}:{start}-{end}"
        runs.append(ShardRun(label, flag))
    return runs + sorted(others, key=lambda run: run.label)


def _fold(items: list[tuple[int, int, bool]]) -> list[tuple[int, tuple[int, int], bool]]:
    folded: list[tuple[int, tuple[int, int], bool]] = []
    for version, index, flag in items:
        if folded:
            last_version, (start, end), last_flag = folded[-1]
            if last_version == version and last_flag == flag and end + 1 == index:
                folded[-1] = (version, (start, index), flag)
                continue
        folded.append((version, (index, index), flag))
    return folded


def shards_text(shards: Iterable[str], prefix: str, highlighted: frozenset[str] = frozenset(),
                style: str = WAITING_STYLE, marker: str = "") -> Text:
    """Shard labels separated by spaces; highlighted ones in `style` and suffixed by `marker`.

    `-` when there are none. The marker keeps the highlight visible in plain text.
    """
    runs = shard_runs(shards, prefix, highlighted)
    if not runs:
        return Text("-", style="dim")
    text = Text()
    for position, run in enumerate(runs):
        if position:
            text.append(" ")
        label = display_name(run.label)
        if run.highlighted:
            text.append(label + marker, style=style)
        else:
            text.append(label)
    return text


# --- small formats ----------------------------------------------------------------------


def format_age(milliseconds: int | None) -> str:
    """An age for people: `420ms`, `4.2s`, `3m05s`, `2h05m`; `-` when unknown."""
    if milliseconds is None:
        return "-"
    if milliseconds < 1000:
        return f"{milliseconds}ms"
    if milliseconds < 60_000:
        return f"{milliseconds / 1000:.1f}s"
    if milliseconds < 3_600_000:
        minutes, seconds = divmod(milliseconds // 1000, 60)
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(milliseconds // 60_000, 60)
    return f"{hours}h{minutes:02d}m"


def format_duration_ms(milliseconds: int) -> str:
    """A retention age as the operator typed it: `7d`, `24h`, `15m`, `30s`, else ms."""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if milliseconds % size == 0:
            return f"{milliseconds // size}{unit}"
    return f"{milliseconds}ms"


def format_count(value: object) -> str:
    return "-" if value is None else str(value)


# --- describe ---------------------------------------------------------------------------


def migration_summary(migration: MigrationDescription | Mapping[str, object] | None) -> str:
    """One line for a migration: state, versions, cutover and drain progress."""
    if migration is None:
        return "none"
    drained = len(field(migration, "drained_shards", ()))
    total = drained + len(field(migration, "remaining_shards", ()))
    return (f"{text_value(field(migration, 'state'))} v{field(migration, 'from_version')} -> "
            f"v{field(migration, 'to_version')} ({text_value(field(migration, 'cutover'))} "
            f"cutover): {drained} of {total} old shards drained")


def blocking_text(migration: object) -> Text | None:
    """G2: the groups a migration waits on, with their counts; None when nothing blocks."""
    blocking = field(migration, "blocking_groups", ())
    if not blocking:
        return None
    text = Text("waiting on ", style=BLOCKING_STYLE)
    for position, entry in enumerate(blocking):
        if position:
            text.append(", ", style=BLOCKING_STYLE)
        text.append(display_name(text_value(field(entry, "consumer_group"))), style=BLOCKING_STYLE)
        text.append(f" ({format_count(field(entry, 'undelivered'))} undelivered, "
                    f"{format_count(field(entry, 'pending'))} unacked)", style=BLOCKING_STYLE)
    text.append(" (consume them, or delete-group an abandoned group)", style="dim")
    return text


def routing_summary(description: GroupDescription) -> str:
    routing = description.routing
    if routing is None:
        return "none yet (set-shards creates it)"
    return f"version {routing.version}, {routing.shard_count} shards"


def retention_of(description: object) -> object:
    """The prefix's retention: top-level in groupDescription, or inside its routing."""
    return field(description, "retention") or field(field(description, "routing"), "retention")


def retention_summary(retention: object) -> str:
    """`acked`, `none`, with the caps: `acked, max length 100000, max age 7d`."""
    if retention is None:
        return "-"
    mode = text_value(field(retention, "mode"))
    explanations: dict[str, str] = {
        RetentionMode.ACKED: "acked (entries go once every group acked them)",
        RetentionMode.NONE: "none (nothing removed because of acks)"}
    explained = explanations.get(mode, mode)
    parts = [explained]
    max_length = field(retention, "max_length")
    max_age_ms = field(retention, "max_age_ms")
    if max_length is not None:
        parts.append(f"max length {max_length}")
    if max_age_ms is not None:
        parts.append(f"max age {format_duration_ms(max_age_ms)}")
    return ", ".join(parts)


def max_concurrency_summary(max_concurrency: int | None) -> str:
    if max_concurrency is None:
        return "unset (each member uses its capacity)"
    return f"{max_concurrency} (min with each member's capacity)"


def format_backlog(undelivered: int | None, unacked: int | None) -> str:
    """A backlog figure (rsc/common/lag.py): `1700`, or `>= 1679` when Redis cannot tell
    the undelivered part."""
    total = backlog(undelivered, unacked)
    if total is not None:
        return str(total)
    return f">= {backlog_floor(undelivered, unacked)}"


def lag_summary(shards: Sequence[object]) -> Text:
    """Sums over the shards: the backlog, its undelivered and unacked parts and the oldest
    unacked entry's age: `1700 (undelivered 21, unacked 1679; oldest unacked 4.2s)`."""
    lags = [field(shard, "lag") for shard in shards]
    undelivered = None if any(value is None for value in lags) else sum(lags)
    unacked = sum(field(shard, "pending", 0) for shard in shards)
    ages = [field(shard, "oldest_pending_ms") for shard in shards]
    oldest = max((age for age in ages if age is not None), default=None)
    total = total_backlog([(field(shard, "lag"), field(shard, "pending", 0)) for shard in shards])
    text = Text(format_backlog(undelivered, unacked),
                style="yellow" if (total is None or total) else "")
    text.append(f" (undelivered {'unknown' if undelivered is None else undelivered}, "
                f"unacked {unacked}")
    if oldest is not None:
        text.append(f"; oldest unacked {format_age(oldest)}")
    text.append(")")
    deliveries = max((field(shard, "max_delivery_count", None) or 0 for shard in shards),
                     default=0)
    if is_crash_loop(deliveries):  # P1: a handler keeps failing or crashing on an entry
        text.append(f"; an entry was delivered {deliveries} times", style="red")
    return text


def held_shards(member: MemberDescription) -> frozenset[str]:
    """What the member holds now: assigned plus revoking."""
    return frozenset(member.assigned_shards) | frozenset(member.revoking_shards)


def is_behind(description: GroupDescription, member: MemberDescription) -> bool:
    return (description.assignment_epoch is not None
            and member.member_epoch != description.assignment_epoch)


def reconciliation_summary(description: GroupDescription) -> Text:
    """Where target and current assignment differ, in one line.

    Waiting: in a member's target, not held yet. To release: held (assigned or
    revoking) but no longer in its target, whether or not the member was told yet.
    """
    if not description.members:
        return Text("no members", style="dim")
    waiting = sum(len(frozenset(member.target_shards) - held_shards(member))
                  for member in description.members)
    to_release = sum(len(held_shards(member) - frozenset(member.target_shards))
                     for member in description.members)
    behind = sum(1 for member in description.members if is_behind(description, member))
    if not (waiting or to_release or behind):
        return Text("current assignment = target: every member holds exactly its target",
                    style="green")
    text = Text("target differs from current: ", style="bold")
    parts = [(waiting, f"{waiting} shard(s) waiting", WAITING_STYLE),
             (to_release, f"{to_release} shard(s) to release", REVOKING_STYLE),
             (behind, f"{behind} member(s) behind assignment epoch "
                      f"{description.assignment_epoch}", BEHIND_STYLE)]
    shown = [(label, style) for count, label, style in parts if count]
    for position, (label, style) in enumerate(shown):
        if position:
            text.append(", ")
        text.append(label, style=style)
    legend = [f"{NOT_HELD_MARKER} in target, not held yet"] if waiting else []
    legend += [f"{NOT_TARGET_MARKER} held, not in target"] if to_release else []
    if legend:
        text.append(f" ({'; '.join(legend)})", style="dim")
    return text


def describe_header(description: GroupDescription) -> Table:
    """Group name, state, epochs, routing, retention, lag, maxConcurrency and migration."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    state = text_value(description.state)
    grid.add_row(Text("group"), group_text(description.stream_prefix,
                                           description.consumer_group, "bold cyan"))
    grid.add_row(Text("state"), Text(state, style=GROUP_STATE_STYLES.get(state, "")))
    grid.add_row(Text("epochs"), Text(f"group {description.group_epoch}  "
                                      f"assignment {description.assignment_epoch}"))
    grid.add_row(Text("routing"), Text(routing_summary(description)))
    retention = retention_of(description)
    if retention is not None:
        grid.add_row(Text("retention"), Text(retention_summary(retention)))
    shards = field(description, "shards", ())
    if shards:
        grid.add_row(Text("backlog"), lag_summary(shards))
    grid.add_row(Text("maxConcurrency"), Text(max_concurrency_summary(description.max_concurrency)))
    migration = description.migration
    grid.add_row(Text("migration"), Text(migration_summary(migration),
                                         style="" if migration is None else "magenta"))
    blocking = blocking_text(migration)
    if blocking is not None:
        grid.add_row(Text("blocked by", style=BLOCKING_STYLE), blocking)
    went_back = field(description, "store_went_back_at_ms")
    if went_back is not None:  # K3: shown only once it happened
        grid.add_row(Text("store went back", style="yellow"), Text(store_went_back_text(went_back)))
    return grid


def store_went_back_text(at_ms: int) -> str:
    """K3: when the coordinator last wrote a store that went back or lost everything back."""
    at = datetime.datetime.fromtimestamp(at_ms / 1000, tz=datetime.UTC)
    return f"{at:%Y-%m-%d %H:%M:%S} UTC: written back from the coordinator's memory"


def _columns(table: Table, columns: Iterable[Column], *, fold: Iterable[str] = ()) -> None:
    """Add columns that never truncate their header (min_width is the header's length)."""
    folded = set(fold)
    for name, justify in columns:
        table.add_column(name, justify=justify, min_width=len(name),
                         overflow="fold" if name in folded else "ellipsis",
                         no_wrap=name not in folded and name in ("member", "owner"))


def heartbeat_text(member: MemberDescription) -> Text:
    away_ms = field(member, "away_ms")
    if away_ms is not None:  # S6: an AWAY member's clock is its time away
        return Text(f"away {format_age(away_ms)}", style=MEMBER_STATE_STYLES[MemberState.AWAY])
    text = Text(format_age(member.last_heartbeat_ms_ago))
    if field(member, "overdue", False):
        text.append(" overdue", style=OVERDUE_STYLE)
    return text


def _member_cells(description: GroupDescription, member: MemberDescription) -> dict[str, Text]:
    prefix = description.stream_prefix
    not_held_yet = frozenset(member.target_shards) - held_shards(member)
    not_in_target = held_shards(member) - frozenset(member.target_shards)
    state = text_value(member.state)
    return {
        "member": name_text(member.member_id),
        "instance": name_text(field(member, "instance_id") or "-"),
        "epoch": Text(str(member.member_epoch),
                      style=BEHIND_STYLE if is_behind(description, member) else ""),
        "state": Text(state, style=MEMBER_STATE_STYLES.get(state, "")),
        "capacity": Text(format_count(member.capacity)),
        "heartbeat": heartbeat_text(member),
        "assigned": shards_text(member.assigned_shards, prefix, not_in_target,
                                style=REVOKING_STYLE, marker=NOT_TARGET_MARKER),
        "waiting": shards_text(member.pending_shards, prefix, frozenset(member.pending_shards)),
        "revoking": shards_text(member.revoking_shards, prefix, frozenset(member.revoking_shards),
                                style=REVOKING_STYLE),
        "target": shards_text(member.target_shards, prefix, not_held_yet, marker=NOT_HELD_MARKER),
    }


MEMBER_COLUMNS: tuple[Column, ...] = (
    ("member", "left"), ("epoch", "right"), ("state", "left"), ("capacity", "right"),
    ("heartbeat", "right"), ("assigned", "left"), ("waiting", "left"), ("revoking", "left"),
    ("target", "left"))
NARROW_MEMBER_COLUMNS: tuple[Column, ...] = (
    ("member", "left"), ("epoch", "right"), ("state", "left"), ("capacity", "right"),
    ("heartbeat", "right"))
NARROW_SHARD_COLUMNS: tuple[Column, ...] = (
    ("member", "left"), ("assigned", "left"), ("waiting", "left"), ("revoking", "left"),
    ("target", "left"))


def needs_attention(description: GroupDescription, member: MemberDescription) -> bool:
    """Overdue, not STABLE, behind the assignment epoch, or holding other than its target."""
    return (bool(field(member, "overdue", False)) or _state(member) != "STABLE"
            or is_behind(description, member) or held_shards(member) != frozenset(member.target_shards))


def _state(member: MemberDescription) -> str:
    return text_value(getattr(member.state, "value", member.state))


def shown_members(description: GroupDescription, limit: int | str | None
                  ) -> tuple[MemberDescription, ...]:
    """The member rows describe shows: every one (`all`, or few enough), else `limit` of them
    (default MEMBER_ROWS_IN_SUMMARY), those that need attention first, then by id."""
    members = description.members
    if limit == "all" or (limit is None and len(members) <= MEMBERS_SHOWN_BY_DEFAULT):
        return tuple(sorted(members, key=lambda m: m.member_id))
    count = MEMBER_ROWS_IN_SUMMARY if limit is None else int(limit)
    ranked = sorted(members, key=lambda m: (not needs_attention(description, m), m.member_id))
    return tuple(sorted(ranked[:count], key=lambda m: m.member_id))


def members_summary(description: GroupDescription, shown: int) -> Text:
    """One line for the members describe did not list: counts by state, overdue, capacity."""
    members = description.members
    states: dict[str, int] = {}
    for member in members:
        states[_state(member)] = states.get(_state(member), 0) + 1
    overdue = sum(1 for member in members if field(member, "overdue", False))
    text = Text(f"{len(members):,} members, {shown:,} shown: ", style="bold")
    text.append(", ".join(f"{count:,} {state}" for state, count in sorted(states.items())))
    if overdue:
        text.append(f", {overdue:,} overdue", style=OVERDUE_STYLE)
    text.append(f"; capacity {sum(member.capacity or 0 for member in members):,}")
    text.append(" (describe --members all for one row per member)", style="dim")
    return text


def with_instance_column(description: GroupDescription,
                         columns: Sequence[Column]) -> Sequence[Column]:
    """S6: an `instance` column after `member` once any member is static (else none), in the
    tables that show the members' state."""
    if all(name != "state" for name, _ in columns) or not any(
            field(member, "instance_id") for member in description.members):
        return columns
    return (columns[0], ("instance", "left"), *columns[1:])


def members_table(description: GroupDescription, columns: Sequence[Column] = MEMBER_COLUMNS,
                  title: str | None = None,
                  members: Sequence[MemberDescription] | None = None) -> Table:
    """One row per member: instanceId when static, epoch, state, capacity, heartbeat age (or
    time AWAY, S6) and its shards.

    Differences between target and current are highlighted: target shards the
    member does not hold yet (`*`, yellow), held shards no longer in its target
    (`!`, red), epochs behind the assignment epoch, and overdue heartbeats.
    """
    table = Table(title=title or f"members ({len(description.members)})", title_justify="left",
                  header_style="bold", expand=False)
    narrow = columns is not MEMBER_COLUMNS
    columns = with_instance_column(description, columns)
    _columns(table, columns, fold=("member", "instance") if narrow else ())
    rows = sorted(description.members, key=lambda m: m.member_id) if members is None else members
    for member in rows:
        cells = _member_cells(description, member)
        table.add_row(*(cells[name] for name, _ in columns))
    return table


SHARD_COLUMNS: tuple[Column, ...] = (
    ("shard", "left"), ("version", "right"), ("owner", "left"), ("length", "right"),
    ("last delivered", "left"), ("backlog", "right"), ("undelivered", "right"),
    ("unacked", "right"), ("oldest unacked", "right"))
NARROW_SHARD_TABLE_COLUMNS: tuple[Column, ...] = (
    ("shard", "left"), ("owner", "left"), ("last id", "left"), ("backlog", "right"),
    ("undelivered", "right"), ("unacked", "right"), ("oldest", "right"))


def shards_table(description: GroupDescription, narrow: bool = False) -> Table:
    """One row per shard of the live versions: owner, length, last-delivered id, backlog and
    its undelivered and unacked parts."""
    shards = field(description, "shards", ())
    columns = NARROW_SHARD_TABLE_COLUMNS if narrow else SHARD_COLUMNS
    table = Table(title=f"shards ({len(shards)})", title_justify="left", header_style="bold",
                  expand=False)
    _columns(table, columns, fold=("owner", "last id") if narrow else ())
    prefix = description.stream_prefix
    for shard in shards:
        lag = field(shard, "lag")
        pending = field(shard, "pending")
        owner = field(shard, "owner")
        cells = {
            "shard": name_text(short_shard(text_value(field(shard, "shard")), prefix)),
            "version": Text(format_count(field(shard, "version"))),
            "owner": name_text(owner) if owner is not None else Text("none", style="dim"),
            "length": Text(format_count(field(shard, "length"))),
            "last delivered": name_text(format_count(field(shard, "last_delivered_id"))),
            "backlog": Text(format_backlog(lag, pending),
                            style="yellow" if (lag is None or lag or pending) else ""),
            "undelivered": Text(format_count(lag), style="yellow" if lag else ""),
            "unacked": Text(format_count(pending), style="yellow" if pending else ""),
            "oldest unacked": Text(format_age(field(shard, "oldest_pending_ms"))),
        }
        cells["last id"] = cells["last delivered"]
        cells["oldest"] = cells["oldest unacked"]
        table.add_row(*(cells[name] for name, _ in columns))
    return table


@attrs.frozen
class DescribeView:
    """The whole `describe` view; picks the narrow layout below NARROW_BELOW columns.

    `shards`: True always shows the per-shard table, False never, None when it fits
    (at most SHARDS_SHOWN_BY_DEFAULT shards).
    """

    description: GroupDescription
    shards: bool | None = None
    members: int | str | None = None  # member rows: a number, "all", None: all up to 50

    def parts(self, width: int) -> list[RenderableType]:
        description = self.description
        narrow = width < NARROW_BELOW
        parts: list[RenderableType] = [describe_header(description), Text("")]
        rows = shown_members(description, self.members)
        summarized = len(rows) < len(description.members)
        title = f"members ({len(rows):,} of {len(description.members):,})" if summarized else None
        if summarized:
            parts.append(members_summary(description, len(rows)))
        if narrow:
            parts.append(members_table(description, NARROW_MEMBER_COLUMNS, title=title,
                                       members=rows))
            if rows:
                parts.append(members_table(description, NARROW_SHARD_COLUMNS,
                                           title="assignment (shards per member)", members=rows))
        else:
            parts.append(members_table(description, title=title, members=rows))
        parts.append(reconciliation_summary(description))
        shards = field(description, "shards", ())
        show = self.shards if self.shards is not None else len(shards) <= SHARDS_SHOWN_BY_DEFAULT
        if shards and show:
            parts.extend([Text(""), shards_table(description, narrow)])
        elif shards:
            parts.append(Text(f"{len(shards)} shards (describe --shards for one row per shard)",
                              style="dim"))
        return parts

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield Group(*self.parts(options.max_width))


def describe_view(description: GroupDescription, shards: bool | None = None,
                  members: int | str | None = None) -> RenderableType:
    """The `describe` view of a group: header, members (or a summary of many), reconciliation
    line, shards."""
    return DescribeView(description, shards, members)


# --- list and change responses ----------------------------------------------------------


def groups_view(groups: object) -> RenderableType:
    """The `list` view: one row per group, with its backlog (undelivered, unacked) where the
    coordinator gives them."""
    entries = field(groups, "groups", ())
    if not entries:
        return Text("no groups", style="dim")
    with_lag = any(field(entry, "lag") is not None or field(entry, "pending") is not None
                   for entry in entries)
    table = Table(header_style="bold")
    columns: list[Column] = [("prefix", "left"), ("group", "left"), ("state", "left"),
               ("group epoch", "right"), ("members", "right"), ("shards", "right")]
    if with_lag:
        columns += [("backlog", "right"), ("undelivered", "right"), ("unacked", "right")]
    _columns(table, columns, fold=("prefix", "group"))
    for entry in sorted(entries, key=lambda g: (field(g, "stream_prefix"), field(g, "consumer_group"))):
        state = text_value(field(entry, "state"))
        row = [name_text(field(entry, "stream_prefix")), name_text(field(entry, "consumer_group")),
               Text(state, style=GROUP_STATE_STYLES.get(state, "")),
               Text(format_count(field(entry, "group_epoch"))),
               Text(format_count(field(entry, "members"))),
               Text(format_count(field(entry, "shards")))]
        if with_lag:
            undelivered, unacked = field(entry, "lag"), field(entry, "pending")
            row += [Text(format_backlog(undelivered, unacked)), Text(format_count(undelivered)),
                    Text(format_count(unacked))]
        table.add_row(*row)
    return table


def shard_count_changed_view(response: object) -> Text:
    routing = field(response, "routing")
    where = plain("routing of prefix ", name_text(field(response, "stream_prefix")))
    if routing is None:
        return plain(where, ": unchanged")
    line = plain(where, f": version {field(routing, 'version')}, "
                        f"{field(routing, 'shard_count')} shards")
    migration = field(response, "migration")
    if migration is not None:
        line.append(f"; migration {migration_summary(migration)}")
    return line


def max_concurrency_changed_view(response: object) -> Text:
    value = field(response, "max_concurrency")
    setting = "cleared" if value is None else f"set to {value}"
    return plain("maxConcurrency of ", group_text(field(response, "stream_prefix"),
                                                  field(response, "consumer_group")),
                 f" {setting} (group epoch {field(response, 'group_epoch')})")


def member_removed_view(response: object) -> Text:
    return plain("removed member ", name_text(field(response, "member_id")), " from ",
                 group_text(field(response, "stream_prefix"), field(response, "consumer_group")),
                 f" (group epoch {field(response, 'group_epoch')})")


def group_deleted_view(response: object) -> Text:
    """The group is gone; its dead letters are not (P2): they stay for `dead-letters`."""
    prefix, group = field(response, "stream_prefix"), field(response, "consumer_group")
    return plain("deleted group ", group_text(prefix, group),
                 "\nits dead letters, if any, are kept (rsc admin dead-letters ",
                 name_text(prefix), " ", name_text(group), ")")


def retention_changed_view(response: object) -> Text:
    group = field(response, "dead_letters_of")
    if group is not None:  # P2: a group's dead letters
        retention = field(response, "retention")
        capped = retention is not None and (field(retention, "max_length") is not None
                                            or field(retention, "max_age_ms") is not None)
        return plain("retention of the dead letters of ",
                     group_text(field(response, "stream_prefix"), group), ": ",
                     retention_summary(retention) if capped else "none (kept until re-driven)")
    return plain("retention of prefix ", name_text(field(response, "stream_prefix")), ": ",
                 retention_summary(field(response, "retention")))


def offsets_reset_view(response: object) -> RenderableType:
    prefix = field(response, "stream_prefix")
    shards = field(response, "shards", ())
    title = plain("offsets of ", group_text(prefix, field(response, "consumer_group")),
                  f" reset on {len(shards)} shard(s)")
    if not shards:
        return title
    table = Table(header_style="bold")
    _columns(table, (("shard", "left"), ("last delivered", "left")))
    for entry in shards:
        table.add_row(name_text(short_shard(text_value(field(entry, "shard")), prefix)),
                      name_text(format_count(field(entry, "last_delivered_id"))))
    return Group(title, table)


def dead_letters_line(answer: Mapping[str, object]) -> Text:
    """`describe`'s line on the group's dead letters (a raw `listDeadLetters` answer): how
    many, where, and their own retention (P2)."""
    retention = answer.get("retention")
    kept = "none (kept until re-driven)" if retention is None else retention_summary(retention)
    return plain(f"dead letters: {format_count(answer.get('count'))} in ",
                 name_text(str(answer.get("stream"))), f"; their retention: {kept}")


def dead_letters_view(response: object) -> RenderableType:
    """listDeadLetters: the count, oldest and newest, errors by type, then the page."""
    count = field(response, "count", 0)
    title = plain(f"{count} dead letter(s) of ", group_text(field(response, "stream_prefix"),
                                                            field(response, "consumer_group")),
                  f" in {field(response, 'stream')}")
    errors = field(response, "errors_by_type", {}) or {}
    lines: list[RenderableType] = [title]
    retention = field(response, "retention")  # P2: the dead letters' own
    lines.append(plain("retention: " + (retention_summary(retention) if retention is not None
                                        else "none (kept until re-driven or trimmed)")))
    if errors:
        lines.append(plain("errors: " + ", ".join(f"{name} {number}" for name, number
                                                  in sorted(errors.items(), key=lambda e: -e[1]))))
    entries = field(response, "entries", ())
    if entries:
        table = Table(header_style="bold")
        _columns(table, (("id", "left"), ("source", "left"), ("key", "left"),
                         ("deliveries", "right"), ("sent back", "right"), ("error", "left")))
        for entry in entries:
            table.add_row(name_text(field(entry, "id")),
                          name_text(f"{field(entry, 'source_stream')} {field(entry, 'source_id')}"),
                          name_text(str(field(entry, "key"))),
                          name_text(format_count(field(entry, "deliveries"))),
                          name_text(format_count(field(entry, "redriven"))),
                          name_text(str(field(entry, "error"))))
        lines.append(table)
    return Group(*lines)


def dead_letters_redriven_view(response: object) -> RenderableType:
    """redriveDeadLetters: what went back (or would, on a dry run) and what stayed, and why."""
    redriven = field(response, "redriven", ())
    skipped = field(response, "skipped", ())
    verb = "would send back" if field(response, "dry_run") else "sent back"
    lines: list[RenderableType] = [plain(
        f"{verb} {len(redriven)} dead letter(s) of ",
        group_text(field(response, "stream_prefix"), field(response, "consumer_group")),
        f"; {len(skipped)} left where they are")]
    for entry in redriven:
        new_id = field(entry, "new_id")
        lines.append(plain(f"  {field(entry, 'id')} -> {field(entry, 'shard')}"
                           + (f" {new_id}" if new_id else "")))
    for entry in skipped:
        lines.append(plain(f"  {field(entry, 'id')} left: {field(entry, 'reason')}"))
    return Group(*lines)


def format_version_view(response: object) -> Text:
    in_use, latest = field(response, "format_version"), field(response, "latest_format_version")
    line = plain(f"metadata format version {in_use}")
    if latest is not None and latest != in_use:
        line.append(f" (this coordinator writes up to {latest}: set-format-version {latest} "
                    "once no coordinator of an older release will run on this store)")
    elif latest is not None:
        line.append(" (the newest this coordinator writes)")
    return line


def format_version_changed_view(response: object) -> Text:
    now, before = field(response, "format_version"), field(response, "previous_format_version")
    if now == before:
        return plain(f"metadata format version {now}: unchanged")
    return plain(f"metadata format version raised from {before} to {now}")


def audit_view(response: object) -> RenderableType:
    """C3: the audit entries, newest first: when, who (peer, role, via), what, the outcome."""
    entries = field(response, "entries", ()) or ()
    if not entries:
        return plain("the audit log is empty")
    table = Table(box=None, pad_edge=False, show_edge=False)
    for column in ("time (UTC)", "peer", "role", "request", "outcome", "before"):
        table.add_column(column)
    for entry in entries:
        request = entry.get("request") or {}
        what = " ".join(str(part) for part in (
            request.get("type", "handshake") if isinstance(request, Mapping) else "handshake",
            *(request.get(key) for key in ("streamPrefix", "consumerGroup")
              if isinstance(request, Mapping) and request.get(key) is not None)))
        detail = {key: value for key, value in request.items()
                  if key not in ("type", "requestId", "streamPrefix", "consumerGroup")} \
            if isinstance(request, Mapping) else {}
        if detail:
            what += " " + json_text(detail)
        outcome = str(entry.get("status"))
        if entry.get("error"):
            outcome += f": {entry['error']}"
        who = str(entry.get("peer"))
        if entry.get("via"):
            who += f" (via {entry['via']})"
        time_ms = entry.get("timeMs")
        when = datetime.datetime.fromtimestamp(time_ms / 1000, datetime.UTC).strftime(
            "%Y-%m-%d %H:%M:%S") if isinstance(time_ms, int) else "-"
        before = entry.get("before")
        table.add_row(name_text(when), name_text(who), name_text(entry.get("role")),
                      name_text(what), name_text(outcome),
                      name_text("-" if before is None else json_text(before)))
    return table


def blob_text(value: object) -> str:
    """C2: a shown value: its text (JSON pretty-printed when it parses), else `base64:...`,
    with its full size when it was cut."""
    if value is None:
        return "-"
    text, encoded = field(value, "text"), field(value, "base64")
    if text is not None:
        try:
            shown = json.dumps(json.loads(text), ensure_ascii=False, indent=2) \
                if text.strip()[:1] in ("{", "[") else text
        except ValueError:
            shown = text
    else:
        shown = f"base64:{encoded}"
    if field(value, "cut"):
        shown += f" ... ({field(value, 'size')} bytes in all)"
    return shown


def stream_entries_view(response: object) -> RenderableType:
    """C2: readShard and findKey: the page's entries (id, key, value, headers, other fields),
    and where the next page starts."""
    entries = field(response, "entries", ()) or ()
    if field(response, "type") == "keyEntries" or isinstance(response, KeyEntries):
        title = plain(f"{len(entries)} entr(ies) of key ", name_text(field(response, "key")),
                      " in ", name_text(" and ".join(field(response, "shards", ()) or ())
                                        or field(response, "shard")),
                      f" ({field(response, 'scanned')} scanned)")
        after = field(response, "continue_id")
        more = f"scan on: --continue {after}" if after else "the shard was scanned to its oldest"
    else:
        title = plain(f"{len(entries)} of {field(response, 'length')} entr(ies) of ",
                      name_text(field(response, "shard")))
        after = field(response, "next_id")
        more = f"next page: --from {after}" if after else "no more entries"
    table = Table(header_style="bold")
    _columns(table, (("id", "left"), ("key", "left"), ("value", "left"), ("headers", "left")))
    for entry in entries:
        extra = [*field(entry, "headers", ()), *field(entry, "fields", ())]
        table.add_row(name_text(field(entry, "id")), name_text(blob_text(field(entry, "key"))),
                      name_text(blob_text(field(entry, "value"))),
                      name_text("\n".join(f"{field(item, 'name')}: "
                                          f"{blob_text(field(item, 'value'))}" for item in extra)))
    return Group(title, table, plain(more)) if entries else Group(title, plain(more))


def pending_entries_view(response: object) -> RenderableType:
    """C2: listPending: a group's pending entries in one shard."""
    entries = field(response, "entries", ()) or ()
    title = plain(f"{field(response, 'pending')} pending entr(ies) of ",
                  group_text(field(response, "stream_prefix"), field(response, "consumer_group")),
                  " in ", name_text(field(response, "shard")))
    table = Table(header_style="bold")
    _columns(table, (("id", "left"), ("owner", "left"), ("idle (ms)", "right"),
                     ("deliveries", "right")))
    for entry in entries:
        table.add_row(name_text(field(entry, "id")), name_text(field(entry, "owner")),
                      name_text(format_count(field(entry, "idle_ms"))),
                      name_text(format_count(field(entry, "deliveries"))))
    after = field(response, "next_id")
    return Group(title, table, plain(f"next page: --after {after}" if after else "no more"))


def json_text(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def generic_view(response: Message | Mapping[str, object]) -> RenderableType:
    """Any response as a key/value grid (for response types this version has no view for)."""
    body = response if isinstance(response, Mapping) else attrs.asdict(response)
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for key, value in body.items():
        if key in ("requestId", "request_id"):
            continue
        grid.add_row(name_text(key), name_text(value if isinstance(value, str) else repr(value)))
    return grid


def _describe_response_view(response: object) -> RenderableType:
    """describe's view of a decoded groupDescription (a raw one is shown by generic_view)."""
    assert isinstance(response, GroupDescription)
    return describe_view(response)


RESPONSE_VIEWS: dict[str, Callable[[object], RenderableType]] = {
    Groups.TYPE: groups_view,
    GroupDescription.TYPE: _describe_response_view,
    ShardCountChanged.TYPE: shard_count_changed_view,
    MaxConcurrencyChanged.TYPE: max_concurrency_changed_view,
    MemberRemoved.TYPE: member_removed_view,
    GroupDeleted.TYPE: group_deleted_view,
    RetentionChanged.TYPE: retention_changed_view,
    OffsetsReset.TYPE: offsets_reset_view,
    FormatVersion.TYPE: format_version_view,
    FormatVersionChanged.TYPE: format_version_changed_view,
    DeadLetters.TYPE: dead_letters_view,
    DeadLettersRedriven.TYPE: dead_letters_redriven_view,
    "auditEntries": audit_view,
    ShardEntries.TYPE: stream_entries_view,
    KeyEntries.TYPE: stream_entries_view,
    PendingEntries.TYPE: pending_entries_view,
}


def response_type(response: Message | Mapping[str, object]) -> str:
    return str(response.get("type")) if isinstance(response, Mapping) else response.TYPE


def response_view(response: Message | Mapping[str, object]) -> RenderableType:
    """The view of any admin response, by its wire type."""
    kind = response_type(response)
    if isinstance(response, Mapping) and kind == GroupDescription.TYPE:
        return generic_view(response)  # a shape this version could not decode: show it raw
    view = RESPONSE_VIEWS.get(kind)
    return generic_view(response) if view is None else view(response)


# --- watch ------------------------------------------------------------------------------


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
    shards = field(description, "shards", ())
    if shards and attrs.has(type(shards[0])):
        moving = SHARD_FIGURES if not figures else SHARD_AGES
        blank = {name: None for name in moving if name in attrs.fields_dict(type(shards[0]))}
        changes["shards"] = tuple(attrs.evolve(shard, **blank) for shard in shards)
    migration = description.migration
    if not figures and migration is not None and attrs.has(type(migration)):
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
    old_by_instance = {field(mb, "instance_id"): mid for mid, mb in old.items()
                       if field(mb, "instance_id")}
    replaced: dict[str, str] = {}
    for member_id in sorted(new.keys() - old.keys()):
        instance = field(new[member_id], "instance_id")
        previous = old_by_instance.get(instance) if instance else None
        if previous is not None and previous not in new:
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
    owners = {field(shard, "shard"): field(shard, "owner") for shard in field(before, "shards", ())}
    moved = [shard for shard in field(after, "shards", ())
             if owners.get(field(shard, "shard"), field(shard, "owner")) != field(shard, "owner")]
    if moved:
        prefix = after.stream_prefix
        return [f"owner of {short_shard(text_value(field(shard, 'shard')), prefix)} "
                f"{text_value(owners[field(shard, 'shard')])} -> "
                f"{text_value(field(shard, 'owner'))}" for shard in moved]
    def figures(description: GroupDescription) -> list[tuple[object, ...]]:
        return [tuple(field(shard, name) for name in SHARD_FIGURES)
                for shard in field(description, "shards", ())]
    epochs = {member.member_id: member.member_epoch for member in before.members}
    bumped = [f"member {display_name(member.member_id)} epoch {epochs[member.member_id]} -> "
              f"{member.member_epoch}" for member in sorted(after.members, key=lambda m: m.member_id)
              if epochs.get(member.member_id, member.member_epoch) != member.member_epoch]
    if bumped:
        return bumped
    if figures(before) != figures(after):
        return ["backlog figures changed"]  # a change only where figures count (watch --json)
    return ["assignment details changed (describe shows them)"]


def _blocking_changes(before: object, after: object) -> list[str]:
    """Groups a migration starts or stops waiting on (G2); their counts are not changes."""
    def names(migration: object) -> set[str]:
        return {text_value(field(entry, "consumer_group"))
                for entry in field(migration, "blocking_groups", ())}
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
    if field(new, "overdue", False) and not field(old, "overdue", False):
        yield f"member {name} is overdue (no heartbeat for {format_age(new.last_heartbeat_ms_ago)})"
    elif field(old, "overdue", False) and not field(new, "overdue", False):
        yield f"member {name} heartbeats again"
    if old.capacity != new.capacity:
        yield f"member {name} capacity {format_count(old.capacity)} -> {format_count(new.capacity)}"


def change_event_text(clock: str, lines: Sequence[str]) -> Text:
    """One line per change event: its wall-clock time and what changed."""
    return Text(f"{clock}  " + "; ".join(lines))


def plain_width(environ: Mapping[str, str] | None = None) -> int:
    """Width of plain output into a pipe or file: $COLUMNS when set, else wide."""
    columns = (os.environ if environ is None else environ).get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) >= 40 else PLAIN_OUTPUT_WIDTH


def render_plain(renderable: RenderableType, width: int = PLAIN_OUTPUT_WIDTH) -> str:
    """A view as plain text (no colours, no trailing blanks), as printed into a pipe or file."""
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, highlight=False, markup=False,
            emoji=False).print(renderable)
    return "".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines())
