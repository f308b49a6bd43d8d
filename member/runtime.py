"""The member: one member's heartbeat, reader, workers, acker and lag shells in one nursery.

Every decision is the ledger's (ledger.py, over the reconciliation of
reconcile.py); the shells only move data between it, the coordinator session
and Redis:

- heartbeat.py: the session, heartbeats, pushes, the leave;
- reader.py: XREADGROUP (bounded BLOCK, one read kept ahead) and XAUTOCLAIM;
- workers.py: the handler, key-ordered, D1-admitted before every call;
- acker.py: batched acks through the owner-checking script, D1-admitted;
- lag.py: the lag gauge.

Redis calls go through the sync client in worker threads: one connection for
the blocking reader, one for the acker, one for the lag poll, one for the rest.
"""

from __future__ import annotations

import redis
import trio

from rsc.member.acker import run_acker
from rsc.member.config import MemberConfig
from rsc.member.core import AckObserver, EventCallback, MemberCore, ReadObserver
from rsc.member.heartbeat import leave, run_session
from rsc.member.lag import poll_lag
from rsc.member.ledger import Ledger
from rsc.member.message import Handler, Message, Queued, new_message, queued_entries
from rsc.member.reader import Reader
from rsc.member.reconcile import MemberState
from rsc.member.stats import MemberStats
from rsc.member.streams import connect, supports_xackdel
from rsc.member.trace import HandlerTrace
from rsc.member.workers import Workers

__all__ = ["AckObserver", "EventCallback", "Handler", "Member", "MemberConfig", "Message",
           "Queued", "ReadObserver", "new_message", "queued_entries"]


class Member:
    """One member of a group: `await member.run()` until `member.stop()` (clean leave).

    Cancelling `run` stops everything at once without leaving (the coordinator
    then expires the member after its lease).
    """

    def __init__(self, config: MemberConfig, handler: Handler, *,
                 on_event: EventCallback | None = None,
                 read_observer: ReadObserver | None = None,
                 ack_observer: AckObserver | None = None) -> None:
        self.config = config
        self.handler = handler
        self.core = MemberCore(config, on_event=on_event, read_observer=read_observer,
                               ack_observer=ack_observer, trace=HandlerTrace.from_environment())

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

    def stop(self) -> None:
        """Ask for a clean leave: stop reading, drain in-flight work, leave with epoch -1."""
        self.core.stop_requested.set()

    async def run(self, *, task_status: trio.TaskStatus[Member] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until `stop()` has drained and left; `started` once the first join is accepted."""
        core = self.core
        misc_client: redis.Redis = connect(self.config.redis_url)
        try:
            use_xackdel = await trio.to_thread.run_sync(supports_xackdel, misc_client)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run_session, core)
                nursery.start_soon(Reader(core, use_xackdel).run)
                nursery.start_soon(Workers(core, self.handler, misc_client).run)
                nursery.start_soon(run_acker, core, use_xackdel)
                nursery.start_soon(poll_lag, core, use_xackdel)
                with trio.CancelScope() as join_wait:
                    nursery.start_soon(_cancel_on, core.stop_requested, join_wait)
                    await core.joined.wait()
                task_status.started(self)
                await core.stop_requested.wait()
                await leave(core)
                nursery.cancel_scope.cancel()
        finally:
            misc_client.close()


async def _cancel_on(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
