"""Coordinator settings: the flags of `rsc coordinator` (docs/protocol.md, Command line)."""

from __future__ import annotations

import ipaddress

import attrs

from rsc.actors.core.handshake_gate import parse_allowed_origins

DEFAULT_MAX_GROUPS = 100_000
DEFAULT_MAX_GROUP_SIZE = 20_000
HANDSHAKE_TIMEOUT_S = 10.0
DEFAULT_EMPTY_GROUP_RETENTION_MS = 604_800_000  # 7 days (B6)


def store_deadline_ms(lease_ttl_ms: float) -> float:
    """D4: how long a store call (a metadata write, a lease renewal, a shard round trip) may
    take before it is abandoned and counts as failed: a third of the member lease TTL."""
    return lease_ttl_ms / 3


def _positive_or_none(_instance: object, attribute: attrs.Attribute, value: int | None) -> None:
    if value is not None and value < 1:
        raise ValueError(f"{attribute.name.replace('_', '-')} must be at least 1, got {value}")


def _positive(_instance: object, attribute: attrs.Attribute, value: float) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name.replace('_', '-')} must be positive, got {value}")


def _not_negative(_instance: object, attribute: attrs.Attribute, value: int) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name.replace('_', '-')} must be 0 or more, got {value}")


def _names(text: str | tuple[str, ...]) -> tuple[str, ...]:
    """A comma list (or its items) without blanks, lower-cased: `--console-hosts`."""
    items = text.split(",") if isinstance(text, str) else text
    return tuple(item.strip().lower() for item in items if item.strip())


def _origins(text: str | tuple[str, ...]) -> tuple[str, ...]:
    return parse_allowed_origins(text)


def _token(value: str | None) -> str | None:
    return None if value is None else value.strip()


def is_loopback_host(host: str) -> bool:
    """B2: whether a listen address reaches this machine only (a name other than `localhost`
    counts as beyond loopback: what it resolves to can change)."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


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
    # B6: an empty group is deleted after this long (0: never); Kafka's offsets.retention.minutes
    empty_group_retention_ms: int = attrs.field(default=DEFAULT_EMPTY_GROUP_RETENTION_MS,
                                                validator=_not_negative)
    # surrounding whitespace is no part of a token (a file written by `openssl rand -hex 32`
    # ends with a newline; an HTTP header value is trimmed)
    admin_token: str | None = attrs.field(default=None, converter=_token)
    viewer_token: str | None = attrs.field(default=None, converter=_token)  # C1: reads only
    member_token: str | None = attrs.field(default=None, converter=_token)
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
    # B7: how often every shard of every live version is checked for damage
    shard_check_interval_s: float = attrs.field(default=60.0, validator=_positive)
    # K5: every metadata write waits (WAIT, within D4's budget) for this many replicas
    min_replicas: int = attrs.field(default=0, validator=_not_negative)
    # B1: browser origins let through on /v1/member and /v1/admin; the console's own names
    allowed_origins: tuple[str, ...] = attrs.field(default=(), converter=_origins)
    console_hosts: tuple[str, ...] = attrs.field(default=(), converter=_names)
    # B2: listen beyond loopback without both tokens (warned at every start)
    allow_unauthenticated: bool = False
    # B5: loopback peers are never throttled; tests turn that off (they reach loopback only)
    throttle_loopback: bool = False
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
        for flag, token in (("--admin-token", self.admin_token), ("--member-token", self.member_token)):
            if token == "":
                raise ValueError(f"{flag} is empty: give a token (for example the output of "
                                 "`openssl rand -hex 32`) or leave the flag out")
        missing = self.missing_tokens
        if missing and not is_loopback_host(self.host) and not self.allow_unauthenticated:
            raise ValueError(
                f"--host {self.host} listens beyond loopback without {' and '.join(missing)}: "
                "give both tokens (docs/operations/security.md says how to make them), or pass "
                "--allow-unauthenticated to serve the endpoints open")

    @property
    def store_deadline_ms(self) -> float:
        """D4's deadline of every store call, a third of the lease TTL (`store_deadline_ms`)."""
        return store_deadline_ms(self.lease_ttl_ms)

    @property
    def store_deadline_s(self) -> float:
        return self.store_deadline_ms / 1000

    @property
    def missing_tokens(self) -> list[str]:
        """The token flags not given (B2)."""
        return [flag for flag, token in (("--admin-token", self.admin_token),
                                         ("--member-token", self.member_token)) if token is None]
