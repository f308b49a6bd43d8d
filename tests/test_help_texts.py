"""`--help` speaks to users: no protocol rule id (H1..H14, S1..S6, R1..R5, A1, G1..G3, T1..T3,
D1..D5) in the help of any command or subcommand; the rules are explained in docs/protocol.md.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

from rsc.cli import build_parser
from rsc.commands import coordinator as coordinator_cli

RULE_ID = re.compile(r"\b(?:H(?:1[0-4]|[1-9])|S[1-6]|R[1-5]|A1|G[1-3]|T[1-3]|D[1-5])\b")


def every_parser(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """`parser` and, depth first, every subcommand's parser under it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from every_parser(sub)


def help_texts() -> dict[str, str]:
    """`prog` -> the full `--help` text of every command of `rsc` (and of `python -m
    rsc.commands.coordinator`, which builds its own parser)."""
    texts = {sub.prog: sub.format_help() for sub in every_parser(build_parser())}
    standalone = argparse.ArgumentParser(prog="rsc")
    coordinator_cli.add_parser(standalone.add_subparsers(dest="command", required=True))
    for sub in every_parser(standalone):
        texts.setdefault(sub.prog, sub.format_help())
    return texts


def test_every_command_has_help():
    texts = help_texts()
    for prog in ("rsc", "rsc coordinator", "rsc produce", "rsc consume", "rsc demo", "rsc admin",
                 "rsc admin list", "rsc admin set-retention", "rsc admin reset-offsets"):
        assert prog in texts, sorted(texts)
    assert len(texts) >= 14


def test_the_rule_id_pattern_finds_what_it_must():
    for text in ("delete a group (G1)", "replace retention (T1..T3)", "see D4.", "H14 revoke",
                 "A1 caps", "S6"):
        assert RULE_ID.search(text), text
    for text in ("H15", "HTTP 503", "T4", "D1x", "v1:0", "UTF-8", "crc32"):
        assert not RULE_ID.search(text), text


def test_no_help_text_names_a_protocol_rule_id():
    offenders = {prog: sorted(set(RULE_ID.findall(text))) for prog, text in help_texts().items()
                 if RULE_ID.search(text)}
    assert offenders == {}


def test_the_dispatcher_summaries_are_the_commands_own():
    """`rsc --help` built without importing the commands (COMMANDS' summaries) reads as the
    one built from every command's parser, and so does each command's help when chosen."""
    from rsc.cli import COMMANDS

    full = build_parser()
    assert build_parser(only="").format_help() == full.format_help()
    full_texts = {sub.prog: sub.format_help() for sub in every_parser(full)}
    for name in COMMANDS:
        chosen = {sub.prog: sub.format_help() for sub in every_parser(build_parser(only=name))
                  if sub.prog.startswith(f"rsc {name}")}
        assert chosen == {prog: text for prog, text in full_texts.items()
                          if prog.startswith(f"rsc {name}")}, name


def test_the_chosen_command_is_the_first_word_that_is_not_an_option():
    from rsc.cli import chosen_command

    assert chosen_command(["consume", "p", "g"]) == "consume"
    assert chosen_command(["--help", "admin", "--url", "ws://h:1", "list"]) == "admin"
    assert chosen_command(["--version"]) is None
    assert chosen_command([]) is None
    assert chosen_command(["bogus", "consume"]) is None
    assert chosen_command(["--", "consume"]) is None


def test_version_and_top_level_help_import_no_command_module():
    """`rsc --version` answers without importing any command (nor redis-py nor trio)."""
    import subprocess
    import sys

    probe = ("import sys\nfrom rsc.cli import main\n"
             "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
             "print(sorted(m for m in sys.modules if m.startswith(('rsc.commands.', 'redis', "
             "'trio', 'rsc.member', 'rsc.actors'))))\n")
    for argv in (["--version"], ["--help"]):
        done = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True,
                              text=True, timeout=60, check=True)
        assert done.stdout.strip().splitlines()[-1] == "[]", (argv, done.stdout)
