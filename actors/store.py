"""The Redis metadata store: one hash per stream prefix, written with a check-and-set.

Blocking (redis-py's sync client); the actors call it through
`trio.to_thread.run_sync`. Layout:

- `rsc:coordinator:epoch`: INCR'd by every coordinator that starts.
- `rsc:coordinator:lease`: the live coordinator's id, with a TTL it renews.
- `rsc:prefixes`: the set of stream prefixes with metadata.
- `rsc:meta:{<prefix>}`: a hash with `coordinatorEpoch`, `routing`, `migration`,
  one field per group and one per member; its fields and values are the
  record schema of actors/records.py (`encode` writes them, `replay` loads
  them), so a checkpoint writes only what changed. Every write checks that no
  newer coordinator has written it (its epoch is not above ours), so a stale
  coordinator is fenced rather than overwriting a live one.
- owner tokens `{shard}:owner:<group>` (value: memberId) that members' ack
  scripts check.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterable
from typing import Any

import redis

from rsc.actors.records import COORDINATOR_EPOCH_FIELD, Changes, OwnerToken, PrefixSnapshot, encode, replay
from rsc.protocol.routing import owner_key, seal_key

EPOCH_KEY = "rsc:coordinator:epoch"
LEASE_KEY = "rsc:coordinator:lease"
PREFIXES_KEY = "rsc:prefixes"

# KEYS[1] meta hash; ARGV[1] our coordinator epoch; ARGV[2] the epoch field;
# ARGV[3..] field, value pairs ("" deletes)
_CAS_WRITE = """
local current = redis.call('HGET', KEYS[1], ARGV[2])
if current and tonumber(current) > tonumber(ARGV[1]) then
  return redis.error_reply('FENCED coordinator epoch ' .. current .. ' owns ' .. KEYS[1])
end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[1])
for i = 3, #ARGV, 2 do
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


# KEYS[1] stream; ARGV[1] group; ARGV[2] earliest | latest | timestamp; ARGV[3] timestamp ms.
# Recreating the group at the new id drops its pending entries (XGROUP SETID alone keeps them).
_MOVE_OFFSETS = """
local id = '$'
if ARGV[2] == 'earliest' then
  id = '0-0'
elseif ARGV[2] == 'timestamp' then
  local first = redis.call('XRANGE', KEYS[1], ARGV[3], '+', 'COUNT', 1)
  if #first > 0 then
    local ms, seq = string.match(first[1][1], '^(%d+)-(%d+)$')
    if seq ~= '0' then
      id = ms .. '-' .. string.format('%.0f', tonumber(seq) - 1)
    elseif ms ~= '0' then
      id = string.format('%.0f', tonumber(ms) - 1) .. '-18446744073709551615'
    else
      id = '0-0'
    end
  end
end
redis.pcall('XGROUP', 'DESTROY', KEYS[1], ARGV[1])
redis.call('XGROUP', 'CREATE', KEYS[1], ARGV[1], id, 'MKSTREAM')
for _, group in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local name, last
  for i = 1, #group, 2 do
    if group[i] == 'name' then name = group[i + 1] end
    if group[i] == 'last-delivered-id' then last = group[i + 1] end
  end
  if name == ARGV[1] then return last end
end
return redis.error_reply('consumer group ' .. ARGV[1] .. ' missing after its reset')
"""


class StoreError(Exception):
    """The metadata store could not be written (Redis down, timeout)."""


class StoreFenced(StoreError):
    """A newer coordinator owns this Redis: this one must stop."""


class CoordinatorAlreadyRunning(StoreError):
    """Another live coordinator holds the lease on this Redis."""


def meta_key(prefix: str) -> str:
    return f"rsc:meta:{{{prefix}}}"


class MetadataStore:
    """Reads and check-and-set writes of the per-prefix metadata hashes."""

    def __init__(self, redis_url: str, *, lease_ms: int) -> None:
        self.redis_url = redis_url
        self.client = redis.Redis.from_url(redis_url, decode_responses=True,
                                           socket_timeout=5, socket_connect_timeout=5)
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
            holder = holder.decode() if isinstance(holder, bytes) else holder
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
            holder = self.client.get(LEASE_KEY)
            raise StoreFenced(f"coordinator lease taken by {holder!s}; this coordinator stops")

    def release(self) -> None:
        self._release(keys=[LEASE_KEY], args=[self.instance_id])

    # --- metadata ------------------------------------------------------------------

    def load_all(self) -> dict[str, PrefixSnapshot]:
        """Every prefix's metadata, replayed from its hash."""
        prefixes: set[str] = self.client.smembers(PREFIXES_KEY)  # type: ignore[assignment]
        result: dict[str, PrefixSnapshot] = {}
        for prefix in sorted(prefixes):
            fields: dict[str, str] = self.client.hgetall(meta_key(prefix))  # type: ignore[assignment]
            result[prefix] = replay(fields)
        return result

    def load_prefix(self, prefix: str) -> PrefixSnapshot | None:
        """One prefix's metadata (None if it has none), to reload a failed actor."""
        fields: dict[str, str] = self.client.hgetall(meta_key(prefix))  # type: ignore[assignment]
        return replay(fields) if fields else None

    def write(self, prefix: str, changes: Changes, owners: Iterable[OwnerToken] = ()) -> None:
        """Check-and-set the hash fields of `changes`, then (only if that held) the owner tokens."""
        args: list[Any] = [self.coordinator_epoch, COORDINATOR_EPOCH_FIELD]
        for field, value in encode(changes).items():
            args += [field, "" if value is None else value]
        try:
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
        tokens = list(owners)
        if not tokens:
            return
        try:
            pipe = self.client.pipeline(transaction=False)
            for token in tokens:
                if token.member_id is None:
                    pipe.delete(owner_key(token.shard, token.group))
                else:
                    pipe.set(owner_key(token.shard, token.group), token.member_id)
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
    """Stream-side work of resharding and lifecycle: seal, destroy, move, retire. Blocking.

    Drain is measured by actors/shard_ops.py (`drain_counts`), which knows retention.
    """

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._move = client.register_script(_MOVE_OFFSETS)

    def seal(self, streams: Iterable[str]) -> None:
        """No write lands in these streams any more (the producer script checks the marker)."""
        try:
            pipe = self.client.pipeline(transaction=False)
            for stream in streams:
                pipe.set(seal_key(stream), "1")
            pipe.execute()
        except redis.RedisError as exc:
            raise StoreError(f"cannot seal streams: {exc}") from exc

    def unseal(self, streams: Iterable[str]) -> None:
        """Writes land again (a reshard whose metadata write failed sealed them)."""
        try:
            self.client.delete(*(seal_key(stream) for stream in streams))
        except redis.RedisError as exc:
            raise StoreError(f"cannot unseal streams: {exc}") from exc

    def destroy_consumer_groups(self, streams: Iterable[str], groups: Iterable[str]) -> None:
        """G1: drop these consumer groups from these streams (a missing stream or group is fine)."""
        streams, groups = list(streams), list(groups)
        try:
            pipe = self.client.pipeline(transaction=False)
            for stream in streams:
                for group in groups:
                    pipe.xgroup_destroy(stream, group)
            for result in pipe.execute(raise_on_error=False):
                if isinstance(result, Exception) and "requires the key to exist" not in str(result):
                    raise StoreError(f"cannot delete consumer group: {result}")
        except redis.RedisError as exc:
            raise StoreError(f"cannot delete consumer groups: {exc}") from exc

    def move_offsets(self, streams: Iterable[str], group: str, to: str,
                     timestamp_ms: int | None) -> dict[str, str]:
        """G3: the group's new last-delivered id on each stream, its pending entries dropped.

        `timestamp` makes the first entry at or after `timestamp_ms` the next one
        delivered, or acts like `latest` when there is none. One pipelined round trip.
        """
        streams = list(streams)
        try:
            pipe = self.client.pipeline(transaction=False)
            for stream in streams:
                self._move(keys=[stream], args=[group, to, timestamp_ms or 0], client=pipe)
            results = pipe.execute()
        except redis.RedisError as exc:
            raise StoreError(f"cannot move the offsets of {group!r}: {exc}") from exc
        return {stream: str(result) for stream, result in zip(streams, results, strict=True)}

    def retire(self, streams: Iterable[str], groups: Iterable[str]) -> None:
        """Delete drained streams with their seal markers and owner tokens."""
        streams, groups = list(streams), list(groups)
        try:
            pipe = self.client.pipeline(transaction=False)
            for stream in streams:
                pipe.delete(stream, seal_key(stream), *(owner_key(stream, g) for g in groups))
            pipe.execute()
        except redis.RedisError as exc:
            raise StoreError(f"cannot delete drained streams: {exc}") from exc

