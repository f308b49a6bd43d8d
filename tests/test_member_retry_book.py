"""The retry book (member/core.py): P1's claimed counts and L4's waiting retries, forgotten per
shard when the shard is given up, the waiting entries handed back for their keys' release."""

from __future__ import annotations

from rsc.member.core import RetryBook
from rsc.member.message import Queued


def entry(shard: str, entry_id: str) -> Queued:
    return ((shard, b"k"), entry_id, b"k", b"v", {}, 1)


def test_forget_drops_one_shards_books_and_hands_back_its_waiting_entries() -> None:
    book = RetryBook()
    book.claimed_counts.update({("s1", "1-0"): 3, ("s2", "1-0"): 2})
    book.retries.update({("s1", "2-0"): (1, ValueError("x")), ("s2", "2-0"): (1, ValueError("y"))})
    waiting, other = entry("s1", "2-0"), entry("s2", "2-0")
    book.parked.update({("s1", "2-0"): waiting, ("s2", "2-0"): other})
    assert book.forget("s1") == [waiting]
    assert list(book.claimed_counts) == [("s2", "1-0")]
    assert list(book.retries) == [("s2", "2-0")]
    assert book.parked == {("s2", "2-0"): other}


def test_forget_on_an_empty_book_hands_back_nothing() -> None:
    assert RetryBook().forget("s1") == []
