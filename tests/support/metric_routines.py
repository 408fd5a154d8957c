"""Evaluation routines for the metric-routine tests (``[metric] routine``): NumPy only, on whole arrays."""

from __future__ import annotations

import os

import numpy as np

#: When set, each call appends one line (the number of ids) to this file: proof that the routine ran.
CALLS_VARIABLE = "METRIC_ROUTINE_CALLS"


def _note(ids) -> None:
    calls = os.environ.get(CALLS_VARIABLE)
    if calls:
        with open(calls, "a", encoding="utf-8") as fh:
            fh.write(f"{len(ids)}\n")


def macro_f1(*, ids, outputs, references):
    """Macro-F1 over the classes present in the references or the predictions ("" is no class)."""
    _note(ids)
    labels = outputs.labels
    scores = []
    for c in outputs.classes:
        tp = np.count_nonzero((labels == c) & (references == c))
        fp = np.count_nonzero((labels == c) & (references != c))
        fn = np.count_nonzero((labels != c) & (references == c))
        if tp + fp + fn:
            scores.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(scores))


def cost(*, ids, outputs, references):
    """Cost per document of the wrong labels, 10 each (lower is better; not in [0, 1])."""
    assert outputs.probs.shape == (len(ids), len(outputs.classes))
    return 10.0 * np.count_nonzero(outputs.labels != references) / len(ids)


def picky(*, ids, outputs, references):
    """Raises on a pass with a wrong label."""
    wrong = np.count_nonzero(outputs.labels != references)
    if wrong:
        raise ValueError(f"{wrong} wrong label(s)\nand a second line that no verdict shows")
    return 1.0


def not_a_number(*, ids, outputs, references):
    """NaN on a pass with a wrong label."""
    return float("nan") if np.count_nonzero(outputs.labels != references) else 1.0
