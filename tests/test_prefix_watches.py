"""Named rule tests of actors/core/prefix_watches.py: which watches a batch concerns. Pure."""

from __future__ import annotations

from rsc.actors.core.group import Effects
from rsc.actors.core.prefix_watches import Described
from rsc.actors.core.records import Changes, GroupRecord, RetentionRecord, RoutingRecord
from rsc.actors.core.watch import Watch
from rsc.protocol import messages as m
from rsc.protocol.errors import Status


def watch(group: str) -> Watch:
    request = m.DescribeGroup(request_id=1, stream_prefix="orders", consumer_group=group, watch=True)
    description = m.GroupDescription(request_id=1, status=Status.OK, stream_prefix="orders",
                                     consumer_group=group)
    return Watch(request, description, 0)


def test_a_batch_that_changes_routing_or_retention_concerns_every_watch():
    for changes in (Changes(), Changes(retention=RetentionRecord())):
        if not changes:
            changes.set_routing(RoutingRecord(version=1, shard_count=1, streams=("{orders:v1:0}",)))
        described = Described()
        described.note(changes, {})
        watches = [watch("billing"), watch("audit")]
        described.mark(watches)
        assert all(w.changed for w in watches)


def test_a_batch_concerns_only_the_groups_whose_records_or_effects_it_changed():
    described = Described()
    changes = Changes()
    changes.groups["billing"] = GroupRecord(group_epoch=1, assignment_epoch=1, max_concurrency=None)
    effects = {"audit": Effects(), "ledger": Effects()}
    effects["ledger"].group_dirty = True
    described.note(changes, effects)
    watches = [watch("billing"), watch("audit"), watch("ledger")]
    described.mark(watches)
    assert [w.changed for w in watches] == [True, False, True]


def test_marking_takes_what_was_noted_once():
    described = Described()
    described.every = True
    first = [watch("billing")]
    described.mark(first)
    later = [watch("billing")]
    described.mark(later)
    assert first[0].changed and not later[0].changed
