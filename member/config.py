"""Settings of one member (the listener API and `rsc consume` build these)."""

from __future__ import annotations

import ssl

import attrs

from rsc.member.policies import AckPolicy, RetryPolicy


@attrs.frozen(kw_only=True)
class MemberConfig:
    """Settings of one member (the listener API and `rsc consume` build these)."""

    coordinator_url: str
    redis_url: str
    stream_prefix: str
    consumer_group: str
    member_id: str
    instance_id: str | None = None  # S1: a static member's instanceId (None: dynamic)
    capacity: int = 4
    token: str | None = None
    # wss:// coordinator: verified against ssl_context, else the system store and ca_file ($RSC_CA_FILE)
    ca_file: str | None = None
    ssl_context: ssl.SSLContext | None = attrs.field(default=None, eq=False, repr=False)
    read_count: int = 100
    block_ms: int = 200
    max_buffered: int = 1000
    ack_batch: int = 500
    ack_linger_ms: float = 5.0
    ack_policy: AckPolicy = AckPolicy.AFTER
    retry: RetryPolicy | None = None
    default_heartbeat_interval_ms: int = 1000
    # each regular heartbeat comes after interval x (1 - jitter x U[0, 1)): never later than
    # the interval (the lease arithmetic is unchanged), and members that a coordinator stall or
    # restart answered all at once drift apart again instead of beating in one pack forever
    heartbeat_jitter: float = attrs.field(default=0.2, validator=[attrs.validators.ge(0.0),
                                                                   attrs.validators.lt(1.0)])
    request_timeout_s: float = 10.0
    drain_timeout_s: float = 30.0
    leave_timeout_s: float = 5.0
    lag_interval_s: float = 2.0
    check_store_id: bool = True  # before the first read (off when the caller checked already)
    join_retry_initial_s: float = 0.5  # a join refused by a cap (A1) is retried with backoff
    join_retry_max_s: float = 15.0
    redis_retry_max_s: float = 2.0  # start-up Redis calls retried with backoff up to this
