"""The worker shell: long-lived workers (as many as the ledger says) run the handler.

Each worker takes the next entry the key-ordered `WorkQueue` allows, asks the
ledger to admit it (D1: held at the generation it was read under, lease
alive, in one call, right before the handler), runs the handler (with the
retry policy, if any) and hands the id to the ack book. A refused entry is
not run; it stays pending in Redis for the next owner.

The no-op path costs a few microseconds per message: no task, no thread hop,
no wakeup of anybody but the acker once a batch is worth sending.
"""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING

import trio

from rsc.member.ledger import Verdict
from rsc.member.message import MESSAGE_SETTERS, Handler, Message, new_message
from rsc.member.ops import produce_ops
from rsc.member.policies import NO_RETRY, AckPolicy, DeadLetter, RetryLater, dead_letter_fields
from rsc.member.reconcile import NO_ACTIONS, Actions

if TYPE_CHECKING:
    import redis

    from rsc.member.core import MemberCore

log = logging.getLogger(__name__)

CHECKPOINT_EVERY = 64  # a handler that never awaits must not starve the other tasks


class Workers:
    """The worker pool of one member."""

    def __init__(self, core: MemberCore, handler: Handler, misc_client: redis.Redis) -> None:
        self.core = core
        self.handler = handler
        self.is_async = inspect.iscoroutinefunction(handler)
        self.threads = trio.CapacityLimiter(max(64, core.config.capacity))
        self.dead_letters = produce_ops(misc_client)  # XADD of dead letters (its add_raw)

    async def run(self) -> None:
        """Keep as many long-lived workers as the ledger's worker count (never one per message)."""
        core = self.core
        async with trio.open_nursery() as nursery:
            spawned = 0
            while True:
                while spawned < core.queue.workers:
                    nursery.start_soon(self.worker, spawned)
                    spawned += 1
                await core.changed.wait()

    def admit(self, shard: str, generation: int, what: str = "handler") -> bool:
        """D1 before a handler call (or a dead letter): the ledger's verdict, its actions
        applied."""
        core = self.core
        now = core.clock()
        verdict, actions = core.ledger.admit(shard, generation, now)
        self._decided(what, shard, generation, now, verdict, actions)
        return verdict is Verdict.ALLOWED

    def _decided(self, what: str, shard: str, generation: int, now: float, verdict: Verdict,
                 actions: Actions) -> None:
        core = self.core
        if core.trace is not None:
            core.trace.admission(what, core.ledger, shard, generation, now, verdict)
        if actions is not NO_ACTIONS:
            core.apply(actions)

    async def worker(self, index: int) -> None:
        """Take entries until none is left, then wait until the reader queues more."""
        core = self.core
        queue, ledger, acks, stats = core.queue, core.ledger, core.acks, core.stats
        parking = core.acker_parking
        ack_rule = core.ack_rule
        handler = self.handler
        member_id = core.member_id
        start_handler = ledger.start_handler
        clock = core.clock
        decided = self._decided
        traced = core.trace is not None
        allowed = Verdict.ALLOWED
        pop, wait, done = queue.pop, queue.wait, queue.done
        set_shard, set_id, set_key, set_value, set_fields, set_member, set_attempt = MESSAGE_SETTERS
        new = object.__new__
        config = core.config
        fast = self.is_async and config.retry is None and config.ack_policy is AckPolicy.AFTER
        since_checkpoint = 0
        while True:
            entry = pop(index)
            if entry is None:
                since_checkpoint = 0
                await wait(index)
                continue
            (shard, key), entry_id, fields, value, generation = entry
            now = clock()
            verdict, actions = start_handler(shard, generation, now)  # D1, in one call
            if verdict is not allowed or traced:
                decided("handler", shard, generation, now, verdict, actions)
                if verdict is not allowed:
                    done(entry)
                    continue
            message = new(Message)  # as Message(...), without attrs' frozen __init__
            set_shard(message, shard)
            set_id(message, entry_id)
            set_key(message, key)
            set_value(message, value)
            set_fields(message, fields)
            set_member(message, member_id)
            set_attempt(message, 1)
            core.busy += 1
            handled = False
            try:
                if fast:
                    try:
                        await handler(message)  # type: ignore[misc]
                        stats.processed += 1
                        handled = True
                    except Exception as exc:  # noqa: BLE001 - a handler's failure is data
                        stats.failed += 1
                        log.warning("member %s: handler failed on %s %s (attempt 1): %r",
                                    member_id, shard, entry_id, exc)
                else:
                    handled = await self.process(message, generation)
                if handled:  # the acker admits it again right before acking
                    acks.add(shard, generation, entry_id)
            finally:
                core.busy -= 1
                done(entry)
                if not handled:
                    core.finish(shard)
            if handled and parking.parked and ack_rule.wake_acker(
                    acks.pending, busy=core.busy, queued=len(queue)):
                parking.wake()
            since_checkpoint += 1
            if since_checkpoint >= CHECKPOINT_EVERY:
                since_checkpoint = 0
                await trio.lowlevel.checkpoint()

    async def process(self, message: Message, generation: int) -> bool:
        """The general path (sync handlers, retries, AckPolicy.BEFORE); True when the
        entry still needs its ack."""
        if self.core.config.ack_policy is AckPolicy.BEFORE:
            if await self.ack_now(message, generation):
                await self.run_handler(message, generation, admitted=False)
            return False
        return await self.run_handler(message, generation, admitted=True)

    async def ack_now(self, message: Message, generation: int) -> bool:
        """Ack before the handler (at-most-once); True when Redis took the ack."""
        core = self.core
        core.ledger.started(message.shard)  # the acker finishes this extra count
        buffer = core.acks.add(message.shard, generation, message.id)
        sent = buffer.sent
        if not isinstance(sent, trio.Event):  # the first worker waiting on this buffer
            sent = buffer.sent = trio.Event()
        core.acks.awaited += 1
        core.acker_parking.wake()
        try:
            await sent.wait()
        finally:
            core.acks.awaited -= 1
        return not buffer.refused

    async def run_handler(self, first: Message, generation: int, *, admitted: bool) -> bool:
        """Run the handler, then what the retry policy says after each failure; True when the
        entry may be acked.

        Every call but an `admitted` first one, and a dead letter, is admitted by the
        ledger first (D1).
        """
        core = self.core
        retry = core.config.retry or NO_RETRY
        message = first
        while True:
            if (message.attempt > 1 or not admitted) and not self.admit(first.shard, generation):
                return False
            try:
                if self.is_async:
                    await self.handler(message)  # type: ignore[misc]
                else:
                    await trio.to_thread.run_sync(self.handler, message, limiter=self.threads)
                core.stats.processed += 1
                return True
            except Exception as exc:  # noqa: BLE001 - a handler's failure is data, not a crash
                error = exc
                core.stats.failed += 1
                log.warning("member %s: handler failed on %s %s (attempt %d): %r",
                            core.member_id, first.shard, first.id, message.attempt, exc)
            step = retry.after_failure(message.attempt)
            if isinstance(step, RetryLater):
                await trio.sleep(step.delay_s)
                message = new_message(first.shard, first.id, first.key, first.value,
                                      dict(first.fields), first.member_id, step.attempt)
                continue
            if isinstance(step, DeadLetter):
                if not self.admit(first.shard, generation, "dead letter"):
                    return False  # a side effect as a handler call is: D1 applies
                await self.dead_letter(first, step, error)
                return True
            return False  # LeavePending: no ack, delivered again to the next owner

    async def dead_letter(self, message: Message, step: DeadLetter, error: BaseException) -> None:
        core = self.core
        fields = dead_letter_fields(shard=message.shard, entry_id=message.id, key=message.key,
                                    value=message.value, error=error, attempts=step.attempts,
                                    consumer_group=core.config.consumer_group,
                                    member_id=core.member_id)
        await trio.to_thread.run_sync(self.dead_letters.add_raw, step.stream, fields)
        core.stats.dead_lettered += 1
