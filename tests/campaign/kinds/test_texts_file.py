"""The prediction file of a generation pass: written in streamed batches, read back in record batches, every row
checked (its problems named with their row number), texts kept as Arrow arrays."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from iteralab.campaign.kinds.generation import output as texts_module
from iteralab.campaign.records import GENERATED_TEXTS, OUTPUT_KINDS, PassOutput
from iteralab.campaign.kinds.generation.output import FINISH_REASONS, TextWriter, read_texts, schema
from iteralab.common.files import sha256_file


def _rows(n: int, seed: int = 0) -> tuple[list[str], list[str], np.ndarray, list[str]]:
    rng = np.random.default_rng(seed)
    ids = [f"doc-{i:06d}" for i in range(n)]
    texts = [f"answer {i} " + "é" * int(rng.integers(0, 5)) for i in range(n)]
    tokens = rng.integers(0, 17, n).astype(np.int32)
    finish = [FINISH_REASONS[k] for k in rng.integers(0, 3, n)]
    return ids, texts, tokens, finish


def _table(**columns) -> pa.Table:
    good = {"id": pa.array(["a", "b", "c"]), "text": pa.array(["x", "y", "z"]),
            "tokens": pa.array([1, 2, 3], pa.int32()), "finish": pa.array(["stop", "eos", "length"])}
    good.update(columns)
    return pa.table(good)


def test_round_trip_in_several_batches(tmp_path):
    ids, texts, tokens, finish = _rows(50)
    path = tmp_path / "predictions" / "p1.parquet"
    writer = TextWriter(path)
    for start in range(0, 50, 8):  # batches as a pass hands them over
        stop = start + 8
        writer.write(pa.array(ids[start:stop]), texts[start:stop], tokens[start:stop], finish[start:stop])
    assert not path.exists()  # only complete files exist under their own name
    digest = writer.close()
    assert digest == sha256_file(path)
    assert not writer.temporary.exists()
    assert pq.read_schema(path).metadata[b"iteralab.output"] == GENERATED_TEXTS.encode()
    assert GENERATED_TEXTS in OUTPUT_KINDS
    assert PassOutput(kind=GENERATED_TEXTS).to_json()["output_kind"] == GENERATED_TEXTS

    got = read_texts(path, max_new_tokens=16, allow_empty=False)
    assert got.problems == () and got.problem_count == 0 and got.records == 50
    assert got.ids.to_pylist() == ids and got.texts.to_pylist() == texts
    assert np.array_equal(got.tokens, tokens) and got.tokens.dtype == np.int32
    assert [FINISH_REASONS[c] for c in got.finish] == finish and got.finish.dtype == np.int8
    assert got.tokens_measured


def test_token_counts_as_a_plain_list_and_texts_as_arrow(tmp_path):
    writer = TextWriter(tmp_path / "p.parquet")
    writer.write(pa.array(["a", "b"]), pa.array(["one", "two"]), [4, 0], ["eos", "stop"])
    writer.close()
    got = read_texts(tmp_path / "p.parquet", max_new_tokens=4, allow_empty=False)
    assert got.problems == () and got.tokens.tolist() == [4, 0] and got.texts.to_pylist() == ["one", "two"]


def test_a_batch_of_mismatched_lengths_is_refused(tmp_path):
    writer = TextWriter(tmp_path / "p.parquet")
    with pytest.raises(ValueError, match="as many texts"):
        writer.write(pa.array(["a", "b"]), ["only one"], None, ["stop", "stop"])


def test_nothing_written_gives_an_empty_readable_file(tmp_path):
    path = tmp_path / "p.parquet"
    digest = TextWriter(path).close()
    assert digest == sha256_file(path)
    got = read_texts(path, max_new_tokens=8, allow_empty=False)
    assert got.records == 0 and got.problems == () and len(got.ids) == 0
    assert not got.tokens_measured and got.mean_tokens is None and np.isnan(got.length_share)


def test_tokens_null_means_not_measured(tmp_path):
    ids, texts, _, finish = _rows(10)
    writer = TextWriter(tmp_path / "p.parquet")
    writer.write(pa.array(ids), texts, None, finish)
    writer.close()
    assert pq.read_table(tmp_path / "p.parquet").column("tokens").null_count == 10
    got = read_texts(tmp_path / "p.parquet", max_new_tokens=16, allow_empty=False)
    assert got.problems == ()
    assert (got.tokens == -1).all() and not got.tokens_measured and got.mean_tokens is None


def test_length_share_and_mean_tokens(tmp_path):
    ids, texts, tokens, finish = _rows(40, seed=3)
    writer = TextWriter(tmp_path / "p.parquet")
    writer.write(pa.array(ids), texts, tokens, finish)
    writer.close()
    got = read_texts(tmp_path / "p.parquet", max_new_tokens=16, allow_empty=False)
    assert got.length_share == pytest.approx(finish.count("length") / 40)
    assert 0 < got.length_share < 1
    assert got.mean_tokens == pytest.approx(float(np.mean(tokens)))


@pytest.mark.parametrize("columns, row, expected", [
    ({"id": pa.array(["a", None, "c"])}, 2, "id must be a non-empty string"),
    ({"id": pa.array(["a", "b", ""])}, 3, "id must be a non-empty string"),
    ({"text": pa.array(["x", None, "z"])}, 2, "text missing"),
    ({"text": pa.array(["x", "y", ""])}, 3, "text is empty"),
    ({"tokens": pa.array([1, 17, 3], pa.int32())}, 2, "tokens 17 exceeds max_new_tokens = 16"),
    ({"tokens": pa.array([1, 2, -4], pa.int32())}, 3, "tokens -4 is negative"),
    ({"finish": pa.array(["stop", "truncated", "eos"])}, 2,
     "finish reason 'truncated' is not one of stop, eos, length"),
    ({"finish": pa.array([None, "stop", "eos"])}, 1, "finish reason null is not one of"),
])
def test_each_row_problem_is_named_with_its_row(tmp_path, columns, row, expected):
    pq.write_table(_table(**columns), tmp_path / "bad.parquet")
    got = read_texts(tmp_path / "bad.parquet", max_new_tokens=16, allow_empty=False)
    assert got.problem_count == 1
    assert got.problems[0].startswith(f"row {row}: {expected}")


def test_an_empty_text_is_accepted_when_declared(tmp_path):
    pq.write_table(_table(text=pa.array(["x", "", "z"])), tmp_path / "p.parquet")
    assert read_texts(tmp_path / "p.parquet", max_new_tokens=16, allow_empty=True).problems == ()
    assert read_texts(tmp_path / "p.parquet", max_new_tokens=16, allow_empty=False).problem_count == 1


def test_problems_across_batches_keep_their_file_row_numbers(tmp_path, monkeypatch):
    monkeypatch.setattr(texts_module, "READ_ROWS", 10)
    ids, texts, tokens, finish = _rows(45)
    for row in (3, 14, 27, 28, 33, 44):  # 0-based: rows 4, 15, 28, 29, 34, 45 of the file
        tokens[row] = 99
    pq.write_table(pa.table({"id": ids, "text": texts, "tokens": pa.array(tokens), "finish": finish}),
                   tmp_path / "p.parquet")
    got = read_texts(tmp_path / "p.parquet", max_new_tokens=16, allow_empty=False)
    assert got.problem_count == 6
    assert [p.split(":")[0] for p in got.problems] == ["row 4", "row 15", "row 28", "row 29", "row 34"]


def test_a_row_without_id_is_left_out_of_the_arrays(tmp_path):
    pq.write_table(_table(id=pa.array(["a", None, "c"])), tmp_path / "p.parquet")
    got = read_texts(tmp_path / "p.parquet", max_new_tokens=16, allow_empty=False)
    assert got.records == 3 and got.ids.to_pylist() == ["a", "c"] and got.texts.to_pylist() == ["x", "z"]
    assert got.tokens.tolist() == [1, 3] and got.finish.tolist() == [0, 2]


@pytest.mark.parametrize("table, expected", [
    (pa.table({"id": ["a"], "text": ["x"], "tokens": pa.array([1], pa.int32())}), "columns must be exactly"),
    (pa.table({"id": ["a"], "text": ["x"], "finish": ["stop"], "tokens": pa.array([1], pa.int32())}),
     "columns must be exactly"),
    (_table(tokens=pa.array([1.0, 2.0, 3.0])), "column types must be"),
    (_table(id=pa.array([1, 2, 3])), "column types must be"),
])
def test_wrong_columns_or_types_are_one_problem(tmp_path, table, expected):
    pq.write_table(table, tmp_path / "p.parquet")
    got = read_texts(tmp_path / "p.parquet", max_new_tokens=16, allow_empty=False)
    assert got.problem_count == 1 and got.problems[0].startswith(expected) and len(got.ids) == 0


def test_a_file_that_is_not_parquet_is_a_problem_not_an_exception(tmp_path):
    (tmp_path / "p.parquet").write_text("id,text\na,x\n")
    got = read_texts(tmp_path / "p.parquet", max_new_tokens=16, allow_empty=False)
    assert got.problem_count == 1 and got.problems[0].startswith("not a readable Parquet file")
    missing = read_texts(tmp_path / "absent.parquet", max_new_tokens=16, allow_empty=False)
    assert missing.problems[0].startswith("not a readable Parquet file")


def test_the_writer_schema_is_the_contract():
    assert schema().names == ["id", "text", "tokens", "finish"]
    assert [str(t) for t in schema().types] == ["string", "string", "int32", "string"]


def test_reading_streams_batches_and_never_holds_the_texts_as_python_strings(tmp_path, monkeypatch):
    n = 60_000
    ids = pa.array([f"doc-{i:06d}" for i in range(n)])
    texts = pa.array(["a generated answer of about fifty characters, no more"] * n)
    pq.write_table(pa.table({"id": ids, "text": texts, "tokens": pa.array(np.full(n, 12, np.int32)),
                             "finish": pa.array(["eos"] * n)}, schema=schema()), tmp_path / "p.parquet")
    del ids, texts
    sizes = []
    original = pq.ParquetFile.iter_batches

    def counted(self, *args, **kwargs):
        for batch in original(self, *args, **kwargs):
            sizes.append(len(batch))
            yield batch

    monkeypatch.setattr(texts_module, "READ_ROWS", 1000)
    monkeypatch.setattr(pq.ParquetFile, "iter_batches", counted)
    tracemalloc.start()
    try:
        got = read_texts(tmp_path / "p.parquet", max_new_tokens=16, allow_empty=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sum(sizes) == n and max(sizes) <= 1000 and len(sizes) >= n // 1000
    assert isinstance(got.ids, pa.Array) and isinstance(got.texts, pa.Array) and got.texts.type == pa.string()
    assert isinstance(got.tokens, np.ndarray) and isinstance(got.finish, np.ndarray)
    assert got.problems == () and got.records == n and len(got.texts) == n
    # A list of the texts as Python strings alone would take n × (49 + 53) bytes plus 8 per list slot (~6.6 MB);
    # the reader's own Python allocations stay a small fraction of it (the Arrow buffers are not traced).
    as_python = n * (49 + 53 + 8)
    assert peak < as_python / 4, f"peak {peak} B of Python allocations while reading {n} rows"
