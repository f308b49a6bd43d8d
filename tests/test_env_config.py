"""Every configuration flag from `RSC_<FLAG>` (rsc/common/env_config.py): pure, no process."""

from __future__ import annotations

import argparse

import pytest

from rsc.common import env_config
from rsc.common.env_config import (
    EnvironmentValueError,
    command_arguments,
    configuration_flags,
    convert,
    environment_values,
    own_argument,
    parse_args,
    variable_name,
)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def build() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rsc")
    parser.add_argument("--version", action="version", version="rsc 0")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve")
    serve.add_argument("--lease-ttl-ms", type=int, default=10000)
    serve.add_argument("--max-groups", type=_positive, default=5)
    serve.add_argument("--log-format", choices=("text", "json"), default="text")
    serve.add_argument("--redis-url", default=None)
    serve.add_argument("--no-push", dest="push", action="store_false")
    serve.add_argument("--events", action="store_true")
    own_argument(serve.add_argument("--peek", action="store_true"))
    serve.add_argument("--to-earliest", dest="to", action="store_const", const="earliest")
    serve.add_argument("prefix", nargs="?")
    client = commands.add_parser("client")
    client.add_argument("--url", default=None)
    client.add_argument("--coordinator", default=None)
    client.add_argument("--timeout", type=float, default=5.0)
    inner = client.add_subparsers(dest="client_command", required=True)
    remove = command_arguments(inner.add_parser("remove"))
    remove.add_argument("--instance-id", default=None)
    return parser


def _sub(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    return dict(env_config.all_parsers(parser))[name]


def test_a_flag_is_named_rsc_plus_its_name_and_documented_names_are_kept():
    assert variable_name("--lease-ttl-ms") == "RSC_LEASE_TTL_MS"
    assert variable_name("--log-format") == "RSC_LOG_FORMAT"
    assert variable_name("--instance-id") == "RSC_INSTANCE_ID"
    assert variable_name("--tls-cert") == "RSC_TLS_CERT"
    assert variable_name("--coordinator") == "RSC_COORDINATOR_URL"
    assert variable_name("--url") == "RSC_COORDINATOR_URL"


def test_actions_positionals_and_a_commands_own_flags_are_not_configuration():
    parser = build()
    top = [flag.option for flag in configuration_flags(parser)]
    assert top == []  # --help and --version are actions
    serve = _sub(parser, "rsc serve")
    options = [flag.option for flag in configuration_flags(serve)]
    assert options == ["--lease-ttl-ms", "--max-groups", "--log-format", "--redis-url", "--no-push",
                       "--events"]
    remove = _sub(parser, "rsc client remove")
    assert configuration_flags(remove) == []


def _flag(parser: argparse.ArgumentParser, command: str, option: str) -> env_config.Flag:
    return next(flag for flag in configuration_flags(_sub(parser, command)) if flag.option == option)


def test_values_convert_with_the_flags_own_type_and_choices():
    parser = build()
    assert convert(_flag(parser, "rsc serve", "--lease-ttl-ms"), "2500") == 2500
    assert convert(_flag(parser, "rsc serve", "--log-format"), "json") == "json"
    assert convert(_flag(parser, "rsc serve", "--redis-url"), "redis://h:1/0") == "redis://h:1/0"
    for word, pushed in (("1", False), ("true", False), ("YES", False), ("0", True), ("no", True)):
        assert convert(_flag(parser, "rsc serve", "--no-push"), word) is pushed
    assert convert(_flag(parser, "rsc serve", "--events"), "on") is True
    assert convert(_flag(parser, "rsc serve", "--events"), "off") is False


@pytest.mark.parametrize("option, text, says", [
    ("--lease-ttl-ms", "10s", "RSC_LEASE_TTL_MS='10s': not a valid int value for --lease-ttl-ms"),
    ("--max-groups", "0", "RSC_MAX_GROUPS='0': must be >= 1, got 0"),
    ("--log-format", "yaml", "RSC_LOG_FORMAT='yaml': --log-format takes one of text, json"),
    ("--events", "maybe", "RSC_EVENTS='maybe': expected one of"),
])
def test_a_value_that_does_not_parse_is_one_line_naming_the_variable(option, text, says):
    with pytest.raises(EnvironmentValueError) as caught:
        convert(_flag(build(), "rsc serve", option), text)
    assert str(caught.value).startswith(says)
    assert "\n" not in str(caught.value)
    assert caught.value.variable.startswith("RSC_")


def test_a_given_flag_wins_and_an_empty_variable_is_unset():
    parser = build()
    flags = configuration_flags(_sub(parser, "rsc serve"))
    environ = {"RSC_LEASE_TTL_MS": "2000", "RSC_MAX_GROUPS": "", "RSC_REDIS_URL": "  ",
               "RSC_EVENTS": "1"}
    values = environment_values(flags, {"events"}, environ)
    assert values == {"lease_ttl_ms": (2000, "RSC_LEASE_TTL_MS")}


def test_parse_args_fills_what_the_command_line_left_out():
    environ = {"RSC_LEASE_TTL_MS": "2000", "RSC_LOG_FORMAT": "json", "RSC_NO_PUSH": "true",
               "RSC_PEEK": "1", "RSC_MAX_GROUPS": ""}
    args = parse_args(build(), ["serve", "--lease-ttl-ms", "300", "p"], environ)
    assert (args.lease_ttl_ms, args.log_format, args.push, args.peek, args.max_groups) == (
        300, "json", False, False, 5)
    assert args.from_environment == {"log_format": "RSC_LOG_FORMAT", "push": "RSC_NO_PUSH"}
    plain = parse_args(build(), ["serve"], {})
    assert (plain.lease_ttl_ms, plain.log_format, plain.push, plain.events, plain.redis_url) == (
        10000, "text", True, False, None)
    assert plain.from_environment == {}


def test_parse_args_reads_only_the_chosen_commands_variables():
    environ = {"RSC_COORDINATOR_URL": "ws://h:1", "RSC_TIMEOUT": "2.5", "RSC_INSTANCE_ID": "x",
               "RSC_LEASE_TTL_MS": "not a number"}  # serve's: not read by `client`
    args = parse_args(build(), ["client", "remove"], environ)
    assert (args.url, args.coordinator, args.timeout, args.instance_id) == (
        "ws://h:1", "ws://h:1", 2.5, None)
    assert args.from_environment["url"] == "RSC_COORDINATOR_URL"


def test_parse_args_leaves_the_parsers_defaults_as_they_were():
    parser = build()
    parse_args(parser, ["serve"], {"RSC_LEASE_TTL_MS": "2000"})
    assert _flag(parser, "rsc serve", "--lease-ttl-ms").action.default == 10000


def test_parse_args_exits_2_with_one_line_for_a_bad_variable(capsys):
    with pytest.raises(SystemExit) as caught:
        parse_args(build(), ["serve"], {"RSC_LEASE_TTL_MS": "soon"})
    assert caught.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "RSC_LEASE_TTL_MS='soon'" in err[0] and " ERROR " in err[0]


def test_every_configuration_flag_of_rsc_has_a_distinct_documented_kind_of_name():
    from rsc.cli import build_parser

    seen: dict[str, set[str]] = {}
    for _name, sub in env_config.all_parsers(build_parser()):
        for flag in configuration_flags(sub):
            assert flag.variable.startswith("RSC_") and flag.variable.isupper()
            seen.setdefault(flag.variable, set()).add(flag.action.dest)
    for variable in ("RSC_REDIS_URL", "RSC_TOKEN", "RSC_TLS_CERT", "RSC_TLS_KEY", "RSC_CA_FILE",
                     "RSC_COORDINATOR_URL", "RSC_LOG_FORMAT", "RSC_METRICS_PORT", "RSC_PORT",
                     "RSC_NO_EMBEDDED_REDIS", "RSC_ADMIN_TOKEN", "RSC_MEMBER_TOKEN",
                     "RSC_LEASE_TTL_MS"):
        assert variable in seen, variable
    assert "RSC_JSON" not in seen  # an admin command's own flag


def test_admin_reads_its_url_from_the_environment_and_says_so():
    from rsc.admin.args import coordinator_url
    from rsc.cli import build_parser

    args = parse_args(build_parser(), ["admin", "list"], {"RSC_COORDINATOR_URL": "ws://h:9"})
    assert coordinator_url(args, {}) == ("ws://h:9", "RSC_COORDINATOR_URL")
    given = parse_args(build_parser(), ["admin", "--url", "ws://g:1", "list"],
                       {"RSC_COORDINATOR_URL": "ws://h:9"})
    assert coordinator_url(given, {}) == ("ws://g:1", "--url")
