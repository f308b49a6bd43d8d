"""The library's error family (L1), defined here, in the leaf package both sides import;
applications import it as `rsc.errors` (its docstring has the tree)."""


from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["AdminError", "AuthenticationError", "ConfigurationError", "CoordinatorUnavailable",
           "InstanceFenced", "MessageTooLarge", "ProducerClosed", "RedisUnavailable", "RscError",
           "SendTimeout", "StoreMismatch", "Unrecoverable"]


class RscError(Exception):
    """The base of every error the library raises for a reason outside the caller's code."""


class Unrecoverable(RscError):
    """A failure no retry can fix (L2, D3): raised after one attempt, its text one line that
    names what to fix. The command-line tools exit 2 with it."""


class ConfigurationError(Unrecoverable, ValueError):
    """A URL, option, origin or TLS setup that cannot work: a wrong scheme, a path the
    coordinator does not serve (HTTP 404), a certificate that does not verify, a Redis db
    index the server lacks, a Sentinel service no sentinel knows."""


class AuthenticationError(Unrecoverable):
    """Credentials refused: the coordinator's token (HTTP 401 or 403), or Redis's user and
    password (WRONGPASS, NOAUTH) or its ACL (NOPERM)."""


class StoreMismatch(Unrecoverable):
    """The Redis given is not the coordinator's: their storeIds differ (K4)."""


class StoreChanged(StoreMismatch):
    """K9: a re-check (a new coordinator session, a Redis reconnect) found another storeId
    than the one this client started with: it stops before reading, acking or writing more
    (the console tools exit 2)."""


class InstanceFenced(Unrecoverable):
    """S3: a newer member took over this member's instanceId (FENCED_INSTANCE_ID). The member
    stopped for good: it holds nothing and does not rejoin."""

    def __init__(self, instance_id: str, reason: str) -> None:
        super().__init__(f"instanceId {instance_id!r} was taken over by a newer member "
                         "(FENCED_INSTANCE_ID); this member stopped for good and does not rejoin"
                         " (is another process running with the same instance id?)")
        self.instance_id = instance_id
        self.reason = reason


class CoordinatorUnavailable(RscError):
    """The coordinator could not be reached, or gave no routing, within the wait asked for."""


class RedisUnavailable(RscError):
    """Redis could not be reached within the wait asked for."""


class SendTimeout(RscError, TimeoutError):
    """L3: a send whose records were not all confirmed within its `timeout=`.

    `confirmed` maps the index of each record Redis holds to its entry id; `not_accepted`
    lists the indices the producer never took (safe to send again). Every other record was
    accepted: the producer still delivers it (D2), so it must not be sent again.
    """

    def __init__(self, message: str, *, confirmed: Mapping[int, str] | None = None,
                 not_accepted: Sequence[int] = ()) -> None:
        super().__init__(message)
        self.confirmed: dict[int, str] = dict(confirmed or {})
        self.not_accepted: list[int] = list(not_accepted)


class MessageTooLarge(RscError, ValueError):
    """M4: a message whose key, value and headers, as stored, exceed the producer's limit."""

    def __init__(self, size: int, limit: int, where: str = "") -> None:
        super().__init__(f"{where}message of {size:,} bytes (key, value and headers as stored) is "
                         f"over the limit of {limit:,} bytes (max_message_bytes=, "
                         "the tools' --max-message-bytes)")
        self.size = size
        self.limit = limit


class ProducerClosed(RscError, RuntimeError):
    """The producer was closed (or failed to open): nothing more can be sent with it."""


class AdminError(RscError):
    """The coordinator refused an admin request (`rsc.admin.client.AdminError` carries its
    status and text)."""
