"""`rsc`: the command-line dispatcher, the one `main()` of the package.

    rsc coordinator | produce | consume | admin | demo   (rsc --version)

The composition layer: one module per command (`rsc.commands.coordinator`,
`rsc.commands.admin`, `rsc.commands.demo`; `produce` and `consume` in `rsc.member.cli`),
each adding its parser; a command's runner is imported only when it is chosen.
"""

from __future__ import annotations

import argparse
import sys

from rsc import __version__


def build_parser() -> argparse.ArgumentParser:
    from rsc.commands import admin, coordinator, demo
    from rsc.member import cli as member_cli

    parser = argparse.ArgumentParser(prog="rsc", description="Redis Stream Coordinator")
    parser.add_argument("--version", action="version", version=f"rsc {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    coordinator.add_parser(commands)
    member_cli.add_produce_parser(commands)
    member_cli.add_consume_parser(commands)
    admin.add_parser(commands)
    demo.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse `argv` (default: sys.argv) and run the chosen subcommand; its exit code."""
    args = build_parser().parse_args(argv)
    from rsc.common.extras import MissingExtra

    try:
        return int(args.run(args) or 0)
    except MissingExtra as exc:  # a library-only install: say which extra to install
        print(f"rsc {args.command}: {exc}", file=sys.stderr)
        return 2
