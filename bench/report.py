"""Results of a bench run: per-scenario tables, targets with pass/miss, JSON and PNG output."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

console = Console(width=max(Console().width, 150))

PASS, MISS, INFO = "pass", "MISS", "info"


@attrs.define
class Target:
    """One target of the issue, with what this run measured."""

    name: str
    goal: str
    measured: str
    verdict: str  # PASS, MISS or INFO


@attrs.define
class ScenarioResult:
    name: str
    title: str
    columns: list[str] = attrs.field(factory=list)
    rows: list[list[Any]] = attrs.field(factory=list)
    targets: list[Target] = attrs.field(factory=list)
    notes: list[str] = attrs.field(factory=list)
    data: dict[str, Any] = attrs.field(factory=dict)
    plots: list[str] = attrs.field(factory=list)
    error: str | None = None

    def target(self, name: str, goal: str, measured: str, ok: bool | None) -> None:
        verdict = INFO if ok is None else (PASS if ok else MISS)
        self.targets.append(Target(name, goal, measured, verdict))


def check(value: float | None, ok: Callable[[float], bool]) -> bool | None:
    return None if value is None else ok(value)


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.{digits}f}" if abs(value) >= 1 else f"{value:.{digits + 2}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


class Progressor:
    """Rich progress: one line per scenario, its description updated step by step."""

    def __init__(self) -> None:
        self.progress = Progress(SpinnerColumn(), TextColumn("[bold]{task.fields[scenario]}"),
                                 BarColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                 console=console, transient=False)
        self.task: Any = None

    @contextlib.contextmanager
    def scenario(self, name: str, steps: int) -> Iterator[Progressor]:
        self.task = self.progress.add_task("starting", total=steps, scenario=name)
        try:
            yield self
        finally:
            self.progress.update(self.task, completed=steps, description="done")

    def step(self, description: str) -> None:
        self.progress.update(self.task, advance=1, description=description)

    def note(self, description: str) -> None:
        self.progress.update(self.task, description=description)

    def __enter__(self) -> Progressor:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()


def print_scenario(result: ScenarioResult) -> None:
    table = Table(title=f"{result.name}: {result.title}", title_justify="left")
    for column in result.columns:
        table.add_column(column, justify="right" if column not in ("run", "case", "what") else "left")
    for row in result.rows:
        table.add_row(*(fmt(value) for value in row))
    if result.rows:
        console.print(table)
    for note in result.notes:
        console.print(f"  [dim]{note}[/dim]")
    if result.error:
        console.print(f"  [red]{result.name} failed: {result.error}[/red]")


def summary_table(results: list[ScenarioResult]) -> Table:
    table = Table(title="Targets", title_justify="left")
    for column in ("scenario", "target", "goal", "measured", "verdict"):
        table.add_column(column)
    colors = {PASS: "green", MISS: "red", INFO: "cyan"}
    for result in results:
        if result.error and not result.targets:
            table.add_row(result.name, "(scenario)", "-", result.error[:60], "[red]ERROR[/red]")
        for target in result.targets:
            color = colors[target.verdict]
            table.add_row(result.name, target.name, target.goal, target.measured,
                          f"[{color}]{target.verdict}[/{color}]")
    return table


def markdown_summary(results: list[ScenarioResult], machine: dict[str, Any]) -> str:
    lines = [f"Measured {machine['date']} on {machine['description']}.", "",
             "| scenario | target | goal | measured | verdict |", "|---|---|---|---|---|"]
    for result in results:
        if result.error and not result.targets:
            lines.append(f"| {result.name} | (scenario) | - | error: {result.error[:80]} | ERROR |")
        for target in result.targets:
            lines.append(f"| {result.name} | {target.name} | {target.goal} | {target.measured} "
                         f"| {target.verdict} |")
    return "\n".join(lines) + "\n"


def machine_description() -> dict[str, Any]:
    cpu = platform.processor() or ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    with contextlib.suppress(OSError):
        load = Path("/proc/loadavg").read_text().split()[:3]
    return {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "description": f"{os.cpu_count()} cores ({cpu}), {memory_gb:.0f} GiB RAM, "
                       f"{platform.system()} {platform.release()}, Python {platform.python_version()}",
        "cpus": os.cpu_count(), "cpuModel": cpu, "memoryGb": round(memory_gb, 1),
        "python": platform.python_version(), "loadAverageAtStart": load,
    }


def write_results(out: Path, results: list[ScenarioResult], machine: dict[str, Any],
                  quick: bool) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    document = {"machine": machine, "quick": quick,
                "scenarios": [attrs.asdict(result) for result in results]}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = out / f"results-{stamp}.json"
    text = json.dumps(document, indent=2, default=str)
    path.write_text(text)
    (out / "latest.json").write_text(text)
    (out / "summary.md").write_text(markdown_summary(results, machine))
    return path


def pyplot() -> Any:
    """matplotlib's pyplot with a file-only backend, or None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt
