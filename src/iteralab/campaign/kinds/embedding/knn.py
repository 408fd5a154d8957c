"""The arithmetic of an embedding job's checks, on NumPy arrays, in blocks: leave-one-out kNN label accuracy by
cosine, retrieval recall@k of queries among the documents, and per-row cosines and largest absolute
differences of two aligned sets of vectors. Reads and writes nothing.

kNN is exact: every document's similarity with every other is computed (``O(n² d)``), but never as an ``n × n``
matrix. The rows are cut into square blocks of :data:`BLOCK_BYTES` of float32 similarities; each pair of blocks
is multiplied once (the similarity is symmetric: block ``I × J`` serves the rows of ``I`` and, transposed, those of
``J``), and each row keeps its ``k`` best neighbours so far. A block's similarities are compared with each row's
current ``k``-th best, so only the few that can enter a row's top ``k`` are sorted (a top-``k`` by selection on
every block would cost as much as the multiplication). Memory: two blocks of vectors, one block of similarities,
and ``k`` neighbours per row (12 bytes each). Ties are broken the same way everywhere: the neighbour with the lower row index wins.

Queries among the documents (``rank_queries``): each block of queries' cosines with every document, ranked and
scored by ``kinds.ranking`` (recall@k, MRR@k, nDCG@k: their definitions are there). The search is exact over
every document that has a finite vector; a document without one is never retrieved; a tie goes to the document
that comes first in the corpus.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from iteralab.campaign.kinds.ranking import QueryRanks, Ranking, Relevance, rank_block

__all__ = ["BLOCK_BYTES", "cosine_rows", "knn_correct", "knn_neighbours", "query_ranks", "rank_queries", "recall_at_k",
           "row_norms"]

#: Bytes of float32 similarities computed at a time (a square block: block rows² × 4).
BLOCK_BYTES = 1 << 24
#: Documents whose neighbours' votes are counted at a time.
VOTE_ROWS = 1 << 15


def row_norms(vectors: np.ndarray) -> np.ndarray:
    """The L2 norm of each row, in float64."""
    return np.sqrt(np.einsum("ij,ij->i", vectors, vectors, dtype=np.float64))


def _unit_block(vectors: Any, rows: np.ndarray | None, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` of the rows used (``rows``: their positions in ``vectors``; None: all), scaled to unit
    length (a row of length 0 stays 0). ``vectors``: an array, or anything indexed like one (a vector store)."""
    block = vectors[start:stop] if rows is None else vectors[rows[start:stop]]
    block = np.asarray(block, dtype=np.float32)
    norms = row_norms(block).astype(np.float32)
    norms[norms == 0] = 1.0
    return block / norms[:, None]


def _merge(top_sim: np.ndarray, top_idx: np.ndarray, r: np.ndarray, c: np.ndarray, s: np.ndarray) -> None:
    """Fold candidate neighbours (row ``r``, neighbour ``c``, similarity ``s``) into each row's ``k`` best: the
    highest similarities, the lower neighbour index on a tie."""
    if not len(r):
        return
    k = top_sim.shape[1]
    rows = np.unique(r)
    all_r = np.concatenate([np.repeat(rows, k), r])
    all_s = np.concatenate([top_sim[rows].reshape(-1), s])
    all_i = np.concatenate([top_idx[rows].reshape(-1), c])
    order = np.lexsort((all_i, -all_s, all_r))
    all_r, all_s, all_i = all_r[order], all_s[order], all_i[order]
    starts = np.searchsorted(all_r, rows)
    rank = np.arange(len(all_s)) - np.repeat(starts, np.diff(np.append(starts, len(all_r))))
    keep = rank < k
    top_sim[rows] = all_s[keep].reshape(-1, k)
    top_idx[rows] = all_i[keep].reshape(-1, k)


def _offer(top_sim: np.ndarray, top_idx: np.ndarray, sims: np.ndarray, row0: int, col0: int,
           transposed: bool = False) -> None:
    """Offer a block of similarities (rows ``row0 + i``, neighbours ``col0 + j``; ``transposed``: the block is
    ``[neighbours, rows]``) to the rows' top ``k``: only those at least as high as a row's current ``k``-th best."""
    k = top_sim.shape[1]
    kth = top_sim[row0:row0 + sims.shape[1 if transposed else 0]].min(axis=1)
    empty = np.isneginf(kth)
    if empty.any() and sims.shape[0 if transposed else 1] >= k:  # a row's first block: its own k-th best bounds it
        own = sims[:, empty].T if transposed else sims[empty]
        kth[empty] = np.maximum(kth[empty], np.partition(own, own.shape[1] - k, axis=1)[:, own.shape[1] - k])
    # flatnonzero of the mask: a tenth of the time of a 2-D nonzero, when few similarities pass
    flat = np.flatnonzero(sims >= (kth[None, :] if transposed else kth[:, None]))
    s = sims.reshape(-1)[flat]
    r, c = np.divmod(flat, sims.shape[1])
    if transposed:
        r, c = c, r
    _merge(top_sim, top_idx, r + row0, c + col0, s)


def knn_neighbours(vectors: Any, k: int, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each used row's ``k`` most cosine-similar other used rows (itself left out): (similarities ``[n, k]``
    float32, their indices among the used rows ``[n, k]``), unsorted within a row. ``rows``: the positions in
    ``vectors`` of the rows used (None: every row); ``k`` ≤ rows used − 1; every row must be finite."""
    n = len(vectors) if rows is None else len(rows)
    size = max(1, math.isqrt(BLOCK_BYTES // 4))
    spans = [(a, min(a + size, n)) for a in range(0, n, size)]
    top_sim = np.full((n, k), -np.inf, dtype=np.float32)
    top_idx = np.full((n, k), -1, dtype=np.int64)
    for a, b in spans:  # each block against itself first: every row starts with a full top k where it can
        unit = _unit_block(vectors, rows, a, b)
        sims = unit @ unit.T
        np.fill_diagonal(sims, -np.inf)  # leave one out
        _offer(top_sim, top_idx, sims, a, a)
    for i, (a, b) in enumerate(spans):
        left = _unit_block(vectors, rows, a, b)
        for c, d in spans[i + 1:]:
            sims = left @ _unit_block(vectors, rows, c, d).T
            _offer(top_sim, top_idx, sims, a, c)
            _offer(top_sim, top_idx, sims, c, a, transposed=True)
    return top_sim, top_idx


def knn_correct(vectors: Any, labels: np.ndarray, k: int, rows: np.ndarray | None = None) -> np.ndarray:
    """For each used row: whether the majority label of its ``k`` most cosine-similar other used rows (itself
    left out) is its own label. A tie between labels goes to the one whose neighbours are more similar in sum.
    ``labels`` are the used rows' class indices ≥ 0; ``rows``: the positions of the used rows in ``vectors`` (an
    array, or a vector store indexed like one; None: every row); every used row must be finite."""
    n = len(vectors) if rows is None else len(rows)
    out = np.zeros(n, dtype=bool)
    k = min(k, n - 1)
    if k < 1:
        return out
    n_classes = int(labels.max()) + 1
    top_sim, top_idx = knn_neighbours(vectors, k, rows)
    step = max(1, VOTE_ROWS)
    for start in range(0, n, step):  # the votes in blocks of rows: a few MB whatever n
        stop = min(start + step, n)
        votes = np.zeros((stop - start, n_classes), dtype=np.float64)
        block_rows = np.repeat(np.arange(stop - start), k)
        weights = 1.0 + (top_sim[start:stop].astype(np.float64).reshape(-1) + 1.0) / (2.0 * k + 3.0)
        np.add.at(votes, (block_rows, labels[top_idx[start:stop]].reshape(-1)), weights)
        out[start:stop] = votes.argmax(axis=1) == labels[start:stop]
    return out


def cosine_rows(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(cosine, largest absolute difference) of each pair of aligned rows, in float64 (NaN where a row is not
    finite or has no length)."""
    dots = np.einsum("ij,ij->i", a, b, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = dots / (row_norms(a) * row_norms(b))
        # float32 subtraction is exact to 2**-24 relative and zero only where the values are equal: the
        # "identical" and "bounded" targets read the same answer as from float64, at a fifth of the cost.
        diff = (np.abs(a - b).max(axis=1, initial=0.0).astype(np.float64) if a.size else np.zeros(len(a)))
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


def rank_queries(documents: np.ndarray, queries: np.ndarray, relevance: Relevance, k: int) -> Ranking | None:
    """The ranking metrics (``kinds.ranking``) of ``queries`` ``[m, d]`` among ``documents`` ``[n, d]`` (corpus
    order; a row that is not finite is never retrieved) by cosine; ``relevance``: each query's relevant corpus rows
    and gains. None without a query. The documents are never copied: each block of similarities is divided by their
    norms."""
    return Ranking.of(k, query_ranks(documents, queries, relevance, k)) if len(queries) else None


def query_ranks(documents: np.ndarray, queries: np.ndarray, relevance: Relevance, k: int) -> list[QueryRanks]:
    """Each query's ranking values (:class:`QueryRanks`, block by block) of :func:`rank_queries`."""
    m, n = len(queries), len(documents)
    usable = np.isfinite(documents).all(axis=1)
    scale = _inverse_norms(documents)
    queries = np.nan_to_num(queries.astype(np.float32))
    queries = queries * _inverse_norms(queries)[:, None]
    rows = max(1, BLOCK_BYTES // (4 * max(n, 1)))
    blocks = []
    for start in range(0, m, rows):
        stop = min(start + rows, m)
        sims = queries[start:stop] @ documents.T  # [block, n]; a column of NaN where a document is not finite
        sims *= scale[None, :]
        sims[:, ~usable] = -np.inf
        blocks.append(rank_block(sims, relevance.slice(start, stop), k))
    return blocks


def recall_at_k(documents: np.ndarray, queries: np.ndarray, relevant: list[np.ndarray], k: int) -> float | None:
    """recall@k (``hits / min(k, relevant)``, ``kinds.ranking``) of ``queries`` among ``documents`` under binary
    relevance (``relevant[q]``: the corpus rows relevant to query ``q``); None without a query."""
    found = rank_queries(documents, queries, Relevance.of(relevant), k)
    return None if found is None else found.recall_at_k
