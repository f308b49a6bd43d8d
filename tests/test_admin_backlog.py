"""Issue 34: the backlog figure (rsc/common/lag.py) and `rsc admin watch`'s change lines.

Pure rules first; then a real redis-server and coordinator: a member that reads ahead
without acking shows its unacked entries as backlog (never "lag 0"), and `watch` prints a
bounded number of lines while a member joins, entries flow and it leaves.
"""

from __future__ import annotations

import json
import re

import pytest
import redis
import trio

from rsc.common.lag import backlog, backlog_floor, total_backlog
from rsc.console.views import group_view
from rsc.member.session import open_session
from rsc.protocol import encode
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import JOIN_EPOCH, LEAVE_EPOCH
from tests.test_admin_cli import Output, rsc_admin, wait_for_lines

PREFIX, GROUP = "orders", "billing"
SHARD = "{orders:v1:0}"


# --- the pure rule --------------------------------------------------------------------------


def test_backlog_is_undelivered_plus_unacked():
    assert backlog(0, 0) == 0
    assert backlog(21, 1679) == 1700
    assert backlog(0, 1700) == 1700, "members read ahead: nothing undelivered, still behind"
    assert backlog(None, 5) is None and backlog(3, None) is None


def test_backlog_refuses_negative_counts():
    with pytest.raises(ValueError, match="undelivered -1"):
        backlog(-1, 0)


def test_backlog_floor_counts_what_is_known():
    assert backlog_floor(None, 7) == 7 and backlog_floor(2, 7) == 9 and backlog_floor(None, None) == 0


def test_total_backlog_is_unknown_when_any_shard_is():
    assert total_backlog([]) == 0
    assert total_backlog([(1, 2), (0, 10)]) == 13
    assert total_backlog([(1, 2), (None, 10)]) is None


# --- against a real coordinator --------------------------------------------------------------


def join(member_id: str) -> m.Heartbeat:
    return m.Heartbeat(request_id=0, stream_prefix=PREFIX, consumer_group=GROUP,
                       member_id=member_id, member_epoch=JOIN_EPOCH, owned_shards=(), capacity=1)


async def set_shards(admin, count: int) -> None:
    response = await admin.request(m.SetShardCount(request_id=0, stream_prefix=PREFIX,
                                                   consumer_group=GROUP, shard_count=count))
    assert response.status == Status.OK, response


async def describe(admin) -> m.GroupDescription:
    response = await admin.request(m.DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                                   consumer_group=GROUP))
    assert isinstance(response, m.GroupDescription) and response.status == Status.OK, response
    return response


async def test_a_member_that_reads_ahead_shows_its_unacked_entries_as_backlog(coordinator_factory):
    coordinator = await coordinator_factory(lease_ttl_ms=60_000)
    client = redis.Redis.from_url(coordinator.redis_url, decode_responses=True)
    try:
        async with open_session(coordinator.url, "admin") as admin, \
                open_session(coordinator.url, "member") as member:
            await set_shards(admin, 1)
            assert (await member.request(join("reader"))).status == Status.OK
            pipe = client.pipeline(transaction=False)
            for index in range(1700):
                pipe.xadd(SHARD, {"k": str(index)})
            pipe.execute()
            # the member reads 1679 entries ahead and acks none of them
            read = client.xreadgroup(GROUP, "reader", {SHARD: ">"}, count=1679)
            assert len(read[0][1]) == 1679
            with trio.fail_after(20):
                while True:
                    described = await describe(admin)
                    [shard] = described.shards
                    if shard.pending == 1679 and shard.lag == 21:
                        break
                    await trio.sleep(0.05)
            raw = await admin.request(m.DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                                      consumer_group=GROUP))
        code, text, err = await rsc_admin(coordinator.url, "describe", PREFIX, GROUP)
        assert (code, err) == (0, "")
        assert "backlog         1700 (undelivered 21, unacked 1679" in text
        assert "lag 0" not in text and "pending" not in text
        [row] = [line for line in text.splitlines() if line.startswith("│ v1:0")]
        assert [cell.strip() for cell in row.split("│")[6:9]] == ["1700", "21", "1679"]
        code, text, err = await rsc_admin(coordinator.url, "list")
        [row] = [line for line in text.splitlines() if GROUP in line]
        assert (code, err) == (0, "") and "1700" in row and "1679" in row
        page = group_view(json.loads(encode(raw)))
        assert (page["backlog"], page["lag"], page["pending"]) == (1700, 21, 1679)
        assert page["shards"][0]["backlog"] == 1700
    finally:
        client.close()


async def test_watch_prints_a_bounded_number_of_lines_while_entries_flow(coordinator_factory,
                                                                        nursery):
    """A join, entries produced and read for a while, a leave and a delete: a few lines, none
    about lengths, offsets or backlog, although the coordinator pushed those changes."""
    # the member sends one heartbeat: long intervals keep it neither overdue nor expired
    coordinator = await coordinator_factory(lease_ttl_ms=60_000, heartbeat_interval_ms=30_000)
    client = redis.Redis.from_url(coordinator.redis_url, decode_responses=True)
    output = Output()
    finished = trio.Event()
    result: dict[str, tuple[int, str, str]] = {}

    async def run_watch() -> None:
        result["watch"] = await rsc_admin(coordinator.url, "watch", PREFIX, GROUP,
                                          "--duration", "60", stdout=output)
        finished.set()

    try:
        async with open_session(coordinator.url, "admin") as admin, \
                open_session(coordinator.url, "admin") as observer, \
                open_session(coordinator.url, "member") as member:
            await set_shards(admin, 1)
            with trio.fail_after(40):
                nursery.start_soon(run_watch)
                await wait_for_lines(output, 2)  # the header and the group as it is
                joined = await member.request(join("a"))
                assert joined.status == Status.OK
                while "member a joined" not in "".join(output.lines()):
                    await trio.sleep(0.02)
                first = await observer.request(m.DescribeGroup(
                    request_id=0, stream_prefix=PREFIX, consumer_group=GROUP, watch=True))
                assert isinstance(first, m.GroupDescription)
                settled = len(output.lines())
                # entries flow: the observer sees pushes whose only change is the shard figures
                lengths = {first.shards[0].length}
                while len(lengths) < 4:
                    client.xadd(SHARD, {"k": "x"})
                    client.xreadgroup(GROUP, "a", {SHARD: ">"}, count=1)
                    with trio.move_on_after(0.5):
                        push = await observer.pushes.receive()
                        assert isinstance(push, m.GroupDescription)
                        lengths.add(push.shards[0].length)
                assert len(output.lines()) == settled, output.lines()[settled:]
                left = await member.request(m.Heartbeat(
                    request_id=0, stream_prefix=PREFIX, consumer_group=GROUP, member_id="a",
                    member_epoch=LEAVE_EPOCH))
                assert left.status == Status.OK
                while "member a left" not in "".join(output.lines()):
                    await trio.sleep(0.02)
                deleted = await admin.request(m.DeleteGroup(request_id=0, stream_prefix=PREFIX,
                                                            consumer_group=GROUP))
                assert deleted.status == Status.OK, deleted
                await finished.wait()
    finally:
        client.close()
    code, _, err = result["watch"]
    assert (code, err) == (0, "")
    lines = output.lines()
    assert lines[0].startswith("watching orders / billing on ")
    assert all(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ  ", line) for line in lines[1:]), lines
    assert lines[-1].endswith("group orders / billing was deleted; watch ends")
    assert len(lines) <= 8, lines
    assert not any(word in line for line in lines for word in ("backlog", "length", "offset")), lines
