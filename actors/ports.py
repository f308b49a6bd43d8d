"""What the coordinator's shells need of their collaborators, as `typing.Protocol`s. Pure.

Collaborators are typed here, never probed for their methods: the Prometheus metrics
(actors/ops/metrics.py `CoordinatorMetrics` has every method below), where an actor pushes
for a session, and the reply slot a request is answered in (a session's, rsc's
actors/server.py `Reply`, or one awaited inside the coordinator, `Collect`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from rsc.actors.core.group import Event, GroupMachine
from rsc.actors.core.shard_reports import RetentionResult
from rsc.actors.core.subscriptions import Holdings
from rsc.protocol import messages as m


class Outbox(Protocol):
    """Where an actor sends pushes for a session (actors/server.py `Session`), and what the
    session holds (B4: actors/core/subscriptions.py)."""

    @property
    def holdings(self) -> Holdings: ...

    def push(self, message: m.Message) -> None: ...


class ReplySlot(Protocol):
    """Where a request's response goes: resolved once."""

    @property
    def resolved(self) -> bool: ...

    def resolve(self, message: m.Response) -> None: ...


class WriteReport(Protocol):
    """Who hears whether each metadata write worked, a lease renewal's included (K10: rsc's
    actors/ops/readiness.py `Readiness`); a call abandoned at its D4 deadline is a failed write."""

    def write_succeeded(self) -> None: ...

    def write_failed(self, error: str) -> None: ...


class RetentionMetrics(Protocol):
    def observe_retention(self, prefix: str, results: Sequence[RetentionResult]) -> None: ...


class PrefixMetrics(RetentionMetrics, Protocol):
    """What a prefix actor counts (rsc_* metrics of docs/reference/metrics.md)."""

    def observe_heartbeat_seconds(self, seconds: float) -> None: ...

    def observe_checkpoint_seconds(self, seconds: float) -> None: ...

    def store_call_abandoned(self, call: str) -> None: ...

    def set_migration_progress(self, prefix: str, drained: int, total: int) -> None: ...

    def migration_finished(self, prefix: str) -> None: ...

    def group_event(self, prefix: str, group: str, event: Event) -> None: ...

    def set_group_state(self, prefix: str, group: str, machine: GroupMachine) -> None: ...

    def group_forgotten(self, group: tuple[str, str]) -> None: ...  # (prefix, group)

    def observe_restored_from_clients(self) -> None: ...


class RouterMetrics(Protocol):
    def prefix_actor_restarted(self, prefix: str) -> None: ...


class StoreMetrics(Protocol):
    """K3, K4: what the coordinator counts of its store."""

    def observe_store_went_back(self) -> None: ...


class SessionMetrics(Protocol):
    """A1: what the server counts of sessions and of the requests they sent."""

    def join_refused(self, limit: str) -> None: ...

    def session_refused(self, reason: str) -> None: ...

    def handshake_timed_out(self) -> None: ...

    def set_sessions(self, sessions: int, connections: int) -> None: ...


class AuthMetrics(Protocol):
    """B5: what the server counts of refused handshakes."""

    def auth_failed(self, endpoint: str, reason: str) -> None: ...
