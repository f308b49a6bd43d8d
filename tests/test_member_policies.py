"""Pure tests of the retry and dead-letter policy: what follows a failed handler call."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsc.common.dead_letters import CRASHED
from rsc.member.policies import (
    RetryPolicy,
    dead_letter_fields,
    default_dead_letter_stream,
)
from rsc.member.pure.attempts import CallHandler, DeadLetterNow, is_crash_loop, next_step
from rsc.member.shells.workers import error_text


def test_p1_the_first_call_of_a_freshly_read_entry_is_counted_by_its_read():
    assert next_step(None, 3) == CallHandler(record=None, attempt=1)


def test_p1_every_other_call_is_recorded_first_as_count_plus_one():
    assert next_step(1, 3) == CallHandler(record=2, attempt=2)
    assert next_step(2, 3) == CallHandler(record=3, attempt=3)


def test_p1_an_entry_at_the_limit_is_dead_lettered_without_a_call():
    assert next_step(3, 3) == DeadLetterNow(deliveries=3)
    assert next_step(7, 3) == DeadLetterNow(deliveries=7), "counted by an older, larger limit"


def test_p1_a_single_delivery_policy_dead_letters_after_the_first_failure():
    assert next_step(1, 1) == DeadLetterNow(deliveries=1)


def test_p1_the_default_limit_is_ten_and_the_default_mode_reports_ten_deliveries():
    assert RetryPolicy().max_deliveries == 10
    assert not is_crash_loop(9) and is_crash_loop(10) and is_crash_loop(11)


class FakePendingList:
    """A pending entry as Redis keeps it: a delivery count that reads and recorded calls set
    (XREADGROUP: 1; XAUTOCLAIM JUSTID: unchanged; XCLAIM RETRYCOUNT n: n)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def read(self, entry_id: str) -> None:
        self.counts[entry_id] = 1

    def claim_justid(self, entry_id: str) -> int:
        return self.counts[entry_id]

    def record(self, entry_id: str, count: int) -> None:
        self.counts[entry_id] = count

    def ack(self, entry_id: str) -> None:
        del self.counts[entry_id]


# what one handler call does, or what happens to a process around it
OUTCOMES = st.sampled_from(["ok", "raise", "crash", "lost before record", "lost before call"])


def run_lives(max_deliveries: int, lives: list[list[str]]) -> tuple[int, str | None, FakePendingList]:
    """The member's bookkeeping (next_step) over several processes' lives, one message:
    its handler calls, how it ended (handled, dead, or None: still pending)."""
    pending = FakePendingList()
    pending.read("1-0")
    calls, fresh = 0, True
    for life in lives:
        count = None if fresh else pending.claim_justid("1-0")
        fresh = False
        for outcome in life:
            step = next_step(count, max_deliveries)
            if isinstance(step, DeadLetterNow):
                pending.ack("1-0")  # after the dead letter is written
                return calls, "dead", pending
            if outcome == "lost before record":  # revoked, fenced, stopped: no call
                break
            if step.record is not None:
                pending.record("1-0", step.record)
            if outcome == "lost before call":  # admission refused after the record
                break
            calls += 1
            assert pending.counts["1-0"] >= calls, "no call runs unrecorded"
            if outcome == "ok":
                pending.ack("1-0")
                return calls, "handled", pending
            if outcome == "crash":
                break
            count = step.attempt  # raised: the next call in this process
    return calls, None, pending


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=1, max_value=6),
       st.lists(st.lists(OUTCOMES, min_size=1, max_size=8), min_size=1, max_size=12))
def test_p1_model_a_message_gets_at_most_max_deliveries_calls_in_all_processes(max_deliveries,
                                                                            lives):
    calls, ended, pending = run_lives(max_deliveries, lives)
    assert calls <= max_deliveries
    if ended is None:
        assert pending.counts["1-0"] >= calls
    else:
        assert "1-0" not in pending.counts


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=6),
       st.lists(st.lists(st.sampled_from(["raise", "crash"]), min_size=1, max_size=8),
                min_size=1, max_size=12))
def test_p1_model_failures_alone_reach_exactly_max_deliveries_calls_then_a_dead_letter(
        max_deliveries, lives):
    calls, ended, _ = run_lives(max_deliveries, [*lives, ["raise"] * (max_deliveries + 1)])
    assert (calls, ended) == (max_deliveries, "dead")


def test_p1_model_crashes_count_as_calls_across_processes():
    # the poison run: the handler kills the process on every call
    assert run_lives(3, [["crash"]] * 10)[:2] == (3, "dead")
    # a read ahead that no handler saw costs one count, never a call beyond the limit
    assert run_lives(3, [["lost before call"], ["crash"], ["crash"], ["crash"]])[:2] == (2, "dead")


@pytest.mark.parametrize("options", [{"max_deliveries": 0}, {"backoff_ms": -1}])
def test_a_policy_that_cannot_run_is_refused_naming_the_field(options):
    with pytest.raises(ValueError, match=next(iter(options))):
        RetryPolicy(**options)


def test_p2_a_dead_letter_holds_the_message_as_it_was_and_its_story():
    from rsc.member.message import Message

    message = Message("{orders:v1:0}", "1-0", b"k", b"\xff v", "m-1", {"trace": b"t"})
    fields = dead_letter_fields(message, error=error_text(RuntimeError("cannot")), deliveries=3,
                                consumer_group="billing", now_ms=1_700_000_000_000)
    assert fields == {"key": b"k", "value": b"\xff v", "h:trace": b"t",  # as in a shard (M1, M5)
                      "rsc-source-stream": "{orders:v1:0}", "rsc-source-id": "1-0",
                      "rsc-group": "billing", "rsc-deliveries": "3",
                      "rsc-error": "RuntimeError: cannot", "rsc-member": "m-1",
                      "rsc-dead-at-ms": "1700000000000"}
    keyless = dead_letter_fields(Message("s", "2-0", None, b"v", "m-1"), error=error_text(None),
                                 deliveries=3, consumer_group="billing", now_ms=1)
    assert "key" not in keyless and keyless["value"] == b"v"
    assert keyless["rsc-error"] == CRASHED, "attempts ran out without an error seen"


def test_p2_the_error_is_masked_and_at_most_one_kib():
    text = error_text(ValueError("cannot reach redis://app:hunter22@db:6379/0"))
    assert text == "ValueError: cannot reach redis://app:***@db:6379/0"
    long = error_text(ValueError("x" * 5000))
    assert long.startswith("ValueError: xxx") and len(long.encode()) <= 1024


def test_p2_a_policy_dead_letters_to_the_groups_stream_unless_it_names_one():
    assert default_dead_letter_stream("orders", "billing") == "{orders}:dead:billing"
    assert RetryPolicy().stream_for("orders", "billing") == "{orders}:dead:billing"
    assert RetryPolicy(dead_letter_stream="dlq").stream_for("orders", "billing") == "dlq"
