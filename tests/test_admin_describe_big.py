"""`rsc admin describe` of a group as big as the coordinator allows (--max-group-size 20,000).

A real coordinator and real websockets; the 20,000 members are joins sent
pipelined over a few member sessions (no member runtime: a long lease keeps
them live for the test). The answer is megabytes: over trio-websocket's
default message limit of 1 MiB, which the admin client raises.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from rsc.admin.client import open_admin_client
from rsc.member.session import open_session
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from tests.test_admin_cli import Output, rsc_admin

MEMBERS = 20_000
SESSIONS = 8
PER_SESSION_IN_FLIGHT = 64
PREFIX, GROUP = "bigp", "big"


async def join_members(url: str, count: int) -> None:
    async def joiner(session: Any, ids: range) -> None:
        for index in ids:
            response: Any = await session.request(m.Heartbeat(
                request_id=0, stream_prefix=PREFIX, consumer_group=GROUP,
                member_id=f"member-{index:05d}", member_epoch=0, capacity=1, owned_shards=()))
            assert response.status == Status.OK, response

    per_session = count // SESSIONS
    async with trio.open_nursery() as nursery:
        for s in range(SESSIONS):
            session = await nursery.start(_session, url)
            for lane in range(PER_SESSION_IN_FLIGHT):
                nursery.start_soon(joiner, session,
                                   range(s * per_session + lane, (s + 1) * per_session,
                                         PER_SESSION_IN_FLIGHT))
        # the sessions stay open until every join is answered
        while any(task.name.endswith("joiner") for task in nursery.child_tasks):
            await trio.sleep(0.05)
        nursery.cancel_scope.cancel()


async def _session(url: str, task_status: trio.TaskStatus[Any]) -> None:
    async with open_session(url, "member") as session:
        task_status.started(session)
        await trio.sleep_forever()


@pytest.mark.slow  # 15 s or more: CI's slow step (README)
async def test_describe_of_a_20000_member_group_works_from_the_cli(coordinator_factory):
    coordinator = await coordinator_factory(lease_ttl_ms=600_000, max_group_size=MEMBERS)
    async with open_admin_client(coordinator.url) as admin:
        await admin.set_shard_count(PREFIX, GROUP, 64)
    with trio.fail_after(300):
        await join_members(coordinator.url, MEMBERS)

    async with open_admin_client(coordinator.url) as admin:  # over the 1 MiB default
        raw, description = await admin.exchange(m.DescribeGroup(
            request_id=0, stream_prefix=PREFIX, consumer_group=GROUP))
        assert len(description.members) == MEMBERS
        assert len(json.dumps(raw)) > 1 << 20

    code, out, err = await rsc_admin(coordinator.url, "describe", PREFIX, GROUP, "--json")
    assert code == 0, err
    assert len(json.loads(out)["members"]) == MEMBERS

    code, out, err = await rsc_admin(coordinator.url, "describe", PREFIX, GROUP)
    assert code == 0, err
    assert f"{MEMBERS:,} members, 20 shown" in out
    assert out.count("member-") == 20  # a summary, not 20,000 rows
    assert len(out.splitlines()) < 100

    output = Output()
    code, _, err = await rsc_admin(coordinator.url, "describe", PREFIX, GROUP, "--members", "all",
                                   stdout=output)
    assert code == 0, err
    assert sum(1 for line in output.lines() if "member-" in line) == MEMBERS
