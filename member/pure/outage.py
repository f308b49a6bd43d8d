"""D5, the member side: the allowance to go on processing while no coordinator is alive.

Pure: no trio, no Redis, `now` passed in.

docs/protocol.md, Data plane rules, D5. While its heartbeats fail (one
unanswered after a heartbeat interval, or a session that cannot be opened)
the member looks at its own Redis at least once per heartbeat interval: the
coordinator lease key and the owner records of the shards it holds, in one
round trip (`Observation`). Then:

- the key absent (no coordinator alive): each shard whose owner record still
  names this member may be processed until one lease TTL after the
  observation was sent; every such observation extends it;
- the key held (a live coordinator this member cannot reach): no extension,
  but what was allowed is not cut short; D1 stands;
- an owner record cleared or naming another member ends the allowance of
  that shard (the shell then stops the shard: its acks would be refused).

Time is passed in (`now`, monotonic milliseconds, the clock of D1), and an
observation counts from when it was sent, like a heartbeat's lease, so a
member frozen between sending and reading it never stretches its allowance.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

COORDINATOR_LEASE_KEY = "rsc:coordinator:lease"  # the coordinator's key (its store writes it)


@attrs.frozen
class Observation:
    """One look at the member's Redis: the lease key and the owner records, one round trip.

    sent_at: when the round trip was sent (ms, monotonic);
    key_absent: the coordinator lease key does not exist;
    owners: per shard asked about, the memberId its owner record names (None: cleared).
    """

    sent_at: float
    key_absent: bool
    owners: Mapping[str, str | None]


class OutageAllowance:
    """The D5 books of one member: per shard, until when it may be processed without a lease."""

    def __init__(self, member_id: str) -> None:
        self.member_id = member_id
        self._until: dict[str, float] = {}
        # the last observation found no coordinator: a member whose allowance ran out (it was
        # frozen, or Redis did not answer) waits for the next look instead of fencing itself
        self.coordinator_absent = False
        self.last_observed_at: float | None = None
        self._awaiting_since: float | None = None  # a heartbeat sent, not yet answered
        self._session_down = False  # the last attempt to open a session failed

    # --- when heartbeats fail ---------------------------------------------------------

    def heartbeat_sent(self, now: float) -> None:
        if self._awaiting_since is None:
            self._awaiting_since = now

    def heartbeat_answered(self, accepted: bool) -> None:
        """An answer arrived on a session: heartbeats work again. An accepted one renews D1, and
        the coordinator it came from is alive (a later D1 expiry fences as D1 says)."""
        self._awaiting_since = None
        self._session_down = False
        if accepted:
            self.coordinator_absent = False

    def session_failed(self) -> None:
        """A session could not be opened, or broke (its heartbeat is not answered)."""
        self._session_down = True
        self._awaiting_since = None

    def heartbeats_failing(self, now: float, interval_ms: float) -> bool:
        """D5: a heartbeat is unanswered after one heartbeat interval, or no session opens."""
        return self._session_down or (self._awaiting_since is not None
                                      and now - self._awaiting_since >= interval_ms)

    def observation_due(self, now: float, interval_ms: float) -> bool:
        """Look now: heartbeats fail and the last look is at least an interval old."""
        return self.heartbeats_failing(now, interval_ms) and (
            self.last_observed_at is None or now - self.last_observed_at >= interval_ms)

    def next_observation_in(self, now: float, interval_ms: float) -> float:
        """How long (ms) until a look could be due (the watcher's sleep)."""
        if self.last_observed_at is None:
            return interval_ms / 4
        return max(interval_ms / 4, self.last_observed_at + interval_ms - now)

    # --- observations -------------------------------------------------------------------

    def observe(self, observation: Observation, lease_ttl_ms: float) -> frozenset[str]:
        """Take in one look; returns the shards Redis records as someone else's (or nobody's):
        their allowance ended, and the member must stop them."""
        if self.last_observed_at is None or observation.sent_at > self.last_observed_at:
            self.last_observed_at = observation.sent_at
        self.coordinator_absent = observation.key_absent
        lost = frozenset(shard for shard, owner in observation.owners.items()
                         if owner != self.member_id)
        for shard in lost:
            self._until.pop(shard, None)
        if observation.key_absent:
            until = observation.sent_at + lease_ttl_ms
            for shard in observation.owners:
                if shard not in lost:
                    self._until[shard] = max(until, self._until.get(shard, until))
        return lost

    def look_failed(self, sent_at: float) -> None:
        """A look got no answer (Redis down too): no allowance; the next one an interval later."""
        self.last_observed_at = sent_at

    def allows(self, shard: str, now: float) -> bool:
        """D5: `shard` may be processed at `now` without an accepted heartbeat."""
        until = self._until.get(shard)
        return until is not None and now < until

    def any_allowed(self, shards: Iterable[str], now: float) -> bool:
        return any(self.allows(shard, now) for shard in shards)

    def forget(self, shards: Iterable[str]) -> None:
        """These shards are no longer held: their allowance goes with them."""
        for shard in shards:
            self._until.pop(shard, None)

    def deadline(self, shards: Iterable[str]) -> float | None:
        """The latest allowance over `shards` (None: none)."""
        return max((self._until[s] for s in shards if s in self._until), default=None)
