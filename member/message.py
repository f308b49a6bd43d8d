"""What handlers receive (`Message`), and the queued form of an entry between reader and workers."""

from __future__ import annotations

import operator
from collections.abc import Awaitable, Callable, Mapping
from typing import NamedTuple

from rsc.member.pure.entry import HEADER_PREFIX, KEY_FIELD, VALUE_FIELD, read_fields
from rsc.member.redis_io.streams import FlatEntry

NO_HEADERS: Mapping[str, bytes] = {}


class Message(NamedTuple):
    """What a handler receives: one message of one shard (M1..M3 of docs/protocol.md).

    `key_bytes` and `value_bytes` are the bytes as written (`key_bytes` is None for a
    keyless message); `key` and `value` are their text (UTF-8, U+FFFD where the bytes are
    not valid UTF-8). `headers` maps each header's name to its bytes. `attempt` counts the
    calls of the handler on this message by this member (retries, 1 first).
    """

    shard: str
    id: str
    key_bytes: bytes | None
    value_bytes: bytes
    member_id: str
    headers: Mapping[str, bytes] = NO_HEADERS
    attempt: int = 1

    @property
    def key(self) -> str | None:
        """The key as text; None for a keyless message (M3)."""
        key = self.key_bytes
        return None if key is None else key.decode("utf-8", "replace")

    @property
    def value(self) -> str:
        """The value as text (UTF-8; the bytes are in `value_bytes`)."""
        return self.value_bytes.decode("utf-8", "replace")

    @property
    def fields(self) -> dict[str, str]:
        """The entry's fields as text, as docs/protocol.md M5 lays them out."""
        fields = {} if self.key_bytes is None else {KEY_FIELD.decode(): self.key or ""}
        fields[VALUE_FIELD.decode()] = self.value
        for name, data in self.headers.items():
            fields[HEADER_PREFIX.decode() + name] = data.decode("utf-8", "replace")
        return fields


Handler = Callable[[Message], Awaitable[None] | None]


# A queued entry: ((shard, order), id, key, value, headers, generation). Plain tuples, bytes
# and a shared empty mapping, on purpose: the cyclic GC stops tracking such tuples the first
# time it sees them, so a thousand buffered entries are not promoted to the old generation
# over and over. `order` is what the key-ordered queue serialises on: the key's bytes, or for a
# keyless message (M3) its id, which no other entry shares, so keyless entries run in
# parallel. The generation is the shard's hold the entry was read under (D1).
Queued = tuple[tuple[str, bytes | str], str, bytes | None, bytes, Mapping[str, bytes], int]


def queued_entries(shard: str, entries: list[FlatEntry], generation: int = 0) -> list[Queued]:
    """Queue items of one shard from entries as the server sent them (bytes from the
    reader's client, text from a client that decodes); deleted entries skipped."""
    queued: list[Queued] = []
    append = queued.append
    for raw_id, flat in entries:
        if raw_id is None:
            continue
        entry_id = raw_id.decode() if raw_id.__class__ is bytes else raw_id
        if flat.__class__ is list and len(flat) == 4 and flat[0] == KEY_FIELD \
                and flat[2] == VALUE_FIELD:  # the usual entry: key and value, as bytes
            key: bytes | None = flat[1]
            value: bytes = flat[3]
            headers: Mapping[str, bytes] = NO_HEADERS
        else:
            key, value, headers = read_fields(flat)
            if not headers:
                headers = NO_HEADERS
        append(((shard, entry_id if key is None else key), entry_id, key, value, headers,
                generation))
    return queued


order_key = operator.itemgetter(0)  # a queued entry's (shard, order)
