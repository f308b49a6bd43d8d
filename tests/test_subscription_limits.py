"""B4: a session holds at most 100 group watches and 100 routing subscriptions; repeats are
free, the 101st distinct one is `SUBSCRIPTION_LIMIT_REACHED`, and pushes to one session are
coalesced per group, so no admin session can delay the heartbeats of unrelated members.

Pure tests of the holdings and of a session's push queue, then a real coordinator, Redis and
websockets.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio

from rsc.actors.core.subscriptions import (
    MAX_ROUTING_SUBSCRIPTIONS_PER_SESSION,
    MAX_WATCHES_PER_SESSION,
    Admit,
    Holdings,
)
from rsc.actors.server import Session
from rsc.member.session import open_session
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import JOIN_EPOCH
from tests.helpers.actors import live_watch_count
from tests.test_watch_integration import set_shards

PREFIX = "orders"

# --- pure -----------------------------------------------------------------------------------


def test_b4_holdings_take_100_distinct_watches_repeats_are_free_and_an_end_frees_a_place():
    holdings = Holdings()
    assert [holdings.admit_watch("p", f"g{n}") for n in range(MAX_WATCHES_PER_SESSION)] == [
        Admit.NEW] * MAX_WATCHES_PER_SESSION
    assert holdings.admit_watch("p", "g0") is Admit.REPEAT
    assert holdings.admit_watch("p", "g100") is Admit.REFUSED
    assert holdings.admit_watch("q", "g0") is Admit.REFUSED  # counted across prefixes
    assert len(holdings.watches) == MAX_WATCHES_PER_SESSION  # a refusal holds nothing
    assert holdings.over_watch_cap("p", "g100") and not holdings.over_watch_cap("p", "g0")
    holdings.watch_ended("p", "g5")
    assert holdings.admit_watch("p", "g100") is Admit.NEW


def test_b4_holdings_take_100_routing_subscriptions_and_repeats_are_free():
    holdings = Holdings()
    for n in range(MAX_ROUTING_SUBSCRIPTIONS_PER_SESSION):
        assert holdings.admit_routing(f"p{n}") is Admit.NEW
    assert holdings.admit_routing("p7") is Admit.REPEAT
    assert holdings.admit_routing("p100") is Admit.REFUSED
    assert len(holdings.routing) == MAX_ROUTING_SUBSCRIPTIONS_PER_SESSION


@attrs.define
class StalledConnection:
    """A connection whose socket takes nothing: what a session queues stays queued."""

    writing: bool = True
    broken: bool = False
    sent: list[str] = attrs.field(factory=list)
    callback: Any = None

    def when_written(self, callback: Any) -> None:
        self.callback = callback

    def send_text(self, text: str) -> None:
        self.sent.append(text)


def description(group: str, epoch: int) -> m.GroupDescription:
    return m.GroupDescription(request_id=None, status=Status.OK, stream_prefix=PREFIX,
                              consumer_group=group, group_epoch=epoch)


def test_b4_pushes_to_a_session_are_coalesced_per_group_the_latest_wins():
    connection = StalledConnection()
    session = Session(connection)  # type: ignore[arg-type]
    for epoch in range(1000):
        session.push(description("a", epoch))
        session.push(description("b", epoch))
    assert [reply.message for reply in session.queue] == [description("a", 999),
                                                          description("b", 999)]
    connection.writing = False
    session.wake()
    assert len(connection.sent) == 2 and not session.queue
    session.push(description("a", 1000))  # written: the next one takes a new place
    assert len(connection.sent) == 3


# --- real coordinator -----------------------------------------------------------------------


def join(group: str, member_id: str, prefix: str = PREFIX) -> m.Heartbeat:
    return m.Heartbeat(request_id=0, stream_prefix=prefix, consumer_group=group,
                       member_id=member_id, member_epoch=JOIN_EPOCH, owned_shards=())


def watch(group: str) -> m.DescribeGroup:
    return m.DescribeGroup(request_id=0, stream_prefix=PREFIX, consumer_group=group, watch=True)


async def test_b4_a_session_asking_for_150_watches_gets_100_and_the_error(coordinator):
    groups = [f"g{n}" for n in range(150)]
    async with open_session(coordinator.url, "admin") as admin, \
            open_session(coordinator.url, "member") as member:
        await set_shards(admin, 2)
        for group in groups:  # H13: a join creates its group
            assert (await member.request(join(group, f"m-{group}"))).status == Status.OK
        with trio.fail_after(30):
            answers = [await admin.request(watch(group)) for group in groups]
        statuses = [answer.status for answer in answers]
        assert statuses == [Status.OK] * 100 + [Status.SUBSCRIPTION_LIMIT_REACHED] * 50
        refused = answers[100]
        assert isinstance(refused, m.GroupDescription) and refused.consumer_group == "g100"
        assert refused.error is not None and "100 groups" in refused.error
        assert live_watch_count() == 100
        repeat = await admin.request(watch("g0"))  # a repeat is answered and holds nothing new
        assert repeat.status == Status.OK and live_watch_count() == 100
        plain = await admin.request(m.DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                                    consumer_group="g120"))
        assert plain.status == Status.OK  # a describe without watch is not limited
        async with open_session(coordinator.url, "admin") as other:
            assert (await other.request(watch("g120"))).status == Status.OK  # per session
            assert live_watch_count() == 101


async def test_b4_150_watches_asked_at_once_still_get_100_and_the_error(coordinator):
    """All in flight together, so most pass the session's check before any watch starts: the
    prefix counts them again when they start."""
    groups = [f"g{n}" for n in range(150)]
    async with open_session(coordinator.url, "admin") as admin, \
            open_session(coordinator.url, "member") as member:
        await set_shards(admin, 2)
        for group in groups:
            assert (await member.request(join(group, f"m-{group}"))).status == Status.OK
        statuses: list[Status] = []

        async def ask(group: str) -> None:
            statuses.append((await admin.request(watch(group))).status)

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for group in groups + groups[:20]:  # and 20 repeats
                    nursery.start_soon(ask, group)
        assert statuses.count(Status.SUBSCRIPTION_LIMIT_REACHED) >= 50
        assert statuses.count(Status.OK) + statuses.count(Status.SUBSCRIPTION_LIMIT_REACHED) == 170
        assert live_watch_count() == 100


async def test_b4_a_session_gets_100_routing_subscriptions_and_repeats_are_free(coordinator):
    async with open_session(coordinator.url, "member") as member:
        with trio.fail_after(30):
            answers = [await member.request(m.GetRouting(request_id=0, stream_prefix=f"p{n}",
                                                         subscribe=True)) for n in range(150)]
        statuses = [answer.status for answer in answers]
        assert statuses == ([Status.UNKNOWN_STREAM] * 100
                            + [Status.SUBSCRIPTION_LIMIT_REACHED] * 50)
        repeat = await member.request(m.GetRouting(request_id=0, stream_prefix="p3",
                                                   subscribe=True))
        assert repeat.status == Status.UNKNOWN_STREAM
        unsubscribed = await member.request(m.GetRouting(request_id=0, stream_prefix="p140"))
        assert unsubscribed.status == Status.UNKNOWN_STREAM  # without subscribe: not limited
        async with open_session(coordinator.url, "admin") as admin:
            # the 100 it holds still get pushed: routing for p99 arrives on the member session
            response = await admin.request(m.SetShardCount(request_id=0, stream_prefix="p99",
                                                           consumer_group="g", shard_count=2))
            assert response.status == Status.OK
        with trio.fail_after(10):
            while True:
                push = await member.pushes.receive()
                if isinstance(push, m.Routing) and push.stream_prefix == "p99":
                    break
        assert push.status == Status.OK and push.version == 1


@pytest.mark.slow  # 15 s or more: CI's slow step (README)
async def test_b4_unrelated_members_heartbeats_are_answered_while_an_admin_asks_past_the_cap(
        coordinator):
    """Members of another prefix keep beating (lease 1 s) while one admin session watches
    100 groups, asks 3,000 times for 100 more and reshards their prefix twice: none expires."""
    groups = [f"g{n}" for n in range(200)]
    async with open_session(coordinator.url, "admin") as admin, \
            open_session(coordinator.url, "member") as member, \
            open_session(coordinator.url, "member") as unrelated:
        await set_shards(admin, 2)
        for group in groups:
            assert (await member.request(join(group, f"m-{group}"))).status == Status.OK
        first = await unrelated.request(join("other", "u", prefix="elsewhere"))
        assert first.status == Status.OK and isinstance(first, m.HeartbeatResponse)
        epoch = first.member_epoch
        beats: list[Status] = []
        flood_done = trio.Event()

        async def beat() -> None:
            nonlocal epoch
            while not flood_done.is_set():
                response = await unrelated.request(m.Heartbeat(
                    request_id=0, stream_prefix="elsewhere", consumer_group="other",
                    member_id="u", member_epoch=epoch, owned_shards=None))
                assert isinstance(response, m.HeartbeatResponse)
                beats.append(response.status)
                epoch = response.member_epoch
                await trio.sleep(0.2)  # the member's heartbeat interval (FAST)

        async def flood() -> None:
            for group in groups[:100]:
                assert (await admin.request(watch(group))).status == Status.OK
            for _ in range(30):
                answers = [await admin.request(watch(group)) for group in groups[100:]]
                assert {answer.status for answer in answers} == {
                    Status.SUBSCRIPTION_LIMIT_REACHED}
            for count in (4, 8):
                await set_shards(admin, count)
                with trio.fail_after(20):
                    while True:  # the resharding's pushes went out meanwhile
                        response = await admin.request(m.DescribeGroup(
                            request_id=0, stream_prefix=PREFIX, consumer_group="g0"))
                        assert isinstance(response, m.GroupDescription)
                        if response.routing is not None and response.routing.shard_count == count:
                            break
            flood_done.set()

        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(beat)
                nursery.start_soon(flood)
        assert len(beats) >= 2
        assert set(beats) <= {Status.OK, Status.REVOKE_PENDING}, beats  # never expired
        assert live_watch_count() == 100
