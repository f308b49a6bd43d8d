"""`readShard`, `findKey` and `listPending` (C2): a shard's messages, a key's, a group's pending
entries, read page by page with bounded Redis calls only.

The pure part turns stream entries into what the wire shows (M1/M2's field layout: `key`,
`value`, `h:<name>` headers, any other field as is): bytes as text when they are UTF-8, else
base64, each cut at 64 KiB with its full size, a page at most 50 entries and 256 KiB of
contents. The shell checks that the shard belongs to the prefix's routing (so no other key of
the store can be read this way), then runs one XRANGE/XREVRANGE with COUNT (a key search:
batches of 1,000, at most 10,000 entries a request) or XPENDING's extended form on a worker
thread. Who may read contents, and the audit of each read, are the server's (actors/server.py).
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

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


# --- the shell ----------------------------------------------------------------------------


class MessageAdmin:
    """Answers the three C2 requests; `ask` routes a request inside the coordinator."""

    def __init__(self, redis_url: str, ask: Ask) -> None:
        self.client: Any = connect(redis_url, decode_responses=False, socket_timeout=5,
                                   socket_connect_timeout=5)
        self.ask = ask

    async def answer(self, request: m.ReadShard | m.FindKey | m.ListPending) -> m.Response:
        try:
            routing = await self.ask(m.GetRouting(request_id=0,
                                                  stream_prefix=request.stream_prefix))
            streams = routing.streams if isinstance(routing, m.Routing) \
                and routing.status == Status.OK else None
            if not streams:
                return request.error(Status.UNKNOWN_STREAM,
                                     f"prefix {request.stream_prefix!r} has no routing")
            if isinstance(request, m.FindKey):
                shard = streams[shard_for_key(request.key, len(streams))]
                return await trio.to_thread.run_sync(self._find, request, shard)
            if request.shard not in streams:
                return request.error(Status.UNKNOWN_STREAM,
                                     f"{request.shard!r} is not a shard of prefix "
                                     f"{request.stream_prefix!r}; its shards are "
                                     f"{', '.join(streams)}")
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

    def _find(self, request: m.FindKey, shard: str) -> m.KeyEntries:
        key = request.key.encode("utf-8")
        top: str | None = request.continue_id or "+"
        matches: list[tuple[Any, dict[bytes, bytes]]] = []
        scanned = 0
        while top is not None and scanned < m.MAX_KEY_SCAN and len(matches) < request.count:
            want = min(SCAN_BATCH, m.MAX_KEY_SCAN - scanned)
            batch = self.client.xrevrange(shard, max=top, min="-", count=want)
            for entry_id, fields in batch:
                scanned += 1
                top = id_before(_text(entry_id))
                if fields.get(KEY_FIELD) == key:
                    matches.append((entry_id, fields))
                    if len(matches) == request.count:
                        break
            else:
                if len(batch) < want:
                    top = None  # the shard's oldest entry was scanned
        entries, taken = page(matches)
        if taken < len(matches):
            top = _text(matches[taken][0])
        return m.KeyEntries(request_id=request.request_id, status=Status.OK,
                            stream_prefix=request.stream_prefix, key=request.key, shard=shard,
                            scanned=scanned, entries=tuple(entries), continue_id=top)

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
