"""`python -m bench.dataplane_rounds [--rounds N] [--before DIR]`: the data-plane rows, alternated.

On a shared, loaded machine one `python -m bench --only dataplane` run decides
nothing: the plain side and the members run one after the other, and the load
changes in between. This runs the two no-op rows (1 shard x 1 member, 8 shards
x 4 members, the scenario's sizes) N times (default 5), each side in a fresh
process, alternated round by round: plain redis-py, then (with `--before DIR`,
another checkout of this repository, e.g. `git worktree add --detach DIR main`)
the members of that checkout, then the members of this one. Prints one JSON
line per run, then per side the best and median msg/s with their ratios to
plain's best and median, and the CPU microseconds per message (min and median).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
ROWS = (("single", 1, 1, "single_messages"), ("fanout", 8, 4, "fanout_messages"))


def one_run(side: str, index: int) -> dict[str, Any]:
    """One side's two rows in this process (`side`: plain or members)."""
    from bench import dataplane
    from bench.procs import Redis, start_coordinator

    redis_server = Redis()
    coordinator = None
    figures: dict[str, Any] = {"side": side}
    try:
        coordinator = start_coordinator(redis_server.url, heartbeat_interval_ms=1000,
                                        lease_ttl_ms=10000)
        for name, shards, members, size in ROWS:
            messages = getattr(dataplane.FULL, size)
            if side == "plain":
                result = dataplane.baseline(redis_server.url, f"{name}{index}", shards, members,
                                            messages)
            else:
                result = dataplane.member_run(coordinator.url, redis_server.url, f"{name}{index}",
                                              shards, members, 8, messages)
            figures[name] = result["perSecond"]
            figures[name + "CpuUs"] = 1e6 * result["cpuSeconds"] / messages
    finally:
        if coordinator is not None:
            coordinator.stop()
        redis_server.stop()
    figures["load"] = os.getloadavg()[0]
    return figures


def _spawn(side: str, label: str, checkout: Path, index: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    # this file run by path: `bench` and `rsc` come from the checkout (PYTHONPATH), which need
    # not have this module
    done = subprocess.run([sys.executable, __file__, "--one", side, str(index)],
                          cwd=checkout, env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{label} run {index} failed: {done.stderr.strip()[-2000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    figures["side"] = label
    return figures


def summary(runs: list[dict[str, Any]]) -> list[str]:
    """Per side and row: best and median msg/s, their ratios to plain's, CPU us per message."""
    lines = []
    by_side: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        by_side.setdefault(run["side"], []).append(run)
    plain = by_side.get("plain", [])
    for name, *_ in ROWS:
        for side, side_runs in by_side.items():
            rates = [run[name] for run in side_runs]
            cpu = [run[name + "CpuUs"] for run in side_runs]
            line = (f"{name:7} {side:7} best {max(rates):9,.0f} median {statistics.median(rates):9,.0f} "
                    f"msg/s; CPU us/msg min {min(cpu):.2f} median {statistics.median(cpu):.2f}")
            if plain and side != "plain":
                plain_rates = [run[name] for run in plain]
                line += (f"; vs plain best {max(rates) / max(plain_rates):.2f}x, median "
                         f"{statistics.median(rates) / statistics.median(plain_rates):.2f}x")
            lines.append(line)
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dataplane_rounds", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", type=Path, default=None,
                        help="another checkout whose members run too (the 'before' of an A/B)")
    parser.add_argument("--one", nargs=2, metavar=("SIDE", "INDEX"), help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.one:
        print(json.dumps(one_run(options.one[0], int(options.one[1]))), flush=True)
        return 0
    if options.rounds < 1:
        parser.error(f"--rounds must be 1 or more, got {options.rounds}")
    if options.before is not None and not (options.before / "bench").is_dir():
        parser.error(f"--before {options.before}: no bench/ there (a checkout of this repository?)")
    sides = [("plain", "plain", HERE)]
    if options.before is not None:
        sides.append(("members", "before", options.before.resolve()))
    sides.append(("members", "members", HERE))
    runs = []
    for index in range(options.rounds):
        for side, label, checkout in sides:
            runs.append(_spawn(side, label, checkout, index))
            print(json.dumps(runs[-1]), flush=True)
    print("\n".join(summary(runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
