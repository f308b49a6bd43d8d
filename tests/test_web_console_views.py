"""The web console's pure parts: HTTP parsing and routing, the page's hello, the throttle,
and what the overview and group pages are built from (rsc/console/http.py, views.py).

The pages themselves are tested in a real browser (tests/test_web_console_browser.py).
"""

from __future__ import annotations

import json

import pytest

from rsc.console import http, views
from rsc.console.server import console_url, loopback_url
from rsc.protocol.errors import ProtocolError


def request(text: str) -> http.Request:
    return http.parse_request_head(text.replace("\n", "\r\n").encode() + b"\r\n")


def headers_of(raw: bytes) -> dict[str, str]:
    head = raw.split(b"\r\n\r\n", 1)[0].decode().split("\r\n")[1:]
    return {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in head)}


# --- HTTP -------------------------------------------------------------------------------


def test_a_request_head_is_parsed_into_method_path_query_and_lower_case_headers():
    parsed = request("GET /group?prefix=a%20b&group=c HTTP/1.1\nHost: 127.0.0.1:9\nX-Y:  z \n")
    assert (parsed.method, parsed.path, parsed.query) == ("GET", "/group", "prefix=a%20b&group=c")
    assert parsed.header("HOST") == "127.0.0.1:9" and parsed.header("x-y") == "z"


@pytest.mark.parametrize("head", ["GET /\n", "GET / HTTP/2\n", "GET http://x/ HTTP/1.1\n",
                                  "GET / HTTP/1.1\nno colon here\n", "GET / HTTP/1.1\n Host: x\n"])
def test_a_malformed_request_head_is_a_400_naming_the_problem(head: str):
    with pytest.raises(http.BadRequest) as raised:
        request(head)
    assert raised.value.status == 400 and str(raised.value)


def test_an_oversized_request_head_is_a_431():
    with pytest.raises(http.BadRequest) as raised:
        http.parse_request_head(b"GET / HTTP/1.1\r\nX: " + b"a" * http.MAX_HEAD_BYTES + b"\r\n\r\n")
    assert raised.value.status == 431


def test_the_pages_and_their_files_are_served_from_the_package_with_their_types():
    files = http.StaticFiles()
    for path, kind in (("/", "text/html"), ("/group", "text/html"), ("/static/console.js", "text/javascript"),
                       ("/static/chart.js", "text/javascript"), ("/static/console.css", "text/css"),
                       ("/favicon.svg", "image/svg+xml")):
        answer = http.route(request(f"GET {path} HTTP/1.1\nHost: h\n"), files)
        assert isinstance(answer, http.Response) and answer.status == 200, path
        assert answer.content_type.startswith(kind) and answer.body, path


def test_both_pages_carry_the_one_login_form_written_once():
    files = http.StaticFiles()
    for path in ("/", "/group"):
        answer = http.route(request(f"GET {path} HTTP/1.1\nHost: h\n"), files)
        assert isinstance(answer, http.Response)
        assert answer.body.count(b'<form id="login-form"') == 1, path
        assert b"<!--#include" not in answer.body, path
    login = http.route(request("GET /login.html HTTP/1.1\nHost: h\n"), files)
    assert isinstance(login, http.Response) and login.status == 404  # a fragment, not a page


def test_every_response_forbids_inline_script_framing_and_sniffing():
    raw = http.Response(200, b"x", "text/html").encode()
    headers = headers_of(raw)
    policy = headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert "frame-ancestors 'none'" in policy and "default-src 'none'" in policy
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["content-length"] == "1" and raw.endswith(b"\r\n\r\nx")


def test_head_gets_the_headers_without_the_body():
    answer = http.route(request("HEAD / HTTP/1.1\nHost: h\n"), http.StaticFiles())
    assert isinstance(answer, http.Response)
    raw = answer.encode()
    assert raw.endswith(b"\r\n\r\n") and int(headers_of(raw)["content-length"]) > 0


def test_the_console_is_read_only_and_unknown_paths_are_404():
    files = http.StaticFiles()
    posted = http.route(request("POST / HTTP/1.1\nHost: h\n"), files)
    assert isinstance(posted, http.Response) and posted.status == 405
    assert ("Allow", "GET, HEAD") in posted.extra
    missing = http.route(request("GET /static/../views.py HTTP/1.1\nHost: h\n"), files)
    assert isinstance(missing, http.Response) and missing.status == 404


def test_the_wheel_carries_the_console_and_its_static_files():
    import tomllib
    from pathlib import Path

    setup = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["tool"]
    assert "rsc.console" in setup["setuptools"]["packages"]
    assert setup["setuptools"]["package-data"]["rsc.console"] == ["static/*"]


def test_the_live_feed_is_a_same_origin_websocket():
    files = http.StaticFiles()
    upgrade = "GET /ws HTTP/1.1\nHost: 127.0.0.1:8780\nUpgrade: websocket\nConnection: Upgrade\n"
    assert http.route(request(upgrade + "Origin: http://127.0.0.1:8780\n"), files) == http.WEBSOCKET
    assert http.route(request(upgrade), files) == http.WEBSOCKET  # not a browser: no Origin
    foreign = http.route(request(upgrade + "Origin: https://evil.example\n"), files)
    assert isinstance(foreign, http.Response) and foreign.status == 403
    plain = http.route(request("GET /ws HTTP/1.1\nHost: h\n"), files)
    assert isinstance(plain, http.Response) and plain.status == 400


def test_the_console_dials_the_coordinator_on_loopback_when_it_binds_every_address():
    assert loopback_url("ws://0.0.0.0:8765") == "ws://127.0.0.1:8765"
    assert loopback_url("ws://[::]:8765") == "ws://[::1]:8765"
    assert loopback_url("ws://10.1.2.3:8765") == "ws://10.1.2.3:8765"
    assert console_url("::1", 80) == "http://[::1]:80/" and console_url("h", 1) == "http://h:1/"


# --- the page's hello, the refusal, the throttle ------------------------------------------


def test_a_hello_names_the_view_and_carries_the_typed_token():
    assert views.parse_hello('{"view": "overview", "token": null}') == views.Hello("overview")
    hello = views.parse_hello(json.dumps({"view": "group", "token": "s3cret", "streamPrefix": "orders",
                                          "consumerGroup": "<img src=x>"}))
    assert hello == views.Hello("group", "s3cret", "orders", "<img src=x>")


@pytest.mark.parametrize("text", ["not json", "[]", '{"view": "delete"}', '{"view": "group"}',
                                  '{"view": "group", "streamPrefix": "a", "consumerGroup": 5}',
                                  '{"view": "group", "streamPrefix": "a{b}", "consumerGroup": "g"}',
                                  '{"view": "overview", "token": ""}',
                                  '{"view": "overview", "token": "a\\nb"}',
                                  json.dumps({"view": "overview", "token": "x" * 5000})])
def test_a_bad_hello_is_refused_with_what_is_wrong(text: str):
    with pytest.raises(views.HelloError) as raised:
        views.parse_hello(text)
    assert str(raised.value)


def test_a_refused_admin_handshake_gives_its_http_status():
    assert views.refused_status("ws://h:1/v1/admin refused the session: HTTP 401 Unauthorized (x)") == 401
    assert views.refused_status("cannot connect to ws://h:1: connection refused") is None


def test_the_throttle_sends_at_most_ten_a_second_and_the_latest_state_wins():
    throttle = views.Throttle()
    throttle.offer("group", 1)
    assert throttle.take(1000) == [1]
    throttle.offer("group", 2)
    throttle.offer("group", 3)
    assert throttle.wait_ms(1040) == 60 and throttle.take(1040) == []
    assert throttle.take(1100) == [3]  # 2 was never sent: 3 replaced it
    assert throttle.take(5000) == []  # nothing new, nothing sent
    sends = 0
    for now in range(10_000, 11_000):
        throttle.offer("overview", now)
        sends += len(throttle.take(now))
    assert sends == views.MAX_SENDS_PER_SECOND


# --- overview ---------------------------------------------------------------------------

GROUPS = [
    {"streamPrefix": "orders", "consumerGroup": "billing", "groupEpoch": 9, "members": 2, "shards": 8,
     "state": "STABLE", "lag": 1234, "pending": 3},
    {"streamPrefix": "orders", "consumerGroup": "audit", "groupEpoch": 2, "members": 0, "shards": 8,
     "state": "EMPTY", "lag": 120, "pending": 0},
    {"streamPrefix": "clicks", "consumerGroup": "etl", "groupEpoch": 1, "members": 1, "shards": 4,
     "state": "STABLE", "lag": None, "pending": 0},
]

MIGRATION = {"state": "DRAINING", "fromVersion": 1, "toVersion": 2, "cutover": "parallel",
             "drainedShards": ["{orders:v1:0}"], "remainingShards": ["{orders:v1:1}", "{orders:v1:2}"],
             "blockingGroups": [{"consumerGroup": "billing", "undelivered": 2, "pending": 1},
                                {"consumerGroup": "audit", "undelivered": 120, "pending": 0}]}


def test_the_overview_has_a_row_per_group_with_its_prefix_migration_and_totals():
    view = views.overview(GROUPS, {"orders": MIGRATION, "clicks": None}, watched=["orders", "clicks"])
    assert [(row["streamPrefix"], row["consumerGroup"]) for row in view["rows"]] == \
        [("clicks", "etl"), ("orders", "audit"), ("orders", "billing")]
    billing = view["rows"][2]
    assert (billing["members"], billing["lag"], billing["pending"], billing["blocked"]) == (2, 1234, 3, True)
    assert billing["backlog"] == 1237, "undelivered plus unacked"
    assert billing["migration"] == "v1 -> v2 DRAINING 1/3 drained, blocked by audit, billing"
    assert view["rows"][0]["migration"] == "-"
    assert view["totals"] == {"groups": 3, "prefixes": 2, "members": 3, "shards": 20, "lag": None,
                              "pending": 3, "backlog": None}  # lag unknown on one shard


def test_a_prefix_past_the_watch_limit_says_not_watched_instead_of_guessing():
    view = views.overview(GROUPS, {}, watched=["clicks"])
    assert {row["consumerGroup"]: row["migration"] for row in view["rows"]} == \
        {"etl": "-", "audit": "not watched", "billing": "not watched"}


def test_each_prefix_keeps_its_watched_group_while_it_exists_and_at_most_the_limit_are_watched():
    assert views.prefixes_to_watch(GROUPS, {}) == {"clicks": "etl", "orders": "audit"}
    assert views.prefixes_to_watch(GROUPS, {"orders": "billing"})["orders"] == "billing"
    assert views.prefixes_to_watch(GROUPS, {"orders": "gone"})["orders"] == "audit"
    assert views.prefixes_to_watch(GROUPS, {}, limit=1) == {"clicks": "etl"}


def test_g2_the_migration_names_its_blocking_groups_most_behind_first():
    summary = views.migration_summary(MIGRATION)
    assert summary is not None
    assert (summary["drained"], summary["total"]) == (1, 3)
    assert [entry["consumerGroup"] for entry in summary["blockingGroups"]] == ["audit", "billing"]
    assert summary["blockingGroups"][0] == {"consumerGroup": "audit", "undelivered": 120, "pending": 0}
    assert views.migration_summary(None) is None


# --- group page -------------------------------------------------------------------------

DESCRIPTION = {
    "type": "groupDescription", "status": "OK", "streamPrefix": "orders", "consumerGroup": "billing",
    "state": "RECONCILING", "groupEpoch": 9, "assignmentEpoch": 9, "maxConcurrency": None,
    "routing": {"version": 2, "shardCount": 2, "retention": {"mode": "acked", "maxLength": None,
                                                             "maxAgeMs": None}},
    "migration": MIGRATION,
    "members": [
        {"memberId": "m-b", "memberEpoch": 8, "state": "UNREVOKED_SHARDS", "capacity": 4,
         "lastHeartbeatMsAgo": 4200, "assignedShards": ["{orders:v2:1}"], "pendingShards": [],
         "revokingShards": ["{orders:v2:0}"], "targetShards": ["{orders:v2:1}"], "overdue": True},
        {"memberId": "m-a", "memberEpoch": 9, "state": "UNRELEASED_SHARDS", "capacity": 4,
         "lastHeartbeatMsAgo": 100, "assignedShards": [], "pendingShards": ["{orders:v2:0}"],
         "revokingShards": [], "targetShards": ["{orders:v2:0}"], "instanceId": "pod-1"},
    ],
    "shards": [
        {"shard": "{orders:v2:0}", "version": 2, "owner": "m-b", "length": 10, "lastDeliveredId": "1-0",
         "lag": 7, "pending": 1, "oldestPendingMs": 820},
        {"shard": "{orders:v2:1}", "version": 2, "owner": "m-b", "length": 90, "lastDeliveredId": "2-0",
         "lag": 70, "pending": 0, "oldestPendingMs": None},
    ],
}


def test_the_group_page_lists_members_with_assigned_pending_and_revoking_shards():
    view = views.group_view(DESCRIPTION)
    assert [member["memberId"] for member in view["members"]] == ["m-a", "m-b"]
    first, second = view["members"]
    assert (first["instanceId"], first["pendingShards"], first["overdue"]) == ("pod-1", ["{orders:v2:0}"],
                                                                               False)
    assert (second["instanceId"], second["revokingShards"], second["overdue"]) == \
        (None, ["{orders:v2:0}"], True)
    assert (second["memberEpoch"], second["capacity"], second["lastHeartbeatMsAgo"]) == (8, 4, 4200)


def test_every_shard_of_the_live_versions_has_its_owner_and_figures_on_its_row():
    view = views.group_view(DESCRIPTION)
    assert [(s["shard"], s["owner"], s["length"], s["lag"], s["pending"], s["oldestPendingMs"])
            for s in view["shards"]] == [("{orders:v2:0}", "m-b", 10, 7, 1, 820),
                                         ("{orders:v2:1}", "m-b", 90, 70, 0, None)]
    assert view["shards"][0]["revokingFrom"] == "m-b" and view["shards"][1]["revokingFrom"] is None
    assert (view["lag"], view["pending"], view["routingVersion"], view["shardCount"]) == (77, 1, 2, 2)
    assert view["backlog"] == 78 and [s["backlog"] for s in view["shards"]] == [8, 70]
    assert view["retention"] == {"mode": "acked", "maxLength": None, "maxAgeMs": None}
    assert view["migration"]["blockingGroups"][0]["consumerGroup"] == "audit"
    # C4: the group's ages, as describeGroup gives them (null: no such entry)
    assert (view["oldestUndeliveredAgeMs"], view["oldestPendingEntryAgeMs"]) == (None, None)
    aged = views.group_view({**DESCRIPTION, "oldestUndeliveredAgeMs": 5200,
                             "oldestPendingEntryAgeMs": 9100})
    assert (aged["oldestUndeliveredAgeMs"], aged["oldestPendingEntryAgeMs"]) == (5200, 9100)


def test_the_laggiest_shard_is_the_one_with_the_largest_backlog_then_most_undelivered():
    # the ranking itself: tests/test_group_view.py
    assert views.group_view(DESCRIPTION)["laggiest"] == {"shard": "{orders:v2:1}", "owner": "m-b",
                                                         "lag": 70, "pending": 0, "backlog": 70}
    calm = {**DESCRIPTION, "shards": [{**shard, "lag": 0, "pending": 0}
                                      for shard in DESCRIPTION["shards"]]}
    assert views.group_view(calm)["laggiest"] is None


def test_the_group_page_is_the_json_of_the_decoded_description_s_group_view():
    assert views.group_view(views.described(DESCRIPTION)) == views.group_view(DESCRIPTION)
    assert json.loads(json.dumps(views.group_view(DESCRIPTION))) == views.group_view(DESCRIPTION)
    with pytest.raises(ProtocolError, match="state"):  # the server ends the page saying so
        views.group_view({**DESCRIPTION, "state": "SOMETHING_NEW"})


# --- the lag history a later page starts from ---------------------------------------------


def test_lag_history_keeps_a_point_a_second_while_followed_and_a_break_when_nobody_is():
    from rsc.console.views import HISTORY_STEP_MS, LagHistory

    history, key = LagHistory(), ("orders", "billing")
    history.follow(key)
    history.follow(key)  # two pages on the same group
    history.record(key, 1_000, 5, 1, 400, 900)  # C4: with the oldest entries' ages
    history.record(key, 1_000 + HISTORY_STEP_MS - 1, 6, 1, 500, 1000)  # within the second: not kept
    history.record(key, 1_000 + HISTORY_STEP_MS, 7, 2, 1400, 1900)
    history.unfollow(key, 2_500)  # one page left, the other still follows: no break
    assert history.points(key, 3_000) == [[1_000, 5, 1, 400, 900], [2_000, 7, 2, 1400, 1900]]
    history.unfollow(key, 3_000)
    assert history.points(key, 3_000)[-1] == [3_000, None, None, None, None]
    history.record(key, 3_100, 9, 0, 10, None)  # followed again: the break stays, the line starts over
    assert history.points(key, 3_200)[-2:] == [[3_000, None, None, None, None], [3_100, 9, 0, 10, None]]
    history.record(key, 4_100, None, 0, None, None)  # Redis cannot tell, nothing pending: no break
    history.unfollow(key, 4_200)
    assert history.points(key, 4_300)[-2:] == [[4_100, None, 0, None, None],
                                               [4_200, None, None, None, None]]


def test_lag_history_reaches_back_an_hour_in_buckets_and_remembers_a_bounded_number_of_groups():
    from rsc.console.views import (
        HISTORY_BUCKET_MS,
        HISTORY_MS,
        HISTORY_RECENT_MS,
        MAX_HISTORIES,
        MAX_HISTORY_POINTS,
        LagHistory,
    )

    assert HISTORY_MS == 3_600_000  # C4: the last hour
    history = LagHistory()
    now = 2 * HISTORY_MS  # two hours followed, a point a second
    for second in range(now // 1000 + 1):  # a backlog whose oldest entry is 0..9 s old
        history.record(("p", "g"), second * 1000, second, second % 7, second % 10 * 1000,
                       None if second % 20 else 500)
    points = history.points(("p", "g"), now)
    assert len(points) <= MAX_HISTORY_POINTS
    assert now - HISTORY_MS <= points[0][0] < now - HISTORY_MS + HISTORY_BUCKET_MS  # an hour back
    recent = [point for point in points if point[0] >= now - HISTORY_RECENT_MS]
    assert [t for t, *_ in recent] == list(range(now - HISTORY_RECENT_MS, now + 1, 1000))
    older = points[:len(points) - len(recent)]
    assert all(b[0] - a[0] == HISTORY_BUCKET_MS for a, b in zip(older, older[1:], strict=False))
    # a bucket keeps its largest figures, at its first point's time
    bucket = older[-1]
    assert bucket[0] % HISTORY_BUCKET_MS == 0 and bucket[1] == bucket[0] // 1000 + 19
    assert bucket[2] == 6
    assert bucket[3:] == [9000, 500]  # the ages too: the largest, and a value beats None
    assert all(len(point) == 5 for point in points)
    points[0][1] = -1  # a copy: the page's list is its own
    assert history.points(("p", "g"), now)[0][1] != -1
    for n in range(MAX_HISTORIES + 5):
        history.record(("p", f"g{n}"), now + 1000, n, 0, None, None)
    assert history.points(("p", "g"), now + 1000) == []  # the least recently seen went first
    assert history.points(("p", f"g{MAX_HISTORIES + 4}"), now + 1000) == [
        [now + 1000, MAX_HISTORIES + 4, 0, None, None]]
    assert history.points(("p", "g4"), now + 1000) == []
    assert history.points(("p", "g5"), now + 1000) == [[now + 1000, 5, 0, None, None]]


def test_lag_history_stays_bounded_when_pages_come_and_go_every_second():
    from rsc.console.views import HISTORY_MS, MAX_HISTORY_POINTS, LagHistory

    history, key = LagHistory(), ("p", "g")
    for second in range(HISTORY_MS // 1000):  # a break after every point: nothing merges
        history.follow(key)
        history.record(key, second * 1000, second, 0, second, None)
        history.unfollow(key, second * 1000 + 500)
    points = history.points(key, HISTORY_MS)
    assert len(points) == MAX_HISTORY_POINTS  # the oldest went first
    assert points[-1] == [HISTORY_MS - 500, None, None, None, None]
