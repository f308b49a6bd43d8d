"""`readShard`, `findKey` and `listPending` (C2): a shard's messages, a key's, a group's pending
entries, read page by page with bounded Redis calls only.

The pure part turns stream entries into what the wire shows (M1/M2's field layout: `key`,
`value`, `h:<name>` headers, any other field as is): bytes as text when they are UTF-8, else
base64, each cut at 64 KiB with its full size, a page at most 50 entries and 256 KiB of
contents. The shell checks that the shard belongs to the prefix's routing (the current
version's, or the previous one's while a resharding drains it; so no other key of the store can
be read this way), then runs one XRANGE/XREVRANGE with COUNT (a key search: the key's shard in
each of those versions, read newest first by id in batches of 1,000, at most 10,000 entries a
request) or XPENDING's extended form on a worker thread. Who may read contents, and the
audit of each read, are the server's (actors/server.py).
"""

from __future__ import annotations

import base64
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import redis
import trio

from rsc.common.redis_connect import connect, error_text
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.routing import shard_for_key

MAX_SHOWN = 64 * 1024  # bytes shown of one key, value or header value
SCAN_BATCH = 1000
MAX_SEQ = (1 << 64) - 1
KEY_FIELD, VALUE_FIELD, HEADER_PREFIX = b"key", b"value", b"h:"

Ask = Callable[[m.Request], Awaitable[m.Response]]
Versions = Callable[[str], Sequence[tuple[str, ...]]]
"""A prefix's routing versions still present, newest first (actors/router.py)."""


# --- pure --------------------------------------------------------------------------------


def blob(data: bytes, limit: int = MAX_SHOWN) -> m.Blob:
    """`data` as shown: its first `limit` bytes, as text when UTF-8 (a character cut in two at
    the limit is left out), else base64; `size` is the full length."""
    shown = data[:max(limit, 0)]
    cut = len(shown) < len(data)
    for trim in range(4 if cut else 1):
        try:
            text = shown[:len(shown) - trim].decode("utf-8")
        except UnicodeDecodeError:
            continue
        return m.Blob(text=text, size=len(data), cut=cut)
    return m.Blob(base64=base64.b64encode(shown).decode("ascii"), size=len(data), cut=cut)


def name_text(name: bytes) -> str:
    """A field or header name as text (bytes that are not UTF-8 shown as U+FFFD)."""
    return name.decode("utf-8", "replace")


def parse_id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def id_after(entry_id: str) -> str:
    """The smallest id above `entry_id` (to page on inclusively)."""
    ms, seq = parse_id(entry_id)
    return f"{ms}-{seq + 1}" if seq < MAX_SEQ else f"{ms + 1}-0"


def id_before(entry_id: str) -> str | None:
    """The largest id below `entry_id`; None below 0-0."""
    ms, seq = parse_id(entry_id)
    if seq > 0:
        return f"{ms}-{seq - 1}"
    return f"{ms - 1}-{MAX_SEQ}" if ms > 0 else None


def shown_entry(entry_id: str, fields: dict[bytes, bytes], budget: int
                ) -> tuple[m.StreamEntry, int, bool]:
    """One entry within `budget` bytes of contents: the entry, the bytes it shows, and whether
    the budget (not the 64 KiB cap) cut something."""
    used = 0
    squeezed = False

    def show(data: bytes) -> m.Blob:
        nonlocal used, squeezed
        limit = min(MAX_SHOWN, budget - used)
        if len(data) > limit and limit < MAX_SHOWN:
            squeezed = True
        shown = blob(data, limit)
        used += min(len(data), max(limit, 0))
        return shown

    key = value = None
    headers: list[m.FieldBlob] = []
    others: list[m.FieldBlob] = []
    for name, data in fields.items():
        if name == KEY_FIELD:
            key = show(data)
        elif name == VALUE_FIELD:
            value = show(data)
        elif name.startswith(HEADER_PREFIX):
            headers.append(m.FieldBlob(name=name_text(name[len(HEADER_PREFIX):]), value=show(data)))
        else:
            others.append(m.FieldBlob(name=name_text(name), value=show(data)))
    entry = m.StreamEntry(id=_text(entry_id), key=key, value=value, headers=tuple(headers),
                          fields=tuple(others))
    return entry, used, squeezed


def page(found: Sequence[tuple[Any, dict[bytes, bytes]]], *, max_bytes: int = m.MAX_PAGE_BYTES
         ) -> tuple[list[m.StreamEntry], int]:
    """As many of `found` as fit in `max_bytes` of contents (the first always, cut to fit):
    the entries and how many of `found` they are."""
    entries: list[m.StreamEntry] = []
    used = 0
    for entry_id, fields in found:
        entry, size, squeezed = shown_entry(_text(entry_id), fields, max_bytes - used)
        if squeezed and entries:
            break
        entries.append(entry)
        used += size
    return entries, len(entries)


def _text(data: object) -> str:
    return data.decode() if isinstance(data, bytes) else str(data)


def with_current(streams: tuple[str, ...], versions: Sequence[tuple[str, ...]]
                 ) -> list[tuple[str, ...]]:
    """The routing versions to read: the current routing's streams first, then every other
    version still present."""
    return [streams, *(version for version in versions if version and version != streams)]


def key_shards(key: str, versions: Sequence[tuple[str, ...]]) -> list[str]:
    """C2: the key's shard in each routing version (M3's rule on that version), in order."""
    shards: list[str] = []
    for streams in versions:
        shard = streams[shard_for_key(key, len(streams))]
        if shard not in shards:
            shards.append(shard)
    return shards


@attrs.define
class _Cursor:
    """One shard of a key search: what was read of it and not scanned yet (each entry with
    its id parsed), and where its next read starts (None: its oldest entry was read)."""

    shard: str
    top: str | None
    buffer: deque[tuple[tuple[int, int], Any, dict[bytes, bytes]]] = attrs.field(factory=deque)


def _before(entry_id: tuple[int, int]) -> str | None:
    return id_before(f"{entry_id[0]}-{entry_id[1]}")


# --- the shell ----------------------------------------------------------------------------


class MessageAdmin:
    """Answers the three C2 requests; `ask` routes a request inside the coordinator."""

    def __init__(self, redis_url: str, ask: Ask, versions: Versions | None = None) -> None:
        self.client: Any = connect(redis_url, decode_responses=False, socket_timeout=5,
                                   socket_connect_timeout=5)
        self.ask = ask
        self.versions = versions

    async def answer(self, request: m.ReadShard | m.FindKey | m.ListPending) -> m.Response:
        try:
            routing = await self.ask(m.GetRouting(request_id=0,
                                                  stream_prefix=request.stream_prefix))
            streams = routing.streams if isinstance(routing, m.Routing) \
                and routing.status == Status.OK else None
            if not streams:
                return request.error(Status.UNKNOWN_STREAM,
                                     f"prefix {request.stream_prefix!r} has no routing")
            versions = with_current(streams, self.versions(request.stream_prefix)
                                    if self.versions is not None else ())
            if isinstance(request, m.FindKey):
                return await trio.to_thread.run_sync(
                    self._find, request, key_shards(request.key, versions))
            if not any(request.shard in version for version in versions):
                return request.error(Status.UNKNOWN_STREAM,
                                     f"{request.shard!r} is not a shard of prefix "
                                     f"{request.stream_prefix!r}; its shards are "
                                     f"{', '.join(s for version in versions for s in version)}")
            if isinstance(request, m.ReadShard):
                return await trio.to_thread.run_sync(self._read, request)
            return await trio.to_thread.run_sync(self._pending, request)
        except redis.ResponseError as exc:
            if "NOGROUP" in str(exc):
                return request.error(Status.UNKNOWN_GROUP, f"the group has no consumer group on "
                                     f"that shard: {error_text(exc)}")
            return request.error(Status.COORDINATOR_NOT_AVAILABLE,
                                 f"Redis failed: {error_text(exc)}; retry with backoff")
        except redis.RedisError as exc:
            return request.error(Status.COORDINATOR_NOT_AVAILABLE,
                                 f"Redis failed: {error_text(exc)}; retry with backoff")

    # --- blocking parts, on a worker thread ----------------------------------------------

    def _read(self, request: m.ReadShard) -> m.ShardEntries:
        shard = request.shard
        if request.newest_first:
            top = request.from_id or ("+" if request.from_ms is None
                                      else f"{request.from_ms}-{MAX_SEQ}")
            found = self.client.xrevrange(shard, max=top, min="-", count=request.count)
        else:
            bottom = request.from_id or ("-" if request.from_ms is None
                                         else f"{request.from_ms}-0")
            found = self.client.xrange(shard, min=bottom, max="+", count=request.count)
        entries, taken = page(found)
        next_id: str | None = None
        if taken < len(found):
            next_id = _text(found[taken][0])
        elif len(found) == request.count:
            last = _text(found[-1][0])
            next_id = id_before(last) if request.newest_first else id_after(last)
        return m.ShardEntries(request_id=request.request_id, status=Status.OK,
                              stream_prefix=request.stream_prefix, shard=shard,
                              length=int(self.client.xlen(shard)), entries=tuple(entries),
                              next_id=next_id)

    def _find(self, request: m.FindKey, shards: Sequence[str]) -> m.KeyEntries:
        """The key's entries in `shards`, newest first by id across them: the entries with the
        same id in several shards are scanned together, so `continueId` (inclusive, the same
        for every shard) never skips nor repeats one."""
        key = request.key.encode("utf-8")
        start = request.continue_id or "+"
        cursors = [_Cursor(shard, start) for shard in shards]
        matches: list[tuple[Any, dict[bytes, bytes]]] = []
        scanned, count = 0, request.count
        top: str | None = None
        while True:
            for cursor in cursors:  # every shard's next entry is at hand
                if not cursor.buffer and cursor.top is not None:
                    want = min(SCAN_BATCH, m.MAX_KEY_SCAN - scanned)
                    batch = self.client.xrevrange(cursor.shard, max=cursor.top, min="-",
                                                  count=want)
                    cursor.buffer.extend((parse_id(_text(entry_id)), entry_id, fields)
                                         for entry_id, fields in batch)
                    cursor.top = _before(cursor.buffer[-1][0]) if len(batch) == want else None
            heads = [cursor for cursor in cursors if cursor.buffer]
            if not heads:
                top = None  # every shard's oldest entry was scanned
                break
            if len(heads) == 1:  # the others are scanned to their oldest: no merge
                buffer = heads[0].buffer
                while buffer and scanned < m.MAX_KEY_SCAN and len(matches) < count:
                    newest, entry_id, fields = buffer.popleft()
                    scanned += 1
                    if fields.get(KEY_FIELD) == key:
                        matches.append((entry_id, fields))
            else:
                newest = max(cursor.buffer[0][0] for cursor in heads)
                same = [cursor.buffer for cursor in heads if cursor.buffer[0][0] == newest]
                found = [(buffer[0][1], buffer[0][2]) for buffer in same
                         if buffer[0][2].get(KEY_FIELD) == key]
                if scanned and (scanned + len(same) > m.MAX_KEY_SCAN
                                or len(matches) + len(found) > count):
                    top = f"{newest[0]}-{newest[1]}"  # (an id in several shards; never the first)
                    break
                for buffer in same:
                    buffer.popleft()
                scanned += len(same)
                matches.extend(found)
            if scanned >= m.MAX_KEY_SCAN or len(matches) >= count:
                top = _before(newest)
                break
        entries, taken = page(matches)
        if taken < len(matches):
            top = _text(matches[taken][0])
        return m.KeyEntries(request_id=request.request_id, status=Status.OK,
                            stream_prefix=request.stream_prefix, key=request.key,
                            shard=shards[0], scanned=scanned, entries=tuple(entries),
                            continue_id=top, shards=tuple(shards))

    def _pending(self, request: m.ListPending) -> m.PendingEntries:
        shard, group = request.shard, request.consumer_group
        summary = self.client.xpending(shard, group)
        start = "-" if request.after_id is None else id_after(request.after_id)
        found = self.client.xpending_range(shard, group, min=start, max="+",
                                           count=request.count)
        entries = tuple(m.PendingEntry(id=_text(item["message_id"]),
                                       owner=name_text(item["consumer"]),
                                       idle_ms=int(item["time_since_delivered"]),
                                       deliveries=int(item["times_delivered"]))
                        for item in found)
        return m.PendingEntries(request_id=request.request_id, status=Status.OK,
                                stream_prefix=request.stream_prefix, consumer_group=group,
                                shard=shard, pending=int(summary["pending"]), entries=entries,
                                next_id=entries[-1].id if len(entries) == request.count else None)
