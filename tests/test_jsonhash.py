"""The JSON-list digests (``common.jsonhash``): the same SHA-256 as ``json.dumps`` of the whole list, whichever
path a chunk takes (joined directly, or through ``json.dumps`` when a character needs escaping), in both
dialects the project hashes: the corpus digests (``ensure_ascii``, ``","``) and the pass order (no
``ensure_ascii``, ``", "``)."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iteralab.common.jsonhash import JsonListHash

DIALECTS = [(True, ","), (False, ", ")]
#: Every character class that decides the path: plain ASCII, what JSON escapes, DEL (kept), non-ASCII.
TRICKY = ["plain", "", "a\"quote", "back\\slash", "tab\there", "line\nend", "cr\r", "nul\x00", "bell\x07",
          "del\x7f", "é accent", "emoji 😀", "nbsp\u00a0", "sep\u2028", "x" * 50]


def _expected(items: list, ensure_ascii: bool, sep: str) -> str:
    return hashlib.sha256(json.dumps(items, ensure_ascii=ensure_ascii, separators=(sep, ":")).encode()).hexdigest()


def _fed(items: list, ensure_ascii: bool, sep: str, chunk: int) -> str:
    digest = JsonListHash(ensure_ascii=ensure_ascii, item_separator=sep)
    for start in range(0, len(items), chunk):
        digest.update(items[start:start + chunk])
    return digest.hexdigest()


@pytest.mark.parametrize("ensure_ascii,sep", DIALECTS)
@pytest.mark.parametrize("chunk", [1, 2, 5, 100])
def test_each_escaped_character_and_each_chunking_hashes_as_json_dumps(ensure_ascii, sep, chunk):
    items = ["id-1", "id-2", *TRICKY, "id-3", None, "id-4", 7]
    assert _fed(items, ensure_ascii, sep, chunk) == _expected(items, ensure_ascii, sep)


@pytest.mark.parametrize("ensure_ascii,sep", DIALECTS)
def test_a_chunk_without_escapes_takes_the_joined_path_and_still_equals_json(ensure_ascii, sep, monkeypatch):
    digest = JsonListHash(ensure_ascii=ensure_ascii, item_separator=sep)
    monkeypatch.setattr(digest, "_dumps", lambda items: pytest.fail("json.dumps used for plain strings"))
    items = [f"d{i:07d}" for i in range(1000)]
    digest.update(items[:400])
    digest.update(items[400:])
    assert digest.hexdigest() == _expected(items, ensure_ascii, sep)


def test_non_ascii_is_plain_only_without_ensure_ascii():
    items = ["café", "naïve"]
    for ensure_ascii, sep in DIALECTS:
        assert _fed(items, ensure_ascii, sep, 10) == _expected(items, ensure_ascii, sep)


def test_an_empty_list_and_empty_chunks():
    digest = JsonListHash()
    digest.update([])
    digest.update_pairs([], [])
    assert digest.hexdigest() == _expected([], True, ",")


@pytest.mark.parametrize("ensure_ascii,sep", DIALECTS)
def test_pairs_hash_as_json_dumps_of_two_item_lists(ensure_ascii, sep):
    ids = ["a", "b", "c\"", "d", "é"]
    texts = ["one", "two \\ back", "three", "four\n", "five"]
    for chunk in (1, 2, 5):
        digest = JsonListHash(ensure_ascii=ensure_ascii, item_separator=sep)
        for start in range(0, len(ids), chunk):
            digest.update_pairs(ids[start:start + chunk], texts[start:start + chunk])
        assert digest.hexdigest() == _expected([list(p) for p in zip(ids, texts)], ensure_ascii, sep)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=8), st.sampled_from(TRICKY)), max_size=30),
       st.integers(min_value=1, max_value=7), st.sampled_from(DIALECTS))
def test_any_strings_any_chunking(items, chunk, dialect):
    ensure_ascii, sep = dialect
    try:
        expected = _expected(items, ensure_ascii, sep)
    except UnicodeEncodeError:  # a lone surrogate, written raw without ensure_ascii: refused by both
        with pytest.raises(UnicodeEncodeError):
            _fed(items, ensure_ascii, sep, chunk)
        return
    assert _fed(items, ensure_ascii, sep, chunk) == expected
    half = len(items) // 2
    digest = JsonListHash(ensure_ascii=ensure_ascii, item_separator=sep)
    digest.update_pairs(items[:half], items[half:2 * half])
    assert digest.hexdigest() == _expected([list(p) for p in zip(items[:half], items[half:2 * half])],
                                           ensure_ascii, sep)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(max_size=6), st.sampled_from(TRICKY)), max_size=25),
       st.integers(min_value=0, max_value=3), st.integers(min_value=1, max_value=9), st.sampled_from(DIALECTS))
def test_an_arrow_string_array_hashes_as_json_dumps_of_its_values(values, skip, chunk, dialect):
    import pyarrow as pa

    from iteralab.common.jsonhash import string_array_hash

    ensure_ascii, sep = dialect
    try:
        array = pa.array(["lead"] * skip + values, pa.string()).slice(skip)  # an offset into shared buffers
    except (UnicodeEncodeError, pa.ArrowException):  # a lone surrogate is no UTF-8 string
        return
    assert string_array_hash(array, ensure_ascii=ensure_ascii, item_separator=sep, chunk=chunk) == \
        _expected(values, ensure_ascii, sep)


def test_a_plain_arrow_array_is_joined_by_arrow_not_by_python(monkeypatch):
    import pyarrow as pa

    from iteralab.common.jsonhash import string_array_hash

    monkeypatch.setattr(JsonListHash, "update", lambda self, items: pytest.fail("a plain chunk went through Python"))
    ids = [f"d{i:07d}" for i in range(5000)] + ["ü-non-ascii"]
    assert string_array_hash(pa.array(ids), ensure_ascii=False, item_separator=", ", chunk=1000) == \
        _expected(ids, False, ", ")
