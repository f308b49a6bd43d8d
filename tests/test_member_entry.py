"""M1..M4 and M5's entry fields, pure: what a producer writes and a member reads back."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rsc.member.pure.entry import (
    DEFAULT_MAX_MESSAGE_BYTES,
    MessageTooLarge,
    entry_fields,
    outgoing,
    read_fields,
)

header_names = st.text(min_size=1, max_size=20)


@given(key=st.one_of(st.none(), st.binary(max_size=64)), value=st.binary(max_size=256),
       headers=st.dictionaries(header_names, st.binary(max_size=32), max_size=4))
def test_m1_m2_m3_any_bytes_and_headers_round_trip_through_the_entry_fields(key, value, headers):
    fields = entry_fields(outgoing(key, value, headers))
    assert read_fields(fields) == (key, value, headers)


def test_m1_text_is_sent_as_its_utf_8():
    assert entry_fields(outgoing("clé", "valeur ✓")) == [b"key", "clé".encode(), b"value",
                                                         "valeur ✓".encode()]


def test_m3_a_keyless_message_has_no_key_field_and_an_empty_key_is_a_key():
    assert entry_fields(outgoing(None, b"v")) == [b"value", b"v"]
    assert read_fields([b"value", b"v"]) == (None, b"v", {})
    assert read_fields([b"key", b"", b"value", b"v"]) == (b"", b"v", {})


def test_m2_headers_never_clash_with_the_key_and_value_fields():
    fields = entry_fields(outgoing("k", "v", {"key": "not the key", "value": b"not the value"}))
    assert read_fields(fields) == (b"k", b"v", {"key": b"not the key", "value": b"not the value"})


def test_m5_entries_written_before_headers_existed_read_as_they_did():
    """Today's layout, from a client that decodes replies: text fields key and value."""
    assert read_fields({"key": "customer-7", "value": "paid"}) == (b"customer-7", b"paid", {})
    assert read_fields(["key", "k", "value", "v", "extra", "ignored"]) == (b"k", b"v", {})


def test_m4_a_message_over_the_limit_is_refused_naming_its_size_and_the_limit():
    assert DEFAULT_MAX_MESSAGE_BYTES == 1 << 20
    big = os.urandom(2 << 20)
    with pytest.raises(MessageTooLarge) as refused:
        outgoing("k", big, where="record 3: ")
    assert refused.value.size == len(big) + 1 and refused.value.limit == 1 << 20
    assert str(refused.value).startswith("record 3: message of 2,097,153 bytes")
    assert "over the limit of 1,048,576 bytes" in str(refused.value)


def test_m4_headers_count_towards_the_limit_and_exactly_the_limit_passes():
    """As stored: the header's field name (`h:ab`) and its value."""
    assert outgoing("k", b"x" * 8, {"ab": b"cd"}, limit=15).size == 1 + 8 + len(b"h:ab") + 2
    with pytest.raises(MessageTooLarge):
        outgoing("k", b"x" * 8, {"ab": b"cde"}, limit=15)


def test_m1_anything_but_str_or_bytes_is_refused_by_name():
    with pytest.raises(TypeError, match="record 0: value: expected str or bytes, got int"):
        outgoing("k", 5, where="record 0: ")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="header names must be non-empty str"):
        outgoing("k", "v", {"": "x"})
