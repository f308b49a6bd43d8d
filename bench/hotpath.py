"""Scenario 8: what one steady heartbeat costs the coordinator in-process, before and after.

No sockets: each row times one step of the coordinator's per-heartbeat path. The codec
rows compare the converter path (what every heartbeat took before the codec wrote a
heartbeatResponse field by field and built a well-formed heartbeat directly) with today's
product `encode`/`decode`; the flush-task row compares a task per flush (what the server did
before it wrote frames in place, actors/net/ws_server.py) with awaiting the send in place.
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
from rsc.protocol.codec import (
    MEMBER_REQUESTS,
    _decode_with_converter,
    _encode_with_converter,
    decode,
    encode,
)
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


def decode_with_converter(text: str) -> m.Message:
    """The decode of before: json.loads, then the converter alone."""
    return _decode_with_converter(json.loads(text), MEMBER_REQUESTS)


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
    result = ScenarioResult("hotpath", "one steady heartbeat in-process: the converter path vs the product",
                            columns=["step", "converter us", "product us", "saved us", "note"])
    response = steady_response()
    if encode(response) != _encode_with_converter(response):
        raise AssertionError("encode no longer writes what the converter writes: "
                             f"{encode(response)} vs {_encode_with_converter(response)}")
    if decode(HEARTBEAT, MEMBER_REQUESTS) != decode_with_converter(HEARTBEAT):
        raise AssertionError("decode no longer reads what the converter reads")
    with progress.scenario("8 hot path", steps=3):
        progress.step("decode")
        before = _per_call(lambda: decode_with_converter(HEARTBEAT), repeat)
        after = _per_call(lambda: decode(HEARTBEAT, MEMBER_REQUESTS), repeat)
        parsed = _per_call(lambda: json.loads(HEARTBEAT), repeat)
        result.rows.append(["decode a heartbeat", before, after, before - after,
                            f"built directly; json.loads alone (the floor) {parsed:.1f} us"])
        progress.step("encode")
        before = _per_call(lambda: _encode_with_converter(response), repeat)
        after = _per_call(lambda: encode(response), repeat)
        result.rows.append(["encode the response", before, after, before - after,
                            "object built field by field"])
        progress.step("flush task")
        spawned = _trio_per_call(_spawn_each, repeat)
        awaited = _trio_per_call(_await_each, repeat)
        result.rows.append(["a task per flush (start_soon)", spawned, awaited, spawned - awaited,
                            "not the codec: start_soon (the server before) vs in place (now)"])
    result.data = {"repeat": repeat, "json_loads_us": parsed, "rows": result.rows}
    result.notes.append(f"best of 3 x {repeat:,} calls in one process, microseconds per heartbeat")
    return result
