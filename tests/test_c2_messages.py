"""C2 messages: a shard's entries page by page, a key's entries, a group's pending entries.

The pure parts (bytes as text or base64, id steps, the 256 KiB page) without I/O; the requests
against a real redis-server and a real coordinator, with the admin and the viewer token, and
the audit entries read back from Redis itself.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import redis
import trio

from rsc.actors.admin import message_admin as ma
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from tests.test_audit import (
    ADMIN,
    GROUP,
    PREFIX,
    VIEWER,
    ask,
    client,
    entries,
    register_empty_group,
    start,
)

__all__ = ["client"]  # the fixture, imported for the tests below

KIB = 1024


def raw(shown: m.Blob | None) -> bytes:
    """The bytes a Blob shows."""
    assert shown is not None
    if shown.text is not None:
        return shown.text.encode("utf-8")
    assert shown.base64 is not None
    return base64.b64decode(shown.base64)


# --- pure ------------------------------------------------------------------------------------


def test_c2_values_are_text_when_utf8_else_base64_and_cut_with_their_full_size():
    assert ma.blob("héllo".encode()) == m.Blob(text="héllo", size=6)
    assert ma.blob(b"\x00\xff") == m.Blob(base64="AP8=", size=2)
    cut = ma.blob("é".encode() * 10, limit=5)  # a character cut in two is left out
    assert cut == m.Blob(text="éé", size=20, cut=True)
    big = ma.blob(b"\xff" * 100, limit=10)
    assert raw(big) == b"\xff" * 10 and big.size == 100 and big.cut


def test_c2_entry_ids_step_up_and_down_across_milliseconds():
    assert ma.id_after("5-3") == "5-4"
    assert ma.id_after(f"5-{ma.MAX_SEQ}") == "6-0"
    assert ma.id_before("5-3") == "5-2"
    assert ma.id_before("5-0") == f"4-{ma.MAX_SEQ}"
    assert ma.id_before("0-0") is None


def test_c2_a_page_holds_at_most_256_kib_the_first_entry_always():
    found = [(f"{i}-0", {b"value": b"x" * (100 * KIB)}) for i in range(1, 6)]
    shown, taken = ma.page(found)
    assert taken == 4  # each value cut at 64 KiB: four fill the page
    assert all(e.value is not None and e.value.size == 100 * KIB and e.value.cut for e in shown)
    assert sum(len(raw(e.value)) for e in shown) <= m.MAX_PAGE_BYTES
    huge = [("1-0", {f"h:{i}".encode(): b"y" * (64 * KIB) for i in range(6)})]
    [alone], taken = ma.page(huge)
    assert taken == 1 and sum(len(raw(h.value)) for h in alone.headers) == m.MAX_PAGE_BYTES


def test_c2_a_request_with_both_an_id_and_a_time_or_a_bad_id_is_refused():
    with pytest.raises(m.FieldValueError, match="fromId.*fromMs"):
        m.ReadShard(request_id=1, stream_prefix=PREFIX, shard="s", from_id="1-0", from_ms=5)
    with pytest.raises(m.FieldValueError, match="continueId"):
        m.FindKey(request_id=1, stream_prefix=PREFIX, key="k", continue_id="+")
    with pytest.raises(m.FieldValueError, match="count"):
        m.ReadShard(request_id=1, stream_prefix=PREFIX, shard="s", count=51)


# --- against Redis and the coordinator -----------------------------------------------------


async def shards(url: str, count: int) -> tuple[str, ...]:
    changed = await ask(url, m.SetShardCount(request_id=0, stream_prefix=PREFIX,
                                             consumer_group=GROUP, shard_count=count))
    assert changed.status == Status.OK, changed
    return tuple(changed.routing.streams)


async def test_c2_a_shard_is_read_page_by_page_newest_or_oldest_first_from_an_id_or_a_time(
        redis_url, client, nursery):
    url = await start(nursery, redis_url, admin_token=ADMIN, viewer_token=VIEWER)
    with trio.fail_after(30):
        [shard] = await shards(url, 1)
        for i in range(1, 121):
            client.xadd(shard, {"key": f"k{i}", "value": f"v{i}"}, id=f"{1000 + i}-0")
        seen: list[str] = []
        from_id = None
        while True:
            got = await ask(url, m.ReadShard(request_id=0, stream_prefix=PREFIX, shard=shard,
                                             from_id=from_id))
            assert got.status == Status.OK and got.length == 120 and len(got.entries) <= 50
            seen += [e.id for e in got.entries]
            if got.next_id is None:
                break
            from_id = got.next_id
        assert seen == [f"{1000 + i}-0" for i in range(120, 0, -1)]
        oldest = await ask(url, m.ReadShard(request_id=0, stream_prefix=PREFIX, shard=shard,
                                            newest_first=False, from_ms=1100, count=5))
        assert [e.id for e in oldest.entries] == [f"{1100 + i}-0" for i in range(5)]
        assert oldest.next_id == "1104-1"  # the smallest id after the last shown
        assert (raw(oldest.entries[0].key), raw(oldest.entries[0].value)) == (b"k100", b"v100")
        before = await ask(url, m.ReadShard(request_id=0, stream_prefix=PREFIX, shard=shard,
                                            from_ms=1003))
        assert [e.id for e in before.entries] == ["1003-0", "1002-0", "1001-0"]
        assert before.next_id is None


async def test_c2_a_page_of_big_values_stops_at_256_kib_with_their_full_sizes(
        redis_url, client, nursery):
    url = await start(nursery, redis_url, admin_token=ADMIN, viewer_token=VIEWER)
    with trio.fail_after(30):
        [shard] = await shards(url, 1)
        ids = [client.xadd(shard, {"value": bytes([i]) * (300 * KIB)}) for i in range(6)]
        got = await ask(url, m.ReadShard(request_id=0, stream_prefix=PREFIX, shard=shard,
                                         newest_first=False))
    assert [e.id for e in got.entries] == ids[:4] and got.next_id == ids[4]
    assert all(e.value.size == 300 * KIB and e.value.cut for e in got.entries)
    assert sum(len(raw(e.value)) for e in got.entries) <= m.MAX_PAGE_BYTES


async def test_c2_binary_values_and_hostile_names_come_back_as_text_or_base64(
        redis_url, client, nursery):
    url = await start(nursery, redis_url, admin_token=ADMIN, viewer_token=VIEWER)
    hostile = "<script>alert(1)</script>"
    with trio.fail_after(30):
        [shard] = await shards(url, 1)
        client.xadd(shard, {"key": "<img src=x onerror=alert(1)>", "value": b"\x00\xff\xfe{",
                            f"h:{hostile}": b"\x80\x81", "h:json": '{"a": [1, 2]}',
                            "rsc-error": "boom"})
        got = await ask(url, m.ReadShard(request_id=0, stream_prefix=PREFIX, shard=shard))
    [entry] = got.entries
    assert entry.key == m.Blob(text="<img src=x onerror=alert(1)>", size=28)
    assert entry.value.text is None and raw(entry.value) == b"\x00\xff\xfe{"
    headers = {h.name: h.value for h in entry.headers}
    assert raw(headers[hostile]) == b"\x80\x81" and headers[hostile].base64 == "gIE="
    assert json.loads(headers["json"].text) == {"a": [1, 2]}
    assert [(f.name, f.value.text) for f in entry.fields] == [("rsc-error", "boom")]


async def test_c2_a_key_search_scans_10000_entries_a_request_and_continues(
        redis_url, client, nursery):
    url = await start(nursery, redis_url, admin_token=ADMIN, viewer_token=VIEWER)
    with trio.fail_after(60):
        [shard] = await shards(url, 1)
        pipe = client.pipeline(transaction=False)
        pipe.xadd(shard, {"key": "needle", "value": "old"}, id="1-0")
        for i in range(2, 12_002):
            pipe.xadd(shard, {"key": "hay", "value": "x"}, id=f"{i}-0")
        pipe.xadd(shard, {"key": "needle", "value": "new"}, id="20000-0")
        pipe.execute()
        first = await ask(url, m.FindKey(request_id=0, stream_prefix=PREFIX, key="needle"))
        assert first.status == Status.OK and first.shard == shard
        assert first.scanned == m.MAX_KEY_SCAN
        assert [raw(e.value) for e in first.entries] == [b"new"]
        assert first.continue_id is not None
        second = await ask(url, m.FindKey(request_id=0, stream_prefix=PREFIX, key="needle",
                                          continue_id=first.continue_id))
    assert [(e.id, raw(e.value)) for e in second.entries] == [("1-0", b"old")]
    assert second.scanned == 12_002 - m.MAX_KEY_SCAN and second.continue_id is None


async def test_c2_a_key_search_reads_the_keys_shard_in_the_draining_version_too(
        redis_url, client, nursery):
    from rsc.protocol.routing import shard_for_key

    url = await start(nursery, redis_url, admin_token=ADMIN)
    with trio.fail_after(30):
        [old] = await shards(url, 1)
        client.xadd(old, {"key": "needle", "value": "before"}, id="10-0")
        client.xadd(old, {"key": "hay", "value": "x"}, id="11-0")
        await register_empty_group(url)  # it read nothing: the old shard stays to drain (R2)
        new = await shards(url, 3)
        mine = new[shard_for_key("needle", 3)]
        client.xadd(mine, {"key": "needle", "value": "after"}, id="20-0")
        client.xadd(mine, {"key": "hay", "value": "y"}, id="21-0")
        found = await ask(url, m.FindKey(request_id=0, stream_prefix=PREFIX, key="needle"))
        assert found.status == Status.OK, found
        assert (found.shard, found.shards) == (mine, (mine, old))
        assert [(e.id, raw(e.value)) for e in found.entries] == [("20-0", b"after"),
                                                               ("10-0", b"before")]
        assert found.continue_id is None and found.scanned >= 4
        first = await ask(url, m.FindKey(request_id=0, stream_prefix=PREFIX, key="needle",
                                         count=1))
        assert [raw(e.value) for e in first.entries] == [b"after"]
        rest = await ask(url, m.FindKey(request_id=0, stream_prefix=PREFIX, key="needle",
                                        continue_id=first.continue_id))
        assert [raw(e.value) for e in rest.entries] == [b"before"] and rest.continue_id is None
        # the draining shard can be read too (its pending entries, its entries)
        page = await ask(url, m.ReadShard(request_id=0, stream_prefix=PREFIX, shard=old))
        assert page.status == Status.OK and "10-0" in [e.id for e in page.entries]


def test_c2_a_key_search_across_shards_goes_by_id_and_scans_one_id_in_both_together(redis_url,
                                                                                      client):
    admin = ma.MessageAdmin(redis_url, ask=None)  # type: ignore[arg-type]
    for shard, ids in (("a", ("1-0", "3-0", "5-0")), ("b", ("2-0", "4-0", "5-0"))):
        client.delete(shard)
        for entry_id in ids:
            client.xadd(shard, {"key": "k", "value": f"{shard}{entry_id}"}, id=entry_id)
    seen, continue_id, pages = [], None, 0
    while True:
        found = admin._find(m.FindKey(request_id=0, stream_prefix=PREFIX, key="k", count=2,
                                      continue_id=continue_id), ["a", "b"])
        pages += 1
        seen += [raw(e.value).decode() for e in found.entries]
        continue_id = found.continue_id
        if continue_id is None:
            break
    assert seen == ["a5-0", "b5-0", "b4-0", "a3-0", "b2-0", "a1-0"]  # none skipped or repeated
    one = admin._find(m.FindKey(request_id=0, stream_prefix=PREFIX, key="k", count=1), ["a", "b"])
    assert len(one.entries) == 2 and one.continue_id == ma.id_before("5-0")  # never split
    assert ma.key_shards("k", [("x",), ("y", "z"), ("x",)])[0] == "x"


def test_c2_a_key_search_across_shards_keeps_the_scan_cap_and_continues_without_a_gap(
        redis_url, client, monkeypatch):
    monkeypatch.setattr(m, "MAX_KEY_SCAN", 3)  # a small cap and batch: many requests
    monkeypatch.setattr(ma, "SCAN_BATCH", 2)
    admin = ma.MessageAdmin(redis_url, ask=None)  # type: ignore[arg-type]
    for shard in ("c", "d"):
        client.delete(shard)
    for i in range(1, 11):  # c holds the odd ids, d the even ones; every third is the key's
        client.xadd("c" if i % 2 else "d", {"key": "k" if i % 3 == 0 else "hay",
                                            "value": str(i)}, id=f"{i}-0")
    seen, scanned, continue_id = [], [], None
    while True:
        found = admin._find(m.FindKey(request_id=0, stream_prefix=PREFIX, key="k",
                                      continue_id=continue_id), ["c", "d"])
        scanned.append(found.scanned)
        seen += [e.id for e in found.entries]
        continue_id = found.continue_id
        if continue_id is None:
            break
    assert seen == ["9-0", "6-0", "3-0"] and scanned == [3, 3, 3, 1]


async def test_c2_a_groups_pending_entries_show_owner_idle_time_and_deliveries(
        redis_url, client, nursery):
    url = await start(nursery, redis_url, admin_token=ADMIN, viewer_token=VIEWER)
    with trio.fail_after(30):
        [shard] = await shards(url, 1)
        ids = [client.xadd(shard, {"value": str(i)}) for i in range(3)]
        client.xreadgroup(GROUP, "member-1", {shard: ">"}, count=2)
        client.xclaim(shard, GROUP, "member-2", 0, [ids[1]])  # delivered twice now
        client.xreadgroup(GROUP, "member-2", {shard: ">"})
        got = await ask(url, m.ListPending(request_id=0, stream_prefix=PREFIX,
                                           consumer_group=GROUP, shard=shard, count=2),
                        token=VIEWER)  # no contents: the viewer may read them
        assert got.status == Status.OK and got.pending == 3
        assert [(e.id, e.owner, e.deliveries) for e in got.entries] == [
            (ids[0], "member-1", 1), (ids[1], "member-2", 2)]
        assert all(e.idle_ms >= 0 for e in got.entries) and got.next_id == ids[1]
        rest = await ask(url, m.ListPending(request_id=0, stream_prefix=PREFIX,
                                            consumer_group=GROUP, shard=shard,
                                            after_id=got.next_id))
        assert [(e.id, e.owner, e.deliveries) for e in rest.entries] == [(ids[2], "member-2", 1)]
        unknown = await ask(url, m.ListPending(request_id=0, stream_prefix=PREFIX,
                                               consumer_group="nobody", shard=shard))
        assert unknown.status == Status.UNKNOWN_GROUP


async def test_c2_contents_need_the_admin_token_and_each_read_is_audited_without_them(
        redis_url, client, nursery):
    url = await start(nursery, redis_url, admin_token=ADMIN, viewer_token=VIEWER)
    secret = "card-4111-1111-1111-1111"
    with trio.fail_after(30):
        [shard] = await shards(url, 1)
        ids = [client.xadd(shard, {"key": secret, "value": secret}) for _ in range(3)]
        refused = await ask(url, m.ReadShard(request_id=0, stream_prefix=PREFIX, shard=shard),
                            token=VIEWER)
        assert refused.status == Status.NOT_AUTHORIZED and not refused.entries
        refused_key = await ask(url, m.FindKey(request_id=0, stream_prefix=PREFIX, key="k"),
                                token=VIEWER)
        assert refused_key.status == Status.NOT_AUTHORIZED
        got = await ask(url, m.ReadShard(request_id=0, stream_prefix=PREFIX, shard=shard))
        assert got.status == Status.OK and len(got.entries) == 3
        outside = await ask(url, m.ReadShard(request_id=0, stream_prefix=PREFIX,
                                             shard="rsc:audit"))
        assert outside.status == Status.UNKNOWN_STREAM  # only the prefix's shards are read
    found = [e for e in entries(client) if e["request"]["type"] == "readShard"]
    assert [(e["role"], e["status"]) for e in found] == [
        ("viewer", "NOT_AUTHORIZED"), ("admin", "OK"), ("admin", "UNKNOWN_STREAM")]
    assert found[1]["read"] == {"shard": shard, "entries": 3, "firstId": ids[-1],
                                "lastId": ids[0]}
    assert found[1]["request"]["shard"] == shard and found[1]["peer"].startswith("127.0.0.1:")
    everything: list[Any] = [fields for _, fields in client.xrange("rsc:audit")]
    assert secret not in json.dumps(everything)  # never the contents


async def test_c2_an_open_coordinator_shows_no_contents(redis_url, client, nursery):
    url = await start(nursery, redis_url)
    with trio.fail_after(30):
        [shard] = await shards(url, 1)
        client.xadd(shard, {"value": "v"})
        got = await ask(url, m.ReadShard(request_id=0, stream_prefix=PREFIX, shard=shard),
                        token=None)
    assert got.status == Status.NOT_AUTHORIZED and "--admin-token" in got.error


# --- rsc admin messages / pending --------------------------------------------------------


def test_c2_rsc_admin_messages_arguments_become_the_requests():
    from rsc.admin.args import build_request
    from tests.test_admin_args import parse

    def request(*argv: str) -> m.Request:
        return build_request(parse(*argv))

    assert request("messages", PREFIX, "orders:v1:0", "--oldest-first", "--from", "5-0",
                   "--count", "7") == m.ReadShard(request_id=0, stream_prefix=PREFIX,
                                                  shard="orders:v1:0", newest_first=False,
                                                  from_id="5-0", count=7)
    assert request("messages", PREFIX, "--key", "k", "--continue", "9-0") == m.FindKey(
        request_id=0, stream_prefix=PREFIX, key="k", continue_id="9-0")
    assert request("pending", PREFIX, GROUP, "s", "--after", "3-0") == m.ListPending(
        request_id=0, stream_prefix=PREFIX, consumer_group=GROUP, shard="s", after_id="3-0")
    with pytest.raises(m.FieldValueError, match="SHARD"):
        request("messages", PREFIX)
    with pytest.raises(m.FieldValueError, match="takes no"):
        request("messages", PREFIX, "s", "--key", "k")


async def test_c2_rsc_admin_messages_and_pending_show_the_pages(redis_url, client, nursery):
    from tests.test_admin_cli import rsc_admin

    url = await start(nursery, redis_url, admin_token=ADMIN, viewer_token=VIEWER)
    with trio.fail_after(60):
        [shard] = await shards(url, 1)
        first = client.xadd(shard, {"key": "[bold]k[/bold]", "value": '{"a":1}',
                                    "h:trace": b"\xff"})
        client.xadd(shard, {"key": "k2", "value": "plain"})
        raw_client = redis.Redis.from_url(redis_url)  # the entry holds bytes that are not UTF-8
        raw_client.xreadgroup(GROUP, "member-1", {shard: ">"}, count=1)
        raw_client.close()
        code, out, err = await rsc_admin(url, "messages", PREFIX, shard, "--oldest-first",
                                         "--count", "1", token=ADMIN)
        assert code == 0, err
        assert "[bold]k[/bold]" in out and '"a": 1' in out and "trace: base64:/w==" in out
        assert "next page: --from" in out
        code, out, err = await rsc_admin(url, "messages", PREFIX, "--key", "k2", "--json",
                                         token=ADMIN)
        assert code == 0, err
        assert json.loads(out)["entries"][0]["value"]["text"] == "plain"
        code, out, err = await rsc_admin(url, "pending", PREFIX, GROUP, shard, token=VIEWER)
        assert code == 0, err
        assert first in out and "member-1" in out
        code, out, err = await rsc_admin(url, "messages", PREFIX, shard, token=VIEWER)
        assert code != 0 and "NOT_AUTHORIZED" in out + err


# --- the console's messages page, through its feed (no browser) ------------------------------


def read_frame(request: str, params: dict[str, Any], read_id: int = 1) -> str:
    return json.dumps({"type": "read", "id": read_id, "request": request, "params": params})


def test_c2_the_messages_page_keeps_the_consoles_csp_and_sets_values_as_text():
    from rsc.console import http

    answer = http.route(http.parse_request_head(b"GET /messages HTTP/1.1\r\nHost: h\r\n\r\n"),
                        http.StaticFiles())
    assert isinstance(answer, http.Response) and answer.status == 200
    head = answer.encode().split(b"\r\n\r\n", 1)[0].decode().lower()
    assert "script-src 'self'" in head and "unsafe-inline" not in head
    script = http.StaticFiles().read("console.js")
    assert b"function blobNode" in script and b"innerHTML" not in script


def test_c2_a_page_read_becomes_the_admin_request_for_its_own_prefix_only():
    from rsc.console import views

    read = views.parse_read(read_frame("readShard", {"shard": "s", "streamPrefix": "other",
                                                     "count": 5}), PREFIX, GROUP)
    assert read.read_id == 1 and read.request == m.ReadShard(
        request_id=0, stream_prefix=PREFIX, shard="s", count=5)  # never another prefix
    pending = views.parse_read(read_frame("listPending", {"shard": "s"}), PREFIX, GROUP)
    assert pending.request.consumer_group == GROUP
    for text, problem in ((read_frame("deleteGroup", {}), "field 'request' must be one of"),
                          (read_frame("readShard", {"shard": "s", "count": 500}), "count"),
                          ('{"type": "action"}', "only reads"),
                          ("[1]", "a read must be a JSON object")):
        with pytest.raises(views.ActionError, match=problem):
            views.parse_read(text, PREFIX, GROUP)


@pytest.mark.parametrize("text, problem", [
    (read_frame("listPending", {"shard": "s"}).encode(), "must be a JSON text frame"),
    ("x" * 5000, "must be a JSON text frame of at most 4096 bytes"),
    ("{not json", "is not JSON"),
    ('"a string"', "must be a JSON object"),
    ("[1]", "must be a JSON object")])
def test_c2_a_read_and_an_action_refuse_a_frame_that_is_not_a_json_object_alike(text, problem):
    from rsc.console import views

    # a binary frame too: the messages page's reads are read as the group page's actions
    with pytest.raises(views.ActionError, match=f"^a read {problem}"):
        views.parse_read(text, PREFIX, GROUP)
    with pytest.raises(views.ActionError, match=f"^an action {problem}"):
        views.parse_action(text, PREFIX, GROUP)


async def test_c2_the_console_messages_page_reads_pages_and_refuses_contents_to_the_viewer(
        redis_url, client, nursery):
    from tests.test_web_console_feed import console_get, feed, frame, frame_where
    from tests.test_web_console_feed import start as start_console

    console = await start_console(nursery, redis_url, admin_token=ADMIN, viewer_token=VIEWER)
    hostile = "<img src=x onerror=alert(1)>"
    with trio.fail_after(30):
        [shard] = await shards(console.url, 1)
        await register_empty_group(console.url)
        raw_client = redis.Redis.from_url(redis_url)
        # between two text entries: XINFO STREAM (B7's stream facts) decodes the first and
        # the last entry, and fails on bytes that are not UTF-8 (see the report)
        raw_client.xadd(shard, {"value": "first"})
        binary = raw_client.xadd(shard, {"key": hostile, "value": b"\x00\xff",
                                         f"h:{hostile}": b"{}"}).decode()
        raw_client.xadd(shard, {"value": "last"})
        raw_client.close()
        hello = {"view": "messages", "token": ADMIN, "streamPrefix": PREFIX,
                 "consumerGroup": GROUP}
        async with feed(console.port, hello) as websocket:
            assert (await frame(websocket))["actions"] is True
            shown = await frame_where(websocket, lambda body: body.get("type") == "messages")
            assert shown["shards"] == [shard] and shown["contents"] is True, shown
            await websocket.send_message(read_frame("readShard", {"shard": shard,
                                                                  "fromId": binary, "count": 1}))
            got = await frame_where(websocket, lambda body: body.get("type") == "readResult")
            assert got["status"] == "OK"
            [entry] = got["answer"]["entries"]
            assert entry["key"]["text"] == hostile and entry["value"]["base64"] == "AP8="
            assert entry["headers"][0]["name"] == hostile
        hello["token"] = VIEWER
        async with feed(console.port, hello) as websocket:
            shown = await frame_where(websocket, lambda body: body.get("type") == "messages")
            assert shown["contents"] is False
            await websocket.send_message(read_frame("readShard", {"shard": shard}))
            refused = await frame_where(websocket, lambda body: body.get("type") == "readResult")
            assert refused["status"] == "NOT_AUTHORIZED" and "answer" not in refused
            await websocket.send_message(read_frame("listPending", {"shard": shard}, 2))
            pending = await frame_where(websocket, lambda body: body.get("type") == "readResult")
            assert (pending["id"], pending["status"]) == (2, "OK")
        status, body = await console_get(console.port, "/messages")
    assert status == 200 and b'data-page="messages"' in body
    assert b'<form id="login-form"' in body and b"<script>" not in body  # no inline script
    audited = [e for e in entries(client) if (e["request"] or {}).get("type") == "readShard"]
    assert [(e["role"], e.get("via"), e["status"]) for e in audited] == [
        ("admin", "console", "OK")]  # the viewer's was refused by the console itself
