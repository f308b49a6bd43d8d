"""H10 from the member's side: a push that arrives while one of its heartbeats is in flight calls
for another heartbeat as soon as the answer is in.

The coordinator pushes a member at most once between two of its answered heartbeats
(docs/protocol.md H10), so a member that dropped such a push would wait a whole interval for
the next change. A real Redis and the member runtime; the coordinator is scripted in-process
(the heartbeat shell's `open_session` replaced, as in tests/test_member_runtime_checks.py) so
the push can be sent exactly while a regular heartbeat is unanswered.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import rsc.member.shells.heartbeat as heartbeat_shell
from rsc.member.shells.runtime import Member
from rsc.protocol import AssignmentChanged, Heartbeat, HeartbeatResponse
from tests.test_member_runtime_checks import GROUP, PREFIX, Recorder, accept, config, prepare

INTERVAL_MS = 4000  # the regular beat: far later than the heartbeat a push brings


class PushingCoordinator:
    """Answers every heartbeat with `accept` at a long interval, but holds the answer to the
    first regular one (epoch > 0, no full report) until the test has pushed (or not); records
    when each heartbeat came."""

    def __init__(self) -> None:
        self.requests: list[tuple[float, Heartbeat]] = []
        self.held = trio.Event()
        self.release = trio.Event()
        self.pushes_in: trio.MemorySendChannel[Any] | None = None

    @asynccontextmanager
    async def open_session(self, url: str, endpoint: str, **_: Any) -> AsyncIterator[Any]:
        pushes_in, pushes = trio.open_memory_channel[Any](16)
        self.pushes_in = pushes_in
        coordinator = self

        class Session:
            def __init__(self) -> None:
                self.pushes = pushes

            async def request(self, message: Heartbeat) -> HeartbeatResponse:
                coordinator.requests.append((trio.current_time(), message))
                regular = message.member_epoch > 0 and message.owned_shards is None
                if regular and not coordinator.held.is_set():
                    coordinator.held.set()
                    await coordinator.release.wait()
                answer = accept(message)
                if answer.heartbeat_interval_ms is None:  # a leave's answer
                    return answer
                return attrs.evolve(answer, heartbeat_interval_ms=INTERVAL_MS)

        yield Session()


@pytest.mark.parametrize("pushed", [True, False])
async def test_a_push_that_arrives_while_a_heartbeat_is_in_flight_brings_one_more_at_once(
        redis_url, monkeypatch, nursery, pushed):
    client = prepare(redis_url)
    coordinator = PushingCoordinator()
    monkeypatch.setattr(heartbeat_shell, "open_session", coordinator.open_session)
    member = Member(config(redis_url, default_heartbeat_interval_ms=INTERVAL_MS),
                    Recorder().handle)
    nursery.start_soon(member.run)
    with trio.fail_after(3 * INTERVAL_MS / 1000):
        await coordinator.held.wait()  # the first regular heartbeat, unanswered
    before = len(coordinator.requests)
    if pushed:  # its answer may have been computed before the change the push is about
        assert coordinator.pushes_in is not None
        await coordinator.pushes_in.send(AssignmentChanged(
            stream_prefix=PREFIX, consumer_group=GROUP, member_id=member.core.member_id,
            group_epoch=2))
        await trio.testing.wait_all_tasks_blocked()
    answered_at = trio.current_time()
    coordinator.release.set()
    # the heartbeat the push calls for comes at once; without a push the next one is a whole
    # interval (4 s) away, so 2 s tells the two apart on a loaded machine
    with trio.move_on_after(2):
        while len(coordinator.requests) == before:
            await trio.sleep(0.01)
    if pushed:
        assert len(coordinator.requests) > before, coordinator.requests
        assert coordinator.requests[before][0] - answered_at < 2
    else:
        assert len(coordinator.requests) == before, coordinator.requests
    member.stop()
    with trio.fail_after(10):
        await member.core.life.left.wait()
    client.close()
