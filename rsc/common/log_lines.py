"""The log options and line formats every tool shares (rsc/common/logs.py sets up the
handler): `--log-level`, `--log-format text|json`, a UTC timestamp with milliseconds, and one
event per line as `ts LEVEL event key=value ...` or a JSON object. Pure: no I/O.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from collections.abc import Mapping, Sequence
from typing import Literal

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")

LogFormat = Literal["json", "text"]

def add_logging_arguments(parser: argparse.ArgumentParser, default_level: str = "info") -> None:
    """Add `--log-level` and `--log-format` (default text) to a command."""
    parser.add_argument("--log-level", default=default_level, choices=LOG_LEVELS, type=str.lower,
                        help="least severe level logged on stderr (default: %(default)s)")
    parser.add_argument("--log-format", default="text", choices=LOG_FORMATS,
                        help="stderr lines as 'text' (`ts LEVEL event key=value ...`) or 'json' "
                             "(one object per line with ts, level and event); both carry a UTC "
                             "timestamp (default: text)")


def requested_format(argv: Sequence[str], environ: Mapping[str, str]) -> LogFormat:
    """The log format `argv` or the environment asks for, before the arguments are parsed."""
    for index, arg in enumerate(argv):
        if arg == "--log-format" and index + 1 < len(argv):
            return "json" if argv[index + 1] == "json" else "text"
        if arg.startswith("--log-format="):
            return "json" if arg.partition("=")[2] == "json" else "text"
    return "json" if environ.get("RSC_LOG_FORMAT", "").strip() == "json" else "text"


def utc_timestamp(created: float) -> str:
    """RFC 3339 UTC timestamp with milliseconds, e.g. 2025-01-02T03:04:05.678Z."""
    moment = datetime.datetime.fromtimestamp(created, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def format_json_line(ts: str, level: str, event: str, fields: Mapping[str, object]) -> str:
    """One JSON object: ts, level, event, then the fields (which cannot override those three)."""
    extra = {key: value for key, value in fields.items() if key not in ("ts", "level", "event")}
    return json.dumps({"ts": ts, "level": level, "event": event, **extra},
                      default=str, ensure_ascii=False, separators=(",", ":"))


def format_text_line(ts: str, level: str, event: str, fields: Mapping[str, object]) -> str:
    """`ts LEVEL event key=value ...` on one line."""
    parts = [ts, level, event]
    parts.extend(f"{key}={format_text_value(value)}" for key, value in fields.items())
    return " ".join(parts)


def format_text_value(value: object) -> str:
    """A field value for text logs: bare when unambiguous, JSON otherwise."""
    if isinstance(value, str):
        plain = value and not any(ch.isspace() or ch in '"=\\' for ch in value)
        return value if plain else json.dumps(value, ensure_ascii=False)
    if value is None or isinstance(value, bool | int | float):
        return json.dumps(value)
    if isinstance(value, set | frozenset):
        value = sorted(value, key=str)
    return json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":"))


def plain_line(fmt: str, level: str, event: str, **fields: object) -> str:
    """One log line in format `fmt`, stamped now (not redacted: see rsc.common.logs.format_line)."""
    ts = utc_timestamp(time.time())
    return (format_json_line if fmt == "json" else format_text_line)(ts, level, event, fields)
