"""Launch `rsc coordinator` for the bench, with the open-files limit raised first.

Equivalent to `python -m rsc coordinator ...`, except that it first lifts the
soft open-files limit to the hard one so that 10,000 member websockets fit,
and reports its GC figures and its request latency histogram (actors/ops/latency.py)
on SIGUSR1 (bench/gcstats.py). The GC policy is
the coordinator's own (`RSC_GC`, applied by the app).
"""

from __future__ import annotations

import argparse
import sys

from bench.gcstats import install_signal_reporter, report
from bench.loadgen import raise_fd_limit
from rsc.commands import coordinator as cli
from rsc.common import gc_policy as gc_control


def main(argv: list[str] | None = None) -> int:
    raise_fd_limit()
    policy = gc_control.install()
    install_signal_reporter(lambda: report(gc_control.recorder.snapshot(reset_max=True), policy))
    parser = argparse.ArgumentParser(prog="bench.coordinator")
    cli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["coordinator", *(sys.argv[1:] if argv is None else argv)])
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
