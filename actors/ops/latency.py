"""Request latency inside the coordinator: from a frame's arrival to its answer written.

Pure and cheap (one bisect and one add per request, no lock: the server runs on
one trio thread): log-spaced buckets from 10 us to about 100 s, 8 per factor of
two, so a quantile read from them is within 9 % of the true value. The server
records every answered request; the metrics endpoint exports the buckets as
`rsc_request_seconds` and the bench reads quantiles of a window from two
snapshots, which separates what the coordinator adds from what the network and
a load generator add to a latency measured at the client.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

SMALLEST_S = 10e-6
STEPS_PER_DOUBLING = 8
DOUBLINGS = 24  # 10 us * 2**24 is about 168 s
BOUNDS: tuple[float, ...] = tuple(SMALLEST_S * 2 ** (i / STEPS_PER_DOUBLING)
                                  for i in range(DOUBLINGS * STEPS_PER_DOUBLING + 1))


class LatencyHistogram:
    """Counts per bucket (`counts[i]`: at most `BOUNDS[i]`; the last one: above every bound)."""

    def __init__(self) -> None:
        self.counts = [0] * (len(BOUNDS) + 1)
        self.sum_seconds = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(BOUNDS, seconds)] += 1
        self.sum_seconds += seconds

    def snapshot(self) -> list[int]:
        return list(self.counts)


def quantile(counts: Sequence[int], q: float) -> float | None:
    """The upper bound of the bucket holding the q-quantile (None without observations)."""
    total = sum(counts)
    if total == 0:
        return None
    rank = max(1, round(q * total))
    seen = 0
    for index, count in enumerate(counts):
        seen += count
        if seen >= rank:
            return BOUNDS[min(index, len(BOUNDS) - 1)]
    return BOUNDS[-1]


def window(before: Sequence[int], after: Sequence[int]) -> list[int]:
    """The counts observed between two snapshots."""
    return [a - b for a, b in zip(after, before, strict=True)]


def cumulative(counts: Sequence[int]) -> list[tuple[float, int]]:
    """(upper bound, observations at most that) per bucket, the last one +Inf (Prometheus' shape)."""
    buckets, seen = [], 0
    for index, count in enumerate(counts):
        seen += count
        buckets.append((BOUNDS[index] if index < len(BOUNDS) else float("inf"), seen))
    return buckets


requests = LatencyHistogram()  # the coordinator's: every request answered on a session
