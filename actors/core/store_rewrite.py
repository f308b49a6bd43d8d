"""A store that went back (K3) or lost everything (K4): noticing it, and what to write back.

Pure: no trio, no Redis. docs/protocol.md, The store in production, K3 and K4.

Noticing. Replication is asynchronous and persistence may be off, so a failover or a
restart can take back writes Redis had confirmed. The coordinator keeps a `Witness` of
what the store must still hold: the last value it wrote to each marker key (one per
Redis server, or per Redis Cluster master: `rsc:store-mark` or `rsc:store-mark:{tag}`,
written again every tick with a growing count), and the write sequence of each
prefix's last confirmed metadata write. Every tick, after renewing its lease, it reads
them back with the epoch key and the store id (`observed`); `went_back` says why the
store lost writes (None: it did not). Replication and RDB snapshots keep the order of
writes, so a lost write of any kind also loses the marker written after it, or the
prefix's later sequence: a prefix's sequence is read back once, at the first tick after
its write, and from then on the marker written at that tick covers it.

Writing back. `prefix_rewrite` turns what the coordinator holds of a prefix (its
rollback point: everything confirmed, so everything any answer revealed, H12) and what
the store holds now into one full write: every field of memory set, every field memory
no longer has deleted, an owner record for every shard and group (the holder, or none),
the seal markers of the old versions, every stream of every version with every group's
Redis consumer group (created at `0`: a recreated stream is empty), and the consumer
groups of groups memory no longer has dropped.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from rsc.actors.core.records import (
    COORDINATOR_EPOCH_FIELD,
    GROUP_FIELD,
    MEMBER_FIELD,
    WRITE_SEQUENCE_FIELD,
    Changes,
    OwnerToken,
    PrefixSnapshot,
    changes_of,
    parse_member_field,
    replay,
)

MARK_KEY = "rsc:store-mark"
"""The marker of one Redis server; on a Redis Cluster one `rsc:store-mark:{tag}` per master."""


def mark_key(tag: str | None) -> str:
    """The marker key of a server (tag None) or of the cluster master that owns `{tag}`."""
    return MARK_KEY if tag is None else f"{MARK_KEY}:{{{tag}}}"


def mark_value(instance_id: str, epoch: int, count: int) -> str:
    return f"{instance_id}/{epoch}/{count}"


def parse_mark(value: str | None) -> tuple[str, int, int] | None:
    """(instance id, coordinator epoch, count) of a marker value; None if absent or unreadable."""
    if value is None:
        return None
    instance, _, rest = value.rpartition("/")
    rest_instance, _, epoch = instance.rpartition("/")
    if not rest_instance or not epoch.isdigit() or not rest.isdigit():
        return None
    return rest_instance, int(epoch), int(rest)


@attrs.frozen
class Expected:
    """What the store must hold, taken before the reads that check it."""

    marks: Mapping[str, int]  # marker key -> the count last confirmed written there
    sequences: Mapping[str, int]  # prefix -> the write sequence of its last confirmed write


@attrs.frozen
class Observed:
    """What the store held when read back (one round trip per tick)."""

    epoch: int | None  # rsc:coordinator:epoch
    store_id: str | None  # rsc:store-id
    marks: Mapping[str, str | None]  # marker key -> its value
    hashes: Mapping[str, tuple[str | None, str | None]]  # prefix -> (coordinatorEpoch, writeSequence)


class Witness:
    """What this coordinator (one epoch of it) wrote that the store must still hold.

    The store calls `write_confirmed` after each metadata write Redis confirmed and
    `marks_written` after the markers of a tick landed; the check takes `expected()`
    before it reads. Worker threads call it: every method replaces whole values.
    """

    def __init__(self, instance_id: str, epoch: int) -> None:
        self.instance_id = instance_id
        self.epoch = epoch
        self.count = 0
        self._marks: dict[str, int] = {}
        self._sequences: dict[str, int] = {}

    def next_count(self) -> int:
        self.count += 1
        return self.count

    def marks_written(self, keys: list[str], count: int) -> None:
        marks = dict(self._marks)
        for key in keys:
            marks[key] = max(marks.get(key, 0), count)
        self._marks = marks

    def write_confirmed(self, prefix: str, sequence: int) -> None:
        sequences = dict(self._sequences)
        sequences[prefix] = max(sequences.get(prefix, 0), sequence)
        self._sequences = sequences

    def expected(self) -> Expected:
        return Expected(marks=self._marks, sequences=self._sequences)

    def settled(self, checked: Expected) -> None:
        """The check that took `checked` found everything and wrote the markers again: each
        write it checked was confirmed before those markers landed, so from now on the
        markers cover it (Redis keeps the order of writes) and only later writes are read
        back one by one. A tick reads the prefixes written since the last one, not all."""
        sequences = dict(self._sequences)
        for prefix, sequence in checked.sequences.items():
            if sequences.get(prefix) == sequence:
                del sequences[prefix]
        self._sequences = sequences


def went_back(expected: Expected, observed: Observed, *, instance_id: str, epoch: int,
              store_id: str | None) -> str | None:
    """K3: why the store lost writes this coordinator made (None: it holds them all).

    A newer coordinator epoch anywhere is not the store going back: that coordinator
    fences this one (its writes fail, D5), which is a different path.
    """
    if observed.epoch is None:
        return "rsc:coordinator:epoch is missing"
    if observed.epoch < epoch:
        return f"rsc:coordinator:epoch is {observed.epoch}, below this coordinator's {epoch}"
    if store_id is not None and observed.store_id is None:
        return "rsc:store-id is missing"
    for key, count in sorted(expected.marks.items()):
        value = observed.marks.get(key)
        mark = parse_mark(value)
        if mark is None:
            return f"the marker {key} is missing" if value is None else \
                f"the marker {key} holds {value!r}, not a marker this coordinator wrote"
        holder, mark_epoch, mark_count = mark
        if mark_epoch > epoch:
            continue  # a newer coordinator wrote it: fenced, not gone back
        if holder != instance_id or mark_epoch < epoch or mark_count < count:
            return (f"the marker {key} is older than this coordinator's last one "
                    f"({value}, expected count {count} of epoch {epoch})")
    for prefix, sequence in sorted(expected.sequences.items()):
        stored_epoch, stored_sequence = observed.hashes.get(prefix, (None, None))
        if stored_epoch is None:
            return f"the metadata of prefix {prefix!r} is missing"
        if not stored_epoch.isdigit() or int(stored_epoch) < epoch:
            return (f"the metadata of prefix {prefix!r} carries coordinator epoch {stored_epoch}, "
                    f"below this coordinator's {epoch}")
        if int(stored_epoch) > epoch:
            continue
        if stored_sequence is None or not stored_sequence.isdigit() or int(stored_sequence) < sequence:
            return (f"the metadata of prefix {prefix!r} carries write sequence {stored_sequence}, "
                    f"below the {sequence} Redis confirmed")
    return None


def went_back_epoch(incremented: int, own: int) -> int:
    """K3: the coordinator epoch to write back under: the larger of a fresh increment of
    the (possibly rolled back) epoch key and this coordinator's own plus one."""
    return max(incremented, own + 1)


# --- what to write back ------------------------------------------------------------


@attrs.frozen
class PrefixRewrite:
    """One prefix written back from memory (module docstring)."""

    changes: Changes
    owners: tuple[OwnerToken, ...]
    streams: tuple[str, ...]  # every stream of every version not retired yet
    groups: tuple[str, ...]  # every group: a Redis consumer group on each stream
    sealed: tuple[str, ...]  # old versions' streams: producers are refused there (R1)
    unsealed: tuple[str, ...]  # the current version's streams
    dropped_groups: tuple[str, ...]  # groups the store had that memory no longer has
    # streams of versions memory retired that the store's (older) state still names: a
    # restored snapshot brought them back; retired again with the write-back (R2)
    retired: tuple[str, ...] = ()

    @property
    def members(self) -> int:
        return sum(1 for member in self.changes.members.values() if member is not None)


def prefix_rewrite(snapshot: PrefixSnapshot, stored: Mapping[str, str]) -> PrefixRewrite:
    """Everything to write so that the store holds `snapshot` and nothing else of the prefix,
    whatever `stored` (its hash now: empty, or an older state) holds."""
    changes = changes_of(snapshot)
    changes.retention = snapshot.retention  # written even when the default: an older one may be there
    dropped: set[str] = set()
    for field in stored:
        if field.startswith(GROUP_FIELD):
            name = field[len(GROUP_FIELD):]
            if name not in snapshot.groups:
                changes.groups[name] = None
                dropped.add(name)
        elif field.startswith(MEMBER_FIELD):
            name, member_id = parse_member_field(field)
            group = snapshot.groups.get(name)
            if group is None or member_id not in group.members:
                changes.members[(name, member_id)] = None
        elif field in (COORDINATOR_EPOCH_FIELD, WRITE_SEQUENCE_FIELD):
            continue  # the script writes them
    routing, migration = snapshot.routing, snapshot.migration
    current = routing.streams if routing is not None else ()
    old = (migration.retiring + migration.from_streams) if migration is not None else ()
    streams = tuple(dict.fromkeys(old + current))
    owners: list[OwnerToken] = []
    for name, group in sorted(snapshot.groups.items()):
        holders = {shard: member_id for member_id, member in group.members.items()
                   for shard in member.assigned | member.revoking}
        owners.extend(OwnerToken(shard, name, holders.get(shard)) for shard in streams)
    for name in sorted(dropped):
        owners.extend(OwnerToken(shard, name, None) for shard in streams)
    return PrefixRewrite(changes=changes, owners=tuple(owners), streams=streams,
                         groups=tuple(sorted(snapshot.groups)), sealed=tuple(old),
                         unsealed=tuple(current), dropped_groups=tuple(sorted(dropped)),
                         retired=_named_by(stored, keep=streams))


def _named_by(stored: Mapping[str, str], *, keep: tuple[str, ...]) -> tuple[str, ...]:
    """The streams the stored (older) state of a prefix names that are not in `keep`."""
    if not stored:
        return ()
    try:
        old_state = replay(stored)
    except Exception:  # noqa: BLE001 - an unreadable old state names nothing to retire
        return ()
    named: tuple[str, ...] = old_state.routing.streams if old_state.routing is not None else ()
    if old_state.migration is not None:
        named += old_state.migration.retiring + old_state.migration.from_streams
    kept = set(keep)
    return tuple(stream for stream in dict.fromkeys(named) if stream not in kept)
