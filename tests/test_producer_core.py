"""Pure tests of the producer's routing decisions: D2 (never drop what it accepted), R5 (no loss
through a resharding: a sealed or retired shard re-routes), and routing adoption."""

from __future__ import annotations

import pytest

from rsc.member.pure.producer_core import (
    Adoption,
    Next,
    ProducerCore,
    Refused,
    RoutingTable,
)
from rsc.member.pure.store_identity import StoreChanged
from rsc.protocol import Routing, Status, shard_for_key

V1 = tuple(f"{{orders:v1:{i}}}" for i in range(2))
V2 = tuple(f"{{orders:v2:{i}}}" for i in range(4))
RECORDS = [("a", "1"), ("b", "2"), ("c", "3")]


def routing(version: int, streams: tuple[str, ...], *, store_id: str | None = None,
            hash_name: str | None = "crc32") -> Routing:
    return Routing(status=Status.OK, stream_prefix="orders", version=version,
                   shard_count=len(streams), hash=hash_name, streams=streams, store_id=store_id)


UNKNOWN = Routing(status=Status.UNKNOWN_STREAM, stream_prefix="orders")


def core_at(version: int = 1, streams: tuple[str, ...] = V1) -> ProducerCore:
    core = ProducerCore()
    assert core.adopt(routing(version, streams)) is Adoption.ADOPTED
    return core


def fields(key: str, value: str) -> list[bytes]:
    """A record's entry fields (docs/protocol.md M5)."""
    return [b"key", key.encode(), b"value", value.encode()]


def ids(count: int, start: int = 1) -> list[str]:
    return [f"{n}-0" for n in range(start, start + count)]


# --- routing adoption -------------------------------------------------------------------------


def test_a_key_goes_to_its_crc32_shard_of_the_routing():
    table = RoutingTable(version=2, streams=V2)
    assert [table.stream_for(key) for key, _ in RECORDS] == [
        V2[shard_for_key(key, 4)] for key, _ in RECORDS]


def test_a_newer_or_equal_routing_is_adopted_an_older_one_never_rolls_back():
    core = core_at(1)
    assert core.adopt(routing(2, V2)) is Adoption.ADOPTED
    assert core.adopt(routing(1, V1)) is Adoption.STALE, "a late answer"
    assert core.routing == RoutingTable(version=2, streams=V2)
    assert core.adopt(routing(2, V2)) is Adoption.ADOPTED  # a refresh of the same version


def test_d3_a_prefix_without_routing_is_said_and_its_first_routing_ends_that():
    core = ProducerCore()
    assert core.adopt(UNKNOWN) is Adoption.NO_ROUTING and core.routing is None
    assert core.adopt(UNKNOWN) is Adoption.NO_ROUTING
    assert core.adopt(routing(1, V1)) is Adoption.ARRIVED
    assert core.adopt(routing(2, V2)) is Adoption.ADOPTED, "said once"


def test_no_routing_after_one_is_held_keeps_writing_with_it():
    core = core_at(1)
    assert core.adopt(UNKNOWN) is Adoption.IGNORED
    assert core.adopt(Routing(status=Status.INVALID_REQUEST, stream_prefix="orders",
                              error="nope")) is Adoption.IGNORED
    assert core.routing is not None and core.routing.version == 1


def test_an_unknown_routing_hash_is_refused_and_changes_nothing():
    core = core_at(1)
    with pytest.raises(ValueError, match="hash 'murmur'"):
        core.adopt(routing(2, V2, hash_name="murmur"))
    assert core.routing is not None and core.routing.version == 1


def test_k9_a_routing_naming_another_store_id_stops_the_producer():
    core = ProducerCore()
    core.adopt(routing(1, V1, store_id="s-1"))
    core.adopt(routing(2, V2))  # names none (K8's empty store, an older coordinator): it stands
    assert core.store_id == "s-1"
    with pytest.raises(StoreChanged, match="storeId 's-2', not 's-1'"):
        core.adopt(routing(3, V2, store_id="s-2"))  # a new coordinator session: another store
    assert core.store_id == "s-1" and core.routing is not None and core.routing.version == 2


# --- D2: nothing accepted is dropped ----------------------------------------------------------


def test_d2_records_not_key_value_strings_are_refused_before_anything_is_written():
    core = core_at()
    with pytest.raises(TypeError, match="record 1"):
        core.delivery([("a", "1"), ("b", 2)])  # type: ignore[list-item]
    assert (core.sent, core.retried) == (0, 0)


def test_d2_a_delivery_is_done_once_redis_has_every_record_where_it_landed():
    core = core_at()
    delivery = core.delivery(RECORDS)
    writes = delivery.writes(core.routing)
    assert writes == [(V1[shard_for_key(key, 2)], fields(key, value)) for key, value in RECORDS]
    assert delivery.on_results(ids(3)) is Next.DONE
    assert delivery.done and core.sent == 3
    landed = [(stream, entry) for (stream, _), entry in zip(writes, ids(3), strict=True)]
    assert delivery.located() == landed


def test_d2_a_failed_round_trip_writes_every_record_again_and_counts_them():
    core = core_at()
    delivery = core.delivery(RECORDS)
    delivery.writes(core.routing)
    assert delivery.write_failed() is Next.REDIS_BACKOFF
    assert not delivery.done and core.retried == 3
    assert len(delivery.writes(core.routing)) == 3
    assert delivery.on_results(ids(3)) is Next.DONE and core.sent == 3


def test_d2_a_record_the_server_failed_is_written_again_the_others_are_kept():
    core = core_at()
    delivery = core.delivery(RECORDS)
    delivery.writes(core.routing)
    failure = ConnectionError("READONLY")
    assert delivery.on_results(["1-0", failure, "3-0"]) is Next.REDIS_BACKOFF
    assert delivery.failure is failure and (core.sent, core.retried) == (2, 1)
    assert [written for _, written in delivery.writes(core.routing)] == [fields("b", "2")]
    assert delivery.on_results(["2-0"]) is Next.DONE
    assert delivery.failure is None
    assert [entry for _, entry in delivery.located()] == ["1-0", "2-0", "3-0"], "in the order given"


# --- R5: a sealed or retired shard re-routes ---------------------------------------------------


@pytest.mark.parametrize("why", [Refused.SEALED, Refused.MISSING])
def test_r5_a_refused_write_asks_for_routing_then_goes_to_its_shard_of_the_new_version(why):
    core = core_at(1)
    delivery = core.delivery(RECORDS)
    delivery.writes(core.routing)
    assert delivery.on_results([why, "2-0", why]) is Next.REFRESH
    assert core.rerouted == 2 and core.sent == 1 and core.retried == 0
    core.adopt(routing(2, V2))  # the answer to the refresh
    assert delivery.refreshed() is Next.REROUTE
    assert delivery.writes(core.routing) == [(V2[shard_for_key("a", 4)], fields("a", "1")),
                                             (V2[shard_for_key("c", 4)], fields("c", "3"))]
    assert delivery.on_results(["5-0", "6-0"]) is Next.DONE
    assert [stream.startswith("{orders:v2") for stream, _ in delivery.located()] == [
        True, False, True]


def test_r5_a_newer_routing_already_pushed_re_routes_without_asking():
    core = core_at(1)
    delivery = core.delivery(RECORDS)
    delivery.writes(core.routing)
    core.adopt(routing(2, V2))  # pushed while the write was on its way
    assert delivery.on_results([Refused.SEALED] * 3) is Next.REROUTE


def test_r5_a_coordinator_still_routing_to_the_refusing_shard_is_said_and_retried():
    core = core_at(1)
    delivery = core.delivery(RECORDS)
    delivery.writes(core.routing)
    assert delivery.on_results(["1-0", Refused.MISSING, "3-0"]) is Next.REFRESH
    core.adopt(routing(1, V1))  # the refresh names the same version
    assert delivery.refreshed() is Next.REFUSED_BACKOFF
    assert delivery.refusal == (V1[shard_for_key("b", 2)], Refused.MISSING)
    assert delivery.routing is not None and delivery.routing.version == 1
    assert not delivery.done, "kept, never dropped"
    delivery.writes(core.routing)
    assert delivery.on_results(["2-0"]) is Next.DONE


def test_r5_refusals_and_server_errors_in_one_write_re_route_first():
    core = core_at(1)
    delivery = core.delivery(RECORDS)
    delivery.writes(core.routing)
    assert delivery.on_results([Refused.SEALED, TimeoutError("t"), "3-0"]) is Next.REFRESH
    assert (core.rerouted, core.retried, core.sent) == (1, 1, 1)


# --- M1..M4: what a record may be ----------------------------------------------------------------


def test_m1_m2_bytes_and_headers_are_written_as_the_entry_fields():
    core = core_at()
    delivery = core.delivery([(b"\x00k", b"\xff", {"trace": "t1"})])
    [(stream, written)] = delivery.writes(core.routing)
    assert stream == V1[shard_for_key(b"\x00k", 2)]
    assert written == [b"key", b"\x00k", b"value", b"\xff", b"h:trace", b"t1"]


def test_m3_keyless_records_go_round_the_shards_and_keep_their_turn_when_written_again():
    core = core_at()
    delivery = core.delivery([(None, str(n)) for n in range(4)])
    writes = delivery.writes(core.routing)
    assert [stream for stream, _ in writes] == [V1[0], V1[1], V1[0], V1[1]]
    assert all(written[0] == b"value" for _, written in writes), "no key field"
    delivery.write_failed()
    assert delivery.writes(core.routing) == writes, "the same shards on a retry"
    following = core.delivery([(None, "next")]).writes(core.routing)
    assert following[0][0] == V1[0], "the round robin goes on"


def test_m4_a_record_over_the_limit_is_refused_by_number_before_anything_is_written():
    from rsc.member.pure.entry import MessageTooLarge

    core = core_at()
    with pytest.raises(MessageTooLarge, match="record 1: message of 11 bytes"):
        core.delivery([("a", "1"), ("a", "x" * 10)], limit=10)
    assert (core.sent, core.retried) == (0, 0)
