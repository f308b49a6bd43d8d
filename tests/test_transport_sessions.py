"""Sessions: forgotten exactly once after their last queued request; a request that meets a bug
ends only that request; ticks never block."""

from __future__ import annotations

import gc
import json
import weakref

import trio

from rsc.actors.router import Router, unavailable_response
from rsc.actors.server import MAX_IN_FLIGHT, Session
from rsc.protocol import messages as m
from rsc.protocol.errors import Status


class _Connection:
    """What a Session needs of actors/net/ws_server.py's connection: frames out, never waiting."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.writing = False
        self.broken = False
        self.on_written = None

    def when_written(self, callback) -> None:
        self.on_written = callback

    def send_text(self, text: str) -> None:
        self.sent.append(text)

    def start_close(self, code: int, reason: str | None = None) -> None:
        self.closed_with = code
        self.broken = True


def _ok(request_id: int) -> m.Message:
    return m.Routing(request_id=request_id, status=Status.OK, stream_prefix="orders")


async def test_a_closed_session_is_forgotten_once_after_its_last_queued_request():
    session = Session(_Connection())  # type: ignore[arg-type]
    first, second = await session.expect(), await session.expect()
    forgotten: list[Session] = []
    session.close(lambda: forgotten.append(session))
    assert forgotten == []  # the actors may still register it while handling these two
    first.resolve(_ok(1))
    assert forgotten == []
    second.resolve(_ok(2))
    assert forgotten == [session]
    session.push(_ok(3))  # pushes to a gone session are dropped, and forget is not repeated
    session.wake()
    assert forgotten == [session]


async def test_a_forgotten_session_is_freed_without_the_cycle_collector():
    """The connection's write hook was the only reference back to its session: once the
    session is forgotten the hook goes, so a closed session and its connection are freed when
    dropped. At 5,000 sessions a restart of 500 left ~30 objects each for a full collection
    that took 0.4 s of the event loop (docs/benchmarks.md, round 5)."""
    connection = _Connection()
    session = Session(connection)  # type: ignore[arg-type]
    assert connection.on_written == session.wake
    reply = await session.expect()
    session.close(lambda: None)
    assert connection.on_written is not None  # a request still out: the session still writes
    reply.resolve(_ok(1))
    assert connection.on_written is None
    gone = weakref.ref(session)
    gc.disable()
    try:
        del session, reply
        assert gone() is None
    finally:
        gc.enable()


async def test_a_session_with_nothing_pending_is_forgotten_at_once():
    connection = _Connection()
    session = Session(connection)  # type: ignore[arg-type]
    reply = await session.expect()
    reply.resolve(_ok(1))
    assert len(connection.sent) == 1  # written in place, by the task that resolved it
    forgotten: list[Session] = []
    session.close(lambda: forgotten.append(session))
    assert forgotten == [session]


class _BackedUpActor:
    """An actor whose mailbox is full and who never drains it."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.subscribers: set = set()
        self.sessions: dict = {}
        self.session_members: dict = {}
        self.send_channel, self.receive_channel = trio.open_memory_channel(1)
        self.send_channel.send_nowait("backlog")

    async def drain(self) -> None:
        await trio.sleep_forever()

    def forget_session(self, session) -> None:
        pass


async def test_tick_never_waits_on_a_backed_up_prefix(nursery):
    router = Router(nursery, _BackedUpActor)  # type: ignore[arg-type]
    stuck = router.actor("stuck", create=True)
    with trio.fail_after(1):
        router.tick()
        router.tick()
    assert router.ticks_skipped == 2
    assert stuck is not None and stuck.receive_channel.receive_nowait() == "backlog"


def test_unavailable_keeps_the_response_type_of_each_request():
    heartbeat = m.Heartbeat(request_id=3, stream_prefix="p", consumer_group="g", member_id="x",
                            member_epoch=4)
    response = unavailable_response(heartbeat)
    assert isinstance(response, m.HeartbeatResponse)
    assert (response.request_id, response.member_id, response.status) == (
        3, "x", Status.COORDINATOR_NOT_AVAILABLE)
    routing = unavailable_response(m.GetRouting(request_id=5, stream_prefix="p"))
    assert isinstance(routing, m.Routing) and routing.stream_prefix == "p"
    removed = unavailable_response(m.RemoveMember(request_id=6, stream_prefix="p",
                                                  consumer_group="g", member_id="x"))
    assert isinstance(removed, m.MemberRemoved) and removed.member_id == "x"


async def test_a_request_that_meets_a_bug_is_answered_and_the_session_carries_on(coordinator,
                                                                                  monkeypatch):
    from rsc.member.session import open_session

    original = Router.send

    async def broken_for_one_prefix(self, prefix, envelope):
        if prefix == "broken":
            raise RuntimeError("injected bug")
        await original(self, prefix, envelope)

    monkeypatch.setattr(Router, "send", broken_for_one_prefix)
    with trio.fail_after(20):
        async with open_session(coordinator.url, "member") as session:
            failed = await session.request(m.Heartbeat(
                request_id=0, stream_prefix="broken", consumer_group="g", member_id="x",
                member_epoch=0))
            assert isinstance(failed, m.HeartbeatResponse)
            assert failed.status == Status.COORDINATOR_NOT_AVAILABLE
            fine = await session.request(m.Heartbeat(
                request_id=0, stream_prefix="fine", consumer_group="g", member_id="x",
                member_epoch=0))
            assert fine.status == Status.OK  # type: ignore[attr-defined]


async def test_replies_wait_while_the_connection_is_busy_and_go_in_order_once_it_is_not():
    connection = _Connection()
    session = Session(connection)  # type: ignore[arg-type]
    replies = [await session.expect() for _ in range(3)]
    assert session.room.value == MAX_IN_FLIGHT - 3
    connection.writing = True  # the kernel did not take the last frame whole
    replies[1].resolve(_ok(2))
    replies[0].resolve(_ok(1))
    session.push(_ok(9))
    assert connection.sent == []  # held here: the slots are not given back yet
    assert session.room.value == MAX_IN_FLIGHT - 3
    connection.writing = False
    session.wake()  # what the connection calls once its queue went out (when_written)
    assert [json.loads(text)["requestId"] for text in connection.sent] == [1, 2]
    replies[2].resolve(_ok(3))
    assert [json.loads(text)["requestId"] for text in connection.sent] == [1, 2, 3, 9]
    assert session.room.value == MAX_IN_FLIGHT


async def test_a_response_that_cannot_be_encoded_closes_only_its_session_with_1011():
    connection = _Connection()
    session = Session(connection)  # type: ignore[arg-type]
    reply = await session.expect()
    # an error text that is no string: encoding the response fails
    reply.resolve(m.ErrorResponse(request_id=1, status=Status.OK, error=object()))  # type: ignore[arg-type]
    assert connection.closed_with == 1011 and session.closed  # type: ignore[attr-defined]
    assert connection.sent == []
