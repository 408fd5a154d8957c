"""A callable workload whose outputs move with an environment variable: a stand-in for a model that changed
between an earlier campaign and its rerun (the function and its source file stay the same)."""

from __future__ import annotations

import os

from fake_models import keyword_classifier

SHIFT_VARIABLE = "ITERALAB_TEST_MODEL_SHIFT"


def shifted_classifier(texts: list[str]) -> list[list[float]]:
    """``keyword_classifier`` mixed with a point mass on 'fresh': ``(1 - s) * p + s * [0, 1, 0]``.

    ``s`` comes from ``ITERALAB_TEST_MODEL_SHIFT`` (default 0). Every probability moves by at most ``0.9 * s``;
    small shifts keep every label, ``s = 0.9`` turns every prediction into 'fresh'.
    """
    s = float(os.environ.get(SHIFT_VARIABLE, "0"))
    return [[(1 - s) * row[0], (1 - s) * row[1] + s, (1 - s) * row[2]] for row in keyword_classifier(texts)]
