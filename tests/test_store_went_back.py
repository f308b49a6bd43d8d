"""K3 and K4: a store that went back, or lost everything, under a running coordinator.

The detection (actors/core/store_rewrite.py `went_back`) and the plan of what is written back
(`prefix_rewrite`) are pure and tested without I/O. Against a real redis-server of the
test's own (so it can be SIGKILLed and started again on its port):

- a rollback on demand: `SAVE`, more metadata writes, SIGKILL, a restart that loads the
  saved RDB file: the coordinator notices, writes everything back under a new coordinator
  epoch above its own, keeps the store id, and `describeGroup` says when
  (`storeWentBackAtMs`);
- Redis SIGKILLed and started empty under a coordinator, two `rsc consume` and an
  `rsc produce`: consumption resumes with no admin command, the storeId is unchanged,
  streams and consumer groups are back; lost (with the store), duplicated and double-owner
  windows are counted. Nothing fed after the rewrite is lost.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis
import trio

from rsc.actors.core.records import (
    GroupRecord,
    GroupSnapshot,
    MemberRecord,
    MigrationRecord,
    PrefixSnapshot,
    RoutingRecord,
    encode,
    replay,
)
from rsc.actors.core.store_rewrite import (
    Expected,
    Observed,
    Witness,
    mark_value,
    parse_mark,
    prefix_rewrite,
    went_back,
    went_back_epoch,
)
from rsc.actors.redis_io.store import EPOCH_KEY, STORE_ID_KEY, meta_key
from rsc.common.redis_server import EmbeddedRedis
from rsc.member.session import open_session
from rsc.protocol import DescribeGroup, GroupDescription
from rsc.protocol.routing import owner_key, seal_key
from rsc.protocol.vocabulary import Cutover
from tests.conftest import start_coordinator
from tests.processes import ROOT
from tests.redis_rigs import server_binary
from tests.test_coordinator_outage import (
    GROUP,
    PREFIX,
    TEST_TIMING,
    Consumer,
    Coordinator,
    handled_values,
    now_s,
    report,
    spawn_consumer,
    wait_for,
)
from tests.test_member_support import set_shards, wait_for_stable_members
from tests.test_sentinel_faults import FedProducer, double_owner_windows

pytestmark = pytest.mark.faults  # the fault step of .ci/run: python -m pytest -q -m faults

ME = "host-1-abcd"

# --- pure: noticing it -----------------------------------------------------------------------


def observed(epoch: int | None = 5, store_id: str | None = "s", marks=None, hashes=None) -> Observed:
    return Observed(epoch=epoch, store_id=store_id, marks=marks or {}, hashes=hashes or {})


def test_k3_a_store_that_holds_everything_did_not_go_back():
    expected = Expected(marks={"rsc:store-mark": 3}, sequences={"p": 7})
    seen = observed(marks={"rsc:store-mark": mark_value(ME, 5, 3)}, hashes={"p": ("5", "9")})
    assert went_back(expected, seen, instance_id=ME, epoch=5, store_id="s") is None


def test_k3_each_lost_write_is_named():
    expected = Expected(marks={"rsc:store-mark": 3}, sequences={"p": 7})
    good_marks = {"rsc:store-mark": mark_value(ME, 5, 3)}
    good_hashes = {"p": ("5", "7")}

    def why(**changes) -> str | None:
        seen = observed(**{"marks": good_marks, "hashes": good_hashes, **changes})
        return went_back(expected, seen, instance_id=ME, epoch=5, store_id="s")

    assert why() is None
    assert why(epoch=None) == "rsc:coordinator:epoch is missing"
    assert "below this coordinator's 5" in why(epoch=4)
    assert why(store_id=None) == "rsc:store-id is missing"
    assert why(marks={}) == "the marker rsc:store-mark is missing"
    assert "older" in why(marks={"rsc:store-mark": mark_value(ME, 5, 2)})
    assert "older" in why(marks={"rsc:store-mark": mark_value(ME, 4, 9)})
    assert "older" in why(marks={"rsc:store-mark": mark_value("other-1-x", 5, 3)})
    assert "not a marker" in why(marks={"rsc:store-mark": "junk"})
    assert why(hashes={}) == "the metadata of prefix 'p' is missing"
    assert "coordinator epoch 4" in why(hashes={"p": ("4", "99")})
    assert "write sequence 6, below the 7" in why(hashes={"p": ("5", "6")})


def test_k3_a_newer_coordinator_is_not_the_store_going_back():
    """A newer epoch fences this coordinator (its writes fail): a different path."""
    expected = Expected(marks={"rsc:store-mark": 3}, sequences={"p": 7})
    seen = observed(epoch=6, marks={"rsc:store-mark": mark_value("other-1-x", 6, 1)},
                    hashes={"p": ("6", "1")})
    assert went_back(expected, seen, instance_id=ME, epoch=5, store_id="s") is None


def test_k3_the_witness_takes_what_it_expects_before_the_reads():
    witness = Witness(ME, 5)
    assert witness.expected() == Expected(marks={}, sequences={})
    count = witness.next_count()
    expected = witness.expected()
    witness.marks_written(["k"], count)
    witness.write_confirmed("p", 4)
    witness.write_confirmed("p", 3)  # a slower confirmation of an earlier write
    assert expected == Expected(marks={}, sequences={})  # taken before: unchanged
    assert witness.expected() == Expected(marks={"k": 1}, sequences={"p": 4})
    checked = witness.expected()
    witness.write_confirmed("q", 5)
    witness.settled(checked)  # the markers written with that check cover p's write from now on
    assert witness.expected() == Expected(marks={"k": 1}, sequences={"q": 5})
    checked = witness.expected()
    witness.write_confirmed("q", 6)  # confirmed after the check was sent: read back next time
    witness.settled(checked)
    assert witness.expected().sequences == {"q": 6}


def test_k3_marks_round_trip_and_the_new_epoch_is_above_both():
    assert parse_mark(mark_value("h-1-a/b", 7, 12)) == ("h-1-a/b", 7, 12)
    assert parse_mark(None) is None and parse_mark("7/12") is None
    assert went_back_epoch(1, 6) == 7  # a store restarted empty counts from 1 again
    assert went_back_epoch(9, 6) == 9


# --- pure: what is written back ----------------------------------------------------------------


def migrating() -> PrefixSnapshot:
    old = ("{p:1:0}", "{p:1:1}")
    new = ("{p:2:0}", "{p:2:1}", "{p:2:2}")
    members = {"m1": MemberRecord(epoch=3, previous_epoch=2, capacity=None,
                                  assigned=frozenset({"{p:1:0}", "{p:2:0}"}), revoking=frozenset()),
               "m2": MemberRecord(epoch=3, previous_epoch=3, capacity=None,
                                  assigned=frozenset({"{p:2:1}"}), revoking=frozenset({"{p:1:1}"}))}
    return PrefixSnapshot(
        routing=RoutingRecord(version=2, shard_count=3, streams=new),
        migration=MigrationRecord(from_version=1, to_version=2, cutover=Cutover.ORDERED,
                                  from_streams=old),
        groups={"g": GroupSnapshot(GroupRecord(group_epoch=3, assignment_epoch=3), members)})


def test_k4_into_an_empty_store_everything_is_written():
    snapshot = migrating()
    plan = prefix_rewrite(snapshot, {})
    assert replay({k: v for k, v in encode(plan.changes).items() if v is not None}) == snapshot
    assert plan.streams == ("{p:1:0}", "{p:1:1}", "{p:2:0}", "{p:2:1}", "{p:2:2}")
    assert plan.groups == ("g",) and plan.dropped_groups == ()
    assert plan.sealed == ("{p:1:0}", "{p:1:1}") and plan.unsealed == ("{p:2:0}", "{p:2:1}", "{p:2:2}")
    owners = {token.shard: token.member_id for token in plan.owners}
    assert owners == {"{p:1:0}": "m1", "{p:2:0}": "m1", "{p:1:1}": "m2", "{p:2:1}": "m2",
                      "{p:2:2}": None}  # a revoking member still holds its shard (H3)
    assert plan.members == 2


def test_k3_over_an_older_state_what_memory_no_longer_has_is_deleted():
    snapshot = migrating()
    older = PrefixSnapshot(routing=RoutingRecord(version=1, shard_count=2, streams=("{p:1:0}", "{p:1:1}")),
                           groups={"g": GroupSnapshot(GroupRecord(group_epoch=1, assignment_epoch=1), {
                               "gone": MemberRecord(epoch=1, previous_epoch=0, capacity=None,
                                                    assigned=frozenset({"{p:1:0}"}))}),
                                   "deleted": GroupSnapshot(GroupRecord())})
    from rsc.actors.core.records import changes_of
    stored = {k: v for k, v in encode(changes_of(older)).items() if v is not None}
    stored.update({"coordinatorEpoch": "4", "writeSequence": "10"})
    plan = prefix_rewrite(snapshot, stored)
    fields = encode(plan.changes)
    assert fields["member:1:g:gone"] is None and fields["group:deleted"] is None
    assert plan.dropped_groups == ("deleted",)
    # the stored hash with the plan applied is memory, nothing more
    after = dict(stored)
    for field, value in fields.items():
        if value is None:
            after.pop(field, None)
        else:
            after[field] = value
    assert replay(after) == snapshot
    assert {t.member_id for t in plan.owners if t.group == "deleted"} == {None}


# --- against a real redis-server -----------------------------------------------------------


class OwnRedis(EmbeddedRedis):
    """A redis-server of the test's own: SIGKILLed and started again on the same port."""

    def kill(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.process = None

    @property
    def dump(self) -> Path:
        return Path(self._dir) / "dump.rdb"


def client_of(server: EmbeddedRedis) -> redis.Redis:
    return redis.Redis.from_url(server.url, decode_responses=True)


async def describe(url: str) -> GroupDescription:
    async with open_session(url, "admin") as session:
        described = await session.request(DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                                         consumer_group=GROUP))
    assert isinstance(described, GroupDescription), described
    return described


async def test_k3_a_rollback_to_an_rdb_saved_earlier_is_written_back_under_a_new_epoch(nursery):
    server = OwnRedis(binary=server_binary()).start()
    try:
        coordinator = await start_coordinator(nursery, server.url)
        streams = await set_shards(coordinator.url, PREFIX, GROUP, 2)
        client = client_of(server)
        for stream in streams:  # undelivered entries: the reshard below stays DRAINING (G2)
            client.xadd(stream, {"key": "k", "value": "v"})
        epoch = int(client.get(EPOCH_KEY))
        store_id = client.get(STORE_ID_KEY)
        assert client.save()  # the point the store will go back to: routing v1, 2 shards
        assert (await describe(coordinator.url)).store_went_back_at_ms is None
        streams = await set_shards(coordinator.url, PREFIX, GROUP, 3)  # lost with the rollback
        lost_version = 2
        client.close()
        server.kill()
        server.start()  # loads the dump: routing v1, the lease key likely still there
        client = client_of(server)
        with trio.fail_after(10):
            while True:  # the coordinator notices and writes routing v2 back
                stored = replay(client.hgetall(meta_key(PREFIX)))
                if stored.routing is not None and stored.routing.version == lost_version and \
                        int(client.get(EPOCH_KEY) or 0) > epoch:
                    break
                await trio.sleep(0.05)
        assert stored.routing.streams == streams
        assert stored.migration is not None and stored.migration.from_version == 1
        assert client.get(STORE_ID_KEY) == store_id
        for stream in streams:  # the new version's streams and consumer groups are back
            assert GROUP in {g["name"] for g in client.xinfo_groups(stream)}
        for stream in stored.migration.from_streams:
            assert client.get(seal_key(stream)) == "1"
        with trio.fail_after(10):
            while (described := await _describe_when_serving(coordinator.url)) is None:
                await trio.sleep(0.05)
        assert described.store_went_back_at_ms is not None and described.routing is not None
        assert described.routing.shard_count == 3
        client.close()
        await coordinator.stop()
    finally:
        server.stop()


async def _describe_when_serving(url: str) -> GroupDescription | None:
    try:
        return await describe(url)
    except (OSError, Exception):  # noqa: BLE001 - closed while it writes back: ask again
        return None


async def test_k4_redis_sigkilled_and_restarted_empty_consumption_resumes_without_an_operator(
        nursery):
    server = OwnRedis(binary=server_binary()).start()
    coordinator = Coordinator(server.url, (*TEST_TIMING, "--metrics-port", "0"))
    consumers: list[Consumer] = []
    producer: FedProducer | None = None
    try:
        await coordinator.start(nursery)
        streams = await set_shards(coordinator.url, PREFIX, GROUP, 4)
        for name in ("a", "b"):
            consumers.append(await spawn_consumer(name, coordinator.url, server.url, nursery))
        await wait_for_stable_members(coordinator.url, PREFIX, GROUP, 2)
        client = client_of(server)
        store_id = client.get(STORE_ID_KEY)
        epoch = int(client.get(EPOCH_KEY))
        client.close()
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "rsc", "produce", PREFIX, "--coordinator", coordinator.url,
             "--redis-url", server.url],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
        producer = FedProducer(process)
        nursery.start_soon(producer.collect)
        nursery.start_soon(producer.feed)
        await wait_for(lambda: sum(len(c.handled) for c in consumers) >= 200, 60, "messages flowing")

        fed_before = producer.fed
        killed_at = now_s()
        server.kill()
        server.start()  # empty: no persistence
        await wait_for(lambda: b"store.went_back" in coordinator.logs, 30, "the store written back")
        rewritten_at = now_s()
        fed_after_rewrite = producer.fed
        await wait_for(lambda: any(t > rewritten_at for c in consumers for t, _ in c.handled), 30,
                       "consumption resumed after the rewrite")
        await wait_for(lambda: any(int(message["value"]) >= fed_before for c in consumers
                                   for _, message in c.handled), 30, "a line fed after the kill")
        resumed_s = min(t for c in consumers for t, message in c.handled
                        if int(message["value"]) >= fed_before) - killed_at
        client = client_of(server)
        assert client.get(STORE_ID_KEY) == store_id  # the same storeId, no admin command
        assert int(client.get(EPOCH_KEY)) > epoch
        for stream in streams:
            assert GROUP in {g["name"] for g in client.xinfo_groups(stream)}
        client.close()
        await trio.sleep(2)  # some more load after the fault
        fed = producer.fed
        exit_code = await producer.finish()
        assert exit_code == 0, producer.stderr.decode(errors="replace")[-2000:]
        await wait_for(lambda: all(str(n) in handled_values(consumers)
                                   for n in range(fed_after_rewrite, fed)), 60,
                       "every line fed after the rewrite handled")
        handled = handled_values(consumers)
        line = next(text for text in bytes(coordinator.logs).decode(errors="replace").splitlines()
                    if "store.went_back" in text)
        row = {
            "fault": "Redis SIGKILLed and restarted empty (no persistence)",
            "resumed_after_s": round(resumed_s, 1), "accepted": fed,
            "fed_before_kill": fed_before,
            "lost_with_the_store": sum(1 for n in range(fed) if str(n) not in handled),
            "lost_after_rewrite": sum(1 for n in range(fed_after_rewrite, fed) if str(n) not in handled),
            "duplicates": sum(count - 1 for count in handled.values() if count > 1),
            "double_owner_windows": double_owner_windows(consumers),
            "fenced": sum(len(c.named("fenced")) for c in consumers),
            "store_id_unchanged": True,
            "fenced_reasons": sorted({str(e.get("reason")) for c in consumers for e in c.named("fenced")}),
        }
        report("redis restarted empty", **row)
        assert row["lost_after_rewrite"] == 0, row
        assert row["double_owner_windows"] == 0, row
        assert "streams_recreated=4" in line or '"streams_recreated": 4' in line, line
        assert all(c.process.returncode is None for c in consumers)
        assert coordinator.process is not None and coordinator.process.returncode is None
    finally:  # shielded and bounded: a failed wait above (a Cancelled) still stops them all
        with trio.CancelScope(shield=True), trio.move_on_after(60):
            if producer is not None and producer.process.returncode is None:
                producer.process.kill()
            for consumer in consumers:
                await consumer.stop()
            await coordinator.stop()
        server.stop()


def test_k3_owner_records_are_written_back(redis_url):
    """The owner records a member's acks are checked against come back with the hash."""
    from rsc.actors.redis_io.store import MetadataStore

    store = MetadataStore(redis_url, lease_ms=2000)
    try:
        store.acquire(2000)
        snapshot = migrating()
        done = store.rewrite({"p": snapshot})
        client = client_of_url(redis_url)
        assert client.get(owner_key("{p:2:0}", "g")) == "m1"
        assert client.get(owner_key("{p:1:1}", "g")) == "m2"
        assert client.get(owner_key("{p:2:2}", "g")) is None
        assert replay(client.hgetall(meta_key("p"))) == snapshot
        assert done["streams_recreated"] == 5 and done["owner_records"] == 4
        assert done["consumer_groups_created"] == 5
        again = store.rewrite({"p": snapshot})  # idempotent: nothing new to create
        assert again["streams_recreated"] == 0 and again["consumer_groups_created"] == 0
        client.close()
    finally:
        store.close()


def client_of_url(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True)


# --- K5: the coordinator's metadata writes wait for replicas -------------------------------


async def test_k5_coordinator_min_replicas_answers_unavailable_until_a_replica_holds_the_write(
        nursery):
    from rsc.protocol import SetShardCount, ShardCountChanged
    from rsc.protocol.errors import Status

    primary = OwnRedis(binary=server_binary()).start()
    replica: OwnRedis | None = None
    try:
        coordinator = await start_coordinator(nursery, primary.url, min_replicas=1)

        async def set_count(count: int) -> ShardCountChanged:
            async with open_session(coordinator.url, "admin") as session:
                response = await session.request(SetShardCount(
                    request_id=0, stream_prefix=PREFIX, consumer_group=GROUP, shard_count=count))
            assert isinstance(response, ShardCountChanged), response
            return response

        refused = await set_count(2)  # no replica: WAIT counts 0 within the D4 budget
        assert refused.status == Status.COORDINATOR_NOT_AVAILABLE, refused
        replica = OwnRedis(binary=server_binary(),
                           args=["--replicaof", "127.0.0.1", str(primary.port)]).start()
        client = client_of(primary)
        with trio.fail_after(20):
            while int(client.info("replication")["connected_slaves"]) < 1:
                await trio.sleep(0.05)
        client.close()
        with trio.fail_after(20):
            while (answer := await set_count(2)).status != Status.OK:
                await trio.sleep(0.1)  # the repair of the refused write lands first
        assert answer.routing is not None and answer.routing.shard_count == 2
        replica_client = client_of(replica)
        with trio.fail_after(5):  # the replica holds what was revealed (WAIT counted it)
            while replay(replica_client.hgetall(meta_key(PREFIX))).routing is None:
                await trio.sleep(0.05)
        replica_client.close()
        await coordinator.stop()
    finally:
        if replica is not None:
            replica.stop()
        primary.stop()


async def test_k3_d5_a_waiting_coordinator_does_not_take_over_while_the_holder_writes_back(
        nursery, caplog):
    """D5: the waiting coordinator waits a full lease TTL of absence; the holder of a store
    restarted empty writes its lease back within a tick, so it stays the only one (H3)."""
    from rsc.actors.redis_io.store import LEASE_KEY

    caplog.set_level("WARNING", logger="rsc.coordinator")
    server = OwnRedis(binary=server_binary()).start()
    try:
        first = await start_coordinator(nursery, server.url)
        await set_shards(first.url, PREFIX, GROUP, 2)
        client = client_of(server)
        holder, epoch = client.get(LEASE_KEY), int(client.get(EPOCH_KEY))
        client.close()
        second: list[object] = []

        async def run_second() -> None:
            second.append(await start_coordinator(nursery, server.url))

        nursery.start_soon(run_second)
        await wait_for(lambda: any(r.getMessage() == "coordinator.waiting" for r in caplog.records),
                       10, "the second coordinator waiting for the lease")
        server.kill()
        server.start()  # empty
        client = client_of(server)
        with trio.fail_after(10):
            while int(client.get(EPOCH_KEY) or 0) <= epoch or not client.hgetall(meta_key(PREFIX)):
                await trio.sleep(0.02)
        # two lease TTLs: the waiting one would have taken over by then had the key stayed absent
        with trio.move_on_after(2 * first.config.lease_ttl_ms / 1000):
            while True:
                assert client.get(LEASE_KEY) in (holder, None), "another coordinator took the lease"
                assert not second
                await trio.sleep(0.02)
        assert client.get(LEASE_KEY) == holder and not second
        assert any(r.getMessage() == "store.went_back" for r in caplog.records)
        await first.stop()  # a clean stop: the waiting one takes over, restoring what was written
        await wait_for(lambda: bool(second), 10, "the second coordinator taking over")
        described = await describe(second[0].url)  # type: ignore[attr-defined]
        assert described.routing is not None and described.routing.shard_count == 2
        client.close()
        await second[0].stop()  # type: ignore[attr-defined]
    finally:
        server.stop()


def test_k3_on_a_redis_cluster_each_master_carries_a_marker(cluster_url, redis_cluster):
    """The failover of one master's node to a replica that was behind shows in its marker."""
    from rsc.actors.core.records import Changes
    from rsc.actors.redis_io.store import MetadataStore

    store = MetadataStore(cluster_url, lease_ms=2000)
    try:
        store.acquire(2000)
        keys = store.mark_keys()
        nodes = {redis_cluster.node_of(key).port for key in keys}
        assert len(nodes) == len(redis_cluster.masters()) == len(keys)
        changes = Changes()
        changes.groups["g"] = GroupRecord(group_epoch=1, assignment_epoch=1)
        store.write("p", changes)
        assert store.check_went_back(None) is None  # writes the markers
        assert store.check_went_back(None) is None  # finds them
        client = redis.RedisCluster.from_url(cluster_url, decode_responses=True)
        client.delete(keys[1])  # that master's shard went back
        assert store.check_went_back(None) == f"the marker {keys[1]} is missing"
        store.write("p", changes)  # a write after the last markers: read back by itself
        client.delete(meta_key("p"))
        assert store.check_went_back(None) == "the metadata of prefix 'p' is missing"
        client.close()
    finally:
        store.close()


async def test_k4_readyz_stays_503_until_the_store_is_written_back(nursery, caplog):
    """From the moment the coordinator noticed the outage, /readyz says ready only once the
    write-back landed (its line is logged before readiness turns); the counter counts it."""
    from rsc.common.redis_server import free_port
    from tests.helpers.http import http_get
    from tests.test_metrics_coordinator import http_status

    caplog.set_level("WARNING", logger="rsc.coordinator")
    server = OwnRedis(binary=server_binary()).start()
    try:
        port = free_port()
        coordinator = await start_coordinator(nursery, server.url, metrics_port=port)
        await set_shards(coordinator.url, PREFIX, GROUP, 2)
        with trio.fail_after(10):
            while await http_status(port, "/readyz") != 200:
                await trio.sleep(0.02)
        server.kill()
        with trio.fail_after(10):
            while await http_status(port, "/readyz") != 503:
                await trio.sleep(0.02)
        server.start()  # empty

        def written_back() -> bool:
            return any(r.getMessage() == "store.went_back" for r in caplog.records)

        polls = 0
        with trio.fail_after(25):  # K10: ready once writes succeeded for 10 s after the outage
            while (status := await http_status(port, "/readyz")) != 200:
                polls += 1
                assert status == 503
                await trio.sleep(0.01)
        assert written_back(), "/readyz said ready before the store was written back"
        assert polls > 0
        metrics = (await http_get(port, "/metrics")).body.decode()
        assert "rsc_store_went_back_total 1.0" in metrics
        await coordinator.stop()
    finally:
        server.stop()


def test_k4_rsc_describe_shows_when_the_store_went_back():
    from rsc.admin.describe import describe_view
    from rsc.admin.view_text import render_plain
    from rsc.protocol.errors import Status

    description = GroupDescription(request_id=0, status=Status.OK, stream_prefix="p",
                                   consumer_group="g", group_epoch=1, assignment_epoch=1)
    assert "store went back" not in render_plain(describe_view(description))
    went_back = GroupDescription(request_id=0, status=Status.OK, stream_prefix="p",
                                 consumer_group="g", group_epoch=1, assignment_epoch=1,
                                 store_went_back_at_ms=1_796_000_000_000)
    assert "store went back  2026-11-30 00:53:20 UTC: written back from the coordinator's memory" \
        in render_plain(describe_view(went_back))


def test_k4_the_console_group_page_carries_when_the_store_went_back():
    from rsc.console import views

    base = {"type": "groupDescription", "status": "OK", "streamPrefix": "p", "consumerGroup": "g",
            "members": [], "shards": []}
    assert views.group_view(base)["storeWentBackAtMs"] is None
    assert views.group_view({**base, "storeWentBackAtMs": 1_796_000_000_000})["storeWentBackAtMs"] \
        == 1_796_000_000_000
    script = (Path(views.__file__).parent / "static" / "console.js").read_text()
    assert "view.storeWentBackAtMs" in script and '"Store went back"' in script


async def test_d5_a_waiting_coordinator_waits_out_a_redis_restart(nursery, caplog):
    """Once Redis answered it, a standby waits through its restart instead of exiting."""
    caplog.set_level("WARNING", logger="rsc.coordinator")
    server = OwnRedis(binary=server_binary()).start()
    try:
        first = await start_coordinator(nursery, server.url)
        second: list[object] = []
        failed: list[BaseException] = []

        async def run_second() -> None:
            try:
                second.append(await start_coordinator(nursery, server.url))
            except BaseException as exc:  # noqa: BLE001 - the test says it
                failed.append(exc)
                raise

        nursery.start_soon(run_second)
        await wait_for(lambda: any(r.getMessage() == "coordinator.waiting" for r in caplog.records),
                       10, "the second coordinator waiting for the lease")
        server.kill()
        with trio.move_on_after(0.5):  # down for several of its polls (no answer at all)
            while not failed:
                await trio.sleep(0.02)
        assert not failed, failed
        server.start()
        await first.stop()  # the standby takes over on the same store
        await wait_for(lambda: bool(second) or bool(failed), 15, "the standby taking over")
        assert not failed and second
        await second[0].stop()  # type: ignore[attr-defined]
    finally:
        server.stop()
