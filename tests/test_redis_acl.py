"""K6 against a real redis-server: the tools run as the documented least-privilege ACL users.

The users are created with ACL SETUSER from docs/examples/redis-acl.conf (the very file the
Redis page includes), each with a test password, on a server whose default user has a
password of its own. Then, end to end, each tool as its role:

- `rsc coordinator` (rsc-coordinator): shards set and resharded (2 -> 3, the old shards
  drained and retired), retention applied, offsets reset;
- `rsc produce` (rsc-producer), and a producer with `min_replicas=0`;
- `rsc consume` and a Listener with a dead-letter stream (rsc-member), `rsc consume --peek`;

and nothing the tools sent was refused (ACL LOG) but the one INFO that tells a server from a
cluster node, refused harmlessly. A user lacking one permission gets one line naming it:
exit 2 for consume, for produce before it accepted any input, exit 1 for the coordinator.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import trio

from rsc.common.redis_server import EmbeddedRedis
from rsc.member.listener import Listener
from rsc.member.policies import RetryPolicy
from rsc.member.producer import open_producer
from rsc.member.session import open_session
from rsc.protocol import SetShardCount, Status
from tests.processes import ROOT
from tests.redis_rigs import server_binary
from tests.test_coordinator_outage import TEST_TIMING, Coordinator
from tests.test_member_support import set_shards

ACL_FILE = Path(ROOT) / "docs" / "examples" / "redis-acl.conf"
ADMIN_PASSWORD = "Adm1nOnlyPW"
PASSWORDS = {"rsc-coordinator": "CoordPW-9f2", "rsc-member": "MemberPW-4k1", "rsc-producer": "ProdPW-7x3"}
PREFIX, GROUP, DEAD_LETTERS = "orders", "billing", "dlq:orders"


def acl_rules() -> dict[str, list[str]]:
    """The documented users: name -> rules (the file's password placeholders dropped)."""
    users: dict[str, list[str]] = {}
    for line in ACL_FILE.read_text().splitlines():
        if line.startswith("user "):
            _, name, *rules = line.split()
            users[name] = [rule for rule in rules if not rule.startswith(">")]
    return users


def create_users(admin: redis.Redis, *, drop: tuple[str, str] | None = None) -> None:
    """ACL SETUSER each documented user with its test password (`drop`: (user, rule) left out)."""
    xackdel = bool(admin.execute_command("COMMAND INFO", "XACKDEL")[0])
    for name, rules in acl_rules().items():
        rules = [rule for rule in rules if (name, rule) != drop]
        if name == "rsc-member" and xackdel:
            rules.append("+xackdel")  # Redis >= 8.2 (the file's note)
        admin.execute_command("ACL", "SETUSER", name, "reset", *rules, f">{PASSWORDS[name]}")


def role_url(server: EmbeddedRedis, user: str) -> str:
    return f"redis://{user}:{PASSWORDS[user]}@127.0.0.1:{server.port}/0"


@pytest.fixture
def acl_server() -> Iterator[tuple[EmbeddedRedis, redis.Redis]]:
    with EmbeddedRedis(binary=server_binary(), args=["--requirepass", ADMIN_PASSWORD]) as server:
        admin = redis.Redis(port=server.port, password=ADMIN_PASSWORD, decode_responses=True)
        if tuple(int(part) for part in admin.info("server")["redis_version"].split(".")[:2]) < (7, 0):
            admin.close()
            pytest.skip("the documented ACL uses read-only key patterns (%R~), Redis >= 7.0")
        create_users(admin)
        admin.execute_command("ACL", "LOG", "RESET")
        try:
            yield server, admin
        finally:
            admin.close()


def refused(admin: redis.Redis) -> list[str]:
    """What ACL LOG says the users were refused, as "user: object", INFO left out."""
    seen = []
    for fields in admin.acl_log(count=128):
        if str(fields.get("object")) != "info":
            seen.append(f"{fields.get('username')}: {fields.get('reason')} {fields.get('object')}")
    return seen


async def rsc(*args: str, stdin: bytes = b"", timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(timeout):
        return await trio.run_process([sys.executable, "-m", "rsc", *args], cwd=ROOT, stdin=stdin,
                                      capture_stdout=True, capture_stderr=True, check=False)


async def test_k6_the_tools_run_end_to_end_as_the_documented_acl_users(acl_server, nursery):
    server, admin = acl_server
    coordinator = Coordinator(role_url(server, "rsc-coordinator"), TEST_TIMING)
    await coordinator.start(nursery)
    try:
        await set_shards(coordinator.url, PREFIX, GROUP, 2)
        member_url, producer_url = role_url(server, "rsc-member"), role_url(server, "rsc-producer")
        lines = "".join(f"k{n}\tv{n}\n" for n in range(40)).encode()
        produced = await rsc("produce", PREFIX, "--coordinator", coordinator.url,
                             "--redis-url", producer_url, stdin=lines)
        assert produced.returncode == 0, produced.stderr
        consumed = await rsc("consume", PREFIX, GROUP, "--coordinator", coordinator.url,
                             "--redis-url", member_url, "--max-messages", "40")
        assert consumed.returncode == 0, consumed.stderr
        assert len(consumed.stdout.splitlines()) == 40

        # a listener whose handler fails on "bad" values: they go to the dead-letter stream
        handled: list[str] = []

        async def handle(message) -> None:
            if message.value.startswith("bad"):
                raise RuntimeError("cannot handle it")
            handled.append(message.value)

        listener = Listener(handle, stream_prefix=PREFIX, consumer_group=GROUP,
                            coordinator_url=coordinator.url, redis_url=member_url,
                            retry=RetryPolicy(max_deliveries=1, dead_letter_stream=DEAD_LETTERS))
        async with trio.open_nursery() as members:
            await members.start(listener.run)
            async with open_producer(coordinator.url, producer_url, PREFIX) as producer:
                await producer.send_batch([("k1", "bad-1"), ("k2", "good-1")])
                await set_shards(coordinator.url, PREFIX, GROUP, 3)  # a reshard under load
                await producer.send_batch([(f"k{n}", f"after-{n}") for n in range(30)])
            with trio.fail_after(30):
                while len(handled) < 31 or admin.xlen(DEAD_LETTERS) < 1:
                    await trio.sleep(0.05)
            with trio.fail_after(30):  # the old shards drained and retired
                while admin.exists(f"{{{PREFIX}:v1:0}}"):
                    await trio.sleep(0.1)
            # P2: the dead letters' own retention, applied by the coordinator as its user
            capped = await rsc("admin", "--url", coordinator.url, "set-retention", PREFIX,
                               "--none", "--max-length", "1", "--dead-letters", GROUP)
            assert capped.returncode == 0, capped.stderr
            admin.xadd(DEAD_LETTERS, {"value": "newer"})
            with trio.fail_after(30):
                while admin.xlen(DEAD_LETTERS) != 1:
                    await trio.sleep(0.05)
            listener.stop()
            members.cancel_scope.deadline = trio.current_time() + 20
        async with open_producer(coordinator.url, producer_url, PREFIX) as producer:
            await producer.send_batch([(f"k{n}", f"unread-{n}") for n in range(5)])
        peeked = await rsc("consume", PREFIX, "--peek", "--coordinator", coordinator.url,
                           "--redis-url", member_url, "--max-messages", "5")
        assert peeked.returncode == 0 and len(peeked.stdout.splitlines()) == 5, peeked
        retention = await rsc("admin", "--url", coordinator.url, "set-retention", PREFIX, "--acked",
                              "--max-length", "1000")
        assert retention.returncode == 0, retention.stderr
        reset = await rsc("admin", "--url", coordinator.url, "reset-offsets", PREFIX, GROUP,
                          "--to-earliest")
        assert reset.returncode == 0 and b"reset on 3 shard(s)" in reset.stdout, reset
        assert coordinator.process is not None and coordinator.process.returncode is None
    finally:
        await coordinator.stop()
    assert refused(admin) == []
    assert b"NOPERM" not in coordinator.logs and b"no permissions" not in coordinator.logs


@pytest.mark.parametrize(("tool", "user", "rule", "named"), [
    ("consume", "rsc-member", "+xreadgroup", "'xreadgroup'"),
    ("consume", "rsc-member", "+xack", "+xack"),  # K10: found by the probe at start
    ("produce", "rsc-producer", "+script|load", "'script|load'"),
    ("produce", "rsc-producer", "%R~rsc:store-id", "rsc:store-id"),
])
async def test_k6_a_missing_permission_is_one_line_and_exit_2_for_the_clients(
        acl_server, nursery, tool, user, rule, named):
    server, admin = acl_server
    coordinator = Coordinator(role_url(server, "rsc-coordinator"), TEST_TIMING)
    await coordinator.start(nursery)
    try:
        await set_shards(coordinator.url, PREFIX, GROUP, 2)
        async with open_producer(coordinator.url, role_url(server, "rsc-producer"), PREFIX) as producer:
            await producer.send_batch([("k", "to-ack")])  # something to read and ack
        create_users(admin, drop=(user, rule))
        args = [tool, PREFIX, *([GROUP] if tool == "consume" else []), "--coordinator",
                coordinator.url, "--redis-url", role_url(server, user)]
        done = await rsc(*args, stdin=b"k\tv\n")
    finally:
        await coordinator.stop()
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert [line for line in lines if "permission" in line] == lines[-1:], lines
    assert named in lines[-1] and "docs/operations/redis.md" in lines[-1], lines[-1]


async def test_k6_the_coordinator_exits_1_at_start_naming_the_missing_permission(acl_server):
    server, admin = acl_server
    create_users(admin, drop=("rsc-coordinator", "+incrby"))
    done = await rsc("coordinator", "--redis-url", role_url(server, "rsc-coordinator"), "--port", "0")
    assert done.returncode == 1, done.stderr
    assert re.search(rb"no permissions to run the 'incrby' command", done.stderr), done.stderr
    assert b"configuration error" in done.stderr


async def test_k10_the_coordinator_without_hset_exits_1_at_start_naming_it(acl_server):
    server, admin = acl_server
    create_users(admin, drop=("rsc-coordinator", "+hset"))  # used only by metadata writes
    done = await rsc("coordinator", "--redis-url", role_url(server, "rsc-coordinator"), "--port", "0")
    assert done.returncode == 1, done.stderr
    assert b"the permission +hset" in done.stderr and b"configuration error" in done.stderr
    assert b"listening on" not in done.stdout


async def test_k10_produce_without_xadd_exits_2_before_taking_any_input(acl_server, nursery):
    server, admin = acl_server
    coordinator = Coordinator(role_url(server, "rsc-coordinator"), TEST_TIMING)
    await coordinator.start(nursery)
    try:
        streams = await set_shards(coordinator.url, PREFIX, GROUP, 1)
        create_users(admin, drop=("rsc-producer", "+xadd"))
        done = await rsc("produce", PREFIX, "--coordinator", coordinator.url,
                         "--redis-url", role_url(server, "rsc-producer"), stdin=b"k\tv\n")
        assert done.returncode == 2, done.stderr
        assert b"the permission +xadd" in done.stderr
        assert admin.xlen(streams[0]) == 0
    finally:
        await coordinator.stop()


async def test_k10_consume_without_xack_exits_2_before_handling_anything(acl_server, nursery):
    server, admin = acl_server
    coordinator = Coordinator(role_url(server, "rsc-coordinator"), TEST_TIMING)
    await coordinator.start(nursery)
    try:
        await set_shards(coordinator.url, PREFIX, GROUP, 1)
        async with open_producer(coordinator.url, role_url(server, "rsc-producer"), PREFIX) as producer:
            await producer.send_batch([("k", f"v{n}") for n in range(50)])
        create_users(admin, drop=("rsc-member", "+xack"))
        done = await rsc("consume", PREFIX, GROUP, "--coordinator", coordinator.url,
                         "--redis-url", role_url(server, "rsc-member"))
        assert done.returncode == 2, done.stderr
        assert b"the permission +xack" in done.stderr
        assert done.stdout == b""  # not one of the 50 handled (they would be again on restart)
    finally:
        await coordinator.stop()


async def test_k6_a_wrong_password_is_a_configuration_error_for_every_tool(acl_server):
    server, _ = acl_server
    wrong = f"redis://rsc-member:not-the-password@127.0.0.1:{server.port}/0"
    for args in (["consume", PREFIX, GROUP], ["produce", PREFIX]):
        done = await rsc(*args, "--coordinator", "ws://127.0.0.1:9", "--redis-url", wrong)
        assert done.returncode == 2, (args, done.stderr)
        assert b"refuses the credentials" in done.stderr and b"not-the-password" not in done.stderr
    done = await rsc("coordinator", "--redis-url", wrong, "--port", "0")
    assert done.returncode == 1 and b"not-the-password" not in done.stderr, done.stderr
    noauth = f"redis://127.0.0.1:{server.port}/0"  # NOAUTH: no password at all
    done = await rsc("consume", PREFIX, GROUP, "--coordinator", "ws://127.0.0.1:9",
                     "--redis-url", noauth)
    assert done.returncode == 2 and b"refuses the credentials" in done.stderr, done.stderr


async def test_k6_produce_keeps_what_it_accepted_and_says_why_until_the_permission_is_back(
        acl_server, nursery):
    """D2 wins once input was accepted: a revoked permission is said (not a silent retry), the
    accepted lines are kept, and they land once the permission is granted again."""
    server, admin = acl_server
    coordinator = Coordinator(role_url(server, "rsc-coordinator"), TEST_TIMING)
    await coordinator.start(nursery)
    try:
        streams = await set_shards(coordinator.url, PREFIX, GROUP, 1)
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "rsc", "produce", PREFIX, "--coordinator", coordinator.url,
             "--redis-url", role_url(server, "rsc-producer")],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert process.stdin is not None and process.stderr is not None
        said = bytearray()

        async def collect() -> None:
            assert process.stderr is not None
            async for chunk in process.stderr:
                said.extend(chunk)

        nursery.start_soon(collect)
        await process.stdin.send_all(b"k\tfirst\n")
        with trio.fail_after(20):
            while admin.xlen(streams[0]) < 1:
                await trio.sleep(0.05)
        create_users(admin, drop=("rsc-producer", "+xadd"))
        await process.stdin.send_all(b"k\tsecond\n")
        with trio.fail_after(20):
            while b"kept (D2)" not in said:
                await trio.sleep(0.05)
        assert process.returncode is None and admin.xlen(streams[0]) == 1
        assert b"the script's XADD" in said
        create_users(admin)
        await process.stdin.aclose()
        with trio.fail_after(30):
            assert await process.wait() == 0, bytes(said)
        assert admin.xlen(streams[0]) == 2
    finally:
        await coordinator.stop()


async def test_k6_a_permission_lost_while_the_coordinator_runs_turns_readyz_503_with_the_reason(
        acl_server, nursery):
    import urllib.error
    import urllib.request

    from rsc.common.redis_server import free_port

    server, admin = acl_server
    metrics_port = free_port()
    coordinator = Coordinator(role_url(server, "rsc-coordinator"),
                              (*TEST_TIMING, "--metrics-port", str(metrics_port)))
    await coordinator.start(nursery)

    def readyz() -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/readyz", timeout=5) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as refused:
            return refused.code, refused.read().decode()

    try:
        assert (await trio.to_thread.run_sync(readyz))[0] == 200
        create_users(admin, drop=("rsc-coordinator", "+hset"))  # the metadata script's HSET
        async with open_session(coordinator.url, "admin") as session:  # a metadata write: refused
            refused = await session.request(SetShardCount(
                request_id=0, stream_prefix=PREFIX, consumer_group=GROUP, shard_count=2))
        assert refused.status is Status.COORDINATOR_NOT_AVAILABLE, refused
        with trio.fail_after(20):
            while (answer := await trio.to_thread.run_sync(readyz))[0] != 503:
                await trio.sleep(0.1)
        assert "configuration error" in answer[1] and "HSET" in answer[1], answer
        assert coordinator.process is not None and coordinator.process.returncode is None
    finally:
        await coordinator.stop()


def test_b7_the_documented_users_can_still_do_what_the_redis_page_says(acl_server):
    """docs/operations/redis.md, "What each user can still do": Redis ACLs cannot confine a
    user to rsc's scripts, so these go through; the page must say so (and it does)."""
    server, admin = acl_server
    page = (Path(ROOT) / "docs" / "operations" / "redis.md").read_text()
    assert "## What each user can still do" in page
    shard, other = "{orders:v1:0}", "{payments:v1:0}"
    sealed = "{orders:v1:0}:sealed"
    for stream in (shard, other):
        admin.xadd(stream, {"key": "k", "value": "v"})
        admin.xgroup_create(stream, "billing", id="0")
        admin.xgroup_create(stream, "audit", id="0")
    producer = redis.Redis.from_url(role_url(server, "rsc-producer"), decode_responses=True)
    member = redis.Redis.from_url(role_url(server, "rsc-member"), decode_responses=True)
    try:
        # a producer trims another prefix's shard, unconsumed entries and all
        producer.xadd(other, {"value": "x"}, maxlen=0, approximate=False)
        assert admin.xlen(other) == 0
        # ends a shard for ever: no later XADD fits after the largest id
        producer.xadd(shard, {"value": "x"}, id="18446744073709551615-18446744073709551615")
        with pytest.raises(redis.ResponseError, match="exhausted the last possible ID"):
            admin.xadd(shard, {"value": "y"})
        # fakes a seal marker (the produce script checks EXISTS)
        producer.xadd(sealed, {"fake": "1"})
        assert admin.exists(sealed)
        # a member reads and acks another group's entries
        read = member.xreadgroup("audit", "intruder", {shard: ">"}, count=1)
        entry_id = read[0][1][0][0]
        assert member.xack(shard, "audit", entry_id) == 1
        assert admin.xpending(shard, "audit")["pending"] == 0
    finally:
        producer.close()
        member.close()
