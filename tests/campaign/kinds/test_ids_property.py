"""Properties of the ids check of one prediction file (P3, Q1): ``evaluate_file``'s expected_ids,
observed_ids, unique_ids, duplicates, missing, extra and ids_match.

Order never matters; a duplicated, dropped or extra id each breaks the match and is counted exactly; ids are
compared as exact strings (no number parsing, no whitespace stripping, no Unicode normalisation or case
folding). Prediction files are written in the pass's format: Parquet with exactly ``id``, ``label``,
``probs`` (``predictions.encode``, the pass's own writer).
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pyarrow as pa

from iteralab.campaign.kinds.classification.output import encode, read_predictions
from protocol_factory import ids_protocol
from iteralab.campaign.kinds.expected import Expected
from iteralab.campaign.verdict.evaluate import evaluate_file

CLASSES = ("plot", "fresh", "rotten")
PROTOCOL = ids_protocol("ids-properties")
PROBS = [0.8, 0.1, 0.1]
SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Non-empty ids of any Unicode text a UTF-8 file can hold (lone surrogates cannot be written).
ids_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=8)
id_lists = st.lists(ids_text, min_size=1, max_size=8, unique=True)


def prediction_bytes(ids: list[str]) -> bytes:
    """The file a pass writes for ``ids`` in this order (every record labelled 'plot')."""
    probs = np.tile(np.asarray(PROBS, dtype=np.float32), (len(ids), 1))
    return encode(pa.array(ids, pa.string()), list(CLASSES), probs)


def expected_of(ids: list[str]) -> Expected:
    return Expected.of(ids, {i: "plot" for i in ids}, {}, CLASSES)


def check(tmp_path: Path, expected_ids: list[str], observed: list[str]) -> dict:
    path = tmp_path / "pass.parquet"
    path.write_bytes(prediction_bytes(observed))
    return evaluate_file(path, PROTOCOL, expected_of(expected_ids)).to_json()


def counts(verdict: dict) -> tuple:
    return (verdict["ids_match"], verdict["duplicates"], verdict["missing"], verdict["extra"])


@SETTINGS
@given(ids=st.lists(ids_text, max_size=8))
def test_a_written_file_reads_back_as_written(tmp_path, ids):
    path = tmp_path / "pass.parquet"
    path.write_bytes(prediction_bytes(ids))
    preds = read_predictions(path, CLASSES, 1e-6)
    assert preds.ids.to_pylist() == ids and preds.records == len(ids) and preds.problem_count == 0
    assert preds.labels.tolist() == [0] * len(ids)
    assert np.array_equal(preds.probs, np.tile(np.asarray(PROBS, dtype=np.float32), (len(ids), 1)).reshape(-1, 3))


@SETTINGS
@given(data=st.data(), ids=id_lists)
def test_any_permutation_of_the_expected_ids_matches(tmp_path, data, ids):
    observed = data.draw(st.permutations(ids))
    v = check(tmp_path, ids, observed)
    assert counts(v) == (True, 0, 0, 0)
    assert v["expected_ids"] == v["observed_ids"] == v["unique_ids"] == len(ids)
    assert v["format_ok"] and v["coverage"] == 1.0


@SETTINGS
@given(data=st.data(), ids=id_lists)
def test_a_duplicated_id_breaks_the_match_and_is_counted(tmp_path, data, ids):
    twice = data.draw(st.lists(st.sampled_from(ids), min_size=1, max_size=4))
    observed = data.draw(st.permutations(ids + twice))
    v = check(tmp_path, ids, observed)
    assert counts(v) == (False, len(set(twice)), 0, 0)
    assert v["observed_ids"] == len(ids) + len(twice)
    assert v["unique_ids"] == len(ids)
    assert v["coverage"] == 1.0


@SETTINGS
@given(data=st.data(), ids=id_lists)
def test_a_dropped_id_breaks_the_match_and_is_counted(tmp_path, data, ids):
    dropped = data.draw(st.sets(st.sampled_from(ids), min_size=1))
    observed = data.draw(st.permutations([i for i in ids if i not in dropped]))
    v = check(tmp_path, ids, observed)
    assert counts(v) == (False, 0, len(dropped), 0)
    assert v["observed_ids"] == v["unique_ids"] == len(ids) - len(dropped)
    assert v["coverage"] == pytest.approx((len(ids) - len(dropped)) / len(ids))


@SETTINGS
@given(data=st.data(), ids=id_lists)
def test_an_extra_id_breaks_the_match_and_is_counted(tmp_path, data, ids):
    extras = data.draw(st.lists(ids_text.filter(lambda s: s not in ids), min_size=1, max_size=3, unique=True))
    observed = data.draw(st.permutations(ids + extras))
    v = check(tmp_path, ids, observed)
    assert counts(v) == (False, 0, 0, len(extras))
    assert v["observed_ids"] == v["unique_ids"] == len(ids) + len(extras)
    assert v["coverage"] == 1.0


@SETTINGS
@given(expected=id_lists, observed=st.lists(ids_text, max_size=10))
def test_counts_follow_the_multiset_of_ids(tmp_path, expected, observed):
    """Any output set against any expected set: the counts are those of the multisets, exactly."""
    seen = Counter(observed)
    v = check(tmp_path, expected, observed)
    assert v["duplicates"] == sum(1 for n in seen.values() if n > 1)
    assert v["missing"] == len(set(expected) - set(seen))
    assert v["extra"] == len(set(seen) - set(expected))
    assert v["observed_ids"] == len(observed)
    assert v["unique_ids"] == len(seen)
    assert v["ids_match"] == (sorted(observed) == sorted(expected))


LOOKALIKES = [
    ("007", "7"), ("7", "007"), ("1.0", "1"), ("1", "1.0"), ("1e0", "1"), ("+1", "1"), ("-0", "0"),
    ("0x1", "1"), ("١", "1"), ("７", "7"), ("1_000", "1000"), ("1,000", "1000"), ("true", "1"),
    (" d1", "d1"), ("d1 ", "d1"), ("d1\t", "d1"), ("d\u00a01", "d 1"), ("d1\n", "d1"),
    ("caf\u00e9", "cafe\u0301"), ("\u212b", "\u00c5"), ("D1", "d1"), ("straße", "strasse"), ("ﬁ", "fi"),
    ("d1\u200b", "d1"), ("i\u0307", "i"), ("😀", "😀\ufe0f"),
]


@pytest.mark.parametrize(("declared", "written"), LOOKALIKES)
def test_lookalike_ids_are_different_ids(tmp_path, declared, written):
    assert declared != written
    v = check(tmp_path, [declared, "other"], [written, "other"])
    assert counts(v) == (False, 0, 1, 1)
    assert v["examples"] == {"duplicates": [], "missing": [declared], "extra": [written]}
    assert counts(check(tmp_path, [declared, "other"], ["other", declared])) == (True, 0, 0, 0)


def _variants(s: str) -> list[str]:
    out = [" " + s, s + " ", s + "\t", "0" + s, s + ".0", s.upper(), s.lower(), s.casefold(), s.strip(),
           unicodedata.normalize("NFC", s), unicodedata.normalize("NFD", s), unicodedata.normalize("NFKC", s)]
    return [v for v in out if v and v != s]


@SETTINGS
@given(data=st.data(), base=ids_text.filter(lambda s: bool(_variants(s))))
def test_a_transformed_id_never_stands_for_the_declared_one(tmp_path, data, base):
    other = data.draw(st.sampled_from(_variants(base)))
    v = check(tmp_path, [base], [other])
    assert counts(v) == (False, 0, 1, 1)
    v = check(tmp_path, [base, other], [other, base])
    assert counts(v) == (True, 0, 0, 0)
