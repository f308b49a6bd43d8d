"""The command line of `rsc admin` (docs/protocol.md "Command line"): arguments to requests.

    rsc admin [--url ws://H:P] [--token T] [--timeout S] COMMAND ... [--json]

    list | describe PREFIX GROUP [--shards] [--members N|all]
    | set-shards PREFIX [GROUP] N [--cutover ordered]
    | set-max-concurrency PREFIX GROUP N|none
    | remove-member PREFIX GROUP (MEMBER | --instance-id ID)
    | watch PREFIX GROUP | delete-group PREFIX GROUP
    | set-retention PREFIX (--acked|--none) [--max-length N] [--max-age DURATION]
      [--dead-letters GROUP]
    | reset-offsets PREFIX GROUP (--to-earliest|--to-latest|--to-datetime ISO8601)
    | format-version | set-format-version N | audit [--count N] [--before ID]
    | dead-letters PREFIX GROUP [--count N] [--after ID]
    | redrive PREFIX GROUP [--dry-run] [--max N] [--id ID ...] [--force]
    | messages PREFIX SHARD [--oldest-first] [--from ID | --from-time ISO8601] [--count N]
    | messages PREFIX --key KEY [--continue ID] [--count N]
    | pending PREFIX GROUP SHARD [--after ID] [--count N]

The URL and token come from `RSC_COORDINATOR_URL` and `RSC_TOKEN` when the flags
are absent, so a token stays out of `ps` (like every flag of `rsc admin` itself, through
rsc/common/env_config.py; a command's own flags never come from the environment). Pure:
parsing, validation and the protocol request each command sends (`build_request`); no I/O.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import re
import sys
import types
from collections.abc import Callable, Mapping
from typing import NoReturn, TypedDict, TypeVar

from rsc.common.env_config import FROM_ENVIRONMENT, command_arguments, own_usage_errors
from rsc.common.exit_codes import EXIT_FAILED
from rsc.common.log_lines import add_logging_arguments, plain_line, requested_format
from rsc.protocol.messages import (
    MAX_SHARD_COUNT,
    AdminRequest,
    DeleteGroup,
    DescribeGroup,
    FieldValueError,
    FindKey,
    GetFormatVersion,
    ListDeadLetters,
    ListGroups,
    ListPending,
    ReadAudit,
    ReadShard,
    RedriveDeadLetters,
    RemoveMember,
    ResetOffsets,
    Retention,
    SetFormatVersion,
    SetMaxConcurrency,
    SetRetention,
    SetShardCount,
)
from rsc.protocol.vocabulary import Cutover, RetentionMode

DEFAULT_URL = "ws://127.0.0.1:8765"
URL_ENV = "RSC_COORDINATOR_URL"
TOKEN_ENV = "RSC_TOKEN"
DEFAULT_TIMEOUT_S = 5.0
DEFAULT_WATCH_INTERVAL_S = 0.5

_DURATION = re.compile(r"^(?P<amount>\d+)(?P<unit>ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    """`30s`, `15m`, `24h`, `7d` (or `500ms`) as milliseconds, at least 1; ValueError otherwise."""
    match = _DURATION.match(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a duration: write a whole number and a unit, "
                         "for example 30s, 15m, 24h or 7d")
    milliseconds = int(match["amount"]) * _UNIT_MS[match["unit"]]
    if milliseconds < 1:
        raise ValueError(f"{text!r}: the duration must be more than 0")
    return milliseconds


def parse_datetime_ms(text: str) -> int:
    """An ISO 8601 date or date-time as epoch milliseconds; UTC unless it names a zone.

    `2026-12-01`, `2026-12-01T08:30`, `2026-12-01 08:30:00.250`, `...Z`, `...+01:00`.
    """
    try:
        moment = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 date-time, for example "
                         "2026-12-01T08:30:00Z or 2026-12-01T09:30:00+01:00") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    milliseconds = math.floor(moment.timestamp() * 1000)
    if milliseconds < 0:
        raise ValueError(f"{text!r} is before 1970-01-01T00:00:00Z")
    return milliseconds


def members_shown(text: str) -> int | str:
    """`describe --members`: `all`, or how many member rows (>= 0)."""
    if text == "all":
        return "all"
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be 'all' or a number of rows, not {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 'all' or a number of rows >= 0, not {text}")
    return value


def split_set_shards(values: list[str]) -> tuple[str | None, int]:
    """`[GROUP] N` of set-shards: the optional group and the shard count."""
    if len(values) not in (1, 2):
        raise ValueError(f"expected PREFIX [GROUP] N, got {len(values) + 1} arguments")
    *group, count = values
    try:
        shard_count = int(count)
    except ValueError:
        raise ValueError(f"the shard count N must be an integer in 1..{MAX_SHARD_COUNT}, "
                         f"got {count!r}") from None
    return (group[0] if group else None), shard_count


def coordinator_url(args: argparse.Namespace, environ: Mapping[str, str] = os.environ
                    ) -> tuple[str, str]:
    """The coordinator URL and where it came from: --url, RSC_COORDINATOR_URL, or the default."""
    if args.url is not None:  # given, or filled from RSC_COORDINATOR_URL (rsc/common/env_config.py)
        return args.url, getattr(args, FROM_ENVIRONMENT, {}).get("url", "--url")
    if environ.get(URL_ENV):
        return environ[URL_ENV], URL_ENV
    return DEFAULT_URL, "the default"


def admin_token(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> str | None:
    """--token, else RSC_TOKEN, else none; ValueError for an empty --token (B2)."""
    if args.token is not None and not args.token.strip():
        raise ValueError("--token is empty: give the coordinator's admin token (or set "
                         f"{TOKEN_ENV}), or leave the flag out")
    return args.token if args.token is not None else (environ.get(TOKEN_ENV) or None)


class _ConfirmedAt(TypedDict, total=False):
    if_group_epoch: int
    if_routing_version: int


def _confirmed_at(args: argparse.Namespace) -> _ConfirmedAt:
    """C1: `--if-group-epoch` and `--if-routing-version`, as the request's fields (when given)."""
    fields = _ConfirmedAt()
    epoch, version = getattr(args, "if_group_epoch", None), getattr(args, "if_routing_version", None)
    if epoch is not None:
        fields["if_group_epoch"] = epoch
    if version is not None:
        fields["if_routing_version"] = version
    return fields


def build_request(args: argparse.Namespace) -> AdminRequest:
    """The request a (non-watch) admin command sends; FieldValueError for a bad value.

    Its requestId is 0: the session gives each request its own.
    """
    name = args.admin_command
    if name == "list":
        return ListGroups(request_id=0)
    if name in ("describe", "watch"):
        return DescribeGroup(request_id=0, stream_prefix=args.prefix, consumer_group=args.group,
                             watch=name == "watch")
    if name == "set-shards":
        group, shard_count = split_set_shards(args.group_and_count)
        return SetShardCount(request_id=0, stream_prefix=args.prefix, consumer_group=group,
                             shard_count=shard_count, cutover=Cutover(args.cutover),
                             **_confirmed_at(args))
    if name == "set-max-concurrency":
        return SetMaxConcurrency(request_id=0, stream_prefix=args.prefix, consumer_group=args.group,
                                 max_concurrency=args.max_concurrency, **_confirmed_at(args))
    if name == "remove-member":  # S5: by memberId or by instanceId, exactly one
        if (args.member_id is None) == (args.instance_id is None):
            raise FieldValueError("remove-member takes MEMBER or --instance-id ID, exactly one "
                                  "of them")
        return RemoveMember(request_id=0, stream_prefix=args.prefix, consumer_group=args.group,
                            member_id=args.member_id, instance_id=args.instance_id,
                            **_confirmed_at(args))
    if name == "delete-group":
        return DeleteGroup(request_id=0, stream_prefix=args.prefix, consumer_group=args.group,
                           **_confirmed_at(args))
    if name == "set-retention":
        retention = Retention(mode=RetentionMode(args.mode), max_length=args.max_length,
                              max_age_ms=args.max_age_ms)
        if args.dead_letters is not None and retention.mode != RetentionMode.NONE:
            raise FieldValueError("--dead-letters takes --none: dead letters have no acks to "
                                  "wait for, only the caps --max-length and --max-age remove them")
        return SetRetention(request_id=0, stream_prefix=args.prefix, retention=retention,
                            dead_letters_of=args.dead_letters,
                            if_routing_version=args.if_routing_version)
    if name == "reset-offsets":
        if args.to_datetime_ms is not None:
            return ResetOffsets(request_id=0, stream_prefix=args.prefix, consumer_group=args.group,
                                to="timestamp", timestamp_ms=args.to_datetime_ms,
                                **_confirmed_at(args))
        return ResetOffsets(request_id=0, stream_prefix=args.prefix, consumer_group=args.group,
                            to=args.to, **_confirmed_at(args))
    if name == "dead-letters":
        return ListDeadLetters(request_id=0, stream_prefix=args.prefix, consumer_group=args.group,
                               count=args.count, after=args.after)
    if name == "redrive":
        return RedriveDeadLetters(request_id=0, stream_prefix=args.prefix,
                                  consumer_group=args.group, dry_run=args.dry_run, max=args.max,
                                  ids=tuple(args.ids or ()), force=args.force)
    if name == "format-version":
        return GetFormatVersion(request_id=0)
    if name == "set-format-version":
        return SetFormatVersion(request_id=0, format_version=args.format_version)
    if name == "messages":  # C2
        if args.key is not None:
            if args.shard is not None or args.from_id is not None \
                    or args.from_time_ms is not None or args.oldest_first:
                raise FieldValueError("messages --key finds the key's shard itself: it takes no "
                                      "SHARD, --from, --from-time or --oldest-first")
            return FindKey(request_id=0, stream_prefix=args.prefix, key=args.key,
                           continue_id=args.continue_id, count=args.count)
        if args.shard is None:
            raise FieldValueError("messages takes a SHARD (or --key KEY)")
        if args.continue_id is not None:
            raise FieldValueError("--continue goes with --key; a shard's page starts at --from")
        return ReadShard(request_id=0, stream_prefix=args.prefix, shard=args.shard,
                         newest_first=not args.oldest_first, from_id=args.from_id,
                         from_ms=args.from_time_ms, count=args.count)
    if name == "pending":  # C2
        return ListPending(request_id=0, stream_prefix=args.prefix, consumer_group=args.group,
                           shard=args.shard, after_id=args.after_id, count=args.count)
    if name == "audit":  # C3
        return ReadAudit(request_id=0, count=args.count, before_id=args.before_id)
    raise FieldValueError(f"unknown admin command {name!r}")


class AdminArgumentParser(argparse.ArgumentParser):
    """Usage errors of `rsc admin` and its commands: one line on stderr, exit code 1."""

    def error(self, message: str) -> NoReturn:
        line = f"error: {self.prog}: {message} (see {self.prog} --help)"
        if requested_format(sys.argv[1:], os.environ) == "json":
            line = plain_line("json", "ERROR", "usage", status=None, message=line)
        print(line, file=sys.stderr, flush=True)
        sys.exit(EXIT_FAILED)


_Parsed = TypeVar("_Parsed")


def _argument_type(parse: Callable[[str], _Parsed]) -> Callable[[str], _Parsed]:
    def convert(text: str) -> _Parsed:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = parse.__name__
    return convert


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0 or math.isinf(value):
        raise ValueError(f"must be a positive number, got {text}")
    return value


def _int_at_least(minimum: int) -> Callable[[str], int]:
    """An argument type: an integer of at least `minimum`, else a ValueError saying so."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"must be an integer >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise ValueError(f"must be an integer >= {minimum}, got {value}")
        return value

    return parse


_non_negative_int = _int_at_least(0)
_positive_int = _int_at_least(1)


def _max_concurrency(text: str) -> int | None:
    if text.lower() in ("none", "null", "unset"):
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"must be an integer >= 1 or 'none', got {text!r}") from None


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
               run: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
    """Add `rsc admin` and its commands to the `rsc` subparsers; `run` executes them."""
    admin = subparsers.add_parser(
        "admin", help="inspect and change groups on a coordinator",
        description="Operator commands of the coordinator's admin API. "
                    f"The URL and token default to ${URL_ENV} and ${TOKEN_ENV}.")
    admin.add_argument("--url", default=None,
                       help=f"coordinator address ws://HOST:PORT (default: ${URL_ENV}, "
                            f"else {DEFAULT_URL})")
    admin.add_argument("--token", default=None,
                       help=f"admin token, sent as 'Authorization: Bearer' (default: ${TOKEN_ENV})")
    admin.add_argument("--ca-file", default=None, metavar="FILE",
                       help="CA certificates (PEM) a wss:// coordinator is verified against, beside "
                            "the system trust store (default: $RSC_CA_FILE)")
    admin.add_argument("--timeout", type=_argument_type(_positive_float), default=DEFAULT_TIMEOUT_S,
                       help=f"seconds to wait to connect and for each answer, retries of "
                            f"COORDINATOR_NOT_AVAILABLE included (default: {DEFAULT_TIMEOUT_S:g})")
    commands = admin.add_subparsers(dest="admin_command", required=True, metavar="COMMAND",
                                    parser_class=AdminArgumentParser)
    add_logging_arguments(admin, default_level="warning")
    admin.error = types.MethodType(AdminArgumentParser.error, admin)  # type: ignore[method-assign]
    own_usage_errors(admin)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        parser = command_arguments(commands.add_parser(name, help=help_text, description=help_text))
        parser.add_argument("--json", action="store_true",
                            help="print the raw response as one JSON line")
        return parser

    def group_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("prefix", metavar="PREFIX", help="stream prefix")
        parser.add_argument("group", metavar="GROUP", help="consumer group")

    def confirmation_arguments(parser: argparse.ArgumentParser, *, group: bool = True) -> None:
        """C1: change only if the group and the routing are still as the operator saw them."""
        if group:
            parser.add_argument("--if-group-epoch", type=_argument_type(_non_negative_int),
                                default=None, metavar="N",
                                help="change nothing (STALE_CONFIRMATION) unless the group's "
                                     "epoch is N when the coordinator takes the request")
        parser.add_argument("--if-routing-version", type=_argument_type(_non_negative_int),
                            default=None, metavar="N",
                            help="change nothing (STALE_CONFIRMATION) unless the prefix's "
                                 "routing version is N (0: no routing) when the coordinator "
                                 "takes the request")

    command("list", "list every group with state, epoch, members, shards and backlog "
                    "(undelivered and unacked entries)")
    describe = command("describe", "show a group: epochs, routing, migration, members, shards")
    group_arguments(describe)
    describe.add_argument("--shards", action="store_true", default=None,
                          help="always show the per-shard table (default: when there are at "
                               "most 16 shards)")
    describe.add_argument("--members", type=members_shown, default=None, metavar="N|all",
                          help="member rows to show: N (those that need attention first) or "
                               "all (default: all up to 50 members, else a summary and 20 rows)")
    set_shards = command("set-shards", "create or change the shard count of a stream prefix")
    cutovers = tuple(cutover.value for cutover in Cutover)
    set_shards.usage = f"%(prog)s [-h] [--json] [--cutover {{{','.join(cutovers)}}}] PREFIX [GROUP] N"
    set_shards.add_argument("prefix", metavar="PREFIX", help="stream prefix")
    set_shards.add_argument("group_and_count", metavar="[GROUP] N", nargs="+",
                            help=f"an existing group of the prefix (optional; on a new prefix it "
                                 f"is registered) and the shard count 1..{MAX_SHARD_COUNT}")
    set_shards.add_argument("--cutover", choices=cutovers, default=Cutover.PARALLEL.value,
                            help=f"{Cutover.ORDERED}: new shards start after the old ones are "
                                 f"drained (default: {Cutover.PARALLEL})")
    confirmation_arguments(set_shards)
    set_max = command("set-max-concurrency", "set or clear (none) the group's maxConcurrency")
    group_arguments(set_max)
    set_max.add_argument("max_concurrency", metavar="N", type=_argument_type(_max_concurrency),
                         help="workers per member (>= 1), or 'none' to clear")
    confirmation_arguments(set_max)
    remove = command("remove-member", "remove a member (an AWAY one too); its shards are freed "
                                      "at once")
    group_arguments(remove)
    remove.add_argument("member_id", metavar="MEMBER", nargs="?", default=None,
                        help="memberId as shown by describe")
    remove.add_argument("--instance-id", default=None, metavar="ID",
                        help="remove the static member holding this instanceId instead")
    confirmation_arguments(remove)
    watch = command("watch", "follow a group live: a timestamped line per change of members, "
                             "epochs, state, assignment, routing or migration (server pushes)")
    group_arguments(watch)
    watch.add_argument("--table", action="store_true",
                       help="show the group's view too: redrawn in place on a terminal, after "
                            "each change line into a pipe (default: change lines only)")
    watch.add_argument("--interval", type=_argument_type(_positive_float),
                       default=DEFAULT_WATCH_INTERVAL_S,
                       help="seconds between polls, used only with a coordinator that does not "
                            f"push (default: {DEFAULT_WATCH_INTERVAL_S:g})")
    watch.add_argument("--duration", type=_argument_type(_positive_float), default=None,
                       help="stop after this many seconds (default: until Ctrl-C)")
    watch.add_argument("--changes", type=_argument_type(_positive_int), default=None,
                       help="stop after this many changes were shown (default: no limit)")
    delete = command("delete-group", "delete a group that has no live members (its metadata and "
                                     "its Redis consumer group on every shard)")
    group_arguments(delete)
    confirmation_arguments(delete)
    retention = command("set-retention", "replace a prefix's retention: remove entries once every "
                                         "group acked them, or not, and optional length and age caps")
    retention.add_argument("prefix", metavar="PREFIX", help="stream prefix")
    mode = retention.add_mutually_exclusive_group(required=True)
    mode.add_argument("--acked", dest="mode", action="store_const", const=RetentionMode.ACKED,
                      help="remove entries once every group acked them (the default retention)")
    mode.add_argument("--none", dest="mode", action="store_const", const=RetentionMode.NONE,
                      help="remove nothing because of acks (only the caps remove entries)")
    retention.add_argument("--max-length", type=_argument_type(_positive_int), default=None,
                           help="cap each shard at N entries, even unconsumed ones (lossy)")
    retention.add_argument("--max-age", dest="max_age_ms", type=_argument_type(parse_duration_ms),
                           default=None, metavar="DURATION",
                           help="remove entries older than this (30s, 15m, 24h, 7d), even "
                                "unconsumed ones (lossy)")
    retention.add_argument("--dead-letters", metavar="GROUP", default=None,
                           help="set the retention of GROUP's dead letters instead (P2; with "
                                "--none: its caps, or none to keep them all, the default)")
    confirmation_arguments(retention, group=False)
    reset = command("reset-offsets", "move the offsets of a group without live members on every "
                                     "shard, dropping its pending entries")
    group_arguments(reset)
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", dest="to", action="store_const", const="earliest",
                        help="redeliver everything the shards still hold")
    target.add_argument("--to-latest", dest="to", action="store_const", const="latest",
                        help="skip everything written so far")
    target.add_argument("--to-datetime", dest="to_datetime_ms", metavar="ISO8601",
                        type=_argument_type(parse_datetime_ms), default=None,
                        help="deliver from the first entry at or after this time (UTC unless "
                             "it names a zone)")
    confirmation_arguments(reset)
    command("format-version", "show the metadata format version of the coordinator's store, and "
                              "the newest the coordinator writes")
    set_format = command("set-format-version", "raise the metadata format version of the store "
                                               "once every coordinator runs a release that writes "
                                               "it (releases before it cannot read the store then)")
    set_format.add_argument("format_version", metavar="N", type=_argument_type(_positive_int),
                            help="the format version to write from now on (never lower than "
                                 "the one in use)")
    dead = command("dead-letters", "show a group's dead letters: how many, the oldest and newest, "
                                   "errors by type, and a page of entries with their story")
    group_arguments(dead)
    dead.add_argument("--count", type=_argument_type(_positive_int), default=100,
                      help="entries on the page (1..1000, default 100)")
    dead.add_argument("--after", metavar="ID", default=None,
                      help="start the page after this dead letter's id (default: the oldest)")
    redrive = command("redrive", "send a group's dead letters back to their prefix, for this "
                                 "group only (other groups ack them without a handler call)")
    group_arguments(redrive)
    redrive.add_argument("--dry-run", action="store_true",
                         help="say what would be sent back and where, change nothing")
    redrive.add_argument("--max", type=_argument_type(_positive_int), default=1000,
                         help="send back at most N entries, the oldest first (default 1000)")
    redrive.add_argument("--id", dest="ids", action="append", metavar="ID", default=None,
                         help="send back this dead letter (repeat for more; default: all)")
    redrive.add_argument("--force", action="store_true",
                         help="send back entries already sent back 3 times too")
    messages = command("messages", "show a page of a shard's entries (newest first), or a "
                                   "key's entries with --key; needs the admin token (C2)")
    messages.add_argument("prefix", metavar="PREFIX", help="stream prefix")
    messages.add_argument("shard", metavar="SHARD", nargs="?", default=None,
                          help="the shard's stream (see describe --shards)")
    messages.add_argument("--key", default=None,
                          help="find this key's entries in its shard (of the current routing, "
                               "and of the previous one while a resharding drains it)")
    messages.add_argument("--oldest-first", action="store_true",
                          help="the oldest entries first")
    start = messages.add_mutually_exclusive_group()
    start.add_argument("--from", dest="from_id", metavar="ID", default=None,
                       help="start at this entry id (the nextId of the page before)")
    start.add_argument("--from-time", dest="from_time_ms", metavar="ISO8601",
                       type=_argument_type(parse_datetime_ms), default=None,
                       help="start at this time (UTC unless it names a zone)")
    messages.add_argument("--continue", dest="continue_id", metavar="ID", default=None,
                          help="with --key: scan on from this id (the continueId of before)")
    messages.add_argument("--count", type=_argument_type(_positive_int), default=50,
                          help="entries on the page (1..50, default 50)")
    pending = command("pending", "show a group's pending entries in a shard: owner, idle time, "
                                 "deliveries (C2)")
    group_arguments(pending)
    pending.add_argument("shard", metavar="SHARD", help="the shard's stream")
    pending.add_argument("--after", dest="after_id", metavar="ID", default=None,
                         help="start after this entry id (the nextId of the page before)")
    pending.add_argument("--count", type=_argument_type(_positive_int), default=50,
                         help="entries on the page (1..50, default 50)")
    audit = command("audit", "show the audit log: every change and every refused request, "
                             "newest first, with who sent it from where (C3)")
    audit.add_argument("--count", type=_argument_type(_positive_int), default=50,
                       help="entries to show, at most 1000 (default %(default)s)")
    audit.add_argument("--before", dest="before_id", metavar="ID", default=None,
                       help="only entries older than this entry id (to page back)")
    admin.set_defaults(run=run)
    return admin
