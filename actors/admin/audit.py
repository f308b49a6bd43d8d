"""C3: the audit log. Every admin request that changes something, or was refused, from any
client (the console, `rsc admin`, the API), appends one entry to the capped stream
`rsc:audit` before its answer is sent.

An entry is one stream field, `entry`, holding a JSON object:

- `timeMs` (the coordinator's wall clock), `endpoint` (`/v1/admin`), `peer` (the client's
  address; for the console the browser's, with `via: "console"`), `role` (`admin`, `viewer`,
  or `open` on a coordinator without an admin token);
- a B6 expiry is the coordinator's own (`endpoint` `coordinator`, `peer` `-`, `role`
  `coordinator`, request `expireGroup`), appended by the prefix actor after the batch;
- `request`: the request as received, with tokens and K7's secrets masked;
- `status` and `error`: the outcome;
- `before`: for reshards, offset resets and deletions, what was there before (the routing,
  the group's shards with their last-delivered ids, the group's epoch and members).

The decisions (what is audited, masking, the entry) are pure functions here; `AuditLog` is
the shell that appends on a worker thread within D4's deadline. An append that fails or is
too slow is logged and counted (`rsc_audit_lost_total`) and the request still answers.
On a Redis Cluster the key lives on one node like the other coordinator keys.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Mapping, Sequence
from typing import Protocol

import attrs
import trio

from rsc.actors.logs import log_event
from rsc.actors.redis_io.store import StoreError
from rsc.actors.redis_io.store_deadline import StoreStalled, run_by_deadline
from rsc.common.lua import Client as RedisClient
from rsc.common.redact import MASK, redact_text
from rsc.protocol import messages as m
from rsc.protocol.codec import encode
from rsc.protocol.errors import Status

log = logging.getLogger("rsc.coordinator")

AUDIT_KEY = "rsc:audit"
AUDIT_MAX_ENTRIES = 100_000  # XADD MAXLEN ~: Redis trims in whole nodes, so a little more stays
MAX_READ = 1000  # entries one readAudit may ask for

CHANGING = (m.SetShardCount, m.SetMaxConcurrency, m.RemoveMember, m.DeleteGroup, m.ResetOffsets,
            m.SetRetention, m.SetFormatVersion, m.RedriveDeadLetters)
"""The admin requests that change something: audited whatever their outcome."""

READS_CONTENTS = (m.ReadShard, m.FindKey)
"""C2: the reads that show message contents: the admin token only, each audited (who, shard,
range; never the contents)."""

ADMIN_ONLY = CHANGING + READS_CONTENTS
"""What the viewer token is refused (NOT_AUTHORIZED)."""

WITH_BEFORE = (m.SetShardCount, m.ResetOffsets, m.DeleteGroup)
"""The changes whose entry says what was there before."""

_SECRET_KEY = re.compile(r"token|password|secret|authorization", re.IGNORECASE)


class AuditMetrics(Protocol):
    """What the audit log tells metrics (actors.ops.metrics.CoordinatorMetrics)."""

    def audit_lost(self) -> None: ...


@attrs.frozen
class Client:
    """Who sent a request: its address, the role its token gave, and through what."""

    peer: str
    role: str  # admin, viewer, or open (no admin token configured)
    via: str | None = None  # "console" when the console sent it for a browser
    endpoint: str = "/v1/admin"


def audited(request: m.Request, response: m.Response) -> bool:
    """C3: a request that changes something (any outcome), or one that was refused."""
    if isinstance(request, m.ResetOffsets | m.RedriveDeadLetters) and request.dry_run:
        return response.status == Status.NOT_AUTHORIZED  # C1: a dry run changes nothing
    return isinstance(request, ADMIN_ONLY) or response.status == Status.NOT_AUTHORIZED


def read_range(response: m.Response) -> dict[str, object] | None:
    """C2: what a read of contents showed: the shard, how many entries, the first and last id
    (never a key, value or header)."""
    if not isinstance(response, m.ShardEntries | m.KeyEntries):
        return None
    ids = [item.id for item in response.entries]
    return {"shard": response.shard, "entries": len(ids), "firstId": ids[0] if ids else None,
            "lastId": ids[-1] if ids else None}


def masked(value: object) -> object:
    """`value` (decoded JSON) with every field named like a token, password or secret masked,
    and K7's secrets (URL passwords, remembered passwords) masked in every string."""
    if isinstance(value, Mapping):
        return {key: MASK if _SECRET_KEY.search(str(key)) and item is not None else masked(item)
                for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [masked(item) for item in value]
    if isinstance(value, str):
        return redact_text(value)
    return value


def wire(message: m.Message) -> dict[str, object]:
    """A message as it travels (camelCase JSON), decoded."""
    body: dict[str, object] = json.loads(encode(message))
    return body


def entry(client: Client, request: m.Request, response: m.Response, *, time_ms: int,
          before: Mapping[str, object] | None = None) -> dict[str, object]:
    """The audit entry of one answered request (the JSON object stored in `rsc:audit`)."""
    body: dict[str, object] = {"timeMs": time_ms, "endpoint": client.endpoint, "peer": client.peer,
                            "role": client.role}
    if client.via is not None:
        body["via"] = client.via
    answer = wire(response)
    body.update(request=masked(wire(request)), status=answer.get("status"),
                error=masked(answer.get("error")))
    if before is not None:
        body["before"] = masked(dict(before))
    shown = read_range(response)
    if shown is not None:
        body["read"] = shown
    return body


def refused_handshake(client: Client, reason: str, *, time_ms: int) -> dict[str, object]:
    """The entry of an admin session refused at its handshake (no or a wrong token)."""
    body: dict[str, object] = {"timeMs": time_ms, "endpoint": client.endpoint,
                            "peer": client.peer, "role": client.role, "request": None,
                            "status": "UNAUTHORIZED", "error": reason}
    if client.via is not None:
        body["via"] = client.via
    return body


COORDINATOR = Client(peer="-", role="coordinator", endpoint="coordinator")
"""Who acts when the coordinator changes something by itself (a B6 expiry)."""


def expiry_entry(prefix: str, group: str, *, group_epoch: int, members: Sequence[str],
                 empty_since_ms: int | None, retention_ms: int,
                 shards: Sequence[Mapping[str, object]] | None, time_ms: int) -> dict[str, object]:
    """C3: the entry of a group B6 deleted: the coordinator's own `expireGroup`, with what
    was there before as for `deleteGroup` (`shards` None: Redis could not be read)."""
    client = COORDINATOR
    return {"timeMs": time_ms, "endpoint": client.endpoint, "peer": client.peer,
            "role": client.role,
            "request": masked({"type": "expireGroup", "streamPrefix": prefix,
                               "consumerGroup": group, "emptySinceMs": empty_since_ms,
                               "retentionMs": retention_ms}),
            "status": Status.OK.value, "error": None,
            "before": masked({"groupEpoch": group_epoch, "members": list(members),
                              "shards": None if shards is None else [dict(s) for s in shards]})}


def before_of(request: m.Request, description: m.Response | None,
              routing: m.Response | None) -> dict[str, object] | None:
    """What was there before a reshard (the routing), a reset or a deletion (the group)."""
    if isinstance(request, m.SetShardCount):
        if isinstance(routing, m.Routing) and routing.status == Status.OK:
            return {"routing": {"version": routing.version, "shardCount": routing.shard_count,
                                "streams": list(routing.streams or ())}}
        return {"routing": None}
    if isinstance(request, m.ResetOffsets | m.DeleteGroup):
        if isinstance(description, m.GroupDescription) and description.status == Status.OK:
            return {"groupEpoch": description.group_epoch,
                    "members": [member.member_id for member in description.members],
                    "shards": [{"shard": shard.shard, "lastDeliveredId": shard.last_delivered_id,
                                "lag": shard.lag, "pending": shard.pending}
                               for shard in description.shards]}
        return {"group": None}
    return None


def now_ms() -> int:
    return int(time.time() * 1000)


def entry_text(body: Mapping[str, object]) -> str:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def append_entry(client: RedisClient, body: Mapping[str, object]) -> str:
    """XADD one entry to `rsc:audit`, capped (blocking). Its id."""
    entry_id = client.xadd(AUDIT_KEY, {"entry": entry_text(body)}, maxlen=AUDIT_MAX_ENTRIES,
                           approximate=True)
    return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)


def append_entries(client: RedisClient, bodies: Sequence[Mapping[str, object]]) -> list[str | None]:
    """XADD several entries in order, in one round trip (blocking): per entry, None when it
    was appended, else why not (a denied XADD, a wrong type at the key)."""
    if len(bodies) == 1:
        append_entry(client, bodies[0])
        return [None]
    pipe = client.pipeline(transaction=False)
    for body in bodies:
        pipe.xadd(AUDIT_KEY, {"entry": entry_text(body)}, maxlen=AUDIT_MAX_ENTRIES,
                  approximate=True)
    replies = pipe.execute(raise_on_error=False)
    return [str(reply) if isinstance(reply, Exception) else None for reply in replies]


def read_entries(client: RedisClient, count: int, before_id: str | None) -> list[dict[str, object]]:
    """The newest `count` entries (before `before_id` when given), newest first (blocking)."""
    top = "+" if before_id is None else f"({before_id}"
    found = client.xrevrange(AUDIT_KEY, top, "-", count=count)
    out = []
    for entry_id, fields in found or ():
        raw = fields.get("entry") if isinstance(fields, dict) else None
        if raw is None:
            raw = fields.get(b"entry") if isinstance(fields, dict) else None
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        try:
            body = json.loads(text)
        except ValueError:
            body = {"unreadable": text[:200]}
        out.append({"id": entry_id.decode() if isinstance(entry_id, bytes) else entry_id,
                    **(body if isinstance(body, dict) else {"unreadable": text[:200]})})
    return out


class AuditLog:
    """Appends entries to `rsc:audit` for one coordinator epoch, within `deadline_s`; a failed
    or abandoned append is logged and counted, never raised.

    Appends are committed as a group: one caller writes what is queued (one worker thread,
    one pipelined round trip), and those who queued meanwhile wait for that write or write
    the next group themselves. Each caller still returns only once its own entry was
    written (or lost), so an answer never goes out before its entry, and a burst of admin
    requests costs one thread hop per group instead of one per request."""

    def __init__(self, client: RedisClient, *, deadline_s: float,
                 metrics: AuditMetrics | None = None) -> None:
        self.client = client
        self.deadline_s = deadline_s
        self.metrics = metrics
        self._queue: list[_Pending] = []
        self._writing = False
        self._written = trio.Event()  # set when a group's write ends (then replaced)

    async def append(self, body: Mapping[str, object]) -> bool:
        """Append `body`; False (logged, counted) when it could not be."""
        pending = _Pending(body)
        self._queue.append(pending)
        while pending.outcome is None:
            if self._writing:
                await self._written.wait()  # that group may hold mine; else I write the next
                continue
            group, self._queue = self._queue, []
            self._writing = True
            try:
                with trio.CancelScope(shield=True):  # the others wait on this write
                    await self._write(group)
            finally:
                self._writing = False
                self._written.set()
                self._written = trio.Event()
        return pending.outcome == ""

    async def _write(self, group: list[_Pending]) -> None:
        problems: list[str | None]
        try:
            problems = await run_by_deadline(trio.current_time() + self.deadline_s,
                                             "audit append", append_entries, self.client,
                                             [p.body for p in group])
        except StoreStalled:
            problems = ["Redis did not answer in time"] * len(group)
        except StoreError as exc:  # I/O, a denied XADD (K6 ACL), a wrong type at the key
            problems = [str(exc)] * len(group)
        for pending, problem in zip(group, problems, strict=True):
            pending.outcome = problem or ""
            if problem is None:
                continue
            request = pending.body.get("request")
            log_event(log, "audit.lost", level=logging.WARNING, error=problem,
                      request=str(request.get("type") if isinstance(request, Mapping) else None))
            if self.metrics is not None:
                self.metrics.audit_lost()

    async def read(self, count: int, before_id: str | None) -> list[dict[str, object]]:
        """The newest entries; raises StoreError-like exceptions to the caller."""
        return await run_by_deadline(trio.current_time() + self.deadline_s, "audit read",
                                     read_entries, self.client, count, before_id)


@attrs.define
class _Pending:
    """One entry waiting for its group's write: outcome "" once written, else why not."""

    body: Mapping[str, object]
    outcome: str | None = None


def entries_of(found: Sequence[Mapping[str, object]]) -> tuple[dict[str, object], ...]:
    return tuple(dict(item) for item in found)
