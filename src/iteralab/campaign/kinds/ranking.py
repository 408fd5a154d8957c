"""Ranking metrics of queries over candidates, from a score matrix and each query's relevance: recall@k (two
definitions), MRR@k and nDCG@k. One implementation for every job that ranks (an embedding job's queries among its
documents, and any later scorer); NumPy only, vectorised over a block of queries. Reads and writes nothing.

Inputs, for a block of ``m`` queries over ``n`` candidates:

- ``scores`` ``[m, n]``: higher ranks first. ``-inf`` or NaN marks a candidate that is never retrieved (a document
  without a vector). Ties are broken the same way everywhere: the candidate with the lower column (the one that
  comes first in the corpus) ranks first;
- ``relevance`` (:class:`Relevance`): each query's relevant candidates (columns) and their gains: 1 for every
  relevant candidate under binary relevance, the candidate's grade (> 0) under graded relevance; any other
  candidate has gain 0.

With ``top_k(q)`` the ``k`` best-ranked retrievable candidates and ``rel(q)`` the relevant ones (gain > 0, whether
retrievable or not)::

    recall@k                = |rel(q) ∩ top_k(q)| / min(k, |rel(q)|)     (hits / min(k, relevant): 1.0 is reachable)
    recall@k of relevant    = |rel(q) ∩ top_k(q)| / |rel(q)|             (hits / relevant: the textbook recall)
    reciprocal rank@k       = 1 / the rank of the first relevant candidate in top_k(q), 0 when none is there
    DCG@k                   = Σ_{i=1..k} gain(candidate at rank i) / log2(i + 1)         (linear gains)
    nDCG@k                  = DCG@k / the DCG@k of the ideal order (every relevant candidate, by gain)

and each metric is the mean over the queries (a query with no relevant candidate counts 0). The DCG is
scikit-learn's ``ndcg_score`` with linear gains: the two agree where no scores tie (a test checks it);
``ndcg_score`` averages the gains of tied candidates instead of ordering them, so it is not used here (every metric
of this module orders ties the same way, by column).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["PER_QUERY", "RANKING_METRICS", "QueryRanks", "Ranking", "Relevance", "rank_block", "top_k"]

#: The ranking metrics a protocol may name (``metric.name``); each needs ``metric.k`` and a queries file.
RANKING_METRICS = ("recall_at_k", "mrr", "ndcg_at_k")
#: Each built-in ranking metric's per-query values (a :class:`QueryRanks` field).
PER_QUERY = {"recall_at_k": "recall", "recall_of_relevant": "recall_of_relevant", "mrr": "reciprocal_rank",
             "ndcg_at_k": "ndcg"}


@dataclass(frozen=True)
class Relevance:
    """Each query's relevant candidates (columns of the score matrix) and their gains (1.0 each: binary)."""

    rows: tuple[np.ndarray, ...]
    gains: tuple[np.ndarray, ...]

    @classmethod
    def of(cls, rows: Sequence[np.ndarray], gains: Sequence[np.ndarray] | None = None) -> Relevance:
        rows = tuple(np.asarray(r, dtype=np.int64) for r in rows)
        if gains is None:
            return cls(rows, tuple(np.ones(len(r), dtype=np.float64) for r in rows))
        return cls(rows, tuple(np.asarray(g, dtype=np.float64) for g in gains))

    def __len__(self) -> int:
        return len(self.rows)

    def slice(self, start: int, stop: int) -> Relevance:
        """The relevance of queries ``start:stop`` (a block of the score matrix's rows)."""
        return Relevance(self.rows[start:stop], self.gains[start:stop])

    def flat(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(query, candidate, gain) of every relevant pair, queries in order."""
        counts = np.fromiter((len(r) for r in self.rows), dtype=np.int64, count=len(self.rows))
        query = np.repeat(np.arange(len(self.rows), dtype=np.int64), counts)
        rows = np.concatenate(self.rows) if self.rows else np.zeros(0, np.int64)
        gains = np.concatenate(self.gains) if self.gains else np.zeros(0, np.float64)
        return query, rows.astype(np.int64), gains.astype(np.float64)


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """The columns of each row's ``k`` highest scores, best first (``[m, min(k, n)]``); a tie goes to the lower
    column, at the cut-off and within the list. NaN ranks as ``-inf``."""
    if np.isnan(scores).any():
        scores = np.where(np.isnan(scores), -np.inf, scores)
    m, n = scores.shape
    k = min(int(k), n)
    if k <= 0 or m == 0:
        return np.zeros((m, 0), dtype=np.int64)
    cols = np.argpartition(scores, n - k, axis=1)[:, n - k:]  # a top k, ties at the cut-off in no set order
    kth = np.take_along_axis(scores, cols, axis=1).min(axis=1, keepdims=True)
    straddle = np.flatnonzero((scores == kth).sum(axis=1) != (np.take_along_axis(scores, cols, axis=1) == kth)
                              .sum(axis=1))
    if len(straddle):  # a tie straddles the cut-off: the tied candidates admitted are the first ones by column
        rows = scores[straddle]
        above, tied = rows > kth[straddle], rows == kth[straddle]
        room = k - above.sum(axis=1, keepdims=True)
        taken = above | (tied & (np.cumsum(tied, axis=1) <= room))
        cols[straddle] = np.nonzero(taken)[1].reshape(len(straddle), k)
    values = np.take_along_axis(scores, cols, axis=1)
    order = np.lexsort((cols, -values), axis=1)  # best first, the lower column first on a tie
    return np.take_along_axis(cols, order, axis=1)


@dataclass(frozen=True)
class QueryRanks:
    """Per query of a block: each metric's value (arrays of the block's length)."""

    recall: np.ndarray
    recall_of_relevant: np.ndarray
    reciprocal_rank: np.ndarray
    ndcg: np.ndarray

    def values(self, name: str) -> np.ndarray:
        """Each query's value of a built-in ranking metric (:data:`RANKING_METRICS`): the metric is their mean."""
        return {"recall_at_k": self.recall, "mrr": self.reciprocal_rank, "ndcg_at_k": self.ndcg}[name]


def rank_block(scores: np.ndarray, relevance: Relevance, k: int) -> QueryRanks:
    """Every metric of the module docstring for each query of a block (``scores`` ``[m, n]``; ``relevance``: the
    block's queries, each candidate listed once)."""
    m, n = scores.shape
    cols = top_k(scores, k)
    width = cols.shape[1]
    query, rows, gains = relevance.flat()
    # the gain at each rank: each ranked (query, candidate) looked up among the relevant pairs (sorted keys)
    keys = query * n + rows
    order = np.argsort(keys, kind="stable")
    keys, sorted_gains = keys[order], gains[order]
    wanted = (np.arange(m, dtype=np.int64)[:, None] * n + cols).reshape(-1)
    at = np.minimum(np.searchsorted(keys, wanted), max(len(keys) - 1, 0))
    found = keys[at] == wanted if len(keys) else np.zeros(len(wanted), dtype=bool)
    got = np.where(found, sorted_gains[at] if len(keys) else 0.0, 0.0).reshape(m, width)
    got *= np.isfinite(np.take_along_axis(scores, cols, axis=1))  # nothing past the retrievable candidates
    hit = got > 0
    hits = hit.sum(axis=1)
    relevant = np.bincount(query, weights=(gains > 0).astype(np.float64), minlength=m)
    safe = np.maximum(relevant, 1)
    recall = np.where(relevant > 0, hits / np.minimum(k, safe), 0.0)
    recall_of_relevant = np.where(relevant > 0, hits / safe, 0.0)
    reciprocal = np.where(hit.any(axis=1), 1.0 / (np.argmax(hit, axis=1) + 1.0), 0.0)
    discount = 1.0 / np.log2(np.arange(2, width + 2, dtype=np.float64))
    # the ideal order: each query's gains, highest first, padded with zeros to the cut-off
    counts = np.bincount(query, minlength=m)
    ideal = np.zeros((m, max(width, int(counts.max(initial=0)))))
    ideal[query, np.arange(len(query)) - np.repeat(np.cumsum(counts) - counts, counts)] = gains
    best = -np.sort(-ideal, axis=1)[:, :width] @ discount
    ndcg = np.divide(got @ discount, best, out=np.zeros(m), where=best > 0)
    return QueryRanks(recall, recall_of_relevant, reciprocal, ndcg)


@dataclass(frozen=True)
class Ranking:
    """The ranking metrics of a query set at a cut-off ``k``: means over its ``queries``."""

    k: int
    queries: int
    recall_at_k: float
    recall_of_relevant: float
    mrr: float
    ndcg_at_k: float
    #: each query's values (:class:`QueryRanks` fields by name), whose means the metrics are
    per_query: Mapping[str, np.ndarray] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, k: int, blocks: Sequence[QueryRanks]) -> Ranking | None:
        """The means over every query of ``blocks`` (None without a query)."""
        n = sum(len(b.recall) for b in blocks)
        if not n:
            return None

        per_query = {name: np.concatenate([getattr(b, name) for b in blocks]) for name in PER_QUERY.values()}

        def mean(name: str) -> float:
            return float(per_query[name].sum() / n)

        return cls(int(k), n, mean("recall"), mean("recall_of_relevant"), mean("reciprocal_rank"), mean("ndcg"),
                   per_query)

    def values_of(self, name: str) -> np.ndarray:
        """Each query's value of a built-in ranking metric (:data:`RANKING_METRICS`), whose mean it is."""
        return self.per_query[PER_QUERY[name]]

    def value(self, name: str) -> float:
        """The value of a built-in ranking metric (:data:`RANKING_METRICS`)."""
        if name not in RANKING_METRICS:
            raise KeyError(name)
        return float(getattr(self, name))

    def cells(self) -> dict[str, float | int]:
        """The values as a verdict stores them (JSON)."""
        return {"k": self.k, "queries": self.queries, "recall_at_k": self.recall_at_k,
                "recall_of_relevant": self.recall_of_relevant, "mrr": self.mrr, "ndcg_at_k": self.ndcg_at_k}

    def note(self) -> str:
        """The values with their definitions, in the words of the raw table's notes."""
        return ranking_note(self.cells())


def ranking_note(cells: dict[str, float | int]) -> str:
    """:meth:`Ranking.note` from a verdict's stored cells."""
    k = cells["k"]
    return (f"ranking of {cells['queries']} queries: recall@{k} = hits / min(k, relevant) "
            f"{cells['recall_at_k']:.4f}, hits / relevant {cells['recall_of_relevant']:.4f}; "
            f"MRR@{k} {cells['mrr']:.4f}; nDCG@{k} {cells['ndcg_at_k']:.4f}")
