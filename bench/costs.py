"""What a window of consuming cost: Redis commands, the member's thread hops, process CPU.

- `RedisCalls`: INFO commandstats `calls` per command, before and after (commands run
  by a script count under their own name too: the ack script's XACK and GET).
- `ThreadHops`: counts `trio.to_thread.run_sync` calls in this process while it is
  installed, by what ran in the thread (a read, a claim, an ack, a lag poll...). Each
  hop is one Redis round trip (one command or one pipeline) of a member shell.
  Measurement only: it wraps trio's function and restores it; the member code is
  not changed.
- `cpu_seconds()`: user + system CPU of this process, every thread.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis
import trio

# what ran in the thread -> the round trip it is (qualnames of rsc.member's shells)
HOP_KINDS = {
    "ThreadedStreamOps._read": "read",
    "Reader._recover_some.<locals>.claim": "claim",
    "StreamOps.ack": "ack",
    "StreamOps.lag": "lag",
    "ProduceOps.write": "produce",
}


def cpu_seconds() -> float:
    return time.process_time()  # CLOCK_PROCESS_CPUTIME_ID: every thread, finer than os.times()


class RedisCalls:
    """Per-command call counts of one Redis (INFO commandstats)."""

    def __init__(self, redis_url: str) -> None:
        self.client = redis.Redis.from_url(redis_url, decode_responses=True)

    def snapshot(self) -> dict[str, int]:
        stats: dict[str, Any] = self.client.info("commandstats")
        return {name.removeprefix("cmdstat_"): int(values["calls"]) for name, values in stats.items()}

    @staticmethod
    def diff(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
        return {name: calls - before.get(name, 0) for name, calls in after.items()
                if calls - before.get(name, 0) > 0}

    def close(self) -> None:
        self.client.close()


def per_thousand(counts: dict[str, int], messages: int, names: tuple[str, ...] = ()) -> dict[str, float]:
    """counts per 1,000 messages (only `names` when given)."""
    chosen = names or tuple(counts)
    return {name: round(1000 * counts.get(name, 0) / max(messages, 1), 2) for name in chosen}


class ThreadHops:
    """`trio.to_thread.run_sync` calls by kind, while `counting()` is active."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()

    @contextmanager
    def counting(self) -> Iterator[ThreadHops]:
        original: Callable[..., Any] = trio.to_thread.run_sync
        counts = self.counts

        async def counted(function: Callable[..., Any], *args: Any, **options: Any) -> Any:
            name = getattr(function, "__qualname__", "")
            counts[HOP_KINDS.get(name, "other")] += 1
            return await original(function, *args, **options)

        trio.to_thread.run_sync = counted  # type: ignore[assignment]
        try:
            yield self
        finally:
            trio.to_thread.run_sync = original  # type: ignore[assignment]

    def take(self) -> dict[str, int]:
        """The counts so far, and start again from zero."""
        counts = dict(self.counts)
        self.counts.clear()
        return counts
