"""Faults a test switches on in a member process, to prove that what they break is noticed.

`RSC_MEMBER_FAULT=no-rejoin`: once fenced, the member never sends its rejoin (the bug D6
forbids: a member alive and out of its group while its coordinator answers). The health
port must then turn `/healthz` 503 within one lease TTL plus one heartbeat interval (D7).
Unset (the default, and always in production) nothing changes.
"""

from __future__ import annotations

import os

import attrs

FAULT_ENVIRONMENT = "RSC_MEMBER_FAULT"
KNOWN = frozenset({"no-rejoin"})


@attrs.frozen
class MemberFaults:
    """Which faults are on (none by default)."""

    no_rejoin: bool = False

    @classmethod
    def from_environment(cls) -> MemberFaults:
        names = {name.strip() for name in os.environ.get(FAULT_ENVIRONMENT, "").split(",")
                 if name.strip()}
        unknown = names - KNOWN
        if unknown:
            raise ValueError(f"{FAULT_ENVIRONMENT}: unknown fault {sorted(unknown)[0]!r}; "
                             f"known: {', '.join(sorted(KNOWN))}")
        return cls(no_rejoin="no-rejoin" in names)
