"""Small campaigns written by tests: a corpus file, a protocol using a callable or tiny model, locked.

When the protocol plans a subgroup by length stratum, the callable names a tiny tokenizer folder written here
(``path``), the strata are declared, and the corpus's stratum column is computed with that tokenizer, as
``run`` checks it (C2)."""

from __future__ import annotations

import csv
from pathlib import Path

from iteralab.lock.inputs import lock
from protocol_factory import write_protocol

TEXTS = [
    ("a story about a bank", "plot"), ("good fun", "fresh"), ("dull and long", "rotten"),
    ("the story of a dog", "plot"), ("good acting", "fresh"), ("boring", "rotten"),
    ("a story in space with many many words to make it longer than the others", "plot"),
    ("really good", "fresh"), ("a mess", "rotten"), ("good, not great", "fresh"),
    ("story of two cities", "plot"), ("weak script", "rotten"),
]
#: Token bounds of the two length strata, counted by the tiny tokenizer (special tokens included).
SHORT_MAX = 8
STRATA_TOML = f"strata = {{ short = [0, {SHORT_MAX}], long = [{SHORT_MAX + 1}] }}\n"


def write_tokenizer(folder: Path) -> Path:
    """A WordPiece tokenizer folder with the conftest vocabulary (no model weights)."""
    from conftest import _tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    _tokenizer(folder).save_pretrained(folder)
    return folder


def token_strata(folder: Path, texts: list[str]) -> list[str]:
    from iteralab.models.tokens import load_tokenizer, token_counter

    counts = token_counter(load_tokenizer(folder))(texts)
    return ["short" if n <= SHORT_MAX else "long" for n in counts]


def write_corpus_csv(folder: Path, rows=None, name: str = "corpus.csv", strata: bool = True,
                     tokenizer: Path | None = None) -> Path:
    rows = rows if rows is not None else [(f"d{i:02d}", t, l) for i, (t, l) in enumerate(TEXTS)]
    if tokenizer is not None:
        names = token_strata(tokenizer, [r[1] for r in rows])
    else:
        names = ["short" if len(r[1]) < 20 else "long" for r in rows]
    path = folder / name
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "text", "label"] + (["stratum"] if strata else []))
        for row, stratum in zip(rows, names):
            w.writerow(list(row) + ([stratum] if strata else []))
    return path


def callable_campaign(folder: Path, fn: str = "fake_models:keyword_classifier", locked: bool = True,
                      **kwargs) -> Path:
    by_stratum = 'by = "stratum"' in kwargs.get("subgroups", "")
    tokenizer = write_tokenizer(folder / "tokenizer") if by_stratum else None
    write_corpus_csv(folder, tokenizer=tokenizer)
    path_line = '\npath = "tokenizer"' if by_stratum else ""
    kwargs.setdefault("model", f'kind = "callable"\ncallable = "{fn}"{path_line}')
    if by_stratum:
        kwargs["corpus_extra"] = STRATA_TOML
    path = write_protocol(folder, **kwargs)
    if locked:
        lock(path)
    return path


def rewrite_predictions(path: Path, edit) -> None:
    """Rewrite a stored prediction file (Parquet) as a forger would: ``edit(ids, probs)`` changes the list of
    ids and the float32 probability rows in place; labels follow the probabilities, as the pass writes them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from iteralab.campaign.kinds.classification.output import encode

    table = pq.read_table(path)
    ids = table.column("id").to_pylist()
    classes = ["plot", "fresh", "rotten"]
    probs = table.column("probs").combine_chunks().values.to_numpy().reshape(len(ids), len(classes)).copy()
    edit(ids, probs)
    path.write_bytes(encode(pa.array(ids, pa.string()), classes, probs))
