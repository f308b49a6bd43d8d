"""Pure tests of the ack book: what the acker takes, grouped so the ledger admits each group (D1)."""

from __future__ import annotations

from rsc.member.pure.ackbook import AckBook


def test_ids_are_grouped_by_shard_and_the_generation_they_were_read_under():
    book = AckBook()
    first = book.add("a", 1, "1-0")
    assert book.add("a", 1, "2-0") is first
    later = book.add("a", 2, "3-0")  # read again under a new hold: admitted on its own
    assert later is not first and (later.shard, later.generation) == ("a", 2)
    assert book.pending == 3
    taken = book.take(10)
    assert [(buffer.generation, ids, complete) for buffer, ids, complete in taken] == [
        (1, ["1-0", "2-0"], True), (2, ["3-0"], True)]
    assert book.pending == 0 and not book.buffers


def test_take_stops_at_its_budget_and_leaves_the_rest_for_the_next_round():
    book = AckBook()
    for n in range(5):
        book.add("a", 1, f"{n}-0")
    book.add("b", 1, "9-0")
    (buffer, ids, complete), = book.take(3)
    assert (buffer.shard, ids, complete) == ("a", ["0-0", "1-0", "2-0"], False)
    assert book.pending == 3
    rest = book.take(3)
    assert [(b.shard, ids, complete) for b, ids, complete in rest] == [
        ("a", ["3-0", "4-0"], True), ("b", ["9-0"], True)]
    assert book.pending == 0

