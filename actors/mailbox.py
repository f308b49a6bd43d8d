"""A prefix actor's mailbox, and how many of its envelopes one batch takes (the batching).

The requests of one batch are handled without a yield (their answers wait for its one
checkpoint anyway), and so are its answers and pushes once it is durable; keeping those
two parts together near BATCH_BUDGET_S keeps the event loop free for the sessions' reads
and writes and for the other prefixes' batches: a pack of a thousand heartbeats goes out
in slices, not in one 60 ms block, and a busy group's churn does not hold a quiet group's
heartbeats behind it. The limit follows the measured cost per request, handling and
delivery (joins cost more than beats), between MIN_BATCH and MAX_BATCH.
"""

from __future__ import annotations

import attrs
import trio

from rsc.actors.ports import Outbox, ReplySlot
from rsc.protocol import messages as m

MAX_BATCH = 1024
MIN_BATCH = 32
BATCH_BUDGET_S = 0.005
MAILBOX_SIZE = 4096


@attrs.frozen
class Tick:
    now_ms: int
    retention: bool | None = None  # the schedule says the pass is due (None: count ticks)
    expire: bool = True  # False for a lease TTL after a lapse was taken back (D5): no expiry


class SummariesRequest:
    """listGroups asks a busy prefix for its groups, answered after the batch's checkpoint."""

    def __init__(self) -> None:
        self.summaries: tuple[m.GroupSummary, ...] = ()
        self.done = trio.Event()

    def answer(self, summaries: tuple[m.GroupSummary, ...]) -> None:
        self.summaries = summaries
        self.done.set()


@attrs.frozen
class Envelope:
    """A request in a prefix's mailbox, where its answer goes and its session (pushes)."""

    request: m.Request | SummariesRequest | Tick
    reply: ReplySlot | None
    session: Outbox | None

    @property
    def answered(self) -> bool:
        """Nothing waits for this envelope any more."""
        if isinstance(self.request, SummariesRequest):
            return self.request.done.is_set()
        return self.reply is None or self.reply.resolved

    def fail(self, response: m.Response) -> None:
        """Answer `response` (a failed actor's), or no groups to a listGroups."""
        if isinstance(self.request, SummariesRequest):
            self.request.answer(())
        elif self.reply is not None:
            self.reply.resolve(response)


class Mailbox:
    """The memory channel of one prefix, taken from in batches of `batch_limit`."""

    def __init__(self, size: int = MAILBOX_SIZE) -> None:
        self.send_channel, self.receive_channel = trio.open_memory_channel[Envelope](size)
        self.batch_limit = MAX_BATCH

    @property
    def queued(self) -> int:
        return self.send_channel.statistics().current_buffer_used

    def take(self) -> list[Envelope]:
        """The envelopes waiting now, at most `batch_limit`; never waits."""
        receive = self.receive_channel
        batch: list[Envelope] = []
        while len(batch) < self.batch_limit:
            try:
                batch.append(receive.receive_nowait())
            except trio.WouldBlock:
                break
        return batch

    def measured(self, requests: int, seconds: float) -> None:
        """The last batch handled `requests` in `seconds`: the next one takes what fits the
        budget."""
        per_request = seconds / max(requests, 1)
        self.batch_limit = max(MIN_BATCH, min(MAX_BATCH, int(BATCH_BUDGET_S / max(per_request, 1e-7))))
