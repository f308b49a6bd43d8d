"""The acker shell: sends handled entries' acks in batches through the fenced ack script.

Workers add ids to the `AckBook` (ackbook.py); the acker takes up to `ack_batch` of them
per round trip, lingering up to `ack_linger_ms` while the ledger's flush rule
says more may come. Right before sending, the ledger admits every buffer (D1:
held at its generation, lease alive); what it refuses stays pending in Redis
for the next owner; so does a whole batch the application's `before_ack` holds back
(`rsc consume`, whose stdout lines are flushed there). Redis itself refuses the rest if the owner token names
someone else (NOT_OWNER), and the ledger is told. Acks delete the entry
(XACKDEL ... ACKED: gone once every group acked it) only while the prefix's
retention is `acked` and the server has XACKDEL; otherwise they are plain XACKs.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import redis
import trio

from rsc.common.backoff import ACK_RETRY
from rsc.member.pure.ackbook import Taken
from rsc.member.pure.ledger import Verdict
from rsc.member.pure.reconcile import NO_ACTIONS
from rsc.member.redis_io.dataplane import StreamOps as DataPlane
from rsc.member.redis_io.dataplane import open_stream_ops
from rsc.member.redis_io.ops import stream_ops
from rsc.member.redis_io.stream_commands import NOT_OWNER
from rsc.member.redis_io.streams import connect
from rsc.member.redis_io.unrecoverable import check_permanent

if TYPE_CHECKING:
    from rsc.member.core import MemberCore

log = logging.getLogger("rsc.member.acker")  # the name logging configs and docs know


def _due(core: MemberCore) -> bool:
    acks = core.acks
    return core.ack_rule.due(acks.pending, awaited=acks.awaited, busy=core.workers.busy,
                             queued=len(core.queue))


async def run_acker(core: MemberCore) -> None:
    """Send acks in batches, until cancelled."""
    config, acks, parking = core.config, core.acks, core.acker_parking
    ops = stream_ops(connect(config.redis_url), config.consumer_group, core.member_id,
                    use_xackdel=core.server.xackdel)
    acking = open_stream_ops(ops)  # native where it can be, else `ops` in a thread
    linger = core.ack_rule.linger_ms / 1000
    try:
        while True:
            while not acks.pending:
                await parking.park()
            if not _due(core):
                with trio.move_on_after(linger):
                    while not _due(core):
                        await parking.park()
            await _send(core, acking, acks.take(core.ack_rule.batch))
    finally:
        await acking.aclose()
        ops.client.close()


async def _send(core: MemberCore, ops: DataPlane, batch: Taken) -> None:
    ledger = core.ledger
    before = core.observers.before_ack
    if before is not None and not before():
        for buffer, ids, complete in batch:  # held back: pending in Redis for the next owner
            buffer.refused = True
            if complete and buffer.sent is not None:
                buffer.sent.set()
            core.finish(buffer.shard, len(ids))
        return
    retry = ACK_RETRY.start()
    while True:
        ids_by_shard: dict[str, list[str]] = {}
        now = core.clock()
        for buffer, ids, _ in batch:
            verdict, actions = ledger.admit(buffer.shard, buffer.generation, now)
            if core.observers.trace is not None:
                core.observers.trace.admission("ack", ledger, buffer.shard, buffer.generation, now,
                                     verdict)
            if actions is not NO_ACTIONS:
                core.apply(actions)
            if verdict is Verdict.ALLOWED:
                ids_by_shard.setdefault(buffer.shard, []).extend(ids)
            else:
                buffer.refused = True  # no longer ours: stays pending for the next owner
        ops.use_xackdel = core.use_xackdel()  # the prefix's retention, as last heard
        try:
            # not cut short by a cancellation (as a thread's round trip is not)
            with trio.CancelScope(shield=True):
                results = await ops.ack(ids_by_shard)
            break
        except redis.RedisError as exc:
            check_permanent(exc, core.config.redis_url)
            log.warning("member %s: ack failed, retrying: %r", core.member_id, exc)
            await trio.sleep(retry.next())
    for shard, result in results.items():
        if result == NOT_OWNER:
            core.stats.ack_refusals += 1
            core.apply(ledger.on_ack_refused(shard))
        else:
            core.stats.acked += result
            if core.observers.ack_observer is not None:
                core.observers.ack_observer(core.member_id, result)
    for buffer, ids, complete in batch:
        if results.get(buffer.shard) == NOT_OWNER:
            buffer.refused = True
        if complete and buffer.sent is not None:
            buffer.sent.set()
        core.finish(buffer.shard, len(ids))
