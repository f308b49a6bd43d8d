"""rsc/common/ws_session.py: the one client session both the members and the admin client use.

A websocket stand-in made of two memory channels (the matching logic, without the network);
the real sessions over a real coordinator are in the member, producer and admin tests.
"""

from __future__ import annotations

import json

import pytest
import trio
from trio_websocket import ConnectionClosed

from rsc.common.ws_session import ClientSession, Undecodable


class Lost(Exception):
    pass


class BadAnswer(Exception):
    pass


class Wire:
    """A websocket's two calls, over memory channels: what the session sends, what it gets."""

    def __init__(self) -> None:
        self.sent_send, self.sent = trio.open_memory_channel[str](100)
        self.incoming, self._incoming_receive = trio.open_memory_channel[str | BaseException](100)

    async def send_message(self, text: str) -> None:
        await self.sent_send.send(text)

    async def get_message(self) -> str:
        item = await self._incoming_receive.receive()
        if isinstance(item, BaseException):
            raise item
        return item


def read(text: str | bytes) -> tuple[int | None, dict]:
    body = json.loads(text)
    if "broken" in body:
        raise Undecodable("broken answer", body.get("requestId"))
    return body.get("requestId"), body


def session_over(wire: Wire) -> ClientSession[dict]:
    return ClientSession(wire, read=read, lost=Lost, undecodable=BadAnswer,  # type: ignore[arg-type]
                         closed_reason=lambda exc: "gone" if exc is None else "closed by peer")


async def test_pipelined_requests_each_get_the_answer_with_their_id_and_pushes_go_aside() -> None:
    wire = Wire()
    session = session_over(wire)
    answers: dict[str, dict] = {}
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(session.receive_loop)

            async def ask(name: str) -> None:
                answers[name] = await session.exchange(
                    lambda request_id: json.dumps({"name": name, "requestId": request_id}))

            nursery.start_soon(ask, "a")
            nursery.start_soon(ask, "b")
            first = json.loads(await wire.sent.receive())
            second = json.loads(await wire.sent.receive())
            # answered in the other order, with a push between
            await wire.incoming.send(json.dumps({"requestId": second["requestId"], "for": second["name"]}))
            await wire.incoming.send(json.dumps({"push": 1}))
            await wire.incoming.send(json.dumps({"requestId": first["requestId"], "for": first["name"]}))
            assert await session.pushes.receive() == {"push": 1}
            while len(answers) < 2:
                await trio.sleep(0.001)
            nursery.cancel_scope.cancel()
    assert answers["a"]["for"] == "a" and answers["b"]["for"] == "b"
    assert first["requestId"] != second["requestId"]


async def test_an_undecodable_answer_fails_its_request_and_a_lost_connection_fails_the_rest() -> None:
    wire = Wire()
    session = session_over(wire)
    outcomes: dict[str, BaseException] = {}
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(session.receive_loop)

            async def ask(name: str) -> None:
                try:
                    await session.exchange(
                        lambda request_id: json.dumps({"name": name, "requestId": request_id}))
                except Exception as exc:  # noqa: BLE001 - the test keeps what each request raised
                    outcomes[name] = exc

            nursery.start_soon(ask, "bad")
            bad = json.loads(await wire.sent.receive())
            nursery.start_soon(ask, "pending")
            await wire.sent.receive()
            await wire.incoming.send(json.dumps({"requestId": bad["requestId"], "broken": True}))
            await wire.incoming.send(json.dumps({"broken": True}))  # no id: logged and ignored
            while "bad" not in outcomes:
                await trio.sleep(0.001)
            await wire.incoming.send(ConnectionClosed(None))  # type: ignore[arg-type]
    assert isinstance(outcomes["bad"], BadAnswer)
    assert isinstance(outcomes["pending"], Lost) and str(outcomes["pending"]) == "closed by peer"
    assert session.closed and session.close_reason == "closed by peer"
    with pytest.raises(Lost):
        await session.exchange(lambda request_id: "{}")
    with pytest.raises(trio.EndOfChannel):
        await session.pushes.receive()


async def test_an_answer_nobody_waits_for_any_more_is_dropped() -> None:
    wire = Wire()
    session = session_over(wire)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(session.receive_loop)
            scope = trio.CancelScope()

            async def cancelled() -> None:
                with scope:
                    await session.exchange(lambda request_id: json.dumps({"requestId": request_id}))

            nursery.start_soon(cancelled)
            assert json.loads(await wire.sent.receive()) == {"requestId": 1}
            scope.cancel()
            await wire.incoming.send(json.dumps({"requestId": 1, "late": True}))
            await wire.incoming.send(json.dumps({"push": "after"}))
            assert await session.pushes.receive() == {"push": "after"}, "the late answer is not a push"
            nursery.cancel_scope.cancel()
