"""`rsc admin`: list, describe, change and watch groups through the coordinator's admin API.

    rsc admin --url ws://H:P [--token T] list
    rsc admin ... describe PREFIX GROUP
    rsc admin ... set-shards PREFIX GROUP N [--cutover ordered]
    rsc admin ... set-max-concurrency PREFIX GROUP N|none
    rsc admin ... remove-member PREFIX GROUP MEMBER
    rsc admin ... watch PREFIX GROUP [--interval S] [--duration S] [--changes N]

Every subcommand takes `--json` (the raw response, one line; `watch --json`:
one line per change). Errors are one line on stderr and exit code 1.

The views are pure functions of the protocol's response objects
(`describe_view`, `groups_view`, ...) and are tested without I/O.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import re
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any, TextIO

import attrs
import trio
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from rsc.admin_client import AdminClient, AdminError, SessionClosed, open_admin_client
from rsc.protocol import (
    FieldValueError,
    GroupDescription,
    Groups,
    MaxConcurrencyChanged,
    MemberDescription,
    MemberRemoved,
    Message,
    MigrationDescription,
    ShardCountChanged,
    Status,
    encode,
)

DEFAULT_URL = "ws://127.0.0.1:8765"
DEFAULT_REQUEST_TIMEOUT_S = 10.0
DEFAULT_WATCH_INTERVAL_S = 0.5
PLAIN_OUTPUT_WIDTH = 200

GROUP_STATE_STYLES = {"STABLE": "green", "RECONCILING": "yellow", "EMPTY": "dim"}
MEMBER_STATE_STYLES = {"STABLE": "green", "UNRELEASED_SHARDS": "yellow",
                       "UNREVOKED_SHARDS": "red"}
PENDING_STYLE = "bold yellow"
REVOKING_STYLE = "bold red"
BEHIND_STYLE = "yellow"
NOT_HELD_MARKER = "*"
NOT_TARGET_MARKER = "!"


# --- pure views ----------------------------------------------------------------------------

_SHARD_PATTERN = re.compile(r"^\{(?P<prefix>.*):v(?P<version>\d+):(?P<index>\d+)\}$")


@attrs.frozen
class ShardRun:
    """Consecutive shards shown as one label (`v1:0-3`), highlighted or not."""

    label: str
    highlighted: bool


def shard_runs(shards: Iterable[str], prefix: str,
               highlighted: frozenset[str] = frozenset()) -> list[ShardRun]:
    """Short labels for shard ids, consecutive indices of one version folded into ranges.

    `{orders:v1:3}` of prefix `orders` is `v1:3`; ids of another layout stay as
    they are. Shards in `highlighted` never share a run with the others.
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
    for version, first, flag in _fold(sorted(set(parsed))):
        start, end = first
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
                style: str = PENDING_STYLE, marker: str = "") -> Text:
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
        if run.highlighted:
            text.append(run.label + marker, style=style)
        else:
            text.append(run.label)
    return text


def format_age(milliseconds: int | None) -> str:
    """A heartbeat age for people: `420ms`, `4.2s`, `3m05s`; `-` when unknown."""
    if milliseconds is None:
        return "-"
    if milliseconds < 1000:
        return f"{milliseconds}ms"
    if milliseconds < 60_000:
        return f"{milliseconds / 1000:.1f}s"
    minutes, seconds = divmod(milliseconds // 1000, 60)
    return f"{minutes}m{seconds:02d}s"


def migration_summary(migration: MigrationDescription | None) -> str:
    """One line for a migration: state, versions, cutover and drain progress."""
    if migration is None:
        return "none"
    drained = len(migration.drained_shards)
    total = drained + len(migration.remaining_shards)
    return (f"{migration.state} v{migration.from_version} -> v{migration.to_version} "
            f"({migration.cutover} cutover): {drained} of {total} old shards drained")


def routing_summary(description: GroupDescription) -> str:
    routing = description.routing
    if routing is None:
        return "none yet (set-shards creates it)"
    return f"version {routing.version}, {routing.shard_count} shards"


def max_concurrency_summary(max_concurrency: int | None) -> str:
    if max_concurrency is None:
        return "unset (each member uses its capacity)"
    return f"{max_concurrency} (min with each member's capacity)"


def held_shards(member: MemberDescription) -> frozenset[str]:
    """What the member holds now: assigned plus revoking."""
    return frozenset(member.assigned_shards) | frozenset(member.revoking_shards)


def reconciliation_summary(description: GroupDescription) -> Text:
    """Where target and current assignment differ, in one line.

    Pending: in a member's target, not held yet. To release: held (assigned or
    revoking) but no longer in its target, whether or not the member was told yet.
    """
    if not description.members:
        return Text("no members", style="dim")
    pending = sum(len(frozenset(member.target_shards) - held_shards(member))
                  for member in description.members)
    to_release = sum(len(held_shards(member) - frozenset(member.target_shards))
                     for member in description.members)
    behind = sum(1 for member in description.members
                 if description.assignment_epoch is not None
                 and member.member_epoch != description.assignment_epoch)
    if not (pending or to_release or behind):
        return Text("current assignment = target: every member holds exactly its target",
                    style="green")
    text = Text("target differs from current: ", style="bold")
    parts = [(pending, f"{pending} shard(s) pending", PENDING_STYLE),
             (to_release, f"{to_release} shard(s) to release", REVOKING_STYLE),
             (behind, f"{behind} member(s) behind assignment epoch "
                      f"{description.assignment_epoch}", BEHIND_STYLE)]
    shown = [(label, style) for count, label, style in parts if count]
    for position, (label, style) in enumerate(shown):
        if position:
            text.append(", ")
        text.append(label, style=style)
    legend = [f"{NOT_HELD_MARKER} in target, not held yet"] if pending else []
    legend += [f"{NOT_TARGET_MARKER} held, not in target"] if to_release else []
    if legend:
        text.append(f" ({'; '.join(legend)})", style="dim")
    return text


def describe_header(description: GroupDescription) -> Table:
    """Group name, state, epochs, routing, maxConcurrency and migration as a key/value grid."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    state = description.state or "-"
    grid.add_row("group", Text(f"{description.stream_prefix} / {description.consumer_group}",
                               style="bold cyan"))
    grid.add_row("state", Text(state, style=GROUP_STATE_STYLES.get(state, "")))
    grid.add_row("epochs", f"group {description.group_epoch}  "
                           f"assignment {description.assignment_epoch}")
    grid.add_row("routing", routing_summary(description))
    grid.add_row("maxConcurrency", max_concurrency_summary(description.max_concurrency))
    migration_style = "" if description.migration is None else "magenta"
    grid.add_row("migration", Text(migration_summary(description.migration),
                                   style=migration_style))
    return grid


def members_table(description: GroupDescription) -> Table:
    """One row per member: epoch, state, capacity, heartbeat age and its shards.

    Differences between target and current are highlighted: target shards the
    member does not hold yet (`*`, yellow), held shards no longer in its target
    (`!`, red), and epochs behind the assignment epoch.
    """
    table = Table(title=f"members ({len(description.members)})", title_justify="left",
                  header_style="bold", expand=False)
    for name, justify in (("member", "left"), ("epoch", "right"), ("state", "left"),
                          ("capacity", "right"), ("heartbeat", "right"), ("assigned", "left"),
                          ("pending", "left"), ("revoking", "left"), ("target", "left")):
        table.add_column(name, justify=justify, no_wrap=name == "member")  # type: ignore[arg-type]
    prefix = description.stream_prefix
    for member in sorted(description.members, key=lambda m: m.member_id):
        behind = (description.assignment_epoch is not None
                  and member.member_epoch != description.assignment_epoch)
        not_held_yet = frozenset(member.target_shards) - held_shards(member)
        not_in_target = held_shards(member) - frozenset(member.target_shards)
        table.add_row(
            member.member_id,
            Text(str(member.member_epoch), style=BEHIND_STYLE if behind else ""),
            Text(member.state, style=MEMBER_STATE_STYLES.get(member.state, "")),
            "-" if member.capacity is None else str(member.capacity),
            format_age(member.last_heartbeat_ms_ago),
            shards_text(member.assigned_shards, prefix, not_in_target, style=REVOKING_STYLE,
                        marker=NOT_TARGET_MARKER),
            shards_text(member.pending_shards, prefix, frozenset(member.pending_shards)),
            shards_text(member.revoking_shards, prefix, frozenset(member.revoking_shards),
                        style=REVOKING_STYLE),
            shards_text(member.target_shards, prefix, not_held_yet, marker=NOT_HELD_MARKER),
        )
    return table


def describe_view(description: GroupDescription) -> RenderableType:
    """The whole `describe` view of a group: header, member table, reconciliation line."""
    return Group(describe_header(description), Text(""), members_table(description),
                 reconciliation_summary(description))


def groups_view(groups: Groups) -> RenderableType:
    """The `list` view: one row per group."""
    if not groups.groups:
        return Text("no groups", style="dim")
    table = Table(header_style="bold")
    for name, justify in (("prefix", "left"), ("group", "left"), ("state", "left"),
                          ("group epoch", "right"), ("members", "right"),
                          ("shards", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for summary in sorted(groups.groups, key=lambda g: (g.stream_prefix, g.consumer_group)):
        table.add_row(summary.stream_prefix, summary.consumer_group,
                      Text(summary.state, style=GROUP_STATE_STYLES.get(summary.state, "")),
                      str(summary.group_epoch), str(summary.members), str(summary.shards))
    return table


def shard_count_changed_view(response: ShardCountChanged) -> str:
    routing = response.routing
    where = f"routing of prefix {response.stream_prefix}"
    if routing is None:
        return f"{where}: unchanged"
    line = f"{where}: version {routing.version}, {routing.shard_count} shards"
    if response.migration is not None:
        line += f"; migration {migration_summary(response.migration)}"
    return line


def max_concurrency_changed_view(response: MaxConcurrencyChanged) -> str:
    group = f"{response.stream_prefix} / {response.consumer_group}"
    setting = "cleared" if response.max_concurrency is None else f"set to {response.max_concurrency}"
    return f"maxConcurrency of {group} {setting} (group epoch {response.group_epoch})"


def member_removed_view(response: MemberRemoved) -> str:
    return (f"removed member {response.member_id} from {response.stream_prefix} / "
            f"{response.consumer_group} (group epoch {response.group_epoch})")


def waiting_view(prefix: str, group: str) -> RenderableType:
    return Text(f"waiting for group {prefix} / {group} to appear (no member has joined "
                "and set-shards was not called)", style="dim")


def watch_footer(url: str, interval: float, changes: int, last_change: str) -> Text:
    return Text(f"watching {url} every {interval:g}s; {changes} change(s), last at "
                f"{last_change}; Ctrl-C to stop", style="dim")


def watch_signature(description: GroupDescription) -> GroupDescription:
    """What counts as a change for `watch`: everything but the request id and heartbeat ages."""
    members = tuple(attrs.evolve(member, last_heartbeat_ms_ago=None)
                    for member in description.members)
    return attrs.evolve(description, request_id=None, members=members)


def render_plain(renderable: RenderableType, width: int = PLAIN_OUTPUT_WIDTH) -> str:
    """A view as plain text (no colours, no trailing blanks), as printed into a pipe or file."""
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, highlight=False).print(renderable)
    return "".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines())


def error_line(exc: BaseException, url: str) -> str:
    """The one line printed on stderr for a failed admin command."""
    if isinstance(exc, AdminError):
        return f"error: {exc.status.value}: {exc.error}" if exc.error else \
            f"error: {exc.status.value}"
    if isinstance(exc, SessionClosed):
        text = str(exc)
        if "HTTP 401" in text:
            text += " (missing or wrong --token)"
        return f"error: {text}"
    if isinstance(exc, FieldValueError):
        return f"error: invalid argument: {exc}"
    if isinstance(exc, trio.TooSlowError):
        return f"error: no answer from the coordinator at {url} in time"
    return f"error: {type(exc).__name__}: {exc}"


# --- command line ---------------------------------------------------------------------------


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `rsc admin` and its subcommands to the `rsc` subparsers."""
    admin = subparsers.add_parser("admin", help="inspect and change groups on a coordinator",
                                  description="Operator commands of the coordinator's admin API.")
    admin.add_argument("--url", default=DEFAULT_URL,
                       help=f"coordinator address ws://HOST:PORT (default: {DEFAULT_URL})")
    admin.add_argument("--token", default=None,
                       help="admin token, sent as 'Authorization: Bearer' (default: none)")
    admin.add_argument("--timeout", type=_positive_float, default=DEFAULT_REQUEST_TIMEOUT_S,
                       help="seconds to wait for each answer (default: 10)")
    commands = admin.add_subparsers(dest="admin_command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        parser = commands.add_parser(name, help=help_text, description=help_text)
        parser.add_argument("--json", action="store_true",
                            help="print the raw response as one JSON line")
        return parser

    command("list", "list every group with state, epoch, members and shards")
    describe = command("describe", "show a group: epochs, routing, migration, every member")
    _group_arguments(describe)
    set_shards = command("set-shards", "create or change the shard count of a stream prefix")
    _group_arguments(set_shards)
    set_shards.add_argument("shard_count", metavar="N", type=int, help="shards (1..4096)")
    set_shards.add_argument("--cutover", choices=("parallel", "ordered"), default="parallel",
                            help="ordered: new shards start after the old ones are drained "
                                 "(default: parallel)")
    set_max = command("set-max-concurrency", "set or clear (none) the group's maxConcurrency")
    _group_arguments(set_max)
    set_max.add_argument("max_concurrency", metavar="N", type=_max_concurrency,
                         help="workers per member (>= 1), or 'none' to clear")
    remove = command("remove-member", "remove a member; its shards are freed at once")
    _group_arguments(remove)
    remove.add_argument("member_id", metavar="MEMBER", help="memberId as shown by describe")
    watch = command("watch", "follow a group live; redraws on every change")
    _group_arguments(watch)
    watch.add_argument("--interval", type=_positive_float, default=DEFAULT_WATCH_INTERVAL_S,
                       help=f"seconds between polls (default: {DEFAULT_WATCH_INTERVAL_S})")
    watch.add_argument("--duration", type=_positive_float, default=None,
                       help="stop after this many seconds (default: until Ctrl-C)")
    watch.add_argument("--changes", type=int, default=None,
                       help="stop after this many changes were shown (default: no limit)")
    admin.set_defaults(run=run)
    return admin


def _group_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("prefix", metavar="PREFIX", help="stream prefix")
    parser.add_argument("group", metavar="GROUP", help="consumer group")


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def _max_concurrency(text: str) -> int | None:
    if text.lower() in ("none", "null", "unset"):
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1 or 'none', got {text}") from None


def run(args: argparse.Namespace) -> int:
    """Entry point of `rsc admin`: run the subcommand, return the exit code."""
    return execute(args, sys.stdout, sys.stderr)


def execute(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """Run an admin subcommand writing to the given streams; 0 on success, 1 on any error."""
    console = make_console(stdout)
    try:
        trio.run(_dispatch, args, console, stdout)
    except KeyboardInterrupt:
        return 0 if args.admin_command == "watch" else 130
    except (AdminError, SessionClosed, FieldValueError, trio.TooSlowError, OSError) as exc:
        print(error_line(exc, args.url), file=stderr, flush=True)
        return 1
    return 0


def make_console(stream: TextIO) -> Console:
    """A rich console on `stream` (colours and live redraws when it is a terminal)."""
    return Console(file=stream, highlight=False)


def print_view(console: Console, view: RenderableType) -> None:
    """Print a view: styled on a terminal, plain and wide into a pipe or file."""
    if console.is_terminal:
        console.print(view)
    else:
        console.file.write(render_plain(view))
        console.file.flush()


async def _dispatch(args: argparse.Namespace, console: Console, stdout: TextIO) -> None:
    async with open_admin_client(args.url, token=args.token,
                                 connect_timeout=args.timeout) as admin:
        await _run_command(args, admin, console, stdout)


async def _run_command(args: argparse.Namespace, admin: AdminClient, console: Console,
                       stdout: TextIO) -> None:
    def show(response: Message, view: Callable[[Any], RenderableType]) -> None:
        if args.json:
            print(encode(response), file=stdout, flush=True)
        else:
            print_view(console, view(response))

    async def answer(call: Any) -> Any:
        with trio.fail_after(args.timeout):
            return await call

    name = args.admin_command
    if name == "list":
        show(await answer(admin.list_groups()), groups_view)
    elif name == "describe":
        show(await answer(admin.describe_group(args.prefix, args.group)), describe_view)
    elif name == "set-shards":
        response = await answer(admin.set_shard_count(args.prefix, args.group, args.shard_count,
                                                      args.cutover))
        show(response, shard_count_changed_view)
    elif name == "set-max-concurrency":
        response = await answer(admin.set_max_concurrency(args.prefix, args.group,
                                                          args.max_concurrency))
        show(response, max_concurrency_changed_view)
    elif name == "remove-member":
        response = await answer(admin.remove_member(args.prefix, args.group, args.member_id))
        show(response, member_removed_view)
    elif name == "watch":
        await watch(admin, args, console, stdout)
    else:
        raise AssertionError(f"unhandled admin command {name}")


async def watch(admin: AdminClient, args: argparse.Namespace, console: Console,
                stdout: TextIO) -> None:
    """Poll describeGroup every `args.interval`; show each change until duration/changes run out.

    `--json` prints one line per change; on a terminal the view redraws in
    place (rich Live); into a pipe each changed view is printed in turn.
    """
    state = WatchState()
    live = Live(console=console, auto_refresh=False) \
        if console.is_terminal and not args.json else None
    duration = args.duration if args.duration is not None else math.inf
    with trio.move_on_after(duration), live if live is not None else contextlib.nullcontext():
        while not state.enough(args.changes):
            description = await _describe_if_known(admin, args)
            changed = state.record(description, time.strftime("%H:%M:%S"))
            if live is not None:
                live.update(Group(_watch_view(description, args),
                                  watch_footer(args.url, args.interval, state.changes,
                                               state.last_change)), refresh=True)
            elif changed and args.json:
                if description is not None:
                    print(encode(description), file=stdout, flush=True)
            elif changed:
                print_view(console, _watch_view(description, args))
                print_view(console, Text(""))
            if state.enough(args.changes):
                break
            await trio.sleep(args.interval)


@attrs.define
class WatchState:
    """What `watch` has shown so far; decides whether a poll result is a change."""

    last: GroupDescription | None = None
    waiting_shown: bool = False
    changes: int = 0
    last_change: str = "-"

    def record(self, description: GroupDescription | None, clock: str) -> bool:
        """Remember a poll result (None: group unknown); True when it should be shown."""
        if description is None:
            first_wait = not self.waiting_shown
            self.waiting_shown = True
            return first_wait
        signature = watch_signature(description)
        if signature == self.last:
            return False
        self.last = signature
        self.changes += 1
        self.last_change = clock
        return True

    def enough(self, limit: int | None) -> bool:
        return limit is not None and self.changes >= limit


async def _describe_if_known(admin: AdminClient,
                             args: argparse.Namespace) -> GroupDescription | None:
    try:
        with trio.fail_after(args.timeout):
            return await admin.describe_group(args.prefix, args.group)
    except AdminError as exc:
        if exc.status != Status.UNKNOWN_GROUP:
            raise
        return None


def _watch_view(description: GroupDescription | None, args: argparse.Namespace) -> RenderableType:
    if description is None:
        return waiting_view(args.prefix, args.group)
    return describe_view(description)


def main(argv: list[str] | None = None) -> int:
    """`python -m member.admin_cli ...`: the admin commands without the rest of `rsc`."""
    parser = argparse.ArgumentParser(prog="rsc")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
