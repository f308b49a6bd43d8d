"""`rsc admin` against a real coordinator: every subcommand, as table text and as --json.

The CLI runs in-process in a worker thread (it owns its own trio.run), so its
output is captured exactly as a terminal-less operator would see it.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import re
import sys
import time
from collections.abc import Callable

import attrs
import pytest
import trio
from trio_websocket import ConnectionClosed, WebSocketRequest, serve_websocket

from rsc.admin.args import add_parser
from rsc.admin.cli import execute, run
from rsc.admin.client import AdminError, open_admin_client
from rsc.member.session import open_session
from rsc.protocol import Heartbeat, HeartbeatResponse, Status, decode

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LONG_LEASE = {"lease_ttl_ms": 60_000}  # members join once and stay for the whole test


@pytest.fixture(autouse=True)
def wide_plain_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain output follows $COLUMNS; these tests read the wide layout."""
    monkeypatch.delenv("COLUMNS", raising=False)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rsc")
    add_parser(parser.add_subparsers(dest="command", required=True), run=run)
    return parser.parse_args(argv)


class Output:
    """Thread-safe enough for the test: the CLI thread writes, the test reads lines."""

    def __init__(self) -> None:
        self.buffer = io.StringIO()

    def lines(self) -> list[str]:
        return self.buffer.getvalue().splitlines()


async def rsc_admin(url: str, *argv: str, stdout: Output | None = None,
                    token: str | None = None) -> tuple[int, str, str]:
    """Run `rsc admin --url URL [--token T] ARGV...`; return (exit code, stdout, stderr)."""
    out, err = stdout or Output(), io.StringIO()
    prefix = ["admin", "--url", url, "--timeout", "10"] + (["--token", token] if token else [])
    args = parse(prefix + list(argv))
    code = await trio.to_thread.run_sync(execute, args, out.buffer, err)
    return code, out.buffer.getvalue(), err.getvalue()


async def join(url: str, member_id: str, capacity: int = 2) -> HeartbeatResponse:
    """A member joining with one heartbeat (its lease outlives the test)."""
    async with open_session(url, "member") as session:
        response = await session.request(Heartbeat(
            request_id=0, stream_prefix="orders", consumer_group="billing",
            member_id=member_id, member_epoch=0, capacity=capacity))
    assert isinstance(response, HeartbeatResponse) and response.status == Status.OK
    return response


async def test_every_subcommand_as_text_and_json(coordinator_factory):
    coordinator = await coordinator_factory(**LONG_LEASE)
    url = coordinator.url
    with trio.fail_after(30):
        code, text, _ = await rsc_admin(url, "set-shards", "orders", "billing", "4")
        assert code == 0 and text.strip() == "routing of prefix orders: version 1, 4 shards"
        code, raw, _ = await rsc_admin(url, "set-shards", "orders", "billing", "4", "--json")
        changed = json.loads(raw)
        assert code == 0 and changed["type"] == "shardCountChanged"
        assert changed["routing"]["shardCount"] == 4 and len(changed["routing"]["streams"]) == 4

        await join(url, "member-a")
        await join(url, "member-b", capacity=3)

        code, text, _ = await rsc_admin(url, "list")
        [row] = [line for line in text.splitlines() if "billing" in line]
        assert code == 0 and "orders" in row and " 2 " in row and " 4 " in row
        code, raw, _ = await rsc_admin(url, "list", "--json")
        [summary] = json.loads(raw)["groups"]
        assert (summary["streamPrefix"], summary["consumerGroup"], summary["members"],
                summary["shards"]) == ("orders", "billing", 2, 4)

        code, text, _ = await rsc_admin(url, "describe", "orders", "billing")
        assert code == 0
        assert "orders / billing" in text and "version 1, 4 shards" in text
        epoch_line = next(line for line in text.splitlines() if line.startswith("epochs"))
        described = decode((await rsc_admin(url, "describe", "orders", "billing", "--json"))[1])
        assert f"group {described.group_epoch}" in epoch_line
        assert {m.member_id for m in described.members} == {"member-a", "member-b"}
        for member in described.members:
            [row] = [line for line in text.splitlines()
                     if member.member_id in line and member.state in line]
            assert str(member.capacity) in row

        code, text, _ = await rsc_admin(url, "set-max-concurrency", "orders", "billing", "2")
        assert code == 0 and text.startswith("maxConcurrency of orders / billing set to 2")
        code, raw, _ = await rsc_admin(url, "set-max-concurrency", "orders", "billing", "none",
                                       "--json")
        cleared = json.loads(raw)
        assert cleared["type"] == "maxConcurrencyChanged" and cleared["maxConcurrency"] is None

        code, text, _ = await rsc_admin(url, "remove-member", "orders", "billing", "member-a")
        assert code == 0 and text.startswith("removed member member-a from orders / billing")
        code, raw, _ = await rsc_admin(url, "remove-member", "orders", "billing", "member-b",
                                       "--json")
        removed = json.loads(raw)
        assert removed["type"] == "memberRemoved" and removed["memberId"] == "member-b"
        described = decode((await rsc_admin(url, "describe", "orders", "billing", "--json"))[1])
        assert described.members == () and described.state == "EMPTY"


@pytest.mark.parametrize(("argv", "status"), [
    (["describe", "orders", "nobody"], "UNKNOWN_GROUP"),
    (["remove-member", "orders", "billing", "ghost"], "UNKNOWN_MEMBER_ID"),
    (["set-shards", "orders", "billing", "5000"], "invalid argument"),
    (["describe", "bad{prefix", "billing"], "invalid argument"),
])
async def test_errors_are_one_line_and_exit_1(coordinator, argv, status):
    with trio.fail_after(20):
        await rsc_admin(coordinator.url, "set-shards", "orders", "billing", "2")
        for json_flag in ([], ["--json"]):
            code, out, err = await rsc_admin(coordinator.url, *argv, *json_flag)
            assert code == 1 and out == ""
            assert len(err.splitlines()) == 1 and err.startswith("error: ") and status in err


async def test_unreachable_coordinator_is_one_line_and_exit_1():
    with trio.fail_after(20):
        listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
        port = listener.socket.getsockname()[1]
        await listener.aclose()  # nobody listens there any more
        code, out, err = await rsc_admin(f"ws://127.0.0.1:{port}", "list")
    assert code == 1 and out == "" and len(err.splitlines()) == 1
    assert err.startswith("error: cannot connect to ws://127.0.0.1:")


async def test_token_is_required_by_a_secured_coordinator(coordinator_factory):
    coordinator = await coordinator_factory(admin_token="s3cret")
    with trio.fail_after(20):
        code, _, err = await rsc_admin(coordinator.url, "list")
        assert code == 1 and "HTTP 401" in err and "--token" in err
        code, _, err = await rsc_admin(coordinator.url, "list", token="wrong")
        assert code == 1 and "HTTP 401" in err
        code, out, _ = await rsc_admin(coordinator.url, "list", "--json", token="s3cret")
        assert code == 0 and json.loads(out)["type"] == "groups"


async def wait_for_lines(output: Output, count: int) -> None:
    while len(output.lines()) < count:
        await trio.sleep(0.01)


async def test_watch_json_prints_one_line_per_change(coordinator_factory, nursery):
    coordinator = await coordinator_factory(**LONG_LEASE)
    url = coordinator.url
    output = Output()
    result: dict[str, tuple[int, str, str]] = {}
    finished = trio.Event()

    async def watch() -> None:
        result["watch"] = await rsc_admin(url, "watch", "orders", "billing", "--json",
                                          "--interval", "0.05", "--changes", "3",
                                          "--duration", "25", stdout=output)
        finished.set()

    with trio.fail_after(30):
        nursery.start_soon(watch)
        async with open_admin_client(url) as admin:
            with pytest.raises(AdminError):
                await admin.describe_group("orders", "billing")
            await admin.set_shard_count("orders", "billing", 2)
            await wait_for_lines(output, 1)
            await join(url, "member-a")
            await wait_for_lines(output, 2)
            await admin.set_max_concurrency("orders", "billing", 5)
        await finished.wait()
    code, _, err = result["watch"]
    assert code == 0 and err == ""
    first, second, third = (json.loads(line) for line in output.lines())
    assert first["type"] == "groupDescription" and first["members"] == []
    assert [m["memberId"] for m in second["members"]] == ["member-a"]
    assert third["maxConcurrency"] == 5 and third["groupEpoch"] > first["groupEpoch"]


async def test_watch_table_shows_the_group_until_its_duration_ends(coordinator):
    with trio.fail_after(20):
        await rsc_admin(coordinator.url, "set-shards", "orders", "billing", "3")
        code, text, err = await rsc_admin(coordinator.url, "watch", "orders", "billing", "--table",
                                          "--interval", "0.05", "--duration", "0.3")
        assert code == 0 and err == ""
        assert text.splitlines()[0].startswith(f"watching orders / billing on {coordinator.url} (")
        assert text.count("group           orders / billing") == 1, \
            "unchanged polls are not printed again"
        assert "version 1, 3 shards" in text
        code, text, err = await rsc_admin(coordinator.url, "watch", "orders", "billing",
                                          "--interval", "0.05", "--duration", "0.3")
    assert code == 0 and err == ""
    header, first = text.splitlines()
    assert header.startswith(f"watching orders / billing on {coordinator.url} (")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ  group EMPTY at epoch \d+, 0 member\(s\)",
                        first), "without --table: one line per change, no table"


async def test_watch_waits_for_a_group_that_does_not_exist_yet(coordinator):
    with trio.fail_after(20):
        code, text, _ = await rsc_admin(coordinator.url, "watch", "orders", "later",
                                        "--interval", "0.05", "--duration", "0.2")
    assert code == 0 and text.count("waiting for group orders / later") == 1


MARKUP_NAMES = ("p[/]", "[red]x[/red]")


async def test_markup_like_names_print_literally_in_list_describe_and_watch(coordinator):
    prefix, group = MARKUP_NAMES
    url = coordinator.url
    with trio.fail_after(30):
        code, text, err = await rsc_admin(url, "set-shards", prefix, group, "2")
        assert (code, err) == (0, "") and text.strip() == f"routing of prefix {prefix}: version 1, 2 shards"
        await join_as(url, prefix, group, ":smile:")
        code, text, err = await rsc_admin(url, "list")
        assert (code, err) == (0, "")
        [row] = [line for line in text.splitlines() if prefix in line]
        assert group in row
        code, text, err = await rsc_admin(url, "describe", prefix, group)
        assert (code, err) == (0, "") and f"{prefix} / {group}" in text and ":smile:" in text
        code, text, err = await rsc_admin(url, "watch", prefix, group, "--duration", "0.3")
        assert (code, err) == (0, "")
        assert text.startswith(f"watching {prefix} / {group} on {url}")
        assert ":smile:" in text


async def join_as(url: str, prefix: str, group: str, member_id: str) -> None:
    async with open_session(url, "member") as session:
        response = await session.request(Heartbeat(
            request_id=0, stream_prefix=prefix, consumer_group=group, member_id=member_id,
            member_epoch=0, capacity=1))
    assert isinstance(response, HeartbeatResponse) and response.status == Status.OK


# --- a scripted coordinator: the client side of requests the real one may not have yet --------


@attrs.define
class FakeCoordinator:
    """An admin endpoint that records requests and answers them from `answer(request)`."""

    answer: Callable[[dict], list[dict]]
    requests: list[dict] = attrs.field(factory=list)
    url: str = ""

    async def handle(self, request: WebSocketRequest) -> None:
        if request.path != "/v1/admin":
            await request.reject(404)
            return
        websocket = await request.accept()
        with contextlib.suppress(ConnectionClosed):
            while True:
                body = json.loads(await websocket.get_message())
                self.requests.append(body)
                for frame in self.answer(body):
                    if frame.get("requestId", 0) is None:
                        frame = {k: v for k, v in frame.items() if k != "requestId"}
                    else:
                        frame = {**frame, "requestId": body["requestId"]}
                    await websocket.send_message(json.dumps(frame))
                    await trio.sleep(0.01)


async def fake_coordinator(nursery: trio.Nursery, answer: Callable[[dict], list[dict]]
                           ) -> FakeCoordinator:
    fake = FakeCoordinator(answer)
    server = await nursery.start(serve_websocket, fake.handle, "127.0.0.1", 0, None)
    fake.url = f"ws://127.0.0.1:{server.port}"
    return fake


def ok(type_: str, **fields) -> dict:
    return {"type": type_, "status": "OK", **fields}


async def test_new_verbs_send_the_protocol_requests_and_print_the_answers(nursery):
    answers = {
        "deleteGroup": [ok("groupDeleted", streamPrefix="orders", consumerGroup="x:y")],
        "setRetention": [ok("retentionChanged", streamPrefix="orders",
                            retention={"mode": "acked", "maxLength": 100, "maxAgeMs": 86_400_000})],
        "resetOffsets": [ok("offsetsReset", streamPrefix="orders", consumerGroup="billing",
                            shards=[{"shard": "{orders:v1:0}", "lastDeliveredId": "5-0"}])],
        "setShardCount": [ok("shardCountChanged", streamPrefix="orders", consumerGroup=None,
                             routing={"version": 2, "shardCount": 8, "hash": "crc32",
                                      "streams": []}, migration=None)],
    }
    fake = await fake_coordinator(nursery, lambda body: answers[body["type"]])
    with trio.fail_after(20):
        code, text, err = await rsc_admin(fake.url, "delete-group", "orders", "x:y")
        assert (code, text, err) == (0, "deleted group orders / x:y\nits dead letters, if any, "
                                        "are kept (rsc admin dead-letters orders x:y)\n", "")
        code, text, _ = await rsc_admin(fake.url, "set-retention", "orders", "--acked",
                                        "--max-length", "100", "--max-age", "24h")
        assert text == ("retention of prefix orders: acked (entries go once every group acked "
                        "them), max length 100, max age 1d\n")
        code, text, _ = await rsc_admin(fake.url, "reset-offsets", "orders", "billing",
                                        "--to-datetime", "2026-12-01T09:30:00+01:00")
        assert "offsets of orders / billing reset on 1 shard(s)" in text and "5-0" in text
        code, raw, _ = await rsc_admin(fake.url, "set-shards", "orders", "8", "--json")
        assert code == 0 and json.loads(raw)["routing"]["shardCount"] == 8
        assert raw.count("\n") == 1, "--json is one line"
    sent = [{k: v for k, v in body.items() if k != "requestId"} for body in fake.requests]
    assert sent == [
        {"type": "deleteGroup", "streamPrefix": "orders", "consumerGroup": "x:y"},
        {"type": "setRetention", "streamPrefix": "orders",
         "retention": {"mode": "acked", "maxLength": 100, "maxAgeMs": 86_400_000}},
        {"type": "resetOffsets", "streamPrefix": "orders", "consumerGroup": "billing",
         "to": "timestamp", "timestampMs": 1796113800000},
        {"type": "setShardCount", "streamPrefix": "orders", "shardCount": 8,
         "cutover": "parallel"},
    ]


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
async def test_a_refused_request_is_one_line_with_its_status(nursery, json_flag):
    fake = await fake_coordinator(nursery, lambda body: [{
        "type": "groupDeleted", "status": "GROUP_NOT_EMPTY", "streamPrefix": "orders",
        "consumerGroup": "billing", "error": "group orders/billing has 2 live members"}])
    with trio.fail_after(20):
        code, out, err = await rsc_admin(fake.url, "delete-group", "orders", "billing", *json_flag)
    assert (code, out) == (1, "")
    assert err == "error: GROUP_NOT_EMPTY: group orders/billing has 2 live members\n"


def description_frame(epoch: int, members: list[str], status: str = "OK") -> dict:
    shard = "{orders:v1:0}"
    return {"type": "groupDescription", "status": status, "streamPrefix": "orders",
            "consumerGroup": "billing", "state": "STABLE" if members else "EMPTY",
            "groupEpoch": epoch, "assignmentEpoch": epoch, "maxConcurrency": None,
            "routing": {"version": 1, "shardCount": 1}, "migration": None,
            "members": [{"memberId": member, "memberEpoch": epoch, "state": "STABLE",
                         "capacity": 1, "lastHeartbeatMsAgo": 5, "assignedShards": [shard],
                         "pendingShards": [], "revokingShards": [], "targetShards": [shard]}
                        for member in members],
            "targetAssignment": {}, "currentAssignment": {}}


async def test_watch_follows_pushes_until_the_group_is_deleted(nursery):
    def answer(body: dict) -> list[dict]:
        assert body["type"] == "describeGroup" and body["watch"] is True
        return [description_frame(1, []),
                {**description_frame(2, ["member-a"]), "requestId": None},
                {**description_frame(2, ["member-a"]), "requestId": None},  # no change
                {**description_frame(3, ["member-a", "member-b"]), "requestId": None},
                {"type": "groupDescription", "requestId": None, "status": "UNKNOWN_GROUP",
                 "streamPrefix": "orders", "consumerGroup": "billing", "error": "deleted"}]

    fake = await fake_coordinator(nursery, answer)
    with trio.fail_after(20):
        code, text, err = await rsc_admin(fake.url, "watch", "orders", "billing")
        assert (code, err) == (0, "")
        lines = text.splitlines()
        assert lines[0] == f"watching orders / billing on {fake.url} (server pushes); Ctrl-C to stop"
        events = [line.split("  ", 1)[1] for line in lines if re.match(r"^[-\dT:]+Z  ", line)]
        assert events == ["group EMPTY at epoch 1, 0 member(s)",
                          "group epoch 1 -> 2; assignment epoch 1 -> 2; state EMPTY -> STABLE; "
                          "member member-a joined",
                          "group epoch 2 -> 3; assignment epoch 2 -> 3; member member-b joined",
                          "group orders / billing was deleted; watch ends"]
        code, raw, _ = await rsc_admin(fake.url, "watch", "orders", "billing", "--json")
        assert [json.loads(line)["groupEpoch"] for line in raw.splitlines()] == [1, 2, 3]
    assert len(fake.requests) == 2, "a pushing coordinator is never polled"


async def test_watch_keeps_pushes_when_a_probe_sees_a_change_before_its_push(nursery):
    def answer(body: dict) -> list[dict]:
        if body.get("watch"):
            return [description_frame(1, [])]
        # the probe's answer shows epoch 2; the push of that change follows it
        return [description_frame(2, ["member-a"]),
                {**description_frame(2, ["member-a"]), "requestId": None}]

    fake = await fake_coordinator(nursery, answer)
    with trio.fail_after(20):
        code, text, err = await rsc_admin(fake.url, "watch", "orders", "billing", "--changes", "2")
    assert (code, err) == (0, "")
    assert "polling" not in text and "(server pushes)" in text
    assert len([line for line in text.splitlines() if "member member-a joined" in line]) == 1


async def test_watch_polls_a_coordinator_that_rejects_the_watch_field(nursery):
    epochs = iter(range(1, 100))

    def answer(body: dict) -> list[dict]:
        if body.get("watch"):
            return [{"type": "error", "status": "INVALID_REQUEST",
                     "error": "field 'watch' is not accepted"}]
        return [description_frame(next(epochs), [])]

    fake = await fake_coordinator(nursery, answer)
    with trio.fail_after(20):
        code, text, err = await rsc_admin(fake.url, "watch", "orders", "billing",
                                          "--interval", "0.05", "--changes", "3")
    assert (code, err) == (0, "")
    assert "(polling every 0.05s)" in text
    assert len([line for line in text.splitlines() if "group epoch" in line]) == 2
    assert [body.get("watch") for body in fake.requests][:2] == [True, None]


# --- D3: `rsc admin` as a real process: one line on stderr, exit 1, within seconds -----------


async def rsc_admin_process(*argv: str, env: dict[str, str] | None = None
                            ) -> tuple[int, str, str, float]:
    started = time.monotonic()
    with trio.fail_after(30):
        done = await trio.run_process(
            [sys.executable, "-m", "rsc", "admin", *argv], cwd=ROOT, capture_stdout=True,
            capture_stderr=True, check=False,
            env={**{k: v for k, v in os.environ.items() if not k.startswith("RSC_")},
                 **(env or {})})
    return (done.returncode, done.stdout.decode(), done.stderr.decode(),
            time.monotonic() - started)


async def free_port() -> int:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    await listener.aclose()  # nobody listens there any more
    return port


async def test_d3_coordinator_not_running():
    port = await free_port()
    code, out, err, took = await rsc_admin_process("--url", f"ws://127.0.0.1:{port}", "list")
    assert (code, out) == (1, "") and took < 5
    assert err == (f"error: cannot connect to ws://127.0.0.1:{port}: connection refused (is the "
                   "coordinator running? start it with rsc coordinator)\n")


async def test_d3_url_from_the_environment():
    port = await free_port()
    code, _, err, _ = await rsc_admin_process("list", env={"RSC_COORDINATOR_URL":
                                                           f"ws://127.0.0.1:{port}"})
    assert code == 1 and err.startswith(f"error: cannot connect to ws://127.0.0.1:{port}: ")
    code, _, err, _ = await rsc_admin_process("list", env={"RSC_COORDINATOR_URL": "localhost:1"})
    assert code == 1 and err == ("error: invalid coordinator URL 'localhost:1' (from "
                                 "RSC_COORDINATOR_URL): it has no scheme; write it as "
                                 "ws://localhost:1\n")


async def test_d3_token_missing_or_wrong(coordinator_factory):
    coordinator = await coordinator_factory(admin_token="s3cret")
    url = coordinator.url
    code, out, err, took = await rsc_admin_process("--url", url, "list")
    assert (code, out) == (1, "") and took < 5
    assert err == (f"error: {url}/v1/admin refused the session: HTTP 401 Unauthorized (the "
                   "coordinator needs its admin token: pass --token or set RSC_TOKEN)\n")
    code, _, err, _ = await rsc_admin_process("--url", url, "--token", "wrong", "list")
    assert code == 1 and err == (f"error: {url}/v1/admin refused the session: HTTP 401 "
                                 "Unauthorized (the token from --token or RSC_TOKEN is not the "
                                 "coordinator's admin token)\n")
    code, out, err, _ = await rsc_admin_process("--url", url, "list", "--json",
                                                env={"RSC_TOKEN": "s3cret"})
    assert (code, err) == (0, "") and json.loads(out)["type"] == "groups"


async def test_d3_wrong_path_is_404_with_the_right_one(coordinator):
    url = coordinator.url
    code, out, err, _ = await rsc_admin_process("--url", f"{url}/admin", "list")
    assert (code, out) == (1, "")
    assert err == (f"error: {url}/admin/v1/admin refused the session: HTTP 404 Not Found (no "
                   f"such endpoint: give the coordinator as ws://HOST:PORT, for example "
                   f"{url}; the tools add /v1/admin)\n")


async def test_d3_coordinator_at_its_session_limit_is_503(nursery):
    async def refuse(stream: trio.SocketStream) -> None:
        with contextlib.suppress(trio.BrokenResourceError):
            await stream.receive_some(4096)
            await stream.send_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n"
                                  b"connection: close\r\n\r\n")
            await stream.aclose()

    [listener] = await nursery.start(functools.partial(trio.serve_tcp, refuse, 0, host="127.0.0.1"))
    port = listener.socket.getsockname()[1]
    code, out, err, _ = await rsc_admin_process("--url", f"ws://127.0.0.1:{port}", "list")
    assert (code, out) == (1, "")
    assert err == (f"error: ws://127.0.0.1:{port}/v1/admin refused the session: HTTP 503 Service "
                   "Unavailable (the coordinator is at its session limit (--max-sessions); try "
                   "again later)\n")


async def test_d3_silent_peer_times_out_quickly(nursery):
    async def silent(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()

    [listener] = await nursery.start(functools.partial(trio.serve_tcp, silent, 0, host="127.0.0.1"))
    port = listener.socket.getsockname()[1]
    code, out, err, took = await rsc_admin_process("--url", f"ws://127.0.0.1:{port}",
                                                   "--timeout", "1", "list")
    assert (code, out) == (1, "") and took < 5
    assert err == (f"error: cannot connect to ws://127.0.0.1:{port}: no answer within 1s (is a "
                   "coordinator listening there? start it with rsc coordinator)\n")


@pytest.mark.parametrize(("url", "problem"), [
    ("http://127.0.0.1:8765", "the scheme is http://, the coordinator speaks WebSocket: use "
                              "ws://127.0.0.1:8765"),
    ("127.0.0.1:8765", "it has no scheme; write it as ws://127.0.0.1:8765"),
    ("ws://127.0.0.1:99999", "port 99999 is not in 1..65535"),
])
async def test_d3_bad_urls(url, problem):
    code, out, err, took = await rsc_admin_process("--url", url, "list")
    assert (code, out) == (1, "") and took < 5
    assert err == f"error: invalid coordinator URL {url!r} (from --url): {problem}\n"
