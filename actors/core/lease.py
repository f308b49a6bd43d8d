"""The coordinator's lifecycle: its lease (D5), the store going back (K3, K4), K8's first look,
K10's outage latch, and the instance id it holds the lease under.

Pure: no trio, no Redis, `now` passed in. actors/app.py runs it: `CoordinatorLifecycle`
takes each event (the lease taken, a renewal's outcome, what the store said of a lapse, a
take-back, the store check, a fenced or failed write) and says what to do next; the shell
does the I/O and hands back what it found. `WriteHealth` is `/readyz`'s latch (K10).

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
from collections.abc import Callable

import attrs

from rsc.actors.core.records import PrefixSnapshot


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


# --- the coordinator instance id ---------------------------------------------------------


def instance_id(host: str, pid: int, nonce: str) -> str:
    """The value a coordinator writes into `rsc:coordinator:lease`: `<host>-<pid>-<nonce>`
    (a host name may hold dashes; the pid and the nonce do not)."""
    return f"{host}-{pid}-{nonce}"


def instance_host_pid(holder: str) -> tuple[str, int] | None:
    """The host and pid an instance id names (`instance_id`), None when it names none."""
    host, _, pid_text = holder.rpartition("-")[0].rpartition("-")
    if not pid_text.isdigit():
        return None
    return host, int(pid_text)


# --- K10: whether metadata writes work ----------------------------------------------------


@attrs.frozen
class OutageStarted:
    """K10: the first failed write of an outage (`store.unavailable`)."""

    error: str


@attrs.frozen
class OutageLasts:
    """K10: a reminder while the outage lasts (`store.still_unavailable`)."""

    seconds: float
    failures: int
    error: str


@attrs.frozen
class OutageEnded:
    """K10: writes succeeded for the latch since the last failure (`store.available`)."""

    seconds: float
    failures: int


OutageNotice = OutageStarted | OutageLasts | OutageEnded


@attrs.define
class WriteHealth:
    """K10: the outage of metadata writes, from its first failed write to the end of the latch.

    Ready again only once writes have succeeded for `latch_s` since the last failure, so a
    store failing every other write is one outage and `/readyz` does not flap; the outage is
    said once when it starts, at most every `reminder_s` while it lasts and once when it
    ends. Pure: `now` (s) passed in; each transition returns what to log (None: nothing).
    """

    reminder_s: float
    latch_s: float
    last_write_ok: bool = True
    down_since: float | None = None
    last_failure: float = 0.0
    last_reminder: float = 0.0
    failures: int = 0

    def failed(self, now: float, error: str) -> OutageNotice | None:
        self.last_write_ok = False
        self.failures += 1
        self.last_failure = now
        if self.down_since is None:
            self.down_since = self.last_reminder = now
            return OutageStarted(error)
        if now - self.last_reminder >= self.reminder_s:
            self.last_reminder = now
            return OutageLasts(round(now - self.down_since, 1), self.failures, error)
        return None

    def succeeded(self, now: float) -> OutageNotice | None:
        self.last_write_ok = True
        return self.settle(now)

    def settle(self, now: float) -> OutageNotice | None:
        """The outage ends once writes succeeded for the latch since the last failure."""
        if self.down_since is not None and self.last_write_ok \
                and now - self.last_failure >= self.latch_s:
            ended = OutageEnded(round(self.last_failure - self.down_since, 1), self.failures)
            self.down_since, self.failures = None, 0
            return ended
        return None

    @property
    def healthy(self) -> bool:
        return self.last_write_ok and self.down_since is None


# --- the coordinator's lifecycle: D5, K3, K4, K8 ------------------------------------------


class Next(enum.Enum):
    """What the lease loop does next, as the lifecycle says (each I/O step's result goes back
    to it: `lapse_found`, `retaken`, `store_checked`)."""

    READ_LAPSE_FACTS = "read lapse facts"  # the lease broke: who holds it, the stored epoch
    RETAKE = "retake"  # a plain lapse: take the key again under this epoch
    CHECK_STORE = "check store"  # K3: read back what the store must still hold
    HELD = "held"  # the lease is ours and the store has all it wrote: ready
    FAILED = "failed"  # the renewal failed: nothing learnt, the next tick tries again
    STEP_DOWN = "step down"  # the epoch ends: lapsed, taken, or the store went back


@attrs.define
class WentBack:
    """K3: a store found to have lost writes of coordinator epoch `epoch`, and what memory
    held of every prefix then (their rollback points), to write back."""

    epoch: int
    reason: str
    memory: dict[str, PrefixSnapshot]


@attrs.frozen
class EpochEnd:
    """How one coordinator epoch ended, and what comes next (D5, K3)."""

    epoch: int
    reason: str
    verdict: LapseVerdict
    writes_back: bool  # K3: the next epoch writes memory back rather than restoring from Redis

    @property
    def readiness(self) -> str:
        """Why `/readyz` says 503 until the next epoch served."""
        if self.writes_back:
            return f"the store went back ({self.reason}); writing it back from memory"
        return f"the coordinator lease lapsed ({self.reason})"

    @property
    def then(self) -> str:
        if self.writes_back:
            return ("sessions closed; writing every prefix back from memory under a new "
                    "coordinator epoch")
        return "sessions closed; restoring every prefix under a new coordinator epoch"


@attrs.define
class CoordinatorLifecycle:
    """One coordinator process, epoch after epoch: the decisions of D5, K3 and K4 (and K8's
    first look), as transitions. Pure: no I/O, `now` (monotonic ms) passed in; the shell
    (actors/app.py) runs the I/O each transition asks for and hands back what it found.

    An epoch starts when the lease is taken (`lease_taken`); each tick's renewal goes to
    `renewal`, which says what to do next (`Next`): after a lapse, read the facts
    (`lapse_found`: `lapse_verdict`), take the key back (`retaken`: expiries wait a member
    lease TTL, H12), then check the store (`store_checked`, K3). `STEP_DOWN` ends the epoch;
    `epoch_ended` then says why and whether memory is written back under the next epoch (K3,
    K4: the store lost writes, and this coordinator served prefixes) or every prefix is
    restored from Redis (D5: another coordinator held the lease or ran meanwhile, which also
    drops a write-back still pending).
    """

    own_id: str
    lease_ms: float  # the coordinator lease (`rsc:coordinator:lease`)
    member_lease_ttl_ms: float  # a member's lease: the fresh lease after a lapse (H12)
    epoch: int = 0
    continuity: LeaseContinuity | None = None
    served: bool = False  # an epoch served: Redis answered this process once (no exit 1)
    went_back: WentBack | None = None  # K3: what the next epoch writes back, until it landed
    lapse_reason: str | None = None  # why the epoch ends, when not its lease's own word
    taken_back: str | None = None  # why the lease lapsed before the last time it was taken back

    # --- an epoch starts ---------------------------------------------------------------

    @property
    def writes_back(self) -> bool:
        """K3: the next epoch writes memory back (`went_back`)."""
        return self.went_back is not None

    def look(self, holder: str | None) -> str | None:
        """The holder a waiting coordinator waits on: a key still naming this process (an
        epoch of it that ended without releasing it, K3) is nobody's."""
        return None if holder == self.own_id else holder

    def look_failed(self, *, looked: bool) -> bool:
        """A waiting coordinator's look at Redis failed: True to give up (exit 1, D3), only at
        start while Redis never answered it; otherwise (a lapse, a write-back pending, K2,
        K4) the outage is waited out."""
        return not self.served and not self.writes_back and not looked

    def lease_taken(self, epoch: int, now: float, *, others_ran: bool) -> bool:
        """The lease is ours under `epoch` from `now`. Returns True when a pending write-back
        is dropped: another coordinator held the lease meanwhile, its state wins (K3)."""
        self.epoch = epoch
        self.continuity = LeaseContinuity(lease_ms=self.lease_ms, confirmed_at=now)
        self.lapse_reason = self.taken_back = None
        dropped = self.writes_back and others_ran
        if dropped:
            self.went_back = None
        return dropped

    def served_epoch(self) -> None:
        """The epoch restored (or wrote back) its prefixes and listens: nothing is pending."""
        self.served = True
        self.went_back = None

    # --- each tick's renewal -----------------------------------------------------------

    def _lease(self) -> LeaseContinuity:
        assert self.continuity is not None, "no epoch started"
        return self.continuity

    def renewal(self, sent_at: float, outcome: Renewal) -> Next:
        """A renewal sent at `sent_at` found `outcome` (FAILED: unanswered within D4's
        deadline, or failed)."""
        lease = self._lease()
        lease.renewal(sent_at, outcome)
        if outcome is Renewal.FAILED:
            return Next.FAILED
        return Next.CHECK_STORE if lease.broken is None else Next.READ_LAPSE_FACTS

    def lapse_found(self, verdict: LapseVerdict) -> Next:
        """What the store said of the lapse (`lapse_verdict`; STEP_DOWN when it said nothing)."""
        if verdict is LapseVerdict.TAKE_BACK:
            return Next.RETAKE
        self._lease().verdict = verdict
        return Next.STEP_DOWN

    def retaken(self, taken: bool, now: float) -> Next:
        """D5: the key was taken again at `now` (or not: someone ran after all, step down).
        Every member gets a fresh lease: no expiry for one member lease TTL (H12)."""
        lease = self._lease()
        if not taken:
            lease.verdict = LapseVerdict.TAKE_BACK
            return Next.STEP_DOWN
        self.taken_back = lease.broken
        lease.resume(now, self.member_lease_ttl_ms)
        return Next.CHECK_STORE

    def store_checked(self, lost: str | None) -> Next:
        """K3: why the store lost writes of this coordinator (None: it did not, or the check
        did not answer in time)."""
        if lost is None:
            return Next.HELD
        lease = self._lease()
        lease.broken = f"the store went back: {lost}"
        lease.verdict = LapseVerdict.STORE_WENT_BACK
        return Next.STEP_DOWN

    # --- an epoch ends -----------------------------------------------------------------

    def fenced(self, error: str) -> None:
        """A newer coordinator's epoch fenced a write of this one: its lease lapsed long ago."""
        self.lapse_reason = error
        self._lease().verdict = LapseVerdict.STEP_DOWN

    def rewrite_failed(self, error: str) -> bool:
        """The write-back (or the start) failed on the store: True when it is tried again
        under a new epoch (a write-back was pending), False when it is the start's error."""
        if not self.writes_back:
            return False
        self.lapse_reason = f"the rewrite failed: {error}"
        return True

    def epoch_ended(self, now: float, memory: Callable[[], dict[str, PrefixSnapshot]] | None
                    ) -> EpochEnd:
        """The epoch ended (its lease lapsed, was taken, or the store went back); whether the
        next one writes `memory()` back (K3: every prefix's rollback point, which holds all
        any answer revealed, H12; None: this epoch served no prefixes) or restores every
        prefix from Redis."""
        lease = self._lease()
        reason = self.lapse_reason or lease.lapse(now) or "the lease lapsed"
        verdict = lease.verdict or LapseVerdict.STEP_DOWN
        if not self.writes_back and verdict is LapseVerdict.STORE_WENT_BACK and memory is not None:
            self.went_back = WentBack(epoch=self.epoch, reason=reason, memory=memory())
        self.lapse_reason = None
        return EpochEnd(epoch=self.epoch, reason=reason, verdict=verdict,
                        writes_back=self.writes_back)


def looks_for_lost_store(*, store_id: str | None, from_clients: bool, writes_back: bool) -> bool:
    """K8: an epoch that knows no storeId and writes nothing back first looks whether the store
    holds one (none, and no metadata either: it was lost with the coordinator, and the clients
    present what they knew)."""
    return store_id is None and not from_clients and not writes_back


def writes_store_id(*, store_id: str | None, from_clients: bool) -> bool:
    """K8: the storeId is written (kept, or a new one) at the epoch's start unless it waits
    for the clients to present theirs."""
    return store_id is not None or not from_clients
