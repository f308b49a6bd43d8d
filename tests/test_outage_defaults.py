"""D5 and D6 at the shipped defaults: coordinator outages of 1, 3 and 6 leases stop nothing.

No timing flags: the coordinator runs as it ships (heartbeat 3 s, lease 10 s, tick 1 s).
Two rigs run side by side, one with dynamic members and one with static members
(`--instance-id`), each on its own redis-server: a coordinator process, two `rsc consume`
processes on 6 shards, and an `rsc produce` fed 80 lines a second. In each rig the
coordinator is SIGSTOPped for 1, 3 and 6 leases (10, 30 and 60 s), then SIGKILLed and
restarted after 1, 3 and 6 leases, with two leases of carrying on after each outage.
Through all of it:

- processing goes on in every 2 s window, during every outage and in the two leases after;
- no member is fenced and none rejoins: the same memberIds at the same member epochs, and
  the same group epoch, before and after;
- every line the producer accepted is handled (lost = 0); duplicates are counted.

This is the fault step of `.ci/run` (`pytest -m shipped_defaults`, about 6 minutes); the
README's test command leaves it out. Set RSC_FAULTS_OUT=path to append one JSON row per
outage (docs/faults.md).
"""

from __future__ import annotations

import signal
from typing import Any

import pytest
import trio

from rsc.common.redis_server import EmbeddedRedis
from tests.redis_rigs import server_binary
from tests.test_coordinator_outage import Rig, describe, now_s, report, running_rig, wait_for

pytestmark = pytest.mark.shipped_defaults

LEASE_S = 10.0  # the shipped --lease-ttl-ms
WINDOW_S = 2.0
SHARDS = 6
OUTAGES = [(kind, leases) for kind in ("sigstop", "sigkill") for leases in (1, 3, 6)]


def empty_windows(times: list[float], start: float, end: float) -> list[float]:
    """The starts of the WINDOW_S windows in [start, end) in which nothing was handled."""
    times = sorted(times)
    empty, cursor, index = [], start, 0
    while cursor + WINDOW_S <= end:
        while index < len(times) and times[index] < cursor:
            index += 1
        if index == len(times) or times[index] >= cursor + WINDOW_S:
            empty.append(round(cursor - start, 1))
        cursor += WINDOW_S
    return empty


def member_events(rig: Rig, *names: str) -> list[dict[str, Any]]:
    return [event for consumer in rig.consumers for event in consumer.named(*names)]


async def outage(rig: Rig, nursery: trio.Nursery, kind: str, leases: int) -> dict[str, Any]:
    """One outage of `leases` leases and two leases after it; its figures."""
    coordinator = rig.coordinator
    fenced_before = len(member_events(rig, "fenced"))
    joined_before = len(member_events(rig, "joined"))
    started = now_s()
    if kind == "sigstop":
        coordinator.signal(signal.SIGSTOP)
        await trio.sleep(leases * LEASE_S)  # the fault's length, not a wait for a condition
        ended = now_s()
        coordinator.signal(signal.SIGCONT)
    else:
        await coordinator.kill()
        await trio.sleep(leases * LEASE_S)
        ended = now_s()
        await coordinator.start(nursery)
    await trio.sleep(2 * LEASE_S)  # two leases of carrying on with the coordinator back
    after = now_s()
    seen = [seen for consumer in rig.consumers for seen, _ in consumer.handled]
    return {
        "outage": f"coordinator {kind} {leases * LEASE_S:g} s ({leases} x lease)",
        "handled_during": sum(started <= t < ended for t in seen),
        "handled_after": sum(ended <= t < after for t in seen),
        "empty_windows_during": empty_windows(seen, started, ended),
        "empty_windows_after": empty_windows(seen, ended, after),
        "fenced": len(member_events(rig, "fenced")) - fenced_before,
        "rejoined": len(member_events(rig, "joined")) - joined_before,
    }


async def run_rig(redis_url: str, nursery: trio.Nursery, static: bool, rows: list[dict]) -> None:
    membership = "static" if static else "dynamic"
    async with running_rig(redis_url, nursery, timing=(), shards=SHARDS, static=static) as rig:
        before = await describe(rig.coordinator.url)
        await wait_for(lambda: sum(len(c.handled) for c in rig.consumers) >= 100, 60,
                       "messages flowing before the outages")
        for kind, leases in OUTAGES:
            row = await outage(rig, nursery, kind, leases)
            rows.append({"membership": membership, **row})
        handled, lost = await rig.drain(redis_url)
        after = await describe(rig.coordinator.url)
        rows.append({"membership": membership, "outage": "all of the above",
                     "accepted": rig.fed_producer().fed, "handled": sum(handled.values()),
                     "lost": lost,
                     "duplicates": sum(count - 1 for count in handled.values() if count > 1),
                     "members_before": {m.member_id: m.member_epoch for m in before.members},
                     "members_after": {m.member_id: m.member_epoch for m in after.members},
                     "group_epoch": [before.group_epoch, after.group_epoch]})


async def test_d5_d6_outages_of_1_3_and_6_leases_at_the_shipped_defaults_stop_nothing(
        redis_url, nursery):
    rows: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    with EmbeddedRedis(binary=server_binary()) as second_redis:
        async with trio.open_nursery() as rigs:
            rigs.start_soon(run_rig, redis_url, nursery, False, rows[False])
            rigs.start_soon(run_rig, second_redis.url, nursery, True, rows[True])
    for row in rows[False] + rows[True]:
        report("shipped defaults", **row)
    for membership_rows in rows.values():
        *outages, total = membership_rows
        for row in outages:
            assert row["empty_windows_during"] == [], row
            assert row["empty_windows_after"] == [], row
            assert (row["fenced"], row["rejoined"]) == (0, 0), row
        assert total["lost"] == 0, total
        assert total["members_after"] == total["members_before"], total
        assert total["group_epoch"][0] == total["group_epoch"][1], total
