"""What handlers receive (`Message`), and the queued form of an entry between reader and workers."""

from __future__ import annotations

import operator
from collections.abc import Awaitable, Callable

import attrs

from rsc.member.streams import KEY_FIELD, VALUE_FIELD, FlatEntry, pairs


@attrs.frozen
class Message:
    """What a handler receives: one stream entry of one shard."""

    shard: str
    id: str
    key: str
    value: str
    fields: dict[str, str]
    member_id: str
    attempt: int = 1


Handler = Callable[[Message], Awaitable[None] | None]

MESSAGE_SETTERS = tuple(Message.__dict__[name].__set__ for name in (
    "shard", "id", "key", "value", "fields", "member_id", "attempt"))


def new_message(shard: str, entry_id: str, key: str, value: str, fields: dict[str, str],
                member_id: str, attempt: int = 1) -> Message:
    """`Message(...)` without attrs' frozen `__init__` (4x cheaper: this runs once per entry)."""
    set_shard, set_id, set_key, set_value, set_fields, set_member, set_attempt = MESSAGE_SETTERS
    message = object.__new__(Message)
    set_shard(message, shard)
    set_id(message, entry_id)
    set_key(message, key)
    set_value(message, value)
    set_fields(message, fields)
    set_member(message, member_id)
    set_attempt(message, attempt)
    return message


# A queued entry: ((shard, key), id, fields, value, generation). Plain tuples of strings and a
# dict of strings, on purpose: the cyclic GC stops tracking such tuples the first time it sees
# them, so a thousand buffered entries are not promoted to the old generation over and over
# (each promotion wave brings a full collection of the whole process heap nearer). The
# Message a handler gets is made by the worker right before the handler and dies young. The
# generation is the shard's hold the entry was read under (the ledger admits it or not).
Queued = tuple[tuple[str, str], str, dict[str, str], str, int]


def queued_entries(shard: str, entries: list[FlatEntry], generation: int = 0) -> list[Queued]:
    """Queue items of one shard from entries as the server sent them (deleted ones skipped)."""
    queued: list[Queued] = []
    append = queued.append
    for entry_id, flat in entries:
        if entry_id is None:
            continue
        if flat.__class__ is list and len(flat) == 4:  # the usual entry: key and value
            field_a, value_a, field_b, value_b = flat
            fields: dict[str, str] = {field_a: value_a, field_b: value_b}
        elif flat is None:
            fields = {}
        else:
            fields = pairs(flat)
        append(((shard, fields.get(KEY_FIELD, "")), entry_id, fields,
                fields.get(VALUE_FIELD, ""), generation))
    return queued


order_key = operator.itemgetter(0)  # a queued entry's (shard, key)
