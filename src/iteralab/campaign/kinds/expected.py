"""What every kind's verdict checks the same way: the corpus a pass is checked against (:class:`Expected`: ids,
reference labels as class codes, strata) and how a file's ids meet it (:func:`match_ids`, :func:`id_cells`:
duplicates, missing, extra, format and coverage cells).

Reads the campaign folder's corpus copy (``inputs/corpus.csv`` or a dataset's, K6) batch by batch; writes nothing.
Every kind's verdict part (``<kind>/verdict.py``) and ``campaign.verdict`` build on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from iteralab.campaign.folder import corpus_copy, read_corpus_batches
from iteralab.campaign.kinds.classification.output import code_dtype
from iteralab.campaign.kinds.output import IdMatch, coverage_of
from iteralab.common.arrow import release_unused

if TYPE_CHECKING:
    from iteralab.plan.protocol import Protocol

__all__ = ["READ_BLOCK", "Expected", "IdCells", "IdMatch", "corpus_texts", "file_rows",
           "id_cells", "id_examples", "load_expected", "match_ids"]


#: Bytes of the corpus copy parsed at a time when its ids and labels are read (each piece's parsing
#: temporaries are a few times its size; the default 4 MiB pieces held ~40 MB more at the peak).
READ_BLOCK = 1 << 20


@dataclass(frozen=True)
class Expected:
    """The corpus as the checks need it: ids (Arrow strings, corpus order), the class index of each reference
    label (-1: not a class), and each record's stratum (index into ``stratum_names``; -1: none)."""

    ids: pa.Array
    labels: np.ndarray
    classes: tuple[str, ...]
    strata: np.ndarray
    stratum_names: tuple[str, ...] = field(default=())

    @classmethod
    def of(cls, ids: Sequence[str], labels: Mapping[str, str], strata: Mapping[str, str],
           classes: Sequence[str]) -> Expected:
        """Built from Python values (tests and small callers)."""
        names = tuple(sorted({s for s in strata.values() if s}))
        return cls(pa.array(list(ids), pa.string()),
                   np.asarray([list(classes).index(labels[i]) if labels.get(i) in classes else -1 for i in ids],
                              dtype=code_dtype(len(classes))), tuple(classes),
                   np.asarray([names.index(strata[i]) if strata.get(i) else -1 for i in ids],
                              dtype=code_dtype(len(names))), names)

    def __len__(self) -> int:
        return len(self.ids)

    def label_of(self, rows: np.ndarray) -> list[str]:
        return [self.classes[c] if c >= 0 else "" for c in self.labels[rows]]


def load_expected(campaign_dir: str | Path, classes: Sequence[str], dataset: str | None = None) -> Expected:
    """The expected ids of the corpus copy, or of one dataset's copy (K6), read batch by batch: what is kept
    per record is its id, a class code and a stratum code (the label and stratum strings are never held
    whole)."""
    campaign_dir = Path(campaign_dir)
    copy = corpus_copy(dataset)
    value_set = pa.array(list(classes), pa.string())
    ids: list[pa.Array] = []
    labels: list[np.ndarray] = []
    strata: list[tuple[np.ndarray, list[str | None]]] = []
    for batch in read_corpus_batches(campaign_dir / copy, ["id", "label", "stratum"], block_size=READ_BLOCK):
        ids.append(batch.column(batch.schema.get_field_index("id")))
        codes = pc.fill_null(pc.index_in(batch.column(batch.schema.get_field_index("label")), value_set=value_set), -1)
        labels.append(codes.to_numpy(zero_copy_only=False).astype(code_dtype(len(classes))))
        if "stratum" in batch.schema.names:
            encoded = pc.dictionary_encode(batch.column(batch.schema.get_field_index("stratum")))
            strata.append((pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False),
                           encoded.dictionary.to_pylist()))
    names = tuple(sorted({n for _, seen in strata for n in seen if n}))
    dtype = code_dtype(len(names))
    position = {name: i for i, name in enumerate(names)}
    parts = []
    for indices, seen in strata:  # each batch's own codes mapped onto the sorted names (-1: none or empty)
        lookup = np.asarray([position[n] if n else -1 for n in seen] + [-1], dtype=dtype)  # [-1]: a null
        parts.append(lookup[indices])
    all_ids = pa.concat_arrays(ids) if ids else pa.array([], pa.string())
    del ids
    release_unused()
    n = len(all_ids)
    codes = np.concatenate(labels) if labels else np.zeros(0, code_dtype(len(classes)))
    return Expected(all_ids, codes, tuple(classes), np.concatenate(parts) if parts else np.full(n, -1, dtype), names)


def corpus_texts(campaign_dir: str | Path, wanted: set[str], dataset: str | None = None) -> dict[str, str]:
    """The texts of the ``wanted`` ids only (streamed: the corpus is never held whole)."""
    out: dict[str, str] = {}
    keep = pa.array(sorted(wanted), pa.string())
    copy = corpus_copy(dataset)
    for batch in read_corpus_batches(Path(campaign_dir) / copy, ["id", "text"]):
        mask = pc.is_in(batch.column(0), value_set=keep)
        if pc.any(mask).as_py():
            chosen = batch.filter(mask)
            out.update(zip(chosen.column(0).to_pylist(), chosen.column(1).to_pylist()))
    return out


def _first_sorted(values: pa.Array, n: int = 3) -> list[str]:
    if len(values) == 0:
        return []
    return values.take(pc.array_sort_indices(values)[:n]).to_pylist()


def match_ids(ids: pa.Array, expected: Expected) -> IdMatch:
    """One hash lookup of every record's id among the expected ids (none when the file is in corpus order)."""
    return coverage_of(ids, expected.ids)


@dataclass(frozen=True)
class IdCells:
    """The verdict's id, format and coverage cells of a file (:func:`id_cells`)."""

    expected_ids: int
    observed_ids: int
    unique_ids: int
    duplicates: int
    missing: int
    extra: int
    ids_match: bool
    format_ok: bool
    format_problems: tuple[str, ...]
    n_format_problems: int
    coverage: float

    def cell_values(self) -> dict[str, object]:
        """The cells by name, in their order (what ``Verdict.with_cells`` takes)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def id_cells(match: IdMatch, records: int, rows: int, expected: Expected, problems: tuple[str, ...],
             n_problems: int) -> IdCells:
    """The verdict's id, format and coverage cells of a file (``records`` read, ``rows`` with an id)."""
    covered, n_expected = match.covered, len(expected)
    duplicates, missing, extra = len(match.repeated), int(n_expected - covered.sum()), len(match.extra_unique)
    return IdCells(n_expected, records, int(covered.sum()) + extra, duplicates, missing, extra,
                   not duplicates and not missing and not extra and rows == n_expected, not n_problems,
                   tuple(problems), n_problems, int(covered.sum()) / n_expected if n_expected else 0.0)


def id_examples(match: IdMatch, expected: Expected) -> dict[str, list[str]]:
    """The first few repeated, missing and unexpected ids (sorted), for the verdict's text."""
    return {"duplicates": _first_sorted(match.repeated) if len(match.repeated) else [],
            "missing": _first_sorted(expected.ids.filter(pa.array(~match.covered))) if not match.covered.all() else [],
            "extra": _first_sorted(match.extra_unique) if len(match.extra_unique) else []}


def file_rows(match: IdMatch, n: int) -> np.ndarray:
    """The row of a file that holds each corpus document (the last one when repeated; -1: none)."""
    return np.arange(n, dtype=np.int64) if match.last is None else match.last

