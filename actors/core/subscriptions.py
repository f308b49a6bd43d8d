"""B4: what one session may hold: at most 100 group watches and 100 routing subscriptions (pure).

A session's `describeGroup` watches (on `/v1/admin`) and `getRouting` subscriptions (on
`/v1/member`) are counted per session, across every prefix. A repeat of one the session
already holds is answered and holds nothing new; past the cap the request is answered
with `SUBSCRIPTION_LIMIT_REACHED` and holds nothing. A watch that ends (its group was
deleted) frees its place; the rest live as long as the session.
"""

from __future__ import annotations

import enum
from typing import TypeVar

import attrs

from rsc.protocol import messages as m
from rsc.protocol.errors import Status

Key = TypeVar("Key")

MAX_WATCHES_PER_SESSION = 100
MAX_ROUTING_SUBSCRIPTIONS_PER_SESSION = 100


class Admit(enum.Enum):
    """What a subscribing request gets: a new place, the one it holds, or nothing."""

    NEW = "new"
    REPEAT = "repeat"
    REFUSED = "refused"


@attrs.define
class Holdings:
    """The watches (prefix, group) and routing subscriptions (prefix) of one session."""

    watches: set[tuple[str, str]] = attrs.field(factory=set)
    routing: set[str] = attrs.field(factory=set)
    max_watches: int = MAX_WATCHES_PER_SESSION
    max_routing: int = MAX_ROUTING_SUBSCRIPTIONS_PER_SESSION

    def admit_watch(self, prefix: str, group: str) -> Admit:
        """A watch of (prefix, group) that would start now; NEW takes its place."""
        return _admit(self.watches, (prefix, group), self.max_watches)

    def over_watch_cap(self, prefix: str, group: str) -> bool:
        """A watch of (prefix, group) would be refused now (nothing is taken)."""
        return (prefix, group) not in self.watches and len(self.watches) >= self.max_watches

    def watch_ended(self, prefix: str, group: str) -> None:
        self.watches.discard((prefix, group))

    def admit_routing(self, prefix: str) -> Admit:
        """A routing subscription to `prefix`; NEW takes its place."""
        return _admit(self.routing, prefix, self.max_routing)


def _admit(held: set[Key], key: Key, limit: int) -> Admit:
    if key in held:
        return Admit.REPEAT
    if len(held) >= limit:
        return Admit.REFUSED
    held.add(key)
    return Admit.NEW


def watch_refused(request: m.DescribeGroup, limit: int) -> m.GroupDescription:
    return request.error(Status.SUBSCRIPTION_LIMIT_REACHED,
                         f"this session already watches {limit} groups, the most one session may; "
                         "end a watch (close its session) or use another session")


def routing_refused(request: m.GetRouting, limit: int) -> m.Routing:
    return request.error(Status.SUBSCRIPTION_LIMIT_REACHED,
                         f"this session already subscribes to the routing of {limit} prefixes, the "
                         "most one session may; use another session")
