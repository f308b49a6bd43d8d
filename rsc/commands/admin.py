"""`rsc admin`: the admin commands' parser (rsc/admin/args.py), run by rsc/admin/cli.py."""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from rsc.admin import args

    args.add_parser(subparsers, run=run)


def run(args: argparse.Namespace) -> int:
    from rsc.common.extras import require

    require("rich", extra="cli", feature="`rsc admin` (its tables)")
    from rsc.admin import cli

    return cli.run(args)
