"""Where one prefix's answers and pushes go: reply slots, sessions, subscribers and watches.

Once the machine says `Deliver`, every request of the batch is answered as the machine
resolves it (H12), a describe with `watch` starts a watch, a listGroups gets its
summaries; then, if the checkpoint landed, what committed is pushed (H10: to the session
each member last beat on), routing changes go to every subscriber, and the group events
are logged and counted. Which heartbeat moves a member's push target and which describe
starts a watch are the machine's rules; this part only keeps the addresses.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from rsc.actors.core.group import Event
from rsc.actors.core.prefix import PrefixMachine
from rsc.actors.core.prefix_io import RESTORED_FROM_CLIENTS, Answer, Committed, Deliver
from rsc.actors.core.shard_reports import ShardLag
from rsc.actors.core.subscriptions import Admit, watch_refused
from rsc.actors.core.watch import Watch
from rsc.actors.logs import log_event
from rsc.actors.mailbox import SummariesRequest
from rsc.actors.ports import Outbox, PrefixMetrics, ReplySlot
from rsc.protocol import messages as m

log = logging.getLogger("rsc.coordinator")

Answered = tuple[ReplySlot | None, Answer, Outbox | None]
"""A request of the batch: where its answer goes, how the machine answers it, its session."""

_EVENT_NAMES = {"epoch": "group.epoch", "joined": "member.joined", "rejoined": "member.rejoined",
                "left": "member.left", "expired": "member.expired", "removed": "member.removed",
                "revoke_timeout": "member.removed", "fenced": "member.fenced",
                "revoked": "member.revoked", "away": "member.away", "returned": "member.returned",
                "group_expired": "group.expired"}
_WARNING_EVENTS = frozenset({"group_expired"})  # B6: a group and its offsets are gone


class Delivery:
    """One prefix's addresses (sessions, subscribers, watches) and what goes to them."""

    def __init__(self, prefix: str, *, push_enabled: bool = True,
                 metrics: PrefixMetrics | None = None) -> None:
        self.prefix = prefix
        self.push_enabled = push_enabled
        self.metrics = metrics
        # where to push each member (H10), and the reverse, to forget a closed session fast
        self.sessions: dict[tuple[str, str], Outbox] = {}
        self.session_members: dict[Outbox, set[tuple[str, str]]] = {}
        self.subscribers: set[Outbox] = set()
        self.watches: dict[Outbox, list[Watch]] = {}  # describeGroup with watch: true

    def deliver(self, machine: PrefixMachine, deliver: Deliver, answers: Sequence[Answered],
                summaries: Sequence[SummariesRequest], now_ms: Callable[[], int]) -> None:
        """Answer the batch (H12: as the machine resolves each), then push what committed."""
        durable = deliver.durable
        for reply, answer, session in answers:
            response = machine.resolve(answer, durable=durable)
            if session is not None and machine.starts_watch(answer.request, response):
                request = answer.request
                assert isinstance(request, m.DescribeGroup) and isinstance(response, m.GroupDescription)
                response = self._start_watch(session, request, response, now_ms())
            if reply is not None:
                reply.resolve(response)
        for summary in summaries:
            summary.answer(machine.summaries(deliver.totals))
        if deliver.committed is not None:
            self._after_commit(machine, deliver.committed)

    def _after_commit(self, machine: PrefixMachine, committed: Committed) -> None:
        """Pushes (H10), routing notifications, logs and metrics, once the state is durable."""
        for event in committed.prefix_events:
            log_event(log, event.kind, prefix=self.prefix, **event.fields)
            if event.kind == RESTORED_FROM_CLIENTS and self.metrics is not None:
                self.metrics.observe_restored_from_clients()
        metrics = self.metrics
        if committed.migration_retired and metrics is not None:
            metrics.migration_finished(self.prefix)
        for name, group_event in committed.events:
            _log_group_event(self.prefix, name, group_event)
            if metrics is not None:
                metrics.group_event(self.prefix, name, group_event)
        if metrics is not None:
            for name in committed.groups:
                group = machine.groups.get(name)
                if group is not None:
                    metrics.set_group_state(self.prefix, name, group)
            for name in committed.deleted:
                metrics.group_forgotten((self.prefix, name))
        if self.push_enabled:
            for push in committed.pushes:
                session = self.sessions.get((push.consumer_group, push.member_id))
                if session is not None:
                    session.push(push)
        if committed.routing is not None:
            for session in list(self.subscribers):
                session.push(committed.routing)

    # --- watches ---------------------------------------------------------------------

    def _start_watch(self, session: Outbox, request: m.DescribeGroup,
                     response: m.GroupDescription, now_ms: int) -> m.Response:
        """B4: a new watch takes one of the session's places; a repeat (the session watches
        the group already) is answered and holds nothing new; past the cap it is refused."""
        holdings = session.holdings
        admitted = holdings.admit_watch(self.prefix, request.consumer_group)
        if admitted is Admit.REFUSED:
            return watch_refused(request, holdings.max_watches)
        if admitted is Admit.NEW:
            self.watches.setdefault(session, []).append(Watch(request, response, now_ms))
        return response

    def watched(self) -> list[Watch]:
        return [watch for watches in self.watches.values() for watch in watches]

    async def refresh_watches(self, machine: PrefixMachine, now_ms: Callable[[], int],
                              read_lag: Callable[[str], Awaitable[list[ShardLag] | None]]) -> None:
        """Push to every due watch whose description changed (the rules: actors/core/watch.py).
        B4: each group is described (and its lag read) once per pass, however many sessions
        watch it."""
        described: dict[str, m.GroupDescription] = {}
        for session, watches in list(self.watches.items()):
            for watch in list(watches):
                now = now_ms()
                if not watch.due(now):
                    continue
                group = watch.request.consumer_group
                description = described.get(group)
                if description is None:
                    lags = await read_lag(group) if group in machine.groups else None
                    description = described[group] = machine.describe(watch.request, now, lags)
                push = watch.offer(description, now)
                if push is not None:
                    session.push(push)
                if watch.over:
                    watches.remove(watch)
                    session.holdings.watch_ended(self.prefix, group)
            if not watches:
                self.watches.pop(session, None)

    # --- sessions ----------------------------------------------------------------------

    def track(self, key: tuple[str, str], session: Outbox | None) -> None:
        """H10: `key`'s pushes go to `session` now (None: nowhere, it left)."""
        old = self.sessions.get(key)
        if old is session:
            return
        if old is not None:
            self.session_members[old].discard(key)
            del self.sessions[key]
        if session is not None:
            self.sessions[key] = session
            self.session_members.setdefault(session, set()).add(key)

    def subscribe(self, *sessions: Outbox) -> None:
        """These sessions get every routing change of the prefix (getRouting with subscribe)."""
        self.subscribers.update(sessions)

    def take_over(self, old: Delivery) -> None:
        """A reload: members keep getting hints, subscribers their routing and watchers their
        descriptions."""
        self.subscribers.update(old.subscribers)
        for session, watches in old.watches.items():
            self.watches.setdefault(session, []).extend(watches)
        for key, session in old.sessions.items():
            self.sessions.setdefault(key, session)
            self.session_members.setdefault(session, set()).add(key)

    def forget(self, session: Outbox) -> None:
        self.subscribers.discard(session)
        self.watches.pop(session, None)
        for key in self.session_members.pop(session, ()):
            del self.sessions[key]


def _log_group_event(prefix: str, group: str, event: Event) -> None:
    fields: dict[str, Any] = {"prefix": prefix, "group": group}
    if event.member_id:
        fields["member"] = event.member_id
    if event.kind == "revoke_timeout":
        fields["reason"] = "revoke_timeout"
    level = logging.WARNING if event.kind in _WARNING_EVENTS else logging.INFO
    log_event(log, _EVENT_NAMES.get(event.kind, event.kind), level=level, **fields,
              **event.fields)
