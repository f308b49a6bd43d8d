"""Problem lines for people (docs/protocol.md D3): said at once, again at a slow rate, and when over.

A console tool that retries must not wait silently, nor print a line per retry:

    notices = Notices(print_line, repeat_s=15)
    notices.say("redis", "cannot reach Redis at redis://...: connection refused; retrying")
    notices.clear("redis", "Redis at redis://... answers again")

`say` prints a topic's line the first time, again when its text changes, and
otherwise at most once per `repeat_s`; `clear` ends the topic (printing its
closing line only if the problem had been said). The clock is injected, so the
rate rule is tested without waiting.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable

import redis

from rsc.common.redact import redact_url
from rsc.common.redis_connect import ReplicaNow

REPEAT_S = 15.0


class Notices:
    """Rate-limited problem lines, one topic per kind of problem."""

    def __init__(self, write: Callable[[str], None], *, repeat_s: float = REPEAT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._write = write
        self._repeat_s = repeat_s
        self._clock = clock
        self._said: dict[str, tuple[str, float]] = {}  # topic -> (line, when said)

    def say(self, topic: str, line: str) -> None:
        """Report that `topic` is a problem now, described by `line`."""
        now = self._clock()
        last = self._said.get(topic)
        if last is not None and last[0] == line and now - last[1] < self._repeat_s:
            return
        self._said[topic] = (line, now)
        self._write(line)

    def clear(self, topic: str, line: str | None = None) -> None:
        """`topic` is no longer a problem; say `line` if it had been reported."""
        if self._said.pop(topic, None) is not None and line is not None:
            self._write(line)

    def active(self, topic: str) -> bool:
        """Whether `topic` was said and not cleared since."""
        return topic in self._said


def then(line: str, rest: str) -> str:
    """`line` followed by what the tool does about it: "...? retrying", "...; retrying"."""
    return f"{line} {rest}" if line.endswith(("?", ".")) else f"{line}; {rest}"


def redis_problem(exc: BaseException, redis_url: str) -> str:
    """One line for a Redis error: what happened at which URL (its password masked, K7), and
    the likely fix."""
    redis_url = redact_url(redis_url)
    if isinstance(exc, ReplicaNow | redis.ReadOnlyError):
        return f"Redis at {redis_url} is a read-only replica now (a failover?)"
    if isinstance(exc, redis.TimeoutError):
        return f"Redis at {redis_url} does not answer (timeout): is it stopped or overloaded?"
    if isinstance(exc, redis.BusyLoadingError):
        return f"Redis at {redis_url} is loading its data set"
    if isinstance(exc, redis.ConnectionError):
        text = str(exc.args[0]) if exc.args else str(exc)
        cause = exc.__cause__ or exc.__context__
        code = getattr(cause, "errno", None)
        if code == errno.ECONNREFUSED or "Connection refused" in text:
            return (f"cannot reach Redis at {redis_url}: connection refused "
                    "(is redis-server running there? is --redis-url / RSC_REDIS_URL right?)")
        if code == errno.ECONNRESET or "reset by peer" in text:
            return f"Redis at {redis_url} reset the connection"
        return f"cannot reach Redis at {redis_url}: {text}"
    return f"Redis at {redis_url} answered an error: {exc}"
