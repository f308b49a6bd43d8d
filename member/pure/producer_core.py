"""The producer's routing decisions, pure (no trio, no Redis): routing in, decisions out.

`ProducerCore` holds the routing a producer writes with and what it learned
from the coordinator; `adopt` takes each routing message (an answer or a
push) and says what changed. A `Delivery` is one `send_batch`: it routes the
records still to be written, reads each write's result and says what the
shell does next:

- D2: a record is done only once Redis has it; a failed round trip, or a
  record the server answered with an error, is written again after a backoff
  (it may have landed: the at-least-once duplicate counted in `retried`);
- R5: a record refused by a sealed or retired shard (the produce script's
  `SEALED` / `MISSING`) is written again to its shard of a newer routing: at
  once if one is known already, else after asking the coordinator; a
  coordinator that still routes to the refusing shard is said, and the write
  retried after a backoff;
- a routing never goes back: an answer older than the routing held (a late
  response, a push overtaken by a refresh) is ignored.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Mapping, Sequence

import attrs

from rsc.member.pure.entry import DEFAULT_MAX_MESSAGE_BYTES, Outgoing, entry_fields, outgoing
from rsc.member.pure.store_identity import StoreChanged, store_changed_line
from rsc.protocol import HASH_NAME, KnownRouting, Routing, Status, shard_for_key

Record = tuple[str | bytes | None, str | bytes] | tuple[str | bytes | None, str | bytes,
                                                        Mapping[str, str | bytes] | None]
"""What an application sends: (key, value) or (key, value, headers); a key None is keyless."""


@attrs.frozen
class RoutingTable:
    """One routing version of a prefix: `streams[i]` is shard i."""

    version: int
    streams: tuple[str, ...]

    def stream_for(self, key: str | bytes | None, spread: int = 0) -> str:
        """The shard stream a partition key goes to; a keyless message (None) to shard
        `spread` mod the count (the producer's round robin, M3)."""
        if key is None:
            return self.streams[spread % len(self.streams)]
        return self.streams[shard_for_key(key, len(self.streams))]


def routing_table(message: Routing) -> RoutingTable | None:
    """The table of an OK routing message, None for UNKNOWN_STREAM; refuses unknown hashes."""
    if message.status != Status.OK or not message.streams or message.version is None:
        return None
    if message.hash not in (None, HASH_NAME):
        raise ValueError(f"routing uses hash {message.hash!r}; this producer knows {HASH_NAME!r}")
    return RoutingTable(version=message.version, streams=tuple(message.streams))


class Refused(enum.Enum):
    """Why the produce script refused a write: the producer re-routes after either (R5)."""

    SEALED = "SEALED"  # the shard's version is sealed (resharding)
    MISSING = "MISSING"  # no such stream: a retired version, or another Redis


# per record: the entry id, a refusal, or the error the server answered for it
WriteResult = str | Refused | Exception


class Adoption(enum.Enum):
    """What a routing message changed."""

    ADOPTED = "adopted"  # as new as the routing held, or newer: written with from now on
    ARRIVED = "arrived"  # adopted, the first after the prefix had none: say that is over
    STALE = "stale"  # older than the routing held: ignored
    NO_ROUTING = "no routing"  # the prefix has no shards yet and no routing is held: say so
    IGNORED = "ignored"  # no routing in it (an error, or no shards while one is held)


class Next(enum.Enum):
    """What the producer shell does after a write of a delivery."""

    DONE = "done"  # Redis has every record
    REDIS_BACKOFF = "redis backoff"  # Redis failed (the round, or some records): pause, write again
    REFRESH = "refresh"  # a shard refused: ask for the current routing, then call `refreshed`
    REROUTE = "reroute"  # a newer routing is known: write the refused records again now
    REFUSED_BACKOFF = "refused backoff"  # still routed to a refusing shard: say so, pause, again


class ProducerCore:
    """The routing and counts of one producer of one stream prefix."""

    def __init__(self) -> None:
        self.routing: RoutingTable | None = None
        self.store_id: str | None = None  # the storeId the coordinator's routing last named
        self.sent = 0  # records in Redis
        self.retried = 0  # record writes sent again after a Redis error (may have landed)
        self.rerouted = 0  # record writes refused by a sealed or retired shard
        self._no_routing = False  # said that the prefix has no routing; not yet over
        self._spread = itertools.count()  # M3: keyless messages go round the shards

    def adopt(self, message: Routing) -> Adoption:
        """Take a routing message (an answer to getRouting, or a push); raises ValueError for
        a routing hash this producer does not know."""
        if message.store_id is not None:
            if self.store_id is not None and message.store_id != self.store_id:
                raise StoreChanged(store_changed_line("the coordinator", self.store_id,
                                                      message.store_id))  # K9
            self.store_id = message.store_id
        table = routing_table(message)
        if table is None:
            if message.status == Status.UNKNOWN_STREAM and self.routing is None:
                self._no_routing = True
                return Adoption.NO_ROUTING
            return Adoption.IGNORED
        if self.routing is not None and table.version < self.routing.version:
            return Adoption.STALE
        self.routing = table
        if self._no_routing:
            self._no_routing = False
            return Adoption.ARRIVED
        return Adoption.ADOPTED

    def known(self) -> tuple[str | None, KnownRouting | None]:
        """K8: the storeId and routing this producer holds, for its getRouting."""
        routing = self.routing
        known = None if routing is None else KnownRouting(
            version=routing.version, shard_count=len(routing.streams), hash=HASH_NAME)
        return self.store_id, known

    def delivery(self, records: Sequence[Record],
                 limit: int = DEFAULT_MAX_MESSAGE_BYTES) -> Delivery:
        """One batch to deliver. Before anything is written, TypeError names the first record
        that is not (key, value[, headers]) of str or bytes (a key None is keyless, M3), and
        MessageTooLarge the first over `limit` bytes as stored (M4)."""
        return Delivery(self, [_checked(index, record, limit)
                               for index, record in enumerate(records)])

    def spread(self) -> int:
        """The next turn of the keyless round robin (M3)."""
        return next(self._spread)


def _checked(index: int, record: Record, limit: int) -> Outgoing:
    where = f"record {index}: "
    if not isinstance(record, tuple | list) or len(record) not in (2, 3):
        raise TypeError(f"{where}expected (key, value) or (key, value, headers), got {record!r}")
    key, value, *rest = record
    headers = rest[0] if rest else None
    if headers is not None and not isinstance(headers, Mapping):
        raise TypeError(f"{where}headers: expected a mapping of names to str or bytes, "
                        f"got {type(headers).__name__}")
    return outgoing(key, value, headers, limit=limit, where=where)


class Delivery:
    """One `send_batch`: which records still need a write, and where each one landed."""

    def __init__(self, core: ProducerCore, records: Sequence[Outgoing]) -> None:
        self._core = core
        self._records = records
        self._fields = [entry_fields(record) for record in records]
        # a keyless record keeps its turn of the round robin when it is written again
        self._spread = [core.spread() if record.key is None else 0 for record in records]
        self._placed: list[tuple[str, str] | None] = [None] * len(records)
        self._todo = list(range(len(records)))
        self._writes: list[tuple[str, list[bytes]]] = []
        self.routing: RoutingTable | None = None  # the routing of the last write
        self.failure: Exception | None = None  # a server error of the last write, to be said
        self.refusal: tuple[str, Refused] | None = None  # the first refusal of the last write

    @property
    def done(self) -> bool:
        """Redis has every record."""
        return not self._todo

    @property
    def size(self) -> int:
        """How many records the batch has."""
        return len(self._records)

    def confirmed(self) -> dict[int, str]:
        """L3: the index of each record Redis has so far, and its entry id."""
        return {index: placed[1] for index, placed in enumerate(self._placed) if placed is not None}

    def writes(self, routing: RoutingTable) -> list[tuple[str, list[bytes]]]:
        """The (shard, entry fields) writes of every record not yet in Redis, routed by
        `routing` (docs/protocol.md M5)."""
        self.routing = routing
        records, fields, spread = self._records, self._fields, self._spread
        self._writes = [(routing.stream_for(records[i].key, spread[i]), fields[i])
                        for i in self._todo]
        return self._writes

    def write_failed(self) -> Next:
        """D2: the whole write failed (connection, timeout): every record goes again."""
        self._core.retried += len(self._todo)
        self.failure = self.refusal = None
        return Next.REDIS_BACKOFF

    def on_results(self, results: Sequence[WriteResult]) -> Next:
        """The result of each write, in the order of `writes`."""
        core = self._core
        again: list[int] = []
        refusals: list[tuple[str, Refused]] = []
        failure: Exception | None = None
        for index, (stream, _), result in zip(self._todo, self._writes, results, strict=True):
            if isinstance(result, str):
                self._placed[index] = (stream, result)
                continue
            again.append(index)
            if isinstance(result, Refused):
                refusals.append((stream, result))
            else:
                failure = result
        core.sent += len(self._todo) - len(again)
        if failure is not None:
            core.retried += len(again) - len(refusals)
        self._todo = again
        self.failure = failure
        self.refusal = refusals[0] if refusals else None
        if refusals:
            core.rerouted += len(refusals)
            return Next.REROUTE if self._moved_past() else Next.REFRESH
        if failure is not None:
            return Next.REDIS_BACKOFF
        return Next.DONE

    def refreshed(self) -> Next:
        """R5: after asking for the current routing: re-route if it is newer than the one the
        refused records were written with; else the coordinator still routes there."""
        return Next.REROUTE if self._moved_past() else Next.REFUSED_BACKOFF

    def located(self) -> list[tuple[str, str]]:
        """The (stream, entry id) of every record, in the order given (once `done`)."""
        return [located for located in self._placed if located is not None]

    def _moved_past(self) -> bool:
        current, used = self._core.routing, self.routing
        return current is not None and used is not None and current.version > used.version
