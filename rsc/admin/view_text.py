"""The pieces every `rsc admin` view is made of: pure, no I/O (rich text, no console).

Every name that came from the wire (prefix, group, member id, shard) enters rich only as
`Text` built by `name_text`, never as a markup string, so `p[/]`, `[red]x[/red]` and
`:smile:` print literally. Characters that would move the cursor or reorder the line
(format and other non-printing characters) are shown as `\\uXXXX` escapes.

Here too: shard ids shortened and folded into runs (`v1:0-3`), ages, durations and
counts for people, the one-line summaries of a retention, a migration, a routing and
maxConcurrency, the table columns, and plain rendering into a pipe or file.
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Iterable, Mapping

import attrs
from rich.console import Console, JustifyMethod, RenderableType
from rich.table import Table
from rich.text import Text

from rsc.admin.group_view import MigrationView, migration_view
from rsc.common.lag import backlog, backlog_floor
from rsc.protocol import (
    GroupDescription,
    GroupState,
    MemberState,
    MigrationDescription,
    Retention,
    RetentionMode,
)

Column = tuple[str, JustifyMethod]
"""A table column: its header and how its cells are justified."""

PLAIN_OUTPUT_WIDTH = 200

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



def format_backlog(undelivered: int | None, unacked: int | None) -> str:
    """A backlog figure (rsc/common/lag.py): `1700`, or `>= 1679` when Redis cannot tell
    the undelivered part."""
    total = backlog(undelivered, unacked)
    if total is not None:
        return str(total)
    return f">= {backlog_floor(undelivered, unacked)}"


# --- one-line summaries -----------------------------------------------------------------


def migration_summary(migration: MigrationDescription | MigrationView | None) -> str:
    """One line for a migration: state, versions, cutover and drain progress."""
    view = migration if isinstance(migration, MigrationView) or migration is None \
        else migration_view(migration)
    if view is None:
        return "none"
    return (f"{view.state.value} v{view.from_version} -> v{view.to_version} "
            f"({view.cutover.value} cutover): {view.drained} of {view.total} old shards drained")


def routing_summary(description: GroupDescription) -> str:
    routing = description.routing
    if routing is None:
        return "none yet (set-shards creates it)"
    return f"version {routing.version}, {routing.shard_count} shards"


RETENTION_EXPLAINED: dict[str, str] = {
    RetentionMode.ACKED: "acked (entries go once every group acked them)",
    RetentionMode.NONE: "none (nothing removed because of acks)"}


def retention_summary(retention: Retention | None) -> str:
    """`acked`, `none`, with the caps: `acked, max length 100000, max age 7d`."""
    if retention is None:
        return "-"
    parts = [RETENTION_EXPLAINED.get(retention.mode, retention.mode.value)]
    if retention.max_length is not None:
        parts.append(f"max length {retention.max_length}")
    if retention.max_age_ms is not None:
        parts.append(f"max age {format_duration_ms(retention.max_age_ms)}")
    return ", ".join(parts)


def max_concurrency_summary(max_concurrency: int | None) -> str:
    if max_concurrency is None:
        return "unset (each member uses its capacity)"
    return f"{max_concurrency} (min with each member's capacity)"


# --- tables and plain output ------------------------------------------------------------


def add_columns(table: Table, columns: Iterable[Column], *, fold: Iterable[str] = ()) -> None:
    """Add columns that never truncate their header (min_width is the header's length)."""
    folded = set(fold)
    for name, justify in columns:
        table.add_column(name, justify=justify, min_width=len(name),
                         overflow="fold" if name in folded else "ellipsis",
                         no_wrap=name not in folded and name in ("member", "owner"))


def json_text(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


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
