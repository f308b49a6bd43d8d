"""The web console's server against a real coordinator and redis-server, without a browser:
pages over HTTP, the live feed over its websocket, the coordinator's own token gate, and no
admin session (no connection at all) to the coordinator while no page is open.

The browser tests are in tests/test_web_console_browser.py.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
from trio_websocket import ConnectionRejected, WebSocketConnection, open_websocket_url

from rsc.actors.app import serve
from rsc.actors.config import CoordinatorConfig
from rsc.actors.ops.metrics import CoordinatorMetrics
from rsc.admin.client import open_admin_client
from rsc.console import serve_console
from tests.conftest import FAST
from tests.helpers.http import http_get
from tests.processes import ROOT, log_message

WAIT_S = 10


@attrs.define
class Console:
    url: str  # the coordinator's ws://
    port: int  # the console's HTTP port
    metrics: CoordinatorMetrics
    coordinator_scope: trio.CancelScope

    def gauge(self, name: str) -> float:
        return self.metrics.registry.get_sample_value(name) or 0.0


async def start(nursery: trio.Nursery, redis_url: str, **overrides: Any) -> Console:
    metrics = CoordinatorMetrics()
    config = CoordinatorConfig(redis_url=redis_url, port=0, **{**FAST, **overrides})
    scope = trio.CancelScope()

    async def coordinator(task_status: trio.TaskStatus[str]) -> None:
        with scope:
            await serve(config, metrics=metrics, task_status=task_status)

    url = await nursery.start(coordinator)
    port = await nursery.start(functools.partial(
        serve_console, url, "127.0.0.1", 0, admin_token=config.admin_token,
        viewer_token=config.viewer_token))
    return Console(url=url, port=port, metrics=metrics, coordinator_scope=scope)


@pytest.fixture
async def console(redis_url: str, nursery: trio.Nursery) -> Console:
    return await start(nursery, redis_url)


async def console_get(port: int, path: str, method: str = "GET") -> tuple[int, bytes]:
    response = await http_get(port, path, method=method, host=f"127.0.0.1:{port}", timeout_s=WAIT_S)
    return response.status, response.body


@asynccontextmanager
async def feed(port: int, hello: dict[str, Any], *, origin: str | None = None
               ) -> AsyncIterator[WebSocketConnection]:
    headers = [(b"Origin", origin.encode())] if origin else None
    async with open_websocket_url(f"ws://127.0.0.1:{port}/ws", extra_headers=headers) as websocket:
        await websocket.send_message(json.dumps(hello))
        yield websocket


async def frame(websocket: WebSocketConnection) -> dict[str, Any]:
    with trio.fail_after(WAIT_S):
        return json.loads(await websocket.get_message())


async def frame_where(websocket: WebSocketConnection, check: Any) -> dict[str, Any]:
    with trio.fail_after(WAIT_S):
        while True:
            body = await frame(websocket)
            if check(body):
                return body


async def wait_until(check: Any) -> None:
    with trio.fail_after(WAIT_S):
        while not check():
            await trio.sleep(0.02)


async def test_pages_are_served_and_no_connection_reaches_the_coordinator_until_a_feed_opens(
        console: Console):
    for path in ("/", "/group?prefix=a&group=b", "/static/console.js", "/static/chart.js"):
        status, body = await console_get(console.port, path)
        assert status == 200 and body, path
    assert (await console_get(console.port, "/nope"))[0] == 404
    assert (await console_get(console.port, "/", method="DELETE"))[0] == 405
    assert console.gauge("rsc_connections") == 0 and console.gauge("rsc_sessions") == 0
    async with open_websocket_url(f"ws://127.0.0.1:{console.port}/ws") as websocket:
        assert console.gauge("rsc_sessions") == 0  # a feed dials the coordinator after its hello
        await websocket.send_message(json.dumps({"view": "overview", "token": None}))
        assert await frame(websocket) == {"type": "auth", "status": "ok", "role": "open",
                                          "actions": False}  # C1: no admin token, no actions
        assert console.gauge("rsc_sessions") == 1
    await wait_until(lambda: console.gauge("rsc_sessions") == 0)  # closed with the page


async def test_the_overview_feed_lists_every_group_and_follows_new_ones(console: Console):
    async with open_admin_client(console.url) as admin:
        await admin.set_shard_count("orders", "billing", 4)
        async with feed(console.port, {"view": "overview", "token": None}) as websocket:
            assert (await frame(websocket))["status"] == "ok"
            first = await frame(websocket)
            assert first["type"] == "overview"
            assert [(row["streamPrefix"], row["consumerGroup"], row["members"], row["shards"], row["lag"])
                    for row in first["rows"]] == [("orders", "billing", 0, 4, 0)]
            await admin.set_shard_count("clicks", "etl", 2)
            later = await frame_where(websocket, lambda body: len(body.get("rows", ())) == 2)
            assert later["totals"]["groups"] == 2 and later["totals"]["shards"] == 6


async def test_the_group_feed_follows_the_coordinators_watch_pushes(console: Console):
    async with open_admin_client(console.url) as admin:
        await admin.set_shard_count("orders", "billing", 2)
        async with feed(console.port, {"view": "group", "token": None, "streamPrefix": "orders",
                                       "consumerGroup": "billing"}) as websocket:
            assert (await frame(websocket))["status"] == "ok"
            first = await frame(websocket)
            assert [shard["shard"] for shard in first["view"]["shards"]] == ["{orders:v1:0}", "{orders:v1:1}"]
            assert first["view"]["oldestUndeliveredAgeMs"] is None  # C4: nothing produced
            assert 0 <= first["viewMsAgo"] < 1000  # its ages are as of when it came
            await admin.set_shard_count("orders", "billing", 3)
            pushed = await frame_where(websocket, lambda body: body["view"]["routingVersion"] == 2)
            assert "{orders:v2:2}" in [shard["shard"] for shard in pushed["view"]["shards"]]
            await admin.delete_group("orders", "billing")
            gone = await frame_where(websocket, lambda body: body["status"] != "OK")
            assert gone["status"] == "UNKNOWN_GROUP" and gone["consumerGroup"] == "billing"


async def test_c4_a_group_frame_says_how_old_its_view_is_so_the_page_can_age_it(
        mock_clock: trio.testing.MockClock):
    import time
    from typing import cast

    from rsc.console import views
    from rsc.console.server import Feed

    page = Feed(cast(WebSocketConnection, None), "ws://127.0.0.1:1")
    view = cast(views.GroupPage, {"lag": 3, "pending": 1, "oldestUndeliveredAgeMs": 5000,
                                  "oldestPendingEntryAgeMs": 700})
    page._offer_view(("orders", "billing"), view)
    assert page.throttle.latest["group"]["viewMsAgo"] == 0  # a push: its ages are as of now
    mock_clock.jump(2.5)
    page.dead_letters = {"count": 1}
    page._offer_group(view)  # the same view again, with its dead letters: 2.5 s older
    assert page.throttle.latest["group"]["viewMsAgo"] == 2500
    (point,) = page.history.points(("orders", "billing"), int(time.time() * 1000))
    assert point[1:] == [3, 1, 5000, 700]


async def test_the_token_is_checked_by_the_coordinator_itself(redis_url: str, nursery: trio.Nursery):
    guarded = await start(nursery, redis_url, admin_token="s3cret")
    for token, answer in ((None, {"type": "auth", "status": "unauthorized", "tokenGiven": False}),
                          ("wrong", {"type": "auth", "status": "unauthorized", "tokenGiven": True}),
                          ("s3cret", {"type": "auth", "status": "ok", "role": "admin",
                                      "actions": True})):
        async with feed(guarded.port, {"view": "overview", "token": token}) as websocket:
            assert await frame(websocket) == answer, token
            if token == "s3cret":
                assert (await frame(websocket))["type"] == "overview"


async def test_a_page_is_told_when_the_coordinator_session_is_lost(console: Console):
    async with open_admin_client(console.url) as admin:
        await admin.set_shard_count("orders", "billing", 2)
    async with feed(console.port, {"view": "group", "token": None, "streamPrefix": "orders",
                                   "consumerGroup": "billing"}) as websocket:
        assert (await frame(websocket))["status"] == "ok"
        assert (await frame(websocket))["type"] == "group"
        console.coordinator_scope.cancel()  # the coordinator stops; the console still serves
        lost = await frame_where(websocket, lambda body: body["type"] == "error")
        assert "closed the session" in lost["error"]
    assert (await console_get(console.port, "/"))[0] == 200


async def test_a_page_of_another_origin_cannot_open_the_feed(console: Console):
    with pytest.raises(ConnectionRejected) as refused:
        async with open_websocket_url(f"ws://127.0.0.1:{console.port}/ws",
                                      extra_headers=[(b"Origin", b"https://evil.example")]):
            pass
    assert refused.value.status_code == 403
    async with feed(console.port, {"view": "overview", "token": None},
                    origin=f"http://127.0.0.1:{console.port}") as websocket:
        assert (await frame(websocket))["status"] == "ok"


async def test_a_bad_hello_gets_an_error_naming_the_field_and_the_console_keeps_serving(
        console: Console):
    async with feed(console.port, {"view": "group", "token": None, "streamPrefix": "a{b}",
                                   "consumerGroup": "g"}) as websocket:
        answer = await frame(websocket)
        assert answer["type"] == "error" and "streamPrefix" in answer["error"]
    assert (await console_get(console.port, "/"))[0] == 200


async def test_rsc_demo_prints_the_console_url_and_serves_the_console_there():
    demo = await trio.lowlevel.open_process(
        [sys.executable, "-m", "rsc", "demo"], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "200"})
    assert demo.stdout is not None
    try:
        output = b""
        with trio.fail_after(40):
            while b"scaled up to" not in output:  # past the console line, signals handled
                chunk = await demo.stdout.receive_some(4096)
                assert chunk, output
                output += chunk
        url = re.search(r"web console at http://127\.0\.0\.1:(\d+)/", output.decode())
        assert url, output
        status, body = await console_get(int(url.group(1)), "/")
        assert status == 200 and b"rsc console" in body
    finally:
        demo.terminate()
        with trio.fail_after(30):
            await demo.wait()
    assert demo.returncode == 0


async def test_a_taken_console_port_stops_the_coordinator_with_one_line(redis_url: str):
    taken = trio.socket.socket()
    await taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        with trio.fail_after(30):
            result = await trio.run_process(
                [sys.executable, "-m", "rsc", "coordinator", "--redis-url", redis_url, "--port", "0",
                 "--console-port", str(port)], cwd=ROOT, capture_stdout=True, capture_stderr=True,
                check=False)
    finally:
        taken.close()
    assert result.returncode == 1
    last = log_message(result.stderr.decode().strip().splitlines()[-1])
    assert last.startswith(f"rsc coordinator: cannot serve the console on http://127.0.0.1:{port}/: "), last
    assert "Traceback" not in result.stderr.decode()


async def test_a_page_opened_later_gets_what_the_console_saw_of_the_group_before(console: Console):
    import time

    hello = {"view": "group", "token": None, "streamPrefix": "orders", "consumerGroup": "billing"}
    async with open_admin_client(console.url) as admin:
        await admin.set_shard_count("orders", "billing", 2)
    async with feed(console.port, hello) as first_page:
        assert (await frame(first_page))["status"] == "ok"
        seen = (await frame(first_page))["view"]
    left_at = time.time() * 1000
    async with feed(console.port, hello) as later_page:
        assert (await frame(later_page))["status"] == "ok"
        assert (await frame(later_page))["type"] == "group"
        history = await frame(later_page)
    assert history["type"] == "history"
    (t, lag, pending, undelivered_age, pending_age), (gap_t, *gap) = history["points"]
    assert t <= left_at and (lag, pending) == (seen["lag"], seen["pending"])
    assert (undelivered_age, pending_age) == (seen["oldestUndeliveredAgeMs"],
                                              seen["oldestPendingEntryAgeMs"])  # C4
    assert gap == [None, None, None, None] and t <= gap_t  # nobody looked between the two pages
