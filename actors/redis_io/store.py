"""The Redis metadata store: one hash per stream prefix, written with a check-and-set.

Blocking (redis-py's sync client); the actors call it through
`trio.to_thread.run_sync`. Layout:

- `rsc:coordinator:epoch`: INCR'd by every coordinator that starts.
- `rsc:coordinator:lease`: the live coordinator's id, with a TTL it renews.
- `rsc:prefixes`: the set of stream prefixes with metadata.
- `rsc:meta:{<prefix>}`: a hash with `coordinatorEpoch`, `routing`, `migration`,
  one field per group and one per member; its fields and values are the
  record schema of actors/core/records.py (`encode` writes them, `replay` loads
  them), so a checkpoint writes only what changed. Every write checks that no
  newer coordinator has written it (its epoch is not above ours), so a stale
  coordinator is fenced rather than overwriting a live one.
- owner tokens `{shard}:owner:<group>` (value: memberId) that members' ack
  scripts check.
- `rsc:store-mark` (on a Redis Cluster `rsc:store-mark:{<tag>}`, one per master): the
  marker a running coordinator writes again every tick, with the write sequences of
  its prefixes' last confirmed writes what `check_went_back` reads back to notice a
  store that lost writes (K3, actors/core/store_rewrite.py); `rewrite` writes everything back.
- `rsc:format-version`: the metadata format of the whole store (actors/core/records.py
  `FORMAT_VERSIONS`; absent: format 1). `load_all` refuses a newer format than this
  code reads (`UnsupportedFormatVersion`) and writes the key when it is missing;
  only `raise_format_version` changes it, and never lowers it.

On a Redis Cluster (the URL names any node) every script call and pipelined
command names keys of one slot: the metadata hash alone, or one shard's
hash tag; the cluster client sends each to its node and follows MOVED/ASK.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import cast

import redis

from rsc.actors.core.lease import Renewal, instance_host_pid, instance_id
from rsc.actors.core.records import (
    COORDINATOR_EPOCH_FIELD,
    LATEST_FORMAT_VERSION,
    WRITE_SEQUENCE_FIELD,
    Changes,
    OwnerToken,
    PrefixSnapshot,
    encode,
    load_refusal,
    replay,
    stored_format_version,
)
from rsc.actors.core.shard_damage import StreamFacts
from rsc.actors.core.store_rewrite import (
    MARK_KEY,
    Observed,
    Witness,
    mark_key,
    mark_value,
    prefix_rewrite,
    went_back,
    went_back_epoch,
)
from rsc.actors.logs import log_event
from rsc.actors.ports import WriteReport
from rsc.common.lua import Client, Command, Reply, Script, Word, pipelined, reply_int
from rsc.common.redact import redact_url
from rsc.common.redis_connect import connect, error_text, failure_text, is_cluster
from rsc.protocol.routing import owner_key, seal_key

EPOCH_KEY = "rsc:coordinator:epoch"
LEASE_KEY = "rsc:coordinator:lease"
STORE_ID_KEY = "rsc:store-id"  # actors/redis_io/shard_ops.py writes it
RELEASED_KEY = "rsc:coordinator:released"  # who released the lease last (a clean stop, D5)
PREFIXES_KEY = "rsc:prefixes"
FORMAT_VERSION_KEY = "rsc:format-version"
_PLACEHOLDER_GROUP = "rsc:create"  # R1: makes an empty stream (XGROUP CREATE ... MKSTREAM), dropped

# the metadata hash's check-and-set (the epoch fences an older coordinator; the sequence, D4,
# refuses a write of ours that arrives after a later one), the lease, and the offset moves (G3);
# rsc/common/scripts/*.lua say their KEYS and ARGV
CAS_WRITE = Script("cas_write")
# B7: a stream's last-generated-id alone (XINFO STREAM's reply also holds the first and last
# entries, whose values may be any bytes: the store's client decodes replies as UTF-8)
LAST_GENERATED_ID = """
local info = redis.call('XINFO', 'STREAM', KEYS[1])
for i = 1, #info, 2 do
  if info[i] == 'last-generated-id' then return info[i + 1] end
end
return false
"""
RENEW_LEASE = Script("renew_lease")
DELETE_IF_HOLDER = Script("delete_if_holder")  # a dead local coordinator's lease, if still its
RELEASE_LEASE = Script("release_lease")
MOVE_OFFSETS = Script("move_offsets")
RAISE_FORMAT_VERSION = Script("raise_format_version")

log = logging.getLogger("rsc.coordinator")

SHORTFALL_REMINDER_S = 15.0  # K5: one line per this long while replicas are missing

STORE_IO_ERRORS = (redis.RedisError, OSError)
"""Every way a store call can fail on I/O (a Redis error, a timeout, EMFILE, a reset socket):
the store raises each as a StoreError, which the prefix actor hands to its machine as a
failed outcome (H12, D4)."""


class StoreError(Exception):
    """The metadata store could not be written (Redis down, timeout, out of file descriptors)."""


class StoreStale(StoreError):
    """A write arrived after a later write of this coordinator (D4): it changed nothing."""


class StoreFenced(StoreError):
    """A newer coordinator owns this Redis: this one must stop."""


class CoordinatorAlreadyRunning(StoreError):
    """Another live coordinator holds the lease on this Redis."""


class UnsupportedFormatVersion(StoreError):
    """The store is in a metadata format this coordinator cannot read (newer, or unreadable)."""


def meta_key(prefix: str) -> str:
    return f"rsc:meta:{{{prefix}}}"


class MetadataStore:
    """Reads and check-and-set writes of the per-prefix metadata hashes."""

    def __init__(self, redis_url: str, *, lease_ms: int, min_replicas: int = 0,
                 wait_timeout_ms: int = 1000, report: WriteReport | None = None) -> None:
        self.redis_url = redact_url(redis_url)  # as shown in lines and errors (K7)
        self.report = report  # told whether each metadata write worked (K10: readiness)
        try:  # one server, a cluster through any one of its nodes, or Sentinel's master
            self.client: Client = connect(redis_url, decode_responses=True,
                                       socket_timeout=5, socket_connect_timeout=5)
        except (redis.RedisError, ValueError) as exc:  # ValueError: a URL it cannot use
            raise StoreError(f"cannot use Redis at {self.redis_url}: "
                             f"{failure_text(exc, self.redis_url)}") from exc
        self.lease_ms = lease_ms
        self.instance_id = instance_id(socket.gethostname(), os.getpid(), uuid.uuid4().hex[:8])
        self.coordinator_epoch = 0
        self.format_version = LATEST_FORMAT_VERSION  # the store's, once load_all has read it
        # one server: the owner tokens join the hash's script; a cluster keeps them in the
        # shards' slots, so there they are a second step that the next checkpoint repairs
        self.atomic_owner_tokens = not is_cluster(self.client)
        self._sequence = itertools.count(1)  # D4: orders this coordinator's writes
        self.witness = Witness(self.instance_id, 0)  # K3: what the store must still hold
        # K5: every metadata write is WAITed for by this many replicas, within D4's budget
        if min_replicas < 0:
            raise ValueError(f"--min-replicas must be 0 or more, got {min_replicas}")
        if min_replicas and not self.atomic_owner_tokens:
            raise StoreError("--min-replicas is not supported on a Redis Cluster yet: "
                             "give 0, or point --redis-url at a server with replicas")
        self.min_replicas = min_replicas
        self.replica_shortfalls = 0  # K11: metadata WAITs that found fewer replicas than asked
        self.wait_timeout_ms = max(1, wait_timeout_ms)
        self._shortfall_said = -SHORTFALL_REMINDER_S

    # --- coordinator lease ---------------------------------------------------------

    def acquire(self, wait_ms: int) -> int:
        """Take the coordinator lease, waiting up to `wait_ms` for a dead holder's to lapse
        (blocking; the coordinator itself waits in trio with `try_acquire`, D5).

        Raises CoordinatorAlreadyRunning when a live coordinator keeps renewing it.
        """
        try:
            return self._acquire(wait_ms)
        except STORE_IO_ERRORS as exc:
            raise StoreError(f"cannot use Redis at {self.redis_url}: "
                             f"{failure_text(exc, self.redis_url)}") from exc

    def _acquire(self, wait_ms: int) -> int:
        deadline = time.monotonic() + wait_ms / 1000
        while True:
            epoch, holder = self._try_acquire()
            if epoch is not None:
                return epoch
            if time.monotonic() >= deadline:
                raise CoordinatorAlreadyRunning(
                    f"another coordinator ({holder}) is live on {self.redis_url}")
            time.sleep(0.05)

    def try_acquire(self) -> tuple[int | None, str | None]:
        """One attempt at the lease: (our new coordinator epoch, None), or (None, the holder)."""
        try:
            return self._try_acquire()
        except STORE_IO_ERRORS as exc:
            raise StoreError(f"cannot use Redis at {self.redis_url}: "
                             f"{failure_text(exc, self.redis_url)}") from exc

    def try_acquire_above(self, own: int) -> tuple[int | None, str | None]:
        """K3: `try_acquire` by a coordinator whose store went back: its new epoch is the larger
        of a fresh increment and `own` plus one (written back to the epoch key too), so that
        every write of the rolled-back store, and every late write of its own, is fenced."""
        try:
            return self._try_acquire(above=own)
        except STORE_IO_ERRORS as exc:
            raise StoreError(f"cannot use Redis at {self.redis_url}: "
                             f"{failure_text(exc, self.redis_url)}") from exc

    def _try_acquire(self, above: int | None = None) -> tuple[int | None, str | None]:
        # the key free, or still this process's own (an epoch of it that ended, K3)
        if self.client.set(LEASE_KEY, self.instance_id, nx=True, px=self.lease_ms) or \
                RENEW_LEASE.call(self.client, [LEASE_KEY], [self.instance_id, self.lease_ms]):
            epoch = int(self.client.incr(EPOCH_KEY))
            if above is not None and epoch <= above:
                epoch = went_back_epoch(epoch, above)
                self.client.set(EPOCH_KEY, epoch)  # nobody else INCRs: the lease is ours
            self.coordinator_epoch = epoch
            self.witness = Witness(self.instance_id, epoch)
            return self.coordinator_epoch, None
        holder = self.client.get(LEASE_KEY)
        holder = holder.decode() if isinstance(holder, bytes) else holder
        return None, None if holder is None else str(holder)

    def renew(self) -> Renewal:
        """Set the lease's TTL again if it is still ours; what the renewal found (D5: a lease
        found lapsed or taken is never silently taken back: the caller restarts)."""
        try:
            renewed = RENEW_LEASE.call(self.client, [LEASE_KEY], [self.instance_id, self.lease_ms])
            if renewed:
                return Renewal.RENEWED
            holder = self.client.get(LEASE_KEY)
        except STORE_IO_ERRORS as exc:
            raise StoreError(f"cannot renew the coordinator lease: {error_text(exc)}") from exc
        return Renewal.LAPSED if holder is None else Renewal.TAKEN

    def retake(self) -> bool:
        """D5: take the lease again after a plain lapse (`lapse_verdict` said TAKE_BACK), only
        if still nobody else ran (the key is gone or still ours, and the epoch counter still
        names this epoch)."""
        try:
            if int(self.client.get(EPOCH_KEY) or 0) != self.coordinator_epoch:
                return False
            if self.client.set(LEASE_KEY, self.instance_id, nx=True, px=self.lease_ms):
                return True
            return bool(RENEW_LEASE.call(self.client, [LEASE_KEY], [self.instance_id, self.lease_ms]))
        except STORE_IO_ERRORS as exc:
            raise StoreError(f"cannot take the coordinator lease again: {error_text(exc)}") from exc

    def release(self) -> None:
        """Give the lease up (a clean stop) and mark the release, so that a waiting coordinator
        takes over at once (D5)."""
        try:
            RELEASE_LEASE.call(self.client, [LEASE_KEY, RELEASED_KEY],
                               [self.instance_id, max(60_000, 10 * self.lease_ms)])
        except STORE_IO_ERRORS as exc:
            raise StoreError(f"cannot release the coordinator lease: {error_text(exc)}") from exc

    def look(self) -> tuple[str | None, str | None]:
        """Who holds the lease (None: nobody) and whom the release marker names, in one round
        trip: what a waiting coordinator decides on (D5, actors/core/lease.py `Takeover`)."""
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.get(LEASE_KEY)
            pipe.get(RELEASED_KEY)
            holder, released = pipe.execute()
        except STORE_IO_ERRORS as exc:
            raise StoreError(f"cannot use Redis at {self.redis_url}: "
                             f"{failure_text(exc, self.redis_url)}") from exc
        return (None if holder is None else str(holder)), (None if released is None else str(released))

    def lapse_facts(self) -> tuple[str | None, int | None]:
        """After a lapse (D5): who holds the lease now and the stored coordinator epoch."""
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.get(LEASE_KEY)
            pipe.get(EPOCH_KEY)
            holder, epoch = pipe.execute()
        except STORE_IO_ERRORS as exc:
            raise StoreError(f"cannot use Redis at {self.redis_url}: "
                             f"{failure_text(exc, self.redis_url)}") from exc
        return (None if holder is None else str(holder)), (None if epoch is None else int(epoch))

    def take_over_dead_local_holder(self) -> bool:
        """Drop the lease of a coordinator that died on this host (its pid is gone), so a restart
        after SIGKILL need not wait for the lease to lapse. Fencing still guards the takeover: the
        new epoch outranks every write the dead one could still have in flight."""
        holder = self.client.get(LEASE_KEY)
        if not holder:
            return False
        named = instance_host_pid(str(holder))
        if named is None or named[0] != socket.gethostname() or named[1] == os.getpid():
            return False
        try:
            os.kill(named[1], 0)
        except ProcessLookupError:
            pass  # dead
        except PermissionError:
            return False  # alive, another user's
        else:
            return False
        started = time.monotonic()
        taken = bool(DELETE_IF_HOLDER.call(self.client, [LEASE_KEY], [holder]))
        if taken:
            log_event(log, "coordinator.lease_taken_over", holder=str(holder),
                      ms=round((time.monotonic() - started) * 1000, 1))
        return taken

    def stalled(self, error: str) -> None:
        """A call on this store passed its D4 deadline and was abandoned: a failed write."""
        if self.report is not None:
            self.report.write_failed(error)

    # --- metadata ------------------------------------------------------------------

    def load_all(self) -> dict[str, PrefixSnapshot]:
        """Every prefix's metadata, replayed from its hash, once its format version is known
        to be one this code reads (UnsupportedFormatVersion otherwise, before anything is read)."""
        try:
            prefixes = cast("set[str]", self.client.smembers(PREFIXES_KEY))  # decoded
            self.format_version = self._check_format_version(fresh=not prefixes)
            result: dict[str, PrefixSnapshot] = {}
            for prefix in sorted(prefixes):
                fields = cast("dict[str, str]", self.client.hgetall(meta_key(prefix)))
                result[prefix] = replay(fields)
        except STORE_IO_ERRORS as exc:
            raise StoreError(f"cannot load the metadata: {error_text(exc)}") from exc
        return result

    def _check_format_version(self, *, fresh: bool) -> int:
        """The store's format version, refused when newer than this code reads. A store
        without one gets it written: the latest format for an empty store, else format 1
        (what wrote it); SET NX, so a concurrent raise is never overwritten."""
        stored = self.client.get(FORMAT_VERSION_KEY)
        if stored is None:
            initial = LATEST_FORMAT_VERSION if fresh else stored_format_version(None)
            self.client.set(FORMAT_VERSION_KEY, initial, nx=True)
            stored = self.client.get(FORMAT_VERSION_KEY)
        try:
            version = stored_format_version(cast("str | None", stored))  # decoded
        except ValueError as exc:
            raise UnsupportedFormatVersion(f"{FORMAT_VERSION_KEY} {exc}") from None
        refusal = load_refusal(version, LATEST_FORMAT_VERSION)
        if refusal is not None:
            raise UnsupportedFormatVersion(f"{refusal} ({FORMAT_VERSION_KEY} is {version})")
        return version

    def raise_format_version(self, version: int) -> int:
        """Raise the store's format version to `version` (never lower: StoreError); the format
        it was in. The caller checked that this code writes `version` (records.format_change)."""
        try:
            previous = reply_int(RAISE_FORMAT_VERSION.call(self.client, [FORMAT_VERSION_KEY], [version]))
        except redis.ResponseError as exc:
            raise StoreError(str(exc).removeprefix("LOWER ")) from exc
        except STORE_IO_ERRORS as exc:
            raise StoreError(f"cannot write the format version: {exc}") from exc
        self.format_version = version
        return previous

    def load_prefix(self, prefix: str) -> PrefixSnapshot | None:
        """One prefix's metadata (None if it has none), to reload a failed actor."""
        try:
            fields = cast("dict[str, str]", self.client.hgetall(meta_key(prefix)))
        except STORE_IO_ERRORS as exc:
            raise StoreError(f"cannot load the metadata of {prefix!r}: {error_text(exc)}") from exc
        return replay(fields) if fields else None

    def write(self, prefix: str, changes: Changes, owners: Iterable[OwnerToken] = ()) -> None:
        """`_write`, its success or failure told to `report` (a fenced write is no outage:
        this coordinator is stopping)."""
        try:
            self._write(prefix, changes, owners)
        except StoreFenced:
            raise
        except Exception as exc:
            if self.report is not None:
                self.report.write_failed(str(exc))
            raise
        if self.report is not None:
            self.report.write_succeeded()

    def _write(self, prefix: str, changes: Changes, owners: Iterable[OwnerToken]) -> None:
        """Check-and-set the hash fields of `changes` and (only if that held) the owner tokens.

        On one Redis server both are one script call: one atomic step. With
        `atomic_owner_tokens` off (a cluster: the tokens live in the shards'
        slots) the tokens are a second step; when it fails Redis holds the new
        hash without them, and the prefix machine repairs it with its next
        checkpoint (it writes every field and token of a failed write again).
        Each write carries a sequence number the script checks (D4): a write
        that Redis runs after a later one of this coordinator is refused
        (StoreStale) and changes nothing.
        """
        tokens = list(owners)
        sequence = next(self._sequence)
        fields = encode(changes, self.format_version)
        atomic = self.atomic_owner_tokens
        keys = [meta_key(prefix)]
        args: list[Word] = [self.coordinator_epoch, COORDINATOR_EPOCH_FIELD, WRITE_SEQUENCE_FIELD,
                           sequence, len(fields)]
        for field, value in fields.items():
            args += [field, "" if value is None else value]
        if atomic:
            for token in tokens:
                keys.append(owner_key(token.shard, token.group))
                args.append(token.member_id or "")
        try:
            self._write_hash(prefix, keys, args)
            self.witness.write_confirmed(prefix, sequence)  # K3: the store must keep it
        except redis.ResponseError as exc:
            text = str(exc)  # in a pipeline redis-py puts "Command # 2 (...) caused error:" first
            if "FENCED coordinator epoch" in text:
                raise StoreFenced(text) from exc
            if "STALE write" in text:
                raise StoreStale(text) from exc
            raise StoreError(error_text(exc)) from exc
        except STORE_IO_ERRORS as exc:
            raise StoreError(f"metadata write failed: {error_text(exc)}") from exc
        if tokens and not atomic:
            try:
                self._write_owner_tokens(tokens)
            except STORE_IO_ERRORS as exc:
                raise StoreError(f"owner token write failed: {error_text(exc)}") from exc

    def _write_hash(self, prefix: str, keys: list[str], args: list[Word]) -> None:
        """The prefix joins the set of prefixes and its hash is written, in one pipeline (on a
        cluster the two go to their own slots' nodes)."""
        execute = pipelined(self.client)
        joined: list[Reply] = []
        waited: list[Reply] = []
        wait: list[Command] = ([(PREFIXES_KEY, ("WAIT", self.min_replicas, self.wait_timeout_ms))]
                               if self.min_replicas else [])

        def with_prefix(commands: Sequence[Command]) -> list[Reply]:
            # K5: WAIT on the connection that wrote, in the same pipeline (one server only)
            replies = execute([(PREFIXES_KEY, ("SADD", PREFIXES_KEY, prefix)), *commands, *wait])
            joined.append(replies[0])
            if wait:
                waited.append(replies[-1])
                return replies[1:-1]
            return replies[1:]

        [written] = CAS_WRITE.run([(keys, args)], with_prefix, self.client.script_load)
        for reply in (*joined, written):
            if isinstance(reply, Exception):
                raise reply
        if wait:
            self._check_replicas(waited[-1])

    def _check_replicas(self, reply: Reply) -> None:
        """K5: fewer replicas than `min_replicas` acknowledged the write within the WAIT's time:
        the write counts as failed (D4: it may have landed; the next checkpoint repairs it)."""
        if isinstance(reply, Exception):
            raise reply
        acknowledged = reply_int(reply)
        if acknowledged >= self.min_replicas:
            return
        self.replica_shortfalls += 1  # K11: rsc_replica_wait_shortfall_total
        problem = (f"only {acknowledged} of the {self.min_replicas} replicas asked for "
                   f"(--min-replicas) acknowledged a metadata write within {self.wait_timeout_ms} ms")
        now = time.monotonic()
        if now - self._shortfall_said >= SHORTFALL_REMINDER_S:
            self._shortfall_said = now
            log_event(log, "store.replicas_short", level=logging.WARNING,
                      acknowledged=acknowledged, wanted=self.min_replicas, redis=self.redis_url)
        raise StoreError(problem)

    def _write_owner_tokens(self, tokens: list[OwnerToken]) -> None:
        """The second step where the tokens cannot join the hash's script (a cluster)."""
        pipe = self.client.pipeline(transaction=False)
        for token in tokens:
            if token.member_id is None:
                pipe.delete(owner_key(token.shard, token.group))
            else:
                pipe.set(owner_key(token.shard, token.group), token.member_id)
        pipe.execute()

    # --- K3, K4: a store that went back ------------------------------------------------

    def mark_keys(self) -> list[str]:
        """The marker keys: one on a server; on a Redis Cluster one in the slots of each master
        (a failover of any master's node to a replica that was behind shows there)."""
        if self.atomic_owner_tokens:
            return [MARK_KEY]
        cluster = self.client
        assert isinstance(cluster, redis.RedisCluster)  # not atomic: a cluster (is_cluster)
        masters = {node.name for node in cluster.get_primaries()}
        slots = cluster.nodes_manager.slots_cache
        found: dict[str, str] = {}
        for tag in range(1 << 16):
            key = mark_key(str(tag))
            nodes = slots.get(cluster.keyslot(key))
            if nodes and nodes[0].name in masters:
                found.setdefault(nodes[0].name, key)
                if len(found) == len(masters):
                    break
        return sorted(found.values())

    def check_went_back(self, store_id: str | None) -> str | None:
        """K3, once a tick while the lease is ours: read back what the store must hold, and
        write the markers again. Why the store lost writes of this coordinator (None: it did
        not). One pipelined round trip (per node on a cluster)."""
        witness = self.witness
        expected = witness.expected()  # before the reads: anything in it landed before them
        prefixes = sorted(expected.sequences)
        keys = self.mark_keys()
        count = witness.next_count()
        value = mark_value(self.instance_id, witness.epoch, count)
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.get(EPOCH_KEY)
            pipe.get(STORE_ID_KEY)
            for key in keys:
                pipe.get(key)
                pipe.set(key, value)
            for prefix in prefixes:  # HGET twice: the coordinator's ACL (K6) has no HMGET
                pipe.hget(meta_key(prefix), COORDINATOR_EPOCH_FIELD)
                pipe.hget(meta_key(prefix), WRITE_SEQUENCE_FIELD)
            replies = pipe.execute()
        except STORE_IO_ERRORS as exc:
            raise StoreError(f"cannot check the store: {error_text(exc)}") from exc
        epoch, stored_id = replies[0], replies[1]
        marks = {key: replies[2 + 2 * index] for index, key in enumerate(keys)}
        hashes_at = 2 + 2 * len(keys)
        hashes = {prefix: (replies[hashes_at + 2 * index], replies[hashes_at + 2 * index + 1])
                  for index, prefix in enumerate(prefixes)}
        observed = Observed(epoch=None if epoch is None else int(epoch), store_id=stored_id,
                            marks=marks, hashes=hashes)
        reason = went_back(expected, observed, instance_id=self.instance_id, epoch=witness.epoch,
                           store_id=store_id)
        if reason is None:
            witness.marks_written(keys, count)
            witness.settled(expected)
        return reason

    def rewrite(self, memory: dict[str, PrefixSnapshot], *,
                retire_old: bool = True) -> dict[str, int]:
        """K3, K4: write back everything memory holds, under this (new) coordinator epoch:
        the format version, then per prefix its streams and Redis consumer groups, seal
        markers, and its whole hash with every owner record (actors/core/store_rewrite.py). What
        it wrote, counted (for the `store.went_back` line)."""
        done = {"prefixes": 0, "groups": 0, "members": 0, "owner_records": 0,
                "streams_recreated": 0, "consumer_groups_created": 0, "sealed": 0,
                "retired_again": 0}
        admin = StreamAdmin(self.client)
        try:
            self.client.set(FORMAT_VERSION_KEY, self.format_version)
            for prefix, snapshot in sorted(memory.items()):
                stored = cast("dict[str, str]", self.client.hgetall(meta_key(prefix)))
                plan = prefix_rewrite(snapshot, stored)
                if plan.streams:
                    pipe = self.client.pipeline(transaction=False)
                    for stream in plan.streams:
                        pipe.exists(stream)
                    done["streams_recreated"] += sum(1 for found in pipe.execute() if not found)
                    done["consumer_groups_created"] += self.create_consumer_groups(
                        plan.streams, plan.groups)
                if plan.dropped_groups:
                    admin.destroy_consumer_groups(plan.streams, plan.dropped_groups)
                if plan.unsealed:
                    admin.unseal(plan.unsealed)
                if plan.sealed:
                    admin.seal(plan.sealed)
                self.write(prefix, plan.changes, plan.owners)
                if plan.retired and retire_old:  # R2: what the restored snapshot brought back
                    admin.retire(plan.retired, (*plan.groups, *plan.dropped_groups))
                    done["retired_again"] += len(plan.retired)
                done["prefixes"] += 1
                done["groups"] += len(plan.groups)
                done["members"] += plan.members
                done["owner_records"] += sum(1 for token in plan.owners if token.member_id)
                done["sealed"] += len(plan.sealed)
        except STORE_IO_ERRORS as exc:
            raise StoreError(f"cannot write the metadata back: {error_text(exc)}") from exc
        return done

    # --- streams -------------------------------------------------------------------

    def create_consumer_groups(self, streams: Iterable[str], groups: Iterable[str]) -> int:
        """Each stream exists and has every group, created at id 0 (BUSYGROUP is fine); how many
        consumer groups were created (not there before).

        R1: the streams exist even when there is no group yet (a prefix given shards
        before any member joined), so producers can write to them at once: an empty
        stream is made with a placeholder group that is dropped in the same pipeline.
        """
        streams, groups = list(streams), list(groups)
        if not streams:
            return 0
        created = 0
        try:
            pipe = self.client.pipeline(transaction=False)
            for stream in streams:
                if not groups:
                    pipe.xgroup_create(stream, _PLACEHOLDER_GROUP, id="0", mkstream=True)
                    pipe.xgroup_destroy(stream, _PLACEHOLDER_GROUP)
                for group in groups:
                    pipe.xgroup_create(stream, group, id="0", mkstream=True)
            for result in pipe.execute(raise_on_error=False):
                if isinstance(result, Exception) and "BUSYGROUP" not in str(result):
                    raise StoreError(f"cannot create consumer group: {error_text(result)}")
                created += result is True
        except STORE_IO_ERRORS as exc:
            raise StoreError(f"cannot create streams: {error_text(exc)}") from exc
        return created if groups else 0

    def close(self) -> None:
        self.client.close()


class StreamAdmin:
    """Stream-side work of resharding and lifecycle: seal, destroy, move, retire. Blocking.

    Drain is measured by actors/redis_io/shard_ops.py (`drain_counts`), which knows retention.
    """

    def __init__(self, client: Client) -> None:
        self.client = client

    def seal(self, streams: Iterable[str]) -> None:
        """No write lands in these streams any more (the producer script checks the marker)."""
        try:
            pipe = self.client.pipeline(transaction=False)
            for stream in streams:
                pipe.set(seal_key(stream), "1")
            pipe.execute()
        except STORE_IO_ERRORS as exc:
            raise StoreError(f"cannot seal streams: {error_text(exc)}") from exc

    def unseal(self, streams: Iterable[str]) -> None:
        """Writes land again (a reshard whose metadata write failed sealed them)."""
        try:
            self.client.delete(*(seal_key(stream) for stream in streams))
        except STORE_IO_ERRORS as exc:
            raise StoreError(f"cannot unseal streams: {error_text(exc)}") from exc

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
                    raise StoreError(f"cannot delete consumer group: {error_text(result)}")
        except STORE_IO_ERRORS as exc:
            raise StoreError(f"cannot delete consumer groups: {error_text(exc)}") from exc

    def move_offsets(self, streams: Iterable[str], group: str, to: str,
                     timestamp_ms: int | None, *, dry_run: bool = False) -> dict[str, str]:
        """G3: the group's new last-delivered id on each stream, its pending entries dropped.

        `timestamp` makes the first entry at or after `timestamp_ms` the next one
        delivered, or acts like `latest` when there is none. One pipelined round trip.
        C1 `dry_run`: the ids it would set, nothing moved.
        """
        streams = list(streams)
        args: list[str | int] = [group, to, timestamp_ms or 0, "dry" if dry_run else "move"]
        try:
            results = MOVE_OFFSETS.run_on(self.client, [([stream], args) for stream in streams])
        except STORE_IO_ERRORS as exc:
            raise StoreError(f"cannot move the offsets of {group!r}: {error_text(exc)}") from exc
        for result in results:
            if isinstance(result, Exception):
                raise StoreError(f"cannot move the offsets of {group!r}: {error_text(result)}")
        return {stream: str(result) for stream, result in zip(streams, results, strict=True)}

    def stream_facts(self, streams: Iterable[str]) -> dict[str, StreamFacts]:
        """B7: whether each stream exists, its last id and whether its seal marker exists (two
        pipelined round trips)."""
        streams = list(streams)
        try:
            pipe = self.client.pipeline(transaction=False)
            for stream in streams:
                pipe.exists(stream)
                pipe.exists(seal_key(stream))
            found = pipe.execute()
            existing = [stream for index, stream in enumerate(streams) if found[2 * index]]
            pipe = self.client.pipeline(transaction=False)
            for stream in existing:  # not XINFO STREAM itself: its first and last entries come
                pipe.eval(LAST_GENERATED_ID, 1, stream)  # with it, and bytes need not be UTF-8 (M1)
            infos = dict(zip(existing, pipe.execute(raise_on_error=False), strict=True))
        except STORE_IO_ERRORS as exc:
            raise StoreError(f"cannot check shards: {error_text(exc)}") from exc
        facts: dict[str, StreamFacts] = {}
        for index, stream in enumerate(streams):
            info = infos.get(stream)
            last = info.decode() if isinstance(info, bytes) else info
            facts[stream] = StreamFacts(exists=bool(found[2 * index]),
                                        last_id=last if isinstance(last, str) else None,
                                        sealed=bool(found[2 * index + 1]))
        return facts

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
        except STORE_IO_ERRORS as exc:
            raise StoreError(f"cannot delete drained streams: {error_text(exc)}") from exc

