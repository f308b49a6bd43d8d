"""Start-up: the health port answers before `listening on`, and a SIGKILL plus restart fits in a
3 s member lease, so real members (`rsc consume`) carry on without fencing or rejoining."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import redis
import trio

from rsc.common.redis_server import EmbeddedRedis, free_port
from rsc.member.session import open_session
from rsc.protocol import messages as m
from tests.helpers.http import http_get
from tests.processes import ROOT, spawn_coordinator, spawn_coordinator_timed, stop

pytestmark = pytest.mark.faults  # the fault step of .ci/run: python -m pytest -q -m faults

PREFIX, GROUP = "orders", "billing"
LEASE_MS = 3000
LEASE_FLAGS = ("--lease-ttl-ms", str(LEASE_MS), "--heartbeat-interval-ms", "500")  # default tick


async def test_restart_after_sigkill_is_quick_because_the_dead_holder_lease_is_taken_over(redis_url):
    process, _url, first = await spawn_coordinator_timed(redis_url, fast=False)
    process.kill()
    await process.wait()
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.exists("rsc:coordinator:lease")  # the dead one's lease is still there
    finally:
        client.close()
    process, _url, again = await spawn_coordinator_timed(redis_url, fast=False, stderr=subprocess.PIPE)
    try:
        print(f"start to listening: {first:.3f} s fresh, {again:.3f} s after SIGKILL")
    finally:
        await stop(process)
    assert process.stderr is not None
    logs = b""
    while chunk := await process.stderr.receive_some(65536):
        logs += chunk
    # it did not wait out the dead one's 3 s coordinator lease: it took it over
    assert b"coordinator.lease_taken_over" in logs, logs


async def read_until(stream, needle: bytes, seen: bytearray) -> None:
    """Read `stream` into `seen` until it holds `needle` (the caller bounds the time)."""
    while needle not in seen:
        chunk = await stream.receive_some(65536)
        assert chunk, f"stream closed before {needle!r}: {bytes(seen)!r}"
        seen += chunk


@pytest.mark.parametrize("ending", ["sigterm", "sigkill"])
async def test_d5_a_second_coordinator_waits_then_takes_over_when_the_holder_stops(redis_url, ending):
    first, first_url = await spawn_coordinator(redis_url, "--tick-interval-ms", "200")
    metrics_port = free_port()
    second = await trio.lowlevel.open_process(
        [sys.executable, "-m", "rsc", "coordinator", "--redis-url", redis_url, "--port", "0",
         "--tick-interval-ms", "200", "--metrics-port", str(metrics_port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert second.stdout is not None and second.stderr is not None
    try:
        logs = bytearray()
        with trio.fail_after(20):
            await read_until(second.stderr, b"coordinator.waiting", logs)
        client = redis.Redis.from_url(redis_url, decode_responses=True)
        try:
            holder = client.get("rsc:coordinator:lease")
        finally:
            client.close()
        assert holder is not None and holder.encode() in logs, "the line names the holder"
        response = await http_get(metrics_port, "/readyz")
        status, body = response.status, response.body
        assert status == 503 and b"waiting" in body
        assert second.returncode is None and first.returncode is None, "it waits, it does not exit"
        with trio.move_on_after(0) as nothing:
            assert await second.stdout.receive_some(4096) == b"", "not listening while it waits"
        assert nothing.cancelled_caught
        if ending == "sigterm":
            await stop(first)  # SIGTERM releases the lease at once: the second takes over
            assert first.returncode == 0
        else:  # a death: its lease lapses (on this host its pid is seen gone at once)
            first.kill()
            await first.wait()
        out = bytearray()
        with trio.fail_after(20):
            await read_until(second.stdout, b"listening on ", out)
            while (await http_get(metrics_port, "/readyz")).status != 200:
                await trio.sleep(0.02)
    finally:
        await stop(first)
        await stop(second)
    assert first_url  # the first one served before


async def test_health_port_answers_before_listening_and_readyz_follows_the_store():
    metrics_port = free_port()
    store = EmbeddedRedis().start()
    client = redis.Redis.from_url(store.url)
    # a live foreign lease holder: the coordinator waits for it, serving /healthz meanwhile;
    # the test lets it go once it has seen /readyz say so (not on a timer: machines are slow)
    client.set("rsc:coordinator:lease", "elsewhere-1-abcdef01", px=30_000)
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "rsc", "coordinator", "--redis-url", store.url, "--port", "0",
         "--tick-interval-ms", "100", "--metrics-port", str(metrics_port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    try:
        with trio.fail_after(30):
            while True:
                try:
                    status = (await http_get(metrics_port, "/healthz")).status
                    break
                except OSError:
                    await trio.sleep(0.02)
            assert status == 200
            response = await http_get(metrics_port, "/readyz")
            status, body = response.status, response.body
            assert status == 503 and b"lease" in body
            client.delete("rsc:coordinator:lease")
            client.close()
            assert process.stdout is not None
            line = await process.stdout.receive_some(4096)
            assert line.startswith(b"listening on ")
            while (await http_get(metrics_port, "/readyz")).status != 200:
                await trio.sleep(0.02)
            store.stop()  # Redis goes away: not ready, still healthy
            while (await http_get(metrics_port, "/readyz")).status != 503:
                await trio.sleep(0.02)
            assert (await http_get(metrics_port, "/healthz")).status == 200
            await trio.sleep(1)  # ten failed renewals
            store = EmbeddedRedis(port=store.port).start()
            while (await http_get(metrics_port, "/readyz")).status != 200:
                await trio.sleep(0.02)
    finally:
        await stop(process)
        store.stop()
    assert process.stderr is not None
    logs = b""
    while chunk := await process.stderr.receive_some(65536):
        logs += chunk
    # the outage is told once when it starts and once when it ends, not every tick
    assert logs.count(b"store.unavailable") == 1, logs
    assert logs.count(b"store.available") == 1, logs


async def read_events(stream, events: list[dict]) -> None:
    buffer = b""
    while chunk := await stream.receive_some(65536):
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.startswith(b"{"):
                events.append(json.loads(line))


async def test_sigkill_and_restart_inside_a_3s_lease_members_neither_fence_nor_rejoin(redis_url, nursery):
    port = str(free_port())
    process, url = await spawn_coordinator(redis_url, "--port", port, *LEASE_FLAGS, fast=False)
    async with open_session(url, "admin") as admin:
        await admin.request(m.SetShardCount(request_id=0, stream_prefix=PREFIX,
                                            consumer_group=GROUP, shard_count=4))
    consumer = await trio.lowlevel.open_process(
        [sys.executable, "-m", "rsc", "consume", PREFIX, GROUP, "--coordinator", url,
         "--redis-url", redis_url, "--concurrency", "3", "--events"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    events: list[dict] = []
    nursery.start_soon(read_events, consumer.stderr, events)
    try:
        with trio.fail_after(30):
            while sum(e["event"] == "joined" for e in events) < 3:
                await trio.sleep(0.05)
            await trio.sleep(3)  # settle: every shard assigned
        before = list(events)
        async with open_session(url, "admin") as admin:
            described = await admin.request(m.DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                                            consumer_group=GROUP))
        epochs = {member.member_id: member.member_epoch for member in described.members}
        assert len(epochs) == 3

        killed = time.monotonic()
        process.kill()
        await process.wait()
        process, url, listening = await spawn_coordinator_timed(
            redis_url, "--port", port, *LEASE_FLAGS, fast=False)
        restart = time.monotonic() - killed
        print(f"SIGKILL to listening again: {restart:.3f} s (process start to listening {listening:.3f} s)")
        # H12: the new coordinator gives every member a fresh lease, however long the restart took
        # (a busy machine's start-up is CPU-bound imports): wait until it has run for more than two
        # member leases with every member heartbeating it, then nobody may have been fenced or rejoined
        restarted = trio.current_time()
        with trio.fail_after(30):
            while True:
                async with open_session(url, "admin") as admin:
                    described = await admin.request(m.DescribeGroup(
                        request_id=0, stream_prefix=PREFIX, consumer_group=GROUP))
                fresh = [member for member in described.members
                         if member.last_heartbeat_ms_ago is not None
                         and member.last_heartbeat_ms_ago < LEASE_MS // 2]
                if trio.current_time() - restarted > 2 * LEASE_MS / 1000 and len(fresh) == 3:
                    break
                await trio.sleep(0.2)
        after = events[len(before):]
        assert not [e for e in after if e["event"] in ("fenced", "joined", "left")], after
        assert {member.member_id: member.member_epoch for member in described.members} == epochs
    finally:
        consumer.send_signal(signal.SIGTERM)
        with trio.move_on_after(10):
            await consumer.wait()
        if consumer.returncode is None:
            consumer.kill()
            await consumer.wait()
        await stop(process)


def test_admission_flags_reach_the_config_and_bad_values_are_refused(capsys):
    import argparse

    from rsc.actors.config import CoordinatorConfig
    from rsc.commands.coordinator import add_parser, config_from_args

    parser = argparse.ArgumentParser(prog="rsc")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["coordinator", "--redis-url", "redis://127.0.0.1:1", "--max-sessions",
                              "50", "--max-groups", "7", "--max-group-size", "3"])
    config = config_from_args(args)
    assert (config.max_sessions, config.max_groups, config.max_group_size) == (50, 7, 3)
    defaults = config_from_args(parser.parse_args(["coordinator"]))
    assert defaults.max_sessions is None  # 80 % of the fd limit, decided at start
    assert (defaults.max_groups, defaults.max_group_size) == (100_000, 20_000)
    for flag in ("--max-sessions", "--max-groups", "--max-group-size"):
        with pytest.raises(SystemExit):
            parser.parse_args(["coordinator", flag, "0"])
        assert f"{flag}: must be >= 1, got 0" in capsys.readouterr().err
    with pytest.raises(ValueError, match="max-groups must be positive"):
        CoordinatorConfig(max_groups=0)


def test_tokens_come_from_the_environment_unless_a_flag_names_them():
    import argparse

    from rsc.commands.coordinator import add_parser, config_from_args
    from rsc.common.env_config import parse_args

    environ = {"RSC_ADMIN_TOKEN": "admin-secret", "RSC_MEMBER_TOKEN": "member-secret"}
    parser = argparse.ArgumentParser(prog="rsc")
    add_parser(parser.add_subparsers(dest="command"))
    config = config_from_args(parse_args(parser, ["coordinator"], environ))
    assert (config.admin_token, config.member_token) == ("admin-secret", "member-secret")
    flagged = config_from_args(parse_args(parser, ["coordinator", "--admin-token", "other"], environ))
    assert (flagged.admin_token, flagged.member_token) == ("other", "member-secret")
    unset = config_from_args(parse_args(parser, ["coordinator"], {}))
    assert (unset.admin_token, unset.member_token) == (None, None)


async def test_ctrl_c_on_rsc_coordinator_releases_the_lease_first(redis_url):
    process, _url = await spawn_coordinator(redis_url, stderr=subprocess.PIPE)
    process.send_signal(signal.SIGINT)
    assert process.stderr is not None
    logs = bytearray()
    with trio.fail_after(20):
        while chunk := await process.stderr.receive_some(65536):
            logs += chunk
        assert await process.wait() == 0, bytes(logs)
    assert b"lease_not_released" not in logs and b"Traceback" not in logs, bytes(logs)
    assert b"coordinator.stopped" in logs and b"lease_released=true" in logs, bytes(logs)
    client = redis.Redis.from_url(redis_url)
    try:
        assert not client.exists("rsc:coordinator:lease"), "released, not left to lapse"
    finally:
        client.close()


async def test_sigterm_stops_a_coordinator_that_waits_for_the_lease(redis_url):
    client = redis.Redis.from_url(redis_url)
    client.set("rsc:coordinator:lease", "elsewhere-1-abcdef01", px=60_000)
    try:
        waiting = await trio.lowlevel.open_process(
            [sys.executable, "-m", "rsc", "coordinator", "--redis-url", redis_url, "--port", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
        assert waiting.stderr is not None
        logs = bytearray()
        with trio.fail_after(20):
            await read_until(waiting.stderr, b"coordinator.waiting", logs)
            assert b"elsewhere-1-abcdef01" in logs
            waiting.terminate()
            assert await waiting.wait() == 0
        assert client.get("rsc:coordinator:lease") == b"elsewhere-1-abcdef01", "not touched"
    finally:
        client.close()


async def test_ctrl_c_on_rsc_coordinator_with_its_embedded_redis_releases_the_lease_first():
    """Ctrl-C on a terminal reaches the whole foreground group: the embedded redis-server
    lives in a session of its own, so it is still there when the lease is released."""
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "rsc", "coordinator", "--port", "0", "--tick-interval-ms", "100"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, start_new_session=True,
        env={k: v for k, v in os.environ.items() if k != "RSC_REDIS_URL"})
    assert process.stdout is not None and process.stderr is not None
    try:
        out = bytearray()
        with trio.fail_after(30):
            await read_until(process.stdout, b"listening on ", out)
        os.killpg(process.pid, signal.SIGINT)
        logs = bytearray()
        with trio.fail_after(20):
            while chunk := await process.stderr.receive_some(65536):
                logs += chunk
            assert await process.wait() == 0, bytes(logs)
        assert b"private redis-server" in logs
        assert b"lease_not_released" not in logs and b"Traceback" not in logs, bytes(logs)
    finally:
        await stop(process)


@pytest.mark.parametrize("ending", ["released", "lapsed"])
async def test_d5_a_waiting_coordinator_takes_a_lapsed_lease_only_after_a_ttl_of_absence(
        redis_url, ending):
    """A holder on another host (its pid cannot be checked) whose key lapses without a
    release: the waiting coordinator takes over only once the key has been absent for one
    full lease TTL (a live holder whose store went back writes it again within a tick, K3);
    one that released it (a clean stop) is taken over at once."""
    lease_ttl_s = 2.0 if ending == "lapsed" else 20.0  # a release: at once, not after 20 s
    holder = "another-host-4242-0badc0de"
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    client.set("rsc:coordinator:lease", holder, px=60_000)
    waiting = await trio.lowlevel.open_process(
        [sys.executable, "-m", "rsc", "coordinator", "--redis-url", redis_url, "--port", "0",
         "--tick-interval-ms", "100", "--lease-ttl-ms", str(int(lease_ttl_s * 1000))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert waiting.stdout is not None and waiting.stderr is not None
    try:
        logs = bytearray()
        with trio.fail_after(20):
            await read_until(waiting.stderr, b"coordinator.waiting", logs)
        assert holder.encode() in logs
        if ending == "released":  # what a clean stop of that holder writes (one script)
            client.set("rsc:coordinator:released", holder, px=60_000)
        client.delete("rsc:coordinator:lease")
        gone = time.monotonic()
        out = bytearray()
        with trio.fail_after(15):
            await read_until(waiting.stdout, b"listening on ", out)
        took = time.monotonic() - gone
        print(f"{ending}: took over {took:.2f} s after the key went")
        if ending == "lapsed":
            assert took >= lease_ttl_s - 0.05, f"took over {took:.2f} s after the key went"
        else:
            assert took < lease_ttl_s, f"waited {took:.2f} s after a release"
    finally:
        client.close()
        await stop(waiting)
