"""D4 and H12 end to end: a dedicated redis-server SIGSTOPped for twice the lease, then SIGCONT.

A real coordinator (lease 1500 ms) on its own redis-server, three simulated members
(tests/sim_member.py) heartbeating every 200 ms on their own sessions. While Redis is
stopped a member joins another group of the prefix: the join's metadata write is abandoned
and answered COORDINATOR_NOT_AVAILABLE within a third of the lease (Redis runs it after
SIGCONT and the coordinator adopts it; another group, so the three members are
undisturbed). Throughout, no member is fenced or expired, and no member goes a lease
without an accepted heartbeat (so a real member would not fence itself). After SIGCONT
the members still hold their shards at the same epochs, a new member joins their group,
and Redis matches what the coordinator answered.
Figures are printed (run with -s to see them).
"""

from __future__ import annotations

import os
import signal

import pytest
import trio

from rsc.actors.redis_io.store import MetadataStore
from rsc.common.redis_server import EmbeddedRedis
from rsc.member.session import open_session
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import JOIN_EPOCH
from tests.conftest import start_coordinator
from tests.sim_member import SimMember, assert_no_shard_held_twice

pytestmark = pytest.mark.faults  # the fault step of .ci/run: python -m pytest -q -m faults

PREFIX, GROUP, OTHER = "stall", "billing", "audit"
LEASE_MS = 1500
HEARTBEAT_MS = 200
SHARDS = 6
SLACK_S = 0.4  # scheduling on a shared 2-core machine


async def test_d4_redis_sigstopped_for_twice_the_lease_fences_and_expires_nobody(nursery):
    with EmbeddedRedis() as redis_server:
        await _scenario(nursery, redis_server)


async def _scenario(nursery: trio.Nursery, redis_server: EmbeddedRedis) -> None:
    assert redis_server.process is not None
    pid = redis_server.process.pid
    coordinator = await start_coordinator(nursery, redis_server.url, lease_ttl_ms=LEASE_MS,
                                          heartbeat_interval_ms=HEARTBEAT_MS, tick_interval_ms=50)
    async with open_session(coordinator.url, "admin") as admin:
        made = await admin.request(m.SetShardCount(request_id=0, stream_prefix=PREFIX,
                                                   consumer_group=GROUP, shard_count=SHARDS))
        assert isinstance(made, m.ShardCountChanged) and made.status == Status.OK
    members = [SimMember(f"m{i}", PREFIX, GROUP) for i in range(3)]
    # (member, sent at, status, epoch) for every heartbeat answered
    log: list[tuple[str, float, Status, int]] = []
    stop_beating = trio.Event()

    async def heartbeat_loop(member: SimMember) -> None:
        async with open_session(coordinator.url, "member") as session:
            while not stop_beating.is_set():
                sent = trio.current_time()
                response = await member.beat(session)
                log.append((member.member_id, sent, response.status, member.epoch))
                await trio.sleep(HEARTBEAT_MS / 1000)

    async with trio.open_nursery() as beating:
        for member in members:
            beating.start_soon(heartbeat_loop, member)
        with trio.fail_after(15):  # settle: every shard held once, every member at one epoch
            while not (sum(len(mb.held) for mb in members) == SHARDS
                       and len({mb.epoch for mb in members}) == 1
                       and all(len(mb.held) == SHARDS // 3 for mb in members)):
                await trio.sleep(0.05)
        epochs = {mb.member_id: mb.epoch for mb in members}
        held = {mb.member_id: set(mb.held) for mb in members}

        os.kill(pid, signal.SIGSTOP)
        stopped_at = trio.current_time()
        try:
            async with open_session(coordinator.url, "member") as joiner:
                join = m.Heartbeat(request_id=0, stream_prefix=PREFIX, consumer_group=OTHER,
                                   member_id="stalled", member_epoch=JOIN_EPOCH, owned_shards=())
                with trio.fail_after(LEASE_MS / 1000):
                    refused = await joiner.request(join)
                first_unavailable_s = trio.current_time() - stopped_at
                assert isinstance(refused, m.HeartbeatResponse)
                assert refused.status == Status.COORDINATOR_NOT_AVAILABLE, refused
                await trio.sleep(2 * LEASE_MS / 1000 - (trio.current_time() - stopped_at))
        finally:
            os.kill(pid, signal.SIGCONT)
        resumed_at = trio.current_time()
        # the members carry on: same shards, same epochs, right after SIGCONT
        with trio.fail_after(5):
            while not all(any(name == mb.member_id and sent > resumed_at and status == Status.OK
                              for name, sent, status, _ in log) for mb in members):
                await trio.sleep(0.05)
        assert {mb.member_id: mb.epoch for mb in members} == epochs
        assert {mb.member_id: set(mb.held) for mb in members} == held
        async with open_session(coordinator.url, "admin") as admin:
            described = await admin.request(m.DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                                            consumer_group=GROUP))
        assert isinstance(described, m.GroupDescription)
        live = {member.member_id for member in described.members}
        # a new join works
        late = SimMember("late", PREFIX, GROUP)
        async with open_session(coordinator.url, "member") as session:
            with trio.fail_after(10):
                while (await late.beat(session)).status != Status.OK:
                    await trio.sleep(0.1)
            joined_after_s = trio.current_time() - resumed_at
            members.append(late)
            beating.start_soon(heartbeat_loop, late)
            with trio.fail_after(15):
                while not (sum(len(mb.held) for mb in members) == SHARDS
                           and all(mb.held for mb in members)
                           and len({mb.epoch for mb in members}) == 1):
                    await trio.sleep(0.05)
        assert_no_shard_held_twice(members)
        stop_beating.set()

    fenced = [entry for entry in log if entry[2] in (Status.FENCED_MEMBER_EPOCH,
                                                     Status.UNKNOWN_MEMBER_ID)]
    expired = {"m0", "m1", "m2"} - live
    unavailable = [entry for entry in log if entry[2] == Status.COORDINATOR_NOT_AVAILABLE]
    # the longest a member went without an accepted heartbeat while Redis was stopped
    gaps = {}
    for member_id in ("m0", "m1", "m2"):
        accepted = [sent for name, sent, status, _ in log if name == member_id and status == Status.OK]
        around = [t for t in accepted if stopped_at - 1 <= t <= resumed_at + 1]
        gaps[member_id] = max(b - a for a, b in zip(around, around[1:], strict=False))
    print(f"\nD4 stall: Redis SIGSTOPped {resumed_at - stopped_at:.2f} s (lease {LEASE_MS} ms); "
          f"first COORDINATOR_NOT_AVAILABLE after {first_unavailable_s * 1000:.0f} ms "
          f"(deadline {LEASE_MS / 3:.0f} ms); members fenced {len(fenced)}, expired {len(expired)}; "
          f"member heartbeats answered COORDINATOR_NOT_AVAILABLE {len(unavailable)} of "
          f"{len(log)}; longest gap between accepted heartbeats "
          f"{max(gaps.values()) * 1000:.0f} ms; new join OK {joined_after_s * 1000:.0f} ms "
          "after SIGCONT")
    assert first_unavailable_s <= LEASE_MS / 3000 + SLACK_S, first_unavailable_s
    assert not fenced, fenced
    assert not expired, expired
    assert max(gaps.values()) < LEASE_MS / 1000, gaps

    # Redis holds what the coordinator revealed (the abandoned write was repaired)
    store = MetadataStore(redis_server.url, lease_ms=1000)
    try:
        with trio.fail_after(5):
            while True:
                snapshot = await trio.to_thread.run_sync(store.load_prefix, PREFIX)
                assert snapshot is not None
                stored = snapshot.groups[GROUP].members
                if set(stored) == {mb.member_id for mb in members} and all(
                        stored[mb.member_id].epoch == mb.epoch for mb in members):
                    break
                await trio.sleep(0.05)
    finally:
        store.close()
    await coordinator.stop()
