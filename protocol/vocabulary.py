"""The protocol's vocabulary, defined once: states, cutover, revoke states and special epochs.

Every state string of docs/protocol.md is a `StrEnum` member here, so a typo is a NameError
instead of a silent mismatch, and the codec rejects unknown strings by naming the field.
"""

from __future__ import annotations

import enum

JOIN_EPOCH = 0
"""`memberEpoch: 0` joins (or rejoins) a group."""

LEAVE_EPOCH = -1
"""`memberEpoch: -1` leaves a group; a leave's answer carries it too (H9)."""

TEMPORARY_LEAVE_EPOCH = -2
"""`memberEpoch: -2` is a static member's leave for a while; its answer carries it too (S2)."""


class GroupState(enum.StrEnum):
    """H4: `EMPTY` without members, `STABLE` when all are STABLE at the assignment epoch."""

    EMPTY = "EMPTY"
    STABLE = "STABLE"
    RECONCILING = "RECONCILING"


class MemberState(enum.StrEnum):
    """H4: what a member still has to do before it is at its group's assignment epoch (S2: AWAY)."""

    STABLE = "STABLE"
    UNREVOKED_SHARDS = "UNREVOKED_SHARDS"
    UNRELEASED_SHARDS = "UNRELEASED_SHARDS"
    AWAY = "AWAY"  # S2/S5: a static member away; its target waits for its return


class RevokeState(enum.StrEnum):
    """A `revokingShards` entry: still draining, or drained (no reads, nothing in flight)."""

    REVOKING = "REVOKING"
    REVOKED = "REVOKED"


class MigrationState(enum.StrEnum):
    """R2: a resharding drains the old version, then it is complete (and later retired)."""

    DRAINING = "DRAINING"
    COMPLETE = "COMPLETE"


class Cutover(enum.StrEnum):
    """R3: `parallel` assigns the new version at once; `ordered` only after the old drained."""

    PARALLEL = "parallel"
    ORDERED = "ordered"


class RetentionMode(enum.StrEnum):
    """T1/T3: `acked` removes what every group has acked; `none` removes only by the caps."""

    ACKED = "acked"
    NONE = "none"


STATE_ENUMS = (GroupState, MemberState, RevokeState, MigrationState, Cutover, RetentionMode)
"""Every string enum a message field can hold (the codec registers a strict hook for each)."""
