"""The Redis metadata store: one hash per stream prefix, written with a check-and-set.

Blocking (redis-py's sync client); the actors call it through
`trio.to_thread.run_sync`. Layout:

- `rsc:coordinator:epoch`: INCR'd by every coordinator that starts.
- `rsc:coordinator:lease`: the live coordinator's id, with a TTL it renews.
- `rsc:prefixes`: the set of stream prefixes with metadata.
- `rsc:meta:{<prefix>}`: a hash with `coordinatorEpoch`, `routing`, `migration`,
  one `group:<name>` field per group (epochs, settings) and one
  `member:<len>:<group>:<memberId>` field per member (its books and target),
  all JSON, so a checkpoint writes only what changed. Every write checks that no
  newer coordinator has written it (its epoch is not above ours), so a stale
  coordinator is fenced rather than overwriting a live one.
- owner tokens `{shard}:owner:<group>` (value: memberId) that members' ack
  scripts check.

On a Redis Cluster (the URL names any node) every script call and pipelined
command names keys of one slot: the metadata hash alone, or one shard's
hash tag; the cluster client sends each to its node and follows MOVED/ASK.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import redis

from rsc.actors.redis_connect import connect, is_cluster
from rsc.protocol.routing import owner_key, seal_key

EPOCH_KEY = "rsc:coordinator:epoch"
LEASE_KEY = "rsc:coordinator:lease"
PREFIXES_KEY = "rsc:prefixes"
GROUP_FIELD = "group:"
MEMBER_FIELD = "member:"

# KEYS[1] meta hash; ARGV[1] our coordinator epoch; ARGV[2..] field, value pairs ("" deletes)
_CAS_WRITE = """
local current = redis.call('HGET', KEYS[1], 'coordinatorEpoch')
if current and tonumber(current) > tonumber(ARGV[1]) then
  return redis.error_reply('FENCED coordinator epoch ' .. current .. ' owns ' .. KEYS[1])
end
redis.call('HSET', KEYS[1], 'coordinatorEpoch', ARGV[1])
for i = 2, #ARGV, 2 do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', KEYS[1], ARGV[i])
  else
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
return 1
"""

# KEYS[1] lease; ARGV[1] our id; ARGV[2] ttl ms
_RENEW_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

_RELEASE_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class StoreError(Exception):
    """The metadata store could not be written (Redis down, timeout)."""


class StoreFenced(StoreError):
    """A newer coordinator owns this Redis: this one must stop."""


class CoordinatorAlreadyRunning(StoreError):
    """Another live coordinator holds the lease on this Redis."""


def meta_key(prefix: str) -> str:
    return f"rsc:meta:{{{prefix}}}"


def group_field(group: str) -> str:
    return GROUP_FIELD + group


def member_field(group: str, member_id: str) -> str:
    """One member's books: `member:<len(group)>:<group>:<memberId>` (names may contain ':')."""
    return f"{MEMBER_FIELD}{len(group)}:{group}:{member_id}"


def parse_member_field(field: str) -> tuple[str, str]:
    length, _, rest = field[len(MEMBER_FIELD):].partition(":")
    size = int(length)
    return rest[:size], rest[size + 1:]


class MetadataStore:
    """Reads and check-and-set writes of the per-prefix metadata hashes."""

    def __init__(self, redis_url: str, *, lease_ms: int) -> None:
        self.redis_url = redis_url
        try:  # one server, or a cluster through any one of its nodes
            self.client: Any = connect(redis_url, decode_responses=True,
                                       socket_timeout=5, socket_connect_timeout=5)
        except redis.RedisError as exc:
            raise StoreError(f"cannot use Redis at {redis_url}: {exc}") from exc
        self.lease_ms = lease_ms
        self.instance_id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.coordinator_epoch = 0
        self._cas = self.client.register_script(_CAS_WRITE)
        self._renew = self.client.register_script(_RENEW_LEASE)
        self._release = self.client.register_script(_RELEASE_LEASE)

    # --- coordinator lease ---------------------------------------------------------

    def acquire(self, wait_ms: int) -> int:
        """Take the coordinator lease, waiting up to `wait_ms` for a dead holder's to lapse.

        Raises CoordinatorAlreadyRunning when a live coordinator keeps renewing it.
        """
        try:
            return self._acquire(wait_ms)
        except redis.RedisError as exc:
            raise StoreError(f"cannot use Redis at {self.redis_url}: {exc}") from exc

    def _acquire(self, wait_ms: int) -> int:
        deadline = time.monotonic() + wait_ms / 1000
        while True:
            if self.client.set(LEASE_KEY, self.instance_id, nx=True, px=self.lease_ms):
                self.coordinator_epoch = int(self.client.incr(EPOCH_KEY))
                return self.coordinator_epoch
            holder = self.client.get(LEASE_KEY)
            if time.monotonic() >= deadline:
                raise CoordinatorAlreadyRunning(
                    f"another coordinator ({holder}) is live on {self.redis_url}; refusing to start. "
                    "Stop it first, or point this one at another Redis.")
            time.sleep(0.05)

    def renew(self) -> None:
        """Keep the lease; StoreFenced when another coordinator has it now."""
        try:
            renewed = self._renew(keys=[LEASE_KEY], args=[self.instance_id, self.lease_ms])
        except redis.RedisError as exc:
            raise StoreError(f"cannot renew the coordinator lease: {exc}") from exc
        if not renewed:
            if self.client.set(LEASE_KEY, self.instance_id, nx=True, px=self.lease_ms):
                return  # it lapsed while Redis was unreachable and nobody took it
            raise StoreFenced(
                f"coordinator lease taken by {self.client.get(LEASE_KEY)}; this coordinator stops")

    def release(self) -> None:
        self._release(keys=[LEASE_KEY], args=[self.instance_id])

    # --- metadata ------------------------------------------------------------------

    def load_all(self) -> dict[str, dict[str, Any]]:
        """Every prefix's metadata: {prefix: {"routing": ..., "migration": ..., "groups": {...}}}."""
        result: dict[str, dict[str, Any]] = {}
        for prefix in sorted(self.client.smembers(PREFIXES_KEY)):
            raw = self.client.hgetall(meta_key(prefix))
            groups: dict[str, dict[str, Any]] = {}
            for field, value in raw.items():
                if field.startswith(GROUP_FIELD):
                    record = groups.setdefault(field[len(GROUP_FIELD):], {"members": {}, "target": {}})
                    record.update(json.loads(value))
            for field, value in raw.items():
                if field.startswith(MEMBER_FIELD):
                    group, member_id = parse_member_field(field)
                    data = json.loads(value)
                    if group in groups:
                        groups[group]["target"][member_id] = data.pop("target")
                        groups[group]["members"][member_id] = data
            result[prefix] = {
                "routing": json.loads(raw["routing"]) if raw.get("routing") else None,
                "migration": json.loads(raw["migration"]) if raw.get("migration") else None,
                "groups": groups,
            }
        return result

    def write(
        self,
        prefix: str,
        fields: Mapping[str, Any | None],
        owner_changes: Iterable[tuple[str, str, str | None]] = (),
    ) -> None:
        """Check-and-set `fields` (JSON values; None deletes) of a prefix, then owner tokens.

        owner_changes: (shard, group, memberId or None to delete).
        """
        args: list[Any] = [self.coordinator_epoch]
        for field, value in fields.items():
            args += [field, "" if value is None else json.dumps(value, separators=(",", ":"))]
        try:
            if is_cluster(self.client):  # two slots, and no scripts in a cluster pipeline
                self.client.sadd(PREFIXES_KEY, prefix)
                self._cas(keys=[meta_key(prefix)], args=args)
            else:
                pipe = self.client.pipeline(transaction=False)
                pipe.sadd(PREFIXES_KEY, prefix)
                self._cas(keys=[meta_key(prefix)], args=args, client=pipe)
                pipe.execute()
        except redis.ResponseError as exc:
            if str(exc).startswith("FENCED"):
                raise StoreFenced(str(exc)) from exc
            raise StoreError(str(exc)) from exc
        except redis.RedisError as exc:
            raise StoreError(f"metadata write failed: {exc}") from exc
        changes = list(owner_changes)
        if not changes:
            return
        try:
            pipe = self.client.pipeline(transaction=False)
            for shard, group, member_id in changes:
                if member_id is None:
                    pipe.delete(owner_key(shard, group))
                else:
                    pipe.set(owner_key(shard, group), member_id)
            pipe.execute()
        except redis.RedisError as exc:
            raise StoreError(f"owner token write failed: {exc}") from exc

    # --- streams -------------------------------------------------------------------

    def create_consumer_groups(self, streams: Iterable[str], groups: Iterable[str]) -> None:
        """Each stream exists and has every group, created at id 0 (BUSYGROUP is fine)."""
        streams, groups = list(streams), list(groups)
        if not streams or not groups:
            return
        try:
            pipe = self.client.pipeline(transaction=False)
            for stream in streams:
                for group in groups:
                    pipe.xgroup_create(stream, group, id="0", mkstream=True)
            for result in pipe.execute(raise_on_error=False):
                if isinstance(result, Exception) and "BUSYGROUP" not in str(result):
                    raise StoreError(f"cannot create consumer group: {result}")
        except redis.RedisError as exc:
            raise StoreError(f"cannot create streams: {exc}") from exc

    def close(self) -> None:
        self.client.close()


class StreamAdmin:
    """Stream-side work of resharding: seal, measure drain, retire. Blocking, like the store."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def seal(self, streams: Iterable[str]) -> None:
        """No write lands in these streams any more (the producer script checks the marker)."""
        try:
            pipe = self.client.pipeline(transaction=False)
            for stream in streams:
                pipe.set(seal_key(stream), "1")
            pipe.execute()
        except redis.RedisError as exc:
            raise StoreError(f"cannot seal streams: {exc}") from exc

    def drained(self, streams: Iterable[str], groups: Iterable[str]) -> set[str]:
        """The sealed streams where every group has read everything and acked it (R2)."""
        streams, groups = list(streams), set(groups)
        try:
            pipe = self.client.pipeline(transaction=False)
            for stream in streams:
                pipe.xinfo_stream(stream)
                pipe.xinfo_groups(stream)
            results = pipe.execute(raise_on_error=False)
        except redis.RedisError as exc:
            raise StoreError(f"cannot read drain progress: {exc}") from exc
        done: set[str] = set()
        for index, stream in enumerate(streams):
            info, group_infos = results[2 * index], results[2 * index + 1]
            if isinstance(info, Exception) or isinstance(group_infos, Exception):
                if "no such key" in str(info).lower():
                    done.add(stream)  # already retired
                continue
            last = _stream_id(info["last-generated-id"])
            by_name = {g["name"]: g for g in group_infos}
            if all(name in by_name and by_name[name]["pending"] == 0
                   and _stream_id(by_name[name]["last-delivered-id"]) >= last for name in groups):
                done.add(stream)
        return done

    def retire(self, streams: Iterable[str], groups: Iterable[str]) -> None:
        """Delete drained streams with their seal markers and owner tokens."""
        streams, groups = list(streams), list(groups)
        try:
            pipe = self.client.pipeline(transaction=False)
            for stream in streams:
                # one slot (the shard's hash tag): one DEL, in a cluster pipeline too
                pipe.execute_command("DEL", stream, seal_key(stream),
                                     *(owner_key(stream, g) for g in groups))
            pipe.execute()
        except redis.RedisError as exc:
            raise StoreError(f"cannot delete drained streams: {exc}") from exc


def _stream_id(text: str) -> tuple[int, int]:
    milliseconds, _, sequence = text.partition("-")
    return int(milliseconds), int(sequence or 0)
