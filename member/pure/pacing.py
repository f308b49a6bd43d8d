"""When the next heartbeat goes, and what a refused join means for it (pure; `now` passed in).

After every round trip the heartbeat shell asks `HeartbeatPacing.next_beat`:

- a regular heartbeat waits the coordinator's `heartbeatIntervalMs` (else the
  member's default), shortened by up to `jitter` of it: never later than the
  interval, so the lease arithmetic is unchanged, and members answered all at
  once drift apart again;
- A1: after a join refused by a cap the member holds nothing and waits a
  backoff instead (doubling up to the maximum), and the refusal is to be said
  (D3); the first join taken after refusals resets the backoff and is said too;
- D1: never later than the lease deadline (or the end of a D5 allowance), so a
  member with nothing to do still fences itself in time.

And how long the shell waits on the coordinator (D5, D6):

- a session that does not open within `connect_timeout_s` (twice the heartbeat
  interval, 1 s to 10 s) is given up, and so is a heartbeat unanswered after
  `answer_timeout_s` (the lease less an interval and a second: 6 s at the defaults), so
  one lost answer never costs the lease;
- the next attempt waits `reconnect_delay_s`, doubling from 50 ms but never past one
  heartbeat interval (nor 1 s), so a member whose coordinator answers again is back in
  its group well within the fresh lease it was given.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import attrs

from rsc.common.backoff import HEARTBEAT_RECONNECT, Backoff
from rsc.member.pure.ledger import Ledger
from rsc.protocol import Status


def jittered(interval_ms: float, jitter: float, draw: Callable[[], float] = random.random) -> float:
    """The wait before a regular heartbeat: the interval shortened by up to `jitter` of it."""
    return interval_ms * (1 - jitter * draw())


@attrs.frozen
class NextBeat:
    """What the heartbeat shell does until the next heartbeat.

    wait_ms: how long to wait (unless a push or the ledger asks for one sooner);
    join_refused: the cap (A1) that refused the join, to be said; None otherwise;
    join_taken: a join was taken after refusals, to be said once.
    """

    wait_ms: float
    join_refused: Status | None = None
    join_taken: bool = False


class HeartbeatPacing:
    """The heartbeat schedule of one member."""

    def __init__(self, *, default_interval_ms: float, jitter: float, join_retry_initial_s: float,
                 join_retry_max_s: float, draw: Callable[[], float] = random.random) -> None:
        self.default_interval_ms = default_interval_ms
        self.jitter = jitter
        self._draw = draw
        self._join_backoff = Backoff(join_retry_initial_s,
                                     max(join_retry_initial_s, join_retry_max_s), jitter=draw)
        self._refused = False  # a refusal was said and no join taken since
        self._reconnect = HEARTBEAT_RECONNECT.start(jitter=draw)

    def connect_timeout_s(self, ledger: Ledger) -> float:
        """How long a session may take to open (then it failed: D5, and try again)."""
        return min(10.0, max(1.0, 2 * ledger.heartbeat_interval_ms / 1000))

    def answer_timeout_s(self, ledger: Ledger, request_timeout_s: float) -> float:
        """How long a heartbeat waits for its answer before the session is given up: long
        enough for a metadata write the coordinator abandons (D4, a third of the lease), short
        enough that a retry on a new session still lands inside the lease its last accepted
        heartbeat (at most an interval older) gave (an answer lost on a half-open connection
        must not fence the member): the lease less an interval and up to a second, at least
        one interval."""
        interval, lease = ledger.heartbeat_interval_ms, ledger.lease_ttl_ms
        timeout_ms = max(interval, lease - interval - min(1000.0, interval))
        return min(request_timeout_s, timeout_ms / 1000)

    def reconnect_delay_s(self, ledger: Ledger) -> float:
        """The wait before the next attempt at a session (D5: never past one interval)."""
        return min(self._reconnect.next(), ledger.heartbeat_interval_ms / 1000)

    def session_opened(self) -> None:
        """A session opened: the next failure waits the shortest delay again."""
        self._reconnect.reset()

    def next_beat(self, ledger: Ledger, now: float) -> NextBeat:
        """The wait after a heartbeat round trip at `now` (ms), given what the ledger holds."""
        state = ledger.state
        wait_ms = jittered(float(state.heartbeat_interval_ms or self.default_interval_ms),
                           self.jitter, self._draw)
        refused_by = state.join_refused
        taken = False
        if refused_by is not None:  # A1: hold nothing, rejoin after a backoff
            self._refused = True
            wait_ms = self._join_backoff.next() * 1000
        elif state.joined:
            self._join_backoff.reset()
            taken, self._refused = self._refused, False
        deadline = ledger.lease_deadline(now)
        if deadline is not None:  # D1: wake at the lease deadline: fence, then rejoin
            wait_ms = max(0.0, min(wait_ms, deadline - now))
        return NextBeat(wait_ms=wait_ms, join_refused=refused_by, join_taken=taken)
