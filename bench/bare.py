"""The baseline: a bare trio-websocket JSON request/response server (no coordinator logic).

`python -m bench.bare --port 0` prints `listening on ws://H:P` like the
coordinator does. Each text frame is parsed as JSON and answered with a
heartbeatResponse-shaped object of the same size the coordinator would send
(two assigned shard ids), so the bench can compare like with like: what
trio-websocket + json cost on their own, against the coordinator's whole path.
For a fair comparison it runs the coordinator's GC policy (`RSC_GC`, the same
freeze after startup and collection on a 1 s tick) and reports its GC figures
on SIGUSR1 like the coordinator does.
"""

from __future__ import annotations

import argparse
import json
import signal
import time

import trio
from trio_websocket import ConnectionClosed, WebSocketRequest, serve_websocket

from bench.gcstats import install_signal_reporter, report
from bench.loadgen import raise_fd_limit
from rsc.actors.ops import latency
from rsc.common import gc_policy as gc_control

TICK_S = 1.0  # the coordinator's default tick


def response_for(request: dict, prefix: str = "bench") -> dict:
    return {
        "type": "heartbeatResponse", "requestId": request.get("requestId"), "status": "OK",
        "memberId": request.get("memberId"), "memberEpoch": max(1, request.get("memberEpoch") or 1),
        "groupEpoch": 1, "assignmentEpoch": 1, "heartbeatIntervalMs": 3000, "leaseTtlMs": 30000,
        "maxConcurrency": 4, "routing": {"version": 1, "shardCount": 2000},
        "assignment": {"assignedShards": [f"{prefix}:v1:1000", f"{prefix}:v1:1001"],
                       "pendingShards": []},
        "error": None,
    }


async def handle(request: WebSocketRequest) -> None:
    connection = await request.accept()
    while True:
        try:
            text = await connection.get_message()
        except ConnectionClosed:
            return
        received = time.perf_counter()
        message = json.loads(text)
        try:
            await connection.send_message(json.dumps(response_for(message), separators=(",", ":")))
        except ConnectionClosed:
            return
        latency.requests.observe(time.perf_counter() - received)  # as the coordinator records it


async def main_async(host: str, port: int) -> None:
    async with trio.open_nursery() as nursery:
        listener = await nursery.start(lambda task_status: serve_websocket(
            handle, host, port, None, message_queue_size=4, task_status=task_status))
        nursery.start_soon(_tick)
        gc_control.freeze_after_startup()
        print(f"listening on ws://{host}:{listener.port}", flush=True)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break


async def _tick() -> None:
    while True:
        await trio.sleep(TICK_S)
        gc_control.on_tick()


def main() -> None:
    parser = argparse.ArgumentParser(description="bare websocket JSON server (bench baseline)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    raise_fd_limit()
    policy = gc_control.install()
    install_signal_reporter(lambda: report(gc_control.recorder.snapshot(reset_max=True), policy))
    trio.run(main_async, args.host, args.port)


if __name__ == "__main__":
    main()
