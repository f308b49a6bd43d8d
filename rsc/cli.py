"""`rsc`: the command-line dispatcher, the one `main()` of the package.

    rsc coordinator | produce | consume | admin | demo   (rsc --version)

The composition layer: one module per command (`rsc.commands.coordinator`,
`rsc.commands.produce`, `rsc.commands.consume` with its `--peek` in `rsc.commands.peek`,
`rsc.commands.admin`, `rsc.commands.demo`), each adding its parser. `main()` imports only
the chosen command's module (`rsc --version` and `rsc --help` import none: the commands'
one-line summaries are in COMMANDS), and a command's runner only when it runs. Every
configuration flag may come from its `RSC_*` variable (rsc/common/env_config.py).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from rsc import __version__
from rsc._versions import version_line

# name -> (its module, its summary in `rsc --help`); the summary is the module's own
# `help=` text, which tests/test_help_texts.py checks stays the same.
COMMANDS: dict[str, tuple[str, str]] = {
    "coordinator": ("rsc.commands.coordinator", "run the group coordinator"),
    "produce": ("rsc.commands.produce",
                "write stdin lines (key<TAB>value, or JSON {key, value} with valueBase64, "
                "keyBase64, headers) to a prefix"),
    "consume": ("rsc.commands.consume",
                "run members of a group, printing one JSON line per processed message"),
    "admin": ("rsc.commands.admin", "inspect and change groups on a coordinator"),
    "demo": ("rsc.commands.demo",
             "run a coordinator, producer and members on an embedded Redis"),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The `rsc` parser with every command's parser, or (`only`) with that command's alone
    and a bare entry (its summary, no arguments) for each other one."""
    parser = argparse.ArgumentParser(prog="rsc", description="Redis Stream Coordinator")
    parser.add_argument("--version", action="version", version=version_line(__version__))
    commands = parser.add_subparsers(dest="command", required=True)
    for name, (module, summary) in COMMANDS.items():
        if only is None or name == only:
            importlib.import_module(module).add_parser(commands)
        else:
            commands.add_parser(name, help=summary)
    return parser


def chosen_command(argv: Sequence[str]) -> str | None:
    """The command `argv` names (its first word that is not an option: `rsc`'s own options,
    --version and --help, take no value), or None when it names none of COMMANDS."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def main(argv: list[str] | None = None) -> int:
    """Parse `argv` (default: sys.argv) and run the chosen subcommand; its exit code."""
    from rsc.common.env_config import parse_args
    from rsc.common.extras import MissingExtra
    from rsc.common.wording import cli_words

    with cli_words():  # hints name flags (--token), not the library's parameters (token=)
        words = sys.argv[1:] if argv is None else argv
        args = parse_args(build_parser(only=chosen_command(words) or ""), argv)
        try:
            return int(args.run(args) or 0)
        except MissingExtra as exc:  # a library-only install: say which extra to install
            print(f"rsc {args.command}: {exc}", file=sys.stderr)
            return 2
