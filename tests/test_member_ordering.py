"""Pure tests of the key-ordered work queue (KEY mode)."""

from __future__ import annotations

import attrs
from hypothesis import given
from hypothesis import strategies as st

from rsc.member.pure.ordering import KeyOrderedQueue


@attrs.frozen
class Item:
    shard: str
    key: str
    seq: int


def test_same_key_runs_one_at_a_time_in_order():
    queue: KeyOrderedQueue[Item] = KeyOrderedQueue()
    for seq in range(3):
        queue.push(Item("s", "k", seq))
    first = queue.pop_ready()
    assert first == Item("s", "k", 0)
    assert queue.pop_ready() is None, "the key is running"
    queue.done(first)
    assert queue.pop_ready() == Item("s", "k", 1)


def test_different_keys_run_in_parallel():
    queue: KeyOrderedQueue[Item] = KeyOrderedQueue()
    queue.push(Item("s", "a", 0))
    queue.push(Item("s", "b", 1))
    queue.push(Item("t", "a", 2))
    assert [queue.pop_ready() for _ in range(3)] == [
        Item("s", "a", 0), Item("s", "b", 1), Item("t", "a", 2)]


def test_l4_a_resumed_message_runs_first_and_its_key_stays_held_while_it_waits():
    queue: KeyOrderedQueue[Item] = KeyOrderedQueue()
    for item in (Item("s", "k", 0), Item("s", "k", 1), Item("s", "j", 2), Item("s", "i", 3)):
        queue.push(item)
    waiting = queue.pop_ready()  # fails: it waits for its next attempt, on no worker
    assert queue.pop_ready() == Item("s", "j", 2), "other keys go on"
    queue.resume(waiting)
    assert (len(queue), queue.pop_ready()) == (3, waiting), "back first"
    assert queue.pop_ready() == Item("s", "i", 3) and queue.pop_ready() is None, "k still held"
    queue.done(waiting)
    assert queue.pop_ready() == Item("s", "k", 1)


def test_drop_shard_removes_only_queued_messages_of_that_shard():
    queue: KeyOrderedQueue[Item] = KeyOrderedQueue()
    for seq in range(3):
        queue.push(Item("s", "k", seq))
    queue.push(Item("t", "k", 9))
    running = queue.pop_ready()
    assert queue.drop_shard("s") == [Item("s", "k", 1), Item("s", "k", 2)]
    assert len(queue) == 1
    queue.done(running)
    assert queue.pop_ready() == Item("t", "k", 9)
    assert queue.pop_ready() is None


def test_key_pushed_again_after_drop_runs_once_at_a_time():
    queue: KeyOrderedQueue[Item] = KeyOrderedQueue()
    queue.push(Item("s", "k", 0))
    queue.drop_shard("s")
    queue.push(Item("s", "k", 1))
    queue.push(Item("s", "k", 2))
    first = queue.pop_ready()
    assert first == Item("s", "k", 1)
    assert queue.pop_ready() is None
    queue.done(first)
    assert queue.pop_ready() == Item("s", "k", 2)


@given(st.lists(st.tuples(st.sampled_from("st"), st.sampled_from("abc")), max_size=40),
       st.randoms(use_true_random=False))
def test_any_interleaving_keeps_per_key_order_and_loses_nothing(pushes, rng):
    queue: KeyOrderedQueue[Item] = KeyOrderedQueue()
    for seq, (shard, key) in enumerate(pushes):
        queue.push(Item(shard, key, seq))
    running: list[Item] = []
    finished: list[Item] = []
    while len(queue) or running:
        item = queue.pop_ready() if rng.random() < 0.6 else None
        if item is not None:
            assert all((r.shard, r.key) != (item.shard, item.key) for r in running)
            running.append(item)
        elif running:
            done = running.pop(rng.randrange(len(running)))
            queue.done(done)
            finished.append(done)
    assert sorted(i.seq for i in finished) == list(range(len(pushes)))
    for shard, key in set(pushes):
        seqs = [i.seq for i in finished if (i.shard, i.key) == (shard, key)]
        assert seqs == sorted(seqs)
