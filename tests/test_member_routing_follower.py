"""`RoutingFollower`, the member side's one routing loop (the producer's and `rsc consume`'s).

- every new session asks for the routing (K9: a new session is asked, routing known or
  not), with `subscribe`; a lost session is said, reopened with backoff, and said over;
- the prefix's routing pushes are adopted, another prefix's are not;
- while a subclass has no routing it asks again after `reask_after_s`, without subscribing;
- a refusal no retry changes (HTTP 401) is final (L2): raised before `started`, kept in
  `fatal`, said once through `said_final`.

Against a scripted coordinator on a real websocket.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
import trio
from trio_websocket import ConnectionClosed, WebSocketRequest, serve_websocket

from rsc.errors import AuthenticationError
from rsc.member.notices import Notices
from rsc.member.shells.routing_follower import RoutingFollower
from rsc.protocol import Routing, Status


def routing(version: int, prefix: str = "orders", request_id: int | None = None) -> str:
    message: dict[str, Any] = {
        "type": "routing", "status": "OK", "streamPrefix": prefix, "version": version,
        "shardCount": 1, "hash": "crc32", "streams": [f"{prefix}:v{version}:0"]}
    if request_id is not None:
        message["requestId"] = request_id
    return json.dumps(message)


class Coordinator:
    """Answers every getRouting with version `sessions`; on the first session pushes another
    prefix's routing and version 7 of orders, then closes it."""

    def __init__(self) -> None:
        self.asks: list[tuple[int, bool]] = []  # (session, subscribe)
        self.sessions = 0
        self.refuse = False

    async def handler(self, request: WebSocketRequest) -> None:
        if self.refuse:
            await request.reject(401)
            return
        connection = await request.accept()
        self.sessions += 1
        session = self.sessions
        try:
            while True:
                frame = json.loads(await connection.get_message())
                self.asks.append((session, frame["subscribe"]))
                await connection.send_message(routing(session, request_id=frame["requestId"]))
                if session == 1:
                    await connection.send_message(routing(9, prefix="payments"))
                    await connection.send_message(routing(7))
                    await trio.sleep(0.05)
                    await connection.aclose()
                    return
        except ConnectionClosed:
            pass


class Recorder(RoutingFollower):
    def __init__(self, url: str, notices: Notices, *, reask_s: float = math.inf) -> None:
        super().__init__(url, "orders", notices, token=None)
        self.adopted: list[int | None] = []
        self.finals: list[str] = []
        self._reask_s = reask_s

    async def adopt(self, message: Routing) -> None:
        assert message.status == Status.OK
        self.adopted.append(message.version)

    def reask_after_s(self) -> float:
        return self._reask_s

    def said_final(self, line: str) -> None:
        self.finals.append(line)


async def start(nursery: trio.Nursery, coordinator: Coordinator) -> str:
    server = await nursery.start(serve_websocket, coordinator.handler, "127.0.0.1", 0, None)
    return f"ws://127.0.0.1:{server.port}"


async def test_every_new_session_asks_and_the_prefix_pushes_are_adopted(nursery) -> None:
    coordinator = Coordinator()
    url = await start(nursery, coordinator)
    lines: list[str] = []
    follower = Recorder(url, Notices(lines.append))
    await nursery.start(follower.keep_session)
    with trio.fail_after(10):
        while coordinator.sessions < 2 or follower.session is None:
            await trio.sleep(0.01)
    assert coordinator.asks == [(1, True), (2, True)], "K9: each new session asked, subscribed"
    assert follower.adopted == [1, 7, 2], "the payments push is not ours"
    assert lines[0].startswith(f"lost the coordinator session at {url}")
    assert lines[0].endswith("retrying")
    assert lines[1] == f"connected to the coordinator at {url}"


async def test_without_routing_it_asks_again_without_subscribing(nursery) -> None:
    coordinator = Coordinator()
    coordinator.sessions = 1  # no push, no close: answers only
    url = await start(nursery, coordinator)
    follower = Recorder(url, Notices(lambda line: None), reask_s=0.05)
    await nursery.start(follower.keep_session)
    with trio.fail_after(10):
        while len(coordinator.asks) < 3:
            await trio.sleep(0.01)
    assert coordinator.asks[:3] == [(2, True), (2, False), (2, False)]


async def test_a_final_refusal_is_raised_before_started_and_kept(nursery) -> None:
    coordinator = Coordinator()
    coordinator.refuse = True
    url = await start(nursery, coordinator)
    lines: list[str] = []
    follower = Recorder(url, Notices(lines.append))
    with pytest.raises(AuthenticationError):
        await nursery.start(follower.keep_session)
    assert isinstance(follower.fatal, AuthenticationError)
    with pytest.raises(AuthenticationError):
        follower.raise_fatal()
    assert len(follower.finals) == 1 and "401" in follower.finals[0]
    assert lines == [], "a final refusal is said once by said_final, not as a retry"
