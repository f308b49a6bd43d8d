"""`rsc demo`: its parser; the demo itself (rsc/demo.py) is imported only when it runs."""

from __future__ import annotations

import argparse

from rsc.common.logs import add_logging_arguments


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = subparsers.add_parser("demo", help="run a coordinator, producer and members on an "
                                             "embedded Redis")
    demo.add_argument("--duration", type=float, default=None,
                      help="seconds to run before exiting (default: until Ctrl-C)")
    demo.add_argument("--console-port", type=int, default=0,
                      help="serve the web console on this port (default 0: a free one)")
    add_logging_arguments(demo, default_level="error")  # the view shows progress, not a wall of logs
    demo.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rsc.common.extras import require

    require("rich", extra="cli", feature="`rsc demo` (its live view)")
    from rsc import demo

    return demo.run(args)
