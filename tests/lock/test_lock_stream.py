"""``lock``, ``run``'s re-check of the lock and several-dataset protocols read each corpus in record batches
(lock/lockrecords.py, lock/datasets.py): the lock records, the refusals and the overlap between datasets
are those of a whole read, whatever the batch boundaries."""

from __future__ import annotations

import random

import pytest
from dataset_jobs import LOCKED_AT, dataset_protocol, write_dataset_csv

from oracles import check_datasets_disjoint, corpus_fingerprint, load_inputs

from iteralab.lock import lockrecords
from iteralab.lock.inputs import check_inputs, fingerprint_inputs, lock
from iteralab.campaign.runner import prepare
from iteralab.errors import CorpusError, ProtocolError
from iteralab.plan import scan
from iteralab.plan.corpus import load_corpus
from iteralab.plan.lockfile import open_locked, read_protocol_file

CLASSES = ("plot", "fresh", "rotten")


@pytest.fixture(autouse=True)
def small_batches(monkeypatch):
    """Batches of 7 rows and records written 5 at a time: each dataset below spans several of both."""
    monkeypatch.setattr(scan, "BATCH_ROWS", 7)
    monkeypatch.setattr(scan, "HASH_ROWS", 5)
    monkeypatch.setattr(lockrecords, "HASH_ROWS", 5)


def _rows(prefix: str, n: int = 40, seed: int = 0, shuffle: bool = True):
    """Rows with ids out of order, non-ASCII ids and texts, and texts with commas and line breaks."""
    rows = [(f"{prefix}{i:03d}" + ("é" if i % 7 == 0 else ""),
             f"{prefix} text {i} " + "ü" * (i % 3) + (", with a comma" if i % 5 == 0 else "")
             + ("\nand a second line" if i % 11 == 0 else ""), CLASSES[i % 3]) for i in range(n)]
    if shuffle:
        random.Random(seed).shuffle(rows)
    return rows


def _whole_inputs(path):
    """The fingerprints as the whole read makes them (load_inputs + corpus_fingerprint), per corpus."""
    source = read_protocol_file(path)
    if source.protocol.datasets:
        return {d.name: corpus_fingerprint(load_inputs(source, d)[0]) for d in source.protocol.datasets}
    return {"corpus": corpus_fingerprint(load_inputs(source)[0])}


def test_streamed_lock_records_equal_those_of_the_whole_read(tmp_path):
    path = dataset_protocol(tmp_path, {"a": _rows("a", 40, seed=1), "b": _rows("b", 23, seed=2, shuffle=False)},
                            tuning=[("x1", "a tuning text", "plot"), ("x0", "another tuning text", "fresh")])
    inputs = fingerprint_inputs(path)
    assert inputs["datasets"] == _whole_inputs(path)
    source = read_protocol_file(path)
    assert inputs["tuning"] == corpus_fingerprint(load_inputs(source, source.protocol.datasets[0])[1])
    entry = lock(path, now=LOCKED_AT)
    assert entry.inputs["datasets"] == inputs["datasets"]
    assert open_locked(path).entry == entry
    check_inputs(open_locked(path))  # the re-check at run agrees with what was locked


def test_one_corpus_lock_records_equal_those_of_the_whole_read(tmp_path):
    path = dataset_protocol(tmp_path, {"a": _rows("a", 45, seed=3)})
    text = path.read_text(encoding="utf-8").replace('[[datasets]]\nname = "a"\npath = "a.csv"\n\n', "")
    path.write_text(text.replace("[corpus]\n", '[corpus]\npath = "a.csv"\n'), encoding="utf-8")
    entry = lock(path, now=LOCKED_AT)
    assert entry.inputs["corpus"] == _whole_inputs(path)["corpus"]
    # a label changed in a late batch: the re-check says which, from records read in batches again
    rows = _rows("a", 45, seed=3)
    changed = rows[40]
    rows[40] = (changed[0], changed[1], next(c for c in CLASSES if c != changed[2]))
    write_dataset_csv(tmp_path / "a.csv", rows)
    with pytest.raises(ProtocolError, match=f"corpus: 1 reference label changed \\(e.g. '{changed[0]}'"):
        check_inputs(open_locked(path))


def test_an_overlap_in_a_later_batch_is_named_as_the_whole_read_names_it(tmp_path):
    a, b = _rows("a", 40, seed=4), _rows("b", 40, seed=5)
    b[33] = (a[29][0], "a text of its own", "plot")  # the same id, in b's fifth batch
    path = dataset_protocol(tmp_path / "ids", {"a": a, "b": b})
    with pytest.raises(CorpusError) as refused:
        lock(path)
    assert str(refused.value) == f"datasets 'a' and 'b' overlap: both hold id {a[29][0]!r}"
    b = _rows("b", 40, seed=5)
    b[36] = ("b-new", "  " + a[31][1].replace(" ", "   ") + " ", "plot")  # the same text but for its spacing
    path = dataset_protocol(tmp_path / "texts", {"a": a, "b": b})
    with pytest.raises(CorpusError) as refused:
        lock(path)
    source = read_protocol_file(path)
    with pytest.raises(CorpusError) as whole:
        check_datasets_disjoint([(d.name, load_inputs(source, d)[0]) for d in source.protocol.datasets])
    assert str(refused.value) == str(whole.value) and f"id {a[31][0]!r} in 'a', id 'b-new' in 'b'" in str(whole.value)
    assert not (tmp_path / "texts" / "protocol.toml.lock.json").exists()


def test_the_first_overlap_in_file_order_is_the_one_named(tmp_path):
    a, b, c = _rows("a", 30, seed=6), _rows("b", 30, seed=7), _rows("c", 30, seed=8)
    c[25] = (a[3][0], "c's own text", "plot")  # c overlaps a (late in c) …
    c[20] = ("c-x", b[10][1], "fresh")  # … and b, earlier in c: that one is named
    path = dataset_protocol(tmp_path, {"a": a, "b": b, "c": c})
    with pytest.raises(CorpusError, match=f"datasets 'b' and 'c' overlap: the same text .*id {b[10][0]!r} in 'b', "
                                          "id 'c-x' in 'c'"):
        lock(path)


def test_colliding_digests_without_an_overlap_lock_as_usual(tmp_path, monkeypatch):
    """Equal 64-bit digests only send the suspect documents to the exact check, which finds them distinct."""
    path = dataset_protocol(tmp_path, {"a": _rows("a", 20, seed=9), "b": _rows("b", 20, seed=10)})
    expected = _whole_inputs(path)
    monkeypatch.setattr(lockrecords, "id_key", lambda value: 7)
    monkeypatch.setattr(lockrecords, "text_key", lambda text: 11)
    assert lock(path, now=LOCKED_AT).inputs["datasets"] == expected


def test_a_bad_row_in_a_later_batch_of_a_dataset_is_the_one_line_error(tmp_path):
    b = _rows("b", 40, seed=11, shuffle=False)
    b[37] = (b[37][0], b[37][1], "sideways")
    path = dataset_protocol(tmp_path, {"a": _rows("a", 30, seed=12), "b": b})
    with pytest.raises(CorpusError) as refused:
        lock(path)
    with pytest.raises(CorpusError) as whole:
        load_corpus(tmp_path / "b.csv", classes=list(CLASSES))
    line = 2 + 37 + sum(text.count("\n") for _, text, _ in b[:37])  # the header, then rows spanning lines
    assert str(refused.value) == str(whole.value) and f"b.csv line {line}, field label" in str(refused.value)
    assert "\n" not in str(refused.value) and refused.value.hint == whole.value.hint


def test_dataset_copies_are_written_while_read_in_batches(tmp_path):
    from iteralab.plan.corpus import write_corpus

    a, b = _rows("a", 30, seed=13), _rows("b", 17, seed=14)
    path = dataset_protocol(tmp_path, {"a": a, "b": b}, tuning=[("x1", "a tuning text", "plot")])
    lock(path, now=LOCKED_AT)
    campaign = prepare(path, tmp_path / "out")
    source = read_protocol_file(path)
    for record, dataset in zip(campaign.datasets, source.protocol.datasets):
        corpus = load_inputs(source, dataset)[0]
        write_corpus(corpus, tmp_path / f"{dataset.name}-whole.csv", extra={"stratum": [""] * len(corpus)})
        assert (tmp_path / "out" / record.file).read_bytes() == (tmp_path / f"{dataset.name}-whole.csv").read_bytes()
        assert (record.fingerprint, record.order_hash, record.size) == (
            corpus.fingerprint(), corpus.order_hash(), len(corpus))
    assert campaign.tuning["size"] == 1


def test_a_tuning_overlap_in_a_later_batch_is_refused_as_the_whole_read_refuses_it(tmp_path):
    a = _rows("a", 40, seed=15)
    tuning = [("x1", "a tuning text", "plot"), ("x2", a[34][1].upper().lower(), "fresh")]
    path = dataset_protocol(tmp_path, {"b": _rows("b", 20, seed=16), "a": a}, tuning=tuning)
    with pytest.raises(CorpusError) as refused:
        lock(path)
    source = read_protocol_file(path)
    with pytest.raises(CorpusError) as whole:
        load_inputs(source, source.protocol.datasets[1])
    assert str(refused.value) == str(whole.value) and "a.csv) overlap" in str(refused.value)


def test_tuning_digests_colliding_without_an_overlap_lock_as_usual(tmp_path, monkeypatch):
    path = dataset_protocol(tmp_path, {"a": _rows("a", 20, seed=17)}, tuning=[("x1", "a tuning text", "plot")])
    expected = _whole_inputs(path)
    monkeypatch.setattr(lockrecords, "text_key", lambda text: 11)
    assert lock(path, now=LOCKED_AT).inputs["datasets"] == expected


def test_lock_records_of_unlabelled_rows_and_unordered_ids_equal_the_whole_read(tmp_path):
    rows = [(r[0], r[1], "" if i % 4 == 0 else r[2]) for i, r in enumerate(_rows("u", 33, seed=18))]
    write_dataset_csv(tmp_path / "u.csv", rows)
    records = lockrecords.LockRecords()
    scanned = scan.scan_corpus(tmp_path / "u.csv", require_labels=False, sinks=[records])
    assert records.fingerprint(scanned) == corpus_fingerprint(load_corpus(tmp_path / "u.csv", require_labels=False))


def test_a_tuning_split_overlapping_the_corpus_is_named_as_the_whole_read_names_it(tmp_path):
    """The streamed lock finds the overlap by 64-bit digests, then keeps only the suspect documents of both files:
    its one line (counts and examples) is the whole-read check's, word for word, across several batches."""
    rows = _rows("a", 40, seed=5)
    tuning = [(rows[30][0], "a text of its own", "plot"), ("x1", "  " + rows[3][1].upper().lower() + " ", "fresh"),
              ("x2", "never seen", "rotten"), (rows[8][0], rows[8][1], "plot")]
    path = dataset_protocol(tmp_path, {"a": rows}, tuning=tuning)
    text = path.read_text(encoding="utf-8").replace('[[datasets]]\nname = "a"\npath = "a.csv"\n\n', "")
    path.write_text(text.replace("[corpus]\n", '[corpus]\npath = "a.csv"\n'), encoding="utf-8")
    with pytest.raises(CorpusError) as whole:
        load_inputs(read_protocol_file(path))
    assert "2 shared ids" in whole.value.message and "2 shared texts" in whole.value.message
    with pytest.raises(CorpusError) as streamed:
        lock(path, now=LOCKED_AT)
    assert (streamed.value.message, streamed.value.hint) == (whole.value.message, whole.value.hint)
    assert not path.with_name(path.name + ".lock.json").exists()
