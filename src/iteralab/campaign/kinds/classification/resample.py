"""A classifier's metric difference under a paired bootstrap over documents, for the sample-size figure of
``iteralab threshold`` (:mod:`iteralab.plan.samplesize`): macro-F1, weighted F1 and balanced accuracy are not means
of per-document values, so the spread of their paired difference is read off resamples of the tuning split.

Each resample draws the documents with replacement (the same draw for both variants: paired) and computes the
metric from its (true, predicted) pair counts, vectorised over the resamples; the values equal
:func:`iteralab.campaign.kinds.classification.verdict.metric_of_codes` (scikit-learn's, ``zero_division=0``, the
F1 averages over all ``k`` classes, balanced accuracy over the classes present among the true labels; a test says
so).
"""

from __future__ import annotations

import numpy as np

__all__ = ["BOOTSTRAP_DRAWS", "metric_of_counts", "paired_bootstrap"]

#: Resamples of the tuning split.
BOOTSTRAP_DRAWS = 2000
#: Resamples computed at once (each holds ``tuning size`` int64 indices).
_ROWS = 100


def metric_of_counts(name: str, counts: np.ndarray) -> np.ndarray:
    """The metric of each ``[k, k + 1]`` table of ``counts`` ``[B, k, k + 1]`` (true class × predicted class + 1,
    column 0 the no-class prediction)."""
    counts = counts.astype(np.float64)
    k = counts.shape[1]
    tp = counts[:, np.arange(k), np.arange(k) + 1]
    true = counts.sum(axis=2)
    if name == "accuracy":
        return tp.sum(axis=1) / np.maximum(true.sum(axis=1), 1)
    if name == "balanced_accuracy":
        recall = np.divide(tp, true, out=np.zeros_like(tp), where=true > 0)
        return recall.sum(axis=1) / np.maximum((true > 0).sum(axis=1), 1)
    predicted = counts[:, :, 1:].sum(axis=1)
    denominator = true + predicted
    f1 = np.divide(2 * tp, denominator, out=np.zeros_like(tp), where=denominator > 0)
    if name == "macro_f1":
        return f1.mean(axis=1)
    if name == "weighted_f1":
        support = true.sum(axis=1)
        return np.divide((f1 * true).sum(axis=1), support, out=np.zeros_like(support), where=support > 0)
    raise ValueError(name)


def paired_bootstrap(name: str, y_true: np.ndarray, reference: np.ndarray, candidate: np.ndarray, k: int, *,
                     draws: int = BOOTSTRAP_DRAWS, seed: int = 0) -> np.ndarray:
    """``draws`` values of metric(candidate) − metric(reference) on resamples of the documents (class indices;
    -1 in a prediction: no class)."""
    n, width = len(y_true), (k + 1) * k
    keys = [y_true.astype(np.int64) * (k + 1) + (p.astype(np.int64) + 1) for p in (reference, candidate)]
    rng = np.random.default_rng(seed)
    out = np.empty(draws, dtype=np.float64)
    for start in range(0, draws, _ROWS):
        rows = min(_ROWS, draws - start)
        pick = rng.integers(0, n, size=(rows, n))
        offset = (np.arange(rows, dtype=np.int64) * width)[:, None]
        ref, cand = (np.bincount((key[pick] + offset).ravel(), minlength=rows * width).reshape(rows, k, k + 1)
                     for key in keys)
        out[start:start + rows] = metric_of_counts(name, cand) - metric_of_counts(name, ref)
    return out
