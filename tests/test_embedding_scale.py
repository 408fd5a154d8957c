"""An embedding job at scale: exact kNN computed in blocks, vector sets kept on disk, checks in bounded memory."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pyarrow as pa
import pytest

from iteralab.campaign import vectors as vec
from iteralab.campaign.verdict import knn


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
    assert read.n_problems == 0 and read.vectors.shape == (rows, dim) and read.finite.all()
    assert peak < rows * dim * 4 / 4  # a few batches of NumPy arrays, not the 10 MB of vectors
