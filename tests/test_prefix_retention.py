"""Named rule tests of actors/core/prefix_retention.py (T1..T3), on the part alone. Pure."""

from __future__ import annotations

from rsc.actors.core.prefix_io import Checkpoint, CreateConsumerGroups, MoveOffsets, RetentionPass
from rsc.actors.core.prefix_retention import RETENTION_EVERY_TICKS, Retention, must_wait
from rsc.actors.core.records import RetentionRecord
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import RetentionMode

SHARDS = ("{orders:v1:0}",)


def set_retention(retention: m.Retention) -> m.SetRetention:
    return m.SetRetention(request_id=1, stream_prefix="orders", retention=retention)


def test_t1_t2_a_pass_is_due_every_ten_ticks_on_a_prefix_with_routing():
    part = Retention()
    for _ in range(RETENTION_EVERY_TICKS - 1):
        part.tick()
    assert not part.due(routed=True)
    part.tick()
    assert part.due(routed=True) and not part.due(routed=False)
    assert part.take_pass(SHARDS, ("billing",)) == RetentionPass(
        SHARDS, ("billing",), acked=True, max_length=None, max_age_ms=None)
    assert not part.due(routed=True)  # the next one is ten ticks away


def test_t1_a_prefix_without_groups_trims_nothing_by_acked():
    part = Retention(ticks=RETENTION_EVERY_TICKS)
    assert not part.take_pass(SHARDS, ()).acked


def test_t3_none_asks_for_no_acked_trim_and_t2_caps_apply_in_either_mode():
    part = Retention(RetentionRecord(mode=RetentionMode.NONE, max_length=5, max_age_ms=60_000))
    retention_pass = part.take_pass(SHARDS, ("billing",))
    assert not retention_pass.acked
    assert (retention_pass.max_length, retention_pass.max_age_ms) == (5, 60_000)


def test_t3_set_retention_replaces_the_whole_object():
    part = Retention(RetentionRecord(max_length=5, max_age_ms=1000))
    response = part.set(set_retention(m.Retention(mode=RetentionMode.NONE)), routed=True,
                        prefix="orders")
    assert isinstance(response, m.RetentionChanged) and response.status == Status.OK
    assert part.record == RetentionRecord(mode=RetentionMode.NONE)  # the caps went too


def test_t3_only_a_prefix_with_routing_has_a_retention():
    part = Retention()
    response = part.set(set_retention(m.Retention(mode=RetentionMode.NONE)), routed=False,
                        prefix="orders")
    assert response.status == Status.UNKNOWN_STREAM and part.record == RetentionRecord()


def test_t1_a_checkpoint_waits_for_the_running_pass_only_when_it_creates_or_moves():
    assert must_wait(Checkpoint(create=(CreateConsumerGroups(SHARDS, ("audit",)),)))
    assert must_wait(Checkpoint(moves=(MoveOffsets(SHARDS, "billing", "earliest", None),)))
    assert not must_wait(Checkpoint(seal=SHARDS))
    assert not must_wait(Checkpoint())
