"""Wire protocol v1 of the Redis Stream Coordinator: messages, codec, routing.

Pure: imports no trio and no redis. See docs/protocol.md for the contract.
"""

from rsc.protocol.codec import decode, encode, to_wire
from rsc.protocol.errors import ProtocolError, Status
from rsc.protocol.messages import *  # noqa: F403
from rsc.protocol.messages import __all__ as _messages_all
from rsc.protocol.routing import HASH_NAME, owner_key, seal_key, shard_for_key, stream_key
from rsc.protocol.vocabulary import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    TEMPORARY_LEAVE_EPOCH,
    Cutover,
    GroupState,
    MemberState,
    MigrationState,
    RetentionMode,
    RevokeState,
)

__all__ = [
    "HASH_NAME",
    "JOIN_EPOCH",
    "LEAVE_EPOCH",
    "TEMPORARY_LEAVE_EPOCH",
    "Cutover",
    "GroupState",
    "MemberState",
    "MigrationState",
    "RetentionMode",
    "RevokeState",
    "ProtocolError",
    "Status",
    "decode",
    "encode",
    "owner_key",
    "seal_key",
    "shard_for_key",
    "stream_key",
    "to_wire",
    *_messages_all,
]
