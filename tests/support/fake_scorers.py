"""Callable scorers for scoring jobs (``model.callable``): ``(texts, text_pairs) -> one float per pair``."""

from __future__ import annotations

import numpy as np


def _words(text: str) -> set[str]:
    return {w.strip(".,!?").lower() for w in text.split() if w.strip(".,!?")}


def overlap_scorer(texts: list[str], text_pairs: list[str]) -> np.ndarray:
    """The share of the query's words the passage holds, plus a small tie-breaker by the passage's length (no two
    pairs of a group tie)."""
    out = []
    for query, passage in zip(texts, text_pairs):
        q, p = _words(query), _words(passage)
        out.append(len(q & p) / max(len(q), 1) + 1e-3 * len(passage))
    return np.asarray(out, dtype=np.float32)


def rounded_scorer(texts: list[str], text_pairs: list[str]) -> np.ndarray:
    """:func:`overlap_scorer` rounded to one decimal: scores move by up to 0.05 and near-ties reorder."""
    return np.round(overlap_scorer(texts, text_pairs), 1)


def reversed_scorer(texts: list[str], text_pairs: list[str]) -> np.ndarray:
    """:func:`overlap_scorer` negated: every group's order reversed."""
    return -overlap_scorer(texts, text_pairs)


def scoring_routine(*, ids, groups, scores, references) -> float:
    """A routine of a scoring job: the share of groups whose best-scored pair is relevant."""
    hits = [float(references[groups == g][np.argmax(scores[groups == g])] > 0) for g in np.unique(groups)]
    return float(np.mean(hits))


def batch_rounded_scorer(texts: list[str], text_pairs: list[str]) -> np.ndarray:
    """:func:`overlap_scorer`, rounded to one decimal in a batch of 4 pairs (a variant whose scores move, as a
    cheaper precision's do) and exact in any other batch."""
    scores = overlap_scorer(texts, text_pairs)
    return np.round(scores, 1) if len(texts) == 4 else scores
