"""`python -m bench.tables RESULTS.json [--profile STACKS.txt]`: a run's tables as Markdown (for the README).

Reads a results file written by `python -m bench` and prints the rows the
README shows: per size and GC mode, the coordinator (and over wss:// with
`--wss`) and the bare server side by side, with the GC figures of the steady window; then the soak line. With
`--profile`, also the top functions of a py-spy sample (`--py-spy DIR` of
the bench writes them), by own time and including callees.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path
from typing import Any


def _number(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _pauses(gc: dict[str, Any]) -> str:
    return " / ".join(_number(ms, 1) for ms in gc["maxPauseMs"])


def steady_markdown(scenario: dict[str, Any]) -> str:
    lines = ["| run | GC | members | p50 ms | p99 ms | server p99 ms | served hb/s | server cores "
             "| RSS MB | GC/min "
             "| GC s (CPU s) in window | GC % | max pause ms g0 / g1 / g2 | full GCs | saturated rps/core "
             "| coordinator / bare per core |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for size in sorted(scenario["data"], key=int):
        for mode, runs in scenario["data"][size].items():
            for label, key in (("coordinator", "coordinator"), ("coordinator wss://", "wss"),
                               ("bare websocket", "bare")):
                if key not in runs:
                    continue  # wss:// only with --wss
                run = runs[key]
                window, gc = run["window"], run["gc"]["server"]
                ratio = run.get("perCoreRatio") if key != "bare" else 1.0
                lines.append(
                    f"| {label} | {mode} | {int(size):,} | {_number(window['p50Ms'], 1)} "
                    f"| {_number(window['p99Ms'], 1)} | {_number(window.get('serverP99Ms'), 1)} "
                    f"| {_number(window['count'] / gc['seconds'])} "
                    f"| {_number(run['cpu']['server']['cpuCores'], 2)} "
                    f"| {_number(run['cpu']['server']['peakRssMb'])} | {_number(gc['collectionsPerMinute'])} "
                    f"| {gc['gcSeconds']:.2f} ({gc['gcCpuSeconds']:.2f}) | {100 * gc['gcShare']:.1f} "
                    f"| {_pauses(gc)} | {gc['fullCollections']} | {_number(run['perCore'])} "
                    f"| {_number(ratio, 2)} |")
    return "\n".join(lines)


def soak_markdown(scenario: dict[str, Any]) -> str:
    data = scenario["data"]
    gc, window = data["gc"], data["window"]
    row = dict(zip(scenario["columns"], scenario["rows"][0], strict=True))
    return "\n".join([
        "| GC | members | minutes | left / joined | RSS start -> end (peak) MB | GC/min | full GCs "
        "| GC s (CPU s) | max pause ms g0 / g1 / g2 | p50 / p99 ms | expired |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        f"| {row['GC']} | {row['members']:,} | {row['minutes']:.1f} | {row['left']:,} / {row['joined']:,} "
        f"| {data['rssStartMb']:.0f} -> {data['rssEndMb']:.0f} ({data['cpu']['peakRssMb']:.0f}) "
        f"| {gc['collectionsPerMinute']:.1f} | {gc['fullCollections']} "
        f"| {gc['gcSeconds']:.2f} ({gc['gcCpuSeconds']:.2f}) | {_pauses(gc)} "
        f"| {_number(window['p50Ms'], 1)} / {_number(window['p99Ms'], 1)} | {window['expiredTotal']} |"])


def profile_markdown(path: Path, top: int = 15) -> str:
    """Top functions of py-spy collapsed stacks ("frame;frame;... count" per line), in % of samples."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";")]
        total += int(count)
        own[frames[-1]] += int(count)
        for frame in set(frames):
            inclusive[frame] += int(count)
    if not total:
        return f"{path}: no samples"
    lines = [f"{path.name}: {total:,} samples", "", "| own % | function | | incl. % | function |",
             "|---|---|---|---|---|"]
    branches = [(frame, count) for frame, count in inclusive.most_common()
                if count < 0.75 * total][:top]  # the trunk (main, trio.run) says nothing
    for (own_frame, own_count), (frame, samples) in zip(own.most_common(top), branches, strict=False):
        lines.append(f"| {100 * own_count / total:.1f} | {own_frame} "
                     f"| | {100 * samples / total:.1f} | {frame} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tables", description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a results-*.json or latest.json of python -m bench")
    parser.add_argument("--profile", type=Path, nargs="*", default=[], metavar="STACKS",
                        help="py-spy collapsed stacks to summarize too")
    args = parser.parse_args(argv)
    try:
        document = json.loads(args.results.read_text())
    except (OSError, ValueError) as exc:
        parser.error(f"cannot read {args.results}: {exc}")
    printed = False
    for scenario in document["scenarios"]:
        if scenario["name"] == "steady" and scenario["data"]:
            print(steady_markdown(scenario), end="\n\n")
            printed = True
        if scenario["name"] == "soak" and scenario["rows"]:
            print(soak_markdown(scenario), end="\n\n")
            printed = True
    for stacks in args.profile:
        print(profile_markdown(stacks), end="\n\n")
        printed = True
    if not printed:
        print(f"{args.results}: no steady or soak results in it", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
