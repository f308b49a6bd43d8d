"""Statuses and the one protocol error that every decode failure becomes."""

from __future__ import annotations

import enum


class Status(enum.StrEnum):
    """Every `status` string of docs/protocol.md."""

    OK = "OK"
    REVOKE_PENDING = "REVOKE_PENDING"
    SYNC_METADATA = "SYNC_METADATA"
    UNKNOWN_MEMBER_ID = "UNKNOWN_MEMBER_ID"
    FENCED_MEMBER_EPOCH = "FENCED_MEMBER_EPOCH"
    COORDINATOR_NOT_AVAILABLE = "COORDINATOR_NOT_AVAILABLE"
    INVALID_REQUEST = "INVALID_REQUEST"
    UNKNOWN_STREAM = "UNKNOWN_STREAM"
    UNKNOWN_GROUP = "UNKNOWN_GROUP"
    MIGRATION_IN_PROGRESS = "MIGRATION_IN_PROGRESS"
    GROUP_NOT_EMPTY = "GROUP_NOT_EMPTY"
    GROUP_MAX_SIZE_REACHED = "GROUP_MAX_SIZE_REACHED"
    GROUP_LIMIT_REACHED = "GROUP_LIMIT_REACHED"
    UNRELEASED_INSTANCE_ID = "UNRELEASED_INSTANCE_ID"  # S4: another live member holds it
    FENCED_INSTANCE_ID = "FENCED_INSTANCE_ID"  # S3: a newer member took this instanceId over
    UNSUPPORTED_FORMAT_VERSION = "UNSUPPORTED_FORMAT_VERSION"  # setFormatVersion refused
    SUBSCRIPTION_LIMIT_REACHED = "SUBSCRIPTION_LIMIT_REACHED"  # B4: a session's watches or subscriptions
    REDRIVE_IN_PROGRESS = "REDRIVE_IN_PROGRESS"  # P3: the group's re-drive runs already
    NOT_AUTHORIZED = "NOT_AUTHORIZED"  # C1: a change asked with the viewer token
    STALE_CONFIRMATION = "STALE_CONFIRMATION"  # C1: the group moved since the action was confirmed


class ProtocolError(Exception):
    """The peer sent something the protocol does not allow.

    `request_id` is the request's id when it could be read (else None), so the
    error response can still be matched by the sender.
    """

    def __init__(self, message: str, request_id: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.request_id = request_id
