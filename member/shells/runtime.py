"""The member: one member's heartbeat, reader, workers, acker and lag shells in one nursery.

Every decision is the ledger's (ledger.py, over the reconciliation of
reconcile.py); the shells only move data between it, the coordinator session
and Redis:

- heartbeat.py: the session, heartbeats, pushes, the leave;
- reader.py: XREADGROUP (bounded BLOCK, one read kept ahead) and XAUTOCLAIM;
- workers.py: the handler, key-ordered, D1-admitted before every call;
- acker.py: batched acks through the owner-checking script, D1-admitted;
- lag.py: the lag gauge.

Before anything else the member asks its Redis whether it has XACKDEL (a
Redis that does not answer is retried with backoff, and a warning says so).
The first heartbeat answer whose routing carries `storeId` has it checked
against the member's own Redis before the first read: another Redis stops the
member (it leaves, then `run` raises `StoreMismatch` naming both URLs).

Redis calls go through the sync client in worker threads: one connection for
the blocking reader, one for the acker, one for the lag poll, one for the rest.
"""

from __future__ import annotations

from collections.abc import Callable

import redis
import trio

from rsc.common.permission_probe import MEMBER_PROBES, probe_permissions
from rsc.member.config import MemberConfig
from rsc.member.core import AckObserver, EventCallback, InstanceFenced, MemberCore, ReadObserver
from rsc.member.message import Handler, Message, Queued, queued_entries
from rsc.member.notices import Notices
from rsc.member.pure.budget import ReadBudget
from rsc.member.pure.health import MemberStatus, may_take_messages
from rsc.member.pure.ledger import Ledger
from rsc.member.pure.reconcile import MemberState
from rsc.member.redis_io.lag import poll_lag
from rsc.member.redis_io.redis_retry import RedisRetry
from rsc.member.redis_io.streams import StoreMismatch, connect, supports_xackdel
from rsc.member.shells.acker import run_acker
from rsc.member.shells.heartbeat import leave, run_session
from rsc.member.shells.reader import Reader
from rsc.member.shells.workers import Workers
from rsc.member.stats import MemberStats
from rsc.member.trace import HandlerTrace

__all__ = ["AckObserver", "EventCallback", "Handler", "InstanceFenced", "Member", "MemberConfig",
           "Message",
           "Queued", "ReadObserver", "StoreMismatch", "queued_entries"]

PROBE_TIMEOUT_S = 2.0  # start-up calls (XACKDEL probe, storeId) give up on a silent Redis


class Member:
    """One member of a group: `await member.run()` until `member.stop()` (clean leave).

    Cancelling `run` stops everything at once without leaving (the coordinator
    then expires the member after its lease). Problem lines (Redis not answering
    at start, a join refused by a cap) go to `notices` (default: rate-limited
    warnings of the `rsc.member.core` logger); a console tool passes its own, so
    a problem it says itself is said once.
    """

    def __init__(self, config: MemberConfig, handler: Handler, *,
                 on_event: EventCallback | None = None,
                 read_observer: ReadObserver | None = None,
                 ack_observer: AckObserver | None = None,
                 notices: Notices | None = None, read_budget: ReadBudget | None = None) -> None:
        self.config = config
        self.handler = handler
        self.core = MemberCore(config, on_event=on_event, read_observer=read_observer,
                               ack_observer=ack_observer, trace=HandlerTrace.from_environment(),
                               notices=notices, read_budget=read_budget)
        self.make_workers: Callable[..., Workers] = Workers  # (core, handler, misc client)

    @property
    def member_id(self) -> str:
        return self.config.member_id

    @property
    def ledger(self) -> Ledger:
        """The member's books and decisions (read it, never change it from outside)."""
        return self.core.ledger

    @property
    def state(self) -> MemberState:
        """The member's membership as the reconciliation last left it."""
        return self.core.ledger.state

    @property
    def stats(self) -> MemberStats:
        return self.core.stats

    def status(self) -> MemberStatus:
        """D7: is this member in its group now (`verdict.ready`), and if not, would a restart
        cure it (`verdict.healthy` False)? What `rsc consume --health-port` answers `/readyz`
        and `/healthz` by; with its epoch, shards and counters."""
        core, ledger = self.core, self.core.ledger
        state, stats = ledger.state, core.stats
        return MemberStatus(
            member_id=self.member_id, joined=ledger.in_group, member_epoch=state.member_epoch,
            shards=tuple(sorted(state.holds)), leaving=state.leaving,
            processed=stats.processed, failed=stats.failed, acked=stats.acked,
            in_flight=sum(ledger.in_flight.values()),
            verdict=ledger.health_verdict(core.clock(), self.config.coordinator_url))

    def stop(self, *, leave: bool = False) -> None:
        """Ask for a clean leave: stop reading, drain in-flight work, leave with epoch -1; a
        static member leaves with -2 and the group keeps its shards for it (S2), unless
        `leave=True` asks for a real leave (a scale-down)."""
        self.core.life.leave_for_good = self.core.life.leave_for_good or leave
        self.core.life.stop_requested.set()

    async def run(self, *, task_status: trio.TaskStatus[Member] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until `stop()` has drained and left; `started` once the first join is accepted
        (and the storeId its routing names is checked).

        Raises StoreMismatch (after leaving) when the member's Redis is not the
        coordinator's, InstanceFenced when a newer member took over its instanceId (S3).
        """
        core = self.core
        config = self.config
        misc_client: redis.Redis = connect(config.redis_url)
        probe: redis.Redis = connect(config.redis_url, timeout_s=PROBE_TIMEOUT_S, retries=False)
        try:
            server_xackdel = await self._until_redis_answers(probe, supports_xackdel)
            if server_xackdel is None:  # stopped before Redis answered: nothing was joined
                task_status.started(self)
                return
            core.server.xackdel = server_xackdel
            if await self._until_redis_answers(probe, _member_permissions) is None:  # K10
                task_status.started(self)
                return
            if not config.check_store_id:
                core.life.store_ok.set()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run_session, core)
                nursery.start_soon(self._check_store, probe)
                nursery.start_soon(Reader(core).run)
                nursery.start_soon(self.make_workers(core, self.handler, misc_client).run)
                nursery.start_soon(run_acker, core)
                nursery.start_soon(poll_lag, core)
                with trio.CancelScope() as join_wait:
                    nursery.start_soon(_cancel_on, core.life.stop_requested, join_wait)
                    await core.changed.wait_until(self._started)
                if core.life.fatal is None:
                    task_status.started(self)
                await core.life.stop_requested.wait()
                await leave(core)
                nursery.cancel_scope.cancel()
            if core.life.fatal is not None:
                raise core.life.fatal
        finally:
            misc_client.close()
            probe.close()

    def _started(self) -> bool:
        """Joined, and the storeId checked if the join's routing named one."""
        core = self.core
        return may_take_messages(reached=core.life.joined.is_set(), store_checked=core.life.store_ok.is_set(),
                         store_to_check=core.ledger.routed)

    def _redis_retry(self) -> RedisRetry:
        """Start-up calls retried while Redis fails (said as a rate-limited warning)."""
        return RedisRetry(self.config.redis_url, self.core.notices,
                          maximum_s=self.config.redis_retry_max_s)

    async def _until_redis_answers(self, client: redis.Redis,
                                   call: Callable[[redis.Redis], bool]) -> bool | None:
        """`call(client)` in a thread, retried with backoff while Redis fails; None when
        `stop()` came first."""
        return await self._redis_retry().call_until(lambda: call(client),
                                                    self.core.life.stop_requested)

    async def _check_store(self, client: redis.Redis) -> None:
        """Before the first read: the first storeId a heartbeat routing carries must be the
        one in this member's Redis; on a mismatch the member stops (leaves, then raises)."""
        core, config = self.core, self.config
        if core.life.store_ok.is_set():
            return
        ledger = core.ledger
        await core.changed.wait_until(lambda: ledger.routed)
        expected = ledger.store_id
        if expected is not None:
            try:
                if not await self._redis_retry().check_store(
                        client, expected, coordinator_url=config.coordinator_url,
                        stop=core.life.stop_requested):
                    return
            except StoreMismatch as exc:
                core.life.fatal = exc
                core.life.stop_requested.set()
                return
        core.life.store_ok.set()
        core.changed.fire()
        core.wake_reader()


def _member_permissions(client: redis.Redis) -> bool:
    """K10: every kind of command a member needs, tried once (NOPERM: Unrecoverable, exit 2)."""
    probe_permissions(client, MEMBER_PROBES, role="member")
    return True


async def _cancel_on(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
