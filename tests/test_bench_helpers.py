"""The pure parts of the latency and rebalance scenarios and of the bench's cost counters."""

from __future__ import annotations

import trio

from bench.costs import RedisCalls, ThreadHops, per_thousand
from bench.latency import Pacer, _median_round
from bench.rebalance import keys_for_each_shard
from rsc.protocol.routing import shard_for_key


def test_the_pacer_sends_what_is_due_warm_up_first_then_measured() -> None:
    pacer = Pacer(rate=1000, warmup_s=1.0, measure_s=2.0, start=100.0)
    assert pacer.due(100.0) == ("w", 1)
    pacer.records("w", 1, "0")
    assert pacer.due(100.0005) == ("w", 0)  # the next one is due at 100.001
    assert pacer.pause(100.0005) == 0.001  # never less than one tick
    step = pacer.due(101.5)  # behind: everything due so far goes in one batch
    assert step == ("m", 1500)
    phase, count = step
    records = pacer.records(phase, count, "42")
    assert len(records) == 1500 and records[0] == ("m1", "42") and pacer.sent == 1501
    assert pacer.due(103.0) is None


def test_each_key_names_its_own_shard() -> None:
    keys = keys_for_each_shard(1000)
    assert [shard_for_key(key, 1000) for key in keys] == list(range(1000))


def test_the_median_round_takes_each_figure_s_median() -> None:
    def round_(p99: float, sent: int, hops: int) -> dict[str, object]:
        return {"consumer": {"p50Ms": 1.0, "p99Ms": p99, "p999Ms": 2 * p99, "maxMs": 3 * p99,
                             "cpuSeconds": 0.5, "threadHops": {"read": hops}},
                "producer": {"perSecond": 100.0, "sent": sent, "sentInAll": 2 * sent,
                             "cpuSeconds": 0.25},
                "redisCalls": {"xreadgroup": hops, "xack": 2 * hops}}

    figures = _median_round([round_(9.0, 1000, 10), round_(1.0, 1000, 20), round_(4.0, 1000, 30)])
    assert figures["p99Ms"] == 4.0 and figures["maxMs"] == 12.0
    assert figures["messages"] == 3000
    assert figures["consumerCpuMsPer1k"] == 500.0
    assert figures["xreadgroupPer1k"] == 10.0  # 60 reads over 6,000 messages sent in all
    assert figures["threadHopsPer1k"] == {"read": 10.0}


def test_redis_call_counts_are_differences_per_thousand_messages() -> None:
    counts = RedisCalls.diff({"xack": 5, "ping": 1}, {"xack": 25, "ping": 1, "xreadgroup": 10})
    assert counts == {"xack": 20, "xreadgroup": 10}
    assert per_thousand(counts, 2000, ("xreadgroup", "xautoclaim")) == {"xreadgroup": 5.0,
                                                                         "xautoclaim": 0.0}


class StreamOps:
    """Named as the member's: a hop is known by what runs in the thread (its qualname)."""

    def ack(self) -> int:
        return 1


async def test_thread_hops_are_counted_by_kind_and_trio_is_restored() -> None:
    original = trio.to_thread.run_sync
    hops = ThreadHops()
    with hops.counting():
        assert await trio.to_thread.run_sync(StreamOps().ack) == 1
        await trio.to_thread.run_sync(lambda: None)
    await trio.to_thread.run_sync(StreamOps().ack)  # no longer counted
    assert trio.to_thread.run_sync is original
    assert hops.take() == {"ack": 1, "other": 1}
    assert hops.take() == {}
