"""The request latency histogram (actors/ops/latency.py) and its export as rsc_request_seconds."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from rsc.actors.ops import latency
from rsc.actors.ops.metrics import CoordinatorMetrics


@given(st.lists(st.floats(min_value=20e-6, max_value=100.0), min_size=1, max_size=300),
       st.sampled_from([0.5, 0.9, 0.99, 1.0]))
def test_a_quantile_is_within_one_bucket_above_the_exact_one(samples, q):
    histogram = latency.LatencyHistogram()
    for sample in samples:
        histogram.observe(sample)
    exact = sorted(samples)[max(1, round(q * len(samples))) - 1]
    estimate = latency.quantile(histogram.snapshot(), q)
    assert estimate is not None
    assert exact <= estimate <= exact * 2 ** (1 / latency.STEPS_PER_DOUBLING) * (1 + 1e-9)


def test_no_observations_have_no_quantile():
    assert latency.quantile(latency.LatencyHistogram().snapshot(), 0.99) is None


def test_a_window_holds_only_what_came_between_two_snapshots():
    histogram = latency.LatencyHistogram()
    histogram.observe(5.0)
    before = histogram.snapshot()
    for _ in range(99):
        histogram.observe(0.001)
    inside = latency.window(before, histogram.snapshot())
    assert sum(inside) == 99
    assert latency.quantile(inside, 1.0) < 0.0011


def test_cumulative_buckets_end_with_inf_and_every_observation():
    histogram = latency.LatencyHistogram()
    for seconds in (1e-7, 0.003, 500.0):  # below the first bound and above the last
        histogram.observe(seconds)
    buckets = latency.cumulative(histogram.snapshot())
    assert buckets[0] == (latency.BOUNDS[0], 1)
    assert buckets[-1] == (math.inf, 3)
    counts = [count for _, count in buckets]
    assert counts == sorted(counts)


def test_the_metrics_endpoint_exports_the_server_histogram(monkeypatch):
    histogram = latency.LatencyHistogram()
    for seconds in (0.0005, 0.0005, 0.2):
        histogram.observe(seconds)
    monkeypatch.setattr(latency, "requests", histogram)
    text = CoordinatorMetrics().exposition().decode()
    lines = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
             if line.startswith("rsc_request_seconds")}
    assert lines["rsc_request_seconds_count"] == 3
    assert math.isclose(lines["rsc_request_seconds_sum"], 0.201)
    assert lines['rsc_request_seconds_bucket{le="0.00064"}'] == 2
    assert lines['rsc_request_seconds_bucket{le="0.16384"}'] == 2
    assert lines['rsc_request_seconds_bucket{le="0.32768"}'] == 3
    assert lines['rsc_request_seconds_bucket{le="+Inf"}'] == 3
