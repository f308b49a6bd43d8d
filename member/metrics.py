"""Prometheus metrics of members: processed, failed, in-flight and lag per owned shard.

A collector that reads each member's `MemberStats` at scrape time, so the hot
path only bumps plain integers:

    registry = CollectorRegistry()
    registry.register(MemberCollector(lambda: [m.stats for m in listener.members]))
    prometheus_client.start_http_server(9465, registry=registry)

`rsc consume --metrics-port P` does exactly this for its members.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rsc.member.stats import MemberStats

_COUNTERS = (
    ("processed", "rsc_member_processed", "Handler calls that succeeded"),
    ("failed", "rsc_member_failed", "Handler calls that raised"),
    ("acked", "rsc_member_acked", "Entries acknowledged in Redis"),
    ("dead_lettered", "rsc_member_dead_lettered", "Entries moved to the dead-letter stream"),
    ("redelivered", "rsc_member_redelivered_entries",
     "Entries claimed with a delivery count of 10 or more (a crash loop, P1)"),
    ("gone_pending", "rsc_member_gone_pending_entries",
     "Pending entries whose body was trimmed away, acked without a handler call (P1)"),
    ("ack_refusals", "rsc_member_ack_refusals", "Acks refused because the owner token named another member"),
    ("fences", "rsc_member_fences", "Times the member fenced itself or was fenced"),
)


class MemberCollector(Collector):
    """Exposes the stats of the members `source()` returns, labelled by memberId."""

    def __init__(self, source: Callable[[], Iterable[MemberStats]]) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        stats = list(self.source())
        for attribute, name, documentation in _COUNTERS:
            family = CounterMetricFamily(name, documentation, labels=["member"])
            for member in stats:
                family.add_metric([member.member_id], getattr(member, attribute))
            yield family
        epoch = GaugeMetricFamily("rsc_member_epoch", "The member's epoch", labels=["member"])
        workers = GaugeMetricFamily("rsc_member_workers", "Workers in use (maxConcurrency)",
                                    labels=["member"])
        owned = GaugeMetricFamily("rsc_member_owned_shards", "Shards the member holds", labels=["member"])
        in_flight = GaugeMetricFamily("rsc_member_in_flight", "Entries handed to workers, not yet acked",
                                      labels=["member", "shard"])
        lag = GaugeMetricFamily("rsc_member_lag", "Entries of an owned shard not yet delivered to the group",
                                labels=["member", "shard"])
        for member in stats:
            epoch.add_metric([member.member_id], member.member_epoch)
            workers.add_metric([member.member_id], member.workers)
            owned.add_metric([member.member_id], len(member.owned_shards))
            for shard in member.owned_shards:
                in_flight.add_metric([member.member_id, shard], member.in_flight.get(shard, 0))
                shard_lag = member.lag.get(shard)
                if shard_lag is not None:
                    lag.add_metric([member.member_id, shard], shard_lag)
        yield from (epoch, workers, owned, in_flight, lag)
