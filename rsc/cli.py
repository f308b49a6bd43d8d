"""`rsc`: the command-line dispatcher, the one `main()` of the package.

    rsc coordinator | produce | consume | admin | demo   (rsc --version)

The composition layer: each subcommand's arguments and runner live with the
code it drives (`rsc.coordinator_cli`, `rsc.member.cli`, `rsc.admin_args` and
`rsc.admin_cli`, `rsc.demo`); runners are imported only when chosen.
"""

from __future__ import annotations

import argparse

from rsc import __version__


def build_parser() -> argparse.ArgumentParser:
    from rsc import admin_args, coordinator_cli
    from rsc.member import cli as member_cli

    parser = argparse.ArgumentParser(prog="rsc", description="Redis Stream Coordinator")
    parser.add_argument("--version", action="version", version=f"rsc {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    coordinator_cli.add_parser(commands)
    member_cli.add_produce_parser(commands)
    member_cli.add_consume_parser(commands)
    admin_args.add_parser(commands, run=_run_admin)
    demo = commands.add_parser("demo", help="run a coordinator, producer and members on an embedded Redis")
    demo.add_argument("--duration", type=float, default=None,
                      help="seconds to run before exiting (default: until Ctrl-C)")
    demo.add_argument("--console-port", type=int, default=0,
                      help="serve the web console on this port (default 0: a free one)")
    demo.set_defaults(run=_run_demo)
    return parser


def _run_admin(args: argparse.Namespace) -> int:
    from rsc import admin_cli

    return admin_cli.run(args)


def _run_demo(args: argparse.Namespace) -> int:
    from rsc import demo

    return demo.run(args)


def main(argv: list[str] | None = None) -> int:
    """Parse `argv` (default: sys.argv) and run the chosen subcommand; its exit code."""
    args = build_parser().parse_args(argv)
    return int(args.run(args) or 0)
