"""Small campaigns written by tests: a corpus file, a protocol using a callable or tiny model, locked."""

from __future__ import annotations

import csv
from pathlib import Path

from iteralab.plan.protocol import lock
from protocol_factory import write_protocol

TEXTS = [
    ("a story about a bank", "plot"), ("good fun", "fresh"), ("dull and long", "rotten"),
    ("the story of a dog", "plot"), ("good acting", "fresh"), ("boring", "rotten"),
    ("a story in space with many many words to make it longer than the others", "plot"),
    ("really good", "fresh"), ("a mess", "rotten"), ("good, not great", "fresh"),
    ("story of two cities", "plot"), ("weak script", "rotten"),
]


def write_corpus_csv(folder: Path, rows=None, name: str = "corpus.csv", strata: bool = True) -> Path:
    rows = rows if rows is not None else [(f"d{i:02d}", t, l) for i, (t, l) in enumerate(TEXTS)]
    path = folder / name
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "text", "label"] + (["stratum"] if strata else []))
        for i, row in enumerate(rows):
            w.writerow(list(row) + ([("short" if len(row[1]) < 20 else "long")] if strata else []))
    return path


def callable_campaign(folder: Path, fn: str = "fake_models:keyword_classifier", locked: bool = True,
                      **kwargs) -> Path:
    write_corpus_csv(folder)
    kwargs.setdefault("model", f'kind = "callable"\ncallable = "{fn}"')
    path = write_protocol(folder, **kwargs)
    if locked:
        lock(path)
    return path


def rewrite_predictions(path: Path, edit) -> None:
    """Rewrite a stored prediction file (Parquet) as a forger would: ``edit(ids, probs)`` changes the list of
    ids and the float32 probability rows in place; labels follow the probabilities, as the pass writes them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from iteralab.campaign.predictions import encode

    table = pq.read_table(path)
    ids = table.column("id").to_pylist()
    classes = ["plot", "fresh", "rotten"]
    probs = table.column("probs").combine_chunks().values.to_numpy().reshape(len(ids), len(classes)).copy()
    edit(ids, probs)
    path.write_bytes(encode(pa.array(ids, pa.string()), classes, probs))
