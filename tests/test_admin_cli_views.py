"""The admin views are pure functions of response objects: tested here without I/O."""

from __future__ import annotations

import argparse
import json
from typing import Any

import attrs
import pytest
import trio

from rsc.admin.args import add_parser
from rsc.admin.cli import error_line, run
from rsc.admin.client import AdminConnectError, AdminError, check_answer, read_answer
from rsc.admin.describe import describe_view
from rsc.admin.view_text import ShardRun, format_age, plain_width, render_plain, shard_runs
from rsc.admin.views import (
    groups_view,
    max_concurrency_changed_view,
    member_removed_view,
    response_view,
    shard_count_changed_view,
)
from rsc.admin.watch import WatchState
from rsc.admin.watch_view import change_lines, watch_signature
from rsc.protocol import (
    BlockingGroup,
    DescribeGroup,
    ErrorResponse,
    GroupDescription,
    Groups,
    MaxConcurrencyChanged,
    MemberRemoved,
    ShardCountChanged,
    Status,
    decode,
)

RECONCILING: dict[str, Any] = {
    "type": "groupDescription", "requestId": 3, "status": "OK",
    "streamPrefix": "orders", "consumerGroup": "billing",
    "state": "RECONCILING", "groupEpoch": 9, "assignmentEpoch": 9,
    "maxConcurrency": None,
    "routing": {"version": 2, "shardCount": 4},
    "migration": {"state": "DRAINING", "fromVersion": 1, "toVersion": 2,
                  "cutover": "parallel",
                  "drainedShards": ["{orders:v1:0}"], "remainingShards": ["{orders:v1:1}"]},
    "members": [
        {"memberId": "10.0.0.8-77-0-bbbb", "memberEpoch": 9, "state": "UNRELEASED_SHARDS",
         "capacity": 2, "lastHeartbeatMsAgo": 1420,
         "assignedShards": ["{orders:v2:2}", "{orders:v2:3}"], "pendingShards": ["{orders:v1:1}"],
         "revokingShards": [],
         "targetShards": ["{orders:v1:1}", "{orders:v2:2}", "{orders:v2:3}"]},
        {"memberId": "10.0.0.7-4242-0-aaaa", "memberEpoch": 8, "state": "UNREVOKED_SHARDS",
         "capacity": 8, "lastHeartbeatMsAgo": 420,
         "assignedShards": ["{orders:v2:0}", "{orders:v2:1}"], "pendingShards": [],
         "revokingShards": ["{orders:v1:1}"],
         "targetShards": ["{orders:v2:0}", "{orders:v2:1}"]},
    ],
    "targetAssignment": {}, "currentAssignment": {},
}


def description(**changes) -> GroupDescription:
    message = decode(json.dumps({**RECONCILING, **changes}))
    assert isinstance(message, GroupDescription)
    return message


def stable_description() -> GroupDescription:
    member = {"memberId": "m1", "memberEpoch": 4, "state": "STABLE", "capacity": None,
              "lastHeartbeatMsAgo": None, "assignedShards": ["{orders:v1:0}"],
              "pendingShards": [], "revokingShards": [], "targetShards": ["{orders:v1:0}"]}
    return description(state="STABLE", groupEpoch=4, assignmentEpoch=4, maxConcurrency=3,
                       routing={"version": 1, "shardCount": 1}, migration=None,
                       members=[member])


def lines_with(text: str, word: str) -> list[str]:
    return [line for line in text.splitlines() if word in line]


def test_describe_header_shows_epochs_state_routing_concurrency_and_migration():
    text = render_plain(describe_view(description()))
    assert "orders / billing" in text
    assert "RECONCILING" in text
    assert "group 9" in text and "assignment 9" in text
    assert "version 2, 4 shards" in text
    assert "unset" in text
    assert "DRAINING v1 -> v2 (parallel cutover): 1 of 2 old shards drained" in text


def test_describe_has_one_row_per_member_with_its_shards():
    text = render_plain(describe_view(description()))
    [slow] = lines_with(text, "10.0.0.7-4242-0-aaaa")
    assert "UNREVOKED_SHARDS" in slow and "420ms" in slow
    assert "v2:0-1" in slow and "v1:1" in slow
    [fast] = lines_with(text, "10.0.0.8-77-0-bbbb")
    assert "UNRELEASED_SHARDS" in fast and "1.4s" in fast
    assert "v1:1*" in fast, "a target shard not held yet is marked"
    assert text.index("10.0.0.7-4242-0-aaaa") < text.index("10.0.0.8-77-0-bbbb")
    for column in ("member", "epoch", "state", "capacity", "heartbeat", "assigned", "waiting",
                   "revoking", "target"):
        assert column in lines_with(text, "heartbeat")[0]


def test_describe_summarises_where_target_and_current_differ():
    text = render_plain(describe_view(description()))
    assert ("target differs from current: 1 shard(s) waiting, 1 shard(s) to release, "
            "1 member(s) behind assignment epoch 9 (* in target, not held yet; "
            "! held, not in target)") in text


def test_held_shards_missing_from_the_target_are_marked_before_the_member_is_told():
    untold = {**RECONCILING["members"][1], "assignedShards": ["{orders:v2:0}", "{orders:v2:1}"],
              "revokingShards": [], "targetShards": ["{orders:v2:0}"]}
    text = render_plain(describe_view(description(members=[untold], migration=None)))
    [row] = lines_with(text, "10.0.0.7-4242-0-aaaa")
    assert "v2:0 v2:1!" in row
    assert "1 shard(s) to release" in text


def test_describe_of_a_stable_group_says_current_equals_target():
    text = render_plain(describe_view(stable_description()))
    assert "STABLE" in text
    assert "current assignment = target" in text
    assert "3 (min with each member's capacity)" in text
    assert "migration       none" in text


def test_describe_of_a_group_without_members_or_routing():
    empty = description(state="EMPTY", members=[], routing=None, migration=None)
    text = render_plain(describe_view(empty))
    assert "EMPTY" in text and "none yet" in text and "no members" in text


def test_describe_highlights_differences_on_a_terminal():
    from rich.console import Console

    console = Console(force_terminal=True, color_system="standard", width=200)
    with console.capture() as capture:
        console.print(describe_view(description()))
    styled = capture.get()
    assert "\x1b[1;33mv1:1*" in styled  # a waiting target shard: bold yellow
    assert "\x1b[1;31mv1:1" in styled  # revoking shard: bold red


def test_shard_runs_fold_consecutive_indices_per_version():
    shards = ["{orders:v1:3}", "{orders:v1:0}", "{orders:v1:1}", "{orders:v2:0}", "other"]
    assert shard_runs(shards, "orders") == [
        ShardRun("v1:0-1", False), ShardRun("v1:3", False), ShardRun("v2:0", False),
        ShardRun("other", False)]
    assert shard_runs(shards, "orders", frozenset({"{orders:v1:1}"})) == [
        ShardRun("v1:0", False), ShardRun("v1:1", True), ShardRun("v1:3", False),
        ShardRun("v2:0", False), ShardRun("other", False)]
    assert shard_runs(["{billing:v1:0}"], "orders") == [ShardRun("{billing:v1:0}", False)]


@pytest.mark.parametrize(("milliseconds", "shown"), [
    (None, "-"), (0, "0ms"), (999, "999ms"), (1000, "1.0s"), (59_949, "59.9s"),
    (185_000, "3m05s")])
def test_heartbeat_age(milliseconds, shown):
    assert format_age(milliseconds) == shown


def test_groups_view_lists_groups_sorted():
    groups = decode(json.dumps({"type": "groups", "requestId": 1, "status": "OK", "groups": [
        {"streamPrefix": "orders", "consumerGroup": "shipping", "groupEpoch": 2, "members": 1,
         "shards": 4, "state": "STABLE"},
        {"streamPrefix": "orders", "consumerGroup": "billing", "groupEpoch": 7, "members": 3,
         "shards": 4, "state": "RECONCILING"}]}))
    assert isinstance(groups, Groups)
    text = render_plain(groups_view(groups))
    [billing] = lines_with(text, "billing")
    assert billing.split()[:13] == ["│", "orders", "│", "billing", "│", "RECONCILING", "│", "7",
                                    "│", "3", "│", "4", "│"]
    assert text.index("billing") < text.index("shipping")
    empty = Groups(request_id=1, status=Status.OK, groups=())
    assert render_plain(groups_view(empty)).strip() == "no groups"


def test_change_views_are_one_line():
    changed = decode(json.dumps({
        "type": "shardCountChanged", "requestId": 1, "status": "OK", "streamPrefix": "orders",
        "consumerGroup": "billing",
        "routing": {"version": 2, "shardCount": 8, "hash": "crc32", "streams": []},
        "migration": None}))
    assert isinstance(changed, ShardCountChanged)
    assert shard_count_changed_view(changed).plain == "routing of prefix orders: version 2, 8 shards"
    assert max_concurrency_changed_view(MaxConcurrencyChanged(
        request_id=1, status=Status.OK, stream_prefix="orders", consumer_group="billing",
        max_concurrency=None, group_epoch=5)).plain == (
        "maxConcurrency of orders / billing cleared (group epoch 5)")
    assert member_removed_view(MemberRemoved(
        request_id=1, status=Status.OK, stream_prefix="orders", consumer_group="billing",
        member_id="m1", group_epoch=6)).plain == (
        "removed member m1 from orders / billing (group epoch 6)")


def test_views_of_responses_the_protocol_classes_do_not_know_yet():
    deleted = {"type": "groupDeleted", "requestId": 1, "status": "OK", "streamPrefix": "orders",
               "consumerGroup": "x:y"}
    assert render_plain(response_view(deleted)).strip() == (
        "deleted group orders / x:y\n"
        "its dead letters, if any, are kept (rsc admin dead-letters orders x:y)")  # P2
    retention = {"type": "retentionChanged", "requestId": 1, "status": "OK",
                 "streamPrefix": "orders",
                 "retention": {"mode": "none", "maxLength": 1000, "maxAgeMs": 7 * 86_400_000}}
    assert render_plain(response_view(retention)).strip() == (
        "retention of prefix orders: none (nothing removed because of acks), max length 1000, "
        "max age 7d")
    reset = {"type": "offsetsReset", "requestId": 1, "status": "OK", "streamPrefix": "orders",
             "consumerGroup": "billing",
             "shards": [{"shard": "{orders:v1:0}", "lastDeliveredId": "0-0"},
                        {"shard": "{orders:v1:1}", "lastDeliveredId": "1733040000000-3"}]}
    text = render_plain(response_view(reset))
    assert "offsets of orders / billing reset on 2 shard(s)" in text
    [row] = lines_with(text, "1733040000000-3")
    assert "v1:1" in row
    undecodable = {"type": "groupDescription", "status": "OK", "streamPrefix": "o",
                   "consumerGroup": "g", "state": "SOMETHING_NEW"}
    assert lines_with(render_plain(response_view(undecodable)), "state")[0].split() == [
        "state", "SOMETHING_NEW"]
    unknown = {"type": "somethingNew", "requestId": 1, "status": "OK", "answer": 42}
    assert lines_with(render_plain(response_view(unknown)), "answer")[0].split() == [
        "answer", "42"]


def test_watch_ignores_request_ids_and_heartbeat_ages():
    first = description()
    later = attrs.evolve(first, request_id=99, members=tuple(
        attrs.evolve(member, last_heartbeat_ms_ago=5) for member in first.members))
    assert watch_signature(first) == watch_signature(later)
    moved = attrs.evolve(first, group_epoch=10)
    assert watch_signature(first) != watch_signature(moved)

    state = WatchState()
    assert state.record(None, "t0") is True, "the first 'waiting' is shown"
    assert state.record(None, "t1") is False
    assert state.record(first, "t2") is True
    assert state.record(later, "t3") is False
    assert not state.differs(later) and state.differs(moved)
    assert state.record(moved, "t4") is True
    assert state.lines == ["group epoch 9 -> 10"]
    assert (state.changes, state.last_change) == (2, "t4")
    assert state.enough(2) and not state.enough(3) and not state.enough(None)
    assert [event.plain for event in state.events][-1] == "t4  group epoch 9 -> 10"


def test_change_lines_name_what_changed():
    before = description()
    member = before.members[0]
    after = attrs.evolve(before, state="STABLE", group_epoch=10, migration=None,
                         members=(attrs.evolve(member, state="STABLE",
                                               assigned_shards=(*member.assigned_shards,
                                                                "{orders:v1:1}")),))
    assert change_lines(before, after) == [
        "group epoch 9 -> 10", "state RECONCILING -> STABLE",
        "member 10.0.0.7-4242-0-aaaa left or expired",
        "member 10.0.0.8-77-0-bbbb UNRELEASED_SHARDS -> STABLE",
        "member 10.0.0.8-77-0-bbbb got v1:1", "migration: none"]
    assert change_lines(None, before) == [
        "group RECONCILING at epoch 9, 2 member(s): 10.0.0.7-4242-0-aaaa, 10.0.0.8-77-0-bbbb"]
    busy = with_lag()

    def last_shard(**changes) -> GroupDescription:
        return attrs.evolve(busy, shards=(*busy.shards[:-1], attrs.evolve(busy.shards[-1], **changes)))

    calmer, longer = last_shard(lag=3), last_shard(length=9)
    for figures_only in (calmer, longer):  # only seen by --json, which prints no lines
        assert change_lines(busy, figures_only) == ["backlog figures changed"]
    handed = last_shard(owner="m9")
    assert change_lines(busy, handed) == ["owner of v2:3 - -> m9"]


def test_check_answer_raises_admin_error_for_every_non_ok_status():
    request = DescribeGroup(request_id=1, stream_prefix="o", consumer_group="g")
    ok = stable_description()
    assert check_answer(request, ok) is ok
    unknown = GroupDescription(request_id=1, status=Status.UNKNOWN_GROUP, stream_prefix="o",
                               consumer_group="g", error="group o/g is unknown")
    with pytest.raises(AdminError) as raised:
        check_answer(request, unknown)
    assert raised.value.status is Status.UNKNOWN_GROUP and raised.value.response is unknown
    assert str(raised.value) == "UNKNOWN_GROUP: group o/g is unknown"
    invalid = ErrorResponse(request_id=1, status=Status.INVALID_REQUEST, error="field 'x'")
    with pytest.raises(AdminError, match="INVALID_REQUEST: field 'x'"):
        check_answer(request, invalid)
    newer = {"type": "groupDeleted", "status": "SOME_NEW_STATUS", "error": "why"}
    with pytest.raises(AdminError, match="SOME_NEW_STATUS: why"):
        check_answer(request, newer)
    other = Groups(request_id=1, status=Status.OK)
    with pytest.raises(AdminError) as raised:
        check_answer(request, other)
    assert str(raised.value) == "INVALID_REQUEST: expected a groupDescription response, got groups"
    assert raised.value.response == request.error(Status.INVALID_REQUEST, raised.value.error)


def test_an_error_frame_reads_as_the_requests_own_error_response():
    request = DescribeGroup(request_id=1, stream_prefix="o", consumer_group="g", watch=True)
    frame = {"type": "error", "requestId": 1, "status": "INVALID_REQUEST",
             "error": "field 'watch' is not accepted"}
    answer = read_answer(request, frame)
    assert answer == request.error(Status.INVALID_REQUEST, "field 'watch' is not accepted")
    assert isinstance(answer, GroupDescription)


def test_error_lines():
    url = "ws://127.0.0.1:1"
    assert error_line(AdminError(Status.UNKNOWN_GROUP, "no such group"), url, 5) == (
        "error: UNKNOWN_GROUP: no such group")
    assert error_line(AdminConnectError("cannot connect to ws://h:1: connection refused"),
                      url, 5) == "error: cannot connect to ws://h:1: connection refused"
    assert error_line(trio.TooSlowError(), url, 5) == (
        "error: no answer from the coordinator at ws://127.0.0.1:1 within 5s (is it overloaded, "
        "or its Redis stalled? --timeout waits longer)")
    assert "\n" not in error_line(AdminConnectError("two\nlines"), url, 5)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rsc")
    add_parser(parser.add_subparsers(dest="command", required=True), run=run)
    return parser.parse_args(argv)


def test_command_line_matches_the_protocol():
    args = parse(["admin", "--url", "ws://h:1", "--token", "t", "set-shards", "orders", "billing",
                  "8", "--cutover", "ordered", "--json"])
    assert (args.url, args.token, args.admin_command) == ("ws://h:1", "t", "set-shards")
    assert (args.prefix, args.group_and_count, args.cutover, args.json) == (
        "orders", ["billing", "8"], "ordered", True)
    assert parse(["admin", "list"]).url is None, "the URL comes from the environment when absent"
    assert parse(["admin", "set-max-concurrency", "o", "g", "none"]).max_concurrency is None
    assert parse(["admin", "set-max-concurrency", "o", "g", "4"]).max_concurrency == 4
    watch = parse(["admin", "watch", "o", "g", "--interval", "0.1", "--changes", "2"])
    assert (watch.interval, watch.changes, watch.duration) == (0.1, 2, None)
    assert parse(["admin", "remove-member", "o", "g", "m-1"]).member_id == "m-1"
    for command in (["list"], ["describe", "o", "g"], ["remove-member", "o", "g", "m"],
                    ["watch", "o", "g"], ["set-max-concurrency", "o", "g", "1"],
                    ["set-shards", "o", "g", "1"], ["delete-group", "o", "g"],
                    ["set-retention", "o", "--acked"], ["reset-offsets", "o", "g", "--to-latest"]):
        assert parse(["admin", *command, "--json"]).json is True


# --- lag, shards, overdue, blocking groups, retention (docs/protocol.md "Lag and shards") ----------


def shard_entry(index: int, version: int = 2, owner: str | None = "10.0.0.8-77-0-bbbb",
                lag: int | None = 0, pending: int = 0, oldest: int | None = None) -> dict:
    return {"shard": f"{{orders:v{version}:{index}}}", "version": version, "owner": owner,
            "length": 1204, "lastDeliveredId": f"1733040000000-{index}", "lag": lag,
            "pending": pending, "oldestPendingMs": oldest}


def with_lag(shards: list[dict] | None = None, **extra) -> GroupDescription:
    overdue = [{**member, "overdue": member["memberId"] == "10.0.0.8-77-0-bbbb"}
               for member in RECONCILING["members"]]
    migration = {**RECONCILING["migration"], "blockingGroups": [
        {"consumerGroup": "x:y", "undelivered": 120, "pending": 3}]}
    extra = {"retention": {"mode": "acked", "maxLength": None, "maxAgeMs": 86_400_000},
             **extra}
    return description(members=overdue, migration=migration,
                       shards=shards if shards is not None else [
                           shard_entry(1, version=1, owner="10.0.0.7-4242-0-aaaa", lag=17,
                                       pending=4, oldest=820),
                           shard_entry(0), shard_entry(1), shard_entry(2), shard_entry(3, owner=None)],
                       **extra)


def test_describe_shows_a_row_per_shard_with_owner_length_and_backlog():
    text = render_plain(describe_view(with_lag()))
    [header] = [line for line in text.splitlines() if line.startswith("┃ shard")]
    assert header.split("┃")[1:-1] == [
        " shard ", " version ", " owner                ", " length ", " last delivered  ",
        " backlog ", " undelivered ", " unacked ", " oldest unacked "]
    [old] = lines_with(text, "1733040000000-1 ")[:1]
    assert old.split("│")[1:-1] == [" v1:1  ", "       1 ", " 10.0.0.7-4242-0-aaaa ", "   1204 ",
                                    " 1733040000000-1 ", "      21 ", "          17 ",
                                    "       4 ", "          820ms "]
    [unowned] = lines_with(text, "1733040000000-3")
    assert " none " in unowned
    assert "backlog         21 (undelivered 17, unacked 4; oldest unacked 820ms)" in text


def test_a_group_that_read_ahead_shows_its_unacked_entries_as_backlog():
    """Issue 34: members read ahead without acking: 0 undelivered is not 'caught up'."""
    ahead = with_lag(shards=[shard_entry(0, lag=0, pending=1679, oldest=4200),
                             shard_entry(1, lag=21, pending=0)])
    text = render_plain(describe_view(ahead))
    assert "backlog         1700 (undelivered 21, unacked 1679; oldest unacked 4.2s)" in text
    assert "lag 0" not in text and "pending" not in text.replace("pendingShards", "")


def test_describe_marks_overdue_members():
    text = render_plain(describe_view(with_lag()))
    [late] = lines_with(text, "UNRELEASED_SHARDS")
    assert "1.4s overdue" in late
    [fine] = lines_with(text, "UNREVOKED_SHARDS")
    assert "overdue" not in fine


def test_describe_names_the_groups_a_migration_waits_on():
    text = render_plain(describe_view(with_lag()))
    [line] = lines_with(text, "blocked by")
    assert "waiting on x:y (120 undelivered, 3 unacked)" in line
    assert text.index("blocked by") < text.index("members (2)"), "shown before the tables"


def test_describe_shows_retention():
    text = render_plain(describe_view(with_lag()))
    assert "retention       acked (entries go once every group acked them), max age 1d" in text
    capped = with_lag(retention={"mode": "none", "maxLength": 5000, "maxAgeMs": 1_800_000})
    assert "none (nothing removed because of acks), max length 5000, max age 30m" in \
        render_plain(describe_view(capped))


def test_many_shards_are_summed_unless_asked_for():
    many = with_lag(shards=[shard_entry(index, lag=1) for index in range(40)])
    text = render_plain(describe_view(many))
    assert "40 shards (describe --shards for one row per shard)" in text
    assert "last delivered" not in text
    assert "backlog         40 (undelivered 40, unacked 0)" in text
    assert len(lines_with(render_plain(describe_view(many, shards=True)), "1733040000000-")) == 40


def test_unknown_lag_on_any_shard_makes_the_sum_unknown():
    text = render_plain(describe_view(with_lag(shards=[shard_entry(0, lag=None, pending=5),
                                                       shard_entry(1, pending=2)])))
    assert "backlog         >= 7 (undelivered unknown, unacked 7)" in text
    [unknown] = lines_with(text, "1733040000000-0")
    assert unknown.split("│")[6:8] == ["    >= 5 ", "           - "]


def test_describe_without_the_new_fields_still_renders():
    text = render_plain(describe_view(description()))
    assert "backlog" not in text and "retention" not in text and "shards (" not in text


@pytest.mark.parametrize("width", [80, 100])
def test_describe_fits_80_columns_without_truncated_headers(width):
    long_member = {**RECONCILING["members"][0], "memberId": "10.123.234.56-123456-0-" + "f" * 24}
    base = description(members=[long_member, RECONCILING["members"][1]])
    view = attrs.evolve(with_lag(), members=base.members)
    text = render_plain(describe_view(view), width=width)
    assert max(len(line) for line in text.splitlines()) <= width
    assert "…" not in text, "no column header or cell cut to an ellipsis"
    headers = " ".join(line for line in text.splitlines() if line.startswith("┃"))
    for column in ("member", "epoch", "state", "capacity", "heartbeat", "assigned", "waiting",
                   "revoking", "target", "shard", "owner", "last id", "backlog", "undelivered",
                   "unacked", "oldest"):
        assert f" {column} " in headers, column
    assert len(lines_with(text, "UNRELEASED_SHARDS")) == 1


def test_a_group_without_members_fits_80_columns():
    empty = description(state="EMPTY", members=[], migration=None)
    text = render_plain(describe_view(empty), width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "no members" in text and "…" not in text


def test_list_shows_the_backlog_when_the_coordinator_gives_it():
    groups = decode(json.dumps({"type": "groups", "requestId": 1, "status": "OK", "groups": [
        {"streamPrefix": "orders", "consumerGroup": "billing", "groupEpoch": 7, "members": 3,
         "shards": 4, "state": "STABLE"}]}))
    assert isinstance(groups, Groups)
    entry = attrs.evolve(groups.groups[0], lag=1746, pending=12)
    text = render_plain(groups_view(attrs.evolve(groups, groups=(entry,))))
    [row] = lines_with(text, "billing")
    assert [cell.strip() for cell in row.split("│")[7:10]] == ["1758", "1746", "12"]
    assert [cell.strip() for cell in lines_with(text, "prefix")[0].split("┃")[7:10]] == [
        "backlog", "undelivered", "unacked"]
    # an older coordinator's answer (no lag, no pending) reads as unknown undelivered, 0 unacked
    [row] = lines_with(render_plain(groups_view(groups)), "billing")
    assert [cell.strip() for cell in row.split("│")[7:10]] == [">= 0", "-", "0"]


def test_plain_output_follows_columns_when_set():
    assert plain_width({}) == 200
    assert plain_width({"COLUMNS": "80"}) == 80
    assert plain_width({"COLUMNS": "junk"}) == 200 and plain_width({"COLUMNS": "5"}) == 200


def many_members(count: int, troubled: int) -> GroupDescription:
    """A STABLE group of `count` members, the last `troubled` of them overdue."""
    body = dict(RECONCILING, state="STABLE", migration=None, members=[
        {"memberId": f"m-{index:05d}", "memberEpoch": 9, "state": "STABLE", "capacity": 1,
         "lastHeartbeatMsAgo": 10, "assignedShards": [], "pendingShards": [],
         "revokingShards": [], "targetShards": [], "overdue": index >= count - troubled}
        for index in range(count)])
    description = decode(json.dumps(body))
    assert isinstance(description, GroupDescription)
    return description


def test_describe_of_many_members_is_a_summary_with_those_needing_attention_first():
    text = render_plain(describe_view(many_members(500, troubled=3)))
    assert "500 members, 20 shown: 500 STABLE, 3 overdue; capacity 500" in text
    rows = [line for line in text.splitlines() if "m-0" in line]
    assert len(rows) == 20
    assert any("m-00499" in row for row in rows)  # an overdue one, though last by id
    assert "--members all" in text


def test_describe_members_option_shows_n_or_all_rows():
    description = many_members(60, troubled=0)
    shown = render_plain(describe_view(description, members=5))
    assert sum(1 for line in shown.splitlines() if "m-000" in line) == 5
    every = render_plain(describe_view(description, members="all"))
    assert sum(1 for line in every.splitlines() if "m-000" in line) == 60
    assert "shown" not in every
    few = render_plain(describe_view(many_members(10, troubled=0)))
    assert "shown" not in few and sum(1 for line in few.splitlines() if "m-000" in line) == 10


@pytest.mark.parametrize("value", ["some", "-1", ""])
def test_describe_members_option_refuses_what_is_not_a_count(value, capsys):
    parser = argparse.ArgumentParser(prog="rsc")
    add_parser(parser.add_subparsers(dest="command", required=True), run=run)
    with pytest.raises(SystemExit):
        parser.parse_args(["admin", "describe", "p", "g", "--members", value])
    assert "'all' or a number of rows" in capsys.readouterr().err
# --- static members (S6) ----------------------------------------------------------------------

def static_description(instance: str = "pod-[bold]0[/]") -> GroupDescription:
    away = {"memberId": "m-[red]1", "memberEpoch": -2, "state": "AWAY", "capacity": 1,
            "lastHeartbeatMsAgo": 12_000, "awayMs": 12_000, "instanceId": instance,
            "assignedShards": [], "pendingShards": [], "revokingShards": [],
            "targetShards": ["{orders:v1:0}"]}
    live = {"memberId": "m2", "memberEpoch": 4, "state": "STABLE", "capacity": 1,
            "lastHeartbeatMsAgo": 300, "instanceId": None, "assignedShards": ["{orders:v1:1}"],
            "pendingShards": [], "revokingShards": [], "targetShards": ["{orders:v1:1}"]}
    return description(state="STABLE", groupEpoch=4, assignmentEpoch=4, migration=None,
                       routing={"version": 1, "shardCount": 2}, members=[away, live])


def test_s6_describe_shows_instance_ids_literally_and_an_away_member_with_its_time_away():
    text = render_plain(describe_view(static_description()))
    assert " instance " in lines_with(text, "heartbeat")[0]
    [away] = lines_with(text, "AWAY")
    assert "m-[red]1" in away and "pod-[bold]0[/]" in away, "names are printed literally"
    assert "away 12.0s" in away and "overdue" not in away
    [live] = lines_with(text, "m2")
    assert " - " in live, "a dynamic member has no instanceId"


def test_s6_a_group_of_dynamic_members_shows_no_instance_column():
    text = render_plain(describe_view(description()))
    assert "instance" not in text


def test_s6_describe_with_instance_ids_fits_80_columns():
    text = render_plain(describe_view(static_description("pod-" + "x" * 20)), width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "AWAY" in text and " instance " in text


def test_s6_watch_ignores_the_away_clock_and_names_away_and_returns():
    before = static_description()
    later = attrs.evolve(before, members=tuple(
        attrs.evolve(member, away_ms=(member.away_ms or 0) + 5000) if member.away_ms else member
        for member in before.members))
    assert watch_signature(before) == watch_signature(later)
    away, live = before.members
    back = attrs.evolve(away, member_id="m-[red]9", member_epoch=4, state="STABLE", away_ms=None,
                        assigned_shards=away.target_shards)
    assert change_lines(before, attrs.evolve(before, members=(back, live))) == [
        "instance pod-[bold]0[/] returned as member m-[red]9 (replacing m-[red]1)"]
    returning = attrs.evolve(live, state="AWAY", away_ms=0, assigned_shards=())
    lines = change_lines(before, attrs.evolve(before, members=(away, returning)))
    assert "member m2 STABLE -> AWAY" in lines and "member m2 is away; its target waits for it" in lines


def test_s5_remove_member_view_names_the_removed_member():
    removed = MemberRemoved(request_id=1, status=Status.OK, stream_prefix="orders",
                            consumer_group="billing", member_id="m-[red]1", group_epoch=5)
    assert render_plain(member_removed_view(removed)).strip() == (
        "removed member m-[red]1 from orders / billing (group epoch 5)")


def test_watch_counts_no_backlog_figure_as_a_change_unless_json():
    """Issue 34: lengths, offsets, backlog and blocking counts move every second: no line."""
    busy = decode(json.dumps({**RECONCILING, "shards": [
        shard_entry(0, lag=5, pending=2, oldest=30), shard_entry(1)]}))
    assert isinstance(busy, GroupDescription) and busy.shards
    moved = attrs.evolve(busy, shards=(
        attrs.evolve(busy.shards[0], length=2000, lag=0, pending=9, last_delivered_id="9-9"),
        busy.shards[1]))
    assert watch_signature(busy) == watch_signature(moved)
    assert watch_signature(busy, figures=True) != watch_signature(moved, figures=True)
    lines = WatchState()
    json_lines = WatchState(figures=True)
    for state in (lines, json_lines):
        assert state.record(busy, "t0") is True
    assert lines.record(moved, "t1") is False and not lines.differs(moved)
    assert json_lines.record(moved, "t1") is True
    handed = attrs.evolve(moved, shards=(attrs.evolve(moved.shards[0], owner=None),
                                         moved.shards[1]))
    assert lines.record(handed, "t2") is True
    assert lines.lines == ["owner of v2:0 10.0.0.8-77-0-bbbb -> -"]


def test_watch_names_a_migration_starting_or_stopping_to_wait_on_a_group():
    base = decode(json.dumps(RECONCILING))
    assert isinstance(base, GroupDescription) and base.migration is not None
    blocked = attrs.evolve(base, migration=attrs.evolve(base.migration, blocking_groups=(
        BlockingGroup(consumer_group="audit", undelivered=120, pending=3),)))
    fewer = attrs.evolve(blocked, migration=attrs.evolve(blocked.migration, blocking_groups=(
        BlockingGroup(consumer_group="audit", undelivered=7, pending=0),)))
    assert watch_signature(blocked) == watch_signature(fewer), "counts are not changes"
    assert change_lines(base, blocked) == ["migration waits on group audit"]
    assert change_lines(blocked, base) == ["migration no longer waits on group audit"]


def test_watch_names_member_capacity_epoch_and_recovery():
    before = decode(json.dumps(RECONCILING))
    assert isinstance(before, GroupDescription)
    member = attrs.evolve(before.members[0], overdue=True)
    late = attrs.evolve(before, members=(member, before.members[1]))
    back = attrs.evolve(before, members=(attrs.evolve(
        member, overdue=False, capacity=4, member_epoch=member.member_epoch + 1),
        before.members[1]))
    assert change_lines(late, back) == [
        "member 10.0.0.8-77-0-bbbb heartbeats again",
        "member 10.0.0.8-77-0-bbbb capacity 2 -> 4"]
    bumped = attrs.evolve(late, members=(attrs.evolve(member, member_epoch=10), late.members[1]))
    assert change_lines(late, bumped) == ["member 10.0.0.8-77-0-bbbb epoch 9 -> 10"]
