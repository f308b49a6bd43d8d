"""Structured logs: one line per event, as JSON objects or `key=value` text.

The coordinator is quiet except for the events an operator acts on: one line
per epoch change and per member state change. Call sites name the event and
pass its facts as keyword fields:

    log = logging.getLogger("rsc.coordinator")
    log_event(log, "member.joined", prefix="orders", group="billing",
              member="10.0.0.7-4242-0-k3f9", group_epoch=5)

Event names (the coordinator's vocabulary; keep call sites to these):
`group.epoch` (group or assignment epoch changed), `member.joined`,
`member.left`, `member.expired`, `member.removed`, `member.fenced`,
`member.revoked` (a revoke completed), `member.away` (a static member's
temporary leave or lapsed lease, S2/S5: `instanceId`, `reason`),
`member.returned` (its return, S3: `instanceId`, `replaced` when under a new
memberId; a session-timeout removal is `member.expired` with
`reason=session_timeout`), `routing.changed`,
`migration.progress`, `migration.complete`, `store.unavailable` (once when an
outage starts), `store.still_unavailable` (a reminder, at most every 10 s),
`store.available` (once when it ends); admission and supervision:
`accept.fd_exhausted` / `accept.fd_available` (accept failed with EMFILE;
reminded at most every 10 s), `session.failed`, `prefix.actor_failed`,
`prefix.reload_failed`, `prefix.reloaded`, `coordinator.lease_taken_over`
(the previous holder was a dead process on this host).

Formats (`--log-format`):

- `text`: `2025-01-02T03:04:05.678Z INFO member.joined prefix=orders group=billing`
  (strings with spaces, quotes or `=` are JSON-quoted; lists are JSON).
- `json`: `{"ts": "...", "level": "INFO", "event": "member.joined", "prefix": ...}`,
  one object per line.

A record logged the ordinary way (`log.info("text")`) becomes an event whose
name is the text, without fields.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import sys
from collections.abc import Mapping
from typing import Any, Literal, TextIO

from rsc.common.redact import redact_text

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")

LogFormat = Literal["json", "text"]

_FIELDS_ATTRIBUTE = "rsc_fields"
_HANDLER_NAME = "rsc-structured"


def log_event(logger: logging.Logger, event: str, /, *, level: int = logging.INFO,
              **fields: Any) -> None:
    """Log one structured event line: `event` plus its `fields` (any JSON-able values)."""
    if logger.isEnabledFor(level):
        logger.log(level, event, extra={_FIELDS_ATTRIBUTE: fields})


def parse_level(level: str) -> int:
    """`--log-level` value (case-insensitive name) -> logging level; ValueError if unknown."""
    name = level.strip().lower()
    if name not in LOG_LEVELS:
        raise ValueError(f"unknown log level {level!r}, expected one of {', '.join(LOG_LEVELS)}")
    return logging.getLevelNamesMapping()[name.upper()]


def configure_logging(level: str = "info", fmt: LogFormat = "text",
                      stream: TextIO | None = None) -> None:
    """Send every log record to `stream` (stderr by default) as one structured line.

    Replaces the handler an earlier call installed, so calling it twice is safe.
    """
    if fmt not in LOG_FORMATS:
        raise ValueError(f"unknown log format {fmt!r}, expected one of {', '.join(LOG_FORMATS)}")
    root = logging.getLogger()
    for handler in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(handler)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(parse_level(level))


def add_logging_arguments(parser: argparse.ArgumentParser) -> None:
    """Add `--log-level` (default info) and `--log-format` (default text) to a command."""
    parser.add_argument("--log-level", default="info", choices=LOG_LEVELS,
                        type=str.lower, help="least severe level logged (default: info)")
    parser.add_argument("--log-format", default="text", choices=LOG_FORMATS,
                        help="one line per event as 'text' key=value or 'json' (default: text)")


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields of a record (empty for an ordinary log call)."""
    fields = getattr(record, _FIELDS_ATTRIBUTE, None)
    return dict(fields) if isinstance(fields, Mapping) else {}


def utc_timestamp(created: float) -> str:
    """RFC 3339 UTC timestamp with milliseconds, e.g. 2025-01-02T03:04:05.678Z."""
    moment = datetime.datetime.fromtimestamp(created, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def format_json_line(ts: str, level: str, event: str, fields: Mapping[str, Any]) -> str:
    """One JSON object: ts, level, event, then the fields (which cannot override those three)."""
    extra = {key: value for key, value in fields.items() if key not in ("ts", "level", "event")}
    return json.dumps({"ts": ts, "level": level, "event": event, **extra},
                      default=str, ensure_ascii=False, separators=(",", ":"))


def format_text_line(ts: str, level: str, event: str, fields: Mapping[str, Any]) -> str:
    """`ts LEVEL event key=value ...` on one line."""
    parts = [ts, level, event]
    parts.extend(f"{key}={format_text_value(value)}" for key, value in fields.items())
    return " ".join(parts)


def format_text_value(value: Any) -> str:
    """A field value for text logs: bare when unambiguous, JSON otherwise."""
    if isinstance(value, str):
        plain = value and not any(ch.isspace() or ch in '"=\\' for ch in value)
        return value if plain else json.dumps(value, ensure_ascii=False)
    if value is None or isinstance(value, bool | int | float):
        return json.dumps(value)
    if isinstance(value, set | frozenset):
        value = sorted(value, key=str)
    return json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":"))


class _StructuredFormatter(logging.Formatter):
    def _parts(self, record: logging.LogRecord) -> tuple[str, str, str, dict[str, Any]]:
        fields = record_fields(record)
        if record.exc_info:
            fields["exception"] = self.formatException(record.exc_info)
        return utc_timestamp(record.created), record.levelname, record.getMessage(), fields


class JsonFormatter(_StructuredFormatter):
    """One JSON object per record: ts, level, event and the event's fields."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_text(format_json_line(*self._parts(record)))  # K7: the safety net


class TextFormatter(_StructuredFormatter):
    """`ts LEVEL event key=value ...` per record."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_text(format_text_line(*self._parts(record)))  # K7: the safety net
