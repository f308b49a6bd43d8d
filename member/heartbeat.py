"""The heartbeat shell: the coordinator session, heartbeats, pushes, the leave.

It sends what the ledger's heartbeat says (taking the send time on the
member's monotonic clock: the lease of an accepted answer runs from it),
hands every answer to the ledger and applies the result. It heartbeats every
`heartbeatIntervalMs`, at once when the ledger or a push asks, and wakes at
the lease deadline so a member with nothing to do still fences itself in
time. A lost session is reopened with backoff.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from rsc.member.reconcile import LEAVE_EPOCH
from rsc.member.session import ResponseUndecodable, Session, SessionClosed, open_session
from rsc.protocol import AssignmentChanged, HeartbeatResponse, Status

if TYPE_CHECKING:
    from rsc.member.core import MemberCore

log = logging.getLogger(__name__)

FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 1.0


async def run_session(core: MemberCore) -> None:
    """Keep a session open and heartbeat on it, until the member has left."""
    config = core.config
    backoff = FIRST_BACKOFF_S
    while not core.left.is_set():
        try:
            async with open_session(config.coordinator_url, "member",
                                    token=config.token) as session:
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
            if sent.member_epoch == LEAVE_EPOCH and ledger.state.member_epoch == LEAVE_EPOCH:
                core.left.set()
                return
        interval_ms = float(ledger.state.heartbeat_interval_ms
                            or config.default_heartbeat_interval_ms)
        deadline = ledger.lease_deadline()
        if deadline is not None:  # wake at the lease deadline: fence, then rejoin
            interval_ms = max(0.0, min(interval_ms, deadline - core.clock()))
        with trio.move_on_after(interval_ms / 1000):
            await core.changed.wait_until(lambda: core.heartbeat_due)


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
