"""`rsc admin` arguments -> requests, URLs and failure lines: pure, no I/O."""

from __future__ import annotations

import argparse
import socket

import pytest
from trio_websocket import ConnectionRejected, ConnectionTimeout, HandshakeError

from rsc.admin.args import (
    add_parser,
    admin_token,
    build_request,
    coordinator_url,
    parse_datetime_ms,
    parse_duration_ms,
    split_set_shards,
)
from rsc.admin.cli import run
from rsc.admin.client import (
    AdminConnectError,
    connect_failure,
    parse_coordinator_url,
    read_answer,
    request_body,
)
from rsc.protocol import ErrorResponse, Status
from rsc.protocol import messages as m
from rsc.protocol.codec import ADMIN_REQUESTS, decode_object
from rsc.protocol.messages import FieldValueError


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rsc")
    add_parser(parser.add_subparsers(dest="command", required=True), run=run)
    return parser.parse_args(["admin", *argv])


@pytest.mark.parametrize(("text", "milliseconds"), [
    ("30s", 30_000), ("15m", 900_000), ("24h", 86_400_000), ("7d", 604_800_000),
    ("500ms", 500), ("1s", 1000)])
def test_durations(text, milliseconds):
    assert parse_duration_ms(text) == milliseconds


@pytest.mark.parametrize("text", ["", "30", "s", "1.5h", "-1s", "0s", "7 days", "1w", "1h30m"])
def test_bad_durations_are_refused_with_an_example(text):
    with pytest.raises(ValueError, match=r"30s|more than 0"):
        parse_duration_ms(text)


@pytest.mark.parametrize(("text", "milliseconds"), [
    ("1970-01-01T00:00:00Z", 0),
    ("2026-12-01T08:30:00Z", 1796113800000),
    ("2026-12-01T08:30:00", 1796113800000),  # no zone: UTC
    ("2026-12-01 08:30:00.250", 1796113800250),
    ("2026-12-01T09:30:00+01:00", 1796113800000),
    ("2026-12-01T03:30:00-05:00", 1796113800000),
    ("2026-12-01", 1796083200000),
])
def test_datetimes_are_utc_unless_they_name_a_zone(text, milliseconds):
    assert parse_datetime_ms(text) == milliseconds


@pytest.mark.parametrize("text", ["yesterday", "2026-13-01", "12/01/2026", "1969-12-31T23:59:59Z"])
def test_bad_datetimes_are_refused(text):
    with pytest.raises(ValueError, match="ISO 8601|before 1970"):
        parse_datetime_ms(text)


def test_set_shards_takes_an_optional_group():
    assert split_set_shards(["billing", "8"]) == ("billing", 8)
    assert split_set_shards(["8"]) == (None, 8)
    with pytest.raises(ValueError, match="must be an integer"):
        split_set_shards(["billing", "eight"])
    with pytest.raises(ValueError, match="PREFIX \\[GROUP\\] N"):
        split_set_shards(["a", "b", "8"])


def test_every_command_builds_its_protocol_request():
    def request(*argv: str) -> dict:
        body = request_body(build_request(parse(*argv)))
        assert body.pop("requestId") == 0
        return body

    assert request("list") == {"type": "listGroups"}
    assert request("describe", "o", "g") == {"type": "describeGroup", "streamPrefix": "o",
                                              "consumerGroup": "g"}
    assert request("watch", "o", "g") == {"type": "describeGroup", "streamPrefix": "o",
                                           "consumerGroup": "g", "watch": True}
    assert request("set-shards", "o", "g", "8", "--cutover", "ordered") == {
        "type": "setShardCount", "streamPrefix": "o", "consumerGroup": "g", "shardCount": 8,
        "cutover": "ordered"}
    assert request("set-shards", "o", "4") == {
        "type": "setShardCount", "streamPrefix": "o", "shardCount": 4, "cutover": "parallel"}
    assert request("set-max-concurrency", "o", "g", "none") == {
        "type": "setMaxConcurrency", "streamPrefix": "o", "consumerGroup": "g",
        "maxConcurrency": None}
    assert request("remove-member", "o", "g", "m{1}") == {
        "type": "removeMember", "streamPrefix": "o", "consumerGroup": "g", "memberId": "m{1}"}
    assert request("remove-member", "o", "g", "--instance-id", "pod-0") == {
        "type": "removeMember", "streamPrefix": "o", "consumerGroup": "g", "instanceId": "pod-0"}
    assert request("delete-group", "o", "x:y") == {"type": "deleteGroup", "streamPrefix": "o",
                                                    "consumerGroup": "x:y"}
    assert request("set-retention", "o", "--acked") == {
        "type": "setRetention", "streamPrefix": "o",
        "retention": {"mode": "acked", "maxLength": None, "maxAgeMs": None}}
    assert request("set-retention", "o", "--none", "--max-length", "1000", "--max-age", "7d") == {
        "type": "setRetention", "streamPrefix": "o",
        "retention": {"mode": "none", "maxLength": 1000, "maxAgeMs": 604_800_000}}
    assert request("reset-offsets", "o", "g", "--to-earliest") == {
        "type": "resetOffsets", "streamPrefix": "o", "consumerGroup": "g", "to": "earliest"}
    assert request("reset-offsets", "o", "g", "--to-latest")["to"] == "latest"
    assert request("reset-offsets", "o", "g", "--to-datetime", "1970-01-01T00:00:01Z") == {
        "type": "resetOffsets", "streamPrefix": "o", "consumerGroup": "g", "to": "timestamp",
        "timestampMs": 1000}


EVERY_COMMAND = [["list"], ["describe", "o", "g"], ["watch", "o", "g"],
                 ["set-shards", "o", "g", "8", "--cutover", "ordered"], ["set-shards", "o", "4"],
                 ["set-max-concurrency", "o", "g", "none"], ["set-max-concurrency", "o", "g", "3"],
                 ["remove-member", "o", "g", "m{1}"], ["delete-group", "o", "x:y"],
                 ["remove-member", "o", "g", "--instance-id", "pod-0"],
                 ["set-retention", "o", "--none", "--max-length", "10", "--max-age", "1h"],
                 ["reset-offsets", "o", "g", "--to-earliest"],
                 ["reset-offsets", "o", "g", "--to-datetime", "2026-12-01"],
                 ["messages", "o", "o:v1:0", "--from-time", "2026-12-01"],
                 ["messages", "o", "--key", "k"], ["pending", "o", "g", "o:v1:0"]]


@pytest.mark.parametrize("argv", EVERY_COMMAND, ids=" ".join)
def test_every_request_is_a_message_class_the_codec_reads_back(argv):
    request = build_request(parse(*argv))
    assert type(request).TYPE in ADMIN_REQUESTS
    assert decode_object(request_body(request), ADMIN_REQUESTS) == request


@pytest.mark.parametrize("argv", EVERY_COMMAND, ids=" ".join)
def test_an_error_frame_answers_every_request_with_its_own_response_class(argv):
    request = build_request(parse(*argv))
    frame = {"type": "error", "requestId": 0, "status": "INVALID_REQUEST", "error": "bad"}
    answer = read_answer(request, frame)
    assert not isinstance(answer, ErrorResponse)
    assert answer == request.error(Status.INVALID_REQUEST, "bad")


@pytest.mark.parametrize(("request_", "problem"), [
    (m.SetShardCount(request_id=0, stream_prefix="o", shard_count=2,
                     cutover="sideways"),  # type: ignore[arg-type]
     "field 'cutover': unknown value 'sideways'"),
    (m.ResetOffsets(request_id=0, stream_prefix="o", consumer_group="g",
                    to="yesterday"),  # type: ignore[arg-type]
     "field 'to': unknown value 'yesterday'"),
    (m.SetRetention(request_id=0, stream_prefix="o",
                    retention=m.Retention(mode="some")),  # type: ignore[arg-type]
     "field 'retention.mode': unknown value 'some'"),
])
def test_a_request_the_coordinator_would_refuse_is_not_sent(request_, problem):
    with pytest.raises(FieldValueError, match=problem):
        request_body(request_)


@pytest.mark.parametrize(("argv", "problem"), [
    (["set-shards", "o", "g", "0"], "field 'shardCount' must be in 1..4096"),
    (["set-shards", "o", "5000"], "field 'shardCount' must be in 1..4096"),
    (["set-shards", "o{", "4"], "field 'streamPrefix' contains '{' or '}'"),
    (["delete-group", "o", "g}"], "field 'consumerGroup' contains '{' or '}'"),
    (["set-retention", "", "--acked"], "field 'streamPrefix' must not be empty"),
    (["reset-offsets", "o", "x" * 201, "--to-latest"], "field 'consumerGroup' is longer than 200"),
])
def test_bad_values_are_refused_before_anything_is_sent(argv, problem):
    with pytest.raises(FieldValueError, match=problem):
        build_request(parse(*argv))


@pytest.mark.parametrize("argv", [
    ["set-retention", "o"], ["set-retention", "o", "--acked", "--none"],
    ["set-retention", "o", "--acked", "--max-length", "0"],
    ["set-retention", "o", "--acked", "--max-age", "soon"],
    ["reset-offsets", "o", "g"], ["reset-offsets", "o", "g", "--to-earliest", "--to-latest"],
    ["reset-offsets", "o", "g", "--to-datetime", "noon"], ["watch", "o", "g", "--changes", "0"]])
def test_usage_errors_are_one_line_and_exit_1(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        parse(*argv)
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("error: rsc admin ")


def test_url_and_token_come_from_the_environment_when_the_flags_are_absent():
    environ = {"RSC_COORDINATOR_URL": "ws://10.1.2.3:9000", "RSC_TOKEN": "from-env"}
    args = parse("list")
    assert coordinator_url(args, environ) == ("ws://10.1.2.3:9000", "RSC_COORDINATOR_URL")
    assert admin_token(args, environ) == "from-env"
    assert coordinator_url(args, {}) == ("ws://127.0.0.1:8765", "the default")
    assert admin_token(args, {}) is None
    flagged = parse("--url", "ws://h:1", "--token", "flag", "list")
    assert coordinator_url(flagged, environ) == ("ws://h:1", "--url")
    assert admin_token(flagged, environ) == "flag"


@pytest.mark.parametrize(("url", "base", "endpoint"), [
    ("ws://127.0.0.1:8765", "ws://127.0.0.1:8765", "ws://127.0.0.1:8765/v1/admin"),
    ("ws://127.0.0.1:8765/", "ws://127.0.0.1:8765", "ws://127.0.0.1:8765/v1/admin"),
    ("WS://h:1/v1/admin", "ws://h:1", "ws://h:1/v1/admin"),
    ("wss://coordinator.example", "wss://coordinator.example",
     "wss://coordinator.example/v1/admin"),
    ("ws://[::1]:8765", "ws://[::1]:8765", "ws://[::1]:8765/v1/admin"),
    ("ws://h:1/rsc", "ws://h:1/rsc", "ws://h:1/rsc/v1/admin"),
])
def test_coordinator_urls(url, base, endpoint):
    parsed = parse_coordinator_url(url)
    assert (parsed.base, parsed.endpoint) == (base, endpoint)


@pytest.mark.parametrize(("url", "problem"), [
    ("http://127.0.0.1:8765", "the scheme is http://, the coordinator speaks WebSocket: use "
                              "ws://127.0.0.1:8765"),
    ("127.0.0.1:8765", "it has no scheme; write it as ws://127.0.0.1:8765"),
    ("ws://127.0.0.1:99999", "port 99999 is not in 1..65535"),
    ("ws://127.0.0.1:0", "port 0 is not in 1..65535"),
    ("ws://127.0.0.1:http", "port http is not in 1..65535"),
    ("ws://:8765", "it has no host"),
    ("ws://h:1?x=1", "query or fragment"),
])
def test_bad_coordinator_urls_say_what_is_wrong(url, problem):
    with pytest.raises(AdminConnectError) as raised:
        parse_coordinator_url(url, "RSC_COORDINATOR_URL")
    line = str(raised.value)
    assert line.startswith(f"invalid coordinator URL {url!r} (from RSC_COORDINATOR_URL): ")
    assert problem in line


def rejected(status: int) -> ConnectionRejected:
    return ConnectionRejected(status, (), b"")


def caused(cause: BaseException) -> HandshakeError:
    error = HandshakeError()
    error.__cause__ = cause
    return error


def all_attempts_failed(*errors: OSError) -> HandshakeError:
    error = OSError("all attempts to connect to 127.0.0.1:1 failed")
    error.__cause__ = ExceptionGroup("attempts", list(errors))
    return caused(error)


@pytest.mark.parametrize(("exc", "token", "line"), [
    (rejected(401), None, "ws://h:1/v1/admin refused the session: HTTP 401 Unauthorized (the "
                          "coordinator needs its admin token: pass --token or set RSC_TOKEN)"),
    (rejected(401), "t", "ws://h:1/v1/admin refused the session: HTTP 401 Unauthorized (the token "
                         "from --token or RSC_TOKEN is not the coordinator's admin token)"),
    (rejected(404), None, "ws://h:1/v1/admin refused the session: HTTP 404 Not Found (no such "
                          "endpoint: give the coordinator as ws://HOST:PORT, for example "
                          "ws://h:1; the tools add /v1/admin)"),
    (rejected(503), None, "ws://h:1/v1/admin refused the session: HTTP 503 Service Unavailable "
                          "(the coordinator is at its session limit (--max-sessions); try again "
                          "later)"),
    (rejected(500), None, "ws://h:1/v1/admin refused the session: HTTP 500 (is ws://h:1 a "
                          "coordinator?)"),
    (caused(ConnectionRefusedError(111, "Connection refused")), None,
     "cannot connect to ws://h:1: connection refused (is the coordinator running? start it with "
     "rsc coordinator)"),
    (all_attempts_failed(ConnectionRefusedError(111, "refused"), ConnectionRefusedError(111, "x")),
     None, "cannot connect to ws://h:1: connection refused (is the coordinator running? start it "
           "with rsc coordinator)"),
    (caused(socket.gaierror(-2, "Name or service not known")), None,
     "cannot connect to ws://h:1: unknown host h (check --url or RSC_COORDINATOR_URL)"),
    (ConnectionTimeout(), None, "cannot connect to ws://h:1: no answer within 5s (is a coordinator "
                                "listening there? start it with rsc coordinator)"),
    (caused(OSError(113, "No route to host")), None, "cannot connect to ws://h:1: no route to host"),
    (HandshakeError(), None, "cannot connect to ws://h:1: the WebSocket handshake failed (is "
                             "ws://h:1 a coordinator?)"),
])
def test_connect_failures_name_the_url_and_the_likely_fix(exc, token, line):
    from rsc.common.wording import cli_words

    with cli_words():  # the lines of `rsc admin` (L2: a library call names token= instead)
        assert connect_failure(parse_coordinator_url("ws://h:1"), exc, token=token,
                               timeout=5) == line


@pytest.mark.parametrize("argv", [["remove-member", "o", "g"],
                                  ["remove-member", "o", "g", "m1", "--instance-id", "pod-0"]],
                         ids=" ".join)
def test_s5_remove_member_takes_a_member_or_an_instance_id_exactly_one(argv):
    with pytest.raises(FieldValueError, match="MEMBER or --instance-id ID, exactly one"):
        build_request(parse(*argv))
