"""The arithmetic of an embedding job's checks, on NumPy arrays, in blocks: leave-one-out kNN label accuracy by
cosine (never an n × n matrix: :data:`BLOCK_BYTES` of similarities at a time), retrieval recall@k of queries among
the documents, and per-row cosines and largest absolute differences of two aligned sets of vectors. Reads and
writes nothing.

recall@k, for a cut-off ``k``::

    recall@k = mean over the queries q of  |relevant(q) ∩ top_k(q)| / min(k, |relevant(q)|)

where ``top_k(q)`` are the ``k`` documents whose vectors have the highest cosine with the query's vector (exact
search over every document that has a finite vector; a tie at the cut-off goes to the document that comes first in
the corpus) and ``relevant(q)`` the query's relevant documents. Dividing by ``min(k, |relevant|)`` makes 1.0
reachable for a query with more relevant documents than ``k``; a relevant document without a vector is never
retrieved.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BLOCK_BYTES", "cosine_rows", "knn_correct", "recall_at_k", "row_norms"]

#: Bytes of float32 similarities computed at a time (block rows × documents × 4).
BLOCK_BYTES = 1 << 26


def row_norms(vectors: np.ndarray) -> np.ndarray:
    """The L2 norm of each row, in float64."""
    return np.sqrt(np.einsum("ij,ij->i", vectors, vectors, dtype=np.float64))


def knn_correct(vectors: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """For each row: whether the majority label of its ``k`` most cosine-similar other rows (itself left out) is
    its own label. A tie between labels goes to the one whose neighbours are more similar in sum. ``labels`` are
    class indices ≥ 0; every row must be finite. Computed in blocks of rows against all rows."""
    n = len(vectors)
    out = np.zeros(n, dtype=bool)
    k = min(k, n - 1)
    if k < 1:
        return out
    n_classes = int(labels.max()) + 1
    norms = row_norms(vectors).astype(np.float32)
    norms[norms == 0] = 1.0
    unit = vectors / norms[:, None] if not np.allclose(norms, 1.0, atol=1e-6) else vectors
    rows = max(1, BLOCK_BYTES // (4 * n))
    for start in range(0, n, rows):
        stop = min(start + rows, n)
        sims = unit[start:stop] @ unit.T  # [block, n] float32
        sims[np.arange(stop - start), np.arange(start, stop)] = -np.inf  # leave one out
        top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        near = np.take_along_axis(sims, top, axis=1).astype(np.float64)
        votes = np.zeros((stop - start, n_classes), dtype=np.float64)
        block_rows = np.repeat(np.arange(stop - start), k)
        np.add.at(votes, (block_rows, labels[top].reshape(-1)), 1.0 + (near.reshape(-1) + 1.0) / (2.0 * k + 3.0))
        out[start:stop] = votes.argmax(axis=1) == labels[start:stop]
    return out


def cosine_rows(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(cosine, largest absolute difference) of each pair of aligned rows, in float64 (NaN where a row is not
    finite or has no length)."""
    dots = np.einsum("ij,ij->i", a, b, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = dots / (row_norms(a) * row_norms(b))
        diff = np.abs(np.subtract(a, b, dtype=np.float64)).max(axis=1, initial=0.0) if a.size else np.zeros(len(a))
    return cos, diff


#: Rows whose norms are computed at a time (float64 temporaries of a block, never of the whole set).
NORM_ROWS = 1 << 13


def _inverse_norms(vectors: np.ndarray) -> np.ndarray:
    """1 / the L2 norm of each row as float32, computed in blocks of rows (1 where a row is not finite or null)."""
    out = np.ones(len(vectors), dtype=np.float32)
    for start in range(0, len(vectors), NORM_ROWS):
        norms = row_norms(vectors[start:start + NORM_ROWS])
        usable = np.isfinite(norms) & (norms > 0)
        out[start:start + NORM_ROWS][usable] = 1.0 / norms[usable]
    return out


def recall_at_k(documents: np.ndarray, queries: np.ndarray, relevant: list[np.ndarray], k: int) -> float | None:
    """recall@k (module docstring) of ``queries`` ``[m, d]`` among ``documents`` ``[n, d]`` (corpus order; a row
    that is not finite is never retrieved); ``relevant[q]``: the corpus rows relevant to query ``q``. None without
    a query. The documents are never copied: each block of similarities is divided by their norms."""
    m, n = len(queries), len(documents)
    if not m:
        return None
    usable = np.isfinite(documents).all(axis=1)
    scale = _inverse_norms(documents)
    queries = np.nan_to_num(queries.astype(np.float32))
    queries = queries * _inverse_norms(queries)[:, None]
    cut = min(k, int(usable.sum()))
    total = 0.0
    rows = max(1, BLOCK_BYTES // (4 * max(n, 1)))
    for start in range(0, m, rows):
        stop = min(start + rows, m)
        sims = queries[start:stop] @ documents.T  # [block, n]; a column of NaN where a document is not finite
        sims *= scale[None, :]
        sims[:, ~usable] = -np.inf
        for q in range(start, stop):
            wanted = relevant[q]
            if not len(wanted) or not cut:
                continue
            row = sims[q - start]
            kth = np.partition(row, n - cut)[n - cut]  # the k-th highest similarity
            taken = row > kth
            ties = np.flatnonzero(row == kth)[:cut - int(taken.sum())]  # admitted first in corpus order
            taken[ties] = True
            total += int(taken[wanted].sum()) / min(k, len(wanted))
    return total / m
