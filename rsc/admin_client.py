"""The operator's client of the coordinator's `/v1/admin` endpoint.

    async with open_admin_client("ws://127.0.0.1:8765", token=None) as admin:
        description = await admin.describe_group("orders", "billing")

Every method returns the protocol's response object for an `OK` status and
raises `AdminError` for any other status (including the `error` response to
a malformed request). Connection failures raise `SessionClosed`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal, TypeVar

from rsc.member.session import Session, SessionClosed, open_session
from rsc.protocol import (
    DescribeGroup,
    ErrorResponse,
    GroupDescription,
    Groups,
    ListGroups,
    MaxConcurrencyChanged,
    MemberRemoved,
    Message,
    RemoveMember,
    SetMaxConcurrency,
    SetShardCount,
    ShardCountChanged,
    Status,
)

__all__ = ["AdminClient", "AdminError", "SessionClosed", "open_admin_client"]

Cutover = Literal["parallel", "ordered"]
ResponseT = TypeVar("ResponseT", bound=Message)


class AdminError(Exception):
    """The coordinator refused an admin request: `status` (not OK) and its `error` text."""

    def __init__(self, status: Status | str, error: str | None) -> None:
        self.status = Status(status) if not isinstance(status, Status) else status
        self.error = error or ""
        super().__init__(f"{self.status.value}: {self.error}" if self.error else self.status.value)


class AdminClient:
    """Typed admin requests over one admin `Session`."""

    def __init__(self, session: Session) -> None:
        self.session = session

    async def list_groups(self) -> Groups:
        """Every group the coordinator knows, with epochs and counts."""
        return await self._call(ListGroups(request_id=0), Groups)

    async def describe_group(self, prefix: str, group: str) -> GroupDescription:
        """Epochs, state, routing, migration and every member of one group."""
        request = DescribeGroup(request_id=0, stream_prefix=prefix, consumer_group=group)
        return await self._call(request, GroupDescription)

    async def set_shard_count(self, prefix: str, group: str, shard_count: int,
                              cutover: Cutover = "parallel") -> ShardCountChanged:
        """Create routing for `prefix` or reshard it to `shard_count` shards."""
        request = SetShardCount(request_id=0, stream_prefix=prefix, consumer_group=group,
                                shard_count=shard_count, cutover=cutover)
        return await self._call(request, ShardCountChanged)

    async def set_max_concurrency(self, prefix: str, group: str,
                                  max_concurrency: int | None) -> MaxConcurrencyChanged:
        """Set the group's maxConcurrency (None clears it: members use their capacity)."""
        request = SetMaxConcurrency(request_id=0, stream_prefix=prefix, consumer_group=group,
                                    max_concurrency=max_concurrency)
        return await self._call(request, MaxConcurrencyChanged)

    async def remove_member(self, prefix: str, group: str, member_id: str) -> MemberRemoved:
        """Remove a member from the group; its shards are freed at once."""
        request = RemoveMember(request_id=0, stream_prefix=prefix, consumer_group=group,
                               member_id=member_id)
        return await self._call(request, MemberRemoved)

    async def _call(self, request: Message,
                                        expected: type[ResponseT]) -> ResponseT:
        response = await self.session.request(request)
        return check_response(response, expected)


def check_response(response: Message, expected: type[ResponseT]) -> ResponseT:
    """`response` if it is an OK `expected`; else raise AdminError with its status and text."""
    if isinstance(response, ErrorResponse):
        raise AdminError(response.status, response.error)
    if not isinstance(response, expected):
        raise AdminError(Status.INVALID_REQUEST,
                         f"expected a {expected.TYPE} response, got {response.TYPE}")
    status = getattr(response, "status", Status.OK)
    if status != Status.OK:
        raise AdminError(status, getattr(response, "error", None))
    return response


@asynccontextmanager
async def open_admin_client(url: str, *, token: str | None = None,
                            connect_timeout: float = 10.0) -> AsyncIterator[AdminClient]:
    """Connect to the admin endpoint of the coordinator at `url` (ws://host:port)."""
    async with open_session(url, "admin", token=token,
                            connect_timeout=connect_timeout) as session:
        yield AdminClient(session)
