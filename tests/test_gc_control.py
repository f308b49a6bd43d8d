"""The GC policies of the coordinator and the member (rsc.actors/member.gc_control): pure, no I/O.

A fake collector records what the policy asks of it; a fake clock and heap
size drive the tick. The cycle tests use the real collector (and undo what
they froze).
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from rsc.actors import gc_control
from rsc.member import gc_control as member_gc_control

SIDES = [gc_control, member_gc_control]


class FakeGc:
    """Records the calls a policy makes; `collect` may take `collect_seconds` of the fake clock."""

    def __init__(self, clock: FakeClock | None = None, collect_seconds: float = 0.0) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.clock = clock
        self.collect_seconds = collect_seconds
        self.on_collect: Callable[[], None] = lambda: None

    def set_threshold(self, *thresholds: int) -> None:
        self.calls.append(("set_threshold", *thresholds))

    def freeze(self) -> None:
        self.calls.append(("freeze",))

    def unfreeze(self) -> None:
        self.calls.append(("unfreeze",))

    def collect(self, generation: int = 2) -> int:
        self.calls.append(("collect", generation))
        if self.clock is not None:
            self.clock.now += self.collect_seconds
        self.on_collect()
        return 0

    def names(self) -> list[str]:
        return [call[0] for call in self.calls]


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Heap:
    def __init__(self, blocks: int = 1_000_000) -> None:
        self.blocks = blocks

    def __call__(self) -> int:
        return self.blocks


def started(side: ModuleType, collect_seconds: float = 0.0) -> tuple[Any, FakeGc, FakeClock, Heap]:
    clock, heap = FakeClock(), Heap()
    fake = FakeGc(clock, collect_seconds)
    policy = side.Policy(side.TUNED, gc_module=fake, clock=clock, heap_blocks=heap)
    assert policy.freeze_after_startup()
    fake.calls.clear()
    return policy, fake, clock, heap


# --- the mode -------------------------------------------------------------------------


@pytest.mark.parametrize("side", SIDES)
def test_mode_is_tuned_unless_rsc_gc_says_default(side: ModuleType) -> None:
    assert side.mode_from_env({}) == "tuned"
    assert side.mode_from_env({"RSC_GC": " Default "}) == "default"
    assert side.mode_from_env({"RSC_GC": "tuned"}) == "tuned"


@pytest.mark.parametrize("side", SIDES)
def test_unknown_mode_is_refused_naming_the_variable_and_value(side: ModuleType) -> None:
    with pytest.raises(ValueError, match=r"RSC_GC must be one of tuned, default, not 'off'"):
        side.mode_from_env({"RSC_GC": "off"})
    with pytest.raises(ValueError, match="'lazy'"):
        side.Policy("lazy", gc_module=FakeGc())


# --- thresholds and the startup freeze -------------------------------------------------


@pytest.mark.parametrize("side", SIDES)
def test_tuned_mode_sets_the_thresholds_once(side: ModuleType) -> None:
    fake = FakeGc()
    policy = side.Policy(side.TUNED, gc_module=fake)
    policy.apply()
    policy.apply()
    assert fake.calls == [("set_threshold", *side.TUNED_THRESHOLDS)]
    assert side.TUNED_THRESHOLDS[0] > 700  # fewer young collections than Python's default


@pytest.mark.parametrize("side", SIDES)
def test_default_mode_touches_nothing(side: ModuleType) -> None:
    fake = FakeGc()
    policy = side.Policy(side.DEFAULT, gc_module=fake)
    policy.apply()
    assert policy.freeze_after_startup() is False
    assert policy.on_tick() is None
    assert fake.calls == []


@pytest.mark.parametrize("side", SIDES)
def test_startup_freeze_collects_then_freezes_only_on_the_first_call(side: ModuleType) -> None:
    fake = FakeGc()
    policy = side.Policy(side.TUNED, gc_module=fake, heap_blocks=Heap())
    assert policy.freeze_after_startup() is True
    assert fake.names() == ["set_threshold", "unfreeze", "collect", "freeze"]
    assert policy.freeze_after_startup() is False
    assert fake.names().count("freeze") == 1


# --- the tick ---------------------------------------------------------------------------


@pytest.mark.parametrize("side", SIDES)
def test_tick_before_the_startup_freeze_does_nothing(side: ModuleType) -> None:
    fake = FakeGc()
    policy = side.Policy(side.TUNED, gc_module=fake, clock=FakeClock(), heap_blocks=Heap())
    assert policy.on_tick() is None
    assert fake.calls == []


@pytest.mark.parametrize("side", SIDES)
def test_tick_freezes_the_survivors_without_walking_the_heap(side: ModuleType) -> None:
    policy, fake, clock, _ = started(side)
    clock.now += 1
    assert policy.on_tick() == "young"
    assert fake.calls == [("freeze",)]


@pytest.mark.parametrize("side", SIDES)
def test_ticks_closer_than_the_minimum_interval_are_skipped(side: ModuleType) -> None:
    policy, fake, clock, _ = started(side)
    clock.now += 1
    assert policy.on_tick() == "young"
    clock.now += side.MIN_TICK_INTERVAL_S / 2
    assert policy.on_tick() is None
    assert fake.calls == [("freeze",)]


@pytest.mark.parametrize("side", SIDES)
def test_full_collection_on_the_tick_once_the_heap_grew(side: ModuleType) -> None:
    policy, fake, clock, heap = started(side)
    heap.blocks = int(heap.blocks * (1 + side.GROWTH)) - 10
    clock.now += 1
    assert policy.on_tick() == "young"
    heap.blocks += 20
    clock.now += 1
    assert policy.on_tick() == "full"
    assert fake.calls == [("freeze",), ("unfreeze",), ("collect", 2), ("freeze",)]
    clock.now += 1
    assert policy.on_tick() == "young"  # measured again from the heap after the full collection


@pytest.mark.parametrize("side", SIDES)
def test_full_collections_stay_within_their_share_of_wall_time(side: ModuleType) -> None:
    policy, fake, clock, heap = started(side, collect_seconds=2.0)
    wait = 2.0 / side.FULL_BUDGET  # every collection takes 2 s of the fake clock
    fulls = []
    for _ in range(3 * int(wait)):
        heap.blocks += heap.blocks // 5  # sessions keep joining: a full is due on every tick
        clock.now += 1
        if policy.on_tick() == "full":
            fulls.append(clock.now)
    assert len(fulls) >= 2
    assert fulls[0] - 1000.0 >= wait
    assert all(later - earlier >= wait for earlier, later in zip(fulls, fulls[1:], strict=False))


@pytest.mark.parametrize("side", SIDES)
def test_growth_while_the_budget_forbids_a_full_is_not_saved_up(side: ModuleType) -> None:
    policy, fake, clock, heap = started(side, collect_seconds=2.0)
    heap.blocks *= 3  # the population grows right after startup, then stays
    ticks = []
    for _ in range(int(side.MAX_FULL_INTERVAL_S) - 10):
        clock.now += 1
        ticks.append(policy.on_tick())
    assert "full" not in ticks  # none fires later in the steady state for that old growth
    clock.now += 2.0 / side.FULL_BUDGET
    assert policy.on_tick() == "full"  # the longest interval still brings one


@pytest.mark.parametrize("side", SIDES)
def test_full_collection_after_the_longest_interval_even_without_growth(side: ModuleType) -> None:
    policy, fake, clock, _ = started(side)
    clock.now += side.MAX_FULL_INTERVAL_S - 1
    assert policy.on_tick() == "young"
    clock.now += 1
    assert policy.on_tick() == "full"
    assert policy.full_collections == 2


@pytest.mark.parametrize("side", SIDES)
def test_growth_that_a_full_finds_live_doubles_the_next_trigger(side: ModuleType) -> None:
    policy, fake, clock, heap = started(side)
    heap.blocks = int(heap.blocks * (1 + side.GROWTH)) + 10  # sessions joining: nothing to free
    clock.now += 1
    assert policy.on_tick() == "full"
    assert policy.growth == pytest.approx(2 * side.GROWTH)
    heap.blocks = int(heap.blocks * (1 + 1.5 * side.GROWTH))
    clock.now += 1
    assert policy.on_tick() == "young"
    for _ in range(10):  # more live growth, each full finding nothing
        heap.blocks = int(heap.blocks * (1 + policy.growth)) + 10
        clock.now += 1
        assert policy.on_tick() == "full"
    assert policy.growth == side.MAX_GROWTH


@pytest.mark.parametrize("side", SIDES)
def test_growth_that_a_full_finds_garbage_brings_the_trigger_back(side: ModuleType) -> None:
    policy, fake, clock, heap = started(side)
    policy.growth = side.MAX_GROWTH
    base = heap.blocks

    def free_the_garbage() -> None:
        heap.blocks = base

    fake.on_collect = free_the_garbage
    heap.blocks = base * 3  # closed sessions' cycles, frozen while they lived
    clock.now += 1
    assert policy.on_tick() == "full"
    assert policy.growth == side.GROWTH


# --- pauses -----------------------------------------------------------------------------


@pytest.mark.parametrize("side", SIDES)
def test_recorder_counts_collections_and_pauses_per_generation(side: ModuleType) -> None:
    wall, cpu = FakeClock(0.0), FakeClock(0.0)
    recorder = side.PauseRecorder(clock=wall, cpu_clock=cpu)
    seen: list[tuple[int, float]] = []
    recorder.observers.append(lambda generation, pause: seen.append((generation, pause)))
    for generation, pause in ((0, 0.001), (0, 0.003), (2, 0.5)):
        recorder("start", {"generation": generation})
        wall.now += pause
        cpu.now += pause / 2
        recorder("stop", {"generation": generation, "collected": 0, "uncollectable": 0})
    snapshot = recorder.snapshot(reset_max=True)
    assert snapshot["collections"] == [2, 0, 1]
    assert snapshot["seconds"] == pytest.approx([0.004, 0.0, 0.5])
    assert snapshot["cpuSeconds"] == pytest.approx([0.002, 0.0, 0.25])
    assert snapshot["maxSeconds"] == pytest.approx([0.003, 0.0, 0.5])
    assert seen == [(0, pytest.approx(0.001)), (0, pytest.approx(0.003)), (2, pytest.approx(0.5))]
    assert recorder.snapshot()["maxSeconds"] == [0.0, 0.0, 0.0]
    assert recorder.snapshot()["collections"] == [2, 0, 1]


@pytest.mark.parametrize("side", SIDES)
def test_recorder_ignores_a_stop_without_its_start(side: ModuleType) -> None:
    recorder = side.PauseRecorder(clock=FakeClock(), cpu_clock=FakeClock())
    recorder("stop", {"generation": 1})
    assert recorder.snapshot()["collections"] == [0, 0, 0]


def test_install_feeds_the_pause_histogram_of_each_registry_once(monkeypatch: pytest.MonkeyPatch) -> None:
    wall = FakeClock(0.0)
    monkeypatch.setattr(gc_control, "policy", gc_control.Policy(gc_control.DEFAULT, gc_module=FakeGc()))
    monkeypatch.setattr(gc_control, "recorder", gc_control.PauseRecorder(clock=wall, cpu_clock=wall))
    monkeypatch.setattr(gc, "callbacks", [])  # the collector keeps its own list: nothing real is hooked
    registry = CollectorRegistry()
    gc_control.install(registry)
    gc_control.install(registry)  # a restart with the same metrics: no duplicate series
    gc_control.recorder("start", {"generation": 1})
    wall.now += 0.002
    gc_control.recorder("stop", {"generation": 1})
    assert registry.get_sample_value("rsc_gc_pause_seconds_count", {"generation": "1"}) == 1
    assert registry.get_sample_value("rsc_gc_pause_seconds_sum", {"generation": "1"}) == pytest.approx(0.002)
    assert gc.callbacks == [gc_control.recorder]


def test_member_hooks_do_nothing_unless_the_process_installed_the_policy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(member_gc_control, "policy", None)
    assert member_gc_control.freeze_after_startup() is False
    assert member_gc_control.on_tick() is None
    fake = FakeGc()
    monkeypatch.setattr(member_gc_control, "policy",
                        member_gc_control.Policy(member_gc_control.TUNED, gc_module=fake,
                                                 clock=FakeClock(), heap_blocks=Heap()))
    assert member_gc_control.freeze_after_startup() is True
    assert fake.names() == ["set_threshold", "unfreeze", "collect", "freeze"]


# --- cycles are still collected (the real collector) ------------------------------------


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def real_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.mark.parametrize("side", SIDES)
def test_a_cycle_that_dies_after_being_frozen_is_collected_within_bounded_ticks(
        side: ModuleType, real_gc: None) -> None:
    clock = FakeClock()
    policy = side.Policy(side.TUNED, clock=clock, heap_blocks=Heap())
    policy.freeze_after_startup()
    first, second = Node(), Node()
    first.other, second.other = second, first
    alive = weakref.ref(first)
    clock.now += 1
    assert policy.on_tick() == "young"  # the cycle is frozen now, then becomes garbage
    del first, second
    gc.collect()  # an ordinary full collection does not see frozen objects
    assert alive() is not None
    ticks = 0
    while alive() is not None and ticks <= side.MAX_FULL_INTERVAL_S:
        clock.now += 1
        policy.on_tick()
        ticks += 1
    assert alive() is None
    assert ticks <= side.MAX_FULL_INTERVAL_S


@pytest.mark.parametrize("side", SIDES)
def test_a_young_cycle_is_collected_by_the_allocation_driven_collections(
        side: ModuleType, real_gc: None) -> None:
    policy = side.Policy(side.TUNED, clock=FakeClock(), heap_blocks=Heap())
    policy.freeze_after_startup()
    first, second = Node(), Node()
    first.other, second.other = second, first
    alive = weakref.ref(first)
    del first, second
    count = side.TUNED_THRESHOLDS[0] + 1000  # enough allocations for a young collection
    allocations: list[list[int]] = [[] for _ in range(count)]
    assert alive() is None
    assert len(allocations) == count
