"""The GC policy both sides run (rsc.common.gc_policy): pure, no I/O.

A fake collector records what the policy asks of it; a fake clock and heap
size drive the tick. The cycle tests use the real collector (and undo what
they froze).
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from rsc.common import gc_policy


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


def started(collect_seconds: float = 0.0) -> tuple[Any, FakeGc, FakeClock, Heap]:
    clock, heap = FakeClock(), Heap()
    fake = FakeGc(clock, collect_seconds)
    policy = gc_policy.Policy(gc_policy.TUNED, gc_module=fake, clock=clock, heap_blocks=heap)
    assert policy.freeze_after_startup()
    fake.calls.clear()
    return policy, fake, clock, heap


# --- the mode -------------------------------------------------------------------------


def test_mode_is_tuned_unless_rsc_gc_says_default() -> None:
    assert gc_policy.mode_from_env({}) == "tuned"
    assert gc_policy.mode_from_env({"RSC_GC": " Default "}) == "default"
    assert gc_policy.mode_from_env({"RSC_GC": "tuned"}) == "tuned"


def test_unknown_mode_is_refused_naming_the_variable_and_value() -> None:
    with pytest.raises(ValueError, match=r"RSC_GC must be one of tuned, default, not 'off'"):
        gc_policy.mode_from_env({"RSC_GC": "off"})
    with pytest.raises(ValueError, match="'lazy'"):
        gc_policy.Policy("lazy", gc_module=FakeGc())


# --- thresholds and the startup freeze -------------------------------------------------


def test_tuned_mode_sets_the_thresholds_once() -> None:
    fake = FakeGc()
    policy = gc_policy.Policy(gc_policy.TUNED, gc_module=fake)
    policy.apply()
    policy.apply()
    assert fake.calls == [("set_threshold", *gc_policy.TUNED_THRESHOLDS)]
    assert gc_policy.TUNED_THRESHOLDS[0] > 700  # fewer young collections than Python's default


def test_default_mode_touches_nothing() -> None:
    fake = FakeGc()
    policy = gc_policy.Policy(gc_policy.DEFAULT, gc_module=fake)
    policy.apply()
    assert policy.freeze_after_startup() is False
    assert policy.on_tick() is None
    assert fake.calls == []


def test_startup_freeze_collects_then_freezes_only_on_the_first_call() -> None:
    fake = FakeGc()
    policy = gc_policy.Policy(gc_policy.TUNED, gc_module=fake, heap_blocks=Heap())
    assert policy.freeze_after_startup() is True
    assert fake.names() == ["set_threshold", "unfreeze", "collect", "freeze"]
    assert policy.freeze_after_startup() is False
    assert fake.names().count("freeze") == 1


# --- the tick ---------------------------------------------------------------------------


def test_tick_before_the_startup_freeze_does_nothing() -> None:
    fake = FakeGc()
    policy = gc_policy.Policy(gc_policy.TUNED, gc_module=fake, clock=FakeClock(), heap_blocks=Heap())
    assert policy.on_tick() is None
    assert fake.calls == []


def test_tick_freezes_the_survivors_without_walking_the_heap() -> None:
    policy, fake, clock, _ = started()
    clock.now += 1
    assert policy.on_tick() == "young"
    assert fake.calls == [("freeze",)]


def test_ticks_closer_than_the_minimum_interval_are_skipped() -> None:
    policy, fake, clock, _ = started()
    clock.now += 1
    assert policy.on_tick() == "young"
    clock.now += gc_policy.MIN_TICK_INTERVAL_S / 2
    assert policy.on_tick() is None
    assert fake.calls == [("freeze",)]


def test_full_collection_on_the_tick_once_the_heap_grew() -> None:
    policy, fake, clock, heap = started()
    heap.blocks = int(heap.blocks * (1 + gc_policy.GROWTH)) - 10
    clock.now += 1
    assert policy.on_tick() == "young"
    heap.blocks += 20
    clock.now += 1
    assert policy.on_tick() == "full"
    assert fake.calls == [("freeze",), ("unfreeze",), ("collect", 2), ("freeze",)]
    clock.now += 1
    assert policy.on_tick() == "young"  # measured again from the heap after the full collection


def test_full_collections_stay_within_their_share_of_wall_time() -> None:
    policy, fake, clock, heap = started(collect_seconds=2.0)
    wait = 2.0 / gc_policy.FULL_BUDGET  # every collection takes 2 s of the fake clock
    fulls = []
    for _ in range(3 * int(wait)):
        heap.blocks += heap.blocks // 5  # sessions keep joining: a full is due on every tick
        clock.now += 1
        if policy.on_tick() == "full":
            fulls.append(clock.now)
    assert len(fulls) >= 2
    assert fulls[0] - 1000.0 >= wait
    assert all(later - earlier >= wait for earlier, later in zip(fulls, fulls[1:], strict=False))


def test_growth_while_the_budget_forbids_a_full_is_not_saved_up() -> None:
    policy, fake, clock, heap = started(collect_seconds=2.0)
    heap.blocks *= 3  # the population grows right after startup, then stays
    ticks = []
    for _ in range(int(gc_policy.MAX_FULL_INTERVAL_S) - 10):
        clock.now += 1
        ticks.append(policy.on_tick())
    assert "full" not in ticks  # none fires later in the steady state for that old growth
    clock.now += 2.0 / gc_policy.FULL_BUDGET
    assert policy.on_tick() == "full"  # the longest interval still brings one


def test_full_collection_after_the_longest_interval_even_without_growth() -> None:
    policy, fake, clock, _ = started()
    clock.now += gc_policy.MAX_FULL_INTERVAL_S - 1
    assert policy.on_tick() == "young"
    clock.now += 1
    assert policy.on_tick() == "full"
    assert policy.full_collections == 2


def test_growth_that_a_full_finds_live_doubles_the_next_trigger() -> None:
    policy, fake, clock, heap = started()
    heap.blocks = int(heap.blocks * (1 + gc_policy.GROWTH)) + 10  # sessions joining: nothing to free
    clock.now += 1
    assert policy.on_tick() == "full"
    assert policy.growth == pytest.approx(2 * gc_policy.GROWTH)
    heap.blocks = int(heap.blocks * (1 + 1.5 * gc_policy.GROWTH))
    clock.now += 1
    assert policy.on_tick() == "young"
    for _ in range(10):  # more live growth, each full finding nothing
        heap.blocks = int(heap.blocks * (1 + policy.growth)) + 10
        clock.now += 1
        assert policy.on_tick() == "full"
    assert policy.growth == gc_policy.MAX_GROWTH


def test_growth_that_a_full_finds_garbage_brings_the_trigger_back() -> None:
    policy, fake, clock, heap = started()
    policy.growth = gc_policy.MAX_GROWTH
    base = heap.blocks

    def free_the_garbage() -> None:
        heap.blocks = base

    fake.on_collect = free_the_garbage
    heap.blocks = base * 3  # closed sessions' cycles, frozen while they lived
    clock.now += 1
    assert policy.on_tick() == "full"
    assert policy.growth == gc_policy.GROWTH


# --- pauses -----------------------------------------------------------------------------


def test_recorder_counts_collections_and_pauses_per_generation() -> None:
    wall, cpu = FakeClock(0.0), FakeClock(0.0)
    recorder = gc_policy.PauseRecorder(clock=wall, cpu_clock=cpu)
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


def test_recorder_ignores_a_stop_without_its_start() -> None:
    recorder = gc_policy.PauseRecorder(clock=FakeClock(), cpu_clock=FakeClock())
    recorder("stop", {"generation": 1})
    assert recorder.snapshot()["collections"] == [0, 0, 0]


def test_install_feeds_the_pause_histogram_of_each_registry_once(monkeypatch: pytest.MonkeyPatch) -> None:
    wall = FakeClock(0.0)
    monkeypatch.setattr(gc_policy, "policy", gc_policy.Policy(gc_policy.DEFAULT, gc_module=FakeGc()))
    monkeypatch.setattr(gc_policy, "recorder", gc_policy.PauseRecorder(clock=wall, cpu_clock=wall))
    monkeypatch.setattr(gc, "callbacks", [])  # the collector keeps its own list: nothing real is hooked
    registry = CollectorRegistry()
    # a real collection before the asserts would reach this registry too, through the recorder
    # the test session installed, and add its own pause to the sum
    enabled = gc.isenabled()
    gc.disable()
    try:
        gc_policy.install(registry)
        gc_policy.install(registry)  # a restart with the same metrics: no duplicate series
        gc_policy.recorder("start", {"generation": 1})
        wall.now += 0.002
        gc_policy.recorder("stop", {"generation": 1})
        assert registry.get_sample_value("rsc_gc_pause_seconds_count", {"generation": "1"}) == 1
        assert registry.get_sample_value("rsc_gc_pause_seconds_sum",
                                         {"generation": "1"}) == pytest.approx(0.002)
        assert gc.callbacks == [gc_policy.recorder]
    finally:
        if enabled:
            gc.enable()


def test_hooks_do_nothing_unless_the_process_installed_the_policy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A library (the member runtime, an embedded coordinator) leaves its host's collector alone."""
    monkeypatch.setattr(gc_policy, "policy", None)
    assert gc_policy.freeze_after_startup() is False
    assert gc_policy.on_tick() is None
    fake, clock = FakeGc(), FakeClock()
    monkeypatch.setattr(gc_policy, "policy", gc_policy.Policy(gc_policy.TUNED, gc_module=fake,
                                                              clock=clock, heap_blocks=Heap()))
    assert gc_policy.freeze_after_startup() is True
    assert fake.names() == ["set_threshold", "unfreeze", "collect", "freeze"]
    clock.now += 1
    assert gc_policy.on_tick() == "young"


def test_install_keeps_one_policy_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The coordinator and a member in one process (rsc demo) share the process's collector."""
    monkeypatch.setattr(gc_policy, "policy", None)
    monkeypatch.setattr(gc, "callbacks", [])
    monkeypatch.setattr(gc_policy, "recorder", gc_policy.PauseRecorder())
    first = gc_policy.install(CollectorRegistry(), environ={"RSC_GC": "default"})
    assert gc_policy.install(environ={"RSC_GC": "tuned"}) is first  # the first owner's mode stays
    assert first.mode == gc_policy.DEFAULT
    assert gc.callbacks == [gc_policy.recorder]


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


def test_a_cycle_that_dies_after_being_frozen_is_collected_within_bounded_ticks(
        real_gc: None) -> None:
    clock = FakeClock()
    policy = gc_policy.Policy(gc_policy.TUNED, clock=clock, heap_blocks=Heap())
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
    while alive() is not None and ticks <= gc_policy.MAX_FULL_INTERVAL_S:
        clock.now += 1
        policy.on_tick()
        ticks += 1
    assert alive() is None
    assert ticks <= gc_policy.MAX_FULL_INTERVAL_S


def test_a_young_cycle_is_collected_by_the_allocation_driven_collections(
        real_gc: None) -> None:
    policy = gc_policy.Policy(gc_policy.TUNED, clock=FakeClock(), heap_blocks=Heap())
    policy.freeze_after_startup()
    first, second = Node(), Node()
    first.other, second.other = second, first
    alive = weakref.ref(first)
    del first, second
    count = gc_policy.TUNED_THRESHOLDS[0] + 1000  # enough allocations for a young collection
    allocations: list[list[int]] = [[] for _ in range(count)]
    assert alive() is None
    assert len(allocations) == count


def test_a_full_due_while_the_process_is_busy_waits_for_a_calm_tick() -> None:
    policy, fake, clock, heap = started()
    heap.blocks = int(heap.blocks * (1 + gc_policy.GROWTH)) + 10  # a full is due
    for _ in range(5):  # a join storm: saturated on every tick
        clock.now += 1
        assert policy.on_tick(busy=True) == "young"
    assert "collect" not in fake.names() and policy.deferred == 5
    clock.now += 1
    assert policy.on_tick(busy=False) == "full"  # the growth was kept for the first calm tick
    assert policy.full_collections == 2


def test_a_process_busy_for_the_longest_interval_still_gets_its_full() -> None:
    policy, fake, clock, _ = started()
    clock.now += gc_policy.MAX_FULL_INTERVAL_S - 1
    assert policy.on_tick(busy=True) == "young"
    clock.now += 1
    assert policy.on_tick(busy=True) == "full"
