"""`listDeadLetters` and `redriveDeadLetters` (P3): a group's dead letters, read and sent back.

The rules are rsc/common/dead_letters.py's (which entries go, their fields); this shell finds
the group's dead-letter stream (the one its members report in their heartbeats, P2, else
`{<prefix>}:dead:<group>`), reads it, writes each entry back to its source prefix through the
current routing and the seal-checking produce script (same key, same shard rule; keyless
entries spread), WAITs for `--min-replicas` on the connection that wrote, and only then
deletes the dead letters whose writes were confirmed: a crash in between leaves a duplicate,
never a loss. One re-drive at a time per group (REDRIVE_IN_PROGRESS otherwise).
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import redis
import trio

from rsc.actors.logs import log_event
from rsc.common.dead_letters import (
    DeadLetterRecord,
    errors_by_type,
    read_dead_letter,
    redrive_fields,
    redrive_plan,
)
from rsc.common.lua import Script
from rsc.common.redis_connect import connect, error_text
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.routing import seal_key, shard_for_key
from rsc.protocol.vocabulary import RetentionMode

log = logging.getLogger("rsc.coordinator")

PRODUCE_SCRIPT = Script("produce")
READ_BATCH = 1000
SUMMARY_LIMIT = 10_000  # errors by type are counted over the oldest this many dead letters

Ask = Callable[[m.Request], Awaitable[m.Response]]


RETENTION_KEY = "rsc:dead-letter-retention"
"""P2: a hash, one field per group (JSON `[prefix, group]`), its dead letters' retention (JSON
`{"maxLength", "maxAgeMs", "stream"}`); no field, no retention (the default)."""


def retention_field(prefix: str, group: str) -> str:
    return json.dumps([prefix, group], ensure_ascii=False)


def trim_commands(retention: m.Retention, now_ms: int) -> list[tuple[str | int, ...]]:
    """P2: the XTRIM arguments (after the key) that apply a dead-letter retention at `now_ms`:
    MAXLEN by its length cap, MINID by its age cap (a dead letter's id is the time it was
    written). Exact trims: a dead letter is kept or removed by the rule, not by Redis's nodes."""
    commands: list[tuple[str | int, ...]] = []
    if retention.max_length is not None:
        commands.append(("MAXLEN", retention.max_length))
    if retention.max_age_ms is not None:
        commands.append(("MINID", f"{max(0, now_ms - retention.max_age_ms)}-0"))
    return commands


def default_stream(prefix: str, group: str) -> str:
    """`{<prefix>}:dead:<group>`, as a RetryPolicy without a stream of its own uses (P2)."""
    return f"{{{prefix}}}:dead:{group}"


class DeadLetterAdmin:
    """Answers the two dead-letter requests; `ask` routes a request inside the coordinator."""

    def __init__(self, redis_url: str, ask: Ask, *, min_replicas: int = 0,
                 wait_timeout_ms: int = 1000) -> None:
        self.client: Any = connect(redis_url, decode_responses=False, socket_timeout=5,
                                   socket_connect_timeout=5)
        self.ask = ask
        self.min_replicas = min_replicas
        self.wait_timeout_ms = wait_timeout_ms
        self._redriving: set[tuple[str, str]] = set()
        self._reported: dict[tuple[str, str], str] = {}  # the last stream members reported

    async def answer(self, request: m.ListDeadLetters | m.RedriveDeadLetters | m.SetRetention
                     ) -> m.Response:
        if isinstance(request, m.SetRetention):
            return await self._set_retention(request)
        prefix, group = request.stream_prefix, request.consumer_group
        try:
            stream = await self._stream_of(prefix, group)
            if isinstance(request, m.ListDeadLetters):
                return await trio.to_thread.run_sync(self._list, request, stream)
            if (prefix, group) in self._redriving:
                return request.error(Status.REDRIVE_IN_PROGRESS,
                                     f"a re-drive of {group!r} of {prefix!r} runs already; "
                                     "retry once it is done")
            self._redriving.add((prefix, group))
            try:
                routing = await self.ask(m.GetRouting(request_id=0, stream_prefix=prefix))
                if not isinstance(routing, m.Routing) or routing.status != Status.OK \
                        or not routing.streams:
                    return request.error(Status.UNKNOWN_STREAM,
                                         f"prefix {prefix!r} has no routing to send entries to")
                return await trio.to_thread.run_sync(self._redrive, request, stream,
                                                     routing.streams)
            finally:
                self._redriving.discard((prefix, group))
        except redis.RedisError as exc:
            return request.error(Status.COORDINATOR_NOT_AVAILABLE,
                                 f"Redis failed: {error_text(exc)}; retry with backoff")

    async def _set_retention(self, request: m.SetRetention) -> m.Response:
        """P2: `setRetention` with `deadLettersOf`: the group's dead letters get their own
        retention (mode `none`, with caps or without: without, the field is removed)."""
        prefix, group = request.stream_prefix, request.dead_letters_of
        assert group is not None
        retention = request.retention
        if retention.mode != RetentionMode.NONE:
            return request.error(Status.INVALID_REQUEST,
                                 "dead letters have no acks to wait for: their retention takes "
                                 "mode 'none' (--none) and the caps maxLength/maxAgeMs")
        routing = await self.ask(m.GetRouting(request_id=0, stream_prefix=prefix))
        if not isinstance(routing, m.Routing) or routing.status != Status.OK:
            return request.unknown_stream()
        field = retention_field(prefix, group)
        try:
            if retention.max_length is None and retention.max_age_ms is None:
                await trio.to_thread.run_sync(self.client.hdel, RETENTION_KEY, field)
            else:
                stream = await self._stream_of(prefix, group)  # kept: members may all go
                await trio.to_thread.run_sync(self.client.hset, RETENTION_KEY, field, json.dumps(
                    {"maxLength": retention.max_length, "maxAgeMs": retention.max_age_ms,
                     "stream": stream}))
        except redis.RedisError as exc:
            return request.error(Status.COORDINATOR_NOT_AVAILABLE,
                                 f"Redis failed: {error_text(exc)}; retry with backoff")
        log_event(log, "dead_letters.retention_set", prefix=prefix, group=group,
                  max_length=retention.max_length, max_age_ms=retention.max_age_ms)
        return m.RetentionChanged(request_id=request.request_id, status=Status.OK,
                                  stream_prefix=prefix, retention=retention, dead_letters_of=group)

    def _retention(self, prefix: str, group: str) -> m.Retention | None:
        raw = self.client.hget(RETENTION_KEY, retention_field(prefix, group))
        return None if raw is None else _retention_of(raw)

    async def run_retention(self, interval_s: float) -> None:
        """P2: apply every stored dead-letter retention, every `interval_s`, for ever. A Redis
        error is logged and the next round tries again."""
        while True:
            await trio.sleep(interval_s)
            try:
                await trio.to_thread.run_sync(self.trim_once)
            except redis.RedisError as exc:
                log_event(log, "dead_letters.retention_failed", level=logging.WARNING,
                          error=error_text(exc))

    def trim_once(self) -> int:
        """One round of P2's dead-letter retention: the dead letters it removed. The stream is
        the one the group's members reported last (when the retention was set, or since), else
        the group's default one (`{<prefix>}:dead:<group>`)."""
        removed = 0
        settings = self.client.hgetall(RETENTION_KEY)
        if not settings:
            return 0
        now_ms = int(time.time() * 1000)  # stream ids are wall-clock ms, as for the prefixes
        for raw_field, raw in settings.items():
            prefix, group = json.loads(_text(raw_field))
            stream = self._reported.get((prefix, group)) \
                or json.loads(_text(raw)).get("stream") or default_stream(prefix, group)
            for command in trim_commands(_retention_of(raw), now_ms):
                removed += int(self.client.execute_command("XTRIM", stream, *command))
        return removed

    async def _stream_of(self, prefix: str, group: str) -> str:
        """The stream the group's members report (P2), else the group's default."""
        described = await self.ask(m.DescribeGroup(request_id=0, stream_prefix=prefix,
                                                    consumer_group=group))
        if isinstance(described, m.GroupDescription):
            for member in described.members:
                if member.dead_letter_stream is not None:
                    self._reported[(prefix, group)] = member.dead_letter_stream
                    return member.dead_letter_stream
        return default_stream(prefix, group)

    # --- blocking parts, on a worker thread ----------------------------------------------

    def _records(self, stream: str, start: str = "-", count: int = READ_BATCH
                 ) -> list[DeadLetterRecord]:
        entries = self.client.xrange(stream, min=start, max="+", count=count)
        return [read_dead_letter(_text(entry_id), fields) for entry_id, fields in entries]

    def _all(self, stream: str, limit: int) -> list[DeadLetterRecord]:
        """The oldest dead letters, at most `limit`."""
        records: list[DeadLetterRecord] = []
        start = "-"
        while len(records) < limit:
            batch = self._records(stream, start, min(READ_BATCH, limit - len(records)))
            records += batch
            if len(batch) < READ_BATCH:
                break
            start = "(" + batch[-1].id
        return records

    def _list(self, request: m.ListDeadLetters, stream: str) -> m.DeadLetters:
        length = int(self.client.xlen(stream))
        scanned = self._all(stream, SUMMARY_LIMIT)
        newest = self.client.xrevrange(stream, max="+", min="-", count=1)
        newest_record = read_dead_letter(_text(newest[0][0]), newest[0][1]) if newest else None
        page = self._records(stream, "-" if request.after is None else "(" + request.after,
                             request.count)
        return m.DeadLetters(
            request_id=request.request_id, status=Status.OK, stream_prefix=request.stream_prefix,
            consumer_group=request.consumer_group, stream=stream, count=length,
            oldest_ms=scanned[0].dead_at_ms if scanned else None,
            newest_ms=newest_record.dead_at_ms if newest_record else None,
            errors_by_type=errors_by_type(scanned),
            retention=self._retention(request.stream_prefix, request.consumer_group),
            entries=tuple(_entry(record) for record in page))

    def _redrive(self, request: m.RedriveDeadLetters, stream: str,
                 streams: Sequence[str]) -> m.DeadLettersRedriven:
        prefix, group = request.stream_prefix, request.consumer_group
        if request.ids:
            records = [record for entry_id in request.ids
                       for record in self._records(stream, entry_id, 1) if record.id == entry_id]
        else:
            records = self._all(stream, request.max)
        plan = redrive_plan(records, prefix, ids=request.ids, limit=request.max,
                            force=request.force)
        spread = itertools.count()
        targets = [streams[shard_for_key(record.key, len(streams))] if record.key is not None
                   else streams[next(spread) % len(streams)] for record in plan.send]
        skipped = [m.SkippedDeadLetter(id=entry_id, reason=reason)
                   for entry_id, reason in plan.skipped]
        skipped += [m.SkippedDeadLetter(id=entry_id, reason=f"a duplicate of {twin} (the same "
                                        "source entry): deleted once that one is sent back")
                    for entry_id, twin in plan.duplicates]
        answer = m.DeadLettersRedriven(request_id=request.request_id, status=Status.OK,
                                       stream_prefix=prefix, consumer_group=group, stream=stream,
                                       dry_run=request.dry_run)
        if request.dry_run or not plan.send:
            return _evolve(answer, redriven=tuple(
                m.RedrivenEntry(id=record.id, shard=target)
                for record, target in zip(plan.send, targets, strict=True)), skipped=skipped)
        replies, replicas = self._write(plan.send, targets, group)
        confirmed: list[m.RedrivenEntry] = []
        for record, target, reply in zip(plan.send, targets, replies, strict=True):
            if isinstance(reply, Exception):
                skipped.append(m.SkippedDeadLetter(id=record.id, reason=f"not written: {reply}"))
            elif replicas < self.min_replicas:
                skipped.append(m.SkippedDeadLetter(
                    id=record.id, reason=f"written as {_text(reply)} but confirmed by {replicas} "
                                         f"of {self.min_replicas} replicas: the dead letter "
                                         "stays (a duplicate if the write survives)"))
            else:
                confirmed.append(m.RedrivenEntry(id=record.id, shard=target,
                                                 new_id=_text(reply)))
        sent_back = {entry.id for entry in confirmed}
        deleted = [*sent_back, *(entry_id for entry_id, twin in plan.duplicates
                                 if twin in sent_back)]
        if deleted:  # only once their writes (or their twins') are confirmed
            self.client.xdel(stream, *deleted)
        log_event(log, "dead_letters.redriven", prefix=prefix, group=group, stream=stream,
                  redriven=len(confirmed), skipped=len(skipped))
        return _evolve(answer, redriven=tuple(confirmed), skipped=skipped)

    def _write(self, records: Sequence[DeadLetterRecord], targets: Sequence[str],
               group: str) -> tuple[list[object], int]:
        """Each record through the produce script, then WAIT, on one connection: the replies
        (an id or the error) and the replicas WAIT reported (min_replicas when none asked)."""
        self.client.script_load(PRODUCE_SCRIPT.text)
        pipe = self.client.pipeline(transaction=False)
        for record, target in zip(records, targets, strict=True):
            pipe.execute_command("EVALSHA", PRODUCE_SCRIPT.sha, 2, target, seal_key(target),
                                 *redrive_fields(record, group))
        if self.min_replicas:
            pipe.execute_command("WAIT", self.min_replicas, self.wait_timeout_ms)
        replies = list(pipe.execute(raise_on_error=False))
        if not self.min_replicas:
            return replies, 0
        waited = replies.pop()
        return replies, int(waited) if isinstance(waited, int) else 0


def _retention_of(raw: object) -> m.Retention:
    stored = json.loads(_text(raw))
    return m.Retention(mode=RetentionMode.NONE, max_length=stored.get("maxLength"),
                       max_age_ms=stored.get("maxAgeMs"))


def _text(data: object) -> str:
    return data.decode() if isinstance(data, bytes) else str(data)


def _entry(record: DeadLetterRecord) -> m.DeadLetterEntry:
    return m.DeadLetterEntry(
        id=record.id, source_stream=record.source_stream, source_id=record.source_id,
        consumer_group=record.consumer_group, deliveries=record.deliveries, error=record.error,
        member_id=record.member_id, dead_at_ms=record.dead_at_ms,
        key=None if record.key is None else record.key.decode("utf-8", "replace"),
        value=record.value.decode("utf-8", "replace"), redriven=record.redriven)


def _evolve(answer: m.DeadLettersRedriven, *, redriven: tuple[m.RedrivenEntry, ...],
            skipped: list[m.SkippedDeadLetter]) -> m.DeadLettersRedriven:
    return attrs.evolve(answer, redriven=redriven, skipped=tuple(skipped))
