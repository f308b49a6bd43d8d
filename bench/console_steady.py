"""`python -m bench.console_steady [ROUNDS]`: the steady scenario with and without the web console.

Runs `python -m bench --quick --only steady`'s scenario (GC tuned, 200 members)
ROUNDS times (default 2) each way, interleaved in one process: once as shipped,
once with `--console-port 0` on the coordinator (the console is checked to
answer `/`, then nobody connects during the window). Prints one line per run
and the medians; the console must add nothing to the heartbeat path while no
page is open.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import attrs

from bench import membership, procs
from bench.report import Progressor

_with_console = False
_Server = procs.Server


class _ServerMaybeWithConsole(_Server):
    def __init__(self, argv: list[str], timeout: float = 30, gc_mode: str | None = None) -> None:
        console = _with_console and "bench.coordinator" in argv
        super().__init__([*argv, "--console-port", "0"] if console else argv, timeout, gc_mode)
        if console:
            line = self.readline(20)
            if not line.startswith("console at "):
                raise RuntimeError(f"expected the console's URL, got {line!r}")
            with urllib.request.urlopen(line.split()[-1], timeout=5) as page:
                if page.status != 200:
                    raise RuntimeError(f"the console answered {page.status}")


def main(rounds: int) -> None:
    global _with_console
    procs.Server = _ServerMaybeWithConsole  # type: ignore[misc]
    sizes = attrs.evolve(membership.QUICK, gc_modes=("tuned",))
    runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    with Progressor() as progress, tempfile.TemporaryDirectory() as out:
        for _ in range(rounds):
            for console in (False, True):
                _with_console = console
                result = membership.steady(progress, sizes, Path(out))
                if result.error:
                    raise RuntimeError(result.error)
                [by_mode] = result.data.values()
                runs[console].append(by_mode["tuned"]["coordinator"])
    for console, label in ((False, "without console"), (True, "with --console-port")):
        for run in runs[console]:
            print(f"{label:20} p50 {run['window']['p50Ms']:.2f} ms  p99 {run['window']['p99Ms']:.2f} ms  "
                  f"saturated {run['saturated']['perSecond']:,.0f} rps  {run['perCore']:,.0f} rps/core")
        each = runs[console]
        print(f"{label:20} median p50 {statistics.median(r['window']['p50Ms'] for r in each):.2f} ms  "
              f"p99 {statistics.median(r['window']['p99Ms'] for r in each):.2f} ms  "
              f"rps/core {statistics.median(r['perCore'] for r in each):,.0f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
