"""An embedding job at scale: exact kNN computed in blocks, vector sets kept on disk, checks in bounded memory."""

from __future__ import annotations

import importlib.util
import os
import tracemalloc

import numpy as np
import pyarrow as pa
import pytest

from iteralab.campaign.kinds.embedding import output as vec
from iteralab.campaign.kinds.embedding import knn


def _brute_neighbours(vectors: np.ndarray, k: int) -> list[set[int]]:
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    sims = unit @ unit.T
    np.fill_diagonal(sims, -np.inf)
    index = np.arange(len(vectors))
    return [set(np.lexsort((index, -sims[i]))[:k].tolist()) for i in range(len(vectors))]


@pytest.mark.parametrize("n,k,block_rows", [(50, 3, 3), (97, 5, 16), (40, 1, 1), (12, 11, 5), (200, 7, 64)])
def test_blockwise_knn_finds_the_exact_neighbours_whatever_the_block(monkeypatch, n, k, block_rows):
    rng = np.random.default_rng(n + k)
    vectors = rng.standard_normal((n, 6)).astype(np.float32)
    vectors[4] = vectors[2] * 2.0  # a tie: rows 2 and 4 point the same way, the lower index must win everywhere
    monkeypatch.setattr(knn, "BLOCK_BYTES", 4 * block_rows * block_rows)
    _, found = knn.knn_neighbours(vectors, k)
    assert [set(row.tolist()) for row in found] == _brute_neighbours(vectors, k)


def test_blockwise_knn_on_a_subset_of_stored_rows(tmp_path, monkeypatch):
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((60, 5)).astype(np.float32)
    labels = rng.integers(0, 3, 60)
    store = vec.RowStore(5)
    store.append(vectors[:25])
    store.append(vectors[25:])
    used = np.flatnonzero(np.arange(60) % 3 != 1)
    monkeypatch.setattr(knn, "BLOCK_BYTES", 4 * 7 * 7)
    from_store = knn.knn_correct(store, labels[used], 4, rows=used)
    assert from_store.tolist() == knn.knn_correct(vectors[used], labels[used], 4).tolist()
    assert 0 < from_store.sum() < len(used)  # some right, some wrong: the comparison means something


def test_row_store_reads_slices_and_gathers_rows():
    store = vec.RowStore(3)
    data = np.arange(30, dtype=np.float32).reshape(10, 3)
    store.append(data[:4])
    store.append(data[4:])
    assert store.shape == (10, 3) and len(store) == 10 and store.size == 30
    assert np.array_equal(store[2:7], data[2:7])
    assert np.array_equal(store[np.array([9, 0, 4])], data[[9, 0, 4]])
    assert np.array_equal(store[data[:, 0] > 12], data[data[:, 0] > 12])
    assert np.array_equal(np.asarray(store), data) and np.array_equal(store[3], data[3])


def test_reading_a_vector_file_never_holds_its_vectors(tmp_path, monkeypatch):
    rows, dim = 40_000, 64  # 10 MB of vectors
    rng = np.random.default_rng(3)
    writer = vec.VectorWriter(tmp_path / "p.parquet")
    for start in range(0, rows, 4096):
        block = rng.standard_normal((min(4096, rows - start), dim)).astype(np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        writer.write(pa.array([f"d{i}" for i in range(start, start + len(block))]), block)
    writer.close()
    monkeypatch.setattr(vec, "READ_ROWS", 2048)
    tracemalloc.start()
    read = vec.read_vectors(tmp_path / "p.parquet", normalize=True)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert read.problem_count == 0 and read.vectors.shape == (rows, dim) and read.finite.all()
    assert peak < rows * dim * 4 / 4  # a few batches of NumPy arrays, not the 10 MB of vectors


# ------------------------------------------------------------------------- data-parallel and Ray passes

DP_VARIANTS = """
[[variants]]
name = "b4"
batch_size = 4

[[variants]]
name = "b4-dp2"
batch_size = 4
data_parallel = 2

[[series]]
name = "workers"
factor = "data_parallel"
variants = ["b4", "b4-dp2"]
"""
RAY_VARIANTS = """ray_num_cpus = 2
ray_actors = 2
ray_cpus_per_actor = 0.5
ray_no_progress_timeout_s = 60

[[variants]]
name = "b4"
batch_size = 4

[[variants]]
name = "b4-ray"
batch_size = 4
engine = "ray"

[[series]]
name = "engine"
factor = "engine"
variants = ["b4", "b4-ray"]
"""


@pytest.fixture
def worker_path(monkeypatch):
    """Pass workers and Ray actors are fresh interpreters: they import this checkout and
    tests/support/fake_embedders.py."""
    from pathlib import Path

    import iteralab

    tests, src = (Path(__file__).resolve().parents[2] / "support"), Path(iteralab.__file__).resolve().parents[1]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tests), str(src)]))


def _campaign_files(tmp_path, variants: str, other: str):
    """Run a campaign of the deterministic word embedder with the one-device variant ``b4`` and ``other``; return
    the corpus ids, the stored vector files of both, and their raw-table rows."""
    from iteralab.campaign.folder import read_raw_rows
    from embedding_jobs import corpus_rows, embedding_campaign

    out = embedding_campaign(tmp_path, 'kind = "callable"\ncallable = "fake_embedders:word_embedder"', variants, "b4",
                             min_cosine=0.999999)
    rows = {r.variant: r for r in read_raw_rows(out / "raw_table.csv")}
    files = {name: vec.read_vectors(out / rows[name].prediction_file, normalize=True) for name in ("b4", other)}
    return [i for i, _, _ in corpus_rows()], files, rows, out


def _same_file_as_one_device(ids, files, rows, other):
    single, parallel = files["b4"], files[other]
    assert single.ids.to_pylist() == ids and parallel.ids.to_pylist() == ids  # corpus order, every id once
    assert parallel.dim == single.dim and parallel.problem_count == 0
    assert np.allclose(np.asarray(parallel.vectors), np.asarray(single.vectors), atol=1e-6, rtol=0)
    row = rows[other]
    assert row.status == "ok" and row.ids_match and row.format_ok and row.corpus_accepted, row.notes
    assert row.min_cosine == pytest.approx(1.0, abs=1e-6)


def test_a_data_parallel_embedding_pass_writes_the_one_device_file(tmp_path, worker_path):
    from iteralab.campaign.journal import read_journal

    ids, files, rows, out = _campaign_files(tmp_path, DP_VARIANTS, "b4-dp2")
    _same_file_as_one_device(ids, files, rows, "b4-dp2")
    finished = read_journal(out / "journal.jsonl").finished[rows["b4-dp2"].pass_id]
    shards = finished["parallel"]["shards"]
    assert len(shards) == 2 and all(s["rows"][1] > s["rows"][0] for s in shards)  # both workers wrote vectors
    assert finished["output_kind"] == "embedding_vectors"


@pytest.mark.ray  # a local Ray of its own: CI's one-process step runs it (.ci/run); test_raypass keeps one in the default run
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed (pip install iteralab[ray])")
def test_a_ray_embedding_pass_writes_the_one_device_file_in_corpus_order(tmp_path, worker_path):
    ids, files, rows, _ = _campaign_files(tmp_path, RAY_VARIANTS, "b4-ray")
    _same_file_as_one_device(ids, files, rows, "b4-ray")
    assert "row order corpus order" in rows["b4-ray"].notes


def test_cosines_stream_the_reference_against_a_pass_in_another_order(tmp_path, monkeypatch):
    """The pass's file in a shuffled order, one document missing and one id outside the corpus; the reference in
    corpus order, read in batches smaller than the corpus: each document's cosine is its own pair's."""
    from iteralab.campaign.kinds.embedding.cosine import compare_vectors
    from iteralab.campaign.kinds.expected import Expected
    from iteralab.campaign.verdict.evaluate import PredictionReader
    from iteralab.plan.protocol import parse_protocol
    from embedding_jobs import embedding_protocol

    rng = np.random.default_rng(11)
    n, dim = 50, 8
    ids = [f"d{i:02d}" for i in range(n)]
    ref = rng.standard_normal((n, dim)).astype(np.float32)
    mine = ref + 0.3 * rng.standard_normal((n, dim)).astype(np.float32)
    writer = vec.VectorWriter(tmp_path / "ref.parquet")
    writer.write(pa.array(ids), ref)
    writer.close()
    order = [int(i) for i in rng.permutation(n) if i != 7]
    writer = vec.VectorWriter(tmp_path / "pass.parquet")
    writer.write(pa.array([ids[i] for i in order] + ["stranger"]), np.concatenate([mine[order], mine[:1]]))
    writer.close()
    monkeypatch.setattr(vec, "READ_ROWS", 16)
    protocol = parse_protocol(embedding_protocol('kind = "callable"\ncallable = "m:f"', reference="b1",
                                                 variants='[[variants]]\nname = "b1"\nbatch_size = 1\n',
                                                 extra_embedding="", min_cosine=0.5).replace(
        "normalize = true", "normalize = false"))
    expected = Expected(pa.array(ids), np.zeros(n, np.int8), ("fresh", "rotten"), np.full(n, -1, np.int8))
    same = compare_vectors(tmp_path / "pass.parquet", tmp_path / "ref.parquet", PredictionReader(protocol), expected)
    truth = np.einsum("ij,ij->i", mine, ref) / (np.linalg.norm(mine, axis=1) * np.linalg.norm(ref, axis=1))
    assert np.isnan(same.cosines[7]) and same.max_abs_diff is None  # the missing document: nothing to compare
    keep = np.arange(n) != 7
    assert np.allclose(same.cosines[keep], truth[keep], atol=1e-6)
    assert truth[keep].min() < 0.99  # not a comparison of equal vectors


def test_votes_counted_in_blocks_of_rows_give_the_same_answer(monkeypatch):
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((90, 4)).astype(np.float32)
    labels = rng.integers(0, 3, 90)
    whole = knn.knn_correct(vectors, labels, 5)
    monkeypatch.setattr(knn, "VOTE_ROWS", 7)
    assert knn.knn_correct(vectors, labels, 5).tolist() == whole.tolist()
    assert 0 < whole.sum() < 90
