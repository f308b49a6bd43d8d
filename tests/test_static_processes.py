"""Static membership against real processes (S2..S5): a real redis-server, a real `rsc
coordinator` child (JSON logs captured) and real `rsc consume` children with `--events`.

- A rolling restart of 4 static consumers under load (each SIGTERMed, then started again with
  the same instance id, like a Kubernetes rollout): no shard moves, the group epoch does not
  grow, the coordinator logs no epoch change, the members not restarting get nothing new, each
  shard's longest processing gap falls in its own member's restart, nothing is lost. The same
  rollout of dynamic members still rebalances (shards move, epochs grow).
- A second process with a live instance id waits (UNRELEASED_INSTANCE_ID, S4), the incumbent
  undisturbed; it takes over once the incumbent leaves for a while.
- A member whose instance id a newer member took over stops for good (FENCED_INSTANCE_ID, S3):
  `rsc consume` exits 1 with one line naming it.
- A SIGKILLed static member is AWAY (its shards wait, owner null) until
  `--static-session-timeout-ms`, then removed and its shards move (S5).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import attrs
import pytest
import trio

from rsc.member.session import open_session
from rsc.protocol import DescribeGroup, GroupDescription, GroupState, Heartbeat, HeartbeatResponse
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import TEMPORARY_LEAVE_EPOCH, MemberState
from tests.processes import ROOT, log_message, spawn_coordinator
from tests.test_member_support import pending_count, set_shards, write_messages

pytestmark = pytest.mark.faults  # the fault step of .ci/run: python -m pytest -q -m faults

PREFIX = "static"
SHARDS = 8
RATE_PER_S = 100


def now_s() -> float:
    return time.monotonic()


@attrs.define
class Consumer:
    """One `rsc consume` child: processed lines with their arrival time, events, other lines."""

    name: str
    process: trio.Process
    processed: list[tuple[float, dict]] = attrs.field(factory=list)
    events: list[tuple[float, dict]] = attrs.field(factory=list)
    lines: list[str] = attrs.field(factory=list)  # stderr lines that are not events

    @property
    def member_id(self) -> str | None:
        return next((event["memberId"] for _, event in self.events), None)

    def holds(self) -> set[str]:
        """The shards its events say it holds."""
        held: set[str] = set()
        for _, event in self.events:
            shards = set(event.get("shards") or ())
            if event["event"] == "assigned":
                held |= shards
            elif event["event"] in ("revoked", "fenced", "instance fenced"):
                held -= shards
            elif event["event"] == "left":
                held.clear()
        return held

    def event_names(self, since: float = 0.0) -> list[str]:
        return [event["event"] for at, event in self.events if at >= since]

    async def collect_stdout(self) -> None:
        assert self.process.stdout is not None
        rest = b""
        async for chunk in self.process.stdout:
            *complete, rest = (rest + chunk).split(b"\n")
            at = now_s()
            self.processed.extend((at, json.loads(line)) for line in complete if line)

    async def collect_stderr(self) -> None:
        assert self.process.stderr is not None
        rest = b""
        async for chunk in self.process.stderr:
            *complete, rest = (rest + chunk).split(b"\n")
            at = now_s()
            for raw in complete:
                line = raw.decode(errors="replace")
                try:
                    event = json.loads(line)
                except ValueError:
                    event = None
                if isinstance(event, dict) and "event" in event:
                    self.events.append((at, event))
                elif line:
                    self.lines.append(line)


@attrs.define
class Coordinator:
    process: trio.Process
    url: str
    log: list[tuple[float, dict]] = attrs.field(factory=list)

    async def collect(self) -> None:
        assert self.process.stderr is not None
        rest = b""
        async for chunk in self.process.stderr:
            *complete, rest = (rest + chunk).split(b"\n")
            for line in complete:
                try:
                    self.log.append((now_s(), json.loads(line)))
                except ValueError:
                    continue

    def events(self, name: str, since: float = 0.0) -> list[dict]:
        return [line for at, line in self.log if at >= since and line.get("event") == name]


async def start_coordinator(redis_url: str, nursery: trio.Nursery, *flags: str) -> Coordinator:
    process, url = await spawn_coordinator(redis_url, "--log-format", "json", *flags,
                                           stderr=subprocess.PIPE)
    coordinator = Coordinator(process, url)
    nursery.start_soon(coordinator.collect)
    return coordinator


async def start_consumer(name: str, url: str, redis_url: str, group: str, nursery: trio.Nursery,
                         *flags: str) -> Consumer:
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "rsc", "consume", PREFIX, group, "--coordinator", url,
         "--redis-url", redis_url, "--workers", "2", "--events", *flags],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    consumer = Consumer(name, process)
    nursery.start_soon(consumer.collect_stdout)
    nursery.start_soon(consumer.collect_stderr)
    return consumer


async def describe(url: str, group: str) -> GroupDescription:
    async with open_session(url, "admin") as session:
        described = await session.request(DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                                        consumer_group=group))
    assert isinstance(described, GroupDescription), described
    return described


async def wait_described(url: str, group: str, condition, timeout: float, what: str
                         ) -> GroupDescription:
    """Describe the group until `condition(description)` holds (bounded)."""
    with trio.move_on_after(timeout) as scope:
        while True:
            described = await describe(url, group)
            if condition(described):
                return described
            await trio.sleep(0.05)
    assert not scope.cancelled_caught, f"timed out after {timeout} s waiting for {what}"
    raise AssertionError(what)


async def wait_for(condition, timeout: float, what: str) -> None:
    with trio.move_on_after(timeout) as scope:
        while not condition():
            await trio.sleep(0.02)
    assert not scope.cancelled_caught, f"timed out after {timeout} s waiting for {what}"


def stable_with(count: int, shards: int = SHARDS):
    def check(described: GroupDescription) -> bool:
        return (described.state == GroupState.STABLE and len(described.members) == count
                and all(member.state == MemberState.STABLE for member in described.members)
                and sum(len(member.assigned_shards) for member in described.members) == shards)
    return check


def owners_by_instance(described: GroupDescription) -> dict[str, str | None]:
    """shard -> instanceId (or memberId for a dynamic member) of its holder."""
    name = {member.member_id: member.instance_id or member.member_id
            for member in described.members}
    return {member_shard: name[member.member_id] for member in described.members
            for member_shard in member.assigned_shards}


class Writer:
    """Writes RATE_PER_S messages a second to the shards (a producer running), until stopped."""

    def __init__(self, redis_url: str, streams: tuple[str, ...]) -> None:
        self.redis_url, self.streams = redis_url, streams
        self.written = 0
        self.scope = trio.CancelScope()
        self.done = trio.Event()

    def write(self, count: int) -> None:
        write_messages(self.redis_url, self.streams,
                       [(f"k{n % 97}", str(n)) for n in range(self.written, self.written + count)])
        self.written += count

    async def run(self) -> None:
        try:
            with self.scope:
                while True:
                    await trio.to_thread.run_sync(self.write, RATE_PER_S // 10)
                    await trio.sleep(0.1)
        finally:
            self.done.set()

    async def stop(self) -> None:
        self.scope.cancel()
        with trio.fail_after(10):
            await self.done.wait()


async def end_all(processes) -> None:
    for process in processes:
        if process.returncode is None:
            process.kill()
            with trio.move_on_after(10):
                await process.wait()


@attrs.define
class Rollout:
    """What a rolling restart did."""

    before: GroupDescription
    after: GroupDescription
    restarts: dict[str, tuple[float, float]]  # consumer name -> (SIGTERM, new one assigned)
    started_at: float
    consumers: list[Consumer]
    everyone: list[Consumer]
    lost: set[str]
    epoch_lines: int


async def rolling_restart(redis_url: str, nursery: trio.Nursery, group: str, *,
                          static: bool) -> Rollout:
    coordinator = await start_coordinator(redis_url, nursery, "--static-session-timeout-ms",
                                          "60000")
    everyone: list[Consumer] = []
    try:
        streams = await set_shards(coordinator.url, PREFIX, group, SHARDS)
        writer = Writer(redis_url, streams)
        nursery.start_soon(writer.run)

        def flags(index: int) -> tuple[str, ...]:
            return ("--instance-id", f"pod-{index}") if static else ()

        consumers = [await start_consumer(f"pod-{i}", coordinator.url, redis_url, group,
                                          nursery, *flags(i)) for i in range(4)]
        everyone.extend(consumers)
        before = await wait_described(coordinator.url, group, stable_with(4), 60,
                                      "4 stable members")
        await wait_for(lambda: all(c.processed for c in consumers), 30, "every consumer busy")
        assigned = {m.member_id: set(m.assigned_shards) for m in before.members}
        await wait_for(lambda: all(c.member_id in assigned and c.holds() == assigned[c.member_id]
                                   for c in consumers), 10,
                       "every consumer's events to show what it holds")
        started_at = now_s()
        restarts: dict[str, tuple[float, float]] = {}
        for index in range(4):
            old = consumers[index]
            stopped_at = now_s()
            old.process.send_signal(signal.SIGTERM)
            with trio.fail_after(30):
                assert await old.process.wait() == 0
            new = await start_consumer(old.name, coordinator.url, redis_url, group, nursery,
                                       *flags(index))
            everyone.append(new)
            consumers[index] = new
            await wait_for(lambda n=new: "assigned" in n.event_names(), 60,
                           f"{old.name} to be back with shards")
            back_at = next(at for at, event in new.events if event["event"] == "assigned")
            restarts[old.name] = (stopped_at, back_at)
            await wait_described(coordinator.url, group, stable_with(4), 60,
                                 f"4 stable members after restarting {old.name}")
        after = await describe(coordinator.url, group)
        epoch_lines = len(coordinator.events("group.epoch", since=started_at))
        await writer.stop()

        def everything_processed() -> bool:
            values = {line["value"] for c in everyone for _, line in c.processed}
            return len(values) >= writer.written

        await wait_for(everything_processed, 60, "every message to be processed")
        await wait_for(lambda: pending_count(redis_url, streams, group) == 0, 30, "nothing pending")
        values = {line["value"] for c in everyone for _, line in c.processed}
        lost = {str(n) for n in range(writer.written)} - values
        for consumer in consumers:
            consumer.process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            for consumer in consumers:
                assert await consumer.process.wait() == 0
    finally:
        await end_all([*(c.process for c in everyone), coordinator.process])
    return Rollout(before=before, after=after, restarts=restarts, started_at=started_at,
                   consumers=consumers, everyone=everyone, lost=lost, epoch_lines=epoch_lines)


def shard_gaps(rollout: Rollout) -> dict[str, tuple[float, float, float]]:
    """shard -> (longest gap between two processed messages during the rollout, its start, end)."""
    times: dict[str, list[float]] = {}
    for consumer in rollout.everyone:
        for at, line in consumer.processed:
            times.setdefault(line["shard"], []).append(at)
    gaps = {}
    for shard, seen in times.items():
        seen.sort()
        gaps[shard] = max(((b - a, a, b) for a, b in zip(seen, seen[1:], strict=False)
                           if b >= rollout.started_at), default=(0.0, 0.0, 0.0))
    return gaps


async def test_s2_s3_a_rolling_restart_of_static_consumers_moves_nothing_and_loses_nothing(
        redis_url, nursery):
    rollout = await rolling_restart(redis_url, nursery, "rolling-static", static=True)
    before, after = rollout.before, rollout.after
    owners = owners_by_instance(before)
    assert owners == owners_by_instance(after), "every shard is back with its own instance"
    assert set(owners.values()) == {f"pod-{i}" for i in range(4)}
    assert after.group_epoch == before.group_epoch, "the group epoch did not grow"
    assert rollout.epoch_lines == 0, "the coordinator logged no epoch change"
    # nothing was pushed to the members not restarting: between the first SIGTERM and their own
    # restart, the first four processes got no new assignment, revoke or fence
    for consumer in rollout.everyone[:4]:
        stopped_at = rollout.restarts[consumer.name][0]
        seen = [name for at, event in consumer.events
                if rollout.started_at <= at < stopped_at for name in [event["event"]]]
        assert seen == [], (consumer.name, seen)
    for consumer in rollout.everyone[4:]:  # each new process got its shards once, nothing moved
        names = [event["event"] for _, event in consumer.events]
        assert names.count("assigned") == 1 and "revoking" not in names, (consumer.name, names)
    gaps = shard_gaps(rollout)
    for shard, (gap, start, end) in gaps.items():
        down_at, back_at = rollout.restarts[owners[shard]]
        # the longest pause of each shard is its own member's restart
        assert start < back_at and end > down_at, (shard, gap, owners[shard])
    assert not rollout.lost, sorted(rollout.lost)[:10]
    longest = max(gap for gap, _, _ in gaps.values())
    restart = max(back - down for down, back in rollout.restarts.values())
    print(f"\nstatic rolling restart: 0 shard moves, group epoch {before.group_epoch} -> "
          f"{after.group_epoch}, longest shard gap {longest:.2f} s, longest restart "
          f"{restart:.2f} s, lost {len(rollout.lost)}")


async def test_a_rolling_restart_of_dynamic_consumers_still_rebalances(redis_url, nursery):
    rollout = await rolling_restart(redis_url, nursery, "rolling-dynamic", static=False)
    assert rollout.after.group_epoch > rollout.before.group_epoch
    assert rollout.epoch_lines > 0
    assert not (set(owners_by_instance(rollout.after).values())
                & set(owners_by_instance(rollout.before).values())), "new memberIds own all"
    moved = sum(1 for consumer in rollout.everyone[:4] for at, event in consumer.events
                if event["event"] in ("revoking", "assigned") and event["shards"]
                and rollout.started_at < at < rollout.restarts[consumer.name][0])
    assert moved > 0, "members not restarting were pushed new work"
    assert not rollout.lost, sorted(rollout.lost)[:10]


async def test_s4_a_second_process_with_a_live_instance_id_waits_and_the_incumbent_is_undisturbed(
        redis_url, nursery):
    group = "duplicate"
    coordinator = await start_coordinator(redis_url, nursery)
    consumers: list[Consumer] = []
    try:
        await set_shards(coordinator.url, PREFIX, group, 4)
        first = await start_consumer("first", coordinator.url, redis_url, group, nursery,
                                     "--instance-id", "pod-0")
        consumers.append(first)
        before = await wait_described(coordinator.url, group, stable_with(1, 4), 30, "pod-0")
        second = await start_consumer("second", coordinator.url, redis_url, group, nursery,
                                      "--instance-id", "pod-0")
        consumers.append(second)
        await wait_for(lambda: any("UNRELEASED_INSTANCE_ID" in line for line in second.lines),
                       30, "the duplicate to say it waits")
        [said] = [line for line in second.lines if "UNRELEASED_INSTANCE_ID" in line]
        assert "instanceId 'pod-0'" in said and "retrying the join with backoff" in said
        assert second.event_names() == ["join refused"], "said once, holds nothing"
        await wait_for(lambda: first.member_id is not None and second.member_id is not None, 10,
                       "both processes' first events")
        during = await describe(coordinator.url, group)
        assert [m.member_id for m in during.members] == [first.member_id]
        assert during.group_epoch == before.group_epoch
        assert during.members[0].assigned_shards == before.members[0].assigned_shards
        assert first.event_names(since=0) == ["joined", "assigned"], "the incumbent undisturbed"
        # the incumbent leaves for a while (S2): the waiting one returns in its place (S3)
        first.process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            assert await first.process.wait() == 0
        after = await wait_described(
            coordinator.url, group,
            lambda d: [m.member_id for m in d.members] == [second.member_id]
            and len(d.members[0].assigned_shards) == 4, 30, "the second to take over")
        assert after.members[0].instance_id == "pod-0"
        assert after.group_epoch == before.group_epoch
        second.process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            assert await second.process.wait() == 0
    finally:
        await end_all([*(c.process for c in consumers), coordinator.process])


async def test_s3_a_replaced_member_gets_fenced_instance_id_and_stops_for_good(redis_url, nursery):
    group = "replaced"
    coordinator = await start_coordinator(redis_url, nursery)
    consumers: list[Consumer] = []
    try:
        await set_shards(coordinator.url, PREFIX, group, 4)
        old = await start_consumer("old", coordinator.url, redis_url, group, nursery,
                                   "--instance-id", "pod-0")
        consumers.append(old)
        await wait_described(coordinator.url, group,
                             lambda d: d.state == GroupState.STABLE and len(d.members) == 1
                             and len(d.members[0].assigned_shards) == 4, 30, "pod-0 to hold all")
        await wait_for(lambda: old.member_id is not None, 10, "the old process's joined event")
        assert old.member_id is not None
        # the coordinator is told the old process left for a while and another process came
        # back under its instance id (a stale -2 and a join, back to back, as after a lost
        # network path): the old process itself still runs with a live lease
        async with open_session(coordinator.url, "member") as session:
            answer = await session.request(Heartbeat(
                request_id=0, stream_prefix=PREFIX, consumer_group=group,
                member_id=old.member_id, member_epoch=TEMPORARY_LEAVE_EPOCH, owned_shards=(),
                instance_id="pod-0"))
            assert isinstance(answer, HeartbeatResponse) and answer.status == Status.OK
            joined = await session.request(Heartbeat(
                request_id=0, stream_prefix=PREFIX, consumer_group=group, member_id="new-pod-0",
                member_epoch=0, owned_shards=(), instance_id="pod-0"))
            assert isinstance(joined, HeartbeatResponse) and joined.status == Status.OK, joined
            assert joined.assignment is not None and len(joined.assignment.assigned_shards) == 4
        with trio.fail_after(30):
            code = await old.process.wait()
        assert code == 1
        fenced = [line for line in old.lines if "FENCED_INSTANCE_ID" in line]
        assert len(fenced) == 1 and "instanceId 'pod-0'" in fenced[0], old.lines
        assert log_message(fenced[0]).startswith("rsc consume: ")
        assert "instance fenced" in old.event_names()
        assert "joined" not in old.event_names()[1:], "it never rejoins"
        after = await describe(coordinator.url, group)
        assert [m.member_id for m in after.members] == ["new-pod-0"]
        assert after.members[0].instance_id == "pod-0"
    finally:
        await end_all([*(c.process for c in consumers), coordinator.process])


async def test_s5_a_killed_static_member_is_away_then_removed_after_the_session_timeout(
        redis_url, nursery):
    group = "timeout"
    coordinator = await start_coordinator(redis_url, nursery, "--lease-ttl-ms", "1500",
                                          "--static-session-timeout-ms", "4000")
    consumers: list[Consumer] = []
    try:
        await set_shards(coordinator.url, PREFIX, group, 4)
        for index in range(2):
            consumers.append(await start_consumer(f"pod-{index}", coordinator.url, redis_url,
                                                  group, nursery, "--instance-id", f"pod-{index}"))
        before = await wait_described(
            coordinator.url, group,
            lambda d: d.state == GroupState.STABLE and len(d.members) == 2
            and all(len(m.assigned_shards) == 2 for m in d.members), 30, "2 stable members")
        victim, survivor = consumers
        victim_shards = next(m.assigned_shards for m in before.members
                             if m.instance_id == "pod-0")
        survivor_shards = next(set(m.assigned_shards) for m in before.members
                               if m.instance_id == "pod-1")
        await wait_for(lambda: survivor.holds() == survivor_shards, 10,
                       "the survivor's events to show what it holds")
        seen = len(survivor.events)
        victim.process.kill()
        await victim.process.wait()
        away = await wait_described(
            coordinator.url, group,
            lambda d: any(m.state == MemberState.AWAY for m in d.members), 30, "pod-0 AWAY")
        [gone] = [m for m in away.members if m.state == MemberState.AWAY]
        assert gone.instance_id == "pod-0" and gone.target_shards == victim_shards
        assert gone.away_ms is not None and not gone.overdue
        assert away.group_epoch == before.group_epoch and away.state == GroupState.STABLE
        [kept] = [m for m in away.members if m.instance_id == "pod-1"]
        assert len(kept.assigned_shards) == 2, "its shards were given to nobody yet"
        assert [event["event"] for _, event in survivor.events[seen:]] == [], "nothing pushed"
        removed = await wait_described(
            coordinator.url, group,
            lambda d: len(d.members) == 1 and len(d.members[0].assigned_shards) == 4, 30,
            "pod-0 removed and its shards moved")
        assert removed.group_epoch > before.group_epoch
        [expired] = coordinator.events("member.expired")
        assert expired["reason"] == "session_timeout" and expired["instanceId"] == "pod-0"
        assert coordinator.events("member.away")[0]["reason"] == "lease_expired"
        survivor.process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            assert await survivor.process.wait() == 0
    finally:
        await end_all([*(c.process for c in consumers), coordinator.process])
