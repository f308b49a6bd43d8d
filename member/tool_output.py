"""The stderr of `rsc produce` and `rsc consume`: `rsc <tool>: <line>`, and member warnings
at most once per kind every 15 s."""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from typing import TextIO

from rsc.common.redact import redact_text
from rsc.member.notices import REPEAT_S
from rsc.member.output_lines import PipeClosed
from rsc.member.peek import QuotaReached

EXIT_INTERRUPTED = 130


def line_writer(tool: str, stream: TextIO | None = None) -> Callable[[str], None]:
    """Print `rsc <tool>: <line>` on stderr, flushed (a closed stderr is ignored)."""

    def write(line: str) -> None:
        try:  # K7: the safety net, whatever the line quotes
            print(redact_text(f"rsc {tool}: {line}"), file=stream or sys.stderr, flush=True)
        except (BrokenPipeError, ValueError):
            pass

    return write


def exit_now(say: Callable[[str], None], line: str) -> None:
    """The second Ctrl-C: say why, then end the process without unwinding anything."""
    say(line)
    os._exit(EXIT_INTERRUPTED)


class RepeatFilter(logging.Filter):
    """Lets one log line of a kind through per REPEAT_S (a retry loop says it once)."""

    def __init__(self, repeat_s: float = REPEAT_S) -> None:
        super().__init__()
        self._repeat_s = repeat_s
        self._last: dict[tuple[str, object], float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(arg, PipeClosed | QuotaReached)
                                                  for arg in record.args):
            return False  # the consumer is stopping because stdout closed: not a failure
        key = (record.name, record.msg)
        now = time.monotonic()
        if now - self._last.get(key, -self._repeat_s) < self._repeat_s:
            return False
        self._last[key] = now
        return True


def quiet_repeats(logger: logging.Logger, tool: str) -> None:
    """Member warnings on stderr as `rsc <tool>: ...` lines, each kind at most every 15 s."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"rsc {tool}: %(message)s"))
    handler.addFilter(RepeatFilter())
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    logger.propagate = False
