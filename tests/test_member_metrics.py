"""The member Prometheus collector reads MemberStats at scrape time (pure: no I/O)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from rsc.member.metrics import MemberCollector
from rsc.member.stats import MemberStats


def test_member_metrics_expose_processed_failed_in_flight_and_lag_per_owned_shard():
    stats = MemberStats(member_id="m-1", member_epoch=7, workers=4,
                        owned_shards=("{orders:v1:0}", "{orders:v1:1}"))
    registry = CollectorRegistry()
    registry.register(MemberCollector(lambda: [stats]))
    stats.processed, stats.failed = 12, 2
    stats.in_flight = {"{orders:v1:0}": 3}
    stats.lag = {"{orders:v1:0}": 40, "{orders:v1:1}": None}
    text = generate_latest(registry).decode()
    assert 'rsc_member_processed_total{member="m-1"} 12.0' in text
    assert 'rsc_member_failed_total{member="m-1"} 2.0' in text
    assert 'rsc_member_in_flight{member="m-1",shard="{orders:v1:0}"} 3.0' in text
    assert 'rsc_member_in_flight{member="m-1",shard="{orders:v1:1}"} 0.0' in text
    assert 'rsc_member_lag{member="m-1",shard="{orders:v1:0}"} 40.0' in text
    assert 'shard="{orders:v1:1}"} 40' not in text  # unknown lag is left out, not reported as 0
    assert 'rsc_member_epoch{member="m-1"} 7.0' in text
    stats.processed = 13  # read at scrape time: the next scrape moves
    assert 'rsc_member_processed_total{member="m-1"} 13.0' in generate_latest(registry).decode()
