"""The coordinator's log events; the formats and the setup are rsc/common/logs.py, shared by
every tool.

Call sites name the event and pass its facts as keyword fields:

    log = logging.getLogger("rsc.coordinator")
    log_event(log, "member.joined", prefix="orders", group="billing",
              member="10.0.0.7-4242-0-k3f9", group_epoch=5)

Event names (the coordinator's vocabulary; keep call sites to these):
`group.epoch` (group or assignment epoch changed), `member.joined`,
`member.left`, `member.expired`, `member.removed`, `member.fenced`,
`member.revoked` (a revoke completed), `member.away` (a static member's
temporary leave or lapsed lease, S2/S5: `instanceId`, `reason`),
`member.returned` (its return, S3: `instanceId`, `replaced` when under a new
memberId; a session-timeout removal is `member.expired` with
`reason=session_timeout`), `routing.changed`,
`migration.progress`, `migration.complete`, `store.unavailable` (once when an
outage starts), `store.still_unavailable` (a reminder, at most every 10 s),
`store.available` (once when it ends); admission and supervision:
`accept.fd_exhausted` / `accept.fd_available` (accept failed with EMFILE;
reminded at most every 10 s), `session.failed`, `prefix.actor_failed`,
`prefix.reload_failed`, `prefix.reloaded`, `coordinator.lease_taken_over`
(the previous holder was a dead process on this host); the process itself:
`coordinator.started`, `coordinator.stopped` (`lease_released`), `redis.embedded` (no Redis
URL: a private redis-server started), `coordinator.failed` (one line an operator can act on).
"""

from __future__ import annotations

from rsc.common.logs import (
    JsonFormatter,
    TextFormatter,
    configure_logging,
    log_event,
    parse_level,
    record_fields,
)

__all__ = ["JsonFormatter", "TextFormatter", "configure_logging", "log_event", "parse_level",
           "record_fields"]
