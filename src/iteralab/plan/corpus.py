"""The corpus in memory: persistent ids, fingerprints and the tuning/final split (C1, C2, P4, X5).

A corpus is read (by :class:`iteralab.plan.scan.CorpusReader`, the one corpus reader) into frozen
:class:`Record` objects when a stage needs every text at once. Every record has a persistent id, taken from the
data or derived from the text (``t-`` + 16 hex of the SHA-256 of the whitespace-normalised text;
``id_origin="content"`` records which). Anything that would make ids or texts ambiguous is refused with a
one-line :class:`CorpusError` naming the file, the line and the field.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from iteralab.common.digest import pairs_digest, string_digest
from iteralab.common.files import write_bytes_atomic
from iteralab.errors import CorpusError
from iteralab.plan.corpusfile import (
    IdOrigin,
    content_id,
    decode_utf8,
    detect_format,
    examples_of,
    normalize_text,
    read_csv_rows,
    short,
    text_fingerprint,
)
from iteralab.plan.scan import CorpusReader, read_options

__all__ = ["Corpus", "IdOrigin", "Pairs", "Record", "check_disjoint", "check_disjoint_from_file", "content_id",
           "decode_utf8", "detect_format", "examples_of", "load_corpus", "normalize_text", "read_csv_rows",
           "text_fingerprint", "write_corpus"]


@dataclass(frozen=True)
class Record:
    """One input text. ``line`` is where it starts in its file (1-based; for Parquet the row number)."""

    id: str
    text: str
    label: str | None
    line: int


@dataclass(frozen=True)
class Corpus:
    """An ordered, id-unique set of records with the file it came from and where its ids came from.

    ``notes`` tells what the loader dropped or changed (empty for :func:`load_corpus`, which refuses).
    """

    records: tuple[Record, ...]
    source: str
    id_origin: IdOrigin
    notes: tuple[str, ...] = field(default=(), compare=False)
    #: Extra columns asked of the loader (e.g. a length stratum): name -> one value per record, in order.
    columns: Mapping[str, tuple[str | None, ...]] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "records", tuple(self.records))
        object.__setattr__(self, "notes", tuple(self.notes))
        if self.id_origin not in ("data", "content"):
            raise CorpusError(f"{self.source}: id_origin must be 'data' or 'content', not {self.id_origin!r}")
        if len(self._index) != len(self.records):
            seen: set[str] = set()
            dups: set[str] = set()
            for r in self.records:
                (dups if r.id in seen else seen).add(r.id)
            raise CorpusError(f"{self.source}: {len(dups)} duplicate ids (e.g. {examples_of(dups)})")

    @cached_property
    def _index(self) -> dict[str, int]:
        return {r.id: i for i, r in enumerate(self.records)}

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(r.id for r in self.records)

    @property
    def texts(self) -> tuple[str, ...]:
        return tuple(r.text for r in self.records)

    @property
    def labels(self) -> tuple[str | None, ...]:
        return tuple(r.label for r in self.records)

    def __len__(self) -> int:
        return len(self.records)

    def label_counts(self) -> dict[str | None, int]:
        """How many records carry each label (``None`` for unlabelled), labels sorted."""
        counts: dict[str | None, int] = {}
        for r in self.records:
            counts[r.label] = counts.get(r.label, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (kv[0] is None, kv[0] or "")))

    def fingerprint(self) -> str:
        """The digest of the (id, text) pairs sorted by id (:mod:`iteralab.common.digest`): independent of order,
        sensitive to any character."""
        pairs = sorted((r.id, r.text) for r in self.records)
        return pairs_digest([p[0] for p in pairs], [p[1] for p in pairs])

    def order_hash(self) -> str:
        """The digest of the ids in pass order (C1: the pass order is recorded)."""
        return string_digest([r.id for r in self.records])

    def pairs(self) -> Pairs:
        """Its ``(id, text)`` pairs in order, for :func:`check_disjoint`."""
        return Pairs(self.source, [(r.id, r.text) for r in self.records])

    def text_fingerprints(self) -> set[str]:
        return {text_fingerprint(r.text) for r in self.records}

    def subset(self, ids: Iterable[str]) -> Corpus:
        """The records whose id is in ``ids``, in this corpus's order. Unknown ids are refused."""
        wanted = set(ids)
        unknown = wanted - self._index.keys()
        if unknown:
            raise CorpusError(f"{self.source}: {len(unknown)} ids are not in the corpus (e.g. {examples_of(unknown)})")
        kept = tuple(r for r in self.records if r.id in wanted)
        return Corpus(kept, self.source, self.id_origin, self.notes)

    def reordered(self, ids: Sequence[str]) -> Corpus:
        """The same records in the order of ``ids``, which must list every id exactly once."""
        ids = list(ids)
        unknown = set(ids) - self._index.keys()
        missing = self._index.keys() - set(ids)
        if unknown or missing or len(ids) != len(self.records):
            raise CorpusError(
                f"{self.source}: a new order must list each of the {len(self.records)} ids once "
                f"(got {len(ids)}; {len(unknown)} unknown, {len(missing)} missing"
                + (f", e.g. missing {examples_of(missing)}" if missing else "")
                + (f", e.g. unknown {examples_of(unknown)}" if unknown else "")
                + ")"
            )
        return Corpus(tuple(self.records[self._index[i]] for i in ids), self.source, self.id_origin, self.notes)


def load_corpus(
    path: str | os.PathLike[str], *, id_column: str = "id", text_column: str = "text", label_column: str = "label",
    classes: Sequence[str] | None = None, format: str | None = None, require_labels: bool = True,
    extra_columns: Sequence[str] = (), duplicate_texts: Literal["refuse", "skip"] = "refuse", require_id: bool = False,
) -> Corpus:
    """Every record of a CSV, JSONL or Parquet corpus, collected from :class:`iteralab.plan.scan.CorpusReader`
    (for a stage that needs every text at once), refusing anything that would make ids or texts ambiguous.

    Ids come from ``id_column`` when the file has that column; when it has none, they are derived from
    the texts (``id_origin="content"``) and two records with the same normalised text are refused.
    Raises :class:`CorpusError` naming the file, line (Parquet: row) and field at fault. With
    ``duplicate_texts="skip"`` a repeated text in a file without ids is left out instead, and ``notes`` says so.
    ``require_id``: the id column was named on purpose (a protocol's ``corpus.id_column``), so a file without it
    is refused rather than given ids derived from the texts.
    """
    options = read_options(id_column=id_column, text_column=text_column, label_column=label_column,
                           classes=classes, require_labels=require_labels, extra_columns=extra_columns,
                           require_id=require_id, duplicate_texts=duplicate_texts)
    reader = CorpusReader(path, options, format=format, lines=True)
    records: list[Record] = []
    extra: dict[str, list[str | None]] = {name: [] for name in extra_columns}
    for batch in reader.batches():
        if batch is None:  # the reader starts again from the first record
            records.clear()
            extra = {name: [] for name in extra_columns}
            continue
        records += map(Record, batch.ids, batch.texts, batch.labels, batch.lines or ())
        for name, values in batch.extra.items():
            extra[name] += values
    return Corpus(tuple(records), reader.where, reader.id_origin, tuple(reader.notes),
                  columns={name: tuple(values) for name, values in extra.items()})


def write_corpus(
    corpus: Corpus, path: str | os.PathLike[str], *, extra: Mapping[str, Sequence[Any]] | None = None
) -> None:
    """Write ``id,text,label`` (+ ``extra`` columns, one value per record in corpus order) as UTF-8 CSV,
    atomically (temporary file in the same folder, fsync, rename). ``None`` becomes an empty cell."""
    extra = dict(extra or {})
    for name, values in extra.items():
        if name in ("id", "text", "label"):
            raise CorpusError(f"{path}: extra column {name!r} clashes with a corpus column")
        if len(values) != len(corpus):
            raise CorpusError(f"{path}: extra column {name!r} has {len(values)} values for {len(corpus)} records")
    buf = io.StringIO(newline="")
    # QUOTE_ALL: a text holding a lone carriage return must stay one field when read back.
    writer = csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_ALL)
    writer.writerow(["id", "text", "label", *extra])
    columns = list(extra.values())
    for i, r in enumerate(corpus.records):
        cells = ("" if c[i] is None else c[i] for c in columns)
        writer.writerow([r.id, r.text, "" if r.label is None else r.label, *cells])
    write_bytes_atomic(path, buf.getvalue().encode("utf-8"))


# ------------------------------------------------------------------------------------- P4: disjointness


@dataclass(frozen=True)
class Pairs:
    """``(id, text)`` of documents of one file: a whole split's (:meth:`Corpus.pairs`), or only those a streamed
    read kept because their id or text digest is shared with the other split."""

    source: str
    rows: Sequence[tuple[str, str]]


def check_disjoint(tuning: Corpus | Pairs, final: Corpus | Pairs) -> None:
    """P4: refuse when the tuning data and the final corpus share an id or a (whitespace-normalised) text. Given
    only the documents whose id or text digest is shared, the counts are exact (every shared id and text is
    among them)."""
    tuning, final = (s.pairs() if isinstance(s, Corpus) else s for s in (tuning, final))
    shared_ids = {i for i, _ in tuning.rows} & {i for i, _ in final.rows}
    final_by_fp = {text_fingerprint(text): id_ for id_, text in final.rows}
    shared_texts = sorted(
        (id_, final_by_fp[fp]) for id_, text in tuning.rows if (fp := text_fingerprint(text)) in final_by_fp
    )
    if not shared_ids and not shared_texts:
        return
    parts = []
    if shared_ids:
        parts.append(f"{len(shared_ids)} shared ids (e.g. {examples_of(shared_ids)})")
    if shared_texts:
        shown = ", ".join(f"{short(t)}={short(f)}" for t, f in shared_texts[:3])
        parts.append(f"{len(shared_texts)} shared texts (tuning id=final id, e.g. {shown})")
    raise CorpusError(
        f"tuning data ({tuning.source}) and final corpus ({final.source}) overlap: " + "; ".join(parts),
        hint="remove these texts from the tuning data: the final comparison must use texts never seen while tuning",
    )


def check_disjoint_from_file(tuning: Corpus, final: str | os.PathLike[str], *, id_column: str = "id",
                             text_column: str = "text", label_column: str = "label") -> None:
    """:func:`check_disjoint` of a split in memory and a final corpus file read in record batches (labels not
    required): only the final documents whose id or normalised text the split holds are kept."""
    ids, texts = set(tuning.ids), tuning.text_fingerprints()
    reader = CorpusReader(final, read_options(id_column=id_column, text_column=text_column, label_column=label_column,
                                              require_labels=False))
    kept: list[tuple[str, str]] = []
    for batch in reader.batches():
        if batch is None:
            kept.clear()
            continue
        kept += ((i, t) for i, t in zip(batch.ids, batch.texts) if i in ids or text_fingerprint(t) in texts)
    check_disjoint(tuning, Pairs(reader.where, kept))
