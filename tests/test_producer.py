"""The producer: routing, sealed-shard rerouting, and the `rsc produce` console contract."""

from __future__ import annotations

import json
import sys
import zlib
from typing import Any

import pytest
import redis
import trio
from trio_websocket import ConnectionClosed, serve_websocket

from rsc.actors.app import serve
from rsc.actors.config import CoordinatorConfig
from rsc.common.redis_server import free_port
from rsc.member.notices import Notices
from rsc.member.producer import RoutingUnavailable, open_producer
from rsc.member.redis_io.streams import (
    STORE_ID_KEY,
    ProduceOps,
    Refused,
    StoreMismatch,
    check_store_id,
    connect,
    store_id_of,
    store_mismatch_line,
    write_result,
)
from rsc.protocol import Routing, Status, seal_key, shard_for_key
from rsc.tools.input_lines import LineSplitter, MalformedLine, parse_line
from tests.conftest import FAST, RunningCoordinator
from tests.test_member_support import entry, set_shards
from tests.test_producer_faults import RedisProcess


def test_parse_line_accepts_tab_and_json_forms():
    assert parse_line("k1\thello\tworld") == ("k1", "hello\tworld")
    assert parse_line('{"key": "k2", "value": "v"}') == ("k2", "v")
    # L5: a JSON value that is not a string (it was stored as its JSON text) is refused
    with pytest.raises(MalformedLine, match="'value' must be a string, got an object"):
        parse_line('{"key": "k3", "value": {"n": 1}}')


@pytest.mark.parametrize("line", ["no tab here", "", '{"key": "k"}', '{"key": 1, "value": "v"}',
                                  "{not json", "[1, 2]"])
def test_parse_line_refuses_malformed_lines(line):
    with pytest.raises(MalformedLine):
        parse_line(line)


def test_line_splitter_yields_complete_lines_and_the_unterminated_tail():
    splitter = LineSplitter()
    assert splitter.feed(b"a\tb\nc\t") == [b"a\tb"]
    assert splitter.feed(b"d\n") == [b"c\td"]
    assert splitter.feed(b"e\tf") == []
    assert splitter.finish() == [b"e\tf"]


def test_routing_hash_is_zlib_crc32_of_utf8_mod_count():
    assert shard_for_key("customer-7", 8) == zlib.crc32(b"customer-7") % 8


async def test_producer_writes_each_key_to_its_shard(coordinator):
    streams = await set_shards(coordinator.url, "orders", "billing", 4)
    async with open_producer(coordinator.url, coordinator.redis_url, "orders") as producer:
        ids = await producer.send_batch([(f"k{n}", str(n)) for n in range(50)])
    assert len(ids) == 50
    client = connect(coordinator.redis_url)
    for stream_index, stream in enumerate(streams):
        for _, fields in client.xrange(stream):
            assert shard_for_key(fields["key"], 4) == stream_index
    assert sum(client.xlen(s) for s in streams) == 50
    client.close()


async def test_sealed_shard_write_is_rerouted_after_a_routing_refresh(nursery, redis_url):
    """A scripted coordinator answers v1 first, v2 after; v1 is sealed in the real Redis."""
    v1 = tuple(f"{{orders:v1:{i}}}" for i in range(2))
    v2 = tuple(f"{{orders:v2:{i}}}" for i in range(4))
    answers = iter([(1, v1)] + [(2, v2)] * 10)

    async def handler(request):
        connection = await request.accept()
        try:
            while True:
                frame = json.loads(await connection.get_message())
                version, streams = next(answers)
                await connection.send_message(json.dumps({
                    "type": "routing", "requestId": frame["requestId"], "status": "OK",
                    "streamPrefix": "orders", "version": version, "shardCount": len(streams),
                    "hash": "crc32", "streams": list(streams)}))
        except ConnectionClosed:
            pass

    server = await nursery.start(serve_websocket, handler, "127.0.0.1", 0, None)
    client = connect(redis_url)
    for stream in v1 + v2:  # the coordinator creates every shard stream of a live version
        client.xgroup_create(stream, "billing", id="0", mkstream=True)
    for stream in v1:
        client.set(seal_key(stream), "1")
    async with open_producer(f"ws://127.0.0.1:{server.port}", redis_url, "orders") as producer:
        ids = await producer.send_batch([("a", "1"), ("b", "2"), ("c", "3")])
        assert producer.routing is not None and producer.routing.version == 2
        assert producer.rerouted == 3
    assert len(ids) == 3
    assert sum(client.xlen(s) for s in v1) == 0
    assert sum(client.xlen(s) for s in v2) == 3
    client.close()


async def test_write_to_a_retired_stream_is_refused_not_recreated(redis_url):
    """A retired version's streams are deleted; a stale write must not bring one back."""
    client = connect(redis_url)
    try:
        results = ProduceOps(client).write([entry("{orders:v1:0}", "k", "v")])
        assert results == [Refused.MISSING]
        assert client.exists("{orders:v1:0}") == 0
    finally:
        client.close()


async def test_rsc_produce_reports_malformed_lines_and_exits_1(coordinator):
    streams = await set_shards(coordinator.url, "orders", "billing", 2)
    stdin = b'k1\tv1\nbroken\n{"key": "k2", "value": "v2"}\nk3\tv3'
    with trio.fail_after(30):
        result = await trio.run_process(
            [sys.executable, "-m", "rsc", "produce", "orders", "--coordinator", coordinator.url,
             "--redis-url", coordinator.redis_url],
            stdin=stdin, capture_stdout=True, capture_stderr=True, check=False)
    assert result.returncode == 1
    assert b"line 2" in result.stderr
    client = connect(coordinator.redis_url)
    values = sorted(fields["value"] for s in streams for _, fields in client.xrange(s))
    client.close()
    assert values == ["v1", "v2", "v3"]


async def test_rsc_produce_exits_0_when_every_line_is_written(coordinator):
    await set_shards(coordinator.url, "orders", "billing", 2)
    with trio.fail_after(30):
        result = await trio.run_process(
            [sys.executable, "-m", "rsc", "produce", "orders", "--coordinator", coordinator.url,
             "--redis-url", coordinator.redis_url],
            stdin=b"".join(b"k%d\tv\n" % n for n in range(500)), capture_stderr=True,
            check=False)
    assert result.returncode == 0, result.stderr


# --- D2 through the API: the producer keeps what it was given --------------------------


async def coordinator_on(nursery, redis_url: str, port: int):
    """A coordinator (FAST settings) on a chosen port, so a test can bring it back there."""
    settings: dict[str, Any] = {**FAST, "port": port}
    config = CoordinatorConfig(redis_url=redis_url, **settings)
    scope = trio.CancelScope()
    stopped = trio.Event()

    async def run(task_status):
        try:
            with scope:
                await serve(config, task_status=task_status)
        finally:
            stopped.set()

    url = await nursery.start(run)
    return RunningCoordinator(url=url, redis_url=redis_url, config=config, scope=scope,
                              stopped=stopped)


def all_values(redis_url: str, prefix: str) -> list[str]:
    client: Any = connect(redis_url)
    try:
        return [fields["value"] for key in client.scan_iter(match=f"{{{prefix}:v*", _type="stream")
                for _, fields in client.xrange(key)]
    finally:
        client.close()


async def test_d2_api_starts_while_the_coordinator_is_down_and_writes_once_it_is_up(
        nursery, redis_url):
    port = free_port()
    said: list[str] = []
    async with open_producer(f"ws://127.0.0.1:{port}", redis_url, "orders",
                             notices=Notices(said.append)) as producer:
        done = trio.Event()

        async def send() -> None:
            await producer.send_batch([(f"k{n}", str(n)) for n in range(20)])
            done.set()

        nursery.start_soon(send)
        with trio.fail_after(10):
            while not said:
                await trio.sleep(0.02)
        assert said[0] == (f"connection refused: is the coordinator running at "
                           f"ws://127.0.0.1:{port}? retrying (a producer needs routing once: "
                           "waiting for it)")
        coordinator = await coordinator_on(nursery, redis_url, port)
        await set_shards(coordinator.url, "orders", "billing", 2)
        with trio.fail_after(15):
            await done.wait()
    assert sorted(all_values(redis_url, "orders"), key=int) == [str(n) for n in range(20)]
    assert f"connected to the coordinator at ws://127.0.0.1:{port}" in said
    await coordinator.stop()


async def test_d2_api_survives_a_coordinator_restart_then_follows_the_reshard(
        nursery, redis_url):
    port = free_port()
    coordinator = await coordinator_on(nursery, redis_url, port)
    await set_shards(coordinator.url, "orders", "billing", 2)
    said: list[str] = []
    async with open_producer(coordinator.url, redis_url, "orders",
                             notices=Notices(said.append)) as producer:
        await producer.send_batch([(f"k{n}", f"a{n}") for n in range(50)])
        await coordinator.stop()
        await producer.send_batch([(f"k{n}", f"b{n}") for n in range(50)])  # no coordinator
        coordinator = await coordinator_on(nursery, redis_url, port)
        with trio.fail_after(10):
            while f"connected to the coordinator at {coordinator.url}" not in said:
                await trio.sleep(0.02)
        await set_shards(coordinator.url, "orders", "billing", 4)
        with trio.fail_after(10):  # pushed on the reopened session's subscription
            while producer.routing.version != 2:
                await trio.sleep(0.02)
        located = await producer.send_batch_located([(f"k{n}", f"c{n}") for n in range(50)])
    assert all(":v2:" in stream for stream, _ in located)
    assert len(set(all_values(redis_url, "orders"))) == 150
    assert any(line.startswith(f"lost the coordinator session at {coordinator.url}")
               for line in said)
    await coordinator.stop()


async def test_d2_api_retries_redis_until_it_is_back_and_counts_the_retries():
    server = RedisProcess(aof=True)
    server.start()
    try:
        client = connect(server.url)
        for stream in ("{orders:v1:0}", "{orders:v1:1}"):
            client.xgroup_create(stream, "billing", id="0", mkstream=True)
        client.close()
        said: list[str] = []
        async with open_producer("ws://127.0.0.1:1", server.url, "orders",
                                 notices=Notices(said.append)) as producer:
            producer._adopt(Routing(status=Status.OK, stream_prefix="orders", version=1,
                                    shard_count=2, hash="crc32",
                                    streams=("{orders:v1:0}", "{orders:v1:1}")))
            await producer.send_batch([("a", "1")])
            server.kill()
            async with trio.open_nursery() as sends:
                sends.start_soon(producer.send_batch, [("b", "2"), ("c", "3")])
                with trio.fail_after(10):
                    while not any(line.startswith("cannot reach Redis") for line in said):
                        await trio.sleep(0.02)
                server.start()
            assert producer.sent == 3 and producer.retried >= 2
        assert f"Redis at {server.url} answers again" in said
        assert sorted(all_values(server.url, "orders")) == ["1", "2", "3"]
    finally:
        server.stop()


async def test_d2_routing_wait_gives_up_with_routing_unavailable_and_says_why(coordinator):
    said: list[str] = []
    async with open_producer(coordinator.url, coordinator.redis_url, "nowhere",
                             routing_wait_s=0.5, notices=Notices(said.append)) as producer:
        with pytest.raises(RoutingUnavailable):
            await producer.send("k", "v")
    assert said == ["prefix 'nowhere' has no routing yet: create its shards with "
                    "`rsc admin set-shards nowhere N`; waiting"]


async def test_records_that_are_not_string_pairs_are_refused_before_anything_is_sent(
        coordinator):
    async with open_producer(coordinator.url, coordinator.redis_url, "orders") as producer:
        with pytest.raises(TypeError, match="record 1"):
            await producer.send_batch([("k", "v"), ("k", 7)])  # type: ignore[list-item]
    assert producer.sent == 0


def test_store_mismatch_line_names_both_urls_and_both_ids():
    assert store_mismatch_line("redis://r:1/5", "b", "ws://c:2", "a") == (
        "redis://r:1/5 is not the coordinator's Redis: it holds storeId 'b', the coordinator "
        "at ws://c:2 uses storeId 'a'; point --redis-url (RSC_REDIS_URL) at the "
        "coordinator's Redis")


def test_store_id_is_read_defensively_from_any_routing_message():
    assert store_id_of(Routing(status=Status.OK, stream_prefix="o")) is None

    class WithStoreId:
        store_id = "s-1"

    assert store_id_of(WithStoreId()) == "s-1"


def test_write_results_of_the_produce_script():
    assert write_result("1-0") == "1-0"
    assert write_result(redis.ResponseError("SEALED {o:v1:0}")) is Refused.SEALED
    assert write_result(redis.ResponseError("MISSING {o:v1:0}")) is Refused.MISSING
    readonly = redis.ReadOnlyError("READONLY You can't write against a read only replica.")
    assert write_result(readonly) is readonly  # retried by the producer, not re-routed


def test_check_store_id_passes_the_coordinators_redis_and_names_another(redis_url):
    client = connect(redis_url)
    try:
        with pytest.raises(StoreMismatch, match="it holds no storeId"):
            check_store_id(client, "a", redis_url=redis_url, coordinator_url="ws://c:1",
                           recheck_s=0)
        client.set(STORE_ID_KEY, "b")
        with pytest.raises(StoreMismatch, match="it holds storeId 'b'"):
            check_store_id(client, "a", redis_url=redis_url, coordinator_url="ws://c:1")
        client.set(STORE_ID_KEY, "a")
        check_store_id(client, "a", redis_url=redis_url, coordinator_url="ws://c:1")
    finally:
        client.close()
