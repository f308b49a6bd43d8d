"""Pure tests of the sticky uniform assignor (H2): balance, stickiness, determinism.

A catalogue of small named cases first, then hypothesis properties over random
member and shard sets. The minimal-movement property compares the assignor
with a closed formula for the most shards any balanced target can keep.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from rsc.actors.core.assignor import TargetAssignment, assign


def shard_ids(count: int, version: int = 1) -> list[str]:
    return [f"orders:v{version}:{index}" for index in range(count)]


def assert_balanced_partition(target: Mapping[str, Iterable[str]], members: Iterable[str],
                              shards: Sequence[str]) -> None:
    """Every shard goes to exactly one live member; counts differ by at most one (H2)."""
    assert set(target) == set(members)
    handed_out = [shard for mine in target.values() for shard in mine]
    assert len(handed_out) == len(set(handed_out)), "a shard is in two targets"
    if target:
        assert set(handed_out) == set(shards)
        counts = [len(set(mine)) for mine in target.values()]
        assert max(counts) - min(counts) <= 1, counts


def kept_shards(previous: Mapping[str, Iterable[str]], target: Mapping[str, Iterable[str]]) -> int:
    """How many shards stay with the member that had them."""
    return sum(len(set(previous.get(member_id, ())) & set(mine)) for member_id, mine in target.items())


def most_keepable(previous: Mapping[str, Iterable[str]], members: Iterable[str],
                  shards: Sequence[str]) -> int:
    """The most shards a balanced target can leave where they were (the stickiness bound).

    Every member may keep `base` of its still-valid shards; `extra` members may
    keep one more, best given to members that have more than `base`.
    """
    member_ids = sorted(set(members))
    if not member_ids:
        return 0
    valid = set(shards)
    base, extra = divmod(len(valid), len(member_ids))
    holding = [len(set(previous.get(member_id, ())) & valid) for member_id in member_ids]
    above_base = sum(1 for count in holding if count > base)
    return sum(min(count, base) for count in holding) + min(extra, above_base)


# --- named cases ---------------------------------------------------------------


def test_h2_no_members_gives_an_empty_target():
    assert assign([], shard_ids(4), {}) == {}


def test_h2_no_shards_gives_every_member_an_empty_target():
    assert assign(["a", "b"], [], {}) == {"a": frozenset(), "b": frozenset()}


def test_h2_fewer_shards_than_members_gives_at_most_one_each():
    target = assign(["a", "b", "c", "d"], shard_ids(2), {})
    assert_balanced_partition(target, "abcd", shard_ids(2))
    assert sorted(len(mine) for mine in target.values()) == [0, 0, 1, 1]


def test_h2_counts_differ_by_at_most_one():
    shards = shard_ids(10)
    target = assign(["a", "b", "c"], shards, {})
    assert_balanced_partition(target, "abc", shards)
    assert sorted(len(mine) for mine in target.values()) == [3, 3, 4]


def test_h2_sticky_a_member_joining_takes_only_its_share():
    shards = shard_ids(8)
    before = assign(["a", "b", "c", "d"], shards, {})
    after = assign(["a", "b", "c", "d", "e"], shards, before)
    assert_balanced_partition(after, "abcde", shards)
    # e needs floor(8 / 5) = 1 shard, and that is the only shard that moves
    assert len(after["e"]) == 1
    assert kept_shards(before, after) == len(shards) - 1
    for member_id in "abcd":
        assert after[member_id] <= before[member_id]


def test_h2_sticky_a_member_leaving_moves_only_its_shards():
    shards = shard_ids(9)
    before = assign(["a", "b", "c", "d"], shards, {})
    after = assign(["a", "b", "c"], shards, before)
    assert_balanced_partition(after, "abc", shards)
    for member_id in "abc":
        assert before[member_id] <= after[member_id]
    assert set().union(*(after[mid] - before[mid] for mid in "abc")) == before["d"]


def test_h2_an_overfull_member_gives_up_only_its_surplus():
    shards = shard_ids(6)
    previous = {"a": shards[:5], "b": shards[5:]}
    target = assign(["a", "b", "c"], shards, previous)
    assert_balanced_partition(target, "abc", shards)
    assert target["b"] >= set(shards[5:])
    assert len(target["a"] & set(previous["a"])) == 2
    assert kept_shards(previous, target) == most_keepable(previous, "abc", shards) == 3


def test_h2_shards_of_a_retired_version_leave_and_new_ones_are_spread():
    old, new = shard_ids(4, version=1), shard_ids(6, version=2)
    previous = assign(["a", "b"], old, {})
    target = assign(["a", "b"], old[:2] + new, previous)
    assert_balanced_partition(target, "ab", old[:2] + new)
    assert old[0] in target["a"] | target["b"]
    for member_id in "ab":
        assert set(previous[member_id]) & set(old[:2]) <= target[member_id]


def test_h2_previous_shards_of_unknown_members_are_ignored():
    shards = shard_ids(4)
    target = assign(["a"], shards, {"ghost": shards, "a": []})
    assert target == {"a": frozenset(shards)}


def test_h2_deterministic_whatever_the_input_order():
    shards = shard_ids(7)
    previous = {"c": shards[:4], "a": shards[4:5]}
    first = assign(["a", "b", "c"], shards, previous)
    again = assign(["c", "b", "a", "b"], shards, dict(reversed(list(previous.items()))))
    assert first == again


def test_h2_a_balanced_target_is_a_fixed_point():
    shards = shard_ids(11)
    target = assign(["a", "b", "c", "d"], shards, {})
    assert assign(["a", "b", "c", "d"], shards, target) == target


def test_h2_incremental_target_collects_changed_members():
    shards = shard_ids(6)
    incremental = TargetAssignment(shards)
    incremental.add_member("a")
    assert incremental.take_changed() == {"a"}
    assert incremental.of("a") == frozenset(shards)
    incremental.add_member("b")
    assert incremental.take_changed() == {"a", "b"}
    assert len(incremental.of("a")) == len(incremental.of("b")) == 3
    incremental.set_shards(shards[:3])
    assert_balanced_partition(incremental.as_dict(), "ab", shards[:3])


# --- properties ------------------------------------------------------------------

MEMBER_POOL = [f"m{index}" for index in range(8)]
SHARD_POOL = shard_ids(12, version=1) + shard_ids(12, version=2)

member_sets = st.lists(st.sampled_from(MEMBER_POOL), unique=True, max_size=len(MEMBER_POOL))
shard_lists = st.lists(st.sampled_from(SHARD_POOL), unique=True, max_size=len(SHARD_POOL))


@st.composite
def previous_targets(draw: st.DrawFn) -> dict[str, list[str]]:
    """A partition of some shards over some members (live or departed), as a target is."""
    owners = draw(st.dictionaries(st.sampled_from(SHARD_POOL), st.sampled_from(MEMBER_POOL)))
    previous: dict[str, list[str]] = {}
    for shard, member_id in owners.items():
        previous.setdefault(member_id, []).append(shard)
    return previous


@settings(max_examples=300, deadline=None)
@given(members=member_sets, shards=shard_lists, previous=previous_targets())
def test_h2_property_balanced_partition(members, shards, previous):
    assert_balanced_partition(assign(members, shards, previous), members, shards)


@settings(max_examples=300, deadline=None)
@given(members=member_sets, shards=shard_lists, previous=previous_targets())
def test_h2_property_sticky_moves_the_minimum(members, shards, previous):
    target = assign(members, shards, previous)
    assert kept_shards(previous, target) == most_keepable(previous, members, shards)


@settings(max_examples=200, deadline=None)
@given(members=member_sets.filter(bool), shards=shard_lists, newcomer=st.sampled_from(MEMBER_POOL))
def test_h2_property_one_join_moves_only_the_newcomers_share(members, shards, newcomer):
    members = [mid for mid in members if mid != newcomer]
    before = assign(members, shards, {})
    after = assign(members + [newcomer], shards, before)
    assert_balanced_partition(after, members + [newcomer], shards)
    for member_id in members:
        assert after[member_id] <= before[member_id]
    assert len(after[newcomer]) == len(shards) // (len(members) + 1)


@settings(max_examples=200, deadline=None)
@given(members=member_sets.filter(lambda ms: len(ms) >= 2), shards=shard_lists, data=st.data())
def test_h2_property_one_leave_moves_only_the_leavers_shards(members, shards, data):
    before = assign(members, shards, {})
    leaver = data.draw(st.sampled_from(members))
    stayers = [mid for mid in members if mid != leaver]
    after = assign(stayers, shards, before)
    assert_balanced_partition(after, stayers, shards)
    for member_id in stayers:
        assert before[member_id] <= after[member_id]


@settings(max_examples=200, deadline=None)
@given(members=member_sets, shards=shard_lists, previous=previous_targets(), data=st.data())
def test_h2_property_deterministic(members, shards, previous, data):
    shuffled_members = data.draw(st.permutations(members))
    shuffled_previous = dict(data.draw(st.permutations(list(previous.items()))))
    assert assign(members, shards, previous) == assign(shuffled_members, shards, shuffled_previous)


incremental_steps = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from(MEMBER_POOL)),
        st.tuples(st.just("remove"), st.sampled_from(MEMBER_POOL)),
        st.tuples(st.just("shards"), shard_lists),
    ),
    max_size=25,
)


@settings(max_examples=200, deadline=None)
@given(initial=shard_lists, steps=incremental_steps)
def test_h2_property_incremental_target_stays_balanced_sticky_and_reports_changes(initial, steps):
    incremental = TargetAssignment(initial)
    members: set[str] = set()
    shards = list(initial)
    incremental.take_changed()
    for kind, argument in steps:
        before = incremental.as_dict()
        if kind == "add":
            members.add(argument)
            incremental.add_member(argument)
        elif kind == "remove":
            members.discard(argument)
            incremental.remove_member(argument)
        else:
            shards = list(argument)
            incremental.set_shards(shards)
        after = incremental.as_dict()
        assert_balanced_partition(after, members, shards)
        assert kept_shards(before, after) == most_keepable(before, members, shards)
        moved = {mid for mid in after if after[mid] != before.get(mid, frozenset())}
        assert moved <= incremental.take_changed()
        assert incremental.owner == {shard: mid for mid, mine in after.items() for shard in mine}


class OneShardAtATime(TargetAssignment):
    """The balancing rule written plainly: the most loaded member gives its greatest shard to
    the least loaded one, one shard per step (a pass over the donor's set each time)."""

    def _fill_and_balance(self) -> None:
        if not self.targets:
            return
        if len(self._unassigned) > len(self.targets):
            self._bulk_fill()
        for shard in sorted(self._unassigned, key=self._index.__getitem__):
            self._give(shard, self._least_loaded())
        self._unassigned.clear()
        while True:
            most, least = self._most_loaded(), self._least_loaded()
            if len(self.targets[most]) - len(self.targets[least]) <= 1:
                return
            shard = max(self.targets[most])
            self.targets[most].discard(shard)
            self.changed.add(most)
            self._push(most)
            self._give(shard, least)


@settings(max_examples=200, deadline=None)
@given(initial=shard_lists, steps=incremental_steps)
def test_h2_property_a_donor_sorted_once_moves_the_same_shards_as_the_plain_rule(initial, steps):
    """A donor's shards are sorted once per rebalance (a join beside a member holding 4,096
    shards was a pass over its set per moved shard); the targets are the plain rule's."""
    fast, plain = TargetAssignment(initial), OneShardAtATime(initial)
    for kind, argument in steps:
        for target in (fast, plain):
            if kind == "add":
                target.add_member(argument)
            elif kind == "remove":
                target.remove_member(argument)
            else:
                target.set_shards(list(argument))
        assert fast.as_dict() == plain.as_dict()
        assert fast.take_changed() == plain.take_changed()


def test_h2_a_second_member_beside_one_holding_every_shard_takes_the_greatest_half():
    shards = shard_ids(4096)
    target = TargetAssignment(shards)
    target.add_member("a")
    target.add_member("b")
    assert target.of("b") == frozenset(sorted(shards)[2048:])
    assert_balanced_partition(target.as_dict(), "ab", shards)
