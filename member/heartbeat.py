"""The heartbeat shell: the coordinator session, heartbeats, pushes, the leave.

It sends what the ledger's heartbeat says (taking the send time on the
member's monotonic clock: the lease of an accepted answer runs from it),
hands every answer to the ledger and applies the result. It heartbeats every
`heartbeatIntervalMs`, at once when the ledger or a push asks, and wakes at
the lease deadline so a member with nothing to do still fences itself in
time. A lost session is reopened with backoff. A join refused by a cap of the
coordinator (A1: `GROUP_MAX_SIZE_REACHED`, `GROUP_LIMIT_REACHED`) holds nothing
and is retried with backoff; a rate-limited warning line says so, and another
once a join is taken.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from rsc.member import gc_control
from rsc.member.reconcile import LEAVE_EPOCH
from rsc.member.session import Backoff, ResponseUndecodable, Session, SessionClosed, open_session
from rsc.protocol import AssignmentChanged, HeartbeatResponse, Status

if TYPE_CHECKING:
    from rsc.member.core import MemberCore

log = logging.getLogger(__name__)

FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 1.0

_CAP_HINTS = {
    Status.GROUP_MAX_SIZE_REACHED: "the group has as many members as the coordinator's "
    "--max-group-size allows: stop some members or raise --max-group-size",
    Status.GROUP_LIMIT_REACHED: "the coordinator holds as many groups as its --max-groups "
    "allows: delete unused groups (rsc admin delete-group) or raise --max-groups",
}


def join_refused_line(coordinator_url: str, member_id: str, stream_prefix: str,
                      consumer_group: str, status: Status) -> str:
    """The warning line of a join refused by a cap (A1), the same for every retry."""
    hint = _CAP_HINTS.get(status, "")
    return (f"the coordinator at {coordinator_url} refused member {member_id} of group "
            f"{consumer_group!r} on prefix {stream_prefix!r}: {status.value} ({hint}); "
            "retrying the join with backoff")


async def run_session(core: MemberCore) -> None:
    """Keep a session open and heartbeat on it, until the member has left."""
    config = core.config
    backoff = FIRST_BACKOFF_S
    while not core.left.is_set():
        try:
            async with open_session(config.coordinator_url, "member", token=config.token,
                                    ca_file=config.ca_file, ssl_context=config.ssl_context) as session:
                backoff = FIRST_BACKOFF_S
                core.ledger.on_session_lost()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_watch_pushes, core, session)
                    await _heartbeat_loop(core, session)
                    nursery.cancel_scope.cancel()
        except (SessionClosed, ResponseUndecodable, trio.TooSlowError) as exc:
            log.info("member %s: session lost (%s); reconnecting", core.member_id, exc)
            core.apply(core.ledger.check_lease(core.clock()))
            if core.stop_requested.is_set() and not core.ledger.state.holds:
                core.left.set()  # nobody to tell: the lease runs out
                return
            await trio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)


async def _watch_pushes(core: MemberCore, session: Session) -> None:
    async for push in session.pushes:
        if isinstance(push, AssignmentChanged) and push.member_id == core.member_id:
            core.heartbeat_due = True
            core.changed.fire()


async def _heartbeat_loop(core: MemberCore, session: Session) -> None:
    config, ledger = core.config, core.ledger
    join_backoff = Backoff(config.join_retry_initial_s,
                           max(config.join_retry_initial_s, config.join_retry_max_s))
    join_topic = f"join {core.member_id}"  # per member: others of the group may be in
    while True:
        core.heartbeat_due = False
        request, sent, actions = ledger.heartbeat(
            core.clock(), capacity=config.capacity, stream_prefix=config.stream_prefix,
            consumer_group=config.consumer_group)
        core.apply(actions)
        with trio.fail_after(config.request_timeout_s):
            response = await session.request(request)
        if not isinstance(response, HeartbeatResponse):
            log.error("member %s: heartbeat refused: %s", core.member_id, response)
        else:
            if response.status not in (Status.OK, Status.REVOKE_PENDING):
                log.info("member %s: heartbeat answered %s %s", core.member_id,
                         response.status, response.error or "")
            core.apply(ledger.on_response(sent, response))
            gc_control.freeze_after_startup()  # no-ops unless the process installed the policy
            gc_control.on_tick()
            if sent.member_epoch == LEAVE_EPOCH and ledger.state.member_epoch == LEAVE_EPOCH:
                core.left.set()
                return
        interval_ms = float(ledger.state.heartbeat_interval_ms
                            or config.default_heartbeat_interval_ms)
        interval_ms = jittered(interval_ms, config.heartbeat_jitter)
        refused = ledger.state.join_refused
        if refused is not None:  # A1: hold nothing, rejoin after a backoff, say so
            core.notices.say(join_topic, join_refused_line(
                config.coordinator_url, core.member_id, config.stream_prefix,
                config.consumer_group, refused))
            interval_ms = join_backoff.next() * 1000
        elif ledger.state.joined:
            join_backoff.reset()
            core.notices.clear(join_topic, f"member {core.member_id} joined group "
                               f"{config.consumer_group!r} on prefix {config.stream_prefix!r}")
        deadline = ledger.lease_deadline()
        if deadline is not None:  # wake at the lease deadline: fence, then rejoin
            interval_ms = max(0.0, min(interval_ms, deadline - core.clock()))
        with trio.move_on_after(interval_ms / 1000):
            await core.changed.wait_until(lambda: core.heartbeat_due)


def jittered(interval_ms: float, jitter: float, draw: Callable[[], float] = random.random) -> float:
    """The wait before a regular heartbeat: the interval shortened by up to `jitter` of it."""
    return interval_ms * (1 - jitter * draw())


async def leave(core: MemberCore) -> None:
    """Stop reading, drain in-flight work, then leave with epoch -1 (bounded in time)."""
    config, ledger = core.config, core.ledger
    core.apply(ledger.on_leave_requested())
    with trio.move_on_after(config.drain_timeout_s):
        await core.changed.wait_until(lambda: not ledger.state.holds)
    if ledger.state.holds:
        core.apply(ledger.on_abandon("drain timed out on leave"))
    with trio.move_on_after(config.leave_timeout_s):
        await core.left.wait()
