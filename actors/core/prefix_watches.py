"""Which `describeGroup` watches a batch concerns, and which requests start one. Pure.

- A `describeGroup` with `watch: true` starts a watch only when it was answered
  OK (an unknown group or an unavailable store watches nothing).
- A batch that changed routing, migration or retention (or rolled back)
  concerns every group's description; otherwise only the groups whose records
  or effects it changed, whose settings changed, or that were registered or
  deleted. A watch looks again only when told (the push rules: actors/core/watch.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rsc.actors.core.group import Effects
from rsc.actors.core.records import Changes
from rsc.actors.core.watch import Watch
from rsc.protocol import messages as m
from rsc.protocol.errors import Status


def starts_watch(request: m.Request, response: m.Response) -> bool:
    """A `describeGroup` with `watch: true` answered OK starts a watch."""
    return (isinstance(request, m.DescribeGroup) and request.watch
            and isinstance(response, m.GroupDescription) and response.status == Status.OK)


class Described:
    """The groups whose description may have changed since `take`."""

    def __init__(self) -> None:
        self.groups: set[str] = set()
        self.every = False

    def note(self, changes: Changes, effects: Mapping[str, Effects]) -> None:
        """Which descriptions this batch's checkpoint may have changed."""
        if changes.routing_changed or changes.migration_changed or changes.retention is not None:
            self.every = True  # every group's routing, migration and retention
        elif not self.every:
            self.groups.update(changes.groups)  # settings changed, registered or deleted
            self.groups.update(name for name, effect in effects.items()
                               if effect.dirty or effect.events)

    def take(self) -> tuple[bool, frozenset[str]]:
        """(every group, or these groups) whose description may differ since the last call."""
        described = (self.every, frozenset(self.groups))
        self.every, self.groups = False, set()
        return described

    def mark(self, watches: Iterable[Watch]) -> None:
        """Tell the watches of the groups changed since the last call (`take`) to look again."""
        every, groups = self.take()
        for watch in watches:
            if every or watch.request.consumer_group in groups:
                watch.changed = True
