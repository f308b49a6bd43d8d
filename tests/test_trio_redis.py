"""The trio-driven Redis connection (rsc/common/trio_redis.py) and the member's reads and acks
over it (rsc/member/redis_io/native_streams.py), against real redis-servers: plain, TLS, ACL users, a
replica."""

from __future__ import annotations

import pytest
import redis
import trio

from rsc.common.redis_connect import ReplicaNow
from rsc.common.redis_server import EmbeddedRedis
from rsc.common.trio_redis import TrioRedis, settings_of
from rsc.member.pure.producer_core import Refused
from rsc.member.redis_io.native_streams import NativeStreamOps, native_ops, native_produce_ops
from rsc.member.redis_io.streams import NOT_OWNER, connect
from rsc.protocol import owner_key
from rsc.protocol.routing import seal_key

SHARD, GROUP = "{orders:v1:0}", "billing"


def _settings(url: str):
    client = connect(url)
    try:
        settings = settings_of(client)
    finally:
        client.close()
    assert settings is not None
    return settings


async def test_commands_are_pipelined_and_error_replies_are_redis_py_exceptions(redis_url):
    connection = await TrioRedis.open(_settings(redis_url), decode=True)
    try:
        replies = await connection.execute([("SET", "a", "1"), ("GET", "a"), ("EVALSHA", "0" * 40, 0),
                                            ("INCR", "a", "extra")])
        assert replies[:2] == ["OK", "1"]
        assert isinstance(replies[2], redis.exceptions.NoScriptError)
        assert isinstance(replies[3], redis.ResponseError)
        await connection.send([("GET", "a")])
        await connection.send([("PING",)])
        assert connection.in_flight == 2
        assert [await connection.receive(), await connection.receive()] == ["1", "PONG"]
        with pytest.raises(redis.ResponseError):
            await connection.call("LPUSH", "a", "x")  # WRONGTYPE, raised by call
    finally:
        await connection.aclose()


async def test_a_database_other_than_0_is_selected(redis_url):
    connection = await TrioRedis.open(_settings(redis_url.rsplit("/", 1)[0] + "/3"), decode=True)
    try:
        await connection.call("SET", "in-3", "yes")
    finally:
        await connection.aclose()
    client = redis.Redis.from_url(redis_url.rsplit("/", 1)[0] + "/3", decode_responses=True)
    try:
        assert client.get("in-3") == "yes"
    finally:
        client.flushdb()
        client.close()


async def test_a_refused_password_is_an_authentication_error_and_noperm_names_the_command(redis_url):
    admin = redis.Redis.from_url(redis_url)
    admin.execute_command("ACL", "SETUSER", "reader", "on", ">secret", "~*", "+get", "+ping")
    try:
        host_port = redis_url.split("://", 1)[1].split("/", 1)[0]
        with pytest.raises(redis.AuthenticationError):
            await TrioRedis.open(_settings(f"redis://reader:wrong@{host_port}/0"))
        connection = await TrioRedis.open(_settings(f"redis://reader:secret@{host_port}/0"),
                                          decode=True)
        try:
            assert await connection.call("PING") == "PONG"
            [denied] = await connection.execute([("SET", "some-key", "1")])
            assert isinstance(denied, redis.exceptions.NoPermissionError)
            assert "(command: SET some-key)" in str(denied)
        finally:
            await connection.aclose()
    finally:
        admin.execute_command("ACL", "DELUSER", "reader")
        admin.close()


async def test_readonly_drops_the_connection_as_replica_now(redis_server, redis_url):
    with EmbeddedRedis(binary=redis_server.binary) as replica:
        admin = redis.Redis.from_url(replica.url)
        admin.replicaof("127.0.0.1", redis_server.port)
        admin.close()
        connection = await TrioRedis.open(_settings(replica.url), decode=True)
        with pytest.raises(ReplicaNow, match="read-only replica"):
            await connection.call("SET", "a", "1")
        assert connection.closed
        with pytest.raises(redis.ConnectionError):
            await connection.send([("PING",)])


async def test_unreachable_is_a_connection_error(redis_url):
    with EmbeddedRedis() as gone:
        url = gone.url
    with pytest.raises(redis.ConnectionError):
        await TrioRedis.open(_settings(url))


async def test_tls_connection_to_a_rediss_url(rediss_url):
    settings = _settings(rediss_url)
    assert settings.tls is not None
    connection = await TrioRedis.open(settings, decode=True)
    try:
        assert await connection.call("PING") == "PONG"
    finally:
        await connection.aclose()


async def test_a_cancelled_read_closes_its_connection(redis_url):
    client = connect(redis_url)
    client.xgroup_create(SHARD, GROUP, id="0", mkstream=True)
    ops = native_ops(client, GROUP, "member-a", use_xackdel=False)
    client.close()
    assert ops is not None
    await ops.send_read([SHARD], count=10, block_ms=5000)
    with trio.move_on_after(0.05):
        await ops.receive_read()
    assert ops.reads_sent == 0, "the cancelled read's connection is gone with it"
    await ops.aclose()


async def test_native_reads_pipeline_and_acks_are_owner_checked(redis_url):
    client = connect(redis_url)
    client.xgroup_create(SHARD, GROUP, id="0", mkstream=True)
    for n in range(5):
        client.xadd(SHARD, {"key": f"k{n}", "value": str(n)})
    ops = native_ops(client, GROUP, "member-a", use_xackdel=False)
    assert isinstance(ops, NativeStreamOps)
    try:
        await ops.send_read([SHARD], count=2, block_ms=100)
        await ops.send_read([SHARD], count=10, block_ms=100)
        assert ops.reads_sent == 2
        first, second = await ops.receive_read(), await ops.receive_read()
        ids = [entry[0].decode() for _, entries in first + second for entry in entries]
        assert [shard for shard, _ in first] == [SHARD] and len(ids) == 5
        assert await ops.ack({SHARD: ids}) == {SHARD: NOT_OWNER}, "no token: nobody owns it"
        client.set(owner_key(SHARD, GROUP), "member-a")
        client.script_flush()  # NOSCRIPT: loaded again, sent again
        assert await ops.ack({SHARD: ids[:3]}) == {SHARD: 3}
        assert await ops.ack({SHARD: ids[3:]}) == {SHARD: 2}
        assert client.xpending(SHARD, GROUP)["pending"] == 0
    finally:
        await ops.aclose()
        client.close()


def test_no_native_connection_for_a_cluster_or_sentinel_client(redis_url):
    assert native_ops(object(), GROUP, "member-a", use_xackdel=False) is None
    plain = redis.Redis.from_url(redis_url)  # not built by `connect`: its own connection class
    try:
        assert settings_of(plain) is None
    finally:
        plain.close()


async def test_native_writes_refuse_a_sealed_or_missing_shard_and_reload_the_script(redis_url):
    client = connect(redis_url)
    client.xgroup_create(SHARD, GROUP, id="0", mkstream=True)
    sealed = "{orders:v1:1}"
    client.xgroup_create(sealed, GROUP, id="0", mkstream=True)
    client.set(seal_key(sealed), "1")
    ops = native_produce_ops(client)
    assert ops is not None
    try:
        client.script_flush()  # NOSCRIPT first: loaded, sent again
        results = await ops.write([(SHARD, [b"key", b"k", b"value", b"v"]),
                                   (sealed, [b"value", b"v"]),
                                   ("{orders:v1:9}", [b"value", b"v"])])
        assert isinstance(results[0], str) and results[1:] == [Refused.SEALED, Refused.MISSING]
        assert client.xlen(SHARD) == 1 and client.xlen(sealed) == 0
    finally:
        await ops.aclose()
        client.close()


async def test_a_reply_later_than_the_clients_timeout_is_a_timeout_error(redis_url):
    client = connect(redis_url, timeout_s=0.2)
    settings = settings_of(client)
    client.close()
    assert settings is not None and settings.reply_timeout_s == 0.2
    connection = await TrioRedis.open(settings, decode=True)
    with pytest.raises(redis.TimeoutError):
        await connection.call("BLPOP", "nothing-here", 5)
    assert connection.closed


def test_the_fallback_packer_writes_what_hiredis_writes():
    import hiredis

    from rsc.common.trio_redis import pack_command
    command = ("EVALSHA", "ab" * 20, 2, "{k}", b"\xff\x00", "é", 1.5)
    assert pack_command(command) == hiredis.pack_command(command)
