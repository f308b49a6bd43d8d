"""Delays between retries, pure (no clock, no sleeping): the shells sleep what it says.

The one backoff of the coordinator and the members: a member's reconnects and
refused joins, a prefix actor's restarts and reloads.
"""

from __future__ import annotations

import random
from collections.abc import Callable


def no_jitter() -> float:
    """A jitter source that always says 1: exactly `initial`, then doubling (tests, restarts)."""
    return 1.0


class Backoff:
    """Delays between retries: from `initial`, doubling up to `maximum`, with jitter.

    `next()` gives the next delay; `reset()` after a success starts again from `initial`.
    """

    def __init__(self, initial: float = 0.05, maximum: float = 2.0, *,
                 jitter: Callable[[], float] = random.random) -> None:
        if not 0 < initial <= maximum:
            raise ValueError(f"need 0 < initial <= maximum, got {initial}, {maximum}")
        self.initial = initial
        self.maximum = maximum
        self._jitter = jitter
        self._delay = initial

    def next(self) -> float:
        delay = self._delay
        self._delay = min(self._delay * 2, self.maximum)
        return delay * (0.5 + 0.5 * self._jitter())

    def reset(self) -> None:
        self._delay = self.initial
