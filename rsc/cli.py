"""`rsc`: the command-line dispatcher, the one `main()` of the package.

    rsc coordinator | produce | consume | admin | demo   (rsc --version)

The composition layer: one module per command (`rsc.commands.coordinator`,
`rsc.commands.produce`, `rsc.commands.consume` with its `--peek` in `rsc.commands.peek`,
`rsc.commands.admin`, `rsc.commands.demo`), each adding its parser; a command's runner is
imported only when it is chosen. Every configuration flag may come from its `RSC_*`
variable (rsc/common/env_config.py).
"""

from __future__ import annotations

import argparse
import sys

from rsc import __version__
from rsc._versions import version_line


def build_parser() -> argparse.ArgumentParser:
    from rsc.commands import admin, consume, coordinator, demo, produce

    parser = argparse.ArgumentParser(prog="rsc", description="Redis Stream Coordinator")
    parser.add_argument("--version", action="version", version=version_line(__version__))
    commands = parser.add_subparsers(dest="command", required=True)
    coordinator.add_parser(commands)
    produce.add_parser(commands)
    consume.add_parser(commands)
    admin.add_parser(commands)
    demo.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse `argv` (default: sys.argv) and run the chosen subcommand; its exit code."""
    from rsc.common.env_config import parse_args
    from rsc.common.extras import MissingExtra
    from rsc.common.wording import cli_words

    with cli_words():  # hints name flags (--token), not the library's parameters (token=)
        args = parse_args(build_parser(), argv)
        try:
            return int(args.run(args) or 0)
        except MissingExtra as exc:  # a library-only install: say which extra to install
            print(f"rsc {args.command}: {exc}", file=sys.stderr)
            return 2
