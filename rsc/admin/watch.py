"""`rsc admin watch PREFIX GROUP`: follow a group live, a line per change event.

It sends `describeGroup` with `"watch": true` and then reads the
`groupDescription` pushes (no requestId) the coordinator sends on every
change, until a push with status `UNKNOWN_GROUP` says the group was deleted.
A coordinator that rejects the `watch` field (`INVALID_REQUEST`), or that
answers it and never pushes (found by one plain describe after a quiet
while that shows a change, and no push of it within PUSH_GRACE_S), is polled
every `--interval` instead. A group that does not exist yet is waited for.

Output: a header naming the coordinator's URL and the mode, then one line per
change (UTC time and what changed, terse). Only meaningful changes count:
members joining, leaving or changing state, epochs, assignment, routing,
migration, retention, maxConcurrency; the shards' lengths, offsets and backlog
move all the time and are never a line of their own. `--table` adds the group's
view: on a terminal it redraws in place under the header with the latest change
lines (its figures kept current), into a pipe it follows each change line.
`--json` prints each description whose content changed, figures included, as one
raw JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import attrs
import trio
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

from rsc.admin.client import (
    AdminClient,
    AdminError,
    SessionLost,
    check_answer,
    check_status,
    decode_response,
    read_answer,
)
from rsc.admin.describe import describe_view
from rsc.admin.view_text import group_text, plain, plain_width, render_plain
from rsc.admin.watch_view import (
    change_event_text,
    change_lines,
    waiting_view,
    watch_header,
    watch_signature,
)
from rsc.protocol import DescribeGroup, GroupDescription, Status

EVENT_LINES_KEPT = 8
PUSH_GRACE_S = 1.0
PUSHES = "server pushes"


def polling(interval: float) -> str:
    return f"polling every {interval:g}s"


@attrs.define
class WatchState:
    """What `watch` has shown so far; decides whether a description is a change (pure)."""

    figures: bool = False  # shard figures count as changes (--json)
    last: GroupDescription | None = None
    shown: GroupDescription | None = None
    waiting_shown: bool = False
    changes: int = 0
    last_change: str = "-"
    lines: list[str] = attrs.field(factory=list)
    events: list[Text] = attrs.field(factory=list)

    def record(self, description: GroupDescription | None, clock: str) -> bool:
        """Remember a description (None: group unknown); True when it should be shown."""
        if description is None:
            first_wait = not self.waiting_shown
            self.waiting_shown = True
            return first_wait
        signature = watch_signature(description, self.figures)
        if signature == self.last:
            return False
        self.lines = change_lines(self.shown, description)
        self.events.append(change_event_text(clock, self.lines))
        del self.events[:-EVENT_LINES_KEPT]
        self.last = signature
        self.shown = description
        self.changes += 1
        self.last_change = clock
        return True

    def differs(self, description: GroupDescription) -> bool:
        """True when `description` is not what was shown last (a change no push carried)."""
        return watch_signature(description, self.figures) != self.last

    def enough(self, limit: int | None) -> bool:
        return limit is not None and self.changes >= limit


def utc_clock() -> str:
    """The time stamp of a change line: UTC, to the second (`2026-12-03T13:44:53Z`)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def probe_after_s(interval: float) -> float:
    """Quiet time after which one plain describe checks that the coordinator really pushes."""
    return 2 * max(interval, 0.5)


class WatchDisplay:
    """Prints what watch sees: change lines (with the table after each into a pipe when
    --table), the table redrawn in place on a terminal with --table, or raw JSON."""

    def __init__(self, console: Console, args: argparse.Namespace, url: str) -> None:
        self.console = console
        self.args = args
        self.url = url
        self.mode = PUSHES
        self.table = bool(getattr(args, "table", False))
        self.live = Live(console=console, auto_refresh=False) \
            if console.is_terminal and self.table and not args.json else None
        self.state = WatchState(figures=bool(args.json))
        self.current: RenderableType = waiting_view(args.prefix, args.group)

    def __enter__(self) -> WatchDisplay:
        if self.live is not None:
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)

    def _plain(self, renderable: RenderableType) -> None:
        if self.args.json:
            return
        self.console.file.write(render_plain(renderable, width=plain_width()))
        self.console.file.flush()

    def _line(self, text: Text) -> None:
        """An event line into a pipe: one line however long (grep-able), never wrapped."""
        if not self.args.json:
            self.console.file.write(text.plain + "\n")
            self.console.file.flush()

    def set_mode(self, mode: str) -> None:
        """Show the header (the coordinator's URL stays on screen) for the current mode."""
        changed = mode != self.mode
        self.mode = mode
        header = watch_header(self.url, self.args.prefix, self.args.group, mode)
        if self.live is not None:
            self._redraw()
        elif changed or not self.state.changes:
            self._line(header)

    def _redraw(self) -> None:
        assert self.live is not None
        footer = Text(f"{self.state.changes} change(s), last at {self.state.last_change}",
                      style="dim")
        self.live.update(Group(watch_header(self.url, self.args.prefix, self.args.group,
                                            self.mode),
                               Text(""), self.current, Text(""), *self.state.events, footer),
                         refresh=True)

    def show(self, description: GroupDescription | None, raw: dict[str, object] | None) -> bool:
        """Record a description (None: unknown group); print it when it is a change."""
        changed = self.state.record(description, utc_clock())
        if changed or description is not None:  # the table's figures move without a change
            self.current = waiting_view(self.args.prefix, self.args.group) \
                if description is None else describe_view(description)
        if self.live is not None:
            if changed or description is not None:
                self._redraw()
            return changed
        if not changed:
            return False
        if self.args.json:
            if raw is not None and description is not None:
                self.console.file.write(_json_line(raw))
                self.console.file.flush()
        elif description is None:
            self._line(plain(utc_clock(), "  ", waiting_view(self.args.prefix, self.args.group)))
        else:
            self._line(self.state.events[-1])
            if self.table:
                self._plain(self.current)
                self._plain(Text(""))
        return True

    def deleted(self) -> None:
        line = plain(utc_clock(), "  group ",
                     group_text(self.args.prefix, self.args.group), " was deleted; watch ends")
        if self.live is not None:
            self.state.events.append(line)
            self._redraw()
        else:
            self._line(line)


def _json_line(raw: dict[str, object]) -> str:
    return json.dumps(raw, ensure_ascii=False, separators=(",", ":")) + "\n"


async def _describe(admin: AdminClient, args: argparse.Namespace, *, watch: bool
                    ) -> tuple[GroupDescription | None, dict[str, object] | None]:
    """One describeGroup: (description, raw), or (None, raw) for an unknown group."""
    request = DescribeGroup(request_id=0, stream_prefix=args.prefix, consumer_group=args.group,
                            watch=watch)
    with trio.fail_after(args.timeout):
        raw = await admin.session.request(request)
    try:
        return check_answer(request, read_answer(request, raw)), raw
    except AdminError as exc:
        if exc.status != Status.UNKNOWN_GROUP:
            raise
        return None, raw


async def watch(admin: AdminClient, args: argparse.Namespace, console: Console) -> None:
    """Follow the group until --duration, --changes, its deletion or Ctrl-C."""
    display = WatchDisplay(console, args, admin.url)
    duration = args.duration if args.duration is not None else math.inf
    with trio.move_on_after(duration), display:
        pushing = True
        display.set_mode(PUSHES)
        while True:
            try:
                description, raw = await _describe(admin, args, watch=pushing)
            except AdminError as exc:
                if not (pushing and exc.status == Status.INVALID_REQUEST):
                    raise
                pushing = False  # a coordinator that does not know `watch`
                display.set_mode(polling(args.interval))
                continue
            display.show(description, raw)
            if display.state.enough(args.changes):
                return
            if description is None:
                await trio.sleep(args.interval)  # the group does not exist yet: wait for it
                continue
            if pushing:
                pushing = await _follow_pushes(admin, args, display)
                if pushing:
                    return  # deleted, or enough changes
                display.set_mode(polling(args.interval))
            await _poll(admin, args, display)
            return


async def _follow_pushes(admin: AdminClient, args: argparse.Namespace,
                         display: WatchDisplay) -> bool:
    """Show pushes until the group is deleted or enough changes; False: the server does not push."""
    pushed = False
    while True:
        body = None
        with trio.move_on_after(math.inf if pushed else probe_after_s(args.interval)):
            body = await _next_push(admin)
        if body is None:
            probed, raw = await _describe(admin, args, watch=False)
            if probed is not None and not display.state.differs(probed):
                continue
            # a change: a pushing coordinator sends it within a tenth of a second or so
            with trio.move_on_after(PUSH_GRACE_S):
                body = await _next_push(admin)
            if body is None:
                display.show(probed, raw)  # a change no push carried: polling from here on
                return False
        if body.get("type") != GroupDescription.TYPE:
            continue
        pushed = True
        if body.get("status") == Status.UNKNOWN_GROUP:
            display.deleted()
            return True
        response = check_status(decode_response(body))
        if isinstance(response, GroupDescription):
            display.show(response, body)
            if display.state.enough(args.changes):
                return True


async def _next_push(admin: AdminClient) -> dict[str, object]:
    try:
        return await admin.pushes.receive()
    except trio.EndOfChannel:
        raise SessionLost(f"the coordinator at {admin.url} closed the session") from None


async def _poll(admin: AdminClient, args: argparse.Namespace, display: WatchDisplay) -> None:
    while not display.state.enough(args.changes):
        await trio.sleep(args.interval)
        description, raw = await _describe(admin, args, watch=False)
        display.show(description, raw)
