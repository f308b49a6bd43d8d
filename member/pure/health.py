"""How a member is, for a health port and for `status()` (pure; `now` passed in).

docs/protocol.md D6 and D7. A member is *in its group* while it holds a member epoch the
coordinator gave it (joined, not fenced, not left); D5's outage keeps it in. Out of it, what
a probe should make of that depends on why:

- a coordinator answers and would admit it (no cap or duplicate refusal): D6 says it is in
  the group again within one lease TTL plus one heartbeat interval of the coordinator
  answering; past that it is stuck, and a restart is what cures it (`/healthz` 503);
- no coordinator answers (sessions fail, heartbeats go unanswered), or its join is refused
  by a cap (A1) or a live duplicate instanceId (S4): a restart cures nothing, so it stays
  healthy, and only `/readyz` says it is not serving;
- while it stops (the shutdown drain), it is healthy and not ready.

`MembershipHealth` is fed by the ledger: every heartbeat sent, every answer, every failed
session; `verdict` is the one place readiness and health are decided, for `rsc consume`'s
health port and the listeners' `status()` alike.

`may_take_messages` is the one rule of when a member, `rsc consume` or a producer may begin taking or
writing messages: once it reached what it needs (its group, its Redis, its routing) and its
Redis is known to be the coordinator's: the storeId checked, or none to check.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypedDict

import attrs

from rsc.protocol import Status

REFUSALS = frozenset({Status.GROUP_MAX_SIZE_REACHED, Status.GROUP_LIMIT_REACHED,
                      Status.UNRELEASED_INSTANCE_ID})


def may_take_messages(*, reached: bool, store_checked: bool, store_to_check: bool) -> bool:
    """Messages may be taken (or written): `reached` (joined; Redis answers; routing known)
    and this Redis is the coordinator's: its storeId `store_checked`, or no `store_to_check`
    (an older coordinator names none; see the module text)."""
    return reached and (store_checked or not store_to_check)


@attrs.frozen
class HealthVerdict:
    """`healthy`: `/healthz` 200 (else a restart should cure it); `ready`: `/readyz` 200;
    `reason`: one line naming the member and why (empty while both hold)."""

    healthy: bool
    ready: bool
    reason: str = ""


IN_GROUP = HealthVerdict(healthy=True, ready=True)


def combine(verdicts: Iterable[HealthVerdict]) -> HealthVerdict:
    """A process of several members: healthy while every one is, ready while every one is;
    the reason of the first that is not."""
    verdicts = list(verdicts)
    if not verdicts:
        return HealthVerdict(healthy=True, ready=False, reason="no members")
    healthy = all(v.healthy for v in verdicts)
    ready = all(v.ready for v in verdicts)
    sick = next((v for v in verdicts if not v.healthy), None)
    waiting = next((v for v in verdicts if not v.ready), None)
    first = sick or waiting
    reason = first.reason if first is not None else ""
    return HealthVerdict(healthy=healthy, ready=ready, reason=reason)


class MembershipHealth:
    """The clocks of one member's membership, and the D7 verdict on them."""

    def __init__(self, member_id: str, now: float) -> None:
        self.member_id = member_id
        self.out_since: float | None = now  # out of its group since (None: in it)
        self.answering_since: float | None = None  # heartbeats answered again since
        self.failing = False  # the last heartbeat or session attempt failed
        self.refused: Status | None = None  # the cap or duplicate that refused its join
        self.unavailable = False  # the last answer was COORDINATOR_NOT_AVAILABLE (D4: no store)
        self.stopping = False

    # --- what happened ---------------------------------------------------------------

    def membership(self, in_group: bool, now: float) -> None:
        """The member is in its group (`in_group`) as of `now`."""
        if in_group:
            self.out_since = None
        elif self.out_since is None:
            self.out_since = now

    def answered(self, now: float, status: Status) -> None:
        """A heartbeat answer arrived (any status: the coordinator answers)."""
        if self.failing or self.answering_since is None or self.unavailable:
            self.answering_since = now  # answering, and able to admit, since
        self.failing = False
        self.refused = status if status in REFUSALS else None
        self.unavailable = status == Status.COORDINATOR_NOT_AVAILABLE

    def failed(self) -> None:
        """A heartbeat went unanswered, or no session could be opened."""
        self.failing = True

    def stop(self) -> None:
        """The member drains and leaves (the shutdown drain)."""
        self.stopping = True

    # --- the verdict -------------------------------------------------------------------

    def verdict(self, now: float, *, lease_ttl_ms: float, heartbeat_interval_ms: float,
                coordinator_url: str = "the coordinator",
                has_routing: bool = True) -> HealthVerdict:
        """D7 at `now`; K8: in its group but its prefix without routing is not ready."""
        who = f"member {self.member_id}"
        if self.stopping:
            return HealthVerdict(healthy=True, ready=False,
                                 reason=f"{who} is stopping: draining and leaving its group")
        if self.out_since is None:
            if not has_routing:
                return HealthVerdict(healthy=True, ready=False, reason=(
                    f"{who} is in its group but its prefix has no routing (no shards): "
                    "no routing; waiting for it (K8)"))
            return IN_GROUP
        if self.refused is not None:
            return HealthVerdict(healthy=True, ready=False, reason=(
                f"{who} is not in its group: its join was refused ({self.refused.value}); "
                "retrying with backoff"))
        if self.failing or self.answering_since is None:
            return HealthVerdict(healthy=True, ready=False, reason=(
                f"{who} is not in its group: {coordinator_url} does not answer; retrying"))
        if self.unavailable:  # it answers, but cannot admit anyone: its store is out (D4)
            return HealthVerdict(healthy=True, ready=False, reason=(
                f"{who} is not in its group: {coordinator_url} answers "
                f"{Status.COORDINATOR_NOT_AVAILABLE.value} (it cannot reach its store, Redis); "
                "retrying"))
        out_for = now - max(self.out_since, self.answering_since)
        allowed = lease_ttl_ms + heartbeat_interval_ms
        if out_for < allowed:
            return HealthVerdict(healthy=True, ready=False,
                                 reason=f"{who} is not in its group yet: joining")
        return HealthVerdict(healthy=False, ready=False, reason=(
            f"{who} has been out of its group for {out_for / 1000:.1f} s while {coordinator_url} "
            f"answers and would admit it (D6 allows {allowed / 1000:g} s): a restart should cure it"))


class MemberStatusJson(TypedDict):
    """`MemberStatus.to_json()`: a member's part of a health route's answer."""

    memberId: str
    joined: bool
    memberEpoch: int
    shards: list[str]
    leaving: bool
    processed: int
    failed: int
    acked: int
    inFlight: int
    healthy: bool
    ready: bool
    reason: str | None


class ListenerStatusJson(TypedDict):
    """`ListenerStatus.to_json()`: what a health route returns."""

    healthy: bool
    ready: bool
    reason: str | None
    running: bool
    stopping: bool
    failure: str | None
    members: list[MemberStatusJson]


@attrs.frozen(kw_only=True)
class MemberStatus:
    """One member as a health route reports it."""

    member_id: str
    joined: bool  # in its group now (D7)
    member_epoch: int
    shards: tuple[str, ...]
    leaving: bool
    processed: int
    failed: int
    acked: int
    in_flight: int
    verdict: HealthVerdict

    def to_json(self) -> MemberStatusJson:
        return {"memberId": self.member_id, "joined": self.joined,
                "memberEpoch": self.member_epoch, "shards": list(self.shards),
                "leaving": self.leaving, "processed": self.processed, "failed": self.failed,
                "acked": self.acked, "inFlight": self.in_flight,
                "healthy": self.verdict.healthy, "ready": self.verdict.ready,
                "reason": self.verdict.reason or None}


@attrs.frozen(kw_only=True)
class ListenerStatus:
    """A listener's `status()`: the D7 verdict over its members (`healthy` for a liveness
    probe, `ready` for a readiness probe, `reason` naming the first member that is not),
    whether it runs, and each member."""

    healthy: bool
    ready: bool
    reason: str
    running: bool
    stopping: bool
    failure: str | None
    members: tuple[MemberStatus, ...]

    def to_json(self) -> ListenerStatusJson:
        return {"healthy": self.healthy, "ready": self.ready, "reason": self.reason or None,
                "running": self.running, "stopping": self.stopping, "failure": self.failure,
                "members": [member.to_json() for member in self.members]}


def listener_status(members: Iterable[MemberStatus], *, running: bool, stopping: bool,
                    failure: str | None) -> ListenerStatus:
    """The listener's verdict: its members' (`combine`); one that stopped on its own
    (`failure`) is unhealthy, one not running is not ready."""
    members = tuple(members)
    verdict = combine(member.verdict for member in members)
    healthy, ready, reason = verdict.healthy, verdict.ready and running, verdict.reason
    if failure is not None:
        healthy, ready, reason = False, False, f"the listener stopped: {failure}"
    elif not running and ready is False and not reason:
        reason = "the listener is not running"
    return ListenerStatus(healthy=healthy, ready=ready, reason=reason, running=running,
                          stopping=stopping, failure=failure, members=members)
