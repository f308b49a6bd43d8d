"""Scenario 5: target assignment computation, pure, no I/O (the sizes of Kafka's assignor JMH benchmarks).

- full: `assign(members, shards, {})`, the from-scratch target.
- incremental: on a balanced `TargetAssignment`, one member joins, then leaves
  (`add_member` / `remove_member`); median over repeats.
- group join: the same join through `GroupMachine.heartbeat` (epoch bump,
  target update, push set, reconcile) plus the checkpoint fields it makes the
  shell serialize (the group field and the changed members): what one join
  really costs the coordinator.
"""

from __future__ import annotations

import gc
import json
import statistics
import time
from pathlib import Path
from typing import Any

from bench.report import Progressor, ScenarioResult, pyplot
from rsc.actors.core.assignor import TargetAssignment, assign
from rsc.actors.core.group import GroupMachine, GroupSettings
from rsc.actors.core.records import group_value, member_value
from rsc.protocol import messages as m

FULL_MEMBERS = (100, 1000, 10000)
QUICK_MEMBERS = (100, 1000)
SHARDS_PER_MEMBER = (5, 10, 50)
REPEATS = 5


def _timed(call: Any) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def _shards(count: int) -> list[str]:
    return [f"{{bench:v1:{index}}}" for index in range(count)]


def measure_assignor(members: int, per_member: int) -> dict[str, float]:
    shards = _shards(members * per_member)
    member_ids = [f"member-{index:06d}" for index in range(members)]
    gc.collect()
    full = _timed(lambda: assign(member_ids, shards, {}))
    target = TargetAssignment(shards, {member_id: () for member_id in member_ids})
    joins, leaves = [], []
    for attempt in range(REPEATS):
        newcomer = f"newcomer-{attempt}"
        joins.append(_timed(lambda: target.add_member(newcomer)))  # noqa: B023 - called at once
        leaves.append(_timed(lambda: target.remove_member(newcomer)))  # noqa: B023
    return {"fullMs": full, "joinMs": statistics.median(joins), "leaveMs": statistics.median(leaves)}


def _join(machine: GroupMachine, member_id: str, now: int) -> m.HeartbeatResponse:
    return machine.heartbeat(m.Heartbeat(request_id=1, stream_prefix="bench", consumer_group="g",
                                         member_id=member_id, member_epoch=0, capacity=4,
                                         owned_shards=(), revoking_shards=()), now, None)


def measure_group(members: int, shards: int) -> dict[str, float]:
    machine = GroupMachine("bench", "g", GroupSettings(), _shards(shards))
    started = time.perf_counter()
    for index in range(members):
        _join(machine, f"member-{index:06d}", 1000)
    setup = (time.perf_counter() - started) * 1000
    machine.take_effects()
    join = _timed(lambda: _join(machine, "newcomer", 2000))
    effects = machine.take_effects()

    def checkpoint_fields() -> str:
        # what the prefix actor writes for this join: the group field and the changed members
        fields = {"group": group_value(machine.persistent_group()),
                  **{mid: member_value(machine.persistent_member(mid))
                     for mid in effects.members_dirty if mid in machine.members}}
        return json.dumps(fields, separators=(",", ":"))

    record = _timed(checkpoint_fields)
    summary = _timed(machine.summary)
    return {"setupMs": setup, "joinMs": join, "pushes": len(effects.pushes), "recordMs": record,
            "summaryMs": summary, "recordBytes": len(checkpoint_fields())}


def run(progress: Progressor, quick: bool, out: Path) -> ScenarioResult:
    sizes = QUICK_MEMBERS if quick else FULL_MEMBERS
    result = ScenarioResult("assignor", "target assignment, pure (ms)",
                            columns=["case", "members", "shards/member", "shards", "full ms",
                                     "incremental join ms", "incremental leave ms"])
    with progress.scenario("5 assignor", steps=len(sizes) * (len(SHARDS_PER_MEMBER) + 1)):
        for members in sizes:
            for per_member in SHARDS_PER_MEMBER:
                progress.step(f"{members:,} members x {per_member} shards")
                timing = measure_assignor(members, per_member)
                result.data[f"{members}x{per_member}"] = timing
                result.rows.append(["assignor", members, per_member, members * per_member,
                                    timing["fullMs"], timing["joinMs"], timing["leaveMs"]])
            shards = min(2 * members, 4096)
            progress.step(f"GroupMachine: {members:,} joins, {shards:,} shards")
            group = measure_group(members, shards)
            result.data[f"group{members}"] = group
            result.rows.append(["GroupMachine join", members, round(shards / members, 1), shards,
                                group["setupMs"], group["joinMs"], None])
            result.notes.append(
                f"GroupMachine @{members:,}: {members:,} joins from empty took {group['setupMs']:.0f} ms "
                f"(full ms column); one more join {group['joinMs']:.2f} ms, {group['pushes']:,} pushes; "
                f"checkpoint fields + json {group['recordMs']:.1f} ms "
                f"({group['recordBytes'] / 1024:.0f} KiB), "
                f"summary() {group['summaryMs']:.1f} ms")
    biggest = max(sizes)
    timing = result.data[f"{biggest}x50"]
    worst = max(timing["joinMs"], timing["leaveMs"])
    result.target(f"incremental assignment @{biggest:,} x 50", "< 50 ms", f"{worst:.2f} ms", worst < 50)
    if biggest < 10000:
        result.notes.append("quick sizes: the target is for 10,000 members x 50 shards/member")
    _plot(result, sizes, out)
    return result


def _plot(result: ScenarioResult, sizes: tuple[int, ...], out: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    figure, axis = plt.subplots(figsize=(7, 4))
    for per_member in SHARDS_PER_MEMBER:
        axis.plot(sizes, [result.data[f"{n}x{per_member}"]["fullMs"] for n in sizes], "o-",
                  label=f"full, {per_member}/member")
        axis.plot(sizes, [result.data[f"{n}x{per_member}"]["joinMs"] for n in sizes], "s--",
                  label=f"incremental join, {per_member}/member")
    axis.axhline(50, color="red", linewidth=0.8, label="target (incremental)")
    axis.set(xscale="log", yscale="log", xlabel="members", ylabel="ms", title="assignor")
    axis.legend(fontsize=7)
    figure.tight_layout()
    path = out / "assignor.png"
    figure.savefig(path, dpi=100)
    plt.close(figure)
    result.plots.append(str(path))
