"""C1 actions through the console's feed, without a browser: a real coordinator and console.

An action is one message on a group page's `/ws` after its hello; the console checks that the
page's token may act (an admin token configured and given), that the group has not moved since
the confirmation (group epoch and routing version), and sends the same admin request
`rsc admin` sends on the page's own session. The browser tests drive the same through the page.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from rsc.admin.client import open_admin_client
from rsc.console import views
from tests.test_web_console_feed import WAIT_S, console_get, feed, frame, frame_where, start

ADMIN, VIEWER = "s3cret", "peek"


def action(name: str, params: dict[str, Any], epoch: int | None, version: int | None,
           action_id: int = 1) -> str:
    return json.dumps({"type": "action", "id": action_id, "action": name, "params": params,
                       "confirmedAt": {"groupEpoch": epoch, "routingVersion": version}})


def hello(token: str | None) -> dict[str, Any]:
    return {"view": "group", "token": token, "streamPrefix": "orders", "consumerGroup": "billing"}


async def group_frame(websocket: Any) -> dict[str, Any]:
    body = await frame_where(websocket, lambda body: body.get("type") == "group")
    view: dict[str, Any] = body["view"]
    return view


def test_c1_an_action_message_becomes_the_admin_request_or_a_clear_error():
    parsed = views.parse_action(action("setShardCount", {"shardCount": 8}, 3, 1), "orders", "billing")
    assert (parsed.request.TYPE, parsed.request.shard_count, parsed.group_epoch,
            parsed.routing_version) == ("setShardCount", 8, 3, 1)
    dry = views.parse_action(action("resetOffsets", {"to": "latest", "dryRun": True}, 3, 1),
                             "orders", "billing")
    assert dry.dry_run and dry.request.dry_run
    for text, problem in ((action("dropEverything", {}, 1, 1), "field 'action' must be one of"),
                          (action("setShardCount", {"shardCount": 0}, 1, 1), "shardCount"),
                          (action("setShardCount", {"shardCount": "8"}, 1, 1), "integer"),
                          (action("resetOffsets", {"to": "yesterday"}, 1, 1), "params.to"),
                          ("[1]", "a page sends only actions")):
        with pytest.raises(views.ActionError, match=problem):
            views.parse_action(text, "orders", "billing")
    parsed = views.parse_action(action("deleteGroup", {}, 3, 1), "orders", "billing")
    assert views.stale_confirmation(parsed, {"groupEpoch": 3, "routing": {"version": 1}}) is None
    assert "group epoch 3 -> 4" in views.stale_confirmation(
        parsed, {"groupEpoch": 4, "routing": {"version": 1}})


async def test_c1_an_admin_page_acts_and_a_moved_group_is_stale_confirmation(redis_url, nursery):
    console = await start(nursery, redis_url, admin_token=ADMIN, viewer_token=VIEWER)
    async with open_admin_client(console.url, token=ADMIN) as admin:
        await admin.set_shard_count("orders", "billing", 2)
        async with feed(console.port, hello(ADMIN)) as websocket:
            assert (await frame(websocket))["actions"] is True
            view = await group_frame(websocket)
            epoch, version = view["groupEpoch"], view["routingVersion"]
            await websocket.send_message(action("setMaxConcurrency", {"maxConcurrency": 2},
                                                epoch, version))
            done = await frame_where(websocket, lambda body: body.get("type") == "actionResult")
            assert (done["status"], done["answer"]["maxConcurrency"]) == ("OK", 2)
            # confirmed at the old epoch: refused, nothing changes
            await websocket.send_message(action("setShardCount", {"shardCount": 4}, epoch,
                                                version, action_id=2))
            stale = await frame_where(websocket, lambda body: body.get("type") == "actionResult")
            assert (stale["id"], stale["status"]) == (2, "STALE_CONFIRMATION")
            assert (await admin.describe_group("orders", "billing")).routing.shard_count == 2


async def test_c1_a_viewer_token_offers_no_actions_and_its_action_is_refused(redis_url, nursery):
    guarded = await start(nursery, redis_url, admin_token=ADMIN, viewer_token=VIEWER)
    async with open_admin_client(guarded.url, token=ADMIN) as admin:
        await admin.set_shard_count("orders", "billing", 2)
    async with feed(guarded.port, hello(VIEWER)) as websocket:
        assert await frame(websocket) == {"type": "auth", "status": "ok", "role": "viewer",
                                          "actions": False}
        view = await group_frame(websocket)
        await websocket.send_message(action("deleteGroup", {}, view["groupEpoch"],
                                            view["routingVersion"]))
        refused = await frame_where(websocket, lambda body: body.get("type") == "actionResult")
        assert refused["status"] == "NOT_AUTHORIZED"
    async with open_admin_client(guarded.url, token=ADMIN) as admin:
        assert (await admin.describe_group("orders", "billing")).group_epoch is not None


async def test_c1_a_console_without_an_admin_token_offers_no_actions(redis_url, nursery):
    open_console = await start(nursery, redis_url)  # no admin token at all: no actions
    async with open_admin_client(open_console.url) as admin:
        await admin.set_shard_count("orders", "billing", 2)
    async with feed(open_console.port, hello(None)) as websocket:
        assert (await frame(websocket))["actions"] is False
        view = await group_frame(websocket)
        await websocket.send_message(action("deleteGroup", {}, view["groupEpoch"],
                                            view["routingVersion"]))
        refused = await frame_where(websocket, lambda body: body.get("type") == "actionResult")
        assert refused["status"] == "NOT_AUTHORIZED"
    async with open_admin_client(open_console.url) as admin:
        assert (await admin.describe_group("orders", "billing")).group_epoch is not None


async def test_c1_actions_never_travel_as_plain_http_and_never_from_another_origin(redis_url,
                                                                                 nursery):
    console = await start(nursery, redis_url, admin_token=ADMIN)
    for method in ("POST", "PUT", "DELETE"):
        assert (await console_get(console.port, "/ws", method=method))[0] in (400, 405)
        assert (await console_get(console.port, "/group", method=method))[0] == 405
    from trio_websocket import ConnectionRejected

    with trio.fail_after(WAIT_S), pytest.raises(ConnectionRejected) as refused:
        async with feed(console.port, hello(ADMIN), origin="http://elsewhere.test"):
            pass
    assert refused.value.status_code == 403
