"""A request to an idle prefix is answered two scheduler passes after it is routed: the router
wakes the actor before the session's task yields (actors/router.py `send`). A quiet group's
heartbeat waits for whole passes of everyone else's work, so each pass saved is latency saved
for every group on a busy coordinator (the isolation bench)."""

from __future__ import annotations

import trio

from rsc.actors.actor import PrefixActor
from rsc.actors.core.group import GroupSettings
from rsc.actors.mailbox import Envelope
from rsc.actors.redis_io.store import MetadataStore
from rsc.actors.server import Collect
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import JOIN_EPOCH
from tests.helpers.actors import serve

PREFIX, GROUP = "passes", "billing"
SETTINGS = GroupSettings(heartbeat_interval_ms=200, lease_ttl_ms=5000, revoke_timeout_ms=5000)


class Passes(trio.abc.Instrument):
    """Counts the scheduler's passes (each begins with a check for I/O)."""

    def __init__(self) -> None:
        self.count = 0

    def after_io_wait(self, timeout: float) -> None:
        self.count += 1


async def test_a_heartbeat_routed_to_an_idle_prefix_is_answered_in_the_second_pass(
        redis_url: str, nursery: trio.Nursery) -> None:
    served = serve(nursery, PrefixActor(PREFIX, MetadataStore(redis_url, lease_ms=1000), SETTINGS))
    routed = await served.ask(m.SetShardCount(request_id=1, stream_prefix=PREFIX,
                                              consumer_group=GROUP, shard_count=2))
    assert routed.status == Status.OK
    joined = await served.ask(m.Heartbeat(request_id=2, stream_prefix=PREFIX, consumer_group=GROUP,
                                          member_id="a", member_epoch=JOIN_EPOCH,
                                          owned_shards=()))
    assert joined.status == Status.OK and joined.assignment is not None
    beat = m.Heartbeat(request_id=3, stream_prefix=PREFIX, consumer_group=GROUP, member_id="a",
                       member_epoch=joined.member_epoch, owned_shards=joined.assignment.assigned_shards)
    await trio.testing.wait_all_tasks_blocked()  # the actor is idle, nothing else runs
    passes = Passes()
    trio.lowlevel.add_instrument(passes)
    try:
        slot = Collect()
        await served.router.send(PREFIX, Envelope(beat, slot, None))
        answer = await slot.wait()
    finally:
        trio.lowlevel.remove_instrument(passes)
    assert isinstance(answer, m.HeartbeatResponse) and answer.status == Status.OK
    assert answer.member_epoch == joined.member_epoch
    # pass 1: the actor's batch answers (woken before the send yielded); pass 2: this task reads
    # the answer. A wake after the yield would take a pass more.
    assert passes.count <= 2, passes.count
