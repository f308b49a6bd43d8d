"""Lease continuity: whether this coordinator held its lease without a gap.

Pure: no trio, no Redis, `now` passed in.

docs/protocol.md, Data plane rules, D5. The coordinator renews the key
`rsc:coordinator:lease` every tick; the key lapses `lease_ms` after the last
renewal Redis ran. A coordinator that was frozen (SIGSTOP, a stalled VM) or
could not renew for longer than that may have been taken for dead: members
went on under D5 without heartbeats, so heartbeats older than the gap prove
nothing. The lease is continuous at `now` while the last renewal that found
the lease ours was sent less than `lease_ms` before (a monotonic-clock jump
over the lease is a lapse), and no renewal found it lapsed or taken.

After a lapse the coordinator expires nobody on the heartbeats it saw before
it. When nobody else ran meanwhile (the epoch counter still names it) it
takes the key again at once and `resume`s: expiry (H6, H14) waits one member
lease TTL from then, which is exactly a fresh lease for every member (H12),
while its sessions stay open. When another coordinator took the lease or ran
meanwhile, it closes everything and waits for the lease, then restores as
after a restart under a new coordinator epoch.
"""

from __future__ import annotations

import enum

import attrs


class Renewal(enum.Enum):
    """What one renewal found."""

    RENEWED = "renewed"  # the key named this coordinator; its TTL is set again
    LAPSED = "lapsed"  # the key was gone
    TAKEN = "taken"  # the key names another coordinator
    FAILED = "failed"  # no answer (Redis down, timeout): nothing learnt


@attrs.define
class LeaseContinuity:
    """The lease of one coordinator epoch, as its renewals found it."""

    lease_ms: float
    confirmed_at: float  # when the last renewal that found the lease ours was sent (ms)
    broken: str | None = None  # why the lease is known lapsed, None while unknown
    expiry_from: float = 0.0  # no expiry before this (ms): fresh leases after a lapse
    verdict: LapseVerdict | None = None  # what the store said of the lapse that ended it

    def renewal(self, sent_at: float, outcome: Renewal) -> None:
        """A renewal sent at `sent_at` came back with `outcome`."""
        if self.broken is not None:
            return
        if outcome is Renewal.RENEWED:
            if sent_at - self.confirmed_at >= self.lease_ms:
                self.broken = (f"no renewal for {sent_at - self.confirmed_at:.0f} ms, "
                               f"past the {self.lease_ms:.0f} ms lease")
            else:
                self.confirmed_at = max(self.confirmed_at, sent_at)
        elif outcome is Renewal.LAPSED:
            self.broken = "the renewal found the lease lapsed"
        elif outcome is Renewal.TAKEN:
            self.broken = "the renewal found the lease taken by another coordinator"

    def holds(self, now: float) -> bool:
        """Continuous at `now`: the heartbeats seen so far are all there is to know."""
        return self.broken is None and now - self.confirmed_at < self.lease_ms

    def expiry_allowed(self, now: float) -> bool:
        """Expiries (H6, H14) may run at `now`: the lease is continuous, and a lapse it was
        taken again after is at least one member lease TTL back."""
        return self.holds(now) and now >= self.expiry_from

    def resume(self, now: float, member_lease_ttl_ms: float) -> None:
        """The lapsed lease was taken again at `now` by this coordinator (nobody else ran):
        every member gets a fresh lease from now (H12): no expiry before one TTL passed."""
        self.broken = None
        self.confirmed_at = now
        self.expiry_from = now + member_lease_ttl_ms

    def lapse(self, now: float) -> str | None:
        """Why the lease is not continuous at `now` (None while it is)."""
        if self.broken is not None:
            return self.broken
        if now - self.confirmed_at >= self.lease_ms:
            return (f"no renewal for {now - self.confirmed_at:.0f} ms, past the "
                    f"{self.lease_ms:.0f} ms lease")
        return None


class LapseVerdict(enum.Enum):
    """What a coordinator does when it finds its lease lapsed (D5), by what Redis holds."""

    TAKE_BACK = "take back"  # a plain lapse: nobody ran meanwhile, the store has all it wrote
    STORE_WENT_BACK = "store went back"  # the store lost writes it made (K3)
    STEP_DOWN = "step down"  # another coordinator holds the lease, or ran meanwhile


def lapse_verdict(*, own_epoch: int, stored_epoch: int | None, holder: str | None,
                  own_id: str) -> LapseVerdict:
    """D5: the stored coordinator epoch equal to this one's, and the lease key absent or
    ours: take the lease back; lower or missing: the store went back (K3); higher, or the
    key held by another coordinator: step down, wait, and restore as after a restart."""
    if holder is not None and holder != own_id:
        return LapseVerdict.STEP_DOWN
    if stored_epoch is None or stored_epoch < own_epoch:
        return LapseVerdict.STORE_WENT_BACK
    if stored_epoch > own_epoch:
        return LapseVerdict.STEP_DOWN
    return LapseVerdict.TAKE_BACK


@attrs.define
class Takeover:
    """D5: when a coordinator that waits for the lease may take it.

    At once when nobody holds it at start, or after the holder it waited on released it
    (a clean stop marks the release); otherwise only once the key has been absent for one
    full lease TTL, so a live holder whose store went back (K3), which writes its key again
    within a tick, is never displaced. Pure: `now` (ms) passed in.
    """

    lease_ttl_ms: float
    waited_on: str | None = None  # the holder this coordinator saw last
    absent_since: float | None = None

    def may_take(self, now: float, holder: str | None, released_by: str | None) -> bool:
        """Whether to try for the lease now, given the key's `holder` (None: absent) and
        whom the release marker names."""
        if holder is not None:
            self.waited_on, self.absent_since = holder, None
            return False
        if self.waited_on is None or released_by == self.waited_on:
            return True
        if self.absent_since is None:
            self.absent_since = now
        return now - self.absent_since >= self.lease_ttl_ms


def waiting_line(holder: str | None, redis_url: str, lease_ms: float) -> str:
    """The line a waiting coordinator prints every 10 s (D5)."""
    return (f"waiting: coordinator {holder or '(unknown)'} holds the lease on {redis_url}; "
            f"taking over when it stops, or once its lease lapsed ({lease_ms / 1000:g} s without "
            "renewal) and stayed absent for a lease TTL")
