"""`rsc admin` against a real coordinator: every subcommand, as table text and as --json.

The CLI runs in-process in a worker thread (it owns its own trio.run), so its
output is captured exactly as a terminal-less operator would see it.
"""

from __future__ import annotations

import argparse
import io
import json

import pytest
import trio

from rsc.admin_cli import add_parser, execute
from rsc.admin_client import AdminError, open_admin_client
from rsc.member.session import open_session
from rsc.protocol import Heartbeat, HeartbeatResponse, Status, decode

LONG_LEASE = {"lease_ttl_ms": 60_000}  # members join once and stay for the whole test


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rsc")
    add_parser(parser.add_subparsers(dest="command", required=True))
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
            [row] = [line for line in text.splitlines() if member.member_id in line]
            assert member.state in row and str(member.capacity) in row

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


async def test_watch_text_shows_the_group_until_its_duration_ends(coordinator):
    with trio.fail_after(20):
        await rsc_admin(coordinator.url, "set-shards", "orders", "billing", "3")
        code, text, err = await rsc_admin(coordinator.url, "watch", "orders", "billing",
                                          "--interval", "0.05", "--duration", "0.3")
    assert code == 0 and err == ""
    assert text.count("orders / billing") == 1, "unchanged polls are not printed again"
    assert "version 1, 3 shards" in text


async def test_watch_waits_for_a_group_that_does_not_exist_yet(coordinator):
    with trio.fail_after(20):
        code, text, _ = await rsc_admin(coordinator.url, "watch", "orders", "later",
                                        "--interval", "0.05", "--duration", "0.2")
    assert code == 0 and text.count("waiting for group orders / later") == 1
