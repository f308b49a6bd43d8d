"""A1 admission: session and connection limits, handshake timeout, EMFILE, unknown prefixes."""

from __future__ import annotations

import errno
import resource
import signal
from typing import Any

import redis
import trio
from trio_websocket import HandshakeError, connect_websocket_url

from rsc.actors.app import serve
from rsc.actors.config import CoordinatorConfig
from rsc.actors.net.admission import (
    Admission,
    AdmissionListener,
    connection_limit,
    default_max_sessions,
)
from rsc.actors.ops.metrics import CoordinatorMetrics
from rsc.member.session import SessionClosed, open_session
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from tests.conftest import FAST
from tests.processes import rss_bytes, spawn_coordinator, stop

# --- pure -------------------------------------------------------------------------------


def test_default_session_limit_is_80_percent_of_the_fd_limit():
    assert default_max_sessions(256) == 204
    assert default_max_sessions(20_000) == 16_000
    assert default_max_sessions(1) == 1


def test_connection_limit_leaves_room_for_handshakes_and_keeps_fds_for_redis():
    assert connection_limit(204, 256) == 224  # 256 minus the 32 kept for Redis and the rest
    assert connection_limit(2, 20_000) == 10  # a few handshakes beyond a small session limit
    assert connection_limit(16_000, 20_000) == 18_000


def test_admission_refuses_sessions_past_the_limit_and_counts_them():
    metrics = CoordinatorMetrics()
    admission = Admission(max_sessions=2, max_connections=4, metrics=metrics)
    assert admission.open_session() and admission.open_session()
    assert not admission.open_session()
    admission.close_session()
    assert admission.open_session()
    assert metrics.sessions_refused.labels("max_sessions")._value.get() == 1


# --- the accept loop under EMFILE -------------------------------------------------------


class _Peer:
    closed = False

    def close(self) -> None:
        self.closed = True


class _FakeSocket:
    def __init__(self) -> None:
        self.peers: list[_Peer] = []

    async def accept(self):
        peer = _Peer()
        self.peers.append(peer)
        return peer, ("127.0.0.1", 1)

    def getsockname(self):
        return ("127.0.0.1", 1)


class _FakeStream:
    socket = None

    async def aclose(self) -> None:
        pass


class _ExhaustedListener:
    """accept() fails with EMFILE `failures` times, then returns a stream."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.socket = _FakeSocket()

    async def accept(self):
        await trio.lowlevel.checkpoint()
        if self.failures:
            self.failures -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        return _FakeStream()

    async def aclose(self) -> None:
        pass


async def test_emfile_refuses_the_waiting_peer_backs_off_and_keeps_accepting():
    metrics = CoordinatorMetrics()
    inner = _ExhaustedListener(failures=3)
    listener = AdmissionListener(inner, Admission(max_sessions=5, max_connections=5, metrics=metrics))
    with trio.fail_after(5):
        stream = await listener.accept()
    assert stream is not None
    assert len(inner.socket.peers) == 3 and all(peer.closed for peer in inner.socket.peers)
    assert metrics.sessions_refused.labels("fd_exhausted")._value.get() == 3
    assert listener.admission.connections == 1
    await stream.aclose()
    await stream.aclose()  # the slot is given back once
    assert listener.admission.connections == 0
    await listener.aclose()


# --- over websockets, in process ---------------------------------------------------------


async def start(nursery, redis_url, **overrides):
    metrics = CoordinatorMetrics()
    config = CoordinatorConfig(redis_url=redis_url, port=0, **{**FAST, **overrides})
    url = await nursery.start(lambda task_status: serve(config, metrics=metrics,
                                                        task_status=task_status))
    return url, metrics


def join(member_id: str, prefix: str = "orders") -> m.Heartbeat:
    return m.Heartbeat(request_id=0, stream_prefix=prefix, consumer_group="billing",
                       member_id=member_id, member_epoch=0)


async def test_past_max_sessions_a_handshake_gets_503_and_a_slot_frees_on_close(redis_url, nursery):
    url, metrics = await start(nursery, redis_url, max_sessions=2)
    with trio.fail_after(20):
        async with open_session(url, "member") as first, open_session(url, "admin"):
            assert (await first.request(join("a"))).status == Status.OK
            try:
                async with open_session(url, "member"):
                    raise AssertionError("a third session was admitted")
            except SessionClosed as exc:
                assert "HTTP 503" in str(exc)
            assert (await first.request(join("b"))).status == Status.OK  # the others carry on
        async with open_session(url, "member") as again:
            assert (await again.request(join("c"))).status == Status.OK
    assert metrics.sessions_refused.labels("max_sessions")._value.get() == 1


async def test_a_handshake_not_completed_in_time_is_dropped_and_counted(redis_url, nursery):
    url, metrics = await start(nursery, redis_url, handshake_timeout_s=0.3)
    port = int(url.rsplit(":", 1)[1])
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(b"GET /v1/member HTTP/1.1\r\nHost: x\r\n")  # never finished
        with trio.fail_after(5):
            try:
                assert await stream.receive_some(100) == b""
            except trio.BrokenResourceError:
                pass  # reset: dropped all the same
    with trio.fail_after(5):
        while metrics.handshakes_timed_out._value.get() != 1:
            await trio.sleep(0.01)


async def test_a_routing_subscription_on_an_unknown_prefix_lives_with_its_session(redis_url, nursery):
    url, _ = await start(nursery, redis_url)
    with trio.fail_after(20):
        async with open_session(url, "member") as producer:
            unknown = await producer.request(m.GetRouting(request_id=0, stream_prefix="later",
                                                          subscribe=True))
            assert unknown.status == Status.UNKNOWN_STREAM
            async with open_session(url, "admin") as admin:
                await admin.request(m.SetShardCount(request_id=0, stream_prefix="later",
                                                    consumer_group="g", shard_count=2))
            pushed = await producer.pushes.receive()
            assert isinstance(pushed, m.Routing) and pushed.status == Status.OK
            assert pushed.request_id is None and pushed.shard_count == 2


# --- a real coordinator process ---------------------------------------------------------


async def heartbeat_forever(url: str, statuses: list[str], failures: list[BaseException],
                            started: trio.Event) -> None:
    """A real member session heartbeating every 200 ms; records every status and failure."""
    try:
        async with open_session(url, "member") as session:
            response: Any = await session.request(join("steady"))
            epoch = response.member_epoch
            statuses.append(str(response.status))
            started.set()
            while True:
                await trio.sleep(0.2)
                response = await session.request(m.Heartbeat(
                    request_id=0, stream_prefix="orders", consumer_group="billing",
                    member_id="steady", member_epoch=epoch))
                statuses.append(str(response.status))
                if response.member_epoch is not None:
                    epoch = response.member_epoch
    except Exception as exc:  # noqa: BLE001 - the test asserts there is none
        failures.append(exc)
        started.set()


async def half_open(port: int, streams: list, refused: list) -> None:
    try:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
    except OSError:
        refused.append("connect")
        return
    streams.append(stream)
    try:
        await stream.send_all(b"GET /v1/member HTTP/1.1\r\nHost: x\r\n")
        with trio.move_on_after(3):
            if await stream.receive_some(100) == b"":
                refused.append("closed")
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        refused.append("reset")


async def test_fd_exhaustion_under_ulimit_256_refuses_the_excess_and_keeps_serving(redis_url):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    process, url = await spawn_coordinator(redis_url, fd_limit=256)
    port = int(url.rsplit(":", 1)[1])
    statuses: list[str] = []
    failures: list[BaseException] = []
    try:
        async with trio.open_nursery() as nursery:
            started = trio.Event()
            nursery.start_soon(heartbeat_forever, url, statuses, failures, started)
            with trio.fail_after(20):
                await started.wait()
            idle = []
            with trio.fail_after(30):
                for _ in range(100):  # idle sessions: handshake done, then silence
                    idle.append(await connect_websocket_url(nursery, url + "/v1/member"))
            streams: list = []
            refused: list = []
            with trio.fail_after(30):
                async with trio.open_nursery() as attackers:
                    for _ in range(400):
                        attackers.start_soon(half_open, port, streams, refused)
                        await trio.sleep(0.002)
            beats_during = len(statuses)
            # full: one more session is refused (closed at accept, or 503)
            try:
                with trio.fail_after(10):
                    async with open_session(url, "member", connect_timeout=3):
                        raise AssertionError("a session was admitted past the connection limit")
            except SessionClosed:
                pass
            assert process.returncode is None
            for stream in streams:
                await stream.aclose()
            for connection in idle:
                await connection.aclose()
            with trio.fail_after(20):  # slots come back: a new member is served again
                while True:
                    try:
                        async with open_session(url, "member", connect_timeout=2) as session:
                            assert (await session.request(join("late"))).status == Status.OK
                        break
                    except (SessionClosed, HandshakeError):
                        await trio.sleep(0.2)
            nursery.cancel_scope.cancel()
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            with trio.fail_after(10):
                await process.wait()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert not failures, failures
    print(f"refused {len(refused)} of 400 half-open connections; member heartbeats {len(statuses)} "
          f"({beats_during} before the extra session was tried)")
    assert len(refused) >= 200, len(refused)  # the excess: past ~224 connections
    assert set(statuses) == {"OK"}, statuses
    assert len(statuses) >= 10
    assert process.returncode == 0  # it stopped on SIGTERM, cleanly, not by itself


async def test_10000_unknown_prefix_get_routing_calls_keep_rss_flat_and_write_nothing(redis_url):
    process, url = await spawn_coordinator(redis_url)
    try:
        async with open_session(url, "member") as session:
            async def ask(start: int, count: int) -> None:
                for index in range(start, start + count):
                    response = await session.request(m.GetRouting(
                        request_id=0, stream_prefix=f"nothing-here-{index}"))
                    assert response.status == Status.UNKNOWN_STREAM

            async def calls(offset: int, total: int) -> None:
                async with trio.open_nursery() as nursery:
                    for task in range(20):
                        nursery.start_soon(ask, offset + task * (total // 20), total // 20)

            with trio.fail_after(120):
                await calls(0, 1000)  # warm-up: allocator and caches settle
                before = rss_bytes(process.pid)
                await calls(1000, 10_000)
                after = rss_bytes(process.pid)
        client = redis.Redis.from_url(redis_url, decode_responses=True)
        try:
            keys = set(client.keys("*"))
        finally:
            client.close()
    finally:
        await stop(process)
    print(f"RSS before {before / 1e6:.1f} MB, after 10,000 unknown-prefix getRouting "
          f"{after / 1e6:.1f} MB ({(after - before) / 1e6:+.1f} MB)")
    assert after - before < 10 * 1024 * 1024
    assert keys <= {"rsc:coordinator:epoch", "rsc:coordinator:lease", "rsc:store-id",
                    "rsc:format-version", "rsc:store-mark"}, keys  # the mark: K3
