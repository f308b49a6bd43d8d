"""How many handler calls a message has had, as Redis counts them (P1 of docs/protocol.md; pure).

Redis keeps a delivery count on every pending entry; it rises on every read and
on every claim that returns bodies, whether or not a handler ran. With a
`RetryPolicy` the member makes it count handler calls only:

- a freshly read entry (XREADGROUP: count 1) gets its first handler call free,
  that read counted it;
- entries are claimed with `XAUTOCLAIM ... JUSTID`, which leaves the count alone,
  and their count is read with XPENDING;
- every other call is recorded first (`XCLAIM ... RETRYCOUNT count+1`, owner
  checked), so the count is never below the calls made, in all processes together;
- an entry whose count reached `max_deliveries` gets no call: it is dead-lettered.

`next_step` is that rule, for the worker shell to follow; the shell does the I/O.
"""

from __future__ import annotations

import attrs

CRASH_LOOP_COUNT = 10
"""Default mode (no policy): a claimed entry with this delivery count or more is logged and
counted (`rsc_member_redelivered_entries_total`), a crash loop made visible."""


@attrs.frozen
class CallHandler:
    """Call the handler; first record `record` as the entry's count (None: the first call of
    a freshly read entry, already counted by its read). `attempt` is the call's number."""

    record: int | None
    attempt: int


@attrs.frozen
class DeadLetterNow:
    """No call: the entry had `deliveries` handler calls already (or cannot succeed)."""

    deliveries: int


Step = CallHandler | DeadLetterNow


def next_step(count: int | None, max_deliveries: int, *, permanent: bool = False) -> Step:
    """What follows for an entry whose Redis delivery count is `count` (None: freshly read,
    no call yet). `permanent`: the last call failed in a way another call would repeat."""
    if count is None:
        return CallHandler(record=None, attempt=1)
    if permanent or count >= max_deliveries:
        return DeadLetterNow(deliveries=count)
    return CallHandler(record=count + 1, attempt=count + 1)


def is_crash_loop(count: int) -> bool:
    """Default mode: a claimed entry delivered this often is reported (P1)."""
    return count >= CRASH_LOOP_COUNT
