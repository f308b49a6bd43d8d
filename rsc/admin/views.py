"""The pictures of `rsc admin`'s answers: pure functions of protocol responses -> rich
renderables, no I/O.

`response_view` picks each answer's view by its wire type: `list`, the change responses,
dead letters, the audit log, a shard's entries (C2); `describe` is rsc/admin/describe.py
(from the group's GroupView, rsc/admin/group_view.py), `watch`'s lines
rsc/admin/watch_view.py, and the pieces they share (names printed literally, shard labels,
formats) rsc/admin/view_text.py.

Every view takes the protocol's typed response; `response_view` decodes a raw JSON object
first, and shows one this version's classes cannot read as a key/value grid.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Mapping
from typing import TypeVar

import attrs
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from rsc.admin.describe import describe_view
from rsc.admin.view_text import (
    GROUP_STATE_STYLES,
    Column,
    add_columns,
    format_backlog,
    format_count,
    group_text,
    json_text,
    migration_summary,
    name_text,
    plain,
    retention_summary,
    short_shard,
)
from rsc.protocol import (
    FormatVersion,
    FormatVersionChanged,
    GroupDeleted,
    GroupDescription,
    Groups,
    MaxConcurrencyChanged,
    MemberRemoved,
    OffsetsReset,
    RetentionChanged,
    ShardCountChanged,
)
from rsc.protocol.codec import decode_object
from rsc.protocol.errors import ProtocolError
from rsc.protocol.messages import (
    AuditEntries,
    Blob,
    DeadLetters,
    DeadLettersRedriven,
    KeyEntries,
    Message,
    PendingEntries,
    ShardEntries,
)

ResponseT = TypeVar("ResponseT", bound=Message)

# --- list and change responses ----------------------------------------------------------


def groups_view(groups: Groups) -> RenderableType:
    """The `list` view: one row per group, with its backlog (undelivered, unacked)."""
    entries = groups.groups
    if not entries:
        return Text("no groups", style="dim")
    table = Table(header_style="bold")
    columns: list[Column] = [("prefix", "left"), ("group", "left"), ("state", "left"),
                             ("group epoch", "right"), ("members", "right"), ("shards", "right"),
                             ("backlog", "right"), ("undelivered", "right"), ("unacked", "right")]
    add_columns(table, columns, fold=("prefix", "group"))
    for entry in sorted(entries, key=lambda g: (g.stream_prefix, g.consumer_group)):
        state = entry.state.value
        undelivered, unacked = entry.lag, entry.pending
        table.add_row(name_text(entry.stream_prefix), name_text(entry.consumer_group),
                      Text(state, style=GROUP_STATE_STYLES.get(state, "")),
                      Text(format_count(entry.group_epoch)), Text(format_count(entry.members)),
                      Text(format_count(entry.shards)),
                      Text(format_backlog(undelivered, unacked)), Text(format_count(undelivered)),
                      Text(format_count(unacked)))
    return table


def shard_count_changed_view(response: ShardCountChanged) -> Text:
    routing = response.routing
    where = plain("routing of prefix ", name_text(response.stream_prefix))
    if routing is None:
        return plain(where, ": unchanged")
    line = plain(where, f": version {routing.version}, {routing.shard_count} shards")
    if response.migration is not None:
        line.append(f"; migration {migration_summary(response.migration)}")
    return line


def max_concurrency_changed_view(response: MaxConcurrencyChanged) -> Text:
    value = response.max_concurrency
    setting = "cleared" if value is None else f"set to {value}"
    return plain("maxConcurrency of ", group_text(response.stream_prefix, response.consumer_group),
                 f" {setting} (group epoch {response.group_epoch})")


def member_removed_view(response: MemberRemoved) -> Text:
    return plain("removed member ", name_text(response.member_id), " from ",
                 group_text(response.stream_prefix, response.consumer_group),
                 f" (group epoch {response.group_epoch})")


def group_deleted_view(response: GroupDeleted) -> Text:
    """The group is gone; its dead letters are not (P2): they stay for `dead-letters`."""
    prefix, group = response.stream_prefix, response.consumer_group
    return plain("deleted group ", group_text(prefix, group),
                 "\nits dead letters, if any, are kept (rsc admin dead-letters ",
                 name_text(prefix), " ", name_text(group), ")")


def retention_changed_view(response: RetentionChanged) -> Text:
    group = response.dead_letters_of
    retention = response.retention
    if group is not None:  # P2: a group's dead letters
        capped = retention is not None and (retention.max_length is not None
                                            or retention.max_age_ms is not None)
        return plain("retention of the dead letters of ",
                     group_text(response.stream_prefix, group), ": ",
                     retention_summary(retention) if capped else "none (kept until re-driven)")
    return plain("retention of prefix ", name_text(response.stream_prefix), ": ",
                 retention_summary(retention))


def offsets_reset_view(response: OffsetsReset) -> RenderableType:
    prefix = response.stream_prefix
    shards = response.shards
    title = plain("offsets of ", group_text(prefix, response.consumer_group),
                  f" reset on {len(shards)} shard(s)")
    if not shards:
        return title
    table = Table(header_style="bold")
    add_columns(table, (("shard", "left"), ("last delivered", "left")))
    for entry in shards:
        table.add_row(name_text(short_shard(entry.shard, prefix)),
                      name_text(entry.last_delivered_id))
    return Group(title, table)


def dead_letters_view(response: DeadLetters) -> RenderableType:
    """listDeadLetters: the count, oldest and newest, errors by type, then the page."""
    title = plain(f"{response.count} dead letter(s) of ",
                  group_text(response.stream_prefix, response.consumer_group),
                  f" in {response.stream}")
    errors = response.errors_by_type
    lines: list[RenderableType] = [title]
    retention = response.retention  # P2: the dead letters' own
    lines.append(plain("retention: " + (retention_summary(retention) if retention is not None
                                        else "none (kept until re-driven or trimmed)")))
    if errors:
        lines.append(plain("errors: " + ", ".join(f"{name} {number}" for name, number
                                                  in sorted(errors.items(), key=lambda e: -e[1]))))
    if response.entries:
        table = Table(header_style="bold")
        add_columns(table, (("id", "left"), ("source", "left"), ("key", "left"),
                            ("deliveries", "right"), ("sent back", "right"), ("error", "left")))
        for entry in response.entries:
            table.add_row(name_text(entry.id),
                          name_text(f"{entry.source_stream} {entry.source_id}"),
                          name_text(str(entry.key)), name_text(format_count(entry.deliveries)),
                          name_text(format_count(entry.redriven)), name_text(str(entry.error)))
        lines.append(table)
    return Group(*lines)


def dead_letters_redriven_view(response: DeadLettersRedriven) -> RenderableType:
    """redriveDeadLetters: what went back (or would, on a dry run) and what stayed, and why."""
    redriven, skipped = response.redriven, response.skipped
    verb = "would send back" if response.dry_run else "sent back"
    lines: list[RenderableType] = [plain(
        f"{verb} {len(redriven)} dead letter(s) of ",
        group_text(response.stream_prefix, response.consumer_group),
        f"; {len(skipped)} left where they are")]
    for entry in redriven:
        new_id = entry.new_id
        lines.append(plain(f"  {entry.id} -> {entry.shard}" + (f" {new_id}" if new_id else "")))
    for left in skipped:
        lines.append(plain(f"  {left.id} left: {left.reason}"))
    return Group(*lines)


def format_version_view(response: FormatVersion) -> Text:
    in_use, latest = response.format_version, response.latest_format_version
    line = plain(f"metadata format version {in_use}")
    if latest is not None and latest != in_use:
        line.append(f" (this coordinator writes up to {latest}: set-format-version {latest} "
                    "once no coordinator of an older release will run on this store)")
    elif latest is not None:
        line.append(" (the newest this coordinator writes)")
    return line


def format_version_changed_view(response: FormatVersionChanged) -> Text:
    now, before = response.format_version, response.previous_format_version
    if now == before:
        return plain(f"metadata format version {now}: unchanged")
    return plain(f"metadata format version raised from {before} to {now}")


def audit_view(response: AuditEntries) -> RenderableType:
    """C3: the audit entries, newest first: when, who (peer, role, via), what, the outcome.
    Each entry is the JSON object the audit log stores (actors/admin/audit.py)."""
    if not response.entries:
        return plain("the audit log is empty")
    table = Table(box=None, pad_edge=False, show_edge=False)
    for column in ("time (UTC)", "peer", "role", "request", "outcome", "before"):
        table.add_column(column)
    for entry in response.entries:
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


def blob_text(value: Blob | None) -> str:
    """C2: a shown value: its text (JSON pretty-printed when it parses), else `base64:...`,
    with its full size when it was cut."""
    if value is None:
        return "-"
    text = value.text
    if text is not None:
        try:
            shown = json.dumps(json.loads(text), ensure_ascii=False, indent=2) \
                if text.strip()[:1] in ("{", "[") else text
        except ValueError:
            shown = text
    else:
        shown = f"base64:{value.base64}"
    if value.cut:
        shown += f" ... ({value.size} bytes in all)"
    return shown


def stream_entries_view(response: ShardEntries | KeyEntries) -> RenderableType:
    """C2: readShard and findKey: the page's entries (id, key, value, headers, other fields),
    and where the next page starts."""
    entries = response.entries
    if isinstance(response, KeyEntries):
        title = plain(f"{len(entries)} entr(ies) of key ", name_text(response.key),
                      " in ", name_text(" and ".join(response.shards or ()) or response.shard),
                      f" ({response.scanned} scanned)")
        after = response.continue_id
        more = f"scan on: --continue {after}" if after else "the shard was scanned to its oldest"
    else:
        title = plain(f"{len(entries)} of {response.length} entr(ies) of ",
                      name_text(response.shard))
        after = response.next_id
        more = f"next page: --from {after}" if after else "no more entries"
    table = Table(header_style="bold")
    add_columns(table, (("id", "left"), ("key", "left"), ("value", "left"), ("headers", "left")))
    for entry in entries:
        extra = [*entry.headers, *entry.fields]
        table.add_row(name_text(entry.id), name_text(blob_text(entry.key)),
                      name_text(blob_text(entry.value)),
                      name_text("\n".join(f"{item.name}: {blob_text(item.value)}"
                                          for item in extra)))
    return Group(title, table, plain(more)) if entries else Group(title, plain(more))


def pending_entries_view(response: PendingEntries) -> RenderableType:
    """C2: listPending: a group's pending entries in one shard."""
    title = plain(f"{response.pending} pending entr(ies) of ",
                  group_text(response.stream_prefix, response.consumer_group),
                  " in ", name_text(response.shard))
    table = Table(header_style="bold")
    add_columns(table, (("id", "left"), ("owner", "left"), ("idle (ms)", "right"),
                        ("deliveries", "right")))
    for entry in response.entries:
        table.add_row(name_text(entry.id), name_text(entry.owner),
                      name_text(format_count(entry.idle_ms)),
                      name_text(format_count(entry.deliveries)))
    after = response.next_id
    return Group(title, table, plain(f"next page: --after {after}" if after else "no more"))


def generic_view(response: Message | Mapping[str, object]) -> RenderableType:
    """A response of any type as a key/value grid (for types this version has no view for)."""
    body = response if isinstance(response, Mapping) else attrs.asdict(response)
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for key, value in body.items():
        if key in ("requestId", "request_id"):
            continue
        grid.add_row(name_text(key), name_text(value if isinstance(value, str) else repr(value)))
    return grid


def _typed(kind: type[ResponseT], view: Callable[[ResponseT], RenderableType]
           ) -> Callable[[Message], RenderableType]:
    """`view` for the responses of class `kind` (RESPONSE_VIEWS is keyed by wire type)."""
    def typed_view(response: Message) -> RenderableType:
        assert isinstance(response, kind)
        return view(response)
    return typed_view


def _describe(description: GroupDescription) -> RenderableType:
    return describe_view(description)


RESPONSE_VIEWS: dict[str, Callable[[Message], RenderableType]] = {
    Groups.TYPE: _typed(Groups, groups_view),
    GroupDescription.TYPE: _typed(GroupDescription, _describe),
    ShardCountChanged.TYPE: _typed(ShardCountChanged, shard_count_changed_view),
    MaxConcurrencyChanged.TYPE: _typed(MaxConcurrencyChanged, max_concurrency_changed_view),
    MemberRemoved.TYPE: _typed(MemberRemoved, member_removed_view),
    GroupDeleted.TYPE: _typed(GroupDeleted, group_deleted_view),
    RetentionChanged.TYPE: _typed(RetentionChanged, retention_changed_view),
    OffsetsReset.TYPE: _typed(OffsetsReset, offsets_reset_view),
    FormatVersion.TYPE: _typed(FormatVersion, format_version_view),
    FormatVersionChanged.TYPE: _typed(FormatVersionChanged, format_version_changed_view),
    DeadLetters.TYPE: _typed(DeadLetters, dead_letters_view),
    DeadLettersRedriven.TYPE: _typed(DeadLettersRedriven, dead_letters_redriven_view),
    AuditEntries.TYPE: _typed(AuditEntries, audit_view),
    ShardEntries.TYPE: _typed(ShardEntries, stream_entries_view),
    KeyEntries.TYPE: _typed(KeyEntries, stream_entries_view),
    PendingEntries.TYPE: _typed(PendingEntries, pending_entries_view),
}


def decoded(response: Message | Mapping[str, object]) -> Message | None:
    """A response as the protocol's message: a raw JSON object decoded (an answer or a push,
    without its requestId); None when this version's classes cannot read it."""
    if not isinstance(response, Mapping):
        return response
    try:
        return decode_object({"requestId": None, **response})
    except ProtocolError:
        return None


def response_view(response: Message | Mapping[str, object]) -> RenderableType:
    """The view of any admin response, by its wire type; a raw JSON object the protocol
    classes cannot read (a newer coordinator's shape, an unknown type) as a key/value grid."""
    message = decoded(response)
    view = None if message is None else RESPONSE_VIEWS.get(message.TYPE)
    if message is None or view is None:
        return generic_view(response)
    return view(message)
