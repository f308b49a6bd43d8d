"""K11: what producers expose to prometheus_client, read at scrape time.

Every `Producer` (the trio one under `open_producer`, and so the asyncio and thread ones)
registers itself here while it is open; one collector on prometheus_client's default
registry reports them per stream prefix, so an application that serves
`prometheus_client.generate_latest()` (or `start_http_server`) shows its producers without
wiring anything, and `rsc produce --metrics-port` serves the same:

- `rsc_producer_sent_total{prefix}`: records in Redis;
- `rsc_producer_unconfirmed{prefix}`: records handed to a producer and not yet confirmed
  (D2; with `min_replicas`, not yet held by that many replicas, K5);
- `rsc_producer_oldest_unconfirmed_seconds{prefix}`: how long the oldest of them has waited
  (0 with none): a stuck producer (no routing, a WAIT shortfall, a refused permission)
  shows here, RscProducerStuck pages on it;
- `rsc_replica_wait_shortfall_total{prefix}`: WAITs that found fewer replicas than asked
  (K5, K11).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import Protocol

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

__all__ = ["ProducerCollector", "ProducerFigures", "register_producer"]


class ProducerFigures(Protocol):
    """What a producer reports (rsc/member/producer.py `Producer`)."""

    @property
    def stream_prefix(self) -> str: ...

    @property
    def sent(self) -> int: ...

    @property
    def unconfirmed(self) -> int: ...

    def oldest_unconfirmed_seconds(self) -> float: ...

    @property
    def replica_shortfalls(self) -> int: ...


class ProducerCollector(Collector):
    """The figures of every live producer registered with it, summed per prefix (the oldest
    wait is the largest)."""

    def __init__(self) -> None:
        self._producers: weakref.WeakSet[ProducerFigures] = weakref.WeakSet()  # type: ignore[type-var]
        self._lock = threading.Lock()

    def add(self, producer: ProducerFigures) -> None:
        with self._lock:
            self._producers.add(producer)

    def discard(self, producer: ProducerFigures) -> None:
        with self._lock:
            self._producers.discard(producer)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            producers = list(self._producers)
        sent = CounterMetricFamily("rsc_producer_sent", "Records a producer has in Redis",
                                   labels=["prefix"])
        unconfirmed = GaugeMetricFamily("rsc_producer_unconfirmed",
                                        "Records handed to a producer, not yet confirmed (D2, K5)",
                                        labels=["prefix"])
        oldest = GaugeMetricFamily("rsc_producer_oldest_unconfirmed_seconds",
                                   "How long the oldest unconfirmed record has waited",
                                   labels=["prefix"])
        shortfall = CounterMetricFamily("rsc_replica_wait_shortfall",
                                        "WAITs that found fewer replicas than --min-replicas (K11)",
                                        labels=["prefix"])
        totals: dict[str, list[float]] = {}
        for producer in producers:
            row = totals.setdefault(producer.stream_prefix, [0, 0, 0.0, 0])
            row[0] += producer.sent
            row[1] += producer.unconfirmed
            row[2] = max(row[2], producer.oldest_unconfirmed_seconds())
            row[3] += producer.replica_shortfalls
        for prefix, (sent_n, unconfirmed_n, oldest_s, shortfall_n) in sorted(totals.items()):
            sent.add_metric([prefix], sent_n)
            unconfirmed.add_metric([prefix], unconfirmed_n)
            oldest.add_metric([prefix], oldest_s)
            shortfall.add_metric([prefix], shortfall_n)
        yield from (sent, unconfirmed, oldest, shortfall)


_COLLECTOR: ProducerCollector | None = None
_COLLECTOR_LOCK = threading.Lock()


def default_collector(registry: CollectorRegistry = REGISTRY) -> ProducerCollector:
    """The one collector on prometheus_client's default registry (registered on first use)."""
    global _COLLECTOR
    with _COLLECTOR_LOCK:
        if _COLLECTOR is None:
            _COLLECTOR = ProducerCollector()
            registry.register(_COLLECTOR)
        return _COLLECTOR


def register_producer(producer: ProducerFigures) -> None:
    """A producer opened: its figures are on the default registry until it is collected."""
    default_collector().add(producer)
