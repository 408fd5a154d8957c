"""A Python-callable workload for the several-dataset tests (K6): right on every text, except that it answers
'rotten' for a text holding the word "tricky" whenever it is given more than one text at a time."""

from __future__ import annotations

from fake_models import keyword_classifier


def batch_sensitive(texts: list[str]) -> list[list[float]]:
    rows = keyword_classifier(texts)
    if len(texts) > 1:
        rows = [[0.1, 0.1, 0.8] if "tricky" in t else r for t, r in zip(texts, rows)]
    return rows
