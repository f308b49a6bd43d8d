"""Dead letters as the coordinator reads and sends them back (P2, P3 of docs/protocol.md; pure).

A dead letter holds the message as it was (`key`, `value`, `h:<name>` fields, M5) and its
story (`rsc-source-stream`, `rsc-source-id`, `rsc-group`, `rsc-deliveries`, `rsc-error`,
`rsc-member`, `rsc-dead-at-ms`). Dead letters of the format before (fields `shard`, `id`,
`error`, `attempts`, `consumerGroup`, `memberId`) are read too.

A re-drive sends the message back to its source prefix with the headers `rsc-redriven` (its
returns so far) and `rsc-redrive-group` (the group it is for): members of the prefix's other
groups ack it without a handler call. `redrive_plan` decides which entries go.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import attrs

REDRIVEN_HEADER = "rsc-redriven"
REDRIVE_GROUP_HEADER = "rsc-redrive-group"
MAX_REDRIVES = 3  # an entry sent back this often stays, named, unless forced
CRASHED = "crashed"

_STORY = ("rsc-source-stream", "rsc-source-id", "rsc-group", "rsc-deliveries", "rsc-error",
          "rsc-member", "rsc-dead-at-ms")
_OLD_STORY = ("shard", "id", "error", "attempts", "consumerGroup", "memberId")


@attrs.frozen
class DeadLetterRecord:
    """One dead letter, whichever format wrote it."""

    id: str
    source_stream: str | None
    source_id: str | None
    consumer_group: str | None
    deliveries: int | None
    error: str | None
    member_id: str | None
    dead_at_ms: int | None
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()  # the message's own, the re-drive's left out
    redriven: int = 0

    @property
    def error_type(self) -> str:
        """`RuntimeError` of `RuntimeError: ...` (or of the old `RuntimeError('...')`)."""
        if not self.error:
            return "unknown"
        if self.error == CRASHED:
            return CRASHED
        head = self.error.split(":", 1)[0] if ": " in self.error else self.error.split("(", 1)[0]
        return head.strip() or "unknown"


def _text(data: bytes | str) -> str:
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else data


def _number(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def read_dead_letter(entry_id: str, fields: Mapping[bytes | str, bytes | str]) -> DeadLetterRecord:
    """A dead-letter entry's fields (bytes or text) as a record, new format or old."""
    raw = {_text(name): (value if isinstance(value, bytes) else value.encode("utf-8"))
           for name, value in fields.items()}
    story = {name: _text(raw[name]) for name in (*_STORY, *_OLD_STORY) if name in raw}
    headers = []
    redriven = 0
    for name, value in raw.items():
        if not name.startswith("h:"):
            continue
        header = name[2:]
        if header == REDRIVEN_HEADER:
            redriven = _number(_text(value)) or 0
        elif header != REDRIVE_GROUP_HEADER:
            headers.append((header, value))
    new = "rsc-source-stream" in story
    return DeadLetterRecord(
        id=entry_id,
        source_stream=story.get("rsc-source-stream" if new else "shard"),
        source_id=story.get("rsc-source-id" if new else "id"),
        consumer_group=story.get("rsc-group" if new else "consumerGroup"),
        deliveries=_number(story.get("rsc-deliveries" if new else "attempts")),
        error=story.get("rsc-error" if new else "error"),
        member_id=story.get("rsc-member" if new else "memberId"),
        dead_at_ms=_number(story.get("rsc-dead-at-ms")) if new else _id_ms(entry_id),
        key=raw.get("key"), value=raw.get("value", b""), headers=tuple(headers),
        redriven=redriven)


def _id_ms(entry_id: str) -> int | None:
    return _number(entry_id.partition("-")[0])


def source_prefix(source_stream: str | None) -> str | None:
    """The stream prefix of a shard key `{<prefix>:v<version>:<index>}` (None: not one)."""
    if not source_stream or not (source_stream.startswith("{") and source_stream.endswith("}")):
        return None
    parts = source_stream[1:-1].rsplit(":", 2)
    if len(parts) != 3 or not parts[1].startswith("v") or not parts[1][1:].isdigit() \
            or not parts[2].isdigit():
        return None
    return parts[0]


def redrive_fields(record: DeadLetterRecord, consumer_group: str) -> list[bytes]:
    """The entry to write back (M5 layout): the message, its headers, and the re-drive's."""
    fields: list[bytes] = [] if record.key is None else [b"key", record.key]
    fields += [b"value", record.value]
    for name, value in record.headers:
        fields += [b"h:" + name.encode("utf-8"), value]
    fields += [b"h:" + REDRIVEN_HEADER.encode(), str(record.redriven + 1).encode(),
               b"h:" + REDRIVE_GROUP_HEADER.encode(), consumer_group.encode("utf-8")]
    return fields


@attrs.frozen
class RedrivePlan:
    """What a re-drive does: the records to send back, the ids it leaves (with why), and the
    duplicates (a dead letter written twice for one source entry, P2: id -> the id sent back
    for it), deleted once that one's write is confirmed."""

    send: tuple[DeadLetterRecord, ...]
    skipped: tuple[tuple[str, str], ...]
    duplicates: tuple[tuple[str, str], ...] = ()


def redrive_plan(records: Iterable[DeadLetterRecord], prefix: str, *, ids: Sequence[str] = (),
                 limit: int, force: bool) -> RedrivePlan:
    """P3: the records (in stream order) that go back to `prefix`: those named by `ids` (all
    when empty), at most `limit`; an entry already sent back MAX_REDRIVES times, or from
    another prefix, stays and is named."""
    wanted = set(ids)
    send: list[DeadLetterRecord] = []
    skipped: list[tuple[str, str]] = []
    duplicates: list[tuple[str, str]] = []
    sources: dict[tuple[str, str], str] = {}  # (source stream, source id) -> the id sent back
    seen: set[str] = set()
    for record in records:
        if wanted and record.id not in wanted:
            continue
        seen.add(record.id)
        source = (record.source_stream or "", record.source_id or "")
        if all(source) and source in sources:
            duplicates.append((record.id, sources[source]))
            continue
        if len(send) >= limit:
            if not wanted:
                break
            skipped.append((record.id, f"over the limit of {limit}"))
            continue
        origin = source_prefix(record.source_stream)
        if origin is None:
            skipped.append((record.id, f"its source stream {record.source_stream!r} is not a "
                                       "shard of a stream prefix"))
        elif origin != prefix:
            skipped.append((record.id, f"it came from prefix {origin!r}, not {prefix!r}"))
        elif record.redriven >= MAX_REDRIVES and not force:
            skipped.append((record.id, f"sent back {record.redriven} times already "
                                       "(force to send it again)"))
        else:
            send.append(record)
            if all(source):
                sources[source] = record.id
    skipped += [(entry_id, "no such dead letter") for entry_id in ids if entry_id not in seen]
    return RedrivePlan(tuple(send), tuple(skipped), tuple(duplicates))


def errors_by_type(records: Iterable[DeadLetterRecord]) -> dict[str, int]:
    """How many dead letters each error type has (`crashed` for attempts run out by crashes)."""
    counts: dict[str, int] = {}
    for record in records:
        counts[record.error_type] = counts.get(record.error_type, 0) + 1
    return counts
