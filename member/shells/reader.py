"""The reader shell: XREADGROUP with a bounded BLOCK, and XAUTOCLAIM recovery first.

It asks the ledger what to do: fence first if the lease ran out (no read
after the lease, as no handler), claim the pending entries of a shard when
the claim gate opens (recoverable), else read new entries of the readable
shards. What it gets is queued only while the ledger says the shard is still
read under the generation the read was sent for; the ledger also learns which
shards a read in progress may still deliver entries for, so a revoked shard
is reported REVOKED only once every such read has answered. Nothing is read
before the member's storeId check has passed (runtime.py).

While the reader keeps up a steady stream of reads over an unchanged set of
shards, one read stays in flight: Redis serves it while this process parses
the last batch.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import redis
import trio

from rsc.common.redact import redact_url
from rsc.member.message import queued_entries
from rsc.member.pure.attempts import is_crash_loop
from rsc.member.pure.budget import ahead_fits, part_block_ms, read_shape
from rsc.member.pure.reconcile import NO_ACTIONS
from rsc.member.redis_io.dataplane import StreamOps as DataPlane
from rsc.member.redis_io.dataplane import open_stream_ops
from rsc.member.redis_io.ops import stream_ops
from rsc.member.redis_io.stream_commands import Claimed, word
from rsc.member.redis_io.streams import StreamOps, connect, read_store_id
from rsc.member.redis_io.unrecoverable import check_permanent

if TYPE_CHECKING:
    from rsc.member.core import MemberCore

log = logging.getLogger("rsc.member.reader")  # the name logging configs and docs know

RETRY_PAUSE_S = 0.2
BUDGET_LOOK_S = 0.5

# a read sent ahead, not yet answered: (shards, their generations, when it was sent)
ReadAhead = tuple[tuple[str, ...], dict[str, int], float]


class Reader:
    """The reader of one member."""

    def __init__(self, core: MemberCore) -> None:
        self.core = core
        self.read_ahead: ReadAhead | None = None
        self.reads = 0  # reads sent: whose turn it is when a budget allows fewer shards than held
        self.empty_parts = 0  # reads in a row over such a part that found it empty
        self.ahead_most = 0  # the most entries the read ahead in flight can return

    def _lease_checked(self) -> None:
        actions = self.core.ledger.check_lease(self.core.clock())
        if actions is not NO_ACTIONS:
            self.core.apply(actions)

    def _can_work(self) -> bool:
        core = self.core
        self._lease_checked()
        now = core.clock()
        return (core.queue.has_room and self._budget_left() != 0
                and bool(core.ledger.recoverable(now) or core.ledger.readable(now)))

    def _budget_left(self) -> int | None:
        budget = self.core.read_budget
        return None if budget is None else budget.left()

    async def run(self) -> None:
        """Read until cancelled."""
        core = self.core
        config = core.config
        await core.life.store_ok.wait()  # no read before the storeId check (runtime.py)
        ops = stream_ops(connect(config.redis_url, decode=False), config.consumer_group, core.member_id,
                        use_xackdel=core.server.xackdel)
        reads = open_stream_ops(ops)  # native where it can be, else `ops` in a thread
        store_unsure = False  # K9: a read failed; the storeId is compared again before the next
        try:
            while True:
                if store_unsure:
                    store_unsure = not await self._recheck_store(ops.client)
                if core.life.fatal is not None:  # K9 (or S3): nothing more is read
                    await trio.sleep_forever()
                if self.read_ahead is None:  # never park with a read in flight
                    while not self._can_work():
                        core.reader.waiting = True
                        core.queue.room_wanted = True
                        try:  # a budget another member gives back wakes nobody here: look again
                            with trio.move_on_after(BUDGET_LOOK_S if self._budget_left() == 0
                                                    else math.inf):
                                await core.reader.wake.wait()
                        finally:
                            core.reader.waiting = False
                    recoverable = core.ledger.recoverable(core.clock())
                    if recoverable:
                        try:
                            await self._recover_some(ops, recoverable[0])
                        except redis.RedisError as exc:
                            check_permanent(exc, config.redis_url)
                            log.warning("member %s: claim failed: %r", core.member_id, exc)
                            await trio.sleep(RETRY_PAUSE_S)
                        continue
                try:
                    await self._read_new(reads)
                except redis.RedisError as exc:
                    check_permanent(exc, config.redis_url)
                    log.warning("member %s: read failed: %r", core.member_id, exc)
                    await reads.reset_reads()
                    self.read_ahead = None
                    core.apply(core.ledger.read_failed())
                    store_unsure = isinstance(exc, (redis.ConnectionError, redis.TimeoutError))
                    await trio.sleep(RETRY_PAUSE_S)
        finally:
            await reads.aclose()
            ops.client.close()

    async def _recheck_store(self, client: redis.Redis) -> bool:
        """K9: after a failed read the next call reconnects: this Redis must still hold the
        storeId the member started with. Another one stops the member; none (K8's store lost
        with its coordinator) or no answer: True only once it was compared."""
        core = self.core
        known = core.ledger.store_id
        if known is None:  # an older coordinator names none: nothing to compare
            return True
        try:
            held = await trio.to_thread.run_sync(read_store_id, client)
        except redis.RedisError:
            return False  # still down: compared before the read after next
        if held is not None and held != known:
            core.store_changed(f"the Redis at {redact_url(core.config.redis_url)}", held)
        return held is not None

    def _observe(self, shards: frozenset[str], started: float) -> None:
        if self.core.observers.read_observer is not None:
            self.core.observers.read_observer(self.core.member_id, shards, started, trio.current_time())

    def _reads_in_progress(self, shards: frozenset[str]) -> None:
        actions = self.core.ledger.reads_in_progress(shards)
        if actions is not NO_ACTIONS:
            self.core.apply(actions)

    async def _recover_some(self, ops: StreamOps, shard: str) -> None:
        core = self.core
        ledger = core.ledger
        generation = ledger.generation(shard)
        start = ledger.claim_cursor(shard)
        if start is None:
            return
        count = core.config.read_count
        left = self._budget_left()
        if left is not None:
            count = min(count, left)
            if count < 1:
                return

        counted = core.config.retry is not None

        def claim() -> Claimed:
            if counted:  # P1: the claim leaves the counts alone; they and the bodies come next
                return ops.claim_counted(shard, start, count=count)
            cursor, entries = ops.claim_pending_raw(shard, start, count=count)
            ids = [word(entry[0]) for entry in entries]
            return Claimed(cursor, entries, ops.pending_counts(shard, ids) if ids else {}, [])

        self._reads_in_progress(frozenset({shard}))
        started = trio.current_time()
        try:
            claimed = await trio.to_thread.run_sync(claim)
        finally:
            self._observe(frozenset({shard}), started)
            self._reads_in_progress(frozenset())
        messages = queued_entries(shard, claimed.entries, generation)
        budget = core.read_budget
        if budget is not None:
            budget.took(len(messages))
        if ledger.claimed(shard, generation, claimed.cursor):
            self._counted(shard, generation, claimed, counted)
            core.queue.push_many(messages)
        elif budget is not None:
            budget.give_back(len(messages))

    def _counted(self, shard: str, generation: int, claimed: Claimed, counted: bool) -> None:
        """P1: keep the claimed entries' counts for the workers (with a RetryPolicy) or report a
        crash loop (without); ack the entries whose bodies are gone."""
        core = self.core
        if counted:
            core.retry_book.claimed_counts.update(((shard, entry_id), deliveries)
                                                  for entry_id, deliveries in claimed.counts.items())
        else:
            for entry_id, deliveries in claimed.counts.items():
                if is_crash_loop(deliveries):
                    core.stats.redelivered += 1
                    log.warning("member %s: %s %s claimed with delivery count %d (a handler keeps "
                                "failing or crashing on it; a RetryPolicy dead-letters it)",
                                core.member_id, shard, entry_id, deliveries)
        if claimed.gone:
            core.stats.gone_pending += len(claimed.gone)
            log.warning("member %s: %d pending entries of %s were trimmed away (retention caps), "
                        "acked without a handler call: %s", core.member_id, len(claimed.gone),
                        shard, ", ".join(claimed.gone[:10]))
            for entry_id in claimed.gone:
                core.ledger.started(shard)  # the acker finishes it
                core.acks.add(shard, generation, entry_id)
            core.acker_parking.wake()

    async def _read_new(self, reads: DataPlane) -> None:
        """Receive one XREADGROUP reply, sending the next read first when it will be wanted.

        The shards of a read in flight count as being read until its reply is in.
        """
        core = self.core
        ledger = core.ledger
        count, block_ms = core.config.read_count, core.config.block_ms
        if self.read_ahead is not None:
            self._lease_checked()  # the read ahead is answered either way; no new one then
        readable = tuple(ledger.readable(core.clock()))
        ahead_of_this = self.read_ahead
        if ahead_of_this is None:
            shards, generations, sent_at = (
                readable, {s: ledger.generation(s) for s in readable}, trio.current_time())
            send_first: tuple[str, ...] | None = shards
        else:
            (shards, generations, sent_at), send_first = ahead_of_this, None
        # ahead only when the reader would read again at once anyway (as `_can_work`)
        ahead = (bool(readable) and readable == shards and not ledger.recovering()
                 and core.queue.has_room)
        budget = core.read_budget
        left = None if budget is None else budget.left()
        if left is not None:  # --max-messages: no more than is left, in flight included
            in_flight = self.ahead_most if ahead_of_this is not None else 0
            if send_first:
                held = len(send_first)
                send_first, count = read_shape(send_first, count, left, self.reads)
                self.reads += 1
                shards = send_first
                block_ms = part_block_ms(held, len(send_first), self.empty_parts, block_ms)
                in_flight += len(send_first) * count
            ahead = ahead and ahead_fits(left, in_flight, len(readable), count)
        ahead_generations = {s: ledger.generation(s) for s in readable} if ahead else None

        sends = [sent for sent in (send_first, readable if ahead else None) if sent]
        self._reads_in_progress(frozenset(shards) | frozenset(readable if ahead else ()))
        ahead_sent_at = trio.current_time()
        try:
            replies = await reads.read(sends, count=count, block_ms=block_ms)
        finally:
            if ahead_generations is not None and reads.reads_sent:
                self.read_ahead = (readable, ahead_generations, ahead_sent_at)
                self.ahead_most = len(readable) * count  # COUNT is per stream
                in_progress = frozenset(readable)
            else:
                self.read_ahead = None
                in_progress = frozenset()
            self._observe(frozenset(shards), sent_at)
            self._reads_in_progress(in_progress)
        if budget is not None and send_first:
            self.empty_parts = 0 if any(entries for _shard, entries in replies) else (
                self.empty_parts + 1)
        for shard, entries in replies:
            messages = queued_entries(shard, entries, generations[shard])
            if budget is not None:
                budget.took(len(messages))
            if ledger.still_reading(shard, generations[shard]):
                core.queue.push_many(messages)
            elif budget is not None:
                budget.give_back(len(messages))

