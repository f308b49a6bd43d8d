"""The prefix actor's parts, each on its own: the mailbox (batching), the store calls (the D4
deadline) and the envelopes' answers. Their rules are the machine's (tests/test_prefix_flush.py);
these check that each part reports what happened."""

from __future__ import annotations

import threading

import pytest
import trio

from rsc.actors.mailbox import MAX_BATCH, MIN_BATCH, Envelope, Mailbox, SummariesRequest, Tick
from rsc.actors.redis_io.store import StoreError
from rsc.actors.redis_io.store_calls import StoreCalls, StoreStalled
from rsc.actors.server import Collect
from rsc.protocol import messages as m
from rsc.protocol.errors import Status


def test_a_batch_takes_what_waits_up_to_the_limit_and_never_waits() -> None:
    mailbox = Mailbox()
    mailbox.batch_limit = 3
    for now in range(5):
        mailbox.send_channel.send_nowait(Envelope(Tick(now), None, None))
    assert mailbox.queued == 5
    assert [envelope.request for envelope in mailbox.take()] == [Tick(0), Tick(1), Tick(2)]
    assert len(mailbox.take()) == 2 and mailbox.take() == []


def test_the_batch_limit_follows_the_measured_cost_per_request() -> None:
    mailbox = Mailbox()
    mailbox.measured(100, 0.05)  # 0.5 ms a request: 10 fit the 5 ms budget
    assert mailbox.batch_limit == MIN_BATCH
    mailbox.measured(100, 0.0001)
    assert mailbox.batch_limit == MAX_BATCH
    mailbox.measured(1000, 0.5)
    assert mailbox.batch_limit == MIN_BATCH


def test_a_failed_envelope_answers_its_slot_or_a_listgroups_with_no_groups() -> None:
    request = m.GetRouting(request_id=1, stream_prefix="orders")
    slot = Collect()
    envelope = Envelope(request, slot, None)
    assert not envelope.answered
    envelope.fail(request.error(Status.COORDINATOR_NOT_AVAILABLE, "reloading"))
    assert envelope.answered and slot.message is not None
    assert slot.message.status == Status.COORDINATOR_NOT_AVAILABLE
    summaries = SummariesRequest()
    asked = Envelope(summaries, None, None)
    assert not asked.answered
    asked.fail(request.error(Status.COORDINATOR_NOT_AVAILABLE, "reloading"))
    assert asked.answered and summaries.summaries == ()
    assert Envelope(Tick(0), None, None).answered


class _Store:
    """What StoreCalls needs of the store: told of a stall (readiness)."""

    def __init__(self) -> None:
        self.stalls: list[str] = []

    def stalled(self, error: str) -> None:
        self.stalls.append(error)


async def test_d4_a_call_past_its_deadline_is_abandoned_told_and_its_return_reported() -> None:
    store = _Store()
    abandoned: list[object] = []
    calls = StoreCalls("orders", store, 0.05, on_abandoned=abandoned.append)  # type: ignore[arg-type]
    release = threading.Event()

    def blocked() -> str:
        assert release.wait(10)
        return "landed"

    with pytest.raises(StoreStalled):
        await calls.call(trio.current_time() + 0.05, "metadata write", blocked)
    assert abandoned == ["metadata write"] and len(store.stalls) == 1
    assert calls.abandoned_calls == 1 and calls.returned() is None  # it still runs
    release.set()
    with trio.fail_after(10):
        while (returned := calls.returned()) is None:
            await trio.sleep(0.01)
    assert returned is True and calls.returned() is None  # reported once


async def test_an_io_failure_of_a_call_comes_back_as_a_store_error() -> None:
    calls = StoreCalls("orders", _Store(), 5, on_abandoned=lambda call: None)  # type: ignore[arg-type]

    def emfile() -> None:
        raise OSError(24, "Too many open files")

    with pytest.raises(StoreError, match="Too many open files"):
        await calls.call(trio.current_time() + 5, "drain check", emfile)
    assert calls.returned() is None and calls.abandoned_calls == 0
