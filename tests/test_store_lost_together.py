"""K8: Redis (no persistence) and the coordinator lost together, both started again empty.

Neither the store nor the coordinator's memory holds the routing any more; the members and
producers still do. They carry it (and the storeId) into their joins and getRouting, and the
new coordinator adopts it: consumption resumes with no admin command.

Pure parts (the prefix machine adopting presented routing, the metric's source) run without
I/O; the fault runs real processes: a redis-server of the test's own, `rsc coordinator`, two
`rsc consume` and an `rsc produce` fed under load.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import trio

from rsc.actors.core.group import GroupSettings
from rsc.actors.core.prefix import PrefixMachine
from rsc.actors.redis_io.store import STORE_ID_KEY
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.routing import stream_key
from tests.processes import ROOT
from tests.redis_rigs import server_binary
from tests.test_coordinator_outage import (
    GROUP,
    LEASE_TTL_MS,
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
from tests.test_store_went_back import OwnRedis, client_of

KNOWN = m.KnownRouting(version=3, shard_count=4, hash="crc32")
SETTINGS = GroupSettings(heartbeat_interval_ms=300, lease_ttl_ms=2000, revoke_timeout_ms=2000)


def machine(clients_store_id: str | None) -> PrefixMachine:
    machine = PrefixMachine("orders", SETTINGS)
    machine.clients_store_id = clients_store_id
    return machine


def join(store_id: str | None = "s1", known: m.KnownRouting | None = KNOWN) -> m.Heartbeat:
    return m.Heartbeat(request_id=1, stream_prefix="orders", consumer_group="billing",
                       member_id="m-1", member_epoch=0, capacity=2, known_store_id=store_id,
                       known_routing=known)


# --- pure: the prefix machine ---------------------------------------------------------------


def test_k8_a_join_presenting_routing_on_a_store_lost_with_memory_brings_the_routing_back():
    prefix = machine("s1")
    answer = prefix.handle(join(), 0)
    routing = prefix.routing
    assert routing is not None and (routing.version, routing.shard_count) == (3, 4)
    assert routing.streams == tuple(stream_key("orders", 3, i) for i in range(4))
    response = answer.response
    assert isinstance(response, m.HeartbeatResponse) and response.status == Status.OK
    assert response.routing is not None and response.routing.version == 3
    checkpoint = prefix.checkpoint()
    assert checkpoint.changes.routing == routing  # written back
    created = {stream for create in checkpoint.create for stream in create.streams}
    assert created == set(routing.streams)  # streams and consumer groups created (at 0)
    assert [event.kind for event in checkpoint.events] == ["store.restored_from_clients",
                                                           "routing.changed"]


def test_k8_a_get_routing_presenting_routing_brings_it_back_for_a_producer():
    prefix = machine("s1")
    prefix.handle(m.GetRouting(request_id=1, stream_prefix="orders", known_store_id="s1",
                               known_routing=KNOWN), 0)
    assert prefix.routing is not None and prefix.routing.version == 3


def test_k8_nothing_is_adopted_from_another_store_or_on_a_store_that_kept_its_id():
    other = machine("s1")
    other.handle(join(store_id="s2"), 0)  # another storeId: a mismatch (K9), never adopted
    assert other.routing is None and other.asked_without_routing
    kept = machine(None)  # the store kept its storeId (or the coordinator its memory): K4
    kept.handle(join(), 0)
    assert kept.routing is None and kept.asked_without_routing
    unknown_hash = machine("s1")
    unknown_hash.handle(join(known=m.KnownRouting(version=3, shard_count=4, hash="md5")), 0)
    assert unknown_hash.routing is None


def test_k8_routing_that_exists_is_never_replaced_by_a_presented_one():
    prefix = machine("s1")
    prefix.handle(join(), 0)
    prefix.checkpoint()
    prefix.handle(join(known=m.KnownRouting(version=9, shard_count=2, hash="crc32")), 10)
    assert prefix.routing is not None and prefix.routing.version == 3


# --- real processes -------------------------------------------------------------------------


@pytest.mark.faults
async def test_k8_redis_and_the_coordinator_lost_together_resume_within_a_lease_ttl(nursery):
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
        await coordinator.kill()  # SIGKILL, both together
        server.kill()
        server.start()  # empty: no persistence
        await coordinator.start(nursery)  # empty too: nothing in memory
        restarted_at = now_s()
        fed_after_restart = producer.fed
        await wait_for(lambda: any(int(message["value"]) >= fed_after_restart
                                   for c in consumers for _, message in c.handled), 30,
                       "a line given after the restart consumed")
        resumed_s = min(t for c in consumers for t, message in c.handled
                        if int(message["value"]) >= fed_after_restart) - restarted_at
        client = client_of(server)
        assert client.get(STORE_ID_KEY) == store_id  # the clients' storeId, adopted
        for stream in streams:
            assert GROUP in {g["name"] for g in client.xinfo_groups(stream)}
        client.close()
        await trio.sleep(2)  # some more load after the fault
        fed = producer.fed
        exit_code = await producer.finish()
        assert exit_code == 0, producer.stderr.decode(errors="replace")[-2000:]
        await wait_for(lambda: all(str(n) in handled_values(consumers)
                                   for n in range(fed_after_restart, fed)), 60,
                       "every line given after the restart handled")
        handled = handled_values(consumers)
        logs = bytes(coordinator.logs).decode(errors="replace")
        row = {
            "fault": "Redis (no persistence) and the coordinator SIGKILLed together, both "
                     "restarted empty",
            "resumed_after_restart_s": round(resumed_s, 1),
            "restart_took_s": round(restarted_at - killed_at, 1),
            "lease_ttl_s": LEASE_TTL_MS / 1000,
            "accepted": fed, "fed_before_kill": fed_before,
            "lost_with_the_store": sum(1 for n in range(fed) if str(n) not in handled),
            "lost_after_restart": sum(1 for n in range(fed_after_restart, fed)
                                      if str(n) not in handled),
            "duplicates": sum(count - 1 for count in handled.values() if count > 1),
            "double_owner_windows": double_owner_windows(consumers),
        }
        report("redis and coordinator lost together", **row)
        assert row["lost_after_restart"] == 0, row
        assert row["double_owner_windows"] == 0, row
        assert "store.restored_from_clients" in logs
        assert all(c.process.returncode is None for c in consumers)
    finally:
        if producer is not None and producer.process.returncode is None:
            producer.process.kill()
        for consumer in consumers:
            await consumer.stop()
        await coordinator.stop()
        server.stop()


# --- K9: the store re-checked --------------------------------------------------------------


def test_k9_a_heartbeat_routing_naming_another_store_id_stops_the_member():
    from rsc.member.pure.ledger import Ledger
    from tests.test_member_ledger import MEMBER, exchange, respond

    ledger = Ledger(MEMBER, capacity=4)
    exchange(ledger, respond(routing=m.RoutingSummary(version=1, shard_count=4,
                                                      store_id="s-1")), 0.0)
    exchange(ledger, respond(routing=m.RoutingSummary(version=1, shard_count=4)), 10.0)
    assert ledger.store_changed_to is None  # none named (K8's empty store): nothing changed
    exchange(ledger, respond(routing=m.RoutingSummary(version=1, shard_count=4,
                                                      store_id="s-2")), 20.0)
    assert ledger.store_id == "s-1" and ledger.store_changed_to == "s-2"


@pytest.mark.faults
async def test_k9_a_producer_of_a_torn_down_rig_does_not_deliver_to_a_new_rig_on_its_ports(
        nursery):
    server = OwnRedis(binary=server_binary()).start()
    coordinator = Coordinator(server.url, TEST_TIMING)
    producer: FedProducer | None = None
    try:
        await coordinator.start(nursery)
        old_streams = await set_shards(coordinator.url, PREFIX, GROUP, 2)
        old = client_of(server)
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "rsc", "produce", PREFIX, "--coordinator", coordinator.url,
             "--redis-url", server.url],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
        producer = FedProducer(process)
        nursery.start_soon(producer.collect)
        nursery.start_soon(producer.feed)
        await wait_for(lambda: sum(old.xlen(stream) for stream in old_streams) >= 100, 30,
                       "lines delivered to the first rig")
        old.close()
        await coordinator.kill()  # the rig torn down ...
        server.kill()
        server.start()  # ... and another one set up on the same ports: its own storeId
        client = client_of(server)
        client.set(STORE_ID_KEY, "another-rig")
        await coordinator.start(nursery)
        streams = await set_shards(coordinator.url, PREFIX, GROUP, 2)  # the same stream names
        code = None
        with trio.move_on_after(30):
            code = await producer.process.wait()
        stderr = producer.stderr.decode(errors="replace")
        assert code == 2, stderr[-2000:]
        assert "storeId 'another-rig'" in stderr and "(K9)" in stderr
        assert sum(client.xlen(stream) for stream in streams) == 0  # nothing delivered there
        client.close()
    finally:
        if producer is not None and producer.process.returncode is None:
            producer.process.kill()
        await coordinator.stop()
        server.stop()


# --- R2 after K3: retired versions a restored snapshot brings back -------------------------


def test_k3_streams_a_restored_snapshot_names_and_memory_retired_are_retired_again():
    from rsc.actors.core.records import Changes, PrefixSnapshot, RoutingRecord, encode
    from rsc.actors.core.store_rewrite import prefix_rewrite

    def hash_of(routing: RoutingRecord) -> dict[str, str]:
        changes = Changes()
        changes.set_routing(routing)
        return {field: value for field, value in encode(changes).items() if value is not None}

    v1 = RoutingRecord(version=1, shard_count=2, streams=("{o:v1:0}", "{o:v1:1}"))
    v2 = RoutingRecord(version=2, shard_count=3, streams=("{o:v2:0}", "{o:v2:1}", "{o:v2:2}"))
    plan = prefix_rewrite(PrefixSnapshot(routing=v2), hash_of(v1))  # the snapshot: v1
    assert plan.retired == v1.streams
    assert prefix_rewrite(PrefixSnapshot(routing=v2), {}).retired == ()  # K4: nothing to retire
    assert prefix_rewrite(PrefixSnapshot(routing=v2), hash_of(v2)).retired == ()


@pytest.mark.faults
async def test_k3_retired_versions_a_restored_rdb_brings_back_are_retired_again(nursery, caplog):
    from rsc.common.logs import _FIELDS_ATTRIBUTE
    from tests.conftest import start_coordinator

    caplog.set_level("WARNING", logger="rsc.coordinator")
    from tests.test_store_went_back import describe

    server = OwnRedis(binary=server_binary()).start()
    try:
        coordinator = await start_coordinator(nursery, server.url)
        old = await set_shards(coordinator.url, PREFIX, GROUP, 2)
        client = client_of(server)
        for stream in old:
            client.xadd(stream, {"key": "k", "value": "v"})
        client.xgroup_setid(old[0], GROUP, "$")  # delivered and acked: nothing holds the drain
        client.xgroup_setid(old[1], GROUP, "$")
        assert client.save()  # the snapshot: routing v1 and its two streams
        await set_shards(coordinator.url, PREFIX, GROUP, 3)
        with trio.fail_after(20):  # v1 drains and is retired (R2)
            while any(client.exists(stream) for stream in old):
                await trio.sleep(0.05)
        client.close()
        server.kill()
        server.start()  # the snapshot: v1 and its streams are back
        client = client_of(server)
        with trio.fail_after(20):
            while (await _serving(coordinator.url)) is None or any(
                    client.exists(stream) for stream in old):
                await trio.sleep(0.05)
        described = await describe(coordinator.url)
        assert described.store_went_back_at_ms is not None
        [line] = [r for r in caplog.records if r.getMessage() == "store.went_back"]
        assert getattr(line, _FIELDS_ATTRIBUTE)["retired_again"] == 2  # the snapshot's v1 streams
        assert described.routing is not None and described.routing.version == 2
        client.close()
        await coordinator.stop()
    finally:
        server.stop()


async def _serving(url: str):
    from tests.test_store_went_back import _describe_when_serving

    return await _describe_when_serving(url)


@pytest.mark.faults
async def test_k9_a_consumer_of_a_torn_down_rig_stops_before_reading_the_new_rig(nursery):
    server = OwnRedis(binary=server_binary()).start()
    coordinator = Coordinator(server.url, TEST_TIMING)
    process: trio.Process | None = None
    try:
        await coordinator.start(nursery)
        await set_shards(coordinator.url, PREFIX, GROUP, 2)
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "rsc", "consume", PREFIX, GROUP, "--coordinator",
             coordinator.url, "--redis-url", server.url],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
        said, printed = bytearray(), bytearray()

        async def collect(stream: trio.abc.ReceiveStream, into: bytearray) -> None:
            async for chunk in stream:
                into.extend(chunk)

        assert process.stdout is not None and process.stderr is not None
        nursery.start_soon(collect, process.stdout, printed)
        nursery.start_soon(collect, process.stderr, said)
        await wait_for_stable_members(coordinator.url, PREFIX, GROUP, 1)
        await coordinator.kill()  # the rig torn down ...
        server.kill()
        server.start()  # ... and another one on the same ports, with its own storeId
        client = client_of(server)
        client.set(STORE_ID_KEY, "another-rig")
        await coordinator.start(nursery)
        streams = await set_shards(coordinator.url, PREFIX, GROUP, 2)
        for stream in streams:
            client.xadd(stream, {"key": "k", "value": "not-yours"})
        code = None
        with trio.move_on_after(30):
            code = await process.wait()
        assert code == 2, bytes(said)[-2000:]
        assert b"storeId 'another-rig'" in said and b"(K9)" in said
        assert b"not-yours" not in printed  # nothing of the new rig handled
        client.close()
    finally:
        if process is not None and process.returncode is None:
            process.kill()
            await process.wait()
        await coordinator.stop()
        server.stop()
