"""B7: damage a Redis user can do to a shard behind the coordinator's back, found and, where the
confirmed metadata makes it safe, repaired: a stream at the largest id (`maxId`), a seal marker
on the current version (`falseSeal`), a missing marker on a sealed one (`missingSeal`).

Pure tests of the decision, then a real coordinator and redis-server, damaged with plain Redis
commands as a producer's or member's user could send them.
"""

from __future__ import annotations

import redis
import trio

from rsc.actors.core.records import MigrationRecord, RoutingRecord
from rsc.actors.core.shard_damage import (
    MAX_STREAM_ID,
    Damage,
    Finding,
    StreamFacts,
    find_damage,
    streams_to_check,
)
from rsc.member.session import open_session
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.routing import seal_key
from rsc.protocol.vocabulary import Cutover

# --- pure -----------------------------------------------------------------------------------


def facts(*, exists: bool = True, last_id: str | None = "1-0", sealed: bool = False) -> StreamFacts:
    return StreamFacts(exists=exists, last_id=last_id, sealed=sealed)


def test_b7_the_current_and_the_sealed_versions_are_checked():
    routing = RoutingRecord(version=2, shard_count=2, streams=("p:v2:0", "p:v2:1"))
    migration = MigrationRecord(from_version=1, to_version=2, cutover=Cutover.PARALLEL,
                                from_streams=("p:v1:0",))
    assert streams_to_check(routing, migration) == (("p:v2:0", "p:v2:1"), ("p:v1:0",))
    assert streams_to_check(routing, None) == (("p:v2:0", "p:v2:1"), ())
    assert streams_to_check(None, None) == ((), ())


def test_b7_each_damage_is_named_with_its_safe_repair():
    current, sealed = ("c0", "c1", "c2"), ("s0", "s1", "s2", "s3")
    found = find_damage(current, sealed, {
        "c0": facts(),  # fine
        "c1": facts(last_id=MAX_STREAM_ID),  # no later write fits: reported only
        "c2": facts(sealed=True),  # producers refused on the current version: unsealed
        "s0": facts(sealed=True),  # fine
        "s1": facts(sealed=False),  # a stale producer's write would land: sealed again
        "s2": facts(exists=False, last_id=None, sealed=False),  # retired: nothing to do
        "s3": facts(last_id=MAX_STREAM_ID, sealed=True),
    })
    assert found == [Finding("c1", Damage.MAX_ID, None), Finding("c2", Damage.FALSE_SEAL, "unseal"),
                     Finding("s1", Damage.MISSING_SEAL, "seal"), Finding("s3", Damage.MAX_ID, None)]


def test_b7_healthy_shards_have_no_damage():
    assert find_damage(("c0",), ("s0",), {"c0": facts(), "s0": facts(sealed=True)}) == []


# --- a real coordinator and redis-server ------------------------------------------------------


async def test_b7_the_coordinator_finds_the_three_damages_and_repairs_the_markers(
        coordinator_factory):
    coordinator = await coordinator_factory(shard_check_interval_s=0.2)
    client = redis.Redis.from_url(coordinator.redis_url, decode_responses=True)
    async with open_session(coordinator.url, "admin") as admin:
        first = await admin.request(m.SetShardCount(request_id=0, stream_prefix="orders",
                                                    consumer_group="billing", shard_count=2))
        assert isinstance(first, m.ShardCountChanged) and first.routing is not None
        old = first.routing.streams
        for stream in old:  # undelivered for billing: v1 stays sealed and draining
            client.xadd(stream, {"key": "k", "value": "v"})
        second = await admin.request(m.SetShardCount(request_id=0, stream_prefix="orders",
                                                     consumer_group="billing", shard_count=3))
        assert isinstance(second, m.ShardCountChanged) and second.routing is not None
        new = second.routing.streams
        assert all(client.exists(seal_key(stream)) for stream in old)
        # what a producer's or member's user can do (docs/operations/redis.md)
        client.delete(seal_key(old[0]))  # missingSeal
        client.set(seal_key(new[0]), "1")  # falseSeal
        client.xadd(new[1], {"value": "x"}, id=MAX_STREAM_ID)  # maxId
        with trio.fail_after(20):
            while True:
                shown = await admin.request(m.DescribeGroup(request_id=0, stream_prefix="orders",
                                                            consumer_group="billing"))
                assert isinstance(shown, m.GroupDescription) and shown.status == Status.OK
                damage = {shard.shard: shard.damage for shard in shown.shards}
                if damage.get(old[0]) and damage.get(new[0]) and damage.get(new[1]):
                    break
                await trio.sleep(0.1)
        assert damage[old[0]] == "missingSeal"
        assert damage[new[0]] == "falseSeal"
        assert damage[new[1]] == "maxId"
        assert damage[old[1]] is None and damage[new[2]] is None
        assert client.exists(seal_key(old[0]))  # written again
        assert not client.exists(seal_key(new[0]))  # removed: producers write again
        with trio.fail_after(20):  # once repaired, the next check finds only what stays
            while True:
                shown = await admin.request(m.DescribeGroup(request_id=0, stream_prefix="orders",
                                                            consumer_group="billing"))
                assert isinstance(shown, m.GroupDescription)
                damage = {shard.shard: shard.damage for shard in shown.shards}
                if damage.get(old[0]) is None and damage.get(new[0]) is None:
                    break
                await trio.sleep(0.1)
        assert damage[new[1]] == "maxId"
    client.close()


async def test_b7_the_check_reads_shards_whose_entries_are_not_utf8(coordinator_factory):
    """M1 allows any bytes in a value: XINFO STREAM's reply and the lag rule's XRANGE and
    XREVRANGE COUNT 1 carry the first and last entries, so the check reads the last id alone and
    the lag read leaves those replies undecoded (a decoding error used to fail the prefix's
    actor on every describe and every check)."""
    coordinator = await coordinator_factory(shard_check_interval_s=0.2)
    raw = redis.Redis.from_url(coordinator.redis_url)
    async with open_session(coordinator.url, "admin") as admin:
        made = await admin.request(m.SetShardCount(request_id=0, stream_prefix="bytes",
                                                   consumer_group="g", shard_count=2))
        assert isinstance(made, m.ShardCountChanged) and made.routing is not None
        first, second = made.routing.streams
        raw.xadd(first, {b"key": b"k", b"value": b"\x00\xff\xfe"})
        raw.xadd(second, {b"key": b"\xff", b"value": b"\x80"}, id=MAX_STREAM_ID)
        with trio.fail_after(20):
            while True:
                shown = await admin.request(m.DescribeGroup(request_id=0, stream_prefix="bytes",
                                                            consumer_group="g"))
                assert isinstance(shown, m.GroupDescription)
                assert shown.status in (Status.OK, Status.COORDINATOR_NOT_AVAILABLE), shown
                damage = {shard.shard: shard.damage for shard in shown.shards}
                if shown.status == Status.OK and damage.get(second) == "maxId":
                    break
                await trio.sleep(0.1)
        assert damage[first] is None
    raw.close()
