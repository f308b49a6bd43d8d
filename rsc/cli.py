"""`rsc`: the command-line dispatcher.

The only place (with the demo) that composes the coordinator (`actors`) and
the data plane (`member`); each subcommand lives with the code it drives.
"""

from __future__ import annotations

import argparse
import sys

from rsc import __version__


def build_parser() -> argparse.ArgumentParser:
    from rsc import admin_cli, coordinator_cli
    from rsc.member import cli as member_cli

    parser = argparse.ArgumentParser(prog="rsc", description="Redis Stream Coordinator")
    parser.add_argument("--version", action="version", version=f"rsc {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    coordinator_cli.add_parser(commands)
    member_cli.add_produce_parser(commands)
    member_cli.add_consume_parser(commands)
    admin_cli.add_parser(commands)
    demo = commands.add_parser("demo", help="run a coordinator, producer and members on an embedded Redis")
    demo.add_argument("--duration", type=float, default=None,
                      help="seconds to run before exiting (default: until Ctrl-C)")
    demo.set_defaults(run=_run_demo)
    return parser


def _run_demo(args: argparse.Namespace) -> int:
    from rsc import demo

    return demo.run(args)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
