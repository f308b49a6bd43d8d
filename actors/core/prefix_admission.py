"""Which requests may create state on a prefix, and the group caps (A1, H13). Pure.

- Only a join (memberEpoch 0) and `setShardCount` may create what outlives the
  request (`may_create`); every other request on a prefix without state is
  answered at once and allocates nothing (`answer_without_state`): a leave is
  OK (H9), anything else UNKNOWN_GROUP, `getRouting` and `setRetention`
  UNKNOWN_STREAM.
- `--max-groups`: a `GroupBudget` shared by every prefix of one coordinator
  counts their groups; a join or a `setShardCount` that would register one
  more gets GROUP_LIMIT_REACHED.
- `--max-group-size`: a join of a new member into a full group gets
  GROUP_MAX_SIZE_REACHED. A live member rejoining is no new member, nor is a
  static member's return under a new memberId (S3), nor a duplicate instanceId
  (S4: that one is UNRELEASED_INSTANCE_ID, the group machine's answer).

Both refusals change nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, TypeGuard

import attrs

from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import JOIN_EPOCH

REFUSALS = {Status.GROUP_LIMIT_REACHED: "max_groups", Status.GROUP_MAX_SIZE_REACHED: "max_group_size"}
"""The cap behind each refusal status (the label of `rsc_joins_refused_total`)."""


@attrs.define
class GroupBudget:
    """A1: the groups of every prefix of one coordinator, against `--max-groups`."""

    max_groups: int
    total: int = 0
    counts: dict[str, int] = attrs.field(factory=dict)

    def count(self, prefix: str, groups: int) -> None:
        """`prefix` has `groups` groups now (registered or restored, deleted or rolled back)."""
        self.total += groups - self.counts.get(prefix, 0)
        if groups:
            self.counts[prefix] = groups
        else:
            self.counts.pop(prefix, None)

    @property
    def full(self) -> bool:
        return self.total >= self.max_groups


def may_create(request: m.Request) -> TypeGuard[m.SetShardCount | m.Heartbeat]:
    """A1, H13: only a join and `setShardCount` may create state that outlives the request."""
    return isinstance(request, m.SetShardCount) or (
        isinstance(request, m.Heartbeat) and request.member_epoch == JOIN_EPOCH)


def group_limit_reached(request: m.Request, budget: GroupBudget, prefix: str,
                        name: str) -> m.Response:
    """A1: GROUP_LIMIT_REACHED for a request that would register group `name`."""
    return request.error(
        Status.GROUP_LIMIT_REACHED,
        f"the coordinator already has {budget.total} groups, the most --max-groups "
        f"({budget.max_groups}) allows; group {name!r} of {prefix!r} was not created, "
        "nothing changed; retry with backoff")


def answer_without_state(request: m.Request, budget: GroupBudget | None) -> m.Response | None:
    """A1, H13: the answer to `request` on a prefix that holds nothing yet, or None when it
    creates state (a join, or a `setShardCount`, within `--max-groups`): start the prefix."""
    if isinstance(request, m.GetRouting) and request.known_routing is not None:
        return None  # K8: a client presents routing the prefix may adopt: start the prefix
    if isinstance(request, m.GetRouting | m.SetRetention):
        return request.unknown_stream()
    if not may_create(request):
        assert isinstance(request, m.GroupRequest)
        return request.unknown_group()
    name = request.consumer_group
    if name is not None and budget is not None and budget.full:
        return group_limit_reached(request, budget, request.stream_prefix,
                                   name)
    return None


class Joinable(Protocol):
    """What `Caps.join_refused` reads of a group (the group machine has both)."""

    @property
    def members(self) -> Mapping[str, object]: ...

    def join_adds_member(self, request: m.Heartbeat) -> bool: ...


@attrs.define
class Caps:
    """One prefix's view of the caps: the shared budget and the size limit."""

    prefix: str
    budget: GroupBudget | None = None
    max_group_size: int | None = None

    def count(self, groups: int) -> None:
        if self.budget is not None:
            self.budget.count(self.prefix, groups)

    def new_group_refused(self, request: m.Request, name: str) -> m.Response | None:
        """A1: GROUP_LIMIT_REACHED when one more group would pass `--max-groups`."""
        if self.budget is None or not self.budget.full:
            return None
        return group_limit_reached(request, self.budget, self.prefix, name)

    def join_refused(self, request: m.Heartbeat, group: Joinable) -> m.Response | None:
        """A1: GROUP_MAX_SIZE_REACHED for a join of a new member into a full group; a
        rejoin, a return (S3) or a duplicate instanceId (S4) adds no member."""
        members = group.members
        if (request.member_epoch != JOIN_EPOCH or self.max_group_size is None
                or len(members) < self.max_group_size or not group.join_adds_member(request)):
            return None
        return request.error(
            Status.GROUP_MAX_SIZE_REACHED,
            f"group {request.consumer_group!r} of {self.prefix!r} already has "
            f"{len(members)} members, the most --max-group-size "
            f"({self.max_group_size}) allows; nothing changed, retry the join with backoff")
