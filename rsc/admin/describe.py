"""`rsc admin describe`'s picture of a group, drawn from its GroupView: pure, no I/O.

The header (state, epochs, routing, retention, backlog, maxConcurrency, migration and the
groups it waits on, when the store went back), the members (or a summary of many, those
that need attention first), where target and current assignment differ, and the shards.
Below NARROW_BELOW columns the members' shards go to a table of their own. `watch --table`
draws the same view.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

import attrs
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

from rsc.admin.group_view import (
    Backlog,
    GroupView,
    MemberView,
    MigrationView,
    group_view,
)
from rsc.admin.view_text import (
    BEHIND_STYLE,
    BLOCKING_STYLE,
    GROUP_STATE_STYLES,
    MEMBER_STATE_STYLES,
    NOT_HELD_MARKER,
    NOT_TARGET_MARKER,
    OVERDUE_STYLE,
    REVOKING_STYLE,
    WAITING_STYLE,
    Column,
    add_columns,
    display_name,
    format_age,
    format_backlog,
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
)
from rsc.member.pure.attempts import is_crash_loop
from rsc.protocol import GroupDescription, MemberState
from rsc.protocol.messages import DeadLetters

NARROW_BELOW = 120
"""Columns below which `describe` switches to its narrow layout (80-column terminals)."""
SHARDS_SHOWN_BY_DEFAULT = 16
"""describe shows the per-shard table by itself up to this many shards (else `--shards`)."""
MEMBERS_SHOWN_BY_DEFAULT = 50  # describe shows every member up to this many, else a summary
MEMBER_ROWS_IN_SUMMARY = 20


def blocking_text(migration: MigrationView | None) -> Text | None:
    """G2: the groups a migration waits on, with their counts; None when nothing blocks."""
    if migration is None or not migration.blocking_groups:
        return None
    text = Text("waiting on ", style=BLOCKING_STYLE)
    for position, entry in enumerate(migration.blocking_groups):
        if position:
            text.append(", ", style=BLOCKING_STYLE)
        text.append(display_name(entry.consumer_group), style=BLOCKING_STYLE)
        text.append(f" ({format_count(entry.undelivered)} undelivered, "
                    f"{format_count(entry.pending)} unacked)", style=BLOCKING_STYLE)
    text.append(" (consume them, or delete-group an abandoned group)", style="dim")
    return text


def lag_summary(totals: Backlog) -> Text:
    """Sums over the shards: the backlog, its undelivered and unacked parts and the oldest
    unacked entry's age: `1700 (undelivered 21, unacked 1679; oldest unacked 4.2s)`."""
    undelivered, unacked, total = totals.undelivered, totals.unacked, totals.backlog
    text = Text(format_backlog(undelivered, unacked),
                style="yellow" if (total is None or total) else "")
    text.append(f" (undelivered {'unknown' if undelivered is None else undelivered}, "
                f"unacked {unacked}")
    if totals.oldest_unacked_ms is not None:
        text.append(f"; oldest unacked {format_age(totals.oldest_unacked_ms)}")
    text.append(")")
    deliveries = totals.max_delivery_count
    if is_crash_loop(deliveries):  # P1: a handler keeps failing or crashing on an entry
        text.append(f"; an entry was delivered {deliveries} times", style="red")
    return text


def reconciliation_summary(view: GroupView) -> Text:
    """Where target and current assignment differ, in one line.

    Waiting: in a member's target, not held yet. To release: held (assigned or
    revoking) but no longer in its target, whether or not the member was told yet.
    """
    if not view.members:
        return Text("no members", style="dim")
    counts = view.reconciliation
    if counts.settled:
        return Text("current assignment = target: every member holds exactly its target",
                    style="green")
    text = Text("target differs from current: ", style="bold")
    parts = [(counts.waiting, f"{counts.waiting} shard(s) waiting", WAITING_STYLE),
             (counts.to_release, f"{counts.to_release} shard(s) to release", REVOKING_STYLE),
             (counts.behind, f"{counts.behind} member(s) behind assignment epoch "
                             f"{view.assignment_epoch}", BEHIND_STYLE)]
    shown = [(label, style) for count, label, style in parts if count]
    for position, (label, style) in enumerate(shown):
        if position:
            text.append(", ")
        text.append(label, style=style)
    legend = [f"{NOT_HELD_MARKER} in target, not held yet"] if counts.waiting else []
    legend += [f"{NOT_TARGET_MARKER} held, not in target"] if counts.to_release else []
    if legend:
        text.append(f" ({'; '.join(legend)})", style="dim")
    return text


def describe_header(view: GroupView) -> Table:
    """Group name, state, epochs, routing, retention, lag, maxConcurrency and migration."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    state = "-" if view.state is None else view.state.value
    grid.add_row(Text("group"), group_text(view.stream_prefix, view.consumer_group, "bold cyan"))
    grid.add_row(Text("state"), Text(state, style=GROUP_STATE_STYLES.get(state, "")))
    grid.add_row(Text("epochs"), Text(f"group {view.group_epoch}  "
                                      f"assignment {view.assignment_epoch}"))
    grid.add_row(Text("routing"), Text(routing_summary(view.description)))
    if view.retention is not None:
        grid.add_row(Text("retention"), Text(retention_summary(view.retention)))
    if view.shards:
        grid.add_row(Text("backlog"), lag_summary(view.totals))
    grid.add_row(Text("maxConcurrency"), Text(max_concurrency_summary(view.max_concurrency)))
    migration = view.migration
    grid.add_row(Text("migration"), Text(migration_summary(migration),
                                         style="" if migration is None else "magenta"))
    blocking = blocking_text(migration)
    if blocking is not None:
        grid.add_row(Text("blocked by", style=BLOCKING_STYLE), blocking)
    went_back = view.store_went_back_at_ms
    if went_back is not None:  # K3: shown only once it happened
        grid.add_row(Text("store went back", style="yellow"), Text(store_went_back_text(went_back)))
    return grid


def store_went_back_text(at_ms: int) -> str:
    """K3: when the coordinator last wrote a store that went back or lost everything back."""
    at = datetime.datetime.fromtimestamp(at_ms / 1000, tz=datetime.UTC)
    return f"{at:%Y-%m-%d %H:%M:%S} UTC: written back from the coordinator's memory"


def heartbeat_text(row: MemberView) -> Text:
    member = row.member
    if member.away_ms is not None:  # S6: an AWAY member's clock is its time away
        return Text(f"away {format_age(member.away_ms)}",
                    style=MEMBER_STATE_STYLES[MemberState.AWAY])
    text = Text(format_age(member.last_heartbeat_ms_ago))
    if member.overdue:
        text.append(" overdue", style=OVERDUE_STYLE)
    return text


def _member_cells(prefix: str, row: MemberView) -> dict[str, Text]:
    member = row.member
    state = member.state.value
    return {
        "member": name_text(member.member_id),
        "instance": name_text(member.instance_id or "-"),
        "epoch": Text(str(member.member_epoch), style=BEHIND_STYLE if row.behind else ""),
        "state": Text(state, style=MEMBER_STATE_STYLES.get(state, "")),
        "capacity": Text(format_count(member.capacity)),
        "heartbeat": heartbeat_text(row),
        "assigned": shards_text(member.assigned_shards, prefix, row.not_in_target,
                                style=REVOKING_STYLE, marker=NOT_TARGET_MARKER),
        "waiting": shards_text(member.pending_shards, prefix, frozenset(member.pending_shards)),
        "revoking": shards_text(member.revoking_shards, prefix, frozenset(member.revoking_shards),
                                style=REVOKING_STYLE),
        "target": shards_text(member.target_shards, prefix, row.not_held_yet,
                              marker=NOT_HELD_MARKER),
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


def shown_members(view: GroupView, limit: int | str | None) -> tuple[MemberView, ...]:
    """The member rows describe shows: every one (`all`, or few enough), else `limit` of them
    (default MEMBER_ROWS_IN_SUMMARY), those that need attention first, then by id."""
    members = view.members  # by id
    if limit == "all" or (limit is None and len(members) <= MEMBERS_SHOWN_BY_DEFAULT):
        return members
    count = MEMBER_ROWS_IN_SUMMARY if limit is None else int(limit)
    ranked = sorted(members, key=lambda row: (not row.needs_attention, row.member_id))
    return tuple(sorted(ranked[:count], key=lambda row: row.member_id))


def members_summary(view: GroupView, shown: int) -> Text:
    """One line for the members describe did not list: counts by state, overdue, capacity."""
    members = [row.member for row in view.members]
    states: dict[str, int] = {}
    for member in members:
        states[member.state.value] = states.get(member.state.value, 0) + 1
    overdue = sum(1 for member in members if member.overdue)
    text = Text(f"{len(members):,} members, {shown:,} shown: ", style="bold")
    text.append(", ".join(f"{count:,} {state}" for state, count in sorted(states.items())))
    if overdue:
        text.append(f", {overdue:,} overdue", style=OVERDUE_STYLE)
    text.append(f"; capacity {sum(member.capacity or 0 for member in members):,}")
    text.append(" (describe --members all for one row per member)", style="dim")
    return text


def with_instance_column(view: GroupView, columns: Sequence[Column]) -> Sequence[Column]:
    """S6: an `instance` column after `member` once any member is static (else none), in the
    tables that show the members' state."""
    if all(name != "state" for name, _ in columns) or not any(
            row.member.instance_id for row in view.members):
        return columns
    return (columns[0], ("instance", "left"), *columns[1:])


def members_table(view: GroupView, columns: Sequence[Column] = MEMBER_COLUMNS,
                  title: str | None = None, members: Sequence[MemberView] | None = None) -> Table:
    """One row per member: instanceId when static, epoch, state, capacity, heartbeat age (or
    time AWAY, S6) and its shards.

    Differences between target and current are highlighted: target shards the
    member does not hold yet (`*`, yellow), held shards no longer in its target
    (`!`, red), epochs behind the assignment epoch, and overdue heartbeats.
    """
    table = Table(title=title or f"members ({len(view.members)})", title_justify="left",
                  header_style="bold", expand=False)
    narrow = columns is not MEMBER_COLUMNS
    columns = with_instance_column(view, columns)
    add_columns(table, columns, fold=("member", "instance") if narrow else ())
    for row in view.members if members is None else members:
        cells = _member_cells(view.stream_prefix, row)
        table.add_row(*(cells[name] for name, _ in columns))
    return table


SHARD_COLUMNS: tuple[Column, ...] = (
    ("shard", "left"), ("version", "right"), ("owner", "left"), ("length", "right"),
    ("last delivered", "left"), ("backlog", "right"), ("undelivered", "right"),
    ("unacked", "right"), ("oldest unacked", "right"))
NARROW_SHARD_TABLE_COLUMNS: tuple[Column, ...] = (
    ("shard", "left"), ("owner", "left"), ("last id", "left"), ("backlog", "right"),
    ("undelivered", "right"), ("unacked", "right"), ("oldest", "right"))


def shards_table(view: GroupView, narrow: bool = False) -> Table:
    """One row per shard of the live versions: owner, length, last-delivered id, backlog and
    its undelivered and unacked parts."""
    columns = NARROW_SHARD_TABLE_COLUMNS if narrow else SHARD_COLUMNS
    table = Table(title=f"shards ({len(view.shards)})", title_justify="left",
                  header_style="bold", expand=False)
    add_columns(table, columns, fold=("owner", "last id") if narrow else ())
    for shard in view.shards:
        lag, pending, owner = shard.lag, shard.pending, shard.owner
        cells = {
            "shard": name_text(short_shard(shard.shard, view.stream_prefix)),
            "version": Text(format_count(shard.version)),
            "owner": name_text(owner) if owner is not None else Text("none", style="dim"),
            "length": Text(format_count(shard.length)),
            "last delivered": name_text(format_count(shard.last_delivered_id)),
            "backlog": Text(format_backlog(lag, pending),
                            style="yellow" if (lag is None or lag or pending) else ""),
            "undelivered": Text(format_count(lag), style="yellow" if lag else ""),
            "unacked": Text(format_count(pending), style="yellow" if pending else ""),
            "oldest unacked": Text(format_age(shard.oldest_pending_ms)),
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

    view: GroupView
    shards: bool | None = None
    members: int | str | None = None  # member rows: a number, "all", None: all up to 50

    def parts(self, width: int) -> list[RenderableType]:
        view = self.view
        narrow = width < NARROW_BELOW
        parts: list[RenderableType] = [describe_header(view), Text("")]
        rows = shown_members(view, self.members)
        summarized = len(rows) < len(view.members)
        title = f"members ({len(rows):,} of {len(view.members):,})" if summarized else None
        if summarized:
            parts.append(members_summary(view, len(rows)))
        if narrow:
            parts.append(members_table(view, NARROW_MEMBER_COLUMNS, title=title, members=rows))
            if rows:
                parts.append(members_table(view, NARROW_SHARD_COLUMNS,
                                           title="assignment (shards per member)", members=rows))
        else:
            parts.append(members_table(view, title=title, members=rows))
        parts.append(reconciliation_summary(view))
        shards = view.shards
        show = self.shards if self.shards is not None else len(shards) <= SHARDS_SHOWN_BY_DEFAULT
        if shards and show:
            parts.extend([Text(""), shards_table(view, narrow)])
        elif shards:
            parts.append(Text(f"{len(shards)} shards (describe --shards for one row per shard)",
                              style="dim"))
        return parts

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield Group(*self.parts(options.max_width))


def describe_view(description: GroupDescription | GroupView, shards: bool | None = None,
                  members: int | str | None = None) -> RenderableType:
    """The `describe` view of a group: header, members (or a summary of many), reconciliation
    line, shards."""
    view = description if isinstance(description, GroupView) else group_view(description)
    return DescribeView(view, shards, members)


def dead_letters_line(answer: DeadLetters) -> Text:
    """`describe`'s line on the group's dead letters (a `listDeadLetters` answer): how many,
    where, and their own retention (P2)."""
    retention = answer.retention
    kept = "none (kept until re-driven)" if retention is None else retention_summary(retention)
    return plain(f"dead letters: {format_count(answer.count)} in ", name_text(str(answer.stream)),
                 f"; their retention: {kept}")
