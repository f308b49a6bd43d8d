"""The errors of the library, one family (L1, docs/protocol.md).

    from rsc.errors import AuthenticationError, RscError, SendTimeout

    try:
        with open_producer(url, redis_url, "orders", token=token) as producer:
            producer.send("customer-7", "paid", timeout=2.0)
    except AuthenticationError:      # a token (or Redis credentials) refused: final (L2)
        ...
    except SendTimeout as exc:       # L3: exc.confirmed, exc.not_accepted
        ...
    except RscError:                 # anything else from outside the caller's own code
        ...

Every error a public call of `rsc.member`, `rsc.admin.client` or `rsc.testing` raises for
a reason outside the caller's code is an `RscError`; an argument of the wrong type or
value is Python's own `TypeError` or `ValueError`. No trio exception and no exception
group leaves a public call (the host's own cancellation aside).

    RscError
    ├── Unrecoverable            final: no retry can change it (L2); raised after one attempt
    │   ├── ConfigurationError   a bad URL, option, scheme, TLS setup, db, Sentinel service
    │   ├── AuthenticationError  a token refused (HTTP 401/403), Redis credentials or ACL refused
    │   ├── StoreMismatch        the Redis given is not the coordinator's (another storeId)
    │   │   └── StoreChanged     K9: the store changed under a running client
    │   └── InstanceFenced       S3: a newer member took over this instance id
    ├── CoordinatorUnavailable   the coordinator cannot be reached (or has no routing) in time
    ├── RedisUnavailable         Redis cannot be reached in time
    ├── SendTimeout              L3: a send not confirmed within its `timeout=` (a TimeoutError)
    ├── MessageTooLarge          M4: a message over `max_message_bytes` (a ValueError)
    ├── ProducerClosed           a call on a producer that is closed (a RuntimeError)
    └── AdminError               the coordinator refused an admin request (its `status`)

The classes other modules raise (`rsc.member.session.BadCoordinatorUrl`,
`rsc.common.tls.TlsFailed`, `rsc.admin.client.AdminConnectError`, ...) are subclasses of
these, so code that caught them keeps working.
"""

from __future__ import annotations

from rsc.common.error_family import (
    AdminError,
    AuthenticationError,
    ConfigurationError,
    CoordinatorUnavailable,
    InstanceFenced,
    MessageTooLarge,
    ProducerClosed,
    RedisUnavailable,
    RscError,
    SendTimeout,
    StoreChanged,
    StoreMismatch,
    Unrecoverable,
)

__all__ = ["AdminError", "AuthenticationError", "ConfigurationError", "CoordinatorUnavailable",
           "InstanceFenced", "MessageTooLarge", "ProducerClosed", "RedisUnavailable", "RscError",
           "SendTimeout", "StoreChanged", "StoreMismatch", "Unrecoverable"]
