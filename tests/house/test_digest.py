"""The digest of a list of strings (``common/digest.py``): pinned to its definition by hand-written bytes, and the
same however the list is cut (chunks, record batches, slices at a non-zero offset, Python or Arrow)."""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iteralab.common import digest
from iteralab.common.digest import ABSENT, StringDigest, frame, pairs_digest, string_digest


def test_the_definition_is_pinned_by_hand_written_bytes():
    # "ab": length 2 as 8 bytes little-endian, then b"ab"; "é": 2 UTF-8 bytes; "": length 0, no bytes; None: ff×8
    written = (b"\x02\x00\x00\x00\x00\x00\x00\x00ab" + b"\x02\x00\x00\x00\x00\x00\x00\x00\xc3\xa9"
               + b"\x00" * 8 + b"\xff" * 8)
    expected = hashlib.sha256(written).hexdigest()
    assert expected == "177a228b607d84d3ac769aac4d4319cd67c06febe7a5ee68583a8c676910811c"
    assert string_digest(["ab", "é", "", None]) == expected
    assert string_digest(pa.array(["ab", "é", "", None], pa.string())) == expected
    assert frame("é") == b"\x02" + b"\x00" * 7 + "é".encode() and frame(None) == ABSENT
    # the empty list is the SHA-256 of nothing; a pair list interleaves first and second
    assert string_digest([]) == hashlib.sha256(b"").hexdigest()
    assert pairs_digest(["a", "b"], ["x", "yz"]) == hashlib.sha256(
        b"\x01" + b"\x00" * 7 + b"a" + b"\x01" + b"\x00" * 7 + b"x"
        + b"\x01" + b"\x00" * 7 + b"b" + b"\x02" + b"\x00" * 7 + b"yz").hexdigest()


def test_framing_keeps_lists_apart_that_a_plain_concatenation_would_merge():
    assert string_digest(["ab", "c"]) != string_digest(["a", "bc"])
    assert string_digest([""]) != string_digest([]) != string_digest([None])
    assert string_digest([None]) != string_digest(["None"]) != string_digest([""])


ITEMS = st.lists(st.one_of(st.none(), st.text(max_size=12), st.sampled_from(["", "é€😀", "a\x00b", '"\\'])),
                 max_size=40)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(ITEMS, st.integers(0, 5), st.integers(1, 7), st.data())
def test_cuts_slices_and_kinds_never_change_the_digest(items, skip, chunk, data):
    expected = hashlib.sha256(b"".join(map(frame, items))).hexdigest()
    assert string_digest(items) == expected
    # a slice of a larger array: its offset is not zero
    padded = pa.array(["pad"] * skip + items + ["tail"], pa.string()).slice(skip, len(items))
    assert padded.offset == skip
    assert string_digest(padded) == expected
    assert string_digest(padded.cast(pa.large_string())) == expected
    # record batches / chunks of any size, fed one after the other
    pieces = [padded.slice(start, chunk) for start in range(0, len(items), chunk)]
    streamed = StringDigest()
    for piece in pieces:
        streamed.update(piece if data.draw(st.booleans()) else piece.to_pylist())
    assert streamed.hexdigest() == expected
    assert string_digest(pa.chunked_array(pieces, pa.string())) == expected


def test_the_inner_chunk_does_not_change_the_digest(monkeypatch):
    items = [f"id-{i}" if i % 7 else None for i in range(100)] + ["é" * 3]
    whole = string_digest(items)
    pairs = pairs_digest(items[:50], items[50:100])
    monkeypatch.setattr(digest, "CHUNK", 3)
    assert string_digest(items) == whole
    assert string_digest(pa.array(items, pa.string()).slice(0)) == whole
    assert pairs_digest(items[:50], items[50:100]) == pairs
    assert pairs == hashlib.sha256(b"".join(frame(a) + frame(b) for a, b in zip(items[:50], items[50:100]))).hexdigest()


def test_a_digest_is_over_strings_only():
    with pytest.raises(TypeError, match="not int64"):
        string_digest(pa.array([1, 2]))
    with pytest.raises(ValueError, match="unequal"):
        pairs_digest(["a"], ["b", "c"])
