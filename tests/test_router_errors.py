"""The router answers what a failed prefix actor held in each request's own response type
(its `error()`, protocol/messages.py), for every request a prefix actor takes. Pure."""

from __future__ import annotations

import pytest

from rsc.actors.router import unavailable_response
from rsc.protocol import messages as m
from rsc.protocol.errors import Status

PREFIX, GROUP = "orders", "billing"

REQUESTS: list[m.Request] = [
    m.Heartbeat(request_id=1, stream_prefix=PREFIX, consumer_group=GROUP, member_id="a",
                member_epoch=3),
    m.GetRouting(request_id=2, stream_prefix=PREFIX),
    m.SetShardCount(request_id=3, stream_prefix=PREFIX, consumer_group=GROUP, shard_count=2),
    m.SetMaxConcurrency(request_id=4, stream_prefix=PREFIX, consumer_group=GROUP, max_concurrency=1),
    m.RemoveMember(request_id=5, stream_prefix=PREFIX, consumer_group=GROUP, member_id="a"),
    m.DescribeGroup(request_id=6, stream_prefix=PREFIX, consumer_group=GROUP),
    m.DeleteGroup(request_id=7, stream_prefix=PREFIX, consumer_group=GROUP),
    m.ResetOffsets(request_id=8, stream_prefix=PREFIX, consumer_group=GROUP, to="latest"),
    m.SetRetention(request_id=9, stream_prefix=PREFIX, retention=m.Retention()),
    m.ListGroups(request_id=10),
]


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda request: request.TYPE)
def test_h12_unavailable_is_the_requests_own_response_type_with_its_names(request_):
    response = unavailable_response(request_, "reloading; retry with backoff")
    expected = request_.error(Status.COORDINATOR_NOT_AVAILABLE, "reloading; retry with backoff")
    assert type(response) is type(expected) and not isinstance(response, m.ErrorResponse)
    assert response == expected
    assert response.request_id == request_.request_id
    assert response.status == Status.COORDINATOR_NOT_AVAILABLE and response.error
    if hasattr(request_, "stream_prefix") and hasattr(response, "stream_prefix"):
        assert response.stream_prefix == PREFIX


def test_what_is_no_request_gets_an_untyped_error_frame():
    response = unavailable_response(object())
    assert isinstance(response, m.ErrorResponse)
    assert response.status == Status.COORDINATOR_NOT_AVAILABLE and response.request_id is None
