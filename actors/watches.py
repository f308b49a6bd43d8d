"""describeGroup watches (PROTOCOL.md Admin, A1): what to look at, when, and what to push.

Pure: no I/O, no trio; `now_ms` is always passed in. A watch is one session's
`describeGroup` with `"watch": true`. The prefix machine says which groups may
have changed (`PrefixMachine.take_described`); only a watched group that
changed is described again, so a group nobody watches costs nothing, and a
watched one costs a description only after a change. Each watch looks at most
`MAX_PER_SECOND` times a second: a change inside the interval is looked at
when the interval is over, as the group is then (the latest state wins).

A look pushes when the description differs from the last one sent in any
field but `requestId`, `lastHeartbeatMsAgo` and `oldestPendingMs` (clocks that
move on their own). A push with status UNKNOWN_GROUP (the group was deleted)
ends the watch. Watches are kept by session and forgotten with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Generic, TypeVar

import attrs

from rsc.protocol import messages as m
from rsc.protocol.errors import Status

MAX_PER_SECOND = 10
INTERVAL_MS = 1000 // MAX_PER_SECOND

IGNORED_FIELDS = frozenset({"request_id", "last_heartbeat_ms_ago", "oldest_pending_ms"})
"""Fields whose change alone is no change of the description (at any depth)."""

S = TypeVar("S")  # a session: hashable (compared by identity)


def signature(description: m.GroupDescription) -> dict[str, Any]:
    """What two descriptions are compared by: everything but IGNORED_FIELDS."""
    return attrs.asdict(description, filter=lambda field, _value: field.name not in IGNORED_FIELDS)


@attrs.define(eq=False)
class Watch:
    """One session's watch of one group: what it was sent last, and when it may look again."""

    request: m.DescribeGroup
    sent: dict[str, Any]
    next_look_ms: int
    changed: bool = False

    @property
    def group(self) -> str:
        return self.request.consumer_group


class Watches(Generic[S]):
    """Every watch of one prefix actor, by group and by session (`S`: the session type)."""

    def __init__(self) -> None:
        self._by_group: dict[str, dict[S, Watch]] = {}
        self._by_session: dict[S, dict[str, Watch]] = {}
        self._changed: dict[Watch, S] = {}  # watches with a change not looked at yet

    def __len__(self) -> int:
        return sum(len(watches) for watches in self._by_session.values())

    def __bool__(self) -> bool:
        return bool(self._by_session)

    def __iter__(self) -> Iterator[tuple[S, Watch]]:
        for session, watches in self._by_session.items():
            for watch in watches.values():
                yield session, watch

    def watched(self, group: str) -> bool:
        return group in self._by_group

    def add(self, session: S, request: m.DescribeGroup, answer: m.GroupDescription,
            now_ms: int) -> Watch:
        """The session got `answer`; from now on it is pushed every change (a watch of the
        same group by the same session is replaced)."""
        self._remove(session, request.consumer_group)
        watch = Watch(request, signature(answer), now_ms + INTERVAL_MS)
        self._by_group.setdefault(watch.group, {})[session] = watch
        self._by_session.setdefault(session, {})[watch.group] = watch
        return watch

    def changed(self, groups: Iterable[str]) -> None:
        """These groups' descriptions may differ now (unwatched names cost a lookup each)."""
        for group in groups:
            for session, watch in self._by_group.get(group, {}).items():
                watch.changed = True
                self._changed[watch] = session

    def changed_all(self) -> None:
        """Every group may differ (routing, migration, a rollback)."""
        self.changed(list(self._by_group))

    def due(self, now_ms: int) -> list[tuple[S, Watch]]:
        """Watches with a change that may look now (at most MAX_PER_SECOND looks a second)."""
        return [(session, watch) for watch, session in self._changed.items()
                if watch.next_look_ms <= now_ms]

    def next_due_ms(self) -> int | None:
        """When the first changed watch may look; None while nothing changed."""
        return min((watch.next_look_ms for watch in self._changed), default=None)

    def offer(self, session: S, watch: Watch, description: m.GroupDescription,
              now_ms: int) -> m.GroupDescription | None:
        """Look at the group as it is now: the push to send (no requestId), or None.

        A push with status UNKNOWN_GROUP ends the watch.
        """
        watch.next_look_ms = now_ms + INTERVAL_MS
        watch.changed = False
        self._changed.pop(watch, None)
        current = signature(description)
        if current == watch.sent:
            return None
        watch.sent = current
        if description.status == Status.UNKNOWN_GROUP:
            self._remove(session, watch.group)
        return attrs.evolve(description, request_id=None)

    def forget(self, session: S) -> None:
        """The session closed: its watches go with it (A1)."""
        for group in list(self._by_session.get(session, {})):
            self._remove(session, group)

    def carry(self, other: Watches[S]) -> None:
        """Take over `other`'s watches (a reloaded actor), each looking again at once."""
        for session, watch in other:
            self._by_group.setdefault(watch.group, {})[session] = watch
            self._by_session.setdefault(session, {})[watch.group] = watch
        self.changed_all()

    def _remove(self, session: S, group: str) -> None:
        watch = self._by_session.get(session, {}).pop(group, None)
        if watch is None:
            return
        if not self._by_session[session]:
            del self._by_session[session]
        by_group = self._by_group[group]
        del by_group[session]
        if not by_group:
            del self._by_group[group]
        self._changed.pop(watch, None)
