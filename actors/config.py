"""Coordinator settings: the flags of `rsc coordinator` (PROTOCOL.md, Command line)."""

from __future__ import annotations

import attrs


@attrs.frozen(kw_only=True)
class CoordinatorConfig:
    redis_url: str | None = None
    host: str = "127.0.0.1"
    port: int = 8765
    tick_interval_ms: int = 1000
    lease_ttl_ms: int = 10000
    heartbeat_interval_ms: int = 3000
    revoke_timeout_ms: int = 60000
    admin_token: str | None = None
    member_token: str | None = None
    max_frame_bytes: int = 1 << 20
    metrics_port: int | None = None
    push: bool = True
    keep_drained_streams: bool = False
