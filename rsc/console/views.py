"""What the console's pages show, computed from admin responses: pure, no I/O, `now` passed in.

- `parse_hello(text)`: the page's first message on `/ws` (which view, and the token the
  operator typed), or `HelloError` naming what is wrong.
- `overview(groups, migrations)`: the overview's rows (one per group, from `listGroups`)
  and totals, with each prefix's migration (from a watched `describeGroup`).
- `group_view(description)`: a group page: members, shards of the live versions with their
  owners, migration progress with its blocking groups (G2), the laggiest shard; the JSON of the
  group's `GroupView` (rsc/admin/group_view.py, the one `rsc admin describe` draws).
- `Throttle`: at most `MAX_SENDS_PER_SECOND` frames to a page; the latest state wins.
- `LagHistory`: the undelivered and unacked counts and the ages of the oldest of each (C4) that
  each group showed while pages followed it, so a page opened later (or reloaded) draws the
  minutes before it.
- `refused_status(text)`: the HTTP status in an admin handshake failure (401: ask for a token).

Figures stay integers (or None where Redis cannot tell); the page formats them as `1,234`.
The wire's `lag` and `pending` keep their names in what the page receives; the page shows
them as *undelivered* and *unacked*, and `backlog` (rsc/common/lag.py) is both together.
Names are passed as they are: the page sets them as text, never as markup.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Generic, TypedDict, TypeVar

import attrs

from rsc.admin.group_view import MigrationView, migration_view
from rsc.admin.group_view import group_view as build_group_view
from rsc.common.lag import backlog
from rsc.protocol import messages as m
from rsc.protocol.codec import converter, decode_object
from rsc.protocol.errors import ProtocolError
from rsc.protocol.messages import (
    FieldValueError,
    FindKey,
    GroupDescription,
    ListPending,
    MigrationDescription,
    ReadShard,
    check_name,
)
from rsc.protocol.vocabulary import RetentionMode

MAX_SENDS_PER_SECOND: Final = 10
MIN_SEND_INTERVAL_MS: Final = 1000 // MAX_SENDS_PER_SECOND
MAX_HELLO_BYTES: Final = 4096
MAX_WATCHED_PREFIXES: Final = 50  # the overview watches one group per prefix for its migration

VIEWS: Final = ("overview", "group", "audit", "messages")
HISTORY_MS: Final = 60 * 60 * 1000  # C4: the last hour, as far as the page's chart reaches back
HISTORY_STEP_MS: Final = 1000  # at most a point a second per group, for the recent minute
HISTORY_RECENT_MS: Final = 60 * 1000  # kept a point a second; older points are merged ...
HISTORY_BUCKET_MS: Final = 20 * 1000  # ... into one a bucket of 20 s (the largest figures)
MAX_HISTORY_POINTS: Final = 240  # per group, breaks included: the oldest go first
"""A group's history is at most MAX_HISTORY_POINTS points `[wallMs, lag, pending,
undeliveredAgeMs, pendingAgeMs]` (at most about 270 bytes each in CPython), some 65 KB;
60 + 3,540 / 20 = 237 points cover an hour followed without a break. With MAX_HISTORIES groups
that is about 4 MB for the whole console (4.1 MB measured with tracemalloc: 64 groups followed
for an hour, every figure above 2**30)."""
MAX_HISTORIES: Final = 64  # groups remembered; the least recently seen is forgotten first


class HelloError(ValueError):
    """The page's first message is not one the console understands."""


@attrs.frozen
class Hello:
    view: str
    token: str | None = None
    stream_prefix: str | None = None
    consumer_group: str | None = None


def _json_object(text: str | bytes, what: str, error: type[ValueError],
                max_bytes: int) -> dict[str, Any]:
    """A page's message as the JSON object of one text frame of at most `max_bytes`; else
    `error` saying which of those it is not (a binary frame, not JSON, not an object)."""
    if isinstance(text, bytes) or len(text.encode()) > max_bytes:
        raise error(f"{what} must be a JSON text frame of at most {max_bytes} bytes")
    try:
        body = json.loads(text)
    except ValueError:
        raise error(f"{what} is not JSON") from None
    if not isinstance(body, dict):
        raise error(f"{what} must be a JSON object")
    return body


def parse_hello(text: str | bytes) -> Hello:
    """`{"view": "overview" | "group" | "audit" | "messages", "token": str | null,
    "streamPrefix", "consumerGroup"}`."""
    body = _json_object(text, "the first message", HelloError, MAX_HELLO_BYTES)
    view = body.get("view")
    if view not in VIEWS:
        raise HelloError(f"field 'view' must be one of {', '.join(VIEWS)}, got {view!r}")
    token = body.get("token")
    if token is not None and (not isinstance(token, str) or not token or "\n" in token
                              or "\r" in token):
        raise HelloError("field 'token' must be a non-empty one-line string or null")
    if view in ("overview", "audit"):
        return Hello(view=view, token=token)
    prefix, group = body.get("streamPrefix"), body.get("consumerGroup")
    if not isinstance(prefix, str) or not isinstance(group, str):
        raise HelloError("fields 'streamPrefix' and 'consumerGroup' must be strings, got "
                         f"{prefix!r} and {group!r}")
    try:
        check_name("stream_prefix", prefix)
        check_name("consumer_group", group)
    except FieldValueError as exc:
        raise HelloError(str(exc)) from None
    return Hello(view=view, token=token, stream_prefix=prefix, consumer_group=group)


_HTTP_STATUS = re.compile(r"\bHTTP (\d{3})\b")


def refused_status(text: str) -> int | None:
    """The HTTP status of a refused admin handshake, from its one-line text (D3); else None."""
    found = _HTTP_STATUS.search(text)
    return int(found.group(1)) if found else None


Payload = TypeVar("Payload")


@attrs.define
class Throttle(Generic[Payload]):
    """Frames to one page: at most MAX_SENDS_PER_SECOND, the latest state of each kind wins."""

    latest: dict[str, Payload] = attrs.field(factory=dict)
    sent_at_ms: int | None = None

    def offer(self, kind: str, payload: Payload) -> None:
        self.latest[kind] = payload

    def wait_ms(self, now_ms: int) -> int:
        """How long to wait before the next send may go (0: now)."""
        if self.sent_at_ms is None:
            return 0
        return max(0, self.sent_at_ms + MIN_SEND_INTERVAL_MS - now_ms)

    def take(self, now_ms: int) -> list[Payload]:
        """The payloads to send now (each kind's latest, oldest kind first), or [] if not due."""
        if not self.latest or self.wait_ms(now_ms) > 0:
            return []
        payloads = list(self.latest.values())
        self.latest.clear()
        self.sent_at_ms = now_ms
        return payloads


class LagHistory:
    """What this console saw of each group's lag over the last HISTORY_MS, while some page
    followed it: points `[wallMs, lag, pending, undeliveredAgeMs, pendingAgeMs]` (the counts of
    undelivered and unacked entries, and C4's ages of the oldest of each, None when there is
    none), at most one per HISTORY_STEP_MS over the last HISTORY_RECENT_MS and one per
    HISTORY_BUCKET_MS before (the bucket's largest value of each, at its first point's time),
    at most MAX_HISTORY_POINTS a group, and a break `[wallMs, None, None, None, None]` where
    the last page stopped following (nobody looked after that, so the chart must not draw a
    line across). Nothing is sampled for it: a group nobody opens has no history, and the
    coordinator is asked nothing more."""

    def __init__(self) -> None:
        self._points: dict[tuple[str, str], list[_Point]] = {}  # least recently seen first
        self._followers: dict[tuple[str, str], int] = {}

    def follow(self, key: tuple[str, str]) -> None:
        self._followers[key] = self._followers.get(key, 0) + 1

    def unfollow(self, key: tuple[str, str], now_ms: int) -> None:
        left = self._followers.get(key, 0) - 1
        if left > 0:
            self._followers[key] = left
            return
        self._followers.pop(key, None)
        points = self._points.get(key)
        if points and not _is_break(points[-1]):
            points.append((now_ms, None, None, None, None))

    def record(self, key: tuple[str, str], now_ms: int, lag: int | None, pending: int | None,
               undelivered_age_ms: int | None, pending_age_ms: int | None) -> None:
        points = self._points.pop(key, [])
        self._points[key] = points
        if not points or _is_break(points[-1]) or now_ms - points[-1][0] >= HISTORY_STEP_MS:
            points.append((now_ms, lag, pending, undelivered_age_ms, pending_age_ms))
        _trim(points, now_ms)
        while len(self._points) > MAX_HISTORIES:
            del self._points[next(iter(self._points))]

    def points(self, key: tuple[str, str], now_ms: int) -> list[list[int | None]]:
        """A copy of the group's points within HISTORY_MS of `now_ms`, oldest first."""
        points = self._points.get(key, [])
        _trim(points, now_ms)
        return [list(point) for point in points]


# wallMs, lag, pending, undeliveredAgeMs, pendingAgeMs (all four None: a break)
_Point = tuple[int, int | None, int | None, int | None, int | None]


def _trim(points: list[_Point], now_ms: int) -> None:
    """Merge what is older than HISTORY_RECENT_MS into buckets, drop what is older than
    HISTORY_MS, and keep at most MAX_HISTORY_POINTS (in place)."""
    recent = now_ms - HISTORY_RECENT_MS
    kept: list[_Point] = []
    for point in points:
        if point[0] < now_ms - HISTORY_MS:
            continue
        last = kept[-1] if kept else None
        if last is not None and point[0] < recent and not _is_break(point) \
                and not _is_break(last) \
                and last[0] // HISTORY_BUCKET_MS == point[0] // HISTORY_BUCKET_MS:
            kept[-1] = (last[0], _larger(last[1], point[1]), _larger(last[2], point[2]),
                        _larger(last[3], point[3]), _larger(last[4], point[4]))
            continue
        kept.append(point)
    points[:] = kept[-MAX_HISTORY_POINTS:]


def _is_break(point: _Point) -> bool:
    return all(value is None for value in point[1:])


def _larger(a: int | None, b: int | None) -> int | None:
    if a is None or b is None:
        return b if a is None else a
    return max(a, b)


# --- overview ---------------------------------------------------------------------------
# What the page receives. The overview's inputs are the raw JSON objects of admin answers
# (the coordinator's wire, docs/protocol.md); a group page's is its describeGroup answer,
# decoded into the protocol's GroupDescription and derived into the GroupView. The figures and
# names are passed on as the wire has them.


class Blocker(TypedDict):
    consumerGroup: str
    undelivered: int | None
    pending: int | None


class MigrationSummary(TypedDict):
    state: str | None
    fromVersion: int | None
    toVersion: int | None
    cutover: str | None
    drained: int
    total: int
    remainingShards: list[str]
    blockingGroups: list[Blocker]


class OverviewRow(TypedDict):
    streamPrefix: str
    consumerGroup: str
    state: str | None
    groupEpoch: int | None
    members: int | None
    shards: int | None
    lag: int | None
    pending: int | None
    backlog: int | None
    migration: str
    blocked: bool


class Totals(TypedDict):
    groups: int
    prefixes: int
    members: int | None
    shards: int | None
    backlog: int | None
    lag: int | None
    pending: int | None


class Overview(TypedDict):
    rows: list[OverviewRow]
    totals: Totals


class MemberRow(TypedDict):
    memberId: str | None
    instanceId: str | None
    state: str | None
    memberEpoch: int | None
    capacity: int | None
    lastHeartbeatMsAgo: int | None
    overdue: bool
    assignedShards: list[str]
    pendingShards: list[str]
    revokingShards: list[str]


class ShardRow(TypedDict):
    shard: str | None
    version: int | None
    owner: str | None
    revokingFrom: str | None
    length: int | None
    lag: int | None
    pending: int | None
    backlog: int | None
    oldestPendingMs: int | None
    lastDeliveredId: str | None


class Laggiest(TypedDict):
    shard: str | None
    owner: str | None
    lag: int | None
    pending: int | None
    backlog: int | None


class GroupPage(TypedDict):
    streamPrefix: str | None
    consumerGroup: str | None
    state: str | None
    groupEpoch: int | None
    assignmentEpoch: int | None
    maxConcurrency: int | None
    routingVersion: int | None
    shardCount: int | None
    retention: object
    members: list[MemberRow]
    shards: list[ShardRow]
    migration: MigrationSummary | None
    backlog: int | None
    lag: int | None
    pending: int | None
    oldestUndeliveredAgeMs: int | None  # C4: the largest over the shards; None if nothing is
    oldestPendingEntryAgeMs: int | None
    laggiest: Laggiest | None
    storeWentBackAtMs: int | None



def _sum(values: Iterable[int | None]) -> int | None:
    """The sum, or None when any part is unknown."""
    total = 0
    for value in values:
        if value is None:
            return None
        total += value
    return total


def migration_summary(migration: Mapping[str, object] | MigrationView | None
                      ) -> MigrationSummary | None:
    """A migration's progress (G2): versions, drained of total, remaining shards, blockers
    (most behind first). `migration` is a describe answer's (its JSON object or its view)."""
    if not migration:
        return None
    view = migration if isinstance(migration, MigrationView) else migration_view(
        converter.structure(dict(migration), MigrationDescription))
    assert view is not None
    blocking: list[Blocker] = [{"consumerGroup": entry.consumer_group,
                                "undelivered": entry.undelivered, "pending": entry.pending}
                               for entry in view.most_behind_first()]
    return {"state": view.state.value, "fromVersion": view.from_version,
            "toVersion": view.to_version, "cutover": view.cutover.value,
            "drained": view.drained, "total": view.total,
            "remainingShards": list(view.remaining_shards), "blockingGroups": blocking}


def migration_text(summary: MigrationSummary | None) -> str:
    """One cell: `-`, or `v1 -> v2 DRAINING 3/8 drained, blocked by audit`."""
    if summary is None:
        return "-"
    text = (f"v{summary['fromVersion']} -> v{summary['toVersion']} {summary['state']} "
            f"{summary['drained']}/{summary['total']} drained")
    blockers = [entry["consumerGroup"] for entry in summary["blockingGroups"]]
    if blockers:
        text += ", blocked by " + ", ".join(blockers)
    return text


def _int_value(value: object) -> int | None:
    return value if isinstance(value, int) else None


def _str_value(value: object) -> str | None:
    return value if isinstance(value, str) else None


def overview(groups: Sequence[Mapping[str, object]],
             migrations: Mapping[str, object],
             watched: Iterable[str] = ()) -> Overview:
    """The overview: a row per group (from listGroups) with its prefix's migration, and totals.

    `migrations` holds the latest `migration` of each watched prefix; a prefix not in
    `watched` (past MAX_WATCHED_PREFIXES) shows `not watched` rather than a guess.
    """
    watched_set = set(watched)
    rows: list[OverviewRow] = []
    for entry in groups:
        prefix = str(entry.get("streamPrefix"))
        if prefix in watched_set:
            migration_object = migrations.get(prefix)
            summary = migration_summary(migration_object if isinstance(migration_object, Mapping)
                                        else None)
            migration = migration_text(summary)
        else:
            summary, migration = None, "not watched"
        lag, pending = _int_value(entry.get("lag")), _int_value(entry.get("pending"))
        rows.append({"streamPrefix": prefix, "consumerGroup": str(entry.get("consumerGroup")),
                     "state": _str_value(entry.get("state")),
                     "groupEpoch": _int_value(entry.get("groupEpoch")),
                     "members": _int_value(entry.get("members")),
                     "shards": _int_value(entry.get("shards")),
                     "lag": lag, "pending": pending, "backlog": backlog(lag, pending),
                     "migration": migration,
                     "blocked": bool(summary and summary["blockingGroups"])})
    rows.sort(key=lambda row: (row["streamPrefix"], row["consumerGroup"]))
    return {"rows": rows, "totals": totals(rows)}


def totals(rows: Sequence[OverviewRow]) -> Totals:
    """Totals over rows: groups, prefixes, members, shards, backlog, undelivered (`lag`) and
    unacked (`pending`); None if unknown."""
    return {"groups": len(rows), "prefixes": len({row["streamPrefix"] for row in rows}),
            "members": _sum(row["members"] for row in rows),
            "shards": _sum(row["shards"] for row in rows),
            "backlog": _sum(row["backlog"] for row in rows),
            "lag": _sum(row["lag"] for row in rows),
            "pending": _sum(row["pending"] for row in rows)}


def prefixes_to_watch(groups: Sequence[Mapping[str, object]], current: Mapping[str, str],
                      limit: int = MAX_WATCHED_PREFIXES) -> dict[str, str]:
    """For each prefix (at most `limit`, by name), the group whose watch shows its migration.

    A prefix keeps the group it watches while that group exists; else its first group.
    """
    by_prefix: dict[str, list[str]] = {}
    for entry in groups:
        by_prefix.setdefault(str(entry.get("streamPrefix")), []).append(str(entry.get("consumerGroup")))
    chosen: dict[str, str] = {}
    for prefix in sorted(by_prefix)[:limit]:
        names = by_prefix[prefix]
        kept = current.get(prefix)
        chosen[prefix] = kept if kept in names else min(names)
    return chosen


# --- group page -------------------------------------------------------------------------


def described(answer: Mapping[str, object]) -> GroupDescription:
    """A `groupDescription` (an answer or a push: its JSON object) as the protocol's message;
    ProtocolError names what does not decode."""
    message = decode_object({"requestId": None, **answer}, frozenset({GroupDescription.TYPE}))
    assert isinstance(message, GroupDescription)
    return message


def group_view(description: Mapping[str, object] | GroupDescription) -> GroupPage:
    """A group page from a `groupDescription`: header, members, shards, migration, laggiest."""
    view = build_group_view(description if isinstance(description, GroupDescription)
                            else described(description))
    members: list[MemberRow] = [{
        "memberId": member.member_id, "instanceId": member.instance_id,
        "state": member.state.value, "memberEpoch": member.member_epoch,
        "capacity": member.capacity, "lastHeartbeatMsAgo": member.last_heartbeat_ms_ago,
        "overdue": member.overdue, "assignedShards": list(member.assigned_shards),
        "pendingShards": list(member.pending_shards),
        "revokingShards": list(member.revoking_shards),
    } for member in (row.member for row in view.members)]
    shards: list[ShardRow] = [{
        "shard": shard.shard, "version": shard.version, "owner": shard.owner,
        "revokingFrom": shard.revoking_from, "length": shard.length, "lag": shard.lag,
        "pending": shard.pending, "backlog": shard.backlog,
        "oldestPendingMs": shard.oldest_pending_ms, "lastDeliveredId": shard.last_delivered_id,
    } for shard in view.shards]
    retention = view.retention
    laggiest = view.laggiest
    return {
        "streamPrefix": view.stream_prefix, "consumerGroup": view.consumer_group,
        "state": None if view.state is None else view.state.value,
        "groupEpoch": view.group_epoch, "assignmentEpoch": view.assignment_epoch,
        "maxConcurrency": view.max_concurrency,
        "routingVersion": view.routing_version, "shardCount": view.shard_count,
        "retention": None if retention is None else converter.unstructure(retention),
        "members": members, "shards": shards,
        "migration": migration_summary(view.migration),
        "backlog": view.totals.backlog, "lag": view.totals.undelivered,
        "pending": view.totals.unacked,
        "oldestUndeliveredAgeMs": view.oldest_undelivered_age_ms,
        "oldestPendingEntryAgeMs": view.oldest_pending_entry_age_ms,
        "laggiest": None if laggiest is None else {
            "shard": laggiest.shard, "owner": laggiest.owner, "lag": laggiest.lag,
            "pending": laggiest.pending, "backlog": laggiest.backlog},
        "storeWentBackAtMs": view.store_went_back_at_ms,  # K3, K4: null if never
    }


AUDIT_PAGE_ENTRIES: Final = 100


def audit_rows(entries: Iterable[Mapping[str, object]]) -> list[dict[str, object]]:
    """C3: the audit page's rows, newest first: when, who, what, the outcome, what was before.
    Values stay data (the page sets them as text)."""
    rows = []
    for entry in entries:
        request = entry.get("request")
        body = request if isinstance(request, Mapping) else {}
        rows.append({
            "id": entry.get("id"), "timeMs": entry.get("timeMs"), "peer": entry.get("peer"),
            "via": entry.get("via"), "role": entry.get("role"),
            "request": body.get("type", "handshake"),
            "streamPrefix": body.get("streamPrefix"), "consumerGroup": body.get("consumerGroup"),
            "detail": json.dumps({key: value for key, value in body.items()
                                  if key not in ("type", "requestId", "streamPrefix",
                                                 "consumerGroup")},
                                 ensure_ascii=False, sort_keys=True) if body else "",
            "status": entry.get("status"), "error": entry.get("error"),
            "before": None if entry.get("before") is None else json.dumps(
                entry.get("before"), ensure_ascii=False, sort_keys=True)})
    return rows


# --- C1 actions ---------------------------------------------------------------------------

ACTIONS: Final = ("setShardCount", "setMaxConcurrency", "removeMember", "resetOffsets",
                  "deleteGroup", "setRetention", "redriveDeadLetters")
"""What the group page can do, each through the admin request of the same name."""

ActionRequest = (m.SetShardCount | m.SetMaxConcurrency | m.RemoveMember | m.ResetOffsets
                 | m.DeleteGroup | m.RedriveDeadLetters | m.SetRetention)


def dead_letters_summary(answer: Mapping[str, object]) -> dict[str, object]:
    """P3, C1: what the group page shows of its dead letters (a `listDeadLetters` answer):
    the count, the stream, oldest and newest, errors by type and their retention (P2), never
    an entry's contents."""
    if answer.get("status") != "OK":
        return {"status": answer.get("status"), "error": answer.get("error")}
    return {"status": "OK", "count": answer.get("count"), "stream": answer.get("stream"),
            "oldestMs": answer.get("oldestMs"), "newestMs": answer.get("newestMs"),
            "errorsByType": answer.get("errorsByType") or {}, "retention": answer.get("retention")}


MAX_ACTION_BYTES: Final = 4096
DEFAULT_REDRIVE: Final = 1000  # P3: a re-drive sends back at most this many unless told


class ActionError(ValueError):
    """A page's action message the console cannot send; the text names what is wrong."""


@attrs.frozen
class Action:
    """One confirmed action of a group page: its id (echoed in the result), the admin
    request to send, and the group epoch and routing version the operator confirmed at."""

    action_id: int
    request: ActionRequest
    group_epoch: int | None
    routing_version: int | None
    dry_run: bool = False


def _int_or_none(params: Mapping[str, object], name: str) -> int | None:
    value = params.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ActionError(f"field 'params.{name}' must be an integer or null, got {value!r}")
    return value


def parse_action(text: str | bytes, prefix: str, group: str) -> Action:
    """A group page's action message: `{"type": "action", "id", "action", "params",
    "confirmedAt": {"groupEpoch", "routingVersion"}}`, as the admin request it sends."""
    body = _json_object(text, "an action", ActionError, MAX_ACTION_BYTES)
    if body.get("type") != "action":
        raise ActionError("a page sends only actions after its hello: {\"type\": \"action\", ...}")
    action_id = body.get("id")
    if isinstance(action_id, bool) or not isinstance(action_id, int):
        raise ActionError(f"field 'id' must be an integer, got {action_id!r}")
    name = body.get("action")
    if name not in ACTIONS:
        raise ActionError(f"field 'action' must be one of {', '.join(ACTIONS)}, got {name!r}")
    params = body.get("params") or {}
    confirmed = body.get("confirmedAt")
    if not isinstance(params, dict) or not isinstance(confirmed, dict):
        raise ActionError("fields 'params' and 'confirmedAt' must be objects")
    epoch = _int_or_none(confirmed, "groupEpoch")
    version = _int_or_none(confirmed, "routingVersion")
    try:
        request: ActionRequest
        if name == "setShardCount":
            count = _int_or_none(params, "shardCount")
            if count is None:
                raise ActionError("field 'params.shardCount' is missing")
            request = m.SetShardCount(request_id=0, stream_prefix=prefix, consumer_group=group,
                                      shard_count=count)
        elif name == "setMaxConcurrency":
            request = m.SetMaxConcurrency(request_id=0, stream_prefix=prefix, consumer_group=group,
                                          max_concurrency=_int_or_none(params, "maxConcurrency"))
        elif name == "removeMember":
            member = params.get("memberId")
            if not isinstance(member, str):
                raise ActionError("field 'params.memberId' must be a string")
            request = m.RemoveMember(request_id=0, stream_prefix=prefix, consumer_group=group,
                                     member_id=member)
        elif name == "resetOffsets":
            to = params.get("to")
            if to not in ("earliest", "latest"):
                raise ActionError(f"field 'params.to' must be earliest or latest, got {to!r}")
            request = m.ResetOffsets(request_id=0, stream_prefix=prefix, consumer_group=group, to=to,
                                     dry_run=params.get("dryRun") is True)
        elif name == "deleteGroup":
            request = m.DeleteGroup(request_id=0, stream_prefix=prefix, consumer_group=group)
        elif name == "redriveDeadLetters":
            dry_run = params.get("dryRun", False)
            if not isinstance(dry_run, bool):
                raise ActionError(f"field 'params.dryRun' must be true or false, got {dry_run!r}")
            most = _int_or_none(params, "max")
            request = m.RedriveDeadLetters(request_id=0, stream_prefix=prefix, consumer_group=group,
                                           dry_run=dry_run,
                                           max=DEFAULT_REDRIVE if most is None else most)
        else:
            mode = params.get("mode")
            if mode not in ("acked", "none"):
                raise ActionError(f"field 'params.mode' must be acked or none, got {mode!r}")
            request = m.SetRetention(request_id=0, stream_prefix=prefix, retention=m.Retention(
                mode=RetentionMode(mode), max_length=_int_or_none(params, "maxLength"),
                max_age_ms=_int_or_none(params, "maxAgeMs")))
    except FieldValueError as exc:
        raise ActionError(str(exc)) from None
    return Action(action_id=action_id, request=request, group_epoch=epoch, routing_version=version,
                  dry_run=getattr(request, "dry_run", False))


def confirmed_request(action: Action) -> tuple[ActionRequest, bool]:
    """C1: the action's request carrying the group epoch and routing version (0: none) the
    operator confirmed at, which the coordinator checks with the change itself; and whether
    that covers both (else the console checks them one request before: the re-drive, and the
    group epoch of setRetention)."""
    request = action.request
    if isinstance(request, m.RedriveDeadLetters):  # no condition of its own
        return request, False
    routing = action.routing_version or 0
    if isinstance(request, m.SetRetention):  # a prefix's: the routing version only
        return attrs.evolve(request, if_routing_version=routing), False
    if action.group_epoch is None:
        return attrs.evolve(request, if_routing_version=routing), False
    return attrs.evolve(request, if_routing_version=routing, if_group_epoch=action.group_epoch), True


def stale_confirmation(action: Action, description: Mapping[str, object]) -> str | None:
    """C1: why the group moved since the operator confirmed (None: it did not)."""
    routing = description.get("routing")
    version = routing.get("version") if isinstance(routing, Mapping) else None
    epoch = description.get("groupEpoch")
    moved = []
    if epoch != action.group_epoch:
        moved.append(f"group epoch {action.group_epoch} -> {epoch}")
    if version != action.routing_version:
        moved.append(f"routing version {action.routing_version} -> {version}")
    if not moved:
        return None
    return "the group changed since this was confirmed (" + ", ".join(moved) + \
        "): look at it again and confirm again"


# --- messages (C2) --------------------------------------------------------------------------

READS: Final = frozenset({ReadShard.TYPE, FindKey.TYPE, ListPending.TYPE})
"""C2: what a messages page may ask, each for its own prefix and group only."""


@attrs.frozen
class Read:
    read_id: object
    request: ReadShard | FindKey | ListPending


def parse_read(text: str | bytes, prefix: str, group: str) -> Read:
    """C2: `{"type": "read", "id": N, "request": "readShard" | "findKey" | "listPending",
    "params": {...}}` to the admin request, for the page's prefix and group (params cannot
    name another)."""
    body = _json_object(text, "a read", ActionError, MAX_ACTION_BYTES)
    if body.get("type") != "read":
        raise ActionError("a messages page sends only reads: {\"type\": \"read\", ...}")
    kind, params = body.get("request"), body.get("params", {})
    if kind not in READS:
        raise ActionError(f"field 'request' must be one of {', '.join(sorted(READS))}, "
                          f"got {kind!r}")
    if not isinstance(params, dict):
        raise ActionError("field 'params' must be an object")
    wire = {**params, "type": kind, "requestId": 0, "streamPrefix": prefix,
            "consumerGroup": group}
    try:
        request = decode_object(wire, READS)
    except ProtocolError as exc:
        raise ActionError(f"params: {exc.message}") from None
    assert isinstance(request, ReadShard | FindKey | ListPending)
    return Read(read_id=body.get("id"), request=request)
