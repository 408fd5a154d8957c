"""Corpora with strata, for the prepare and threshold tests: the strata, rows with a stratum each, and the CSV file
they are written to."""

from __future__ import annotations

import csv


WORDS = ["good", "bad", "story", "movie", "fun", "dull", "great", "plot", "mess", "fine"]
STRATA = "short=0-8,long=9-"


def strata_rows(n=90):
    """Texts of 1..14 words (3..16 tokens with [CLS]/[SEP]); classes in a mix that differs by length."""
    rows = []
    for i in range(n):
        k = 1 + i % 14
        words = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(k))
        label = "plot" if i % 5 == 0 else ("fresh" if (i // 3) % 2 else "rotten")
        rows.append((f"doc-{i:03d}", f"{words} {i}", label))
    return rows


def write_strata_csv(path, rows, header=("id", "text", "label")):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path
