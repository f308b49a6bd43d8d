"""Pure tests of the retry and dead-letter policy: what follows a failed handler call."""

from __future__ import annotations

import pytest

from rsc.member.policies import (
    NO_RETRY,
    DeadLetter,
    LeavePending,
    RetryLater,
    RetryPolicy,
    dead_letter_fields,
)


def test_a_failed_attempt_is_retried_after_the_backoff_until_max_deliveries():
    policy = RetryPolicy(max_deliveries=3, backoff_ms=250, dead_letter_stream="dead")
    assert policy.after_failure(1) == RetryLater(attempt=2, delay_s=0.25)
    assert policy.after_failure(2) == RetryLater(attempt=3, delay_s=0.25)


def test_the_last_failed_attempt_goes_to_the_dead_letter_stream_with_its_count():
    policy = RetryPolicy(max_deliveries=3, backoff_ms=0, dead_letter_stream="dead")
    assert policy.after_failure(3) == DeadLetter(stream="dead", attempts=3)


def test_without_a_dead_letter_stream_the_last_failure_stays_pending():
    assert RetryPolicy(max_deliveries=2).after_failure(2) == LeavePending(attempts=2)


def test_no_retry_policy_is_one_attempt_then_pending():
    assert NO_RETRY.after_failure(1) == LeavePending(attempts=1)


def test_a_single_delivery_policy_dead_letters_at_once():
    policy = RetryPolicy(max_deliveries=1, dead_letter_stream="dead")
    assert policy.after_failure(1) == DeadLetter(stream="dead", attempts=1)


@pytest.mark.parametrize("options", [{"max_deliveries": 0}, {"backoff_ms": -1}])
def test_a_policy_that_cannot_run_is_refused_naming_the_field(options):
    with pytest.raises(ValueError, match=next(iter(options))):
        RetryPolicy(**options)


def test_a_dead_letter_names_where_the_message_came_from_and_why_it_failed():
    from rsc.member.message import Message

    message = Message("{orders:v1:0}", "1-0", b"k", b"\xff v", "m-1", {"trace": b"t"})
    fields = dead_letter_fields(message, error=RuntimeError("cannot"), attempts=3,
                                consumer_group="billing")
    assert fields == {"key": b"k", "value": b"\xff v", "h:trace": b"t",  # as in a shard (M1, M5)
                      "shard": "{orders:v1:0}", "id": "1-0",
                      "error": "RuntimeError('cannot')", "attempts": "3",
                      "consumerGroup": "billing", "memberId": "m-1"}
    keyless = dead_letter_fields(Message("s", "2-0", None, b"v", "m-1"), error=None, attempts=1,
                                 consumer_group="billing")
    assert "key" not in keyless and keyless["value"] == b"v"
