"""Coordinator settings: the flags of `rsc coordinator` (docs/protocol.md, Command line)."""

from __future__ import annotations

import attrs

DEFAULT_MAX_GROUPS = 100_000
DEFAULT_MAX_GROUP_SIZE = 20_000
HANDSHAKE_TIMEOUT_S = 10.0


def _positive_or_none(_instance: object, attribute: attrs.Attribute, value: int | None) -> None:
    if value is not None and value < 1:
        raise ValueError(f"{attribute.name.replace('_', '-')} must be at least 1, got {value}")


def _positive(_instance: object, attribute: attrs.Attribute, value: float) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name.replace('_', '-')} must be positive, got {value}")


def _not_negative(_instance: object, attribute: attrs.Attribute, value: int) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name.replace('_', '-')} must be 0 or more, got {value}")


@attrs.frozen(kw_only=True)
class CoordinatorConfig:
    redis_url: str | None = None
    host: str = "127.0.0.1"
    port: int = 8765
    tick_interval_ms: int = 1000
    lease_ttl_ms: int = 10000
    heartbeat_interval_ms: int = 3000
    revoke_timeout_ms: int = 60000
    static_session_timeout_ms: int = attrs.field(default=45000, validator=_positive)  # S5
    admin_token: str | None = None
    viewer_token: str | None = None  # C1: /v1/admin for read requests only
    member_token: str | None = None
    max_frame_bytes: int = attrs.field(default=1 << 20, validator=_positive)
    metrics_port: int | None = None
    console_port: int | None = None  # the web console (rsc.console); None: not served
    push: bool = True
    keep_drained_streams: bool = False
    # A1 admission: None means 80 % of the fd limit (raised to the hard limit at start)
    max_sessions: int | None = attrs.field(default=None, validator=_positive_or_none)
    max_groups: int = attrs.field(default=DEFAULT_MAX_GROUPS, validator=_positive)
    max_group_size: int = attrs.field(default=DEFAULT_MAX_GROUP_SIZE, validator=_positive)
    handshake_timeout_s: float = attrs.field(default=HANDSHAKE_TIMEOUT_S, validator=_positive)
    # TLS: with both files the websocket port serves wss://; metrics_tls puts them on the metrics port too
    tls_cert: str | None = None
    tls_key: str | None = None
    metrics_tls: bool = False
    # K5: every metadata write waits (WAIT, within D4's budget) for this many replicas
    min_replicas: int = attrs.field(default=0, validator=_not_negative)
    # C4: how often rsc_group_lag_seconds and rsc_group_pending_age_seconds are read from Redis
    lag_metrics_interval_ms: int = attrs.field(default=15000, validator=_positive)

    def __attrs_post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("--tls-cert and --tls-key go together: give both or neither")
        if self.viewer_token is not None and self.admin_token is None:
            raise ValueError("--viewer-token needs --admin-token: without an admin token every "
                             "client may change everything, so a read-only token means nothing")
        if self.metrics_tls and self.tls_cert is None:
            raise ValueError("--metrics-tls needs --tls-cert and --tls-key")
