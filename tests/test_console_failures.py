"""D3: `rsc produce` and `rsc consume` fail loudly, as real processes against real servers.

Each expected failure gets its exact one line on stderr within a few seconds,
no traceback, and the documented exit code. Pure parts (URL checks, the rate of
repeated lines, failure texts) are tested without I/O at the end.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys

import pytest
import redis
import trio
from trio_websocket import ConnectionClosed, WebSocketRequest, serve_websocket

from rsc.common.redis_server import free_port
from rsc.common.wording import use_cli_wording
from rsc.member.notices import Notices, redis_problem, then
from rsc.member.producer import StoreMismatch, open_producer
from rsc.member.redis_io.streams import STORE_ID_KEY
from rsc.member.session import BadCoordinatorUrl, check_coordinator_url, refused, session_url
from rsc.member.shells.consume_watch import ConsumeWatch
from rsc.member.shells.tool_config import BadConfig, Endpoints, endpoints
from rsc.protocol import Routing, Status, shard_for_key
from tests.processes import ROOT, log_message
from tests.test_member_support import set_shards

LINE_WAIT_S = 10  # "within a few seconds", with a slow shared machine's start-up on top


class Tool:
    """A `python -m rsc ...` child process whose stderr is read line by line."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.stderr = b""

    @property
    def lines(self) -> list[str]:
        """Its stderr lines, each without the `ts LEVEL ` of a text log line."""
        return [log_message(line) for line in self.stderr.decode(errors="replace").splitlines()]

    async def line(self, starting: str, timeout: float = LINE_WAIT_S) -> str:
        """The first stderr line that starts with `starting`, waiting for it."""
        with trio.fail_after(timeout):
            while True:
                for line in self.lines:
                    if line.startswith(starting):
                        return line
                chunk = await self._stderr().receive_some(65536)
                if not chunk:
                    raise AssertionError(f"exited before {starting!r}: {self.lines}")
                self.stderr += chunk

    async def finish(self, timeout: float = 30) -> int:
        """Read stderr to its end and wait for the exit code; on a timeout the failure shows
        what the tool said."""
        with trio.move_on_after(timeout):
            while chunk := await self._stderr().receive_some(65536):
                self.stderr += chunk
            return await self.process.wait()
        raise AssertionError(f"not ended within {timeout:g} s; its stderr:\n"
                             + "\n".join(self.lines))

    async def stop(self, signum: int = signal.SIGINT, timeout: float = 30) -> int:
        self.process.send_signal(signum)
        return await self.finish(timeout)

    def _stderr(self) -> trio.abc.ReceiveStream:
        assert self.process.stderr is not None
        return self.process.stderr

    def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()


def tool_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RSC_")}
    env.update(extra)
    return env


async def spawn_tool(*args: str, env: dict[str, str] | None = None,
                     stdin: int | None = subprocess.PIPE,
                     stdout: int | None = subprocess.DEVNULL) -> Tool:
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "rsc", *args], stdin=stdin, stdout=stdout,
        stderr=subprocess.PIPE, cwd=ROOT, env=env or tool_env())
    return Tool(process)


async def run_tool(*args: str, stdin: bytes = b"", env: dict[str, str] | None = None,
                   timeout: float = 30) -> tuple[int, list[str]]:
    """Run a tool to its end; (exit code, stderr lines)."""
    with trio.fail_after(timeout):
        result = await trio.run_process(
            [sys.executable, "-m", "rsc", *args], stdin=stdin, capture_stdout=True,
            capture_stderr=True, check=False, cwd=ROOT, env=env or tool_env())
    return result.returncode, [log_message(line) for line in result.stderr.decode().splitlines()]


@pytest.fixture
async def tools():
    """Tools started by a test; any still running at its end is killed (by pid)."""
    started: list[Tool] = []

    async def start(*args: str, **options) -> Tool:
        tool = await spawn_tool(*args, **options)
        started.append(tool)
        return tool

    yield start
    for tool in started:
        tool.kill()
        with trio.move_on_after(10):
            await tool.process.wait()


def assert_no_traceback(tool_or_lines) -> None:
    lines = tool_or_lines.lines if isinstance(tool_or_lines, Tool) else tool_or_lines
    assert not any("Traceback" in line for line in lines), "\n".join(lines)


PRODUCER_WAITING = "retrying (a producer needs routing once: waiting for it)"


# --- coordinator unreachable ---------------------------------------------------------


async def test_d3_produce_coordinator_down_says_connection_refused(tools, redis_url):
    port = free_port()
    produce = await tools("produce", "orders", "--coordinator", f"ws://127.0.0.1:{port}",
                          "--redis-url", redis_url)
    line = await produce.line("rsc produce: connection refused")
    assert line == (f"rsc produce: connection refused: is the coordinator running at "
                    f"ws://127.0.0.1:{port}? {PRODUCER_WAITING}")
    assert await produce.stop() == 128 + signal.SIGINT
    assert_no_traceback(produce)


async def test_d3_consume_coordinator_down_says_connection_refused(tools, redis_url):
    port = free_port()
    consume = await tools("consume", "orders", "billing",
                          env=tool_env(RSC_COORDINATOR_URL=f"ws://127.0.0.1:{port}",
                                       RSC_REDIS_URL=redis_url))
    line = await consume.line("rsc consume: connection refused")
    assert line == (f"rsc consume: connection refused: is the coordinator running at "
                    f"ws://127.0.0.1:{port}? retrying")
    assert await consume.stop() == 0
    assert_no_traceback(consume)


# --- refused: 401, 404, 503 ----------------------------------------------------------


@pytest.mark.parametrize("tool", ["produce", "consume"])
async def test_d3_wrong_token_is_401_with_the_token_hint_and_exit_2(tool, tools, coordinator_factory):
    coordinator = await coordinator_factory(member_token="s3cret")
    args = ["orders"] if tool == "produce" else ["orders", "billing"]
    process = await tools(tool, *args, "--coordinator", coordinator.url, "--token", "wrong",
                          "--redis-url", coordinator.redis_url)
    line = await process.line(f"rsc {tool}: ws://")
    expected = (f"rsc {tool}: {coordinator.url}/v1/member refused the session: HTTP 401: "
                "the token from --token or RSC_TOKEN is not the coordinator's member token")
    assert line == expected  # D3: a refused token never heals: no retrying
    assert await process.finish() == 2
    assert process.lines == [expected]
    assert_no_traceback(process)


async def test_rsc_token_from_the_environment_is_sent(coordinator_factory):
    coordinator = await coordinator_factory(member_token="s3cret")
    await set_shards(coordinator.url, "orders", "billing", 2)
    code, lines = await run_tool("produce", "orders", stdin=b"k\tv\n", env=tool_env(
        RSC_COORDINATOR_URL=coordinator.url, RSC_REDIS_URL=coordinator.redis_url,
        RSC_TOKEN="s3cret"))
    assert code == 0, lines
    assert lines == ["rsc produce: sent 1, retried 0, rerouted 0"]


async def test_d3_a_path_on_the_url_is_404_with_the_right_path_and_exit_2(tools, coordinator):
    produce = await tools("produce", "orders", "--coordinator", f"{coordinator.url}/rsc",
                          "--redis-url", coordinator.redis_url)
    line = await produce.line("rsc produce: ws://")
    assert line == (f"rsc produce: {coordinator.url}/rsc/v1/member refused the session: "
                    "HTTP 404: no such endpoint: give the coordinator as ws://HOST:PORT, for "
                    f"example {coordinator.url}; the tools add /v1/member")
    assert await produce.finish() == 2
    assert len(produce.lines) == 1
    assert_no_traceback(produce)


async def test_d3_a_coordinator_at_its_session_limit_is_503(tools, nursery, redis_url):
    async def full(request: WebSocketRequest) -> None:
        await request.reject(503)

    server = await nursery.start(serve_websocket, full, "127.0.0.1", 0, None)
    url = f"ws://127.0.0.1:{server.port}"
    consume = await tools("consume", "orders", "billing", "--coordinator", url,
                          "--redis-url", redis_url)
    line = await consume.line("rsc consume: ws://")
    assert line == (f"rsc consume: {url}/v1/member refused the session: HTTP 503: the "
                    "coordinator is at its session limit (--max-sessions); retrying")
    assert await consume.stop() == 0
    assert_no_traceback(consume)


# --- Redis unreachable, another Redis -------------------------------------------------


async def test_d3_consume_redis_down_is_said_and_retried(tools, coordinator):
    port = free_port()
    consume = await tools("consume", "orders", "billing", "--coordinator", coordinator.url,
                          "--redis-url", f"redis://127.0.0.1:{port}/0")
    line = await consume.line("rsc consume: cannot reach Redis")
    assert line == (f"rsc consume: cannot reach Redis at redis://127.0.0.1:{port}/0: "
                    "connection refused (is redis-server running there? is --redis-url / "
                    "RSC_REDIS_URL right?); retrying")
    assert await consume.stop() == 0
    assert_no_traceback(consume)


async def test_d3_produce_redis_down_then_ctrl_c_twice_exits_at_once(tools, coordinator):
    await set_shards(coordinator.url, "orders", "billing", 2)
    port = free_port()
    produce = await tools("produce", "orders", "--coordinator", coordinator.url,
                          "--redis-url", f"redis://127.0.0.1:{port}/0")
    await produce.process.stdin.send_all(b"k\tv\n")
    line = await produce.line("rsc produce: cannot reach Redis")
    assert line == (f"rsc produce: cannot reach Redis at redis://127.0.0.1:{port}/0: "
                    "connection refused (is redis-server running there? is --redis-url / "
                    "RSC_REDIS_URL right?); retrying")
    produce.process.send_signal(signal.SIGINT)
    # the routing carries a storeId: nothing is accepted before this Redis is checked against it
    assert (await produce.line("rsc produce: draining")) == (
        "rsc produce: draining: reading no more input, 0 accepted lines left to write "
        "for up to 30 s (Ctrl-C again to exit at once)")
    assert await produce.finish(timeout=5) == 130  # nothing to drain: no second Ctrl-C needed
    assert produce.lines[-1] == "rsc produce: sent 0, retried 0, rerouted 0"
    assert_no_traceback(produce)


def coordinator_peer(streams: list[str], store_id: str):
    """A scripted coordinator whose routing carries `storeId` (docs/protocol.md Producer routing)."""

    async def handler(request: WebSocketRequest) -> None:
        connection = await request.accept()
        try:
            while True:
                frame = json.loads(await connection.get_message())
                await connection.send_message(json.dumps({
                    "type": "routing", "requestId": frame["requestId"], "status": "OK",
                    "streamPrefix": frame["streamPrefix"], "version": 1,
                    "shardCount": len(streams), "hash": "crc32", "streams": streams,
                    "storeId": store_id}))
        except ConnectionClosed:
            pass

    return handler


def db(url: str, index: int) -> str:
    return url.rsplit("/", 1)[0] + f"/{index}"


def store_routing(store_id: str) -> Routing:
    return Routing(status=Status.OK, stream_prefix="orders", version=1, shard_count=2,
                   hash="crc32", streams=STREAMS, store_id=store_id)


def test_d3_routing_carries_the_store_id() -> None:
    """The D3 tests below rely on it: a regression fails here instead of turning into skips."""
    assert store_routing("store-a").store_id == "store-a"


STREAMS = ("{orders:v1:0}", "{orders:v1:1}")


def prepare_store(redis_url: str, store_id: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.set(STORE_ID_KEY, store_id)
    for stream in STREAMS:
        client.xgroup_create(stream, "billing", id="0", mkstream=True)
    client.close()


def mismatch_line(wrong: str, url: str) -> str:
    return (f"{wrong} is not the coordinator's Redis: it holds no storeId, the coordinator "
            f"at {url} uses storeId 'store-a'; point --redis-url (RSC_REDIS_URL) at the "
            "coordinator's Redis")


async def test_producer_refuses_another_redis_before_its_first_write(redis_url):
    prepare_store(redis_url, "store-a")
    wrong = db(redis_url, 5)
    async with open_producer("ws://127.0.0.1:1", wrong, "orders",
                             notices=Notices(lambda line: None)) as producer:
        producer._adopt(store_routing("store-a"))
        with pytest.raises(StoreMismatch) as raised:
            await producer.send("k", "v")
    assert str(raised.value) == mismatch_line(wrong, "ws://127.0.0.1:1")
    async with open_producer("ws://127.0.0.1:1", redis_url, "orders",
                             notices=Notices(lambda line: None)) as producer:
        producer._adopt(store_routing("store-a"))
        assert (await producer.send_batch_located([("k", "v")]))[0][0] in STREAMS


async def test_consume_refuses_another_redis_before_its_members_start(redis_url):
    prepare_store(redis_url, "store-a")
    wrong = db(redis_url, 5)
    urls = Endpoints("ws://127.0.0.1:1", wrong, None)
    watch = ConsumeWatch(urls, "orders", Notices(lambda line: None))
    with pytest.raises(StoreMismatch) as raised:
        await watch.adopt(store_routing("store-a"))
    assert str(raised.value) == mismatch_line(wrong, "ws://127.0.0.1:1")
    assert not watch.ready.is_set()
    right = ConsumeWatch(Endpoints("ws://127.0.0.1:1", redis_url, None), "orders",
                         Notices(lambda line: None))
    await right.adopt(store_routing("store-a"))
    right._redis_ok = True
    right._check_ready()
    assert right.ready.is_set()


@pytest.mark.parametrize("tool", ["produce", "consume"])
async def test_d3_another_redis_than_the_coordinators_exits_1_naming_both(
        tool, nursery, redis_url):
    prepare_store(redis_url, "store-a")
    server = await nursery.start(serve_websocket, coordinator_peer(list(STREAMS), "store-a"),
                                 "127.0.0.1", 0, None)
    url = f"ws://127.0.0.1:{server.port}"
    wrong = db(redis_url, 5)
    args = ["orders"] if tool == "produce" else ["orders", "billing"]
    code, lines = await run_tool(tool, *args, "--coordinator", url, "--redis-url", wrong,
                                 stdin=b"k\tv\n")
    assert (code, lines) == (1, [f"rsc {tool}: {mismatch_line(wrong, url)}"])


async def test_storeid_of_the_real_coordinator_is_checked(redis_url, coordinator):
    """Against the real coordinator once it sends storeId (before that, the fallback below)."""
    streams = await set_shards(coordinator.url, "orders", "billing", 2)
    from rsc.member.session import open_session
    from rsc.protocol import GetRouting

    async with open_session(coordinator.url, "member") as session:
        routing = await session.request(GetRouting(request_id=0, stream_prefix="orders"))
    if getattr(routing, "store_id", None) is None:
        pytest.skip("this coordinator sends no storeId yet")
    wrong = db(redis_url, 5)
    code, lines = await run_tool("produce", "orders", "--coordinator", coordinator.url,
                                 "--redis-url", wrong, stdin=b"k\tv\n")
    assert code == 1 and len(lines) == 1 and "is not the coordinator's Redis" in lines[0]
    assert streams


async def test_d3_wrong_db_without_storeid_names_the_missing_shard(tools, coordinator,
                                                                   redis_url):
    streams = await set_shards(coordinator.url, "orders", "billing", 3)
    wrong = db(redis_url, 5)
    produce = await tools("produce", "orders", "--coordinator", coordinator.url,
                          "--redis-url", wrong)
    await produce.process.stdin.send_all(b"k\tv\n")
    if "is not the coordinator's Redis" in await produce.line("rsc produce: "):
        assert await produce.finish() == 1  # the coordinator sends storeId: checked first
        return
    line = await produce.line("rsc produce: shard")
    shard = streams[shard_for_key("k", 3)]
    assert line == (f"rsc produce: shard {shard} of routing version 1 does not exist in "
                    f"{wrong}: is --redis-url (RSC_REDIS_URL) the coordinator's Redis? retrying")
    produce.process.send_signal(signal.SIGINT)
    await produce.line("rsc produce: draining")
    assert await produce.stop(timeout=5) == 130
    assert_no_traceback(produce)


# --- a prefix without routing ---------------------------------------------------------


async def test_d3_produce_on_a_prefix_without_routing_says_how_to_create_it(tools, coordinator):
    produce = await tools("produce", "nowhere", "--coordinator", coordinator.url,
                          "--redis-url", coordinator.redis_url)
    assert (await produce.line("rsc produce: prefix")) == (
        "rsc produce: prefix 'nowhere' has no routing yet: create its shards with "
        "`rsc admin set-shards nowhere N`; waiting")
    await produce.process.stdin.send_all(b"k\tv\n")
    streams = await set_shards(coordinator.url, "nowhere", "billing", 2)
    assert (await produce.line("rsc produce: prefix 'nowhere' has routing")) == (
        "rsc produce: prefix 'nowhere' has routing now: version 1, 2 shards")
    await produce.process.stdin.aclose()
    assert await produce.finish() == 0
    client = redis.Redis.from_url(coordinator.redis_url)
    assert sum(client.xlen(s) for s in streams) == 1
    client.close()


async def test_d3_consume_on_a_prefix_without_routing_says_how_to_create_it(tools, coordinator):
    consume = await tools("consume", "nowhere", "billing", "--coordinator", coordinator.url,
                          "--redis-url", coordinator.redis_url)
    assert (await consume.line("rsc consume: prefix")) == (
        "rsc consume: prefix 'nowhere' has no routing yet: create its shards with "
        "`rsc admin set-shards nowhere N`; waiting")
    assert await consume.stop() == 0
    assert_no_traceback(consume)


# --- URLs no retry can fix --------------------------------------------------------------


BAD_URLS = [
    ("http://127.0.0.1:8765", "bad coordinator URL 'http://127.0.0.1:8765': the scheme is "
     "http://, the coordinator speaks WebSocket: use ws://127.0.0.1:8765"),
    ("127.0.0.1:8765", "bad coordinator URL '127.0.0.1:8765': it has no scheme; write it as "
     "ws://127.0.0.1:8765"),
    ("ws://127.0.0.1:99999", "bad coordinator URL 'ws://127.0.0.1:99999': port 99999 is not "
     "in 1..65535"),
]


@pytest.mark.parametrize("tool", ["produce", "consume"])
@pytest.mark.parametrize(("url", "message"), BAD_URLS)
async def test_d3_bad_coordinator_url_exits_1_with_one_line(tool, url, message, redis_url):
    args = ["orders"] if tool == "produce" else ["orders", "billing"]
    code, lines = await run_tool(tool, *args, "--coordinator", url, "--redis-url", redis_url)
    assert (code, lines) == (1, [f"rsc {tool}: {message}"])


async def test_d3_bad_redis_url_exits_1_with_one_line():
    code, lines = await run_tool("consume", "orders", "billing", "--redis-url",
                                 "http://127.0.0.1:6379")
    assert code == 1
    assert lines == ["rsc consume: bad Redis URL 'http://127.0.0.1:6379': a Redis URL starts with "
                     "one of redis://, rediss://, unix://, redis+sentinel://, rediss+sentinel://, "
                     "not http://"]


async def test_d3_no_redis_url_at_all_exits_1_naming_flag_and_variable():
    code, lines = await run_tool("produce", "orders")
    assert (code, lines) == (1, ["rsc produce: no Redis URL: pass --redis-url or set "
                                 "RSC_REDIS_URL (the coordinator's Redis)"])


async def test_d3_metrics_port_in_use_exits_1_with_one_line(coordinator):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, lines = await run_tool("consume", "orders", "billing", "--coordinator",
                                     coordinator.url, "--redis-url", coordinator.redis_url,
                                     "--metrics-port", str(port))
    assert code == 1
    assert lines == [f"rsc consume: cannot serve metrics on 127.0.0.1:{port}: "
                     f"{os.strerror(errno.EADDRINUSE)} (pick another --metrics-port or "
                     "--metrics-host)"]


# --- stopping: Ctrl-C once, twice, on a terminal; a closed stdout -----------------------


async def test_d3_consume_ctrl_c_once_drains_twice_exits_at_once(tools, coordinator):
    streams = await set_shards(coordinator.url, "orders", "billing", 1)
    client = redis.Redis.from_url(coordinator.redis_url)
    client.xadd(streams[0], {"key": "k", "value": "slow"})
    consume = await tools("consume", "orders", "billing", "--coordinator", coordinator.url,
                          "--redis-url", coordinator.redis_url, "--work-ms", "60000",
                          "--events")
    await consume.line('{"event":"assigned"')
    with trio.fail_after(10):  # the handler is busy with the message
        while not client.xpending(streams[0], "billing")["pending"]:
            await trio.sleep(0.05)
    consume.process.send_signal(signal.SIGINT)
    assert (await consume.line("rsc consume: draining")) == (
        "rsc consume: draining: finishing in-flight messages and leaving the group "
        "(Ctrl-C again to exit at once)")
    assert await consume.stop(timeout=5) == 130
    assert consume.lines[-1] == ("rsc consume: exiting at once without draining (the "
                                 "coordinator frees the shards when the lease runs out)")
    assert_no_traceback(consume)
    assert client.xpending(streams[0], "billing")["pending"] == 1  # not acked: not lost
    client.close()


async def test_d3_produce_ctrl_c_while_reading_a_terminal(tools, coordinator):
    await set_shards(coordinator.url, "orders", "billing", 1)
    controller, terminal = os.openpty()
    try:
        produce = await tools("produce", "orders", "--coordinator", coordinator.url,
                              "--redis-url", coordinator.redis_url, stdin=terminal)
        os.write(controller, b"k\tfrom a terminal\n")
        client = redis.Redis.from_url(coordinator.redis_url)
        with trio.fail_after(LINE_WAIT_S):  # it is reading the terminal now
            while not client.xlen("{orders:v1:0}"):
                await trio.sleep(0.05)
        client.close()
        assert await produce.stop(timeout=5) == 130
        assert produce.lines[-1] == "rsc produce: sent 1, retried 0, rerouted 0"
        assert_no_traceback(produce)
    finally:
        os.close(controller)
        os.close(terminal)


async def test_d3_consume_into_a_closed_pipe_drains_leaves_and_exits_0(tools, coordinator):
    """`rsc consume ... | head -1`: the reader goes away after one line."""
    streams = await set_shards(coordinator.url, "orders", "billing", 2)
    client = redis.Redis.from_url(coordinator.redis_url, decode_responses=True)
    for n in range(5):
        client.xadd(streams[n % 2], {"key": f"k{n}", "value": str(n)})
    consume = await tools("consume", "orders", "billing", "--coordinator", coordinator.url,
                          "--redis-url", coordinator.redis_url, stdout=subprocess.PIPE)
    with trio.fail_after(LINE_WAIT_S):
        first = await consume.process.stdout.receive_some(1)
    assert first == b"{"
    await consume.process.stdout.aclose()  # as `head -1` exits
    assert await consume.finish(timeout=20) == 0
    assert_no_traceback(consume)
    assert not any("PipeClosed" in line for line in consume.lines)
    from rsc.member.session import open_session
    from rsc.protocol import DescribeGroup

    async with open_session(coordinator.url, "admin") as session:  # it left: no lease wait
        described = await session.request(DescribeGroup(
            request_id=0, stream_prefix="orders", consumer_group="billing"))
    assert described.members == ()
    client.close()


async def test_d3_consume_into_a_closed_pipe_with_nothing_to_write_exits(tools, coordinator):
    await set_shards(coordinator.url, "orders", "billing", 1)
    consume = await tools("consume", "orders", "billing", "--coordinator", coordinator.url,
                          "--redis-url", coordinator.redis_url, "--events",
                          stdout=subprocess.PIPE)
    await consume.line('{"event":"assigned"')
    await consume.process.stdout.aclose()
    assert await consume.finish(timeout=20) == 0
    assert_no_traceback(consume)


# --- pure: configuration, URL checks, lines, rate ----------------------------------------


class Flags:
    def __init__(self, coordinator=None, redis_url=None, token=None):
        self.coordinator, self.redis_url, self.token = coordinator, redis_url, token
        self.ca_file = None


def test_flags_win_over_the_environment_which_wins_over_the_default():
    env = {"RSC_COORDINATOR_URL": "ws://c:1", "RSC_REDIS_URL": "redis://r:2/0",
           "RSC_TOKEN": "t"}
    assert endpoints(Flags(), env) == Endpoints("ws://c:1", "redis://r:2/0", "t")
    assert endpoints(Flags("ws://f:3", "redis://f:4/1", "u"), env) == Endpoints(
        "ws://f:3", "redis://f:4/1", "u")
    assert endpoints(Flags(redis_url="redis://r:2/0"), {}) == Endpoints(
        "ws://127.0.0.1:8765", "redis://r:2/0", None)
    with pytest.raises(BadConfig, match="no Redis URL"):
        endpoints(Flags(), {})


@pytest.mark.parametrize(("url", "message"), BAD_URLS + [
    ("ws://:8765", "no host"), ("ftp://h:1", "the scheme is ftp://"), ("ws://h:0", "port 0")])
def test_bad_coordinator_urls_name_what_is_wrong(url, message):
    with pytest.raises(BadCoordinatorUrl) as raised:
        check_coordinator_url(url)
    assert message in str(raised.value)


def test_good_coordinator_urls_pass_and_the_endpoint_path_is_not_doubled():
    assert check_coordinator_url("ws://h:1/") == "ws://h:1"
    assert check_coordinator_url("wss://h") == "wss://h"
    assert session_url("ws://h:1", "member") == "ws://h:1/v1/member"
    assert session_url("ws://h:1/v1/member/", "member") == "ws://h:1/v1/member"
    assert session_url("ws://h:1/v1/admin", "member") == "ws://h:1/v1/admin/v1/member"


def test_refusal_lines_carry_the_fix_and_keep_the_status_in_the_reason():
    # L2: the library's words in a library call, the flags in `rsc`
    assert refused("ws://h:1", "member", 401).line.endswith("give it as token=")
    use_cli_wording()
    try:
        assert refused("ws://h:1", "member", 401).line.endswith("pass --token or set RSC_TOKEN")
    finally:
        use_cli_wording(False)
    assert str(refused("ws://h:1", "admin", 401)) == "ws://h:1/v1/admin refused the session: HTTP 401"
    assert "/v1/admin" in refused("ws://h:1/x", "admin", 404).line
    assert refused("ws://h:1", "member", 418).line.endswith("HTTP 418")


def test_notices_say_once_repeat_slowly_and_close_what_was_said():
    now = [0.0]
    said: list[str] = []
    notices = Notices(said.append, repeat_s=15, clock=lambda: now[0])
    notices.say("redis", "down")
    now[0] = 14.9
    notices.say("redis", "down")
    assert said == ["down"]
    now[0] = 15.0
    notices.say("redis", "down")
    notices.say("redis", "down harder")  # a new text is said at once
    assert said == ["down", "down", "down harder"]
    notices.clear("redis", "up")
    notices.clear("redis", "up")  # nothing was said since
    notices.clear("coordinator", "connected")  # never said
    assert said == ["down", "down", "down harder", "up"]
    assert not notices.active("redis")


def test_redis_problem_lines_name_the_url():
    refused_error = redis.ConnectionError("Error 111 connecting to h:1. Connection refused.")
    assert redis_problem(refused_error, "redis://h:1/0").startswith(
        "cannot reach Redis at redis://h:1/0: connection refused")
    assert "does not answer" in redis_problem(redis.TimeoutError("t"), "redis://h:1/0")
    assert "read-only" in redis_problem(redis.ReadOnlyError("READONLY"), "redis://h:1/0")
    assert then("running at x?", "retrying") == "running at x? retrying"
    assert then("refused", "retrying") == "refused; retrying"


async def test_d3_consume_says_when_the_coordinator_goes_away_and_comes_back(tools, redis_url,
                                                                             nursery):
    from tests.test_producer import coordinator_on

    port = free_port()
    coordinator = await coordinator_on(nursery, redis_url, port)
    await set_shards(coordinator.url, "orders", "billing", 1)
    consume = await tools("consume", "orders", "billing", "--coordinator", coordinator.url,
                          "--redis-url", redis_url, "--events")
    await consume.line('{"event":"assigned"')
    await coordinator.stop()
    line = await consume.line("rsc consume: lost the coordinator session")
    assert line.startswith(f"rsc consume: lost the coordinator session at {coordinator.url} (")
    assert line.endswith("retrying (members keep their shards while their lease lasts)")
    assert (await consume.line("rsc consume: connection refused")) == (
        f"rsc consume: connection refused: is the coordinator running at {coordinator.url}? "
        "retrying (members keep their shards while their lease lasts)")
    coordinator = await coordinator_on(nursery, redis_url, port)
    assert (await consume.line("rsc consume: connected")) == (
        f"rsc consume: connected to the coordinator at {coordinator.url}")
    assert await consume.stop() == 0
    assert_no_traceback(consume)
    await coordinator.stop()


LISTENER_EXAMPLE = '''
import signal

import trio

from rsc.member.listener import listener


@listener("orders", "billing", coordinator_url="COORDINATOR", redis_url="REDIS",
          concurrency=2)
async def handle(message):
    print(message.shard, message.id, message.key, message.value, flush=True)


async def main():
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def stop_on_signal():
                async for _ in signals:
                    handle.stop()  # drain in-flight work, leave the group (epoch -1)
                    return

            nursery.start_soon(stop_on_signal)
            await handle.run()  # returns once every member has left
            nursery.cancel_scope.cancel()


trio.run(main)
'''


async def test_readme_listener_example_leaves_the_group_on_ctrl_c(coordinator, tmp_path):
    """The README's listener example: Ctrl-C leaves at once instead of waiting for the lease."""
    from rsc.member.session import open_session
    from rsc.protocol import DescribeGroup

    streams = await set_shards(coordinator.url, "orders", "billing", 2)
    script = tmp_path / "example.py"
    script.write_text(LISTENER_EXAMPLE.replace("COORDINATOR", coordinator.url)
                      .replace("REDIS", coordinator.redis_url))
    client = redis.Redis.from_url(coordinator.redis_url)
    client.xadd(streams[0], {"key": "k", "value": "hello"})
    client.close()
    process = await trio.lowlevel.open_process([sys.executable, str(script)], cwd=ROOT,
                                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    example = Tool(process)
    try:
        printed = b""
        assert process.stdout is not None
        with trio.fail_after(LINE_WAIT_S):
            while not printed.endswith(b"\n"):
                chunk = await process.stdout.receive_some(4096)
                assert chunk, example.lines
                printed += chunk
        assert printed.split()[-1] == b"hello"
        assert await example.stop(timeout=15) == 0
        assert_no_traceback(example)
        async with open_session(coordinator.url, "admin") as session:
            described = await session.request(DescribeGroup(
                request_id=0, stream_prefix="orders", consumer_group="billing"))
        assert described.members == ()  # left: nobody waits for a lease to run out
    finally:
        example.kill()
        with trio.move_on_after(10):
            await process.wait()


# --- what waiting cannot heal: exit 2 (D3) ------------------------------------------------


@pytest.mark.parametrize("tool", ["produce", "consume"])
async def test_d3_a_db_index_the_server_does_not_have_ends_the_tool_with_exit_2(
        tool, tools, coordinator, redis_url):
    await set_shards(coordinator.url, "orders", "billing", 2)
    wrong = db(redis_url, 99)
    args = ["orders"] if tool == "produce" else ["orders", "billing"]
    process = await tools(tool, *args, "--coordinator", coordinator.url, "--redis-url", wrong)
    if tool == "produce":
        await process.process.stdin.send_all(b"k\tv\n")
    assert await process.finish() == 2
    assert len(process.lines) == 1, process.lines
    assert process.lines[0].startswith(f"rsc {tool}: Redis at {wrong} refuses this URL: ")
    assert "DB index is out of range" in process.lines[0]
    assert_no_traceback(process)


@pytest.mark.parametrize("tool", ["produce", "consume"])
async def test_d3_a_db_that_is_not_a_number_ends_the_tool_with_exit_2(tool, redis_url):
    wrong = redis_url.rsplit("/", 1)[0] + "/abc"
    args = ["orders"] if tool == "produce" else ["orders", "billing"]
    code, lines = await run_tool(tool, *args, "--coordinator", "ws://127.0.0.1:1",
                                 "--redis-url", wrong)
    assert code == 2
    assert lines == [f"rsc {tool}: bad Redis URL {wrong}: the db 'abc' is not a number "
                     "(redis://HOST:PORT/N, N from 0)"]


def test_d3_unrecoverable_rules():
    from rsc.member.redis_io.unrecoverable import (
        redis_error_is_permanent,
        redis_url_problem,
        refusal_is_permanent,
    )

    assert [refusal_is_permanent(code) for code in (401, 403, 404, 503, 500)] == [
        True, True, True, False, False]
    assert redis_url_problem("redis://h:6379/abc") is not None
    assert redis_url_problem("redis://h:6379/3") is None
    assert redis_url_problem("redis://h:6379") is None
    assert redis_url_problem("redis://h:6379/") is None
    assert redis_error_is_permanent(redis.ResponseError("DB index is out of range"))
    assert not redis_error_is_permanent(redis.ConnectionError("Connection refused"))
    assert not redis_error_is_permanent(redis.ResponseError("LOADING"))


def _evalsha_calls(redis_url: str) -> int:
    client = redis.Redis.from_url(redis_url)
    try:
        stats = client.info("commandstats")
        return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))
    finally:
        client.close()


async def test_d2_sigterm_keeps_delivering_for_the_flush_timeout_then_exits_1_naming_what_is_left(
        tools, coordinator, redis_url):
    streams = await set_shards(coordinator.url, "orders", "billing", 4)
    client = redis.Redis.from_url(redis_url)
    try:
        client.delete(streams[0], streams[1])  # two shards Redis cannot take: MISSING, retried
    finally:
        client.close()
    produce = await tools("produce", "orders", "--coordinator", coordinator.url,
                          "--redis-url", redis_url, "--flush-timeout", "1")
    keys = [key for key in (f"k{n}" for n in range(200))
            if shard_for_key(key, 4) in (0, 1)][:10]
    await produce.process.stdin.send_all(b"".join(f"{k}\tv\n".encode() for k in keys))
    await produce.line("rsc produce: shard")
    calls = _evalsha_calls(redis_url)
    with trio.fail_after(30):  # many retries on both shards
        while _evalsha_calls(redis_url) < calls + 20:
            await trio.sleep(0.05)
    refusals = [line for line in produce.lines if "does not exist" in line]
    assert len(refusals) == 1, f"one line for a repeated problem, not one per retry: {refusals}"
    produce.process.send_signal(signal.SIGTERM)
    assert await produce.finish(timeout=20) == 1
    assert produce.lines[-1] == (f"rsc produce: flush timeout: {len(keys)} accepted lines not "
                                 "delivered after 1 s (sent 0)")
    assert_no_traceback(produce)


async def test_d2_a_second_sigterm_while_flushing_exits_at_once(tools, coordinator, redis_url):
    streams = await set_shards(coordinator.url, "orders", "billing", 1)
    client = redis.Redis.from_url(redis_url)
    try:
        client.delete(streams[0])
    finally:
        client.close()
    produce = await tools("produce", "orders", "--coordinator", coordinator.url,
                          "--redis-url", redis_url)  # the default flush timeout: 30 s
    await produce.process.stdin.send_all(b"k\tv\n")
    await produce.line("rsc produce: shard")
    produce.process.send_signal(signal.SIGTERM)
    await produce.line("rsc produce: draining")
    produce.process.send_signal(signal.SIGTERM)
    assert await produce.finish(timeout=10) == 130
    assert "exiting at once" in produce.lines[-1]
    assert_no_traceback(produce)
