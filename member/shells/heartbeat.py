"""The heartbeat shell: the coordinator session, heartbeats, pushes, the leave.

It sends what the ledger's heartbeat says (taking the send time on the
member's monotonic clock: the lease of an accepted answer runs from it),
hands every answer to the ledger and applies the result, then waits what the
pacing (pacing.py) says: the heartbeat interval, a join backoff after a join
refused by a cap (A1), never past the lease deadline (D1). A push or the
ledger asks for a heartbeat at once. A lost session is reopened with backoff.
The ledger says when the member is done (its leave answered, H9, or nothing
held and no session to leave on); the pacing says when a refused join is to
be said (a rate-limited warning line) and when a join was taken after one.

D5 (docs/protocol.md, Data plane rules): while heartbeats fail, `watch_outage`
looks at the member's own Redis at least once per heartbeat interval (the
coordinator lease key and the owner records of the held shards, one round
trip) and hands what it saw to the ledger, which decides the allowance.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import attrs
import trio

from rsc.common import gc_policy as gc_control
from rsc.member.pure.outage import COORDINATOR_LEASE_KEY, Observation
from rsc.member.pure.pacing import HeartbeatPacing
from rsc.member.redis_io.streams import connect
from rsc.member.redis_io.unrecoverable import refusal_error, refusal_is_permanent
from rsc.member.session import (
    ResponseUndecodable,
    Session,
    SessionClosed,
    SessionRefused,
    open_session,
)
from rsc.member.shells.faults import MemberFaults
from rsc.protocol import JOIN_EPOCH, AssignmentChanged, HeartbeatResponse, Status
from rsc.protocol.routing import owner_key

if TYPE_CHECKING:
    from rsc.member.core import MemberCore

log = logging.getLogger("rsc.member.heartbeat")  # the name logging configs and docs know

_CAP_HINTS = {
    Status.GROUP_MAX_SIZE_REACHED: "the group has as many members as the coordinator's "
    "--max-group-size allows: stop some members or raise --max-group-size",
    Status.GROUP_LIMIT_REACHED: "the coordinator holds as many groups as its --max-groups "
    "allows: delete unused groups (rsc admin delete-group) or raise --max-groups",
    Status.UNRELEASED_INSTANCE_ID: "another live member holds its instanceId (S4): is a second "
    "process running with the same instance id? this one waits until that one leaves",
}


def join_refused_line(coordinator_url: str, member_id: str, stream_prefix: str,
                      consumer_group: str, status: Status, instance_id: str | None = None) -> str:
    """The warning line of a join refused by a cap (A1) or a duplicate instanceId (S4), the
    same for every retry."""
    hint = _CAP_HINTS.get(status, "")
    if instance_id is not None:
        member_id = f"{member_id} (instanceId {instance_id!r})"
    return (f"the coordinator at {coordinator_url} refused member {member_id} of group "
            f"{consumer_group!r} on prefix {stream_prefix!r}: {status.value} ({hint}); "
            "retrying the join with backoff")


async def run_session(core: MemberCore) -> None:
    """Keep a session open and heartbeat on it, until the member has left; meanwhile look at
    Redis whenever heartbeats fail (D5)."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch_outage, core)
        await _run_session(core)
        nursery.cancel_scope.cancel()


async def _run_session(core: MemberCore) -> None:
    config = core.config
    pacing = HeartbeatPacing(default_interval_ms=config.default_heartbeat_interval_ms,
                             jitter=config.heartbeat_jitter,
                             join_retry_initial_s=config.join_retry_initial_s,
                             join_retry_max_s=config.join_retry_max_s)
    while not core.life.left.is_set():
        try:
            async with open_session(config.coordinator_url, "member", token=config.token,
                                    ca_file=config.ca_file, ssl_context=config.ssl_context,
                                    connect_timeout=pacing.connect_timeout_s(core.ledger)) as session:
                pacing.session_opened()
                core.ledger.on_session_lost()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_watch_pushes, core, session)
                    await _heartbeat_loop(core, session, pacing)
                    nursery.cancel_scope.cancel()
        except (SessionClosed, ResponseUndecodable, trio.TooSlowError) as exc:
            if isinstance(exc, SessionRefused) and refusal_is_permanent(exc.status_code):
                raise refusal_error(exc.status_code, exc.line) from exc  # D3: a wrong token never heals
            log.info("member %s: session lost (%s); reconnecting", core.member_id, exc)
            core.ledger.on_session_failed()
            core.changed.fire()  # wakes the D5 watcher
            core.apply(core.ledger.check_lease(core.clock()))
            if core.ledger.done_without_session(core.life.stop_requested.is_set()):
                core.life.left.set()
                return
            await trio.sleep(pacing.reconnect_delay_s(core.ledger))


def observe(client: object, lease_key: str, owner_keys: list[str]) -> tuple[bool, list[str | None]]:
    """D5's look, one round trip (on a cluster, one pipeline per node): is the lease key
    absent, and what each owner record names (blocking: run it in a thread)."""
    pipe = client.pipeline(transaction=False)  # type: ignore[attr-defined]
    pipe.exists(lease_key)
    for key in owner_keys:
        pipe.get(key)
    replies = pipe.execute()
    return int(replies[0]) == 0, [None if value is None else str(value) for value in replies[1:]]


async def watch_outage(core: MemberCore) -> None:
    """D5: while heartbeats fail, look at Redis at least once per heartbeat interval."""
    ledger, config = core.ledger, core.config
    client: object | None = None
    try:
        while True:
            now = core.clock()
            interval = ledger.heartbeat_interval_ms
            if not ledger.observation_due(now):
                with trio.move_on_after(ledger.outage.next_observation_in(now, interval) / 1000):
                    await core.changed.wait()
                continue
            shards = ledger.observed_shards()
            keys = [owner_key(shard, config.consumer_group) for shard in shards]
            sent_at = core.clock()
            try:
                if client is None:
                    client = connect(config.redis_url, timeout_s=max(0.2, interval / 1000),
                                     retries=False)
                absent, owners = await trio.to_thread.run_sync(
                    observe, client, COORDINATOR_LEASE_KEY, keys)
            except Exception as exc:  # noqa: BLE001 - Redis down too: no look, no allowance
                log.info("member %s: cannot look at Redis for the coordinator lease: %r",
                         core.member_id, exc)
                ledger.outage.look_failed(sent_at)  # try again an interval later
                continue
            if absent:
                log.info("member %s: no coordinator holds the lease; processing %s on (D5)",
                         core.member_id, ", ".join(shards) or "nothing")
            core.apply(ledger.on_observation(Observation(
                sent_at=sent_at, key_absent=absent, owners=dict(zip(shards, owners, strict=True)))))
    finally:
        close = getattr(client, "close", None)
        if close is not None:
            close()


async def _watch_pushes(core: MemberCore, session: Session) -> None:
    async for push in session.pushes:
        if isinstance(push, AssignmentChanged) and push.member_id == core.member_id:
            core.heartbeat.due = True
            core.changed.fire()


async def _heartbeat_loop(core: MemberCore, session: Session, pacing: HeartbeatPacing) -> None:
    config, ledger = core.config, core.ledger
    join_topic = f"join {core.member_id}"  # per member: others of the group may be in
    faults = MemberFaults.from_environment()
    while True:
        core.heartbeat.due = False
        state = ledger.state
        if faults.no_rejoin and state.incarnation and state.member_epoch == JOIN_EPOCH \
                and not core.life.stop_requested.is_set():
            await core.life.stop_requested.wait()  # a test's fault: fenced, and never back (D6, D7)
        request, sent, actions = ledger.heartbeat(
            core.clock(), capacity=config.capacity, stream_prefix=config.stream_prefix,
            consumer_group=config.consumer_group)
        if config.retry is not None and (request.owned_shards is not None
                                         or request.member_epoch == JOIN_EPOCH):
            request = attrs.evolve(request, dead_letter_stream=config.retry.stream_for(
                config.stream_prefix, config.consumer_group))  # P2, on joins and full reports
        core.apply(actions)
        with trio.fail_after(pacing.answer_timeout_s(ledger, config.request_timeout_s)):
            response = await session.request(request)
        if not isinstance(response, HeartbeatResponse):
            log.error("member %s: heartbeat refused: %s", core.member_id, response)
        else:
            if response.status not in (Status.OK, Status.REVOKE_PENDING):
                log.info("member %s: heartbeat answered %s %s", core.member_id,
                         response.status, response.error or "")
            core.apply(ledger.on_response(sent, response, core.clock()))
            gc_control.freeze_after_startup()  # no-ops unless the process installed the policy
            gc_control.on_tick()
            if ledger.left:
                core.life.left.set()
                return
        beat = pacing.next_beat(ledger, core.clock())
        if beat.join_refused is not None:
            core.notices.say(join_topic, join_refused_line(
                config.coordinator_url, core.member_id, config.stream_prefix,
                config.consumer_group, beat.join_refused, config.instance_id))
        elif beat.join_taken:
            core.notices.clear(join_topic, f"member {core.member_id} joined group "
                               f"{config.consumer_group!r} on prefix {config.stream_prefix!r}")
        with trio.move_on_after(beat.wait_ms / 1000):
            await core.changed.wait_until(lambda: core.heartbeat.due)


async def leave(core: MemberCore) -> None:
    """Stop reading, drain in-flight work, then leave with epoch -1, or -2 for a static member
    unless asked to leave for good (S2; bounded in time)."""
    config, ledger = core.config, core.ledger
    core.apply(ledger.on_leave_requested(for_good=core.life.leave_for_good))
    with trio.move_on_after(config.drain_timeout_s):
        await core.changed.wait_until(lambda: not ledger.state.holds)
    if ledger.state.holds:
        core.apply(ledger.on_abandon("drain timed out on leave"))
    with trio.move_on_after(config.leave_timeout_s):
        await core.life.left.wait()
