"""Pure tests of the record schema: what is written replays to an equal state."""

from __future__ import annotations

import json

import attrs
from hypothesis import given
from hypothesis import strategies as st

from rsc.actors.core.records import (
    Changes,
    GroupRecord,
    GroupSnapshot,
    MemberRecord,
    MigrationRecord,
    PrefixSnapshot,
    RoutingRecord,
    changes_of,
    encode,
    member_field,
    parse_member_field,
    replay,
)
from rsc.protocol.vocabulary import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    TEMPORARY_LEAVE_EPOCH,
    Cutover,
    MigrationState,
)
from tests.prefix_driver import GROUP, Driver, heartbeat, set_shards, streams

V1, V2 = streams(1, 2), streams(2, 3)


def written(changes: Changes, into: dict[str, str] | None = None) -> dict[str, str]:
    """The hash after writing `changes` (None deletes a field)."""
    hash_ = dict(into or {})
    for field, value in encode(changes).items():
        if value is None:
            hash_.pop(field, None)
        else:
            hash_[field] = value
    return hash_


def a_snapshot() -> PrefixSnapshot:
    return PrefixSnapshot(
        routing=RoutingRecord(version=2, shard_count=3, streams=V2),
        migration=MigrationRecord(from_version=1, to_version=2, cutover=Cutover.ORDERED,
                                  from_streams=V1, drained=frozenset(V1[:1]),
                                  state=MigrationState.DRAINING, retiring=("{orders:v0:0}",)),
        groups={
            GROUP: GroupSnapshot(GroupRecord(group_epoch=7, assignment_epoch=7, max_concurrency=4), {
                "a": MemberRecord(epoch=7, previous_epoch=5, capacity=8, assigned=frozenset(V2[:2]),
                                  revoking=frozenset(V1[1:]), target=frozenset(V2[:2])),
                "b:with:colons": MemberRecord(epoch=6, previous_epoch=LEAVE_EPOCH, capacity=None,
                                              target=frozenset(V2[2:])),
                "s": MemberRecord(epoch=7, previous_epoch=6, capacity=2, instance_id="pod-0",
                                  away=True),
            }),
            "a:b": GroupSnapshot(GroupRecord()),
        })


def test_round_trip_write_then_replay_gives_an_equal_snapshot():
    snapshot = a_snapshot()
    assert replay(written(changes_of(snapshot))) == snapshot


def test_values_are_json_with_the_documented_field_names():
    hash_ = written(changes_of(a_snapshot()))
    assert set(json.loads(hash_["routing"])) == {"version", "shardCount", "streams"}
    assert set(json.loads(hash_["migration"])) == {"state", "fromVersion", "toVersion", "cutover",
                                                   "fromStreams", "drained", "retiring"}
    assert json.loads(hash_["group:" + GROUP]) == {"groupEpoch": 7, "assignmentEpoch": 7,
                                                  "maxConcurrency": 4}
    member = json.loads(hash_[member_field(GROUP, "a")])
    assert member == {"epoch": 7, "previousEpoch": 5, "capacity": 8, "assigned": list(V2[:2]),
                      "revoking": list(V1[1:]), "target": list(V2[:2])}


def test_s1_a_static_members_record_carries_its_instance_id_and_away_state():
    hash_ = written(changes_of(a_snapshot()))
    static = json.loads(hash_[member_field(GROUP, "s")])
    assert (static["instanceId"], static["away"]) == ("pod-0", True)
    assert "instanceId" not in json.loads(hash_[member_field(GROUP, "a")])  # dynamic: as before


def test_s3_checkpoints_of_a_static_members_away_and_return_replay_to_the_persisted_copy():
    driver = Driver()

    def static(member_id: str, epoch: int) -> None:
        request = attrs.evolve(heartbeat(member_id, epoch, owned=()), instance_id="pod-0")
        assert driver.one(request).status.value == "OK"

    steps = [
        lambda: driver.one(set_shards(3)),
        lambda: static("s", JOIN_EPOCH),
        lambda: driver.join("a"),
        lambda: driver.settle(),
        lambda: static("s", TEMPORARY_LEAVE_EPOCH),
        lambda: driver.tick(),
        lambda: static("s2", JOIN_EPOCH),
        lambda: driver.settle(),
        lambda: static("s2", TEMPORARY_LEAVE_EPOCH),
    ]
    for step in steps:
        step()
        assert replay(driver.hash) == driver.machine.persisted
    members = driver.machine.persisted.groups[GROUP].members
    assert set(members) == {"a", "s2"} and members["s2"].away
    assert members["s2"].instance_id == "pod-0" and members["s2"].target
    restored = driver.replayed().groups[GROUP]
    assert restored.members["s2"].away and restored.instances == {"pod-0": "s2"}


def test_none_deletes_the_field_and_apply_matches_replay():
    snapshot = a_snapshot()
    hash_ = written(changes_of(snapshot))
    changes = Changes()
    changes.set_migration(None)
    changes.members[(GROUP, "a")] = None
    changes.groups["a:b"] = None
    changes.groups["new"] = GroupRecord(group_epoch=1, assignment_epoch=1)
    hash_ = written(changes, hash_)
    snapshot.apply(changes)
    assert "migration" not in hash_ and member_field(GROUP, "a") not in hash_
    assert replay(hash_) == snapshot


def test_member_fields_of_a_group_without_its_field_are_ignored_on_replay():
    hash_ = written(changes_of(a_snapshot()))
    del hash_["group:" + GROUP]
    assert GROUP not in replay(hash_).groups


def test_a_migration_written_before_retiring_existed_replays_with_none_retiring():
    value = {"state": "COMPLETE", "fromVersion": 1, "toVersion": 2, "cutover": "parallel",
             "fromStreams": list(V1), "drained": list(V1)}
    migration = replay({"migration": json.dumps(value)}).migration
    assert migration is not None and migration.retiring == () and not migration.remaining


@given(group=st.text(min_size=1, max_size=20), member=st.text(min_size=1, max_size=20))
def test_member_field_names_parse_back_whatever_the_names_hold(group: str, member: str):
    assert parse_member_field(member_field(group, member)) == (group, member)


def test_every_committed_checkpoint_of_a_run_replays_to_the_persisted_copy():
    driver = Driver()
    steps = [
        lambda: driver.one(set_shards(2)),
        lambda: driver.join("a"),
        lambda: driver.join("b", group="audit"),
        lambda: driver.settle(),
        lambda: driver.one(set_shards(3)),
        lambda: driver.settle(),
        lambda: driver.tick(drained=V1),
        lambda: driver.settle(),
        lambda: driver.settle("audit"),
        lambda: driver.tick(),
        lambda: driver.one(heartbeat("a", LEAVE_EPOCH)),
    ]
    for step in steps:
        step()
        assert replay(driver.hash) == driver.machine.persisted
    assert driver.machine.persisted.migration is None
    assert set(driver.machine.persisted.groups[GROUP].members) == set()
