"""Reading a campaign's files in pieces gives what reading them whole gave: a prediction file read in record
batches, the corpus copy's ids and labels read in small blocks, and two output sets compared in blocks. Each
test makes the pieces tiny so that every check crosses piece boundaries, and compares with one piece."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from iteralab.campaign.kinds.classification import output as predictions
from iteralab.campaign.kinds import expected as expected_module
from iteralab.campaign.kinds.expected import Expected, load_expected
from iteralab.campaign.verdict.evaluate import evaluate_set
from iteralab.campaign.kinds.classification import compare
from iteralab.campaign.kinds.classification.compare import compare_outputs, compare_rows_with_file
from iteralab.campaign.kinds.classification.output import encode, read_predictions
from protocol_factory import ids_protocol

CLASSES = ("plot", "fresh", "rotten")
PROTOCOL = ids_protocol("batched-reads")


def write_table(path: Path, ids: list, labels: list, probs: list) -> Path:
    table = pa.Table.from_arrays([pa.array(ids, pa.string()), pa.array(labels, pa.string()),
                                  pa.array(probs, pa.list_(pa.float32(), 3))], names=["id", "label", "probs"])
    pq.write_table(table, path, row_group_size=4)
    return path


def read_both(monkeypatch, path: Path) -> tuple:
    whole = read_predictions(path, CLASSES, 1e-3)
    monkeypatch.setattr(predictions, "READ_BATCH", 3)
    return whole, read_predictions(path, CLASSES, 1e-3)


def test_format_problems_name_the_same_rows_when_read_in_batches(tmp_path, monkeypatch):
    good = [0.8, 0.1, 0.1]
    ids = ["a", "b", None, "d", "e", "f", "g", "h", "", "j", "k"]
    labels = ["plot", "plot", "plot", "plot", "nope", "plot", "plot", "plot", "plot", "fresh", "plot"]
    probs = [good, good, good, good, good, good, [0.3, 0.1, 0.1], None, good, good, [0.8, 0.1, 0.1]]
    whole, batched = read_both(monkeypatch, write_table(tmp_path / "p.parquet", ids, labels, probs))
    assert batched.problems == whole.problems
    assert batched.problems == ("row 3: id must be a non-empty string", "row 5: label 'nope' is not one of the classes",
                                "row 7: probs sum to 0.500000, not 1", "row 8: probs must be a list of 3 numbers",
                                "row 9: id must be a non-empty string")
    assert batched.problem_count == whole.problem_count == 6  # row 10 too: its label is not the most probable class
    assert batched.records == 11
    assert batched.ids.to_pylist() == [i for i in ids if i is not None]  # a record without an id is counted only
    assert batched.labels.tolist() == whole.labels.tolist()
    assert np.array_equal(batched.probs, whole.probs, equal_nan=True)


def test_a_wrong_column_type_is_refused_before_any_row_is_read(tmp_path):
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"id": pa.array([1, 2]), "label": ["plot", "plot"],
                             "probs": pa.array([[0.8, 0.1, 0.1]] * 2, pa.list_(pa.float32(), 3))}), path)
    preds = read_predictions(path, CLASSES, 1e-3)
    assert preds.records == 2 and preds.problem_count == 1 and len(preds.ids) == 0
    assert preds.problems[0].startswith("column types must be id: string, label: string")


def test_a_duplicated_id_in_another_batch_is_still_named(tmp_path, monkeypatch):
    ids = [f"d{i}" for i in range(10)]
    observed = ids + ["d2"]  # the repeat is three batches after the first record
    path = tmp_path / "p.parquet"
    path.write_bytes(encode(pa.array(observed, pa.string()), list(CLASSES),
                            np.tile(np.asarray([0.8, 0.1, 0.1], np.float32), (len(observed), 1))))
    monkeypatch.setattr(predictions, "READ_BATCH", 3)
    verdict = evaluate_set(read_predictions(path, CLASSES, 1e-3), PROTOCOL,
                           Expected.of(ids, {i: "plot" for i in ids}, {}, CLASSES)).to_json()
    assert (verdict["ids_match"], verdict["duplicates"], verdict["missing"], verdict["extra"]) == (False, 1, 0, 0)
    assert verdict["examples"]["duplicates"] == ["d2"]


def test_expected_ids_labels_and_strata_read_in_small_blocks(tmp_path, monkeypatch):
    rows = [(f"d{i}", f"text {i}, with \"quotes\"\nand a line break" if i % 4 == 0 else f"text {i}",
             ["plot", "fresh", "rotten", "other"][i % 4], ["short", "long", ""][i % 3]) for i in range(40)]
    (tmp_path / "inputs").mkdir()
    with open(tmp_path / "inputs" / "corpus.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, quoting=csv.QUOTE_ALL, lineterminator="\n")
        writer.writerow(["id", "text", "label", "stratum"])
        writer.writerows(rows)
    monkeypatch.setattr(expected_module, "READ_BLOCK", 64)  # a few records per block; strata first seen in later blocks
    got = load_expected(tmp_path, CLASSES)
    want = Expected.of([r[0] for r in rows], {r[0]: r[2] for r in rows}, {r[0]: r[3] for r in rows}, CLASSES)
    assert got.ids.to_pylist() == want.ids.to_pylist()
    assert got.labels.tolist() == want.labels.tolist() and -1 in got.labels.tolist()
    assert got.stratum_names == want.stratum_names == ("long", "short")
    assert got.strata.tolist() == want.strata.tolist() and -1 in got.strata.tolist()


@pytest.mark.parametrize("order", ["same", "shuffled"])
def test_outputs_compared_in_blocks_agree_with_one_block(tmp_path, monkeypatch, order):
    rng = np.random.default_rng(3)
    ids = [f"d{i}" for i in range(25)]
    a = rng.dirichlet(np.ones(3), size=25).astype(np.float32)
    b = a.copy()
    b[[4, 17]] = np.roll(b[[4, 17]], 1, axis=1)  # two records change label and probabilities
    other = list(rng.permutation(25)) if order == "shuffled" else list(range(25))
    pa_ = tmp_path / "a.parquet"
    pb = tmp_path / "b.parquet"
    pa_.write_bytes(encode(pa.array(ids, pa.string()), list(CLASSES), a))
    pb.write_bytes(encode(pa.array([ids[i] for i in other], pa.string()), list(CLASSES), b[other]))
    sa, sb = read_predictions(pa_, CLASSES, 1e-3), read_predictions(pb, CLASSES, 1e-3)
    whole = compare_outputs(sa, sb)
    monkeypatch.setattr(compare, "BLOCK", 4)
    blocks = compare_outputs(sa, sb)
    assert blocks == whole
    if order == "same":  # the second file streamed in batches of 3 rows against the first set
        monkeypatch.setattr(compare, "label_prob_batches", lambda path, classes, rows: predictions.label_prob_batches(
            path, classes, rows=3))
        streamed = compare_rows_with_file(sa, pb, CLASSES)
        assert streamed == whole
        assert compare_rows_with_file(read_predictions(pa_, CLASSES, 1e-3), pa_, CLASSES).identical
    labels_a, labels_b = a.argmax(axis=1), b.argmax(axis=1)
    assert blocks.label_agreement == float(np.mean(labels_a == labels_b)) < 1.0
    assert blocks.max_abs_prob_diff == float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max())
    assert blocks.same_ids and not blocks.identical


@pytest.mark.parametrize("change", [None, 0, 4, 9, "null", "shorter"])
def test_ids_read_against_the_corpus_ids_are_the_files_own(tmp_path, monkeypatch, change):
    """A file read with the corpus's ids at hand holds its own ids, whether they match them in order or
    differ from some batch on (a changed id, a record without one, a shorter file)."""
    corpus = [f"d{i}" for i in range(10)]
    ids: list = list(corpus)
    if change == "null":
        ids[7] = None
    elif change == "shorter":
        ids = ids[:-1]
    elif change is not None:
        ids[change] = "x"
    path = write_table(tmp_path / "p.parquet", ids, ["plot"] * len(ids), [[0.8, 0.1, 0.1]] * len(ids))
    monkeypatch.setattr(predictions, "READ_BATCH", 3)
    like = pa.array(corpus, pa.string())
    preds = read_predictions(path, CLASSES, 1e-3, like=like)
    assert preds.ids.to_pylist() == [i for i in ids if i is not None]
    assert preds.records == len(ids) and len(preds.labels) == len(preds.probs) == len(preds.ids)
    if change is None:
        assert preds.ids is like  # the same ids in the same order: the corpus array is shared, not copied
    verdict = evaluate_set(preds, PROTOCOL, Expected.of(corpus, {i: "plot" for i in corpus}, {}, CLASSES)).to_json()
    assert verdict["ids_match"] == (change is None)


def test_corpus_digests_of_ascending_ids_are_streamed_and_equal_the_loaders(tmp_path, monkeypatch):
    """A copy whose ids ascend is hashed in one streamed read; ids that stop ascending (or repeat) fall back to
    sorting the whole file: either way the digests are plan.corpus's and a repeated id is counted."""
    from iteralab.campaign import folder
    from iteralab.plan.corpus import load_corpus, write_corpus

    monkeypatch.setattr(folder, "DIGEST_BLOCK", 256)  # many pieces: the order is checked across them too
    rows = [(f"a{i:03d}", f"text {i}\r\nwith \"quotes\", é" if i % 7 == 0 else f"t{i}", "xy"[i % 2])
            for i in range(300)] + [("é", "accent", "x"), ("\U0001F600", "astral", "y")]
    swapped = rows[:200] + [rows[201], rows[200]] + rows[202:]  # two neighbours swapped, pieces apart from the start
    for case, data in (("ascending", rows), ("not ascending", rows[150:] + rows[:150]), ("swapped", swapped)):
        source = tmp_path / f"{case}.csv"
        with open(source, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(["id", "text", "label"])
            writer.writerows(data)
        corpus = load_corpus(source, classes=["x", "y"])
        copy = tmp_path / f"{case}-copy.csv"
        write_corpus(corpus, copy)
        streamed = folder._ascending_digests(copy, ["x", "y"])
        assert (streamed is not None) == (case == "ascending")
        digests = folder.corpus_digests(copy, ["x", "y"])
        assert (digests.size, digests.fingerprint, digests.order_hash) == (302, corpus.fingerprint(),
                                                                           corpus.order_hash())
        assert (digests.duplicate_ids, digests.labels_outside) == (0, 0)
    repeated = tmp_path / "repeated.csv"
    with open(repeated, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, quoting=csv.QUOTE_ALL, lineterminator="\n")
        writer.writerow(["id", "text", "label"])
        writer.writerows([("a", "one", "x"), ("b", "two", "x"), ("b", "three", "z")])
    assert folder._ascending_digests(repeated, ["x"]) is None
    assert (folder.corpus_digests(repeated, ["x"]).duplicate_ids, folder.corpus_digests(repeated, ["x"]).labels_outside
            ) == (1, 1)


def test_labels_and_probabilities_streamed_from_a_file_are_those_read_whole(tmp_path):
    """``label_prob_batches`` (labels read as dictionary codes, never decoded): the class codes and rows that
    ``read_predictions`` gives, a label outside the classes and a missing one included."""
    ids = [f"d{i}" for i in range(11)]
    labels = ["plot", "fresh", "rotten", "nope", None, "fresh", "plot", "rotten", "fresh", "plot", "plot"]
    probs = [[0.6, 0.3, 0.1]] * 11
    path = write_table(tmp_path / "p.parquet", ids, labels, probs)
    whole = read_predictions(path, CLASSES, 1e-3)
    parts = list(predictions.label_prob_batches(path, CLASSES, rows=3))
    assert len(parts) > 3  # batches of at most 3 rows (row groups of 4 cut them further)
    assert np.concatenate([c for c, _ in parts]).tolist() == whole.labels.tolist() == \
        [0, 1, 2, -1, -1, 1, 0, 2, 1, 0, 0]
    assert np.array_equal(np.concatenate([m for _, m in parts]), whole.probs)


@pytest.mark.parametrize("k", [1, 2, 3, 7])
def test_row_statistics_column_by_column_equal_numpys_row_reductions(k, monkeypatch):
    """Range, float64 sum and first-largest index of each row: the same values computed column by column (few
    classes) as with NumPy's reductions along the row, NaN, ±inf, values out of range and ties included."""
    rng = np.random.default_rng(k)
    m = rng.random((400, k)).astype(np.float32)
    m /= m.sum(axis=1, keepdims=True)
    for value, share in ((np.nan, 0.05), (np.inf, 0.03), (-np.inf, 0.02), (-0.5, 0.03), (1.5, 0.03), (m[0, 0], 0.1)):
        m[rng.random(m.shape) < share] = value
    columns = predictions._row_stats(m)
    monkeypatch.setattr(predictions, "COLUMNWISE_CLASSES", 0)
    rows = predictions._row_stats(m)
    assert np.array_equal(columns[0], rows[0]) and not columns[0].all() and columns[0].any()
    assert np.array_equal(columns[1], rows[1], equal_nan=True)
    assert np.array_equal(columns[2], rows[2])


def test_labels_are_written_as_class_indices_and_plain_string_labels_read_alike(tmp_path):
    """The writer stores each label as an index into the class names (no string per row); a file whose labels
    are plain strings, as earlier versions wrote, reads to the same arrays, a label outside the classes
    included."""
    ids = [f"d{i}" for i in range(7)]
    probs = np.random.default_rng(5).dirichlet(np.ones(3), size=7).astype(np.float32)
    written = tmp_path / "written.parquet"
    written.write_bytes(encode(pa.array(ids, pa.string()), list(CLASSES), probs))
    label_type = pq.read_schema(written).field("label").type
    assert pa.types.is_dictionary(label_type) and label_type.index_type == pa.int8()
    assert pq.read_table(written).column("label").to_pylist() == [CLASSES[i] for i in probs.argmax(axis=1)]
    labels = [CLASSES[i] for i in probs.argmax(axis=1)]
    labels[2] = "meh"
    plain = write_table(tmp_path / "plain.parquet", ids, labels, probs.tolist())
    dictionary = tmp_path / "dictionary.parquet"
    pq.write_table(pq.read_table(plain).cast(pa.schema([
        ("id", pa.string()), ("label", pa.dictionary(pa.int8(), pa.string())), ("probs", pa.list_(pa.float32(), 3))])),
        dictionary, row_group_size=4)
    a, b = read_predictions(plain, CLASSES, 1e-3), read_predictions(dictionary, CLASSES, 1e-3)
    assert a.labels.tolist() == b.labels.tolist() == [CLASSES.index(x) if x in CLASSES else -1 for x in labels]
    with_null = pa.array(labels[:3] + [None] + labels[4:], pa.string())  # the lookup itself, either column type
    codes = predictions._LabelCodes(CLASSES)
    assert codes(with_null).tolist() == codes(pc.dictionary_encode(with_null)).tolist() \
        == [CLASSES.index(x) if x in CLASSES else -1 for x in labels[:3]] + [-1] + a.labels.tolist()[4:]
    assert a.problems == b.problems == ("row 3: label 'meh' is not one of the classes",)
    assert a.ids.equals(b.ids) and np.array_equal(a.probs, b.probs)
