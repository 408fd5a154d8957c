"""A corpus read in record batches (C1): the one corpus reader. It checks what :mod:`iteralab.plan.rows` checks,
gives the ids and digests of :class:`iteralab.plan.corpus.Corpus`, and holds no Python object per document at once.

:class:`CorpusReader` reads a CSV, JSONL or Parquet corpus batch by batch and yields every validated batch. A batch
that fails a check, or a shape the batch read does not take (JSONL records whose keys differ), sends the reader to
:class:`iteralab.plan.rows.CarefulRead`, which reads the file again record by record (streamed too) and raises the
one-line error that names the first bad line (or row) and field, or yields the records it accepts: the reader then
yields ``None`` first, "start again from the first record".

``scan_corpus`` hands the batches to the caller's sinks (e.g. the writer of a campaign's corpus copy) and computes
the size, the fingerprint, the order hash and the digest of the reference labels (in id order). When the ids
arrive in ascending order (the usual case for a corpus with ids) the digests are streamed in the same read and
nothing per document is kept; otherwise the ids, texts and labels are kept as Arrow arrays (bytes, not Python
objects) in a second read and hashed in id order at the end.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import lzma
import os
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from operator import itemgetter
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from iteralab.common.digest import StringDigest
from iteralab.errors import CorpusError
from iteralab.kit.calcul_forfaits import numbered_records
from iteralab.plan.corpusfile import MAX_CSV_FIELD, IdOrigin, detect_format, text_fingerprint
from iteralab.plan.rows import Batch, CarefulRead, ReadOptions

#: Rows per record batch: bounds what a read holds as Python values at once.
BATCH_ROWS = 1 << 14
#: Sorted rows hashed per step when the ids were not in ascending order.
HASH_ROWS = 1 << 15

#: Receives each validated batch in file order; ``None`` means "start again from the first record".
Sink = Callable[[Batch | None], None]


@dataclass(frozen=True)
class CorpusScan:
    """What a streamed read of a corpus established: the digests ``Corpus`` computes, and ``labels_sha256``,
    the digest of the reference labels in id order (:mod:`iteralab.common.digest`). Equal fingerprints mean equal ids and
    texts, so a corpus whose fingerprint and ``labels_sha256`` equal a lock's has the records the lock
    fingerprinted."""

    source: str
    id_origin: IdOrigin
    size: int
    fingerprint: str
    order_hash: str
    labels_sha256: str
    #: How many records carry each value of each extra column counted (``None`` for an empty cell), values sorted.
    extra_counts: dict[str, dict[str | None, int]] = field(default_factory=dict)


class _Refused(Exception):
    """A batch failed a check, or has a shape the batch read does not take: the careful read decides."""


#: What a batch read may meet in a file it leaves to the careful read: a refused batch, undecodable bytes,
#: malformed CSV or JSON, a missing, damaged or compressed-and-damaged file (the careful read names the fault).
_DOUBTS = (_Refused, CorpusError, ValueError, RecursionError, csv.Error, OSError, EOFError, lzma.LZMAError,
           zlib.error, pa.ArrowException, TypeError)


# ---------------------------------------------------------------------------------------------- reading


Cells = dict[str, list]


def _text_stream(path: Path, compression: str | None, newline: str) -> io.TextIOWrapper:
    """The file as text for the batch read (the careful read has its own, that names every fault)."""
    opener = {"gzip": gzip.open, "bz2": bz2.open, "xz": lzma.open}.get(compression or "", open)
    return io.TextIOWrapper(opener(path, "rb"), encoding="utf-8-sig", errors="strict", newline=newline)


def _numbered(records: Iterator[tuple[int, int, list[str]]], count: int) -> tuple[list[list[str]], list[int]]:
    """Up to ``count`` non-blank CSV rows with the line each starts on (``records``: :func:`numbered_records`)."""
    rows: list[list[str]] = []
    lines: list[int] = []
    for start, _, row in records:
        if row:
            rows.append(row)
            lines.append(start)
            if len(rows) == count:
                break
    return rows, lines


def _csv_batches(path: Path, where: str, compression: str | None, wanted: Sequence[str],
                 numbered: bool) -> Iterator[tuple[Cells, list[int] | None]]:
    old_limit = csv.field_size_limit()
    csv.field_size_limit(MAX_CSV_FIELD)
    try:
        with _text_stream(path, compression, "") as fh:
            reader = csv.reader(fh, strict=True)
            records = numbered_records(reader)
            header = next((row for _, _, row in records if row), None)
            if header is None or any(header.count(name) > 1 for name in wanted):
                raise _Refused
            index = {name: header.index(name) for name in wanted if name in header}
            width, lines = len(header), None
            while True:
                if numbered:
                    rows, lines = _numbered(records, BATCH_ROWS)
                else:
                    rows = list(islice(reader, BATCH_ROWS))
                    if not all(rows):  # blank lines are skipped, as the careful read skips them
                        rows = [r for r in rows if r]
                        if not rows:
                            continue
                if not rows:
                    return
                if set(map(len, rows)) != {width}:
                    raise _Refused
                yield {name: list(map(itemgetter(i), rows)) for name, i in index.items()}, lines
    finally:
        csv.field_size_limit(old_limit)


def _jsonl_batches(path: Path, where: str, compression: str | None, wanted: Sequence[str],
                   numbered: bool) -> Iterator[tuple[Cells, list[int] | None]]:
    present: frozenset[str] | None = None  # the wanted keys of the first record: every record must agree
    with _text_stream(path, compression, "\n") as fh:
        rows: list[dict] = []
        lines: list[int] | None = [] if numbered else None
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            obj = json.loads(raw)
            if not isinstance(obj, dict):
                raise _Refused
            keys = frozenset(k for k in wanted if k in obj)
            if present is None:
                present = keys
            elif keys != present:
                raise _Refused  # a key missing from some records: the careful read says which line and field
            rows.append(obj)
            if lines is not None:
                lines.append(number)
            if len(rows) == BATCH_ROWS:
                yield {name: [r[name] for r in rows] for name in present}, lines
                rows, lines = [], [] if numbered else None
        if rows and present is not None:
            yield {name: [r[name] for r in rows] for name in present}, lines


def _parquet_batches(path: Path, wanted: Sequence[str]) -> Iterator[tuple[Cells, list[int] | None]]:
    handle = pq.ParquetFile(path)
    names = list(handle.schema_arrow.names)
    present = [n for n in dict.fromkeys(wanted) if n in names]
    for name in present:
        kind = handle.schema_arrow.field(name).type
        kind = kind.value_type if pa.types.is_dictionary(kind) else kind
        if names.count(name) > 1 or not (pa.types.is_string(kind) or pa.types.is_large_string(kind)
                                         or pa.types.is_integer(kind)):
            raise _Refused
    row = 0
    for batch in handle.iter_batches(batch_size=BATCH_ROWS, columns=present):
        yield {name: batch.column(name).to_pylist() for name in present}, list(range(row + 1, row + batch.num_rows + 1))
        row += batch.num_rows


def _raw_batches(path: Path, where: str, fmt: str, compression: str | None, wanted: Sequence[str],
                 numbered: bool) -> Iterator[tuple[Cells, list[int] | None]]:
    if fmt == "csv":
        return _csv_batches(path, where, compression, wanted, numbered)
    if fmt == "jsonl":
        return _jsonl_batches(path, where, compression, wanted, numbered)
    return _parquet_batches(path, wanted)


# ------------------------------------------------------------------------------------------- validation


def _strings(values: list, numbers_ok: bool, blank_is_none: bool = False) -> list[str | None]:
    """Cells as the careful read takes them: strings kept, integers (not booleans) as text when allowed."""
    out: list[str | None] = []
    for v in values:
        if type(v) is str:
            out.append(None if blank_is_none and not v.strip() else v)
        elif v is None:
            out.append(None)
        elif numbers_ok and type(v) is int:
            out.append(str(v))
        else:
            raise _Refused
    return out


def _check_unicode(values: list[str | None]) -> None:
    for v in values:
        if v is not None and not v.isascii():
            v.encode("utf-8")  # a lone surrogate (JSON escape) raises UnicodeEncodeError


def _validate(cells: dict[str, list], id_column: str, text_column: str, label_column: str, has_id: bool,
              has_label: bool, require_labels: bool, allowed: set[str] | None, extra_columns: Sequence[str],
              typed: bool, lines: list[int] | None) -> Batch:
    """``typed``: the cells may hold other values than strings (JSONL, Parquet), and JSONL lone surrogates."""
    check_unicode = _check_unicode if typed else (lambda values: None)
    if text_column not in cells or (has_id and id_column not in cells):
        raise _Refused
    texts = cells[text_column]
    if typed and not all(type(t) is str for t in texts) or not all(map(str.strip, texts)):
        raise _Refused
    check_unicode(texts)
    if has_id:
        ids = _strings(cells[id_column], numbers_ok=True) if typed else cells[id_column]
        if typed and any(i is None for i in ids) or not all(map(str.strip, ids)):  # type: ignore[arg-type]
            raise _Refused
        check_unicode(ids)
    else:
        ids = ["t-" + text_fingerprint(t)[:16] for t in texts]
    if has_label:
        raw = cells[label_column]
        labels = _strings(raw, numbers_ok=True, blank_is_none=True) if typed else \
            raw if all(map(str.strip, raw)) else [v if v.strip() else None for v in raw]
        check_unicode(labels)
        if require_labels and None in labels:
            raise _Refused
        if allowed is not None and not set(labels) <= allowed | {None}:
            raise _Refused
    else:
        labels = [None] * len(texts)
    extra = {}
    for name in extra_columns:
        if name not in cells:
            raise _Refused
        extra[name] = _strings(cells[name], numbers_ok=True) if typed else cells[name]
        check_unicode(extra[name])
    return Batch(ids, texts, labels, extra, lines)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------ digests


class _Digests:
    """Size, order hash and, while ids ascend, the fingerprint and labels digest, streamed; the columns are
    kept (Arrow) as well until the ids are known to ascend through the whole file."""

    def __init__(self, keep: bool) -> None:
        self.size = 0
        self.order = StringDigest()
        self.fingerprint = StringDigest()
        self.labels = StringDigest()
        self.ascending = True
        self.last: str | None = None
        self.keep = keep
        self.kept: dict[str, list[Any]] = {"id": [], "text": [], "label": []}

    def update(self, batch: Batch) -> None:
        ids = batch.ids
        self.size += len(ids)
        self.order.update(ids)
        if self.ascending and ids:
            # strictly ascending: sorted already (Timsort checks that in one C pass) and no id repeated
            self.ascending = (self.last is None or self.last < ids[0]) and sorted(ids) == ids and \
                len(set(ids)) == len(ids)
        if self.ascending:
            self.fingerprint.update_pairs(ids, batch.texts)
            self.labels.update(batch.labels)
            self.last = ids[-1] if ids else self.last
        if self.keep:
            for name, values in (("id", ids), ("text", batch.texts), ("label", batch.labels)):
                self.kept[name].append(pa.array(values, pa.string()))

    def sorted_digests(self) -> tuple[str, str]:
        """(fingerprint, labels digest) from the kept columns, hashed in id order."""

        columns = {name: pa.chunked_array(chunks, pa.string()).combine_chunks()
                   for name, chunks in self.kept.items()}
        order = pc.sort_indices(columns["id"])
        fingerprint, labels = StringDigest(), StringDigest()
        for start in range(0, len(order), HASH_ROWS):
            rows = order.slice(start, HASH_ROWS)
            fingerprint.update_pairs(columns["id"].take(rows), columns["text"].take(rows))
            labels.update(columns["label"].take(rows))
        return fingerprint.hexdigest(), labels.hexdigest()


class _Unique:
    """Are the ids of the batches read so far distinct? Ascending ids are; otherwise their Python hashes (8 bytes
    each, kept from the first batch) are counted at the end. Equal hashes of different ids (a collision) only send
    the file to the careful read, which finds it valid."""

    def __init__(self) -> None:
        self.ascending, self.last, self.size = True, None, 0
        self.hashes: list[np.ndarray] = []

    def update(self, ids: list[str]) -> None:
        self.size += len(ids)
        self.hashes.append(np.fromiter(map(hash, ids), np.int64, len(ids)))
        if self.ascending and ids:
            # strictly ascending: sorted already (Timsort checks that in one C pass) and no id repeated
            self.ascending = (self.last is None or self.last < ids[0]) and sorted(ids) == ids and \
                len(set(ids)) == len(ids)
            self.last = ids[-1]

    def distinct(self) -> bool:
        return self.ascending or len(np.unique(np.concatenate(self.hashes))) == self.size


class CorpusReader:
    """The corpus reader: :meth:`batches` yields the validated records of a CSV, JSONL or Parquet corpus in record
    batches (``None`` first when it starts again: see the module's note), or raises the one-line
    :class:`CorpusError` that names the first bad line (or row) and field. ``lines``: each batch says where its
    records start. ``id_origin`` and ``notes`` (repeated texts skipped) are known once the batches are read."""

    def __init__(self, path: str | os.PathLike[str], options: ReadOptions = ReadOptions(), *,
                 format: str | None = None, lines: bool = False) -> None:
        self.path, self.where = Path(path), os.fspath(path)
        self.fmt, self.compression = detect_format(path, format)
        self.options, self.lines = options, lines
        self.id_origin: IdOrigin = "data"
        self.notes: list[str] = []

    def batches(self) -> Iterator[Batch | None]:
        started = False
        try:
            for batch in self._batched():
                started = True
                yield batch
            return
        except _DOUBTS:
            pass
        if started:
            yield None
        careful = CarefulRead(self.path, self.where, self.fmt, self.compression, self.options, BATCH_ROWS)
        yield from careful.batches()
        self.id_origin = "data" if careful.id_origin == "data" else "content"
        self.notes = careful.notes

    def _batched(self) -> Iterator[Batch]:
        o = self.options
        if not self.path.is_file():
            raise _Refused
        allowed = set(o.classes) if o.classes is not None else None
        unique = _Unique()
        has_id = has_label = None
        for cells, lines in _raw_batches(self.path, self.where, self.fmt, self.compression, o.wanted, self.lines):
            if has_id is None:
                has_id, has_label = o.id_column in cells, o.label_column in cells
                if (o.require_labels and not has_label) or (o.require_id and not has_id):
                    raise _Refused
            batch = _validate(cells, o.id_column, o.text_column, o.label_column, has_id, bool(has_label),
                              o.require_labels, allowed, o.extra_columns, typed=self.fmt != "csv", lines=lines)
            unique.update(batch.ids)
            yield batch
        if unique.size == 0 or not unique.distinct():
            raise _Refused  # an empty file, or a repeated id (or, without an id column, a repeated text)
        self.id_origin = "data" if has_id else "content"


def read_options(*, id_column: str = "id", text_column: str = "text", label_column: str = "label",
                 classes: Sequence[str] | None = None, require_labels: bool = True, extra_columns: Sequence[str] = (),
                 require_id: bool = False, duplicate_texts: Literal["refuse", "skip"] = "refuse") -> ReadOptions:
    """:class:`ReadOptions` from the keywords the readers take (sequences become tuples)."""
    return ReadOptions(id_column, text_column, label_column, tuple(classes) if classes is not None else None,
                       require_labels, tuple(extra_columns), require_id, duplicate_texts)


def scan_corpus(
    path: str | os.PathLike[str],
    *,
    id_column: str = "id",
    text_column: str = "text",
    label_column: str = "label",
    classes: Sequence[str] | None = None,
    format: str | None = None,
    require_labels: bool = True,
    extra_columns: Sequence[str] = (),
    sinks: Sequence[Sink] = (),
    require_id: bool = False,
    counted_columns: Sequence[str] | None = None,
) -> CorpusScan:
    """Read, check and fingerprint a corpus in record batches, handing each validated batch to ``sinks``.
    ``counted_columns``: the extra columns whose values are counted (``extra_counts``; None: every extra column);
    a column of a value per document (a reference answer, a prompt's title) is read without a tally of its values.

    Raises the reader's :class:`CorpusError` for a file it refuses. Sinks may have seen earlier batches of a
    refused file: a caller writing from them discards what it wrote when this raises, or on ``None``."""
    options = read_options(id_column=id_column, text_column=text_column, label_column=label_column, classes=classes,
                           require_labels=require_labels, extra_columns=extra_columns, require_id=require_id)
    counted = list(extra_columns if counted_columns is None else
                   [name for name in extra_columns if name in counted_columns])
    result = _scan(CorpusReader(path, options, format=format), sinks, keep=False, counted=counted)
    if result is None:  # the ids do not ascend: read again, keeping the columns to hash them in id order
        result = _scan(CorpusReader(path, options, format=format), (), keep=True, counted=counted)
    return result


def _counted(tally: dict[str | None, int]) -> dict[str | None, int]:
    return dict(sorted(tally.items(), key=lambda kv: (kv[0] is None, kv[0] or "")))


def _scan(reader: CorpusReader, sinks: Sequence[Sink], keep: bool, counted: list[str]) -> CorpusScan | None:
    extra_columns = counted
    digests = _Digests(keep)
    counts: dict[str, dict[str | None, int]] = {name: {} for name in extra_columns}
    for batch in reader.batches():
        if batch is None:  # the careful read starts again from the first record
            digests, counts = _Digests(keep), {name: {} for name in extra_columns}
        else:
            for name in extra_columns:
                values, tally = batch.extra[name], counts[name]
                for v in values:
                    tally[v] = tally.get(v, 0) + 1
            digests.update(batch)
        for sink in sinks:
            sink(batch)
    if not digests.ascending and not keep:
        return None
    if keep:
        fingerprint, labels = digests.sorted_digests()
    else:
        fingerprint, labels = digests.fingerprint.hexdigest(), digests.labels.hexdigest()
    return CorpusScan(reader.where, reader.id_origin, digests.size, fingerprint, digests.order.hexdigest(), labels,
                      {name: _counted(tally) for name, tally in counts.items()})
