"""L6 (docs/protocol.md, "Notes for a member in another language"): the page is tested the way
a Node.js member was written from it. tests/node_member/member.mjs is a member in plain Node.js
(its WebSocket and a small RESP2 client, no packages) written from docs/protocol.md alone; here it
joins a real coordinator on a real redis-server, handles every message exactly once and leaves.
Skipped, with the reason, where no `node` with a global WebSocket is installed."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis
import trio

from rsc.member.producer import open_producer
from rsc.member.session import open_session
from rsc.protocol import DescribeGroup, GroupDescription
from tests.test_member_support import set_shards, wait_for_stable_members

MEMBER = Path(__file__).parent / "node_member" / "member.mjs"
NODE_ARGS = ["--experimental-websocket", "--no-warnings"]
PREFIX, GROUP = "nodepage", "billing"


def node_skip_reason() -> str | None:
    node = shutil.which("node")
    if node is None:
        return "no `node` on PATH: the Node.js member from docs/protocol.md cannot run"
    probe = subprocess.run(
        [node, *NODE_ARGS, "-e", "process.exit(typeof WebSocket === 'function' ? 0 : 1)"],
        capture_output=True, timeout=30, check=False)
    if probe.returncode != 0:
        return f"{node} has no global WebSocket with --experimental-websocket (Node.js 20 or later)"
    return None


SKIP_REASON = node_skip_reason()
pytestmark = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")


class NodeMember:
    """One member.mjs process; its stdout JSON lines gathered in `handled`."""

    def __init__(self, url: str, redis_url: str, member_id: str) -> None:
        parts = urlsplit(redis_url)
        self.args = [shutil.which("node") or "node", *NODE_ARGS, str(MEMBER), url,
                     f"{parts.hostname}:{parts.port}", PREFIX, GROUP, member_id]
        self.member_id = member_id
        self.handled: list[dict[str, str | None]] = []
        self.process: trio.Process | None = None

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.process = await trio.lowlevel.open_process(self.args, stdout=subprocess.PIPE)
        task_status.started()
        assert self.process.stdout is not None
        buffered = b""
        while chunk := await self.process.stdout.receive_some():
            buffered += chunk
            *lines, buffered = buffered.split(b"\n")
            self.handled.extend(json.loads(line) for line in lines if line)

    async def leave(self) -> int:
        """SIGTERM (by pid), then wait (bounded) for it to leave and exit."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        with trio.fail_after(20):
            return await self.process.wait()

    def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()


async def produce(url: str, redis_url: str, count: int) -> set[str]:
    async with open_producer(url, redis_url, PREFIX) as producer:
        for start in range(0, count, 500):
            await producer.send_batch([(f"k{n % 97}", f"v{n}") for n in range(start, start + 500)])
    return {f"v{n}" for n in range(count)}


async def wait_until_handled(members: list[NodeMember], expected: set[str]) -> None:
    with trio.fail_after(60):
        while not expected <= {str(line["value"]) for m in members for line in m.handled}:
            await trio.sleep(0.05)


async def described(url: str) -> GroupDescription:
    async with open_session(url, "admin") as session:
        answer = await session.request(DescribeGroup(
            request_id=0, stream_prefix=PREFIX, consumer_group=GROUP))
    assert isinstance(answer, GroupDescription), answer
    return answer


def pending_counts(redis_url: str, streams: tuple[str, ...]) -> dict[str, int]:
    client = redis.Redis.from_url(redis_url)
    try:
        return {stream: int(client.xpending(stream, GROUP)["pending"]) for stream in streams}
    finally:
        client.close()


async def run_members(coordinator, count: int, messages: int) -> tuple[list[NodeMember], tuple[str, ...]]:
    url, redis_url = coordinator.url, coordinator.redis_url
    streams = await set_shards(url, PREFIX, GROUP, 4)
    members = [NodeMember(url, redis_url, f"node-member-{n}") for n in range(count)]
    try:
        async with trio.open_nursery() as nursery:
            for member in members:
                await nursery.start(member.run)
            await wait_for_stable_members(url, PREFIX, GROUP, count)
            expected = await produce(url, redis_url, messages)
            await wait_until_handled(members, expected)
            codes = [await member.leave() for member in members]
        assert codes == [0] * count, codes
    finally:
        for member in members:
            member.kill()
    values = Counter(str(line["value"]) for m in members for line in m.handled)
    assert set(values) == expected, sorted(set(values) ^ expected)[:10]
    twice = [value for value, seen in values.items() if seen > 1]
    assert not twice, twice[:10]  # exactly once: no rebalance happened while reading
    assert not (await described(url)).members, "every node member left (-1)"
    assert pending_counts(redis_url, streams) == dict.fromkeys(streams, 0)
    return members, streams


async def test_l6_a_member_written_from_the_protocol_page_in_node_consumes_every_message(coordinator):
    [member], streams = await run_members(coordinator, 1, 2000)
    assert {line["shard"] for line in member.handled} == set(streams)
    # the key routes the message (crc32 mod shardCount) and comes through unchanged
    assert all(line["key"] == f"k{int(str(line['value'])[1:]) % 97}" for line in member.handled)


async def test_l6_two_node_members_split_the_shards_and_each_message_is_handled_once(coordinator):
    members, streams = await run_members(coordinator, 2, 2000)
    shards = [{line["shard"] for line in member.handled} for member in members]
    assert all(len(held) == 2 for held in shards), shards  # H2: 4 shards, 2 each
    assert shards[0].isdisjoint(shards[1]), shards  # H3: never two owners
    assert shards[0] | shards[1] == set(streams)


async def test_l6_a_node_member_gives_up_shards_to_a_second_one_by_the_page_and_nothing_is_lost(
        coordinator):
    """The revoke path of the page: the first member reports REVOKED what the second one's join
    takes away (H3, H4), the second recovers what was left pending (M5 step 1)."""
    url, redis_url = coordinator.url, coordinator.redis_url
    streams = await set_shards(url, PREFIX, GROUP, 4)
    first, second = (NodeMember(url, redis_url, f"node-member-{n}") for n in (1, 2))
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(first.run)
            await wait_for_stable_members(url, PREFIX, GROUP, 1)
            before = await produce(url, redis_url, 1000)
            await wait_until_handled([first], before)
            await nursery.start(second.run)
            await wait_for_stable_members(url, PREFIX, GROUP, 2)
            async with open_producer(url, redis_url, PREFIX) as producer:
                await producer.send_batch([(f"k{n % 97}", f"w{n}") for n in range(1000)])
            after = {f"w{n}" for n in range(1000)}
            await wait_until_handled([first, second], after)
            codes = [await first.leave(), await second.leave()]
        assert codes == [0, 0], codes
    finally:
        first.kill()
        second.kill()
    values = Counter(str(line["value"]) for m in (first, second) for line in m.handled)
    assert set(values) == before | after, sorted(set(values) ^ (before | after))[:10]  # 0 lost
    # produced once the group was stable: read by the shard's one owner only (H3)
    assert all(values[value] == 1 for value in after), [v for v in after if values[v] > 1][:10]
    assert any(str(line["value"]) in after for line in second.handled), "the second took part"
    later = [{line["shard"] for line in m.handled if str(line["value"]) in after}
             for m in (first, second)]
    assert later[0].isdisjoint(later[1]) and len(later[0]) == len(later[1]) == 2, later
    assert not (await described(url)).members
    assert pending_counts(redis_url, streams) == dict.fromkeys(streams, 0)


async def test_l6_a_removed_node_member_rejoins_by_the_status_table_and_nothing_is_lost(coordinator):
    """`removeMember` while it reads: its next heartbeat gets UNKNOWN_MEMBER_ID, and as the page's
    status table says it forgets what it held and rejoins with epoch 0 and the same memberId."""
    from rsc.protocol import MemberRemoved, RemoveMember, Status

    url, redis_url = coordinator.url, coordinator.redis_url
    streams = await set_shards(url, PREFIX, GROUP, 4)
    member = NodeMember(url, redis_url, "node-member-removed")
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(member.run)
            await wait_for_stable_members(url, PREFIX, GROUP, 1)
            epoch_before = (await described(url)).members[0].member_epoch
            before = await produce(url, redis_url, 1000)
            async with open_session(url, "admin") as session:
                removed = await session.request(RemoveMember(
                    request_id=0, stream_prefix=PREFIX, consumer_group=GROUP,
                    member_id=member.member_id))
            assert isinstance(removed, MemberRemoved) and removed.status == Status.OK, removed
            await wait_for_stable_members(url, PREFIX, GROUP, 1)  # back, under the same id
            [back] = (await described(url)).members
            assert back.member_id == member.member_id and back.member_epoch > epoch_before, back
            async with open_producer(url, redis_url, PREFIX) as producer:
                await producer.send_batch([(f"k{n % 97}", f"w{n}") for n in range(1000)])
            after = {f"w{n}" for n in range(1000)}
            await wait_until_handled([member], before | after)
            assert await member.leave() == 0
    finally:
        member.kill()
    values = Counter(str(line["value"]) for line in member.handled)
    assert set(values) == before | after, sorted(set(values) ^ (before | after))[:10]
    assert not (await described(url)).members
    assert pending_counts(redis_url, streams) == dict.fromkeys(streams, 0)
