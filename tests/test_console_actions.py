"""C1 actions through the console's feed, without a browser: a real coordinator and console.

An action is one message on a group page's `/ws` after its hello; the console checks that the
page's token may act (an admin token configured and given) and sends the same admin request
`rsc admin` sends on the page's own session, carrying the group epoch and routing version of
the confirmation for the coordinator to check with the change (the console checks what a
request cannot carry, one request before). The browser tests drive the same through the page.
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
                          ('{"type": "read"}', "a page sends only actions"),
                          ("[1]", "an action must be a JSON object")):
        with pytest.raises(views.ActionError, match=problem):
            views.parse_action(text, "orders", "billing")
    parsed = views.parse_action(action("deleteGroup", {}, 3, 1), "orders", "billing")
    assert views.stale_confirmation(parsed, {"groupEpoch": 3, "routing": {"version": 1}}) is None
    assert "group epoch 3 -> 4" in views.stale_confirmation(
        parsed, {"groupEpoch": 4, "routing": {"version": 1}})
    # the request carries what was confirmed; the coordinator checks it with the change
    request, checked = views.confirmed_request(parsed)
    assert checked and (request.if_group_epoch, request.if_routing_version) == (3, 1)
    retention = views.parse_action(action("setRetention", {"mode": "acked"}, 3, None),
                                   "orders", "billing")
    request, checked = views.confirmed_request(retention)  # no group: the console checks it
    assert not checked and request.if_routing_version == 0  # 0: confirmed at no routing
    redrive = views.parse_action(action("redriveDeadLetters", {"dryRun": True}, 3, 1),
                                 "orders", "billing")
    request, checked = views.confirmed_request(redrive)
    assert not checked and request == redrive.request


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
            assert "nothing changed" in stale["error"]  # the coordinator's check, with the change
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


def test_c1_a_redrive_action_becomes_redrive_dead_letters_or_a_clear_error():
    dry = views.parse_action(action("redriveDeadLetters", {"dryRun": True, "max": 5}, 3, 1),
                             "orders", "billing")
    assert (dry.request.TYPE, dry.request.consumer_group, dry.request.dry_run, dry.request.max,
            dry.dry_run) == ("redriveDeadLetters", "billing", True, 5, True)
    sent = views.parse_action(action("redriveDeadLetters", {"max": None}, 3, 1), "orders",
                              "billing")
    assert (sent.request.dry_run, sent.request.max, sent.request.ids) == (False, 1000, ())
    for params, problem in (({"dryRun": "yes"}, "params.dryRun"), ({"max": 0}, "max"),
                            ({"max": "5"}, "params.max")):
        with pytest.raises(views.ActionError, match=problem):
            views.parse_action(action("redriveDeadLetters", params, 1, 1), "orders", "billing")


def test_c1_the_group_page_gets_its_dead_letters_summary_never_their_contents():
    answer = {"type": "deadLetters", "status": "OK", "streamPrefix": "orders",
              "consumerGroup": "billing", "stream": "{orders}:dead:billing", "count": 2,
              "oldestMs": 1, "newestMs": 2, "errorsByType": {"crashed": 2},
              "retention": None, "entries": [{"id": "1-0", "value": "secret"}]}
    summary = views.dead_letters_summary(answer)
    assert summary == {"status": "OK", "count": 2,
                       "stream": "{orders}:dead:billing", "oldestMs": 1, "newestMs": 2,
                       "errorsByType": {"crashed": 2}, "retention": None}
    assert "secret" not in json.dumps(summary)
    refused = views.dead_letters_summary({"status": "NOT_AUTHORIZED", "error": "no"})
    assert refused == {"status": "NOT_AUTHORIZED", "error": "no"}


async def test_c1_a_group_page_shows_its_dead_letters_and_redrives_them_after_the_dry_run(
        redis_url, nursery):
    import redis

    console = await start(nursery, redis_url, admin_token=ADMIN, viewer_token=VIEWER)
    async with open_admin_client(console.url, token=ADMIN) as admin:
        await admin.set_shard_count("orders", "billing", 1)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    stream = "{orders}:dead:billing"
    dead = client.xadd(stream, {"key": "k1", "value": "v", "rsc-source-stream": "{orders:v1:0}",
                                "rsc-source-id": "5-0", "rsc-group": "billing",
                                "rsc-deliveries": "3", "rsc-error": "crashed",
                                "rsc-member": "m-1", "rsc-dead-at-ms": "1700"})
    try:
        async with feed(console.port, hello(ADMIN)) as websocket:
            assert (await frame(websocket))["actions"] is True
            first = await frame_where(websocket, lambda body: body.get("type") == "group"
                                      and body.get("deadLetters") is not None)
            shown, view = first["deadLetters"], first["view"]
            assert (shown["count"], shown["stream"], shown["errorsByType"]) == (
                1, stream, {"crashed": 1})
            at = (view["groupEpoch"], view["routingVersion"])
            await websocket.send_message(action("redriveDeadLetters", {"dryRun": True}, *at))
            dry = await frame_where(websocket, lambda body: body.get("type") == "actionResult")
            assert (dry["status"], dry["dryRun"], dry["action"]) == (
                "OK", True, "redriveDeadLetters")
            assert [entry["id"] for entry in dry["answer"]["redriven"]] == [dead]
            assert client.xlen(stream) == 1, "a dry run sends nothing back"
            await websocket.send_message(action("redriveDeadLetters", {"dryRun": False}, *at,
                                                action_id=2))
            done = await frame_where(websocket, lambda body: body.get("type") == "actionResult")
            assert (done["id"], done["status"], done["dryRun"]) == (2, "OK", False)
            assert [entry["id"] for entry in done["answer"]["redriven"]] == [dead]
            with trio.fail_after(WAIT_S):  # the page's count follows
                await frame_where(websocket, lambda body: body.get("type") == "group"
                                  and (body.get("deadLetters") or {}).get("count") == 0)
        assert client.xlen(stream) == 0 and client.xlen("{orders:v1:0}") == 1
        entries = [json.loads(body["entry"]) for _, body in client.xrange("rsc:audit")]
        redrives = [entry for entry in entries
                    if entry["request"]["type"] == "redriveDeadLetters"]
        assert len(redrives) == 1, "the re-drive is audited, its dry run is not"
        assert (redrives[0]["via"], redrives[0]["status"]) == ("console", "OK")
        async with feed(console.port, hello(VIEWER)) as websocket:  # a viewer: refused
            view = await group_frame(websocket)
            await websocket.send_message(action("redriveDeadLetters", {"dryRun": False},
                                                view["groupEpoch"], view["routingVersion"]))
            refused = await frame_where(websocket,
                                        lambda body: body.get("type") == "actionResult")
            assert refused["status"] == "NOT_AUTHORIZED"
    finally:
        client.close()
