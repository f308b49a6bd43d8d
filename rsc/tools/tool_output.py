"""The stderr of `rsc produce` and `rsc consume`: log lines (rsc/common/logs.py, `--log-format
text|json`, each with a UTC timestamp and a level) whose event is `rsc <tool>: <line>`, and
member warnings, as `rsc <tool>: ...` too, at most once per kind every 15 s."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from rsc.common.exit_codes import EXIT_INTERRUPTED
from rsc.common.logs import configure_logging, log_event, parse_level, tool_log
from rsc.member.notices import REPEAT_S
from rsc.tools.output_lines import PipeClosed
from rsc.tools.peek import QuotaReached

MEMBER_LOGGER = "rsc.member"


def line_writer(tool: str) -> Callable[..., None]:
    """`say(line, level=WARNING)`: one log line `rsc <tool>: <line>` on stderr, in the format
    `setup_logging` chose (redacted by the formatter, K7; a closed stderr is ignored)."""
    log = tool_log(tool)

    def write(line: str, level: int = logging.WARNING) -> None:
        log_event(log, f"rsc {tool}: {line}", level=level)

    return write


def exit_now(say: Callable[[str], None], line: str) -> None:
    """The second Ctrl-C: say why, then end the process without unwinding anything."""
    say(line)
    os._exit(EXIT_INTERRUPTED)


class RepeatFilter(logging.Filter):
    """Lets one member log line of a kind through per REPEAT_S (a retry loop says it once)."""

    def __init__(self, repeat_s: float = REPEAT_S, scope: str = MEMBER_LOGGER) -> None:
        super().__init__()
        self._repeat_s = repeat_s
        self._scope = scope
        self._last: dict[tuple[str, object], float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if not _within(record.name, self._scope):
            return True  # the tool's own lines: said once each already
        if isinstance(record.args, tuple) and any(isinstance(arg, PipeClosed | QuotaReached)
                                                  for arg in record.args):
            return False  # the consumer is stopping because stdout closed: not a failure
        key = (record.name, record.msg)
        now = time.monotonic()
        if now - self._last.get(key, -self._repeat_s) < self._repeat_s:
            return False
        self._last[key] = now
        return True


class ToolPrefix(logging.Filter):
    """Member log lines read `rsc <tool>: ...`, like the tool's own."""

    def __init__(self, tool: str, scope: str = MEMBER_LOGGER) -> None:
        super().__init__()
        self._prefix = f"rsc {tool}: "
        self._scope = scope

    def filter(self, record: logging.LogRecord) -> bool:
        if _within(record.name, self._scope) and isinstance(record.msg, str) \
                and not record.msg.startswith(self._prefix):
            record.msg = self._prefix + record.msg
        return True


def _within(name: str, scope: str) -> bool:
    return name == scope or name.startswith(scope + ".")


def setup_logging(tool: str, level: str = "info", fmt: str = "text") -> None:
    """Every stderr line of `rsc <tool>` through the one log setup: `--log-level` and
    `--log-format`; member warnings at most once per kind every 15 s (member info lines only
    with `--log-level debug`)."""
    configure_logging(level, "json" if fmt == "json" else "text",
                      filters=[RepeatFilter(), ToolPrefix(tool)])
    chosen = parse_level(level)
    logging.getLogger(MEMBER_LOGGER).setLevel(chosen if chosen <= logging.DEBUG
                                              else max(chosen, logging.WARNING))
