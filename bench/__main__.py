"""`python -m bench [--quick] [--only NAME ...] [--out DIR]`: run the benchmark scenarios.

Each scenario prints a table; a final table lists every target (docs/benchmarks.md)
with the measured value and pass/miss. Results go to DIR (default
bench/results/): results-<time>.json, latest.json, summary.md and PNG plots.
Every baseline is measured in the same run, because the machines are noisy.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from bench import (
    assignor_bench,
    cluster,
    consume_cli,
    dataplane,
    hosts,
    hotpath,
    isolation,
    latency,
    membership,
    min_replicas,
    prefixes,
    procs,
    rebalance,
    resharding,
    rolling,
    tls_cost,
)
from bench.report import (
    Progressor,
    ScenarioResult,
    console,
    machine_description,
    print_scenario,
    summary_table,
    write_results,
)
from rsc.common import gc_policy as gc_control

Scenario = Callable[[Progressor, bool, Path], ScenarioResult]


# set from the command line (--members, --wss, --gc, --soak-minutes): overrides of the membership sizes
OVERRIDES: dict[str, Any] = {}


def _membership(run: Callable[..., ScenarioResult]) -> Scenario:
    return lambda progress, quick, out: run(
        progress, attrs.evolve(membership.QUICK if quick else membership.FULL, **OVERRIDES), out)


SCENARIOS: dict[str, Scenario] = {
    "assignor": assignor_bench.run,
    "steady": _membership(membership.steady),
    "join-storm": _membership(membership.join_storm),
    "scale": _membership(membership.scale),
    "failure": _membership(membership.failure),
    "soak": _membership(membership.soak),
    "hotpath": hotpath.run,
    "dataplane": dataplane.run,
    "resharding": resharding.run,
    "rolling": rolling.run,
    "cluster": cluster.run,
    "tls": tls_cost.run,
    "hosts": hosts.run,
    "prefixes": prefixes.run,
    "replicas": min_replicas.run,
    "latency": latency.run,
    "rebalance": rebalance.run,
    "consume-cli": consume_cli.run,
    "isolation": isolation.run,
}


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="small sizes, under 2 minutes (CI smoke test)")
    parser.add_argument("--only", nargs="+", choices=list(SCENARIOS), metavar="NAME",
                        help=f"run only these scenarios: {', '.join(SCENARIOS)}")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results",
                        help="where to write JSON results and plots (default: bench/results/)")
    parser.add_argument("--profile-coordinator", action="store_true",
                        help="run each coordinator under cProfile; .prof files go to --out")
    parser.add_argument("--py-spy", type=Path, metavar="DIR",
                        help="steady: sample each coordinator's steady window with py-spy (if installed) "
                             "into DIR as collapsed stacks")
    parser.add_argument("--members", nargs="+", type=_positive, metavar="N",
                        help="steady: these member counts instead of the preset's")
    parser.add_argument("--wss", action="store_true",
                        help="steady: also run the coordinator over wss:// at each size (shipped GC "
                             "mode; a trustme certificate the load generator verifies)")
    parser.add_argument("--gc", nargs="+", choices=gc_control.MODES, metavar="MODE",
                        help="steady: GC modes to compare, the first one is the shipped one "
                             f"(default: {' '.join(membership.FULL.gc_modes)}); soak: its first one")
    parser.add_argument("--soak-minutes", type=float, metavar="MIN",
                        help=f"soak: minutes of churn (default {membership.FULL.soak_s / 60:.0f})")
    parser.add_argument("--soak-members", type=_positive, metavar="N",
                        help=f"soak: members (default {membership.FULL.soak_members:,})")
    parser.add_argument("--prefixes", nargs="+", type=_positive, metavar="N",
                        help=f"prefixes: these counts instead of the preset's "
                             f"({' '.join(f'{n:,}' for n in prefixes.FULL_SIZES)})")
    args = parser.parse_args(argv)
    if args.prefixes:
        prefixes.SIZES_OVERRIDE = tuple(args.prefixes)
    if args.py_spy is not None:
        args.py_spy.mkdir(parents=True, exist_ok=True)
        procs.PY_SPY_DIR = str(args.py_spy)
    if args.members:
        OVERRIDES["steady_members"] = tuple(args.members)
    if args.wss:
        OVERRIDES["steady_wss"] = True
    if args.gc:
        OVERRIDES["gc_modes"] = tuple(dict.fromkeys(args.gc))
    if args.soak_minutes is not None:
        if args.soak_minutes <= 0:
            parser.error("--soak-minutes must be positive")
        OVERRIDES["soak_s"] = args.soak_minutes * 60
    if args.soak_members:
        OVERRIDES["soak_members"] = args.soak_members
    args.out.mkdir(parents=True, exist_ok=True)
    if args.profile_coordinator:
        procs.PROFILE_DIR = str(args.out)
    machine = machine_description()
    console.print(f"[bold]bench[/bold] {'quick' if args.quick else 'full'} on {machine['description']}, "
                  f"load average {' '.join(machine.get('loadAverageAtStart', []))}")
    results: list[ScenarioResult] = []
    started = time.monotonic()
    with Progressor() as progress:
        for name in args.only or list(SCENARIOS):
            try:
                result = SCENARIOS[name](progress, args.quick, args.out)
            except Exception as exc:  # noqa: BLE001 - one failed scenario must not hide the others
                result = ScenarioResult(name, "failed", error=f"{type(exc).__name__}: {exc}")
                result.data["traceback"] = traceback.format_exc()
            results.append(result)
            progress.progress.console.print()
            print_scenario(result)
    machine["elapsedSeconds"] = round(time.monotonic() - started, 1)
    console.print(summary_table(results))
    path = write_results(args.out, results, machine, args.quick)
    console.print(f"results: {path} (also latest.json, summary.md); {machine['elapsedSeconds']:.0f} s")
    return 1 if any(result.error for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
