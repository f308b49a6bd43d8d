"""A test hook: one JSON line per D1 decision (handler call or ack) of every member.

Set `RSC_MEMBER_TRACE=<path>` in a member process's environment and each
admission the ledger decides is appended to that file with the member's own
view: `{"t": <monotonic ms>, "what": "handler" | "ack", "memberId", "shard",
"memberEpoch", "generation", "leaseSentAt": <monotonic ms or null>,
"leaseTtlMs", "verdict": "allowed" | "not held" | "lease expired"}` ("what" may
also be "dead letter"; epoch and lease are as the ledger left them after the
decision). The clock is the system's monotonic clock, so lines of several
processes on one host compare. Off (no cost but one `is None` per message)
unless the variable is set.
"""

from __future__ import annotations

import json
import os
from typing import TextIO

from rsc.member.pure.ledger import Ledger, Verdict

TRACE_ENVIRONMENT = "RSC_MEMBER_TRACE"

_open_files: dict[str, TextIO] = {}


class HandlerTrace:
    """Appends one line per admission to a file shared by the process's members."""

    def __init__(self, file: TextIO) -> None:
        self._file = file

    @classmethod
    def from_environment(cls) -> HandlerTrace | None:
        """The trace named by RSC_MEMBER_TRACE, or None when it is not set."""
        path = os.environ.get(TRACE_ENVIRONMENT)
        if not path:
            return None
        file = _open_files.get(path)
        if file is None:
            file = _open_files[path] = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        return cls(file)

    def admission(self, what: str, ledger: Ledger, shard: str, generation: int, now: float,
                  verdict: Verdict) -> None:
        state = ledger.state
        self._file.write(json.dumps({
            "t": now, "what": what, "memberId": state.member_id, "shard": shard,
            "memberEpoch": state.member_epoch, "generation": generation,
            "leaseSentAt": state.last_accepted_sent_at,
            "leaseTtlMs": state.lease_ttl_ms or ledger.default_lease_ttl_ms,
            "verdict": verdict.value}, separators=(",", ":")) + "\n")
