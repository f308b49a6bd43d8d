"""Log lines of every tool: one line per event on stderr, as JSON objects or `key=value` text.

The one home of the log setup: `rsc coordinator`, `rsc produce`, `rsc consume` (and its
`--peek`), `rsc admin` and `rsc demo` take `--log-level` and `--log-format text|json`
(`add_logging_arguments`, also `RSC_LOG_LEVEL` / `RSC_LOG_FORMAT` through
rsc/common/env_config.py) and call `configure_logging` before anything else writes to stderr.
What a tool says on stderr goes through a logger (`log_event`, or `tool_log(tool)` for a
tool's own lines), so every stderr line has the format chosen. stdout (`listening on ...`,
consume's message lines) is not a log. The coordinator's event vocabulary is actors/logs.py.

Formats (`--log-format`):

- `text`: `2025-01-02T03:04:05.678Z INFO member.joined prefix=orders group=billing`
  (strings with spaces, quotes or `=` are JSON-quoted; lists are JSON).
- `json`: `{"ts": "...", "level": "INFO", "event": "member.joined", "prefix": ...}`,
  one object per line.

Timestamps are UTC with milliseconds. A record logged the ordinary way (`log.info("text")`)
becomes an event whose name is the text, without fields. `format_line` formats one line
without logging (for a line written before the setup, such as a bad environment variable).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, Sequence
from typing import TextIO

from rsc.common.log_lines import (
    LOG_FORMATS,
    LOG_LEVELS,
    LogFormat,
    add_logging_arguments,
    format_json_line,
    format_text_line,
    format_text_value,
    plain_line,
    requested_format,
    utc_timestamp,
)
from rsc.common.redact import redact_text

__all__ = ["LOG_FORMATS", "LOG_LEVELS", "JsonFormatter", "LogFormat", "TextFormatter",
           "add_logging_arguments", "configure_logging", "format_json_line", "format_line",
           "format_text_line", "format_text_value", "log_event", "parse_level", "plain_line",
           "record_fields", "requested_format", "tool_log", "utc_timestamp"]

_FIELDS_ATTRIBUTE = "rsc_fields"
_HANDLER_NAME = "rsc-structured"


def log_event(logger: logging.Logger, event: str, /, *, level: int = logging.INFO,
              **fields: object) -> None:
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
                      stream: TextIO | None = None,
                      filters: Sequence[logging.Filter] = ()) -> None:
    """Send every log record to `stream` (stderr by default) as one structured line.

    Replaces the handler an earlier call installed, so calling it twice is safe; `filters`
    go on the handler (a tool's repeat filter, say).
    """
    if fmt not in LOG_FORMATS:
        raise ValueError(f"unknown log format {fmt!r}, expected one of {', '.join(LOG_FORMATS)}")
    root = logging.getLogger()
    for handler in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(handler)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    for log_filter in filters:
        handler.addFilter(log_filter)
    root.addHandler(handler)
    root.setLevel(parse_level(level))
    logging.captureWarnings(True)  # a library's warning is a log line too, in the same format


def tool_log(tool: str) -> logging.Logger:
    """The logger of a tool's own stderr lines (`rsc.produce`, `rsc.admin`, ...)."""
    return logging.getLogger(f"rsc.{tool}")


def format_line(fmt: str, level: str, event: str, **fields: object) -> str:
    """One log line stamped now, without the logging machinery (redacted, K7)."""
    return redact_text(plain_line(fmt, level, event, **fields))


def record_fields(record: logging.LogRecord) -> dict[str, object]:
    """The structured fields of a record (empty for an ordinary log call)."""
    fields = getattr(record, _FIELDS_ATTRIBUTE, None)
    return dict(fields) if isinstance(fields, Mapping) else {}


class _StructuredFormatter(logging.Formatter):
    def _parts(self, record: logging.LogRecord) -> tuple[str, str, str, dict[str, object]]:
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
