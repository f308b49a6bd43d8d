"""Scenario 8: what one steady heartbeat costs the coordinator in-process, and what could be cut.

No sockets: each row times one step of the coordinator's per-heartbeat path
(decode, encode, the flush task) against a leaner way to do the same, so
the owners of the codec and the server can see the gain before they change
anything. The leaner variants live here only, as measurements; the product
code is unchanged.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from bench.report import Progressor, ScenarioResult
from rsc.protocol import messages as m
from rsc.protocol.codec import MEMBER_REQUESTS, decode, encode
from rsc.protocol.errors import Status

QUICK_REPEAT, FULL_REPEAT = 2_000, 20_000

HEARTBEAT = ('{"type":"heartbeat","streamPrefix":"bench","consumerGroup":"g",'
             '"memberId":"bench-000001-abcdef","capacity":4,"requestId":17,"memberEpoch":3,'
             '"ownedShards":null,"revokingShards":[]}')


def steady_response(request_id: int = 17) -> m.HeartbeatResponse:
    """The steady-state answer: OK, two assigned shards, nothing pending."""
    return m.HeartbeatResponse(
        request_id=request_id, status=Status.OK, member_id="bench-000001-abcdef", member_epoch=3,
        group_epoch=3, assignment_epoch=3, heartbeat_interval_ms=3000, lease_ttl_ms=30000,
        max_concurrency=4, routing=m.RoutingSummary(version=1, shard_count=2000),
        assignment=m.Assignment(assigned_shards=("bench:v1:1000", "bench:v1:1001"), pending_shards=()))


def encode_direct(response: m.HeartbeatResponse) -> str:
    """A leaner encoder: the JSON object built field by field, no converter, no intermediate copy."""
    routing, assignment = response.routing, response.assignment
    return json.dumps({
        "type": "heartbeatResponse", "requestId": response.request_id, "status": response.status.value,
        "memberId": response.member_id, "memberEpoch": response.member_epoch,
        "groupEpoch": response.group_epoch, "assignmentEpoch": response.assignment_epoch,
        "heartbeatIntervalMs": response.heartbeat_interval_ms, "leaseTtlMs": response.lease_ttl_ms,
        "maxConcurrency": response.max_concurrency,
        "routing": None if routing is None else {
            "version": routing.version, "shardCount": routing.shard_count,
            "storeId": routing.store_id,
            "retention": None if routing.retention is None else {
                "mode": routing.retention.mode.value, "maxLength": routing.retention.max_length,
                "maxAgeMs": routing.retention.max_age_ms}},
        "assignment": None if assignment is None else {
            "assignedShards": list(assignment.assigned_shards),
            "pendingShards": list(assignment.pending_shards)},
        "error": response.error,
    }, separators=(",", ":"), ensure_ascii=False)


def _per_call(function: Callable[[], Any], repeat: int) -> float:
    """Microseconds per call, best of 3."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(repeat):
            function()
        best = min(best, time.perf_counter() - started)
    return best / repeat * 1e6


async def _spawn_each(count: int) -> None:
    async def send() -> None:
        await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(send)
            await trio.lowlevel.checkpoint()


async def _await_each(count: int) -> None:
    async def send() -> None:
        await trio.lowlevel.checkpoint()

    for _ in range(count):
        await send()
        await trio.lowlevel.checkpoint()


def _trio_per_call(run: Callable[[int], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        trio.run(run, repeat)
        best = min(best, time.perf_counter() - started)
    return best / repeat * 1e6


def run(progress: Progressor, quick: bool, out: Path) -> ScenarioResult:
    repeat = QUICK_REPEAT if quick else FULL_REPEAT
    result = ScenarioResult("hotpath", "one steady heartbeat in-process: today's step vs a leaner one",
                            columns=["step", "today us", "leaner", "leaner us", "saved us"])
    response = steady_response()
    if json.loads(encode(response)) != json.loads(encode_direct(response)):
        raise AssertionError("the leaner encoder no longer writes what the codec writes: "
                             f"{encode(response)} vs {encode_direct(response)}")
    with progress.scenario("8 hot path", steps=3):
        progress.step("decode")
        today = _per_call(lambda: decode(HEARTBEAT, MEMBER_REQUESTS), repeat)
        parsed = _per_call(lambda: json.loads(HEARTBEAT), repeat)
        result.rows.append(["decode a heartbeat", today, "json.loads only (the floor)", parsed,
                            today - parsed])
        progress.step("encode")
        today = _per_call(lambda: encode(response), repeat)
        leaner = _per_call(lambda: encode_direct(response), repeat)
        result.rows.append(["encode the response", today, "object built field by field", leaner,
                            today - leaner])
        progress.step("flush task")
        spawned = _trio_per_call(_spawn_each, repeat)
        awaited = _trio_per_call(_await_each, repeat)
        result.rows.append(["a task per flush (start_soon)", spawned, "await the send in place", awaited,
                            spawned - awaited])
    result.data = {"repeat": repeat, "rows": result.rows}
    result.notes.append(f"best of 3 x {repeat:,} calls in one process, microseconds per heartbeat")
    return result
