"""What the quality interval resamples for a classifier (``kinds.interval.CellSample``): each document's cell, the
triple (true class, variant's label, reference's label), and the built-in metric's difference computed from a
replicate's weighted confusion counts, for every replicate at once (``np.bincount``). The values equal
scikit-learn's (``verdict.metric_value``) on the same documents: a test says so. :func:`paired_bootstrap` draws the
same differences on a tuning split for the sample-size figure of ``iteralab threshold``
(:mod:`iteralab.plan.samplesize`): macro-F1, weighted F1 and balanced accuracy are not means of per-document values,
so the spread of their paired difference is read off resamples. Reads and writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from iteralab.campaign.kinds.interval import CellSample, Sample

if TYPE_CHECKING:
    from iteralab.plan.protocol import Protocol

__all__ = ["BOOTSTRAP_DRAWS", "LabelUnits", "confusion_metric", "difference_statistic", "label_samples",
           "paired_bootstrap"]

#: Resamples of a tuning split for the sample-size figure.
BOOTSTRAP_DRAWS = 2000
#: Resamples computed at once (each holds ``tuning size`` int64 indices).
ROWS_AT_ONCE = 100


@dataclass(frozen=True)
class LabelUnits:
    """A classification pass's labels as its verdict keeps them for the interval: the class code of each expected
    document (corpus order; -1: no class) and whether the pass covered it (None: every document, the usual case,
    which holds no mask)."""

    codes: np.ndarray
    covered: np.ndarray | None = None

    def covered_rows(self) -> np.ndarray:
        return np.ones(len(self.codes), dtype=bool) if self.covered is None else self.covered


def confusion_metric(name: str, confusion: np.ndarray, present_only: bool = False) -> np.ndarray:
    """The metric of each confusion matrix ``[b, k, k + 1]`` (rows: true class; columns: predicted label, column 0
    no class). ``present_only``: the F1 averages run over the classes present in the references or predictions
    (a subgroup's, ``verdict.counted_codes``), else over all k (the corpus's)."""
    k = confusion.shape[1]
    tp = confusion[:, np.arange(k), np.arange(k) + 1]
    support = confusion.sum(axis=2)
    predicted = confusion[:, :, 1:].sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        if name == "accuracy":
            return tp.sum(axis=1) / support.sum(axis=1)
        if name == "balanced_accuracy":
            has = support > 0
            return np.where(has, tp / np.where(has, support, 1), 0).sum(axis=1) / has.sum(axis=1)
        denominator = support + predicted
        f1 = np.where(denominator > 0, 2 * tp / np.where(denominator > 0, denominator, 1), 0.0)
        if name == "weighted_f1":
            total = support.sum(axis=1)
            return np.where(total > 0, (f1 * support).sum(axis=1) / np.where(total > 0, total, 1), 0.0)
        if name == "macro_f1":
            if not present_only:
                return f1.mean(axis=1)
            present = denominator > 0
            return (f1 * present).sum(axis=1) / np.maximum(present.sum(axis=1), 1)
    raise ValueError(name)


def difference_statistic(name: str, k: int, present_only: bool = False) -> Callable[[np.ndarray, np.ndarray],
                                                                                    np.ndarray]:
    """The difference variant − reference of metric ``name`` from counts of cells
    ``(true * (k + 1) + variant + 1) * (k + 1) + reference + 1``."""
    width = k * (k + 1)

    def statistic(counts: np.ndarray, cells: np.ndarray) -> np.ndarray:
        b = len(counts)
        truth, variant, reference = cells // ((k + 1) ** 2), (cells // (k + 1)) % (k + 1), cells % (k + 1)
        offsets = (np.arange(b) * width)[:, None]
        values = []
        for label in (variant, reference):
            flat = np.bincount((offsets + truth * (k + 1) + label).ravel(), weights=counts.ravel(),
                               minlength=b * width)
            values.append(confusion_metric(name, flat.reshape(b, k, k + 1), present_only))
        return values[0] - values[1]

    return statistic


def label_samples(mine: Any, reference: Any, protocol: Protocol, expected: Any) -> dict[str, Sample]:
    """The samples of a built-in metric's difference: the documents both passes cover (within strata when the
    corpus has them), and those of each gating group (a stratum's metric over its present classes, a class's
    recall)."""
    if protocol.metric.name is None or not isinstance(mine, LabelUnits) or not isinstance(reference, LabelUnits):
        return {}
    k = len(expected.classes)
    both = mine.covered_rows() & reference.covered_rows() & (expected.labels >= 0)
    cells = ((expected.labels.astype(np.int64) * (k + 1) + mine.codes.astype(np.int64) + 1) * (k + 1)
             + reference.codes.astype(np.int64) + 1)
    stratified = len(expected.stratum_names) > 1
    out: dict[str, Sample] = {"": CellSample(cells[both], difference_statistic(protocol.metric.name, k),
                                             expected.strata[both] if stratified else None)}
    for sg in protocol.subgroups:
        if not sg.gating:
            continue
        by_stratum = sg.by == "stratum"
        names = expected.stratum_names if by_stratum else expected.classes
        codes = expected.strata if by_stratum else expected.labels
        statistic = difference_statistic(protocol.metric.name if by_stratum else "accuracy", k, by_stratum)
        for i, name in enumerate(names):
            rows = both & (codes == i)
            if rows.any():
                out[f"{sg.name}:{name}"] = CellSample(cells[rows], statistic)
    return out


def paired_bootstrap(name: str, y_true: np.ndarray, reference: np.ndarray, candidate: np.ndarray, k: int, *,
                     draws: int = BOOTSTRAP_DRAWS, seed: int = 0) -> np.ndarray:
    """``draws`` values of metric(candidate) − metric(reference) on resamples of the documents drawn with
    replacement, the same draw for both (paired); class indices, -1 in a prediction: no class."""
    n, width = len(y_true), (k + 1) * k
    keys = [y_true.astype(np.int64) * (k + 1) + (p.astype(np.int64) + 1) for p in (reference, candidate)]
    rng = np.random.default_rng(seed)
    out = np.empty(draws, dtype=np.float64)
    for start in range(0, draws, ROWS_AT_ONCE):
        rows = min(ROWS_AT_ONCE, draws - start)
        pick = rng.integers(0, n, size=(rows, n))
        offset = (np.arange(rows, dtype=np.int64) * width)[:, None]
        ref, cand = (confusion_metric(name, np.bincount((key[pick] + offset).ravel(), minlength=rows * width)
                                      .reshape(rows, k, k + 1).astype(np.float64)) for key in keys)
        out[start:start + rows] = cand - ref
    return out
