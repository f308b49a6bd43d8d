"""The coordinator-wide shard pipelines (actors/redis_io/shard_work.py) on a real redis-server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
import trio

from rsc.actors.core.prefix_io import RetentionPass
from rsc.actors.redis_io import shard_ops
from rsc.actors.redis_io.shard_work import ShardWork


@pytest.fixture
def client(redis_url: str) -> Iterator[Any]:
    connection = redis.Redis.from_url(redis_url, decode_responses=True)
    shard_ops.load_scripts(connection)
    yield connection
    connection.close()


def stream_with_group(client: Any, stream: str, entries: int, acked: int) -> None:
    client.xgroup_create(stream, "g", id="0", mkstream=True)
    ids = [client.xadd(stream, {"n": str(n)}) for n in range(entries)]
    if acked:
        client.xreadgroup("g", "c", {stream: ">"}, count=acked)
        client.xack(stream, "g", *ids[:acked])


def acked_pass(stream: str) -> RetentionPass:
    return RetentionPass((stream,), ("g",), acked=True, max_length=None, max_age_ms=None)


async def test_t1_many_prefixes_passes_share_one_round_trip(client, nursery):
    failed: list[str] = []
    work = ShardWork(client, deadline_s=5, failed_pass=failed.append)
    streams = [f"{{p{n}:v1:0}}" for n in range(10)]
    for stream in streams:
        stream_with_group(client, stream, entries=5, acked=3)
    done = [work.retention(f"p{n}", acked_pass(stream)) for n, stream in enumerate(streams)]
    nursery.start_soon(work.run)
    with trio.fail_after(10):
        for event in done:
            await event.wait()
    assert [client.xlen(stream) for stream in streams] == [2] * 10  # what every group acked went
    assert work.round_trips == 1 and work.passes == 10 and failed == []


async def test_t1_a_failed_pass_is_reported_and_the_others_still_trim(client, nursery):
    failed: list[str] = []
    work = ShardWork(client, deadline_s=5, failed_pass=failed.append)
    stream_with_group(client, "{good:v1:0}", entries=4, acked=4)
    client.set("{bad:v1:0}", "not a stream")  # the script fails on this shard
    done = [work.retention("bad", acked_pass("{bad:v1:0}")),
            work.retention("good", acked_pass("{good:v1:0}"))]
    nursery.start_soon(work.run)
    with trio.fail_after(10):
        for event in done:
            await event.wait()
    assert failed == ["bad"]
    assert client.xlen("{good:v1:0}") == 0


async def test_totals_of_many_prefixes_in_one_call_match_each_prefixes_own(client, nursery):
    work = ShardWork(client, deadline_s=5)
    nursery.start_soon(work.run)
    stream_with_group(client, "{a:v1:0}", entries=6, acked=2)
    stream_with_group(client, "{b:v1:0}", entries=3, acked=0)
    client.xtrim("{a:v1:0}", minid="0-0")  # nothing removed, lag stays Redis's own
    client.xdel("{b:v1:0}", client.xrange("{b:v1:0}")[-1][0])  # a deletion: Redis gives no lag
    with trio.fail_after(10):
        together = await work.totals_many([(("{a:v1:0}",), ("g",)), (("{b:v1:0}",), ("g",))],
                                          trio.current_time() + 5)
    assert together == [shard_ops.group_totals(client, ["{a:v1:0}"], ["g"]),
                        shard_ops.group_totals(client, ["{b:v1:0}"], ["g"])]
    assert together[0] is not None and together[0]["g"].lag == 4
    assert together[1] is not None and together[1]["g"].lag == 2


async def test_totals_past_the_deadline_are_none(client):
    work = ShardWork(client, deadline_s=5)  # never run: nothing answers
    with trio.fail_after(5):
        assert await work.totals(("{a:v1:0}",), ("g",), trio.current_time() + 0.05) is None


async def test_t1_a_pass_over_many_shards_goes_in_slices(client, nursery):
    work = ShardWork(client, deadline_s=5, retention_streams=4, pause_s=0)
    streams = tuple(f"{{big:v1:{n}}}" for n in range(10))
    for stream in streams:
        stream_with_group(client, stream, entries=2, acked=2)
    done = work.retention("big", RetentionPass(streams, ("g",), acked=True, max_length=None,
                                               max_age_ms=None))
    nursery.start_soon(work.run)
    with trio.fail_after(10):
        await done.wait()
    assert all(client.xlen(stream) == 0 for stream in streams)
    assert work.round_trips == 3 and work.passes == 1


async def test_t1_a_small_pass_queued_behind_a_big_one_waits_for_one_slice_not_all(client, nursery):
    """Prefixes take turns, a slice each: a quiet prefix's pass (its checkpoint's T1 wait)
    is not held behind every slice of a busy prefix's pass over many shards."""
    work = ShardWork(client, deadline_s=5, retention_streams=4, pause_s=0)
    big = tuple(f"{{big:v1:{n}}}" for n in range(40))
    for stream in (*big, "{small:v1:0}"):
        stream_with_group(client, stream, entries=2, acked=2)
    big_done = work.retention("big", RetentionPass(big, ("g",), acked=True, max_length=None,
                                                   max_age_ms=None))
    small_done = work.retention("small", acked_pass("{small:v1:0}"))
    round_trips_when: dict[str, int] = {}

    async def note(name: str, event: trio.Event) -> None:
        await event.wait()
        round_trips_when[name] = work.round_trips

    async with trio.open_nursery() as waiting:
        waiting.start_soon(note, "small", small_done)
        waiting.start_soon(note, "big", big_done)
        nursery.start_soon(work.run)
        with trio.fail_after(10):
            await big_done.wait()
    assert round_trips_when == {"small": 2, "big": 11}  # FIFO would have made it 11 and 10
    assert client.xlen("{small:v1:0}") == 0 and all(client.xlen(s) == 0 for s in big)
    assert work.passes == 2
