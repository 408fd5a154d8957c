import bz2
import csv
import gzip
import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iteralab.plan.corpus import (
    Corpus,
    Record,
    check_disjoint,
    content_id,
    load_corpus,
    text_fingerprint,
    write_corpus,
)
from iteralab.plan.strata import assign_strata, largest_remainder, stratified_sample
from iteralab.errors import CorpusError


def write(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return path


def refusal(path, **kwargs):
    with pytest.raises(CorpusError) as info:
        load_corpus(path, **kwargs)
    return info.value


def corpus_of(rows, source="mem", origin="data"):
    return Corpus(tuple(Record(i, t, lab, n + 2) for n, (i, t, lab) in enumerate(rows)), source, origin)


# ------------------------------------------------------------------------------------------ reading


def test_csv_ids_texts_labels_and_start_lines(tmp_path):
    path = write(tmp_path, "c.csv", 'id,text,label\nr1,hello,pos\nr2,"two\nlines, one text",neg\n\nr3,end,pos\n')
    corpus = load_corpus(path)
    assert corpus.ids == ("r1", "r2", "r3")
    assert corpus.texts == ("hello", "two\nlines, one text", "end")
    assert corpus.labels == ("pos", "neg", "pos")
    assert [r.line for r in corpus.records] == [2, 3, 6]
    assert corpus.id_origin == "data" and len(corpus) == 3 and corpus.source == str(path)


def test_jsonl_numeric_ids_become_strings_and_blank_lines_are_skipped(tmp_path):
    lines = [{"id": 7, "text": "a", "label": "x"}, {"id": "8", "text": "b\u2028c", "label": 1}]
    path = write(tmp_path, "c.jsonl", json.dumps(lines[0]) + "\n\n" + json.dumps(lines[1]) + "\n")
    corpus = load_corpus(path)
    assert corpus.ids == ("7", "8") and corpus.labels == ("x", "1")
    assert corpus.texts[1] == "b\u2028c"
    assert [r.line for r in corpus.records] == [1, 3]


def test_parquet_integer_ids_and_row_numbers(tmp_path):
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": [10, 11], "text": ["a", "b"], "label": ["x", "y"]}), path)
    corpus = load_corpus(path)
    assert corpus.ids == ("10", "11") and [r.line for r in corpus.records] == [1, 2]


def test_compressed_csv_and_custom_columns(tmp_path):
    raw = "doc,body,y\nd1,first,a\nd2,second,b\n".encode()
    for name, data in (("c.csv.gz", gzip.compress(raw)), ("c.csv.bz2", bz2.compress(raw))):
        corpus = load_corpus(write(tmp_path, name, data), id_column="doc", text_column="body", label_column="y")
        assert corpus.ids == ("d1", "d2") and corpus.labels == ("a", "b")


def test_content_ids_are_derived_and_recorded(tmp_path):
    corpus = load_corpus(write(tmp_path, "c.csv", "text,label\nhello  world,a\nbye,b\n"))
    assert corpus.id_origin == "content"
    assert corpus.ids == (content_id("hello world"), content_id("bye"))
    assert corpus.ids[0].startswith("t-") and len(corpus.ids[0]) == 18


def test_labels_optional_when_not_required(tmp_path):
    assert load_corpus(write(tmp_path, "c.csv", "id,text\n1,a\n"), require_labels=False).labels == (None,)
    path = write(tmp_path, "d.csv", "id,text,label\n1,a,\n2,b,x\n")
    assert load_corpus(path, require_labels=False, classes=["x"]).labels == (None, "x")


def test_a_10_mb_text_is_accepted(tmp_path):
    big = "word " * 2_000_000 + "end"
    limit = csv.field_size_limit()
    assert load_corpus(write(tmp_path, "big.csv", f"id,text,label\n1,{big},a\n")).texts == (big,)
    assert csv.field_size_limit() == limit
    line = json.dumps({"id": 1, "text": big, "label": "a"})
    assert load_corpus(write(tmp_path, "big.jsonl", line)).texts == (big,)


# ----------------------------------------------------------------------------------------- refusals

REFUSALS = [
    ("dup.csv", "id,text,label\nr1,a,x\nr2,b,x\nr1,c,x\n", {}, "line 4, field id: duplicate id 'r1' (first at line 2)"),
    ("blank.csv", "id,text,label\nr1,a,x\nr2, \t ,x\n", {}, "line 3, field text: empty text"),
    ("noid.csv", "id,text,label\nr1,a,x\n,b,x\n", {}, "line 3, field id: missing or empty id"),
    ("utf.csv", b"id,text,label\nr1,a,x\nr2,caf\xe9,x\n", {}, "line 3, field text: invalid UTF-8 (byte 0xe9 at byte offset 27)"),
    ("fields.csv", "id,text,label\nr1,a,x\nr2,b,c,x\n", {}, "line 3: unreadable CSV row, 4 fields where the header (line 1) has 3"),
    ("quote.csv", 'id,text,label\nr1,a,x\nr2,"never closed,x\nr3,c,x\n', {}, "line 3: unreadable CSV row (a quoted field opened here is never closed)"),
    ("cols.csv", "id,body,label\nr1,a,x\n", {}, "line 1: no text column 'text' (columns found: 'id', 'body', 'label')"),
    ("nolab.csv", "id,text\nr1,a\n", {}, "line 1: no label column 'label' (columns found: 'id', 'text')"),
    ("cls.csv", "id,text,label\nr1,a,x\nr2,b,z\n", {"classes": ["x", "y"]}, "line 3, field label: label 'z' is not one of the classes (x, y)"),
    ("miss.csv", "id,text,label\nr1,a,x\nr2,b,\n", {}, "line 3, field label: missing label"),
    ("twice.csv", "text,label\nsame  text,a\nother,b\nsame text,a\n", {}, "line 4, field text: same text as line 2"),
    ("twocol.csv", "id,text,text,label\nr1,a,b,x\n", {}, "line 1: column 'text' appears 2 times (columns [2, 3])"),
    ("bad.jsonl", '{"id": 1, "text": "a", "label": "x"}\n{"id": 2, "text": "b" "label": "x"}\n', {}, "line 2: malformed JSON (Expecting ',' delimiter at column 23)"),
    ("arr.jsonl", '{"id": 1, "text": "a", "label": "x"}\n[1, 2]\n', {}, "line 2: expected a JSON object, got an array"),
    ("flt.jsonl", '{"id": 1.5, "text": "a", "label": "x"}\n', {}, "line 1, field id: expected a string or an integer, got a number (1.5)"),
    ("num.jsonl", '{"id": 1, "text": 3, "label": "x"}\n', {}, "line 1, field text: expected a string, got a number (3)"),
    ("gap.jsonl", '{"id": 1, "text": "a", "label": "x"}\n{"text": "b", "label": "x"}\n', {}, "line 2, field id: missing or empty id"),
    ("utf.jsonl", b'{"id": 1, "text": "a", "label": "x"}\n{"id": 2, "text": "\xff", "label": "x"}\n', {}, "line 2: invalid UTF-8 (byte 0xff at byte offset 56)"),
]


@pytest.mark.parametrize("name,content,kwargs,expected", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusals_name_file_line_field_and_reason(tmp_path, name, content, kwargs, expected):
    path = write(tmp_path, name, content)
    message = str(refusal(path, **kwargs))
    assert message.startswith(f"{path} {expected}")
    assert "\n" not in message


def test_duplicate_text_with_derived_ids_names_both_lines(tmp_path):
    path = write(tmp_path, "c.csv", "text,label\nsame,a\nother,b\nsame,a\n")
    message = str(refusal(path))
    assert message == (
        f"{path} line 4, field text: same text as line 2 (derived id {content_id('same')}; the file has no 'id' column)"
    )


def test_missing_file_empty_file_and_header_only(tmp_path):
    error = refusal(tmp_path / "absent.csv")
    assert str(error) == f"{tmp_path / 'absent.csv'}: file not found" and "check the path" in error.hint
    # an absolute path (what a protocol's paths resolve to) is never said to start from the working folder
    assert "protocol file's folder" in error.hint and "relative paths start from" not in error.hint
    assert str(refusal(write(tmp_path, "e.csv", ""))) == f"{tmp_path / 'e.csv'}: empty file"
    assert str(refusal(write(tmp_path, "e.jsonl", "\n \n"))) == f"{tmp_path / 'e.jsonl'}: empty file"
    assert str(refusal(write(tmp_path, "h.csv", "id,text,label\n"))).endswith("no records after the header (line 1)")
    assert "cannot tell the format" in str(refusal(write(tmp_path, "c.txt", "x")))


def test_parquet_refusals_use_row_numbers(tmp_path):
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "a"], "text": ["x", "y", "z"], "label": ["p", "p", "p"]}), path)
    assert str(refusal(path)) == f"{path} row 3, field id: duplicate id 'a' (first at row 1)"
    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({"id": [1.0], "text": ["x"], "label": ["p"]}), path)
    assert str(refusal(path)) == f"{path}, field id: Parquet column type double (strings or integers expected)"
    assert "not a readable Parquet file" in str(refusal(write(tmp_path, "g.parquet", b"not parquet")))
    assert str(refusal(tmp_path / "absent.parquet")) == f"{tmp_path / 'absent.parquet'}: file not found"


# ----------------------------------------------------------------------------- fingerprints (C1)

texts = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30).filter(str.strip)


@st.composite
def corpora(draw):
    ids = draw(st.lists(st.text(min_size=1, max_size=8).filter(str.strip), min_size=2, max_size=12, unique=True))
    return corpus_of([(i, draw(texts), None) for i in ids])


@given(corpora(), st.randoms(use_true_random=False))
def test_fingerprint_ignores_order_and_order_hash_sees_it(corpus, rnd):
    ids = list(corpus.ids)
    rnd.shuffle(ids)
    shuffled = corpus.reordered(ids)
    assert shuffled.fingerprint() == corpus.fingerprint()
    assert (shuffled.order_hash() == corpus.order_hash()) == (shuffled.ids == corpus.ids)


@given(corpora(), st.data())
def test_fingerprint_changes_with_one_character(corpus, data):
    k = data.draw(st.integers(0, len(corpus) - 1))
    old = corpus.records[k]
    pos = data.draw(st.integers(0, len(old.text) - 1))
    new_char = data.draw(st.characters(blacklist_categories=("Cs",)).filter(lambda c: c != old.text[pos]))
    changed = list(corpus.records)
    changed[k] = Record(old.id, old.text[:pos] + new_char + old.text[pos + 1 :], old.label, old.line)
    assert Corpus(tuple(changed), "mem", "data").fingerprint() != corpus.fingerprint()


def test_fingerprint_is_unambiguous_about_pair_boundaries():
    a = corpus_of([("a", "b c", None)])
    b = corpus_of([("a b", "c", None)])
    assert a.fingerprint() != b.fingerprint()
    assert text_fingerprint(" x \n y ") == text_fingerprint("x y")


def test_subset_reordered_and_duplicate_ids():
    corpus = corpus_of([("a", "x", None), ("b", "y", None), ("c", "z", None)])
    assert corpus.subset(["c", "a"]).ids == ("a", "c")
    assert corpus.reordered(["c", "a", "b"]).ids == ("c", "a", "b")
    with pytest.raises(CorpusError, match="1 ids are not in the corpus"):
        corpus.subset(["q"])
    with pytest.raises(CorpusError, match="1 missing"):
        corpus.reordered(["a", "b"])
    with pytest.raises(CorpusError, match="1 duplicate ids"):
        corpus_of([("a", "x", None), ("a", "y", None)])


# -------------------------------------------------------------------------------- disjointness (P4)


def test_check_disjoint_by_ids_and_texts():
    final = corpus_of([("f1", "one", None), ("f2", "two words", None)], source="final.csv")
    check_disjoint(corpus_of([("t1", "three", None)], source="tune.csv"), final)
    with pytest.raises(CorpusError) as info:
        check_disjoint(corpus_of([("f1", "new", None), ("t2", " two   words", None)], source="tune.csv"), final)
    assert str(info.value) == (
        "tuning data (tune.csv) and final corpus (final.csv) overlap: 1 shared ids (e.g. 'f1'); "
        "1 shared texts (tuning id=final id, e.g. 't2'='f2')"
    )


# --------------------------------------------------------------------------------------- strata (C2)

DEMO = {"short": (0, 30), "medium": (31, 50), "long": (51, None)}


def test_assign_strata_inclusive_bounds():
    assert assign_strata([0, 30, 31, 50, 51, 9999], DEMO) == ["short", "short", "medium", "medium", "long", "long"]


@pytest.mark.parametrize(
    "strata,message",
    [
        ({"a": (0, 30), "b": (30, None)}, "length strata: 'a' and 'b' overlap"),
        ({"a": (0, None), "b": (31, 40)}, "length strata: 'a' and 'b' overlap"),
        ({"a": (0, 30), "b": (35, None)}, "length strata: a gap between 'a' and 'b': 31-34 tokens fall in no stratum"),
        ({"a": (5, 3)}, "length strata, field a: maximum 3 is not a whole number >= 5 (or None)"),
    ],
)
def test_bad_strata_definitions_are_refused(strata, message):
    with pytest.raises(CorpusError) as info:
        assign_strata([5], strata)
    assert str(info.value).startswith(message)


def test_a_length_in_no_stratum_is_refused():
    with pytest.raises(CorpusError) as info:
        assign_strata([12, 3], {"a": (10, 20)}, names=["x", "y"])
    assert str(info.value) == "length strata: text 'y' has 3 tokens, in no stratum (a 10-20)"


def test_largest_remainder():
    assert largest_remainder(60, {"s": 600, "m": 300, "l": 100}) == {"s": 36, "m": 18, "l": 6}
    assert largest_remainder(7, {"s": 600, "m": 300, "l": 100}) == {"s": 4, "m": 2, "l": 1}
    assert largest_remainder(1, {"a": 1, "b": 1}) == {"a": 1, "b": 0}
    assert largest_remainder(3, {"a": 5, "b": 0}) == {"a": 3, "b": 0}


def pool(n=400, seed=1):
    rnd = random.Random(seed)
    rows = [(f"d{i:04d}", f"text {i}", rnd.choice(["pos", "pos", "neg", "neu"])) for i in range(n)]
    corpus = corpus_of(rows)
    strata_of = {i: ("short" if k % 4 else "long") for k, i in enumerate(corpus.ids)}
    return corpus, strata_of


def test_stratified_sample_counts_and_class_mix_within_strata():
    corpus, strata_of = pool()
    sample = stratified_sample(corpus, strata_of, {"short": 60, "long": 20}, seed=3)
    labels = dict(zip(corpus.ids, corpus.labels))
    for stratum, n in (("short", 60), ("long", 20)):
        members = [i for i in corpus.ids if strata_of[i] == stratum]
        available = {c: sum(labels[i] == c for i in members) for c in ("neg", "neu", "pos")}
        got = {c: sum(labels[i] == c for i in sample.ids if strata_of[i] == stratum) for c in available}
        assert got == largest_remainder(n, available)


def test_stratified_sample_is_reproducible_and_order_independent():
    corpus, strata_of = pool()
    counts = {"short": 50, "long": 10}
    first = stratified_sample(corpus, strata_of, counts, seed=7)
    ids = list(corpus.ids)
    random.Random(0).shuffle(ids)
    again = stratified_sample(corpus.reordered(ids), strata_of, counts, seed=7)
    assert first.ids == again.ids and first.order_hash() == again.order_hash()
    assert set(stratified_sample(corpus, strata_of, counts, seed=8).ids) != set(first.ids)


def test_stratified_sample_refuses_a_thin_stratum_and_unstratified_texts():
    corpus, strata_of = pool()
    with pytest.raises(CorpusError) as info:
        stratified_sample(corpus, strata_of, {"long": 101}, seed=0)
    assert str(info.value) == "mem, stratum 'long': 101 texts requested, only 100 available"
    with pytest.raises(CorpusError, match="1 texts have no stratum"):
        stratified_sample(corpus, {i: s for i, s in strata_of.items() if i != "d0000"}, {"long": 1}, seed=0)


# ------------------------------------------------------------------------------------------- writing


def test_write_corpus_round_trip_with_extra_columns(tmp_path):
    corpus = corpus_of([("a", 'he said "hi",\r\nthen left', "x"), ("b", "plain", None), ("c", "good\rfun", "y")])
    path = tmp_path / "out.csv"
    write_corpus(corpus, path, extra={"stratum": ["short", "long", "short"], "n_tokens": [3, None, 2]})
    assert path.read_text(encoding="utf-8").splitlines()[0] == '"id","text","label","stratum","n_tokens"'

    again = load_corpus(path, require_labels=False)
    assert again.fingerprint() == corpus.fingerprint() and again.labels == ("x", None, "y")
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]
    with pytest.raises(CorpusError, match="extra column 'n' has 1 values for 3 records"):
        write_corpus(corpus, path, extra={"n": [1]})


# ----------------------------------------------------------------------------------------------- fuzz

ALPHABET = st.sampled_from(list('idtextlabel,"\n\r \t\x00{}[]:é\\') + ["\ufeff", "1", "2"])


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.one_of(
        st.binary(max_size=300),
        st.lists(ALPHABET, max_size=120).map(lambda c: "id,text,label\n" + "".join(c)).map(str.encode),
        st.lists(ALPHABET, max_size=120).map("".join).map(str.encode),
        st.lists(st.lists(st.lists(ALPHABET, max_size=6).map("".join), min_size=3, max_size=3).map(",".join))
        .map(lambda rows: "\n".join(["id,text,label", *rows]))
        .map(str.encode),
    )
)
def test_fuzz_load_corpus_returns_or_refuses(tmp_path, suffix, data):
    path = tmp_path / f"fuzz{suffix}"
    path.write_bytes(data)
    try:
        corpus = load_corpus(path, require_labels=False)
    except CorpusError as exc:
        assert "\n" not in str(exc)
    else:
        assert len(corpus) >= 1 and all(t.strip() for t in corpus.texts)
