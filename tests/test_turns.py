"""Fair turns to parse requests while the coordinator is saturated (actors/net/turns.py):
in place at steady load, round robin over stream prefixes once sessions wait, a share per
scheduler pass that follows the pass length. Pure trio, no sockets."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from rsc.actors.net.turns import MAX_SHARE, MIN_SHARE, Turns, next_share


def test_the_share_shrinks_in_proportion_after_a_long_pass_and_grows_after_a_short_one():
    assert next_share(64, 0.008, 0.002) == 16  # a pass 4x the target: a quarter of the share
    assert next_share(64, 0.001, 0.002) == 80  # shorter: a quarter more
    assert next_share(MIN_SHARE, 1.0, 0.002) == MIN_SHARE  # never stops granting
    assert next_share(MAX_SHARE, 0.0, 0.002) == MAX_SHARE


def test_turns_refuse_nonsense_settings():
    with pytest.raises(ValueError, match="per_window"):
        Turns(per_window=0)
    with pytest.raises(ValueError, match="pass_target_s"):
        Turns(pass_target_s=0)


async def test_turns_are_granted_in_place_until_the_window_is_used_then_again_in_the_next(
        autojump_clock: trio.testing.MockClock) -> None:
    turns = Turns(per_window=3, window_s=0.002)
    assert [turns.admits() for _ in range(4)] == [True, True, True, False]
    await trio.sleep(0.002)  # the next window
    assert turns.admits() and turns.waited == 0


async def test_a_waiting_key_with_one_frame_is_served_before_the_rest_of_a_busy_key() -> None:
    turns = Turns(per_window=1)
    order: list[str] = []

    async def frame(key: str, index: int) -> None:
        await turns.wait(key)
        order.append(f"{key}{index}")

    async with trio.open_nursery() as nursery:
        assert turns.admits() and not turns.admits()  # the window's one turn is taken
        for index in range(40):
            nursery.start_soon(frame, "busy", index)
            await trio.testing.wait_all_tasks_blocked()  # queued in this order
        nursery.start_soon(frame, "quiet", 0)
        await trio.testing.wait_all_tasks_blocked()
        assert turns.waiting == 41
        nursery.start_soon(turns.run)
        with trio.fail_after(5):
            while len(order) < 41:
                await trio.sleep(0.0005)
        nursery.cancel_scope.cancel()
    assert sorted(order) == sorted([f"busy{i}" for i in range(40)] + ["quiet0"])
    # the first grant (MIN_SHARE turns, round robin: busy0, quiet0, busy1, ...) holds it; tasks
    # woken in one pass run in any order
    assert order.index("quiet0") < MIN_SHARE
    assert set(order[:MIN_SHARE]) == {"busy0", "quiet0", "busy1", "busy2"}
    assert turns.waited == 41 and turns.waiting == 0


async def test_a_cancelled_waiter_leaves_its_queue_and_the_others_still_get_turns() -> None:
    turns = Turns(per_window=1)
    served: list[int] = []

    async def frame(index: int) -> None:
        await turns.wait("busy")
        served.append(index)

    assert turns.admits() and not turns.admits()
    async with trio.open_nursery() as outer:
        with trio.CancelScope() as gone:
            async with trio.open_nursery() as doomed:
                doomed.start_soon(frame, 0)
                await trio.testing.wait_all_tasks_blocked()
                assert turns.waiting == 1
                gone.cancel()  # its session closes while it waits
        assert turns.waiting == 0
        outer.start_soon(turns.run)
        outer.start_soon(frame, 1)
        with trio.fail_after(5):
            while served != [1]:
                await trio.sleep(0.001)
        assert turns.waiting == 0
        outer.cancel_scope.cancel()


async def test_saturated_says_whether_a_frame_waited_since_it_was_last_asked() -> None:
    turns = Turns(per_window=1)
    assert not turns.saturated_since_last_asked()  # nothing waited yet
    assert turns.admits() and not turns.admits()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(turns.wait, "busy")
        await trio.testing.wait_all_tasks_blocked()
        assert turns.saturated_since_last_asked()  # one waits now
        nursery.start_soon(turns.run)
        with trio.fail_after(5):
            while turns.waiting:
                await trio.sleep(0.0005)
        nursery.cancel_scope.cancel()
    assert not turns.saturated_since_last_asked()  # the wait was counted at the last look
