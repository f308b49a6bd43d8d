"""member.session against a small scripted websocket peer (real websockets, no coordinator)."""

from __future__ import annotations

import json

import pytest
import trio
from trio_websocket import ConnectionClosed, WebSocketRequest, serve_websocket

from rsc.common.backoff import Backoff
from rsc.member.session import (
    BadCoordinatorUrl,
    CoordinatorUnreachable,
    SessionClosed,
    SessionRefused,
    open_session,
)
from rsc.protocol import AssignmentChanged, GetRouting, Heartbeat, HeartbeatResponse, Routing, Status


async def start_peer(nursery: trio.Nursery, script) -> str:
    """Serve `script(request, connection)` for every session; return ws://host:port."""

    async def handler(request: WebSocketRequest) -> None:
        if request.headers and dict(request.headers).get(b"authorization") == b"Bearer nope":
            await request.reject(401)
            return
        connection = await request.accept()
        try:
            await script(request, connection)
        except ConnectionClosed:
            pass

    server = await nursery.start(serve_websocket, handler, "127.0.0.1", 0, None)
    return f"ws://127.0.0.1:{server.port}"


async def echo_script(request: WebSocketRequest, connection) -> None:
    """Answer heartbeats in order, after pushing one assignmentChanged for the first."""
    first = True
    while True:
        frame = json.loads(await connection.get_message())
        if first:
            await connection.send_message(json.dumps({
                "type": "assignmentChanged", "streamPrefix": "orders",
                "consumerGroup": "billing", "memberId": frame["memberId"], "groupEpoch": 3}))
            first = False
        await connection.send_message(json.dumps({
            "type": "heartbeatResponse", "requestId": frame["requestId"], "status": "OK",
            "memberId": frame["memberId"], "memberEpoch": frame["memberEpoch"] + 1}))


def heartbeat(epoch: int) -> Heartbeat:
    return Heartbeat(request_id=0, stream_prefix="orders", consumer_group="billing",
                     member_id="m-1", member_epoch=epoch)


async def test_request_gets_the_response_with_its_own_request_id(nursery):
    url = await start_peer(nursery, echo_script)
    async with open_session(url, "member") as session:
        responses = {}

        async def ask(epoch: int) -> None:
            responses[epoch] = await session.request(heartbeat(epoch))

        async with trio.open_nursery() as requests:
            for epoch in range(5):
                requests.start_soon(ask, epoch)
        assert {epoch: r.member_epoch for epoch, r in responses.items()} == {
            e: e + 1 for e in range(5)}
        assert all(isinstance(r, HeartbeatResponse) and r.status == Status.OK
                   for r in responses.values())
        with trio.fail_after(5):
            push = await session.pushes.receive()
        assert push == AssignmentChanged(stream_prefix="orders", consumer_group="billing",
                                         member_id="m-1", group_epoch=3)


async def test_session_uses_the_endpoint_path_and_bearer_token(nursery):
    seen = []

    async def script(request, connection):
        seen.append((request.path, dict(request.headers).get(b"authorization")))
        frame = json.loads(await connection.get_message())
        await connection.send_message(json.dumps({
            "type": "routing", "requestId": frame["requestId"], "status": "UNKNOWN_STREAM",
            "streamPrefix": "orders"}))

    url = await start_peer(nursery, script)
    async with open_session(url, "admin", token="s3cret") as session:
        response = await session.request(GetRouting(request_id=0, stream_prefix="orders"))
    assert response == Routing(request_id=1, status=Status.UNKNOWN_STREAM, stream_prefix="orders")
    assert seen == [("/v1/admin", b"Bearer s3cret")]


async def test_refused_handshake_raises_session_closed_with_the_status(nursery):
    url = await start_peer(nursery, echo_script)
    with pytest.raises(SessionClosed, match="401"):
        async with open_session(url, "member", token="nope"):
            pass  # pragma: no cover


async def test_connection_loss_fails_pending_and_later_requests(nursery):
    async def hang_up(request, connection):
        await connection.get_message()
        await connection.aclose()

    url = await start_peer(nursery, hang_up)
    async with open_session(url, "member") as session:
        with trio.fail_after(5), pytest.raises(SessionClosed):
            await session.request(heartbeat(0))
        with pytest.raises(SessionClosed):
            await session.request(heartbeat(0))
        with trio.fail_after(5):
            assert [push async for push in session.pushes] == []


async def test_body_exception_is_not_wrapped_in_a_group(nursery):
    url = await start_peer(nursery, echo_script)
    with pytest.raises(KeyError):
        async with open_session(url, "member"):
            raise KeyError("mine")


async def test_unreachable_coordinator_raises_session_closed():
    with pytest.raises(SessionClosed, match="cannot connect"):
        async with open_session("ws://127.0.0.1:1", "member", connect_timeout=2):
            pass  # pragma: no cover


async def test_unreachable_coordinator_line_asks_whether_it_runs_there():
    with pytest.raises(CoordinatorUnreachable) as raised:
        async with open_session("ws://127.0.0.1:1", "member", connect_timeout=2):
            pass  # pragma: no cover
    assert raised.value.line == "connection refused: is the coordinator running at ws://127.0.0.1:1?"
    assert str(raised.value).startswith("cannot connect to ws://127.0.0.1:1/v1/member: ")


@pytest.mark.parametrize(("status", "hint"), [
    (404, "no such endpoint: give the coordinator as ws://HOST:PORT, for example "
          "ws://{hostport}; the tools add /v1/member"),
    (503, "the coordinator is at its session limit (--max-sessions)")])
async def test_refused_handshake_names_the_status_and_the_fix(nursery, status, hint):
    async def refuse(request: WebSocketRequest) -> None:
        await request.reject(status)

    server = await nursery.start(serve_websocket, refuse, "127.0.0.1", 0, None)
    url = f"ws://127.0.0.1:{server.port}"
    with pytest.raises(SessionRefused) as raised:
        async with open_session(url, "member"):
            pass  # pragma: no cover
    assert raised.value.status_code == status
    hint = hint.format(hostport=f"127.0.0.1:{server.port}")
    assert raised.value.line == f"{url}/v1/member refused the session: HTTP {status}: {hint}"


async def test_a_bad_url_is_refused_before_connecting():
    with pytest.raises(BadCoordinatorUrl, match="no scheme"):
        async with open_session("127.0.0.1:8765", "member"):
            pass  # pragma: no cover


async def test_close_reason_says_why_the_session_ended(nursery):
    async def hang_up(request, connection):
        await connection.aclose()

    url = await start_peer(nursery, hang_up)
    async with open_session(url, "member") as session:
        assert session.close_reason is None or session.closed
        with trio.fail_after(5):
            assert [push async for push in session.pushes] == []
        assert session.closed and session.close_reason.startswith("connection closed")


def test_backoff_doubles_up_to_its_maximum_and_starts_again_after_reset():
    backoff = Backoff(0.1, 0.5, jitter=lambda: 1.0)
    assert [round(backoff.next(), 3) for _ in range(5)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    backoff.reset()
    assert backoff.next() == 0.1
    low = Backoff(0.1, 0.5, jitter=lambda: 0.0)
    assert low.next() == pytest.approx(0.05)  # jitter spreads retries over [delay/2, delay]
    with pytest.raises(ValueError):
        Backoff(1.0, 0.5)


def silent_listener() -> tuple[object, str]:
    """A TCP port whose process accepts nothing and answers nothing (a SIGSTOPped coordinator:
    the kernel completes TCP handshakes from the listen backlog); the socket and ws://host:port."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    return listener, f"ws://127.0.0.1:{listener.getsockname()[1]}"


async def test_d6_a_handshake_nobody_answers_gives_up_at_the_connect_timeout():
    """The cause of a fleet that stopped for good (D6): a connect timeout that left the
    connection's reader task running, so the session never opened and never failed."""
    listener, url = silent_listener()
    try:
        with trio.fail_after(5):  # bounded: before the fix this waited for ever
            with pytest.raises(CoordinatorUnreachable) as raised:
                async with open_session(url, "member", connect_timeout=0.3):
                    pass  # pragma: no cover
        assert raised.value.line == f"no answer from {url} within 0.3 s: is the coordinator running there?"
    finally:
        listener.close()  # type: ignore[attr-defined]


async def test_d6_the_admin_client_gives_up_on_a_silent_coordinator_too():
    from rsc.admin.client import AdminConnectError, open_admin_client

    listener, url = silent_listener()
    try:
        with trio.fail_after(5):
            with pytest.raises(AdminConnectError, match="no answer within 0.3s"):
                async with open_admin_client(url, connect_timeout=0.3):
                    pass  # pragma: no cover
    finally:
        listener.close()  # type: ignore[attr-defined]
