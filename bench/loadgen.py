"""The load generator: thousands of simulated members in one process, driven over stdin/stdout.

Run by the bench (`python -m bench.loadgen URL PREFIX GROUP`), never by hand.
Each simulated member is one websocket session to `/v1/member` that follows
the member table of docs/protocol.md like tests/sim_member.py does (instant drains:
a revoked shard is reported REVOKED on the very next heartbeat, sent at once),
but speaks plain JSON dicts so that the load generator, not the coordinator,
stays cheap. The member sessions use bench/wire.py, a lean websocket client on
non-blocking sockets (one task per member, no reader task or channel); the
heartbeat JSON is pre-encoded around the two numbers that change in steady
state. Only the one-off admin calls use trio-websocket. Commands come as one
JSON object per stdin line and each gets one JSON line on stdout.

Convergence is tracked with counters updated on every response, so "all
shards held, nothing pending, every member answered OK" is an O(1) check and
the time to reach it is measured inside this process, from the moment the
disturbing action (join, add, leave, kill) is taken.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import random
import resource
import sys
import time
from typing import Any

import attrs
import trio
from trio_websocket import connect_websocket_url

from bench import wire
from bench.gcstats import report
from rsc.actors.ops import latency
from rsc.common import gc_policy as gc_control
from rsc.common import tls
from rsc.member.config import MemberConfig
from rsc.member.pure.pacing import jittered

HANDSHAKES_AT_ONCE = 64
TICK_S = 1.0  # GC tick, as a member runtime's
REVEALING = ("OK", "REVOKE_PENDING", "SYNC_METADATA")
EXPIRED = ("UNKNOWN_MEMBER_ID", "FENCED_MEMBER_EPOCH")


def raise_fd_limit() -> int:
    """Raise the soft open-files limit to the hard one (one fd per websocket); returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else 1 << 20
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        return target
    return soft


class Member:
    """One simulated member: what it holds and what it must report next."""

    __slots__ = ("index", "member_id", "epoch", "held", "revoked_to_report", "send_full", "pending",
                 "status", "websocket", "scope", "started", "sent_revoked", "sent_at", "live", "head",
                 "spread")

    def __init__(self, index: int, member_id: str) -> None:
        self.index = index
        self.member_id = member_id
        self.epoch = 0
        self.held: set[str] = set()
        self.revoked_to_report: set[str] = set()
        self.send_full = True
        self.pending = 0
        self.status: str | None = None
        self.websocket: wire.LeanWebSocket | None = None
        self.scope = trio.CancelScope()
        self.started = trio.Event()
        self.sent_revoked: tuple[str, ...] = ()
        self.sent_at = 0.0
        self.live = False
        self.head = b""  # the heartbeat JSON up to the requestId value (set by the generator)
        self.spread = False  # its next beat goes to a uniformly random point of one interval


class LoadGenerator:
    """All simulated members, their convergence counters and their latency samples."""

    def __init__(self, url: str, prefix: str, group: str, capacity: int) -> None:
        self.url = url.rstrip("/")
        self.ssl_context = tls.websocket_context(self.url)  # wss://: trusts $RSC_CA_FILE
        self.prefix = prefix
        self.group = group
        self.capacity = capacity
        self.members: list[Member] = []
        self.shard_count = 0
        self.interval = 3.0
        self.desync_next = False
        self.latencies: list[float] = []
        self.responses = 0
        self.requests = 0
        self.pushes = 0
        self.statuses: collections.Counter[str] = collections.Counter()
        self.expired = 0
        self.expired_total = 0
        self.saturate_below = 0
        self.connect_failures = 0
        self.loop_lag = latency.LatencyHistogram()  # since the last reset
        # convergence counters over live members
        self.live = 0
        self.held_total = 0
        self.pending_total = 0
        self.not_ok = 0
        self.epoch_counts: collections.Counter[int] = collections.Counter()
        self.max_assignment_epoch = 0
        self.converged = trio.Event()
        self.nursery: trio.Nursery | None = None
        self.handshakes = trio.CapacityLimiter(HANDSHAKES_AT_ONCE)

    # --- convergence -------------------------------------------------------------

    def is_converged(self) -> bool:
        # ownership convergence: members whose target an epoch bump left alone are not pushed
        # at the bump (H10 as we read it); they catch up with the epoch later
        return (self.live > 0 and self.held_total == self.shard_count and self.pending_total == 0
                and self.not_ok == 0)

    def _check(self) -> None:
        if self.is_converged():
            self.converged.set()

    def _forget(self, member: Member) -> None:
        """Take a member's contribution out of the counters (it died, left, or is about to change)."""
        if not member.live:
            return
        self.held_total -= len(member.held)
        self.pending_total -= member.pending
        self.not_ok -= member.status != "OK"
        self.epoch_counts[member.epoch] -= 1

    def _retire(self, member: Member) -> None:
        if member.live:
            self._forget(member)
            member.live = False
            self.live -= 1

    def _count(self, member: Member) -> None:
        if not member.live:
            return
        self.held_total += len(member.held)
        self.pending_total += member.pending
        self.not_ok += member.status != "OK"
        self.epoch_counts[member.epoch] += 1

    # --- one member ----------------------------------------------------------------

    def request(self, member: Member, request_id: int) -> bytes:
        full = member.send_full or member.epoch == 0
        member.sent_revoked = tuple(sorted(member.revoked_to_report)) if member.revoked_to_report else ()
        if not full and not member.sent_revoked:  # the steady-state beat: only two numbers change
            return member.head + b'%d,"memberEpoch":%d,"ownedShards":null,"revokingShards":[]}' % (
                request_id, member.epoch)
        return json.dumps({
            "type": "heartbeat", "requestId": request_id, "streamPrefix": self.prefix,
            "consumerGroup": self.group, "memberId": member.member_id, "memberEpoch": member.epoch,
            "capacity": self.capacity,
            "ownedShards": sorted(member.held) if full and member.epoch != 0 else ([] if full else None),
            "revokingShards": [{"shard": s, "state": "REVOKED"} for s in member.sent_revoked],
        }, separators=(",", ":")).encode()

    def apply(self, member: Member, response: dict[str, Any]) -> bool:
        """Follow the member obligations for `response`; True when it must heartbeat again at once."""
        status = str(response.get("status"))
        self.statuses[status] += 1
        self._forget(member)
        again = False
        if status in EXPIRED:
            if member.epoch > 0:
                self.expired += status == "UNKNOWN_MEMBER_ID"
                self.expired_total += status == "UNKNOWN_MEMBER_ID"
            member.held.clear()
            member.revoked_to_report.clear()
            member.epoch = 0
            member.send_full = True
            member.pending = 0
            member.status = status
            again = True
        elif status in REVEALING:
            assignment = response.get("assignment") or {}
            assigned = set(assignment.get("assignedShards") or ())
            before = set(member.held)
            dropped = member.held - assigned
            member.held -= dropped
            if status == "OK":
                member.epoch = response["memberEpoch"]
                member.held |= assigned
                member.revoked_to_report.difference_update(member.sent_revoked)
            member.revoked_to_report |= dropped
            member.send_full = status == "SYNC_METADATA" or member.held != before
            member.pending = len(assignment.get("pendingShards") or ())
            member.status = status
            interval = response.get("heartbeatIntervalMs")
            if interval:
                self.interval = interval / 1000
            epoch = response.get("assignmentEpoch") or 0
            if epoch > self.max_assignment_epoch:
                self.max_assignment_epoch = epoch
            again = bool(dropped) or status == "SYNC_METADATA"
        else:
            member.status = status
        self._count(member)
        self._check()
        return again

    async def run_member(self, member: Member, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        assert self.nursery is not None
        with member.scope:
            try:
                async with self.handshakes:
                    with trio.fail_after(60):
                        member.websocket = await wire.connect(self.url + "/v1/member", self.ssl_context)
            except (OSError, trio.TooSlowError):
                self.connect_failures += 1
                task_status.started(False)
                return
            task_status.started(True)
            try:
                await member.started.wait()
                await self._beat_loop(member)
            except wire.Closed:
                pass
            finally:
                self._retire(member)
                try:
                    with trio.CancelScope(shield=True), trio.move_on_after(1):
                        await member.websocket.aclose()
                finally:
                    member.websocket.close()

    async def _beat_loop(self, member: Member) -> None:
        websocket = member.websocket
        assert websocket is not None
        request_id = 0
        awaiting = False
        due = trio.current_time()
        push_seen = False
        while True:
            if not awaiting and trio.current_time() >= due:
                request_id += 1
                text = self.request(member, request_id)
                push_seen = False
                member.sent_at = time.perf_counter()
                await websocket.send_text(text)
                self.requests += 1
                awaiting = True
            received = None
            with trio.move_on_at(math.inf if awaiting else due):
                received = await websocket.receive()
            if received is None:
                continue
            message = json.loads(received)
            if message.get("requestId") is None:
                self.pushes += 1
                if awaiting:
                    push_seen = True
                else:
                    due = trio.current_time()
                continue
            awaiting = False
            self.latencies.append(time.perf_counter() - member.sent_at)
            self.responses += 1
            again = self.apply(member, message)
            now = trio.current_time()
            if again or push_seen or member.index < self.saturate_below:
                due = now
            elif self.desync_next or member.spread:
                member.spread = False
                due = now + random.random() * self.interval
            else:  # as a member runtime beats (member/shells/heartbeat.py)
                due = now + jittered(self.interval, HEARTBEAT_JITTER)

    # --- commands ------------------------------------------------------------------

    async def connect(self, count: int) -> dict[str, Any]:
        assert self.nursery is not None
        started = time.perf_counter()
        first = len(self.members)
        batch: list[Member] = []
        for index in range(first, first + count):
            member = Member(index, f"bench-{index:06d}-{random.getrandbits(24):06x}")
            member.head = (f'{{"type":"heartbeat","streamPrefix":{json.dumps(self.prefix)},'
                           f'"consumerGroup":{json.dumps(self.group)},'
                           f'"memberId":{json.dumps(member.member_id)},'
                           f'"capacity":{self.capacity},"requestId":').encode()
            self.members.append(member)
            batch.append(member)
        async with trio.open_nursery() as handshakes:
            for member in batch:
                handshakes.start_soon(self._start_member, member)
        return {"connected": sum(m.websocket is not None for m in batch), "failed": self.connect_failures,
                "seconds": time.perf_counter() - started}

    async def _start_member(self, member: Member) -> None:
        assert self.nursery is not None
        await self.nursery.start(self.run_member, member)

    def join(self, indexes: list[Member]) -> None:
        for member in indexes:
            if member.websocket is not None and not member.started.is_set():
                member.live = True
                self.live += 1
                member.status = None
                self._count(member)
                member.started.set()

    async def wait_converged(self, started: float, timeout: float) -> dict[str, Any]:
        responses, pushes = self.responses, self.pushes
        with trio.move_on_after(timeout):
            while not self.is_converged():
                self.converged = trio.Event()
                await self.converged.wait()
            return {"converged": True, "seconds": time.perf_counter() - started,
                    "heartbeats": self.responses - responses, "pushes": self.pushes - pushes,
                    "membersAtNewestEpoch": self.epoch_counts[self.max_assignment_epoch],
                    "live": self.live}
        return {"converged": False, "seconds": time.perf_counter() - started, "state": self.state()}

    def state(self) -> dict[str, Any]:
        return {"live": self.live, "heldTotal": self.held_total, "shardCount": self.shard_count,
                "pendingTotal": self.pending_total, "notOk": self.not_ok,
                "assignmentEpoch": self.max_assignment_epoch,
                "atEpoch": self.epoch_counts[self.max_assignment_epoch]}

    def stats(self) -> dict[str, Any]:
        samples = sorted(self.latencies)

        def pct(p: float) -> float | None:
            if not samples:
                return None
            return samples[min(len(samples) - 1, int(p / 100 * len(samples)))] * 1000

        lag = self.loop_lag.snapshot()
        lag_p99 = latency.quantile(lag, 0.99)
        return {"loopLagP99Ms": None if lag_p99 is None else lag_p99 * 1000,
                "count": len(samples), "p50Ms": pct(50), "p90Ms": pct(90), "p99Ms": pct(99),
                "maxMs": samples[-1] * 1000 if samples else None, "responses": self.responses,
                "requests": self.requests, "pushes": self.pushes, "statuses": dict(self.statuses),
                "expired": self.expired, "expiredTotal": self.expired_total, **self.state()}

    def reset(self) -> None:
        self.loop_lag = latency.LatencyHistogram()
        self.latencies = []
        self.statuses = collections.Counter()
        self.expired = 0

    async def admin(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.nursery is not None
        async with trio.open_nursery() as nursery:
            websocket = await connect_websocket_url(nursery, self.url + "/v1/admin",
                                                    ssl_context=self.ssl_context)
            await websocket.send_message(json.dumps({"requestId": 1, **message}))
            reply = json.loads(await websocket.get_message())
            await websocket.aclose()
        return reply

    async def command(self, command: dict[str, Any]) -> dict[str, Any]:
        name = command["cmd"]
        if name == "connect":
            return await self.connect(command["count"])
        if name == "set_shards":
            reply = await self.admin({"type": "setShardCount", "streamPrefix": self.prefix,
                                      "consumerGroup": self.group, "shardCount": command["count"]})
            if reply.get("status") == "OK":
                self.shard_count = reply["routing"]["shardCount"]
            return {"reply": reply}
        if name == "admin":
            return {"reply": await self.admin(command["message"])}
        if name == "join":
            started = time.perf_counter()
            self.desync_next = command.get("desync", False)
            self.join(self.members)
            if command.get("wait"):
                return await self.wait_converged(started, command.get("timeout", 120))
            return {}
        if name == "wait_converged":
            return await self.wait_converged(time.perf_counter(), command.get("timeout", 120))
        if name == "desync":
            # One uniform draw per member, after its next answer. (Drawing again after every
            # answer for one interval, as before, leaves the phases of a renewal process: twice
            # as dense just after the window as on average, a wave that, at 10,000 members,
            # went over the server's capacity and then stayed one pack of heartbeats.)
            for member in self.members:
                member.spread = True
            await trio.sleep(self.interval * 1.05)
            return {}
        if name == "add":
            added = await self.connect(command["count"])
            started = time.perf_counter()
            self.join(self.members[-command["count"]:])
            if not command.get("wait", True):  # joined; convergence is waited for later
                return added
            return {**added, **await self.wait_converged(started, command.get("timeout", 120))}
        if name == "leave":
            return await self.leave(command["count"], command.get("timeout", 120),
                                    oldest=command.get("oldest", False),
                                    wait=command.get("wait", True))
        if name == "kill":
            return await self.kill(command["fraction"], command.get("timeout", 120))
        if name == "saturate":
            return await self.run_saturated(command["seconds"], command.get("members", 1 << 30))
        if name == "stats":
            return self.stats()
        if name == "gc":
            return report(gc_control.recorder.snapshot(reset_max=True), gc_control.install())
        if name == "reset":
            self.reset()
            return {}
        raise ValueError(f"unknown command {name!r}")

    def _live_members(self) -> list[Member]:
        return [m for m in self.members if m.live]

    async def leave(self, count: int, timeout: float, oldest: bool = False,
                    wait: bool = True) -> dict[str, Any]:
        """Clean leave (memberEpoch -1) of the newest (or oldest) `count` live members; with
        `wait`, until the group converged again."""
        live = self._live_members()
        leaving = live[:count] if oldest else live[-count:]
        started = time.perf_counter()
        for member in leaving:
            self._retire(member)
            assert member.websocket is not None
            await _leave_on(member.websocket, self.prefix, self.group, member.member_id)
            member.scope.cancel()
        self._check()
        if not wait:
            return {"left": len(leaving), "seconds": time.perf_counter() - started}
        return await self.wait_converged(started, timeout)

    async def kill(self, fraction: float, timeout: float) -> dict[str, Any]:
        """Stop `fraction` of the live members silently: no leave, connection dropped."""
        live = self._live_members()
        victims = random.Random(7).sample(live, max(1, int(len(live) * fraction)))
        orphaned = sum(len(m.held) for m in victims)
        started = time.perf_counter()
        for member in victims:
            self._retire(member)
            member.scope.cancel()
        result = await self.wait_converged(started, timeout)
        return {**result, "killed": len(victims), "orphanedShards": orphaned}

    async def run_saturated(self, seconds: float, members: int) -> dict[str, Any]:
        """The first `members` members heartbeat again as soon as a response arrives, for `seconds`.

        The rest keep their normal interval (background load).
        """
        self.saturate_below = members
        await trio.sleep(self.interval * 1.05)  # every member passes its due time and stays busy
        self.reset()
        before = self.responses
        started = time.perf_counter()
        await trio.sleep(seconds)
        self.saturate_below = 0
        elapsed = time.perf_counter() - started
        return {"responses": self.responses - before, "seconds": elapsed,
                "perSecond": (self.responses - before) / elapsed, **self.stats()}


async def _leave_on(websocket: wire.LeanWebSocket, prefix: str, group: str, member_id: str) -> None:
    # sent on the member's own connection before its task is cancelled and closes it
    try:
        await websocket.send_text(json.dumps({
            "type": "heartbeat", "requestId": 10 ** 9, "streamPrefix": prefix, "consumerGroup": group,
            "memberId": member_id, "memberEpoch": -1}).encode())
    except wire.Closed:
        pass


async def _gc_tick() -> None:
    while True:
        await trio.sleep(TICK_S)
        gc_control.on_tick()


LAG_PROBE_S = 0.005
HEARTBEAT_JITTER = float(attrs.fields(MemberConfig).heartbeat_jitter.default or 0.0)  # as shipped


async def _watch_loop_lag(generator: LoadGenerator) -> None:
    """How late this process's own event loop wakes a task: what it adds to every latency."""
    while True:
        started = time.perf_counter()
        await trio.sleep(LAG_PROBE_S)
        generator.loop_lag.observe(max(0.0, time.perf_counter() - started - LAG_PROBE_S))


async def main_async(args: argparse.Namespace) -> None:
    generator = LoadGenerator(args.url, args.prefix, args.group, args.capacity)
    stdin = trio.lowlevel.FdStream(sys.stdin.fileno())
    buffer = b""
    async with trio.open_nursery() as nursery:
        generator.nursery = nursery
        nursery.start_soon(_gc_tick)
        nursery.start_soon(_watch_loop_lag, generator)
        gc_control.freeze_after_startup()
        print(json.dumps({"ready": True, "fdLimit": raise_fd_limit()}), flush=True)
        while True:
            while b"\n" not in buffer:
                chunk = await stdin.receive_some(65536)
                if not chunk:
                    nursery.cancel_scope.cancel()
                    return
                buffer += chunk
            line, buffer = buffer.split(b"\n", 1)
            command = json.loads(line)
            if command["cmd"] == "exit":
                nursery.cancel_scope.cancel()
                break
            try:
                result = await generator.command(command)
            except Exception as exc:  # noqa: BLE001 - reported to the bench, which fails the scenario
                import traceback

                traceback.print_exc()
                result = {"error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(result), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="simulated members for the bench (driven over stdin)")
    parser.add_argument("url")
    parser.add_argument("prefix")
    parser.add_argument("group")
    parser.add_argument("--capacity", type=int, default=4)
    args = parser.parse_args()
    gc_control.install()
    trio.run(main_async, args)


if __name__ == "__main__":
    main()
