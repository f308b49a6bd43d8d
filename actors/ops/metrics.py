"""Prometheus metrics of the coordinator, served on `--metrics-port`.

`CoordinatorMetrics` owns a private registry (so two coordinators in one
process, as in tests, never share counters). The coordinator calls:

- `group_event(prefix, group, event)`: one event of the pure group machine
  (`actors.core.group.Event`), counted by its `kind`: joined and rejoined
  (`rsc_member_joins_total`), left, expired, removed and revoke_timeout
  (`rsc_member_leaves_total`, `..._expirations_total`, `..._removals_total`),
  fenced (`rsc_heartbeats_fenced_total`), epoch (`rsc_rebalances_total`),
  away and returned of static members (`rsc_member_away_total`,
  `rsc_member_returns_total`, S2/S3/S5),
  revoked (its `ms` field feeds `rsc_revoke_duration_seconds`).
- `set_group_state(prefix, group, machine)`: after a commit, from anything with
  `members`, `group_epoch`, `assignment_epoch` and `shards` (gauges
  `rsc_group_members`, `rsc_group_epoch`, `rsc_assignment_epoch`,
  `rsc_group_shards`; `rsc_groups` counts groups).
- The same by hand: `observe_event(group, kind)`,
  `set_group_gauges(group, members, group_epoch, assignment_epoch, shards)`,
  `group_forgotten(group)`.
- `observe_heartbeat_seconds(seconds)`: time to handle one heartbeat
  (`rsc_heartbeat_handling_seconds` histogram).
- `observe_checkpoint_seconds(seconds)`: one metadata checkpoint write
  (`rsc_checkpoint_write_seconds`).
- `observe_revoke_seconds(seconds)`: from asking a member to revoke a shard to
  its release (`rsc_revoke_duration_seconds`).
- `set_migration_progress(prefix, drained, total)`: shards of the old version
  drained so far (`rsc_migration_drained_shards`, `rsc_migration_shards`);
  `migration_finished(prefix)` drops them.
- `observe_retention(prefix, results)`: one retention pass (actors/redis_io/shard_ops.py
  `RetentionResult`s): `rsc_shard_length` per shard, entries trimmed by reason
  (`rsc_retention_removed_total`, `acked` or `cap`) and those no group had
  acked yet (`rsc_retention_unconsumed_removed_total`).
- `report_unowned_shards(source)`: where `rsc_group_unowned_shards` (D7) is read at scrape
  time: `(prefix, group, count)` of every group with live members.
- `report_prefixes_without_routing(source)`: where `rsc_prefix_without_routing{prefix}` (K8)
  is read at scrape time; `observe_restored_from_clients()` counts
  `rsc_store_restored_from_clients_total` (K8).
- `follow_health(health)`: `rsc_coordinator_ready` and `rsc_coordinator_lease_held` read
  `/readyz`'s verdict and whether this process holds the lease (D5) at scrape time, so an
  alert can tell a waiting coordinator from a failing one (`serve_metrics` calls it).
- Always: `process_*` (CPU seconds, resident and virtual memory, open file descriptors, start
  time) and `rsc_build_info{version, python}` (1).
- Admission and supervision: `session_refused(reason)`
  (`rsc_sessions_refused_total{reason}`: max_sessions, max_connections,
  fd_exhausted), `handshake_timed_out()` (`rsc_handshakes_timed_out_total`),
  `set_sessions(sessions, connections)` (`rsc_sessions`, `rsc_connections`),
  `prefix_actor_restarted(prefix)` (`rsc_prefix_actor_restarts_total`),
  `auth_failed(endpoint, reason)` (`rsc_auth_failures_total{endpoint, reason}`, B5:
  token_missing, token_wrong, origin, throttled).

`group` is a `(stream_prefix, consumer_group)` pair or any object with
`stream_prefix` and `consumer_group` attributes; it becomes the labels
`prefix` and `group`.

`serve_metrics(metrics, host, port, health=...)` serves `GET /metrics` in the
Prometheus text format from a trio task, and with `health` (actors.ops.readiness.Readiness)
`GET /healthz` and `GET /readyz` (`routes`; rsc/common/http_server.py serves them).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterable, Sized
from typing import Protocol

import trio
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

from rsc.actors.ops import latency
from rsc.common import http_server
from rsc.common.http_server import Answer, Route
from rsc.common.process_metrics import register_process_metrics

GROUP_LABELS = ("prefix", "group")

_FAST_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                 0.25, 0.5, 1.0, 2.5)
_REVOKE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)



class NamedGroup(Protocol):
    """A group key object (a group's `stream_prefix` and `consumer_group`)."""

    @property
    def stream_prefix(self) -> object: ...

    @property
    def consumer_group(self) -> object: ...


GroupKey = tuple[object, object] | NamedGroup
"""`(prefix, group)` or an object naming both; label values are their str()."""


class GroupEvent(Protocol):
    """A group machine event (actors.core.group.Event): its `kind`, maybe `fields`."""

    @property
    def kind(self) -> str: ...


class GroupGauges(Protocol):
    """What the gauges read of a group machine (actors.core.group.GroupMachine)."""

    @property
    def members(self) -> Sized: ...

    @property
    def shards(self) -> Sized: ...

    @property
    def group_epoch(self) -> int: ...

    @property
    def assignment_epoch(self) -> int: ...


class GroupLagFigures(Protocol):
    """One group's backlog (actors.ops.group_lag.GroupLag)."""

    @property
    def prefix(self) -> str: ...

    @property
    def group(self) -> str: ...

    @property
    def lag_entries(self) -> int | None: ...

    @property
    def pending_entries(self) -> int: ...

    @property
    def lag_ms(self) -> int: ...

    @property
    def pending_age_ms(self) -> int: ...


class RetentionReport(Protocol):
    """One retention pass over one shard (actors.core.shard_reports.RetentionResult)."""

    @property
    def shard(self) -> str: ...

    @property
    def length(self) -> int: ...

    @property
    def removed_acked(self) -> int: ...

    @property
    def removed_by_caps(self) -> int: ...

    @property
    def removed_unconsumed(self) -> int: ...


def group_labels(group: GroupKey) -> tuple[str, str]:
    """The `(prefix, group)` label values of a group key."""
    if isinstance(group, tuple):
        prefix, consumer_group = group
        return str(prefix), str(consumer_group)
    return str(group.stream_prefix), str(group.consumer_group)


class _RequestLatency(Collector):
    """`rsc_request_seconds`: the server's latency histogram (actors/ops/latency.py), every
    eighth of its bounds (powers of two from 10 us), read at scrape time."""

    def describe(self) -> list[HistogramMetricFamily]:
        return [HistogramMetricFamily("rsc_request_seconds", _REQUEST_DOC)]

    def collect(self) -> list[HistogramMetricFamily]:
        fine = latency.cumulative(latency.requests.snapshot())
        buckets = [(_le(bound), count) for index, (bound, count) in enumerate(fine)
                   if index % latency.STEPS_PER_DOUBLING == 0 or index == len(fine) - 1]
        return [HistogramMetricFamily("rsc_request_seconds", _REQUEST_DOC, buckets=buckets,
                                      sum_value=latency.requests.sum_seconds)]


_REQUEST_DOC = "Time from a request frame's arrival to its answer written to the session"

UnownedSource = Callable[[], Iterable[tuple[str, str, int]]]


class _UnownedShards(Collector):
    """`rsc_group_unowned_shards` (D7): per group, read at scrape time from the groups'
    machines through `source` (`(prefix, group, count)` for every group with live members)."""

    def __init__(self) -> None:
        self.source: UnownedSource | None = None

    def describe(self) -> list[GaugeMetricFamily]:
        return [GaugeMetricFamily("rsc_group_unowned_shards", _UNOWNED_DOC, labels=GROUP_LABELS)]

    def collect(self) -> list[GaugeMetricFamily]:
        family = GaugeMetricFamily("rsc_group_unowned_shards", _UNOWNED_DOC, labels=GROUP_LABELS)
        for prefix, group, count in (self.source() if self.source is not None else ()):
            family.add_metric((prefix, group), count)
        return [family]


PrefixSource = Callable[[], Iterable[str]]


class _PrefixesWithoutRouting(Collector):
    """`rsc_prefix_without_routing` (K8): 1 for every prefix that clients ask for (a join, a
    heartbeat, a getRouting) and that has no routing, read at scrape time."""

    def __init__(self) -> None:
        self.source: PrefixSource | None = None

    def describe(self) -> list[GaugeMetricFamily]:
        return [GaugeMetricFamily("rsc_prefix_without_routing", _NO_ROUTING_DOC, labels=("prefix",))]

    def collect(self) -> list[GaugeMetricFamily]:
        family = GaugeMetricFamily("rsc_prefix_without_routing", _NO_ROUTING_DOC,
                                   labels=("prefix",))
        for prefix in (self.source() if self.source is not None else ()):
            family.add_metric((prefix,), 1)
        return [family]


class _ReplicaShortfalls(Collector):
    """`rsc_replica_wait_shortfall_total` (K11): metadata WAITs that found fewer replicas than
    --min-replicas, read at scrape time from the store's count."""

    def __init__(self) -> None:
        self.source: Callable[[], int] | None = None

    def describe(self) -> list[CounterMetricFamily]:
        return [CounterMetricFamily("rsc_replica_wait_shortfall", _SHORTFALL_DOC)]

    def collect(self) -> list[CounterMetricFamily]:
        return [CounterMetricFamily("rsc_replica_wait_shortfall", _SHORTFALL_DOC,
                                    value=self.source() if self.source is not None else 0)]


_SHORTFALL_DOC = ("Metadata writes whose WAIT found fewer replicas than --min-replicas (K5, "
                  "K11): each is COORDINATOR_NOT_AVAILABLE")

_NO_ROUTING_DOC = ("1 for every stream prefix that clients ask for and that has no routing "
                   "(no shards): its members and producers wait (K8)")

_UNOWNED_DOC = ("Shards of a group's target that nobody has held for longer than one lease TTL "
                "while the group has live members, not counting AWAY static members' (D7)")


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else f"{bound:.6g}"


class CoordinatorMetrics:
    """Every metric the coordinator exports, in one private registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        registry.register(_RequestLatency())
        self._unowned = _UnownedShards()
        registry.register(self._unowned)
        self._without_routing = _PrefixesWithoutRouting()
        registry.register(self._without_routing)
        self._shortfalls = _ReplicaShortfalls()
        registry.register(self._shortfalls)
        register_process_metrics(registry, "coordinator")  # process_*, rsc_build_info
        self.groups = Gauge("rsc_groups", "Groups known to the coordinator", registry=registry)
        self.members = Gauge("rsc_group_members", "Live members of a group", GROUP_LABELS,
                             registry=registry)
        self.group_epoch = Gauge("rsc_group_epoch", "Group epoch", GROUP_LABELS,
                                 registry=registry)
        self.assignment_epoch = Gauge("rsc_assignment_epoch",
                                      "Group epoch the target assignment was computed at",
                                      GROUP_LABELS, registry=registry)
        self.shards = Gauge("rsc_group_shards", "Shards of the live routing versions of a group",
                            GROUP_LABELS, registry=registry)
        # C4: a group's backlog, read from Redis every --lag-metrics-interval-ms
        self.group_lag_entries = Gauge(
            "rsc_group_lag_entries", "Entries of a group not delivered yet, summed over its "
            "live shards (absent while Redis cannot tell)", GROUP_LABELS, registry=registry)
        self.group_pending_entries = Gauge(
            "rsc_group_pending_entries", "Entries delivered to a group and not acked, summed "
            "over its live shards", GROUP_LABELS, registry=registry)
        self.group_lag_seconds = Gauge(
            "rsc_group_lag_seconds", "Age of a group's oldest undelivered entry on the Redis "
            "node's clock, the largest over its live shards (0: none)", GROUP_LABELS,
            registry=registry)
        self.group_pending_age_seconds = Gauge(
            "rsc_group_pending_age_seconds", "Age of a group's oldest pending (delivered, not "
            "acked) entry on the Redis node's clock, the largest over its live shards (0: none)",
            GROUP_LABELS, registry=registry)
        self._lag_groups: set[tuple[str, str]] = set()
        self.audit_lost_entries = Counter(
            "rsc_audit_lost", "Audit entries (C3) that could not be appended to rsc:audit "
            "(Redis failed or was too slow); the request was answered all the same",
            registry=registry)
        self.joins = Counter("rsc_member_joins", "Members that joined (or rejoined)",
                             GROUP_LABELS, registry=registry)
        self.leaves = Counter("rsc_member_leaves", "Members that left (memberEpoch -1)",
                              GROUP_LABELS, registry=registry)
        self.expirations = Counter("rsc_member_expirations", "Members whose lease ran out",
                                   GROUP_LABELS, registry=registry)
        self.removals = Counter("rsc_member_removals",
                                "Members removed by the admin API or the revoke timeout",
                                GROUP_LABELS, registry=registry)
        self.fenced = Counter("rsc_heartbeats_fenced",
                              "Heartbeats answered FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID",
                              GROUP_LABELS, registry=registry)
        self.shard_damaged = Counter("rsc_shard_damaged", "Shard damage found by the check "
                                     "(B7): maxId, falseSeal, missingSeal", ["kind"],
                                     registry=registry)
        self.groups_expired = Counter("rsc_groups_expired", "Empty groups deleted after "
                                      "--empty-group-retention-ms (B6)", ["prefix"],
                                      registry=registry)
        self.away = Counter("rsc_member_away", "Static members gone AWAY (S2 temporary leave, "
                            "S5 lapsed lease)", GROUP_LABELS, registry=registry)
        self.returns = Counter("rsc_member_returns", "Static members back from AWAY (S3)",
                               GROUP_LABELS, registry=registry)
        self.rebalances = Counter("rsc_rebalances", "Target assignment recomputations",
                                  GROUP_LABELS, registry=registry)
        self.store_went_back = Counter("rsc_store_went_back",
                                       "Times the store was found to have lost writes of this "
                                       "coordinator and was written back from memory (K3, K4)",
                                       registry=registry)
        self.restored_from_clients = Counter(
            "rsc_store_restored_from_clients",
            "Prefixes whose routing was written back from what clients presented, on a store "
            "lost together with the coordinator's memory (K8)", registry=registry)
        self.heartbeat_seconds = Histogram("rsc_heartbeat_handling_seconds",
                                           "Time to handle one heartbeat",
                                           buckets=_FAST_BUCKETS, registry=registry)
        self.checkpoint_seconds = Histogram("rsc_checkpoint_write_seconds",
                                            "Time to write one metadata checkpoint to Redis",
                                            buckets=_FAST_BUCKETS, registry=registry)
        self.revoke_seconds = Histogram("rsc_revoke_duration_seconds",
                                        "From asking a member to revoke a shard to its release",
                                        buckets=_REVOKE_BUCKETS, registry=registry)
        self.migration_drained = Gauge("rsc_migration_drained_shards",
                                       "Old-version shards drained by the active migration",
                                       ("prefix",), registry=registry)
        self.migration_total = Gauge("rsc_migration_shards",
                                     "Old-version shards the active migration must drain",
                                     ("prefix",), registry=registry)
        self.shard_length = Gauge("rsc_shard_length", "Entries in a shard stream (after retention)",
                                  ("prefix", "shard"), registry=registry)
        self.retention_removed = Counter("rsc_retention_removed",
                                         "Entries removed by retention, by reason (acked, cap)",
                                         ("prefix", "reason"), registry=registry)
        self.retention_unconsumed = Counter(
            "rsc_retention_unconsumed_removed",
            "Entries removed by maxLength / maxAgeMs before every group acked them",
            ("prefix",), registry=registry)
        self.sessions_refused = Counter("rsc_sessions_refused",
                                        "Connections or handshakes refused by admission (A1), by reason: "
                                        "max_sessions (HTTP 503), max_connections (closed at accept), "
                                        "fd_exhausted (accept failed: EMFILE/ENFILE)",
                                        ("reason",), registry=registry)
        self.auth_failures = Counter("rsc_auth_failures",
                                     "Handshakes refused for their token or origin (B5), by "
                                     "endpoint and reason: token_missing, token_wrong (HTTP 401), "
                                     "origin (403), throttled (429)",
                                     ("endpoint", "reason"), registry=registry)
        self.handshakes_timed_out = Counter("rsc_handshakes_timed_out",
                                            "Connections dropped for not finishing the handshake in time",
                                            registry=registry)
        self.prefix_actor_restarts = Counter("rsc_prefix_actor_restarts",
                                             "Prefix actors that failed and were reloaded from Redis",
                                             ("prefix",), registry=registry)
        self.open_sessions = Gauge("rsc_sessions", "Open websocket sessions", registry=registry)
        self.open_connections = Gauge("rsc_connections",
                                      "Open connections (handshakes in progress and sessions)",
                                      registry=registry)
        self.joins_refused = Counter("rsc_joins_refused",
                                     "Joins (and setShardCount registrations) refused by "
                                     "--max-groups or --max-group-size (A1)", ("limit",),
                                     registry=registry)
        self.store_calls_abandoned = Counter(
            "rsc_store_calls_abandoned",
            "Store calls (metadata writes, drain checks) abandoned past a third of the lease (D4)",
            ("call",), registry=registry)
        self.ready = Gauge("rsc_coordinator_ready",
                           "1 while /readyz answers 200: this coordinator holds the lease and its "
                           "last metadata write succeeded", registry=registry)
        self.lease_held = Gauge("rsc_coordinator_lease_held",
                                "1 while this coordinator holds the coordinator lease of its Redis "
                                "(D5); 0 while it waits for it", registry=registry)
        self._known_groups: set[tuple[str, str]] = set()

    def session_refused(self, reason: str) -> None:
        """Admission refused a peer: `max_sessions`, `max_connections` or `fd_exhausted`."""
        self.sessions_refused.labels(reason).inc()

    def auth_failed(self, endpoint: str, reason: str) -> None:
        """B5: a handshake on `endpoint` was refused for `reason` (its token, origin or throttle)."""
        self.auth_failures.labels(endpoint, reason).inc()

    def handshake_timed_out(self) -> None:
        """A connection was dropped for not finishing its handshake within the timeout."""
        self.handshakes_timed_out.inc()

    def prefix_actor_restarted(self, prefix: str) -> None:
        """A prefix actor failed and is being reloaded from Redis."""
        self.prefix_actor_restarts.labels(prefix).inc()

    def set_sessions(self, sessions: int, connections: int) -> None:
        """Open sessions, and open connections (handshakes in progress included)."""
        self.open_sessions.set(sessions)
        self.open_connections.set(connections)

    def join_refused(self, limit: str) -> None:
        """A1: a join hit `max_groups` or `max_group_size`; nothing changed."""
        self.joins_refused.labels(limit).inc()

    def store_call_abandoned(self, call: str) -> None:
        """D4: a store call passed its deadline and was answered COORDINATOR_NOT_AVAILABLE."""
        self.store_calls_abandoned.labels(call).inc()

    def follow_health(self, health: Health) -> None:
        """Read `rsc_coordinator_ready` and `rsc_coordinator_lease_held` from `health` when scraped."""
        self.ready.set_function(lambda: float(health.ready))
        self.lease_held.set_function(lambda: float(health.holds_lease))

    def observe_event(self, group: GroupKey, kind: str) -> None:
        """Count a group machine event by its kind (`actors.core.group.Event.kind`).

        joined and rejoined, left, expired (a static member's session timeout
        too, S5), removed, revoke_timeout (a removal), fenced, epoch (a
        rebalance), away and returned (S2, S3, S5); other kinds are not counted.
        """
        if kind == "group_expired":  # B6: the group's own series are forgotten with it
            self.groups_expired.labels(group_labels(group)[0]).inc()
            return
        counter = {"joined": self.joins, "rejoined": self.joins, "left": self.leaves,
                   "expired": self.expirations, "removed": self.removals,
                   "revoke_timeout": self.removals, "fenced": self.fenced,
                   "epoch": self.rebalances, "away": self.away,
                   "returned": self.returns}.get(kind)
        if counter is not None:
            counter.labels(*group_labels(group)).inc()

    def group_event(self, prefix: str, group: str, event: GroupEvent) -> None:
        """Count one group machine event (`kind`, `fields`); a `revoked` one times its revoke."""
        self.observe_event((prefix, group), event.kind)
        revoke_ms = getattr(event, "fields", {}).get("ms") if event.kind == "revoked" else None
        if isinstance(revoke_ms, int | float):
            self.observe_revoke_seconds(revoke_ms / 1000)

    def set_group_state(self, prefix: str, group: str, machine: GroupGauges) -> None:
        """Gauges of a group from its machine (`members`, `group_epoch`, `assignment_epoch`, `shards`)."""
        self.set_group_gauges((prefix, group), members=len(machine.members),
                              group_epoch=machine.group_epoch,
                              assignment_epoch=machine.assignment_epoch,
                              shards=len(machine.shards))

    def set_group_gauges(self, group: GroupKey, members: int, group_epoch: int,
                        assignment_epoch: int, shards: int) -> None:
        """The group's current size and epochs."""
        labels = group_labels(group)
        self._known_groups.add(labels)
        self.groups.set(len(self._known_groups))
        self.members.labels(*labels).set(members)
        self.group_epoch.labels(*labels).set(group_epoch)
        self.assignment_epoch.labels(*labels).set(assignment_epoch)
        self.shards.labels(*labels).set(shards)

    def audit_lost(self) -> None:
        """C3: an audit entry could not be appended."""
        self.audit_lost_entries.inc()

    def set_group_lag(self, figures: Iterable[GroupLagFigures]) -> None:
        """C4: every group's backlog as just read; groups not in `figures` lose their series."""
        seen = set()
        for figure in figures:
            labels = (figure.prefix, figure.group)
            seen.add(labels)
            if figure.lag_entries is None:
                self._remove(self.group_lag_entries, labels)
            else:
                self.group_lag_entries.labels(*labels).set(figure.lag_entries)
            self.group_pending_entries.labels(*labels).set(figure.pending_entries)
            self.group_lag_seconds.labels(*labels).set(figure.lag_ms / 1000)
            self.group_pending_age_seconds.labels(*labels).set(figure.pending_age_ms / 1000)
        for labels in self._lag_groups - seen:
            for metric in self._lag_metrics():
                self._remove(metric, labels)
        self._lag_groups = seen

    def _lag_metrics(self) -> tuple[Gauge, ...]:
        return (self.group_lag_entries, self.group_pending_entries, self.group_lag_seconds,
                self.group_pending_age_seconds)

    @staticmethod
    def _remove(metric: MetricWrapperBase, labels: tuple[str, ...]) -> None:
        try:
            metric.remove(*labels)
        except KeyError:
            pass

    def group_forgotten(self, group: GroupKey) -> None:
        """Drop every series of a group the coordinator no longer tracks."""
        labels = group_labels(group)
        self._known_groups.discard(labels)
        self.groups.set(len(self._known_groups))
        for metric in (self.members, self.group_epoch, self.assignment_epoch, self.shards,
                       self.joins, self.leaves, self.expirations, self.removals, self.fenced,
                       self.rebalances, *self._lag_metrics()):
            self._remove(metric, labels)
        self._lag_groups.discard(labels)

    def observe_store_went_back(self) -> None:
        """The store lost writes and the coordinator wrote everything back (K3, K4)."""
        self.store_went_back.inc()

    def observe_heartbeat_seconds(self, seconds: float) -> None:
        """Time from receiving a heartbeat to having its response ready."""
        self.heartbeat_seconds.observe(seconds)

    def observe_checkpoint_seconds(self, seconds: float) -> None:
        """Duration of one metadata checkpoint write."""
        self.checkpoint_seconds.observe(seconds)

    def observe_revoke_seconds(self, seconds: float) -> None:
        """Duration of one completed revoke (request to release)."""
        self.revoke_seconds.observe(seconds)

    def set_migration_progress(self, prefix: str, drained: int, total: int) -> None:
        """Progress of the active migration of `prefix`: `drained` of `total` old shards."""
        self.migration_drained.labels(prefix).set(drained)
        self.migration_total.labels(prefix).set(total)

    def observe_retention(self, prefix: str, results: Iterable[RetentionReport]) -> None:
        """One retention pass over a prefix's shards (RetentionResult-like objects)."""
        for result in results:
            self.shard_length.labels(prefix, result.shard).set(result.length)
            self.retention_removed.labels(prefix, "acked").inc(result.removed_acked)
            self.retention_removed.labels(prefix, "cap").inc(result.removed_by_caps)
            self.retention_unconsumed.labels(prefix).inc(result.removed_unconsumed)

    def migration_finished(self, prefix: str) -> None:
        """Drop the migration series of `prefix` (no migration active any more)."""
        for metric in (self.migration_drained, self.migration_total):
            try:
                metric.remove(prefix)
            except KeyError:
                pass

    def observe_restored_from_clients(self) -> None:
        """K8: one prefix's routing restored from what its clients presented."""
        self.restored_from_clients.inc()

    def report_replica_shortfalls(self, source: Callable[[], int]) -> None:
        """Where `rsc_replica_wait_shortfall_total` (K11) is read from at scrape time."""
        self._shortfalls.source = source

    def report_prefixes_without_routing(self, source: PrefixSource) -> None:
        """Where `rsc_prefix_without_routing` (K8) is read from at scrape time."""
        self._without_routing.source = source

    def report_unowned_shards(self, source: UnownedSource) -> None:
        """Where `rsc_group_unowned_shards` is read from at scrape time (D7)."""
        self._unowned.source = source

    def exposition(self) -> bytes:
        """Every metric in the Prometheus text format (version 0.0.4)."""
        return generate_latest(self.registry)


class Health(Protocol):
    """What `/readyz` asks (actors.ops.readiness.Readiness): ready, holding the lease, and why not."""

    @property
    def ready(self) -> bool: ...

    @property
    def holds_lease(self) -> bool: ...

    def reason(self) -> str: ...


def routes(exposition: Callable[[], bytes], health: Health | None = None) -> dict[str, Route]:
    """What the metrics port answers: `GET /metrics` with `exposition()`; with `health`,
    `GET /healthz` (200 while the process runs) and `GET /readyz` (200 when `health.ready`,
    else 503 with the reason)."""
    served: dict[str, Route] = {"/metrics": lambda: Answer(200, exposition(),
                                                           CONTENT_TYPE_PLAIN_0_0_4)}
    if health is not None:
        served["/healthz"] = lambda: http_server.text(200, "ok")
        served["/readyz"] = lambda: http_server.probe(health.ready, health.reason())
    return served


async def serve_metrics(metrics: CoordinatorMetrics, host: str, port: int, *,
                        health: Health | None = None, ssl_context: ssl.SSLContext | None = None,
                        task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve `routes(metrics.exposition, health)` on host:port until cancelled
    (rsc/common/http_server.py); `task_status.started(bound_port)` once listening."""
    if health is not None:
        metrics.follow_health(health)
    await http_server.serve_http(routes(metrics.exposition, health), host, port,
                                ssl_context=ssl_context,
                                task_status=task_status)
