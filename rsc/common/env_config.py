"""Every configuration flag of every tool from the environment: one mechanism for all parsers.

`--foo-bar` can also come from `RSC_FOO_BAR` (docs/protocol.md, Command line), except where a
name was documented before (`RSC_COORDINATOR_URL` for `--coordinator` and `--url`). Not from
the environment: actions (`--help`, `--version`, subcommand choices, `store_const` flags such
as `--to-earliest`), positional arguments, flags marked with `own_argument(action)` (`--peek`)
and every flag of a parser marked with `command_arguments(parser)` (an admin command's own
flags, `remove-member --instance-id`).

Rules: a flag given on the command line wins over its variable; an empty variable is unset;
an on/off flag takes `1/0`, `true/false`, `yes/no`, `on/off`; a value that does not parse is an
`EnvironmentValueError` whose text is one line naming the variable.

`parse_args(parser, argv, environ)` is the one entry point the tools use: argparse parses
`argv` (a second parse, with a marker for each default, tells which flags were given), then each
configuration flag of the chosen parsers that was not given takes its
variable's value, converted by the flag's own `type` and checked against its `choices`. A bad
variable prints `rsc: <line>` on stderr (a log line in the format asked for) and exits with
argparse's usage code, 2; a parser marked with `own_usage_errors` (`rsc admin`) reports it
through its own `error()` instead. The
namespace's `from_environment` maps each dest filled this way to its variable's name.

The rest is pure (no I/O): `variable_name`, `is_configuration`, `convert`, `configuration_flags`,
`environment_values`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import NamedTuple

PREFIX = "RSC_"
USAGE_EXIT = 2  # argparse's exit code for a usage error
FROM_ENVIRONMENT = "from_environment"  # the namespace attribute: dest -> variable

# names documented before the rule existed, kept (docs/protocol.md, Command line)
DOCUMENTED_NAMES = {"--coordinator": "RSC_COORDINATOR_URL", "--url": "RSC_COORDINATOR_URL"}

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")

_OWN = "rsc_own_argument"
_COMMAND = "rsc_command_arguments"
_OWN_ERRORS = "rsc_own_usage_errors"
_UNSET = object()


class EnvironmentValueError(ValueError):
    """A variable whose value does not parse; str() is one line naming the variable."""

    def __init__(self, variable: str, text: str, problem: str) -> None:
        super().__init__(f"{variable}={text!r}: {problem}")
        self.variable = variable


class Flag(NamedTuple):
    """A configuration flag: its option string, variable, dest and argparse action."""

    option: str
    variable: str
    action: argparse.Action


def own_argument(action: argparse.Action) -> argparse.Action:
    """Mark `action` (what `add_argument` returned) as an action, never read from the environment."""
    setattr(action, _OWN, True)
    return action


def command_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Mark every flag of `parser` as the command's own argument, never read from the environment."""
    setattr(parser, _COMMAND, True)
    return parser


def _long_option(action: argparse.Action) -> str | None:
    return next((option for option in action.option_strings if option.startswith("--")), None)


def variable_name(option: str) -> str:
    """`--lease-ttl-ms` -> `RSC_LEASE_TTL_MS` (or the documented name, `RSC_COORDINATOR_URL`)."""
    if option in DOCUMENTED_NAMES:
        return DOCUMENTED_NAMES[option]
    return PREFIX + option.lstrip("-").upper().replace("-", "_")


def is_configuration(action: argparse.Action) -> bool:
    """Whether `action` is a configuration flag (see the module doc for what is not)."""
    if getattr(action, _OWN, False) or _long_option(action) is None:
        return False
    if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
        return True
    return type(action) is argparse._StoreAction and action.nargs in (None, "?")


def configuration_flags(parser: argparse.ArgumentParser) -> list[Flag]:
    """The configuration flags of `parser` itself (not of its subcommands), in declaration order."""
    if getattr(parser, _COMMAND, False):
        return []
    flags = []
    for action in parser._actions:
        option = _long_option(action)
        if option is not None and is_configuration(action):
            flags.append(Flag(option, variable_name(option), action))
    return flags


def _subparsers(parser: argparse.ArgumentParser
                ) -> Iterator[argparse._SubParsersAction[argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield action


def all_parsers(parser: argparse.ArgumentParser, prog: str = "rsc"
                ) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(`rsc admin watch`-style name, parser) of `parser` and every subcommand below it."""
    yield prog, parser
    for action in _subparsers(parser):
        for name, sub in action.choices.items():
            yield from all_parsers(sub, f"{prog} {name}")


def _parse_switch(text: str) -> bool:
    word = text.lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError(f"expected one of {'/'.join(TRUE_WORDS)} or {'/'.join(FALSE_WORDS)}")


def convert(flag: Flag, text: str) -> object:
    """The value `text` (from `flag.variable`) gives `flag`'s dest; EnvironmentValueError if it
    does not parse. An on/off flag's "off" is its default (a store_false flag's True)."""
    action = flag.action
    if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
        try:
            on = _parse_switch(text)
        except ValueError as exc:
            raise EnvironmentValueError(flag.variable, text, str(exc)) from None
        return action.const if on else action.default
    convert_text = action.type if callable(action.type) else None
    try:
        value = convert_text(text) if convert_text is not None else text
    except argparse.ArgumentTypeError as exc:
        raise EnvironmentValueError(flag.variable, text, str(exc)) from None
    except (TypeError, ValueError):
        kind = getattr(convert_text, "__name__", "")
        what = f"not a valid {kind} value" if kind in ("int", "float") else "not a valid value"
        raise EnvironmentValueError(flag.variable, text, f"{what} for {flag.option}") from None
    if action.choices is not None and value not in action.choices:
        choices = ", ".join(map(str, action.choices))
        raise EnvironmentValueError(flag.variable, text, f"{flag.option} takes one of {choices}")
    return value


def environment_values(flags: Sequence[Flag], given: set[str], environ: Mapping[str, str]
                       ) -> dict[str, tuple[object, str]]:
    """dest -> (value, variable) for each flag whose dest is not in `given` (set on the command
    line) and whose variable is set and not empty; the first bad variable raises."""
    values: dict[str, tuple[object, str]] = {}
    for flag in flags:
        dest = flag.action.dest
        if dest in given or dest in values:
            continue
        text = environ.get(flag.variable, "").strip()
        if text:
            values[dest] = (convert(flag, text), flag.variable)
    return values


def own_usage_errors(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Mark `parser` as one whose `error()` prints one line and exits (`rsc admin`): a bad
    variable of its flags goes through it, with its exit code."""
    setattr(parser, _OWN_ERRORS, True)
    return parser


def _error_parser(chosen: Sequence[argparse.ArgumentParser]) -> argparse.ArgumentParser | None:
    return next((parser for parser in reversed(chosen) if getattr(parser, _OWN_ERRORS, False)), None)


def _chosen_parsers(parser: argparse.ArgumentParser, namespace: argparse.Namespace
                    ) -> list[argparse.ArgumentParser]:
    """`parser` and the subcommand parsers `namespace` chose, top down."""
    chosen = [parser]
    for action in _subparsers(parser):
        name = getattr(namespace, action.dest, None) if action.dest != argparse.SUPPRESS else None
        if isinstance(name, str) and name in action.choices:
            chosen.extend(_chosen_parsers(action.choices[name], namespace))
    return chosen


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None,
               environ: Mapping[str, str] | None = None) -> argparse.Namespace:
    """`parser.parse_args(argv)`, then the environment for each configuration flag not given."""
    environ = os.environ if environ is None else environ
    flags = [flag for _name, sub in all_parsers(parser) for flag in configuration_flags(sub)]
    namespace = parser.parse_args(argv)  # usage errors, --help and --version as ever
    saved = {id(flag.action): flag.action.default for flag in flags}
    for flag in flags:  # parsed again: a flag still holding the marker was not given
        flag.action.default = _UNSET
    try:
        marked = parser.parse_args(argv)
    finally:
        for flag in flags:
            flag.action.default = saved[id(flag.action)]
    chosen = [flag for sub in _chosen_parsers(parser, namespace) for flag in configuration_flags(sub)]
    given = {flag.action.dest for flag in chosen if getattr(marked, flag.action.dest, None) is not _UNSET}
    try:
        values = environment_values(chosen, given, environ)
    except EnvironmentValueError as exc:
        own = _error_parser(_chosen_parsers(parser, namespace))
        if own is not None:
            own.error(str(exc))
        from rsc.common.log_lines import plain_line, requested_format

        words = sys.argv[1:] if argv is None else argv
        print(plain_line(requested_format(words, environ), "ERROR", f"{parser.prog}: {exc}"),
              file=sys.stderr, flush=True)
        sys.exit(USAGE_EXIT)
    sources: dict[str, str] = {}
    for dest, (value, variable) in values.items():
        setattr(namespace, dest, value)
        sources[dest] = variable
    setattr(namespace, FROM_ENVIRONMENT, sources)
    return namespace


class Variable(NamedTuple):
    """A variable that is not a flag's: its name, who reads it, what it means, its default."""

    name: str
    read_by: str
    meaning: str
    default: str


OTHER_VARIABLES = (
    Variable("RSC_REDIS_PASSWORD", "every tool and API that takes a Redis URL",
             "the Redis password when the URL has none (K7); the URL's wins", "none"),
    Variable("RSC_SENTINEL_PASSWORD", "the same, for a `redis+sentinel://` URL",
             "the sentinels' password when the query has no `sentinel_password=` (K1)", "none"),
    Variable("RSC_REDIS_CA_FILE", "the same, for a `rediss://` URL",
             "the CA file when the URL's query names none", "none"),
    Variable("RSC_GC", "`rsc coordinator`, `rsc consume`",
             "`tuned` or `default` (Python's own garbage collector settings)", "`tuned`"),
    Variable("POD_IP", "members", "the first part of generated memberIds",
             "the host's primary address"),
    Variable("RSC_TEST_SERVER", "the test suite", "which redis-server binary the tests start", ""),
    Variable("RSC_FAULTS_OUT", "the test suite",
             "append one JSON row per outage scenario to this file", ""),
    Variable("RSC_MEMBER_TRACE", "the test suite", "a member process writes its steps to this path", ""),
    Variable("RSC_MEMBER_FAULT", "the test suite", "`no-rejoin`: a fenced member never rejoins", ""),
)
"""Variables read directly, not through a flag (listed in docs/reference/configuration.md)."""
