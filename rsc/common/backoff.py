"""Delays between retries, pure (no clock, no sleeping): the shells sleep what it says.

The one backoff of the coordinator and the members, and its named presets: every retry
loop of the member side starts one of these rather than spelling its own delays.

    backoff = RETRY.start()          # 0.05 s doubling to 2 s, jittered
    await trio.sleep(backoff.next())
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass


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


@dataclass(frozen=True)
class BackoffPreset:
    """A named pair of delays; `start()` gives a fresh `Backoff` of them.

    `jittered=False` waits exactly the delays (a fixed pause is `initial == maximum`)."""

    initial: float
    maximum: float
    jittered: bool = True

    def __post_init__(self) -> None:
        Backoff(self.initial, self.maximum)  # the same check, at definition

    def start(self, *, maximum: float | None = None,
              jitter: Callable[[], float] | None = None) -> Backoff:
        """A new backoff from `initial` (`maximum` overrides the preset's ceiling; `jitter` the
        random source)."""
        ceiling = self.maximum if maximum is None else maximum
        source = jitter if jitter is not None else random.random if self.jittered else no_jitter
        return Backoff(self.initial, ceiling, jitter=source)


RETRY = BackoffPreset(0.05, 2.0)
"""A coordinator session reopened, a Redis call retried while Redis fails (D3)."""

ROUTING_WAIT = BackoffPreset(0.05, 1.0)
"""Between getRouting asks while the prefix has no routing (a producer's first routing)."""

HEARTBEAT_RECONNECT = BackoffPreset(0.05, 1.0)
"""A member's heartbeat session reopened (D5: short, the lease is running)."""

MEMBERS_RESTART = BackoffPreset(0.5, 5.0)
"""`rsc consume` starting its members again after Redis went away while they started."""

ACK_RETRY = BackoffPreset(0.2, 0.2, jittered=False)
"""A member's failed ack batch sent again: a fixed 0.2 s, the batch is kept meanwhile."""

RECORD_RETRY = BackoffPreset(0.2, 0.2, jittered=False)
"""A handler attempt Redis could not record (P1) tried again: a fixed 0.2 s, while still owned."""
