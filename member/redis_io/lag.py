"""The lag shell: polls XINFO GROUPS of the owned shards into the member's stats."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import redis
import trio

from rsc.member.redis_io.ops import stream_ops
from rsc.member.redis_io.streams import connect

if TYPE_CHECKING:
    from rsc.member.core import MemberCore

log = logging.getLogger("rsc.member.lag")  # the name logging configs and docs know


async def poll_lag(core: MemberCore) -> None:
    """Refresh `stats.lag` every `lag_interval_s`, until cancelled."""
    config = core.config
    ops = stream_ops(connect(config.redis_url), config.consumer_group, core.member_id,
                    use_xackdel=core.server.xackdel)
    try:
        while True:
            owned = sorted(core.ledger.state.owned())
            try:
                core.stats.lag = await trio.to_thread.run_sync(ops.lag, owned)
            except redis.RedisError as exc:
                log.debug("lag poll failed: %r", exc)
            await trio.sleep(config.lag_interval_s)
    finally:
        ops.client.close()
