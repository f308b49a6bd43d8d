"""What a new user of `rsc produce` and `rsc consume` ran into (issue 34, the member tools):

- a Redis URL given as the coordinator URL is named as such, not answered with `use ws://`;
- `rsc consume --peek --ca-file CA` verifies a wss:// coordinator against CA (as consume does);
- a Redis certificate that does not verify, and redis:// against a TLS port, are one line
  and exit 2 (D3), not retried forever;
- `rsc consume --max-messages N` reads no more entries than N, so it leaves nothing
  delivered but unhandled in its group's pending list.

(A blank input line of `rsc produce` is in tests/test_console_messages.py.) Pure parts without
I/O; the rest with real processes, a real redis-server (a TLS-only one for the TLS cases)
and a real coordinator.
"""

from __future__ import annotations

import json
import subprocess

import pytest
import redis
import trio

from rsc.common.redis_server import free_port
from rsc.member.pure.budget import (
    PROBE_BLOCK_MS,
    ReadBudget,
    ahead_fits,
    part_block_ms,
    read_shape,
)
from rsc.member.redis_io.unrecoverable import speaks_tls
from rsc.member.session import BadCoordinatorUrl, check_coordinator_url
from rsc.member.shells.tool_config import BadConfig, endpoints
from tests.conftest_tls import Certs
from tests.test_console_failures import Flags, assert_no_traceback, run_tool, spawn_tool, tool_env
from tests.test_consume_limits import fill, read_all
from tests.test_member_support import set_shards

# --- pure: the read budget ------------------------------------------------------------------


def test_a_read_budget_counts_what_was_read_and_what_was_given_back():
    budget = ReadBudget(5)
    assert budget.left() == 5
    budget.took(3)
    assert budget.left() == 2
    budget.give_back(2)  # a revoked shard's queue: never handled here
    assert budget.left() == 4
    budget.took(9)
    assert budget.left() == 0
    budget.restart(handled=3)
    assert budget.left() == 2
    assert ReadBudget(None).left() is None
    with pytest.raises(ValueError):
        ReadBudget(-1)


@pytest.mark.parametrize(("shards", "count", "left", "expected"), [
    (("a", "b", "c", "d"), 100, None, (("a", "b", "c", "d"), 100)),
    (("a", "b", "c", "d"), 100, 5, (("a", "b", "c", "d"), 1)),
    (("a", "b", "c", "d"), 100, 3, (("a", "b", "c"), 1)),
    (("a", "b", "c", "d"), 100, 400, (("a", "b", "c", "d"), 100)),
    (("a", "b", "c", "d"), 100, 90, (("a", "b", "c", "d"), 22)),
    (("a", "b"), 100, 0, ((), 1)),
    ((), 100, 3, ((), 100)),
])
def test_one_read_never_returns_more_than_is_left(shards, count, left, expected):
    got_shards, got_count = read_shape(shards, count, left, turn=0)
    assert (got_shards, got_count) == expected
    if left is not None:
        assert len(got_shards) * got_count <= max(left, 0) or not got_shards  # COUNT is per stream


def test_fewer_shards_than_held_are_taken_in_turn_so_none_is_starved():
    shards = ("a", "b", "c")
    assert [read_shape(shards, 100, 1, turn)[0] for turn in range(4)] == [
        ("a",), ("b",), ("c",), ("a",)]
    assert [read_shape(shards, 100, 2, turn)[0] for turn in range(3)] == [
        ("a", "b"), ("b", "c"), ("c", "a")]


# --- pure: a Redis URL where the coordinator's goes -----------------------------------------


@pytest.mark.parametrize("url", ["redis://127.0.0.1:6390/0", "rediss://h:6390/0",
                                 "redis+sentinel://h:26379/mymaster", "unix:///tmp/redis.sock"])
def test_a_redis_url_as_the_coordinator_url_is_named_a_redis_url(url):
    with pytest.raises(BadCoordinatorUrl) as caught:
        check_coordinator_url(url)
    assert "that is a Redis URL" in str(caught.value)
    assert "--redis-url" in str(caught.value)
    assert "use ws://" not in str(caught.value)


def test_the_password_of_a_redis_url_given_as_the_coordinator_url_is_masked():
    with pytest.raises(BadCoordinatorUrl) as caught:
        check_coordinator_url("redis://:hunter2@h:6390/0")
    assert "hunter2" not in str(caught.value) and "***" in str(caught.value)


@pytest.mark.parametrize(("coordinator", "redis_url"), [
    ("ws://127.0.0.1:6390", "redis://127.0.0.1:6390/0"),
    ("ws://localhost:6379", "redis://LOCALHOST/0"),  # Redis's default port
    ("wss://h:6380", "rediss://h:6380/0"),
])
def test_a_coordinator_url_on_the_redis_address_is_named(coordinator, redis_url):
    with pytest.raises(BadConfig, match="is the address of the Redis server of --redis-url"):
        endpoints(Flags(coordinator, redis_url), {})


def test_a_coordinator_beside_its_redis_is_fine():
    assert endpoints(Flags("ws://h:8765", "redis://h:6379/0"), {}).coordinator_url == "ws://h:8765"
    assert endpoints(Flags("ws://h:6379", "redis://other:6379/0"), {}).redis_url == "redis://other:6379/0"


# --- Redis over TLS: one line, exit 2 -------------------------------------------------------


def test_the_tls_probe_tells_a_tls_port_from_a_plain_one(tls_redis_server, redis_url):
    plain_port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    assert speaks_tls("127.0.0.1", tls_redis_server.port)
    assert not speaks_tls("127.0.0.1", plain_port, timeout_s=2.0)
    assert not speaks_tls("127.0.0.1", free_port())


TOOLS = [("produce", "orders"), ("consume", "orders", "--peek"), ("consume", "orders", "billing")]


@pytest.mark.parametrize("args", TOOLS, ids=[" ".join(args) for args in TOOLS])
async def test_plain_redis_url_against_a_tls_port_is_one_line_and_exit_2(
        args, tls_redis_server, coordinator):
    url = f"redis://127.0.0.1:{tls_redis_server.port}/0"
    code, lines = await run_tool(*args, "--coordinator", coordinator.url, "--redis-url", url,
                                 stdin=b"k\tv\n")
    assert code == 2, lines
    assert lines[-1] == (f"rsc {args[0]}: Redis at {url} speaks TLS on that port: write "
                         f"rediss://127.0.0.1:{tls_redis_server.port}/0 (the CA as "
                         "ssl_ca_certs=FILE in the URL or RSC_REDIS_CA_FILE)")
    assert_no_traceback(lines)


@pytest.mark.parametrize("args", TOOLS, ids=[" ".join(args) for args in TOOLS])
async def test_a_redis_certificate_that_does_not_verify_is_one_line_and_exit_2(
        args, tls_redis_server, certs: Certs, coordinator):
    url = f"rediss://127.0.0.1:{tls_redis_server.port}/0"
    env = tool_env(RSC_REDIS_CA_FILE=certs.wrong_ca_file)
    code, lines = await run_tool(*args, "--coordinator", coordinator.url, "--redis-url", url,
                                 stdin=b"k\tv\n", env=env)
    assert code == 2, lines
    assert lines[-1].startswith(f"rsc {args[0]}: TLS verification of Redis at {url} failed: ")
    assert lines[-1].endswith("; give the CA that signed its certificate as ssl_ca_certs=FILE in "
                              "--redis-url or RSC_REDIS_CA_FILE")
    assert_no_traceback(lines)


# --- peek through a wss:// coordinator with --ca-file ---------------------------------------


async def test_consume_peek_verifies_a_wss_coordinator_against_ca_file(
        certs: Certs, coordinator_factory, redis_url):
    coordinator = await coordinator_factory(tls_cert=certs.cert_file, tls_key=certs.key_file)
    env = tool_env()
    env.pop("RSC_CA_FILE", None)  # the flag alone
    code, lines = await run_tool("admin", "--url", coordinator.url, "--ca-file", certs.ca_file,
                                 "set-shards", "orders", "billing", "2", env=env)
    assert code == 0, lines
    code, lines = await run_tool("produce", "orders", "--coordinator", coordinator.url,
                                 "--redis-url", redis_url, "--ca-file", certs.ca_file,
                                 stdin=b"k1\tv1\nk2\tv2\n", env=env)
    assert code == 0, lines
    peek = await spawn_tool("consume", "orders", "--peek", "--coordinator", coordinator.url,
                            "--redis-url", redis_url, "--ca-file", certs.ca_file, env=env,
                            stdout=subprocess.PIPE)
    assert peek.process.stdout is not None
    with trio.fail_after(30):
        out = await read_all(peek.process.stdout)
        assert await peek.finish() == 0, peek.lines
    assert sorted(json.loads(line)["value"] for line in out.splitlines()) == ["v1", "v2"]


# --- --max-messages reads no more than it needs ------------------------------------------


# One member (the default). With --concurrency above 1 the members rebalance while they start,
# and entries a member read for a shard it then lost stay pending for the shard's new owner
# (given back to the budget, so the run still ends): not asserted here, documented.
@pytest.mark.parametrize(("concurrency", "backlog", "wanted"), [
    ("1", 500, "5"),
    ("1", 7, "7"),  # every entry: the last ones sit in one shard, after the others are empty
])
async def test_max_messages_leaves_nothing_pending_in_the_group(coordinator, concurrency, backlog,
                                                                wanted):
    streams = await set_shards(coordinator.url, "orders", "billing", 4)
    fill(coordinator.redis_url, streams[-1:], 3)
    fill(coordinator.redis_url, streams, backlog - 3)
    consume = await spawn_tool("consume", "orders", "billing", "--coordinator", coordinator.url,
                               "--redis-url", coordinator.redis_url, "--max-messages", wanted,
                               "--concurrency", concurrency, "--workers", "8",
                               stdout=subprocess.PIPE)
    assert consume.process.stdout is not None
    with trio.fail_after(60):
        out = await read_all(consume.process.stdout)
        assert await consume.finish() == 0, consume.lines
    assert len(out.splitlines()) == int(wanted)
    assert_no_traceback(consume)
    client = redis.Redis.from_url(coordinator.redis_url, decode_responses=True)
    try:
        pending = sum(client.xpending(stream, "billing")["pending"] for stream in streams)
        read = sum(int(group["entries-read"] or 0) for stream in streams
                   for group in client.xinfo_groups(stream) if group["name"] == "billing")
        per_consumer = [consumer["pending"] for stream in streams
                        for consumer in client.xinfo_consumers(stream, "billing")]
    finally:
        client.close()
    assert pending == 0, per_consumer  # the 5 it printed were acked; nothing else was delivered
    assert read == int(wanted)  # the group handed out exactly what it handled


def test_a_budget_read_over_part_of_the_shards_looks_at_the_next_part_at_once_when_empty():
    """--max-messages with 3 left over 8 shards reads 3 at a time: an empty part is passed over
    with a 1 ms BLOCK, and only the last part of a round of empty parts waits the full BLOCK;
    then the next round looks again."""
    assert [part_block_ms(8, 3, empty, 200) for empty in range(6)] == [
        PROBE_BLOCK_MS, PROBE_BLOCK_MS, 200, PROBE_BLOCK_MS, PROBE_BLOCK_MS, 200]
    assert part_block_ms(8, 8, 0, 200) == 200  # every shard in one read: the full BLOCK
    assert part_block_ms(2, 1, 0, 200) == PROBE_BLOCK_MS
    assert part_block_ms(2, 1, 1, 200) == 200
    assert part_block_ms(2, 1, 2, 200) == PROBE_BLOCK_MS


@pytest.mark.parametrize(("left", "in_flight", "shards", "count", "fits"), [
    (25_000, 800, 8, 100, True),    # plenty left: the reader keeps one read ahead
    (1_600, 800, 8, 100, True),     # exactly what both reads could return
    (1_599, 800, 8, 100, False),    # one short: the next read waits for the reply
    (50, 0, 8, 6, True),
    (100, 0, 0, 100, False),        # nothing to read ahead
])
def test_a_budget_read_goes_ahead_only_while_everything_in_flight_fits_what_is_left(
        left, in_flight, shards, count, fits):
    assert ahead_fits(left, in_flight, shards, count) is fits
