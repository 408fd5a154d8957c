"""A corpus read in record batches (C1): the same checks, ids and digests as :func:`plan.corpus.load_corpus`,
without a Python object per document held at once.

``scan_corpus`` reads a CSV, JSONL or Parquet corpus batch by batch, validates each batch, computes the size,
the fingerprint, the order hash and the digest of the reference labels (in id order) incrementally, and
hands every validated batch to the caller's sinks (e.g. the writer of a campaign's corpus copy). When the ids
arrive in ascending order (the usual case for a corpus with ids) the digests are streamed in the same read and
nothing per document is kept; otherwise the ids, texts, text hashes and labels are kept as Arrow arrays (bytes,
not Python objects) and hashed in id order at the end.

Refusals are those of ``load_corpus``, word for word: a batch that fails any check stops the scan and the file
is read again by ``load_corpus``, whose one-line error names the first bad line (or row) and field.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import lzma
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from operator import itemgetter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from iteralab.common.digest import StringDigest
from iteralab.plan.corpus import MAX_CSV_FIELD, Corpus, IdOrigin, detect_format, load_corpus, text_fingerprint

#: Rows per record batch: bounds what a scan holds as Python values at once.
BATCH_ROWS = 1 << 14
#: Sorted rows hashed per step when the ids were not in ascending order.
HASH_ROWS = 1 << 15


@dataclass(frozen=True)
class Batch:
    """Validated rows of one record batch, in file order (ids as strings, ``None`` for an absent label)."""

    ids: list[str]
    texts: list[str]
    labels: list[str | None]
    extra: dict[str, list[str | None]]


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
    #: How many records carry each value of each extra column (``None`` for an empty cell), values sorted.
    extra_counts: dict[str, dict[str | None, int]] = field(default_factory=dict)


class _Refused(Exception):
    """A batch failed a check: the precise error comes from ``load_corpus``."""


class _SinkFailed(Exception):
    """A sink raised (e.g. the disk is full): its error is the caller's, never a reason to read the file again."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


# ---------------------------------------------------------------------------------------------- reading


def _text_stream(path: Path, compression: str | None, newline: str) -> io.TextIOWrapper:
    opener = {"gzip": gzip.open, "bz2": bz2.open, "xz": lzma.open}.get(compression or "", open)
    raw = opener(path, "rb")
    return io.TextIOWrapper(raw, encoding="utf-8-sig", errors="strict", newline=newline)


def _csv_batches(path: Path, compression: str | None, wanted: Sequence[str]) -> Iterator[dict[str, list]]:
    old_limit = csv.field_size_limit()
    csv.field_size_limit(MAX_CSV_FIELD)
    try:
        with _text_stream(path, compression, "") as fh:
            reader = csv.reader(fh, strict=True)
            header = next((row for row in reader if row), None)
            if header is None or any(header.count(name) > 1 for name in wanted):
                raise _Refused
            index = {name: header.index(name) for name in wanted if name in header}
            width = len(header)
            while rows := list(islice(reader, BATCH_ROWS)):
                if not all(rows):  # blank lines are skipped, as load_corpus skips them
                    rows = [r for r in rows if r]
                    if not rows:
                        continue
                if set(map(len, rows)) != {width}:
                    raise _Refused
                yield {name: list(map(itemgetter(i), rows)) for name, i in index.items()}
    finally:
        csv.field_size_limit(old_limit)


def _jsonl_batches(path: Path, compression: str | None, wanted: Sequence[str]) -> Iterator[dict[str, list]]:
    present: frozenset[str] | None = None  # the wanted keys of the first record: every record must agree
    with _text_stream(path, compression, "\n") as fh:
        rows: list[dict] = []
        for raw in fh:
            if not raw.strip():
                continue
            obj = json.loads(raw)
            if not isinstance(obj, dict):
                raise _Refused
            keys = frozenset(k for k in wanted if k in obj)
            if present is None:
                present = keys
            elif keys != present:
                raise _Refused  # a key missing from some records: load_corpus says which line and field
            rows.append(obj)
            if len(rows) == BATCH_ROWS:
                yield {name: [r[name] for r in rows] for name in present}
                rows = []
        if rows and present is not None:
            yield {name: [r[name] for r in rows] for name in present}


def _parquet_batches(path: Path, wanted: Sequence[str]) -> Iterator[dict[str, list]]:
    handle = pq.ParquetFile(path)
    names = list(handle.schema_arrow.names)
    present = [n for n in dict.fromkeys(wanted) if n in names]
    for name in present:
        kind = handle.schema_arrow.field(name).type
        kind = kind.value_type if pa.types.is_dictionary(kind) else kind
        if names.count(name) > 1 or not (pa.types.is_string(kind) or pa.types.is_large_string(kind)
                                         or pa.types.is_integer(kind)):
            raise _Refused
    for batch in handle.iter_batches(batch_size=BATCH_ROWS, columns=present):
        yield {name: batch.column(name).to_pylist() for name in present}


def _raw_batches(path: Path, fmt: str, compression: str | None, wanted: Sequence[str]) -> Iterator[dict[str, list]]:
    if fmt == "csv":
        return _csv_batches(path, compression, wanted)
    if fmt == "jsonl":
        return _jsonl_batches(path, compression, wanted)
    return _parquet_batches(path, wanted)


# ------------------------------------------------------------------------------------------- validation


def _strings(values: list, numbers_ok: bool, blank_is_none: bool = False) -> list[str | None]:
    """Cells as ``load_corpus`` reads them: strings kept, integers (not booleans) as text when allowed."""
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
              typed: bool) -> Batch:
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
    return Batch(ids, texts, labels, extra)  # type: ignore[arg-type]


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

    def sorted_digests(self) -> tuple[str, str, int]:
        """(fingerprint, labels digest, distinct ids) from the kept columns, hashed in id order."""

        columns = {name: pa.chunked_array(chunks, pa.string()).combine_chunks()
                   for name, chunks in self.kept.items()}
        order = pc.sort_indices(columns["id"])
        fingerprint, labels = StringDigest(), StringDigest()
        for start in range(0, len(order), HASH_ROWS):
            rows = order.slice(start, HASH_ROWS)
            fingerprint.update_pairs(columns["id"].take(rows), columns["text"].take(rows))
            labels.update(columns["label"].take(rows))
        return fingerprint.hexdigest(), labels.hexdigest(), pc.count_distinct(columns["id"]).as_py()


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
) -> CorpusScan:
    """Read, check and fingerprint a corpus in record batches, handing each validated batch to ``sinks``.

    Accepts exactly what ``load_corpus`` (with ``duplicate_texts="refuse"``) accepts, with the same digests;
    anything else raises ``load_corpus``'s :class:`CorpusError`. Sinks may have seen earlier batches of a
    refused file: a caller writing from them discards what it wrote when this raises, or on ``None``."""
    where = os.fspath(path)
    fmt, compression = detect_format(path, format)
    wanted = [id_column, text_column, label_column, *extra_columns]
    options = dict(id_column=id_column, text_column=text_column, label_column=label_column, classes=classes,
                   format=format, require_labels=require_labels, extra_columns=extra_columns, require_id=require_id)
    allowed = set(classes) if classes is not None else None
    try:
        result = _scan(Path(path), where, fmt, compression, wanted, options, allowed, sinks, keep=False)
        if result is None:  # the ids do not ascend: read again, keeping the columns to hash them in id order
            result = _scan(Path(path), where, fmt, compression, wanted, options, allowed, (), keep=True)
        return result
    except _SinkFailed as failed:
        raise failed.error from None
    except Exception:  # noqa: BLE001  # any doubt about the file: the reference loader decides, below
        pass
    # A refused batch, or a shape the batch reader does not take (e.g. JSONL records whose keys differ): the
    # reference loader raises its one-line error, or reads the file whole and the scan is made from it.
    corpus = load_corpus(path, **options)
    return scan_of(corpus, sinks)


def scan_of(corpus: Corpus, sinks: Sequence[Sink] = ()) -> CorpusScan:
    """The scan of a corpus already loaded: sinks are told to start again (``None``), then get its batches."""
    for sink in sinks:
        sink(None)
    for start in range(0, len(corpus), BATCH_ROWS):
        part = corpus.records[start:start + BATCH_ROWS]
        batch = Batch([r.id for r in part], [r.text for r in part], [r.label for r in part],
                      {name: list(values[start:start + BATCH_ROWS]) for name, values in corpus.columns.items()})
        for sink in sinks:
            sink(batch)
    counts: dict[str, dict[str | None, int]] = {}
    for name, values in corpus.columns.items():
        tally: dict[str | None, int] = {}
        for v in values:
            tally[v] = tally.get(v, 0) + 1
        counts[name] = dict(sorted(tally.items(), key=lambda kv: (kv[0] is None, kv[0] or "")))
    labels = StringDigest()
    labels.update([r.label for r in sorted(corpus.records, key=lambda r: r.id)])
    return CorpusScan(corpus.source, corpus.id_origin, len(corpus), corpus.fingerprint(), corpus.order_hash(),
                      labels.hexdigest(), counts)


def _scan(path: Path, where: str, fmt: str, compression: str | None, wanted: list[str], options: dict[str, Any],
          allowed: set[str] | None, sinks: Sequence[Sink], keep: bool) -> CorpusScan | None:
    if not path.is_file():
        raise _Refused
    id_column, text_column, label_column = wanted[:3]
    extra_columns = wanted[3:]
    digests = _Digests(keep)
    counts: dict[str, dict[str | None, int]] = {name: {} for name in extra_columns}
    has_id = has_label = None
    for cells in _raw_batches(path, fmt, compression, wanted):
        if has_id is None:
            has_id, has_label = id_column in cells, label_column in cells
            if (options["require_labels"] and not has_label) or (options["require_id"] and not has_id):
                raise _Refused
        batch = _validate(cells, id_column, text_column, label_column, has_id, bool(has_label),
                          options["require_labels"], allowed, extra_columns, typed=fmt != "csv")
        for name, values in batch.extra.items():
            tally = counts[name]
            for v in values:
                tally[v] = tally.get(v, 0) + 1
        digests.update(batch)
        for sink in sinks:
            try:
                sink(batch)
            except Exception as exc:
                raise _SinkFailed(exc) from exc
    if digests.size == 0:
        raise _Refused
    if not digests.ascending and not keep:
        return None
    if keep:
        fingerprint, labels, distinct = digests.sorted_digests()
        if distinct != digests.size:
            raise _Refused  # a repeated id (or, without an id column, a repeated text)
    else:
        fingerprint, labels = digests.fingerprint.hexdigest(), digests.labels.hexdigest()
    ordered = {name: dict(sorted(tally.items(), key=lambda kv: (kv[0] is None, kv[0] or "")))
               for name, tally in counts.items()}
    return CorpusScan(where, "data" if has_id else "content", digests.size, fingerprint,
                      digests.order.hexdigest(), labels, ordered)
