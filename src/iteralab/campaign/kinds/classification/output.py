"""The prediction file of one pass (R7): its format, its one writer and its one reader.

A prediction file is Parquet with exactly three columns, one row per completed input in corpus order:

    id     string                          the corpus id
    label  dictionary<int8, string>        the most probable class (the class names, an index per row; files
                                           of earlier versions hold plain strings: read alike)
    probs  fixed_size_list<float32>[k]     one probability per class, in the protocol's class order

The columns after ``id`` are the pass's output, of one kind (:class:`~iteralab.campaign.records.PassOutput`,
:data:`OUTPUT_COLUMNS`): class labels and probabilities is the only kind written so far; a later kind (embedding
vectors, generated texts) keeps ``id`` and the corpus order, and brings its own columns, writer and checks.

It is serialised whole from Arrow/NumPy arrays (no Python object per row), written atomically (temporary name,
fsync, rename) and its sha256 is computed from the same bytes. :func:`read_predictions` returns the file as
arrays (:class:`PredictionSet`) with its format problems; every check of ``evaluate`` runs on those arrays.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from iteralab.campaign.records import CLASS_PROBABILITIES
from iteralab.common import files
from iteralab.common.arrow import numpy_array, string_array

FORMAT_VERSION = "1"
ROW_GROUP = 1 << 15
#: How many format problems are spelled out (all are counted).
SHOWN_PROBLEMS = 5
#: The columns after ``id`` of each output kind a prediction file can hold.
OUTPUT_COLUMNS = {CLASS_PROBABILITIES: ("label", "probs")}


def schema(n_classes: int) -> pa.Schema:
    label = pa.dictionary(pa.from_numpy_dtype(code_dtype(n_classes)), pa.string())
    label_column, probs_column = OUTPUT_COLUMNS[CLASS_PROBABILITIES]
    return pa.schema([("id", pa.string()), (label_column, label), (probs_column, pa.list_(pa.float32(), n_classes))],
                     metadata={"iteralab.predictions": FORMAT_VERSION})


def encode(ids: pa.Array, classes: list[str] | tuple[str, ...], probs: np.ndarray) -> bytes:
    """The Parquet bytes of one output set: ``ids`` (Arrow strings) and ``probs`` (rows × classes)."""
    return encode_buffer(ids, classes, probs).to_pybytes()


def encode_buffer(ids: pa.Array, classes: list[str] | tuple[str, ...], probs: np.ndarray) -> pa.Buffer:
    """:func:`encode` as an Arrow buffer (no copy into a Python ``bytes``)."""
    k = len(classes)
    probs = np.ascontiguousarray(probs, dtype=np.float32).reshape(len(ids), k)
    # the label of each row as an index into the class names: no string per row is built
    codes = probs.argmax(axis=1).astype(code_dtype(k)) if len(probs) else np.zeros(0, code_dtype(k))
    labels = pa.DictionaryArray.from_arrays(numpy_array(codes), string_array(list(classes)))
    ids = ids if ids.type == pa.string() else ids.cast(pa.string())
    table = pa.Table.from_arrays(
        [ids, labels, pa.FixedSizeListArray.from_arrays(numpy_array(probs.reshape(-1)), k)], schema=schema(k))

    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=ROW_GROUP, compression="zstd", use_dictionary=["label"],
                   write_statistics=False)
    return sink.getvalue()


def write_predictions(path: Path, ids: pa.Array, classes: list[str] | tuple[str, ...], probs: np.ndarray) -> str:
    """Write the file atomically; return its sha256 (of the bytes written)."""
    data = encode_buffer(ids, classes, probs)
    # looked up at call time: one atomic writer for every evidence file; it takes any object with the buffer protocol
    files.write_bytes_atomic(path, data)  # type: ignore[arg-type]
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class PredictionSet:
    """A prediction file as arrays. ``ids`` holds every record that has a string id (a record without one is
    counted in ``records`` only); ``labels`` is the class index of each of those records' label (-1: not a
    class); ``probs`` their probabilities (a row of NaN where they are not ``k`` numbers)."""

    ids: pa.Array
    labels: np.ndarray
    probs: np.ndarray
    records: int
    problems: tuple[str, ...]
    n_problems: int

    def by_id(self) -> tuple[pa.Array, np.ndarray, np.ndarray]:
        """(distinct ids in order of first appearance, records per id, row of each id's last record — a repeated
        id's last record is the one that counts)."""
        encoded = pc.dictionary_encode(self.ids)
        codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        m = len(encoded.dictionary)
        last = np.full(m, -1, dtype=np.int64)
        np.maximum.at(last, codes, np.arange(len(codes), dtype=np.int64))
        return encoded.dictionary, np.bincount(codes, minlength=m), last


def code_dtype(n: int) -> type:
    """The smallest signed integer type that holds the indices 0..n-1 and -1 (a class or stratum code)."""
    return np.int8 if n < 127 else np.int16 if n < 32767 else np.int32


def _class_codes(values: pa.Array, classes: tuple[str, ...]) -> np.ndarray:
    codes = pc.index_in(values, value_set=pa.array(list(classes), pa.string()))
    return pc.fill_null(codes, -1).to_numpy(zero_copy_only=False).astype(code_dtype(len(classes)))


#: Rows checked at a time when a prediction file is read: what a read holds beyond its result is bounded by
#: this, not by the file's size.
READ_BATCH = 1 << 15


def read_predictions(path: Path, classes: tuple[str, ...], sum_tol: float, data: bytes | None = None,
                     like: pa.Array | None = None) -> PredictionSet:
    """Read a prediction file with its format problems. ``like``: the ids the file is expected to hold in this
    order (the corpus's); when it holds exactly those, its set shares that array instead of keeping a copy of the
    ids."""
    return _read_parquet(path, classes, sum_tol, data, like)


def _empty(records: int, problems: list[str]) -> PredictionSet:
    return PredictionSet(pa.array([], pa.string()), np.zeros(0, np.int8), np.zeros((0, 0), np.float32),
                         records, tuple(problems[:SHOWN_PROBLEMS]), len(problems))


def _read_parquet(path: Path, classes: tuple[str, ...], sum_tol: float, data: bytes | None,
                  like: pa.Array | None = None) -> PredictionSet:
    """The file read in record batches of :data:`READ_BATCH` rows, each checked as it comes: what is kept is
    the ids (none while they are those of ``like``, in its order), one class code and ``k`` float32 per
    record."""

    k = len(classes)
    try:
        # labels as dictionary codes (the writer's encoding): never decoded into strings
        handle = pq.ParquetFile(pa.BufferReader(data) if data is not None else path, read_dictionary=["label"])
        names, n = handle.schema_arrow.names, handle.metadata.num_rows
        if names != ["id", "label", "probs"]:
            return _empty(n, [f"columns must be exactly id, label, probs (found {', '.join(names)})"])
        types = [handle.schema_arrow.field(c).type for c in names]
        id_type, label_type, probs_type = (t.value_type if pa.types.is_dictionary(t) else t for t in types)
        if not pa.types.is_string(id_type) or not pa.types.is_string(label_type) or not (
                pa.types.is_fixed_size_list(probs_type) and probs_type.list_size == k
                and pa.types.is_floating(probs_type.value_type)):
            return _empty(n, [f"column types must be id: string, label: string, probs: fixed_size_list<float>[{k}] "
                              f"(found {id_type}, {label_type}, {probs_type})"])
        ids_parts: list[pa.Array] = []
        shared = like is not None and len(like) == n  # the ids read so far are like[:start]
        codes = np.empty(n, dtype=code_dtype(k))
        matrix = np.empty((n, k), dtype=np.float32)
        has_id = np.empty(n, dtype=bool)
        found = _Problems()
        labels = _LabelCodes(classes)
        start = 0
        for batch in _read_ahead(handle.iter_batches(batch_size=READ_BATCH, use_threads=False)):
            ids, label, probs = batch.columns
            if pa.types.is_dictionary(ids.type):
                ids = ids.dictionary_decode()
            stop = start + len(batch)
            _check_batch(start, ids, label, labels(label), probs, k, sum_tol, found,
                         codes[start:stop], matrix[start:stop], has_id[start:stop])
            if shared and has_id[start:stop].all() and ids.equals(like.slice(start, stop - start)):
                start = stop
                continue
            if shared:  # the first record that differs from like: the ids before it are like's
                ids_parts.append(like.slice(0, start))
                shared = False
            ids_parts.append(ids.filter(pa.array(has_id[start:stop])) if not has_id[start:stop].all() else ids)
            start = stop
    except (pa.ArrowException, OSError, ValueError) as exc:
        return _empty(0, [f"not a readable Parquet file ({str(exc).splitlines()[0][:120]})"])
    if start != n:
        return _empty(0, [f"not a readable Parquet file ({start} rows read, {n} declared)"])
    if shared:
        ids_all = like
    else:
        ids_all = ids_parts[0] if len(ids_parts) == 1 else pa.concat_arrays(ids_parts) if ids_parts else \
            pa.array([], pa.string())
    if not has_id.all():
        kept = np.flatnonzero(has_id)
        codes, matrix = codes[kept], matrix[kept]
    problems, total = found.result()
    return PredictionSet(ids_all, codes, matrix, n, tuple(problems), total)


class _Problems:
    """The first :data:`SHOWN_PROBLEMS` failing rows of each kind (a row counts under its first failure) and
    the count of all, gathered batch by batch."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, str]] = []
        self.per_kind: dict[str, int] = {}
        self.total = 0

    def add(self, start: int, checks: list[tuple[str, np.ndarray]], message: Any) -> None:
        for kind, bad in checks:
            count = int(bad.sum())
            if not count:
                continue
            self.total += count
            room = SHOWN_PROBLEMS - self.per_kind.get(kind, 0)
            for i in np.flatnonzero(bad)[:max(room, 0)]:
                self.rows.append((start + int(i), f"row {start + int(i) + 1}: {message(int(i), kind)}"))
            self.per_kind[kind] = self.per_kind.get(kind, 0) + count

    def result(self) -> tuple[list[str], int]:
        return [text for _, text in sorted(self.rows)[:SHOWN_PROBLEMS]], self.total


def _check_batch(start: int, ids: pa.Array, label: pa.Array, label_codes: np.ndarray, probs: pa.Array, k: int,
                 sum_tol: float, found: _Problems, codes: np.ndarray, matrix: np.ndarray, has_id: np.ndarray) -> None:
    """Check one batch's rows (``label_codes``: the class index of each row's label) and fill its slices of
    ``codes``, ``matrix`` and ``has_id``."""
    has_id[:] = pc.is_valid(ids).to_numpy(zero_copy_only=False)
    probs_ok = _fill_matrix(probs, k, matrix)
    codes[:] = label_codes
    checks = _row_checks(
        id_ok=has_id & (pc.fill_null(pc.utf8_length(ids), 0).to_numpy(zero_copy_only=False) > 0),
        label_ok=codes >= 0, probs_ok=probs_ok, matrix=matrix, codes=codes, sum_tol=sum_tol)
    found.add(start, checks, lambda i, kind: _message(kind, i, label, matrix, k))


def _fill_matrix(probs: pa.Array, k: int, matrix: np.ndarray) -> np.ndarray:
    """Fill ``matrix`` (rows × k) from a ``probs`` column (NaN rows where it is null); return which rows are not."""
    m = len(probs)
    if not probs.null_count:
        probs_ok = np.ones(m, dtype=bool)
    else:
        probs_ok = pc.is_valid(probs).to_numpy(zero_copy_only=False)
    if m:
        values = probs.values.slice(probs.offset * k, m * k)  # every slot, null rows included
        if values.null_count:
            values = pc.fill_null(values, float("nan"))
        matrix[:] = values.to_numpy(zero_copy_only=False).reshape(m, k)
        if probs.null_count:
            matrix[~probs_ok] = np.nan
    return probs_ok


def label_prob_batches(path: Path, classes: tuple[str, ...], rows: int = ROW_GROUP
                       ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(class codes, probabilities rows × k) of a Parquet prediction file, ``rows`` records at a time, in file
    order: what a comparison with another output set needs, without holding this one whole. No format check
    (the caller compares with a file already checked)."""

    k = len(classes)
    # one page at a time, not whole columns; labels as dictionary codes (the writer's encoding): never decoded
    handle = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 16, read_dictionary=["label"])
    labels = _LabelCodes(classes)
    for batch in _read_ahead(handle.iter_batches(batch_size=rows, columns=["label", "probs"], use_threads=False)):
        label, probs = batch.columns
        matrix = np.empty((len(batch), k), dtype=np.float32)
        _fill_matrix(probs, k, matrix)
        yield labels(label), matrix


_END = object()


def _read_ahead(batches: Iterator[Any]) -> Iterator[Any]:
    """The record batches of ``batches``, the next one decoded on a second thread while the caller checks the
    current one (Parquet decoding releases the GIL). At most two batches are held; the decoder's error is raised
    where its batch would have been; a caller that stops early waits for the batch in progress only.

    Arrow's own column threads (``use_threads``) gained less here and raised the runner's peak memory by about
    20 MB (bench_scale, 200,000 documents)."""

    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(next, batches, _END)
        while True:
            batch = pending.result()
            if batch is _END:
                return
            pending = pool.submit(next, batches, _END)
            yield batch


class _LabelCodes:
    """The class index of each label of a column read with ``read_dictionary`` (-1: null or not a class), from
    one lookup per dictionary: a file's labels are never decoded into strings. A plain string column (which
    ``read_dictionary`` does not return for a string column, but a caller may pass) is looked up as it is."""

    def __init__(self, classes: tuple[str, ...]) -> None:
        self.classes = classes
        self.dictionary: pa.Array | None = None
        self.lookup = np.zeros(0, dtype=code_dtype(len(classes)))

    def __call__(self, label: pa.Array) -> np.ndarray:
        if not pa.types.is_dictionary(label.type):
            return _class_codes(label, self.classes)
        if self.dictionary is None or not label.dictionary.equals(self.dictionary):
            self.dictionary, self.lookup = label.dictionary, _class_codes(label.dictionary, self.classes)
        indices = label.indices if not label.null_count else pc.fill_null(label.indices, 0)
        if not len(self.lookup):
            return np.full(len(label), -1, dtype=self.lookup.dtype)
        codes = self.lookup[indices.to_numpy(zero_copy_only=False)]
        if label.null_count:
            codes[~pc.is_valid(label).to_numpy(zero_copy_only=False)] = -1
        return codes


#: Up to this many classes, the row statistics are computed column by column: NumPy's reductions along a short
#: row are several times slower than the same arithmetic on whole columns (and, below 8 terms, add in the same
#: order: the sums are the same floats).
COLUMNWISE_CLASSES = 7


def _row_stats(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of probabilities: every value in [0, 1] (NaN and ±inf fail a bound), the float64 sum, and the index
    of the first largest value (-2 where a value is out of range)."""
    n, k = matrix.shape
    with np.errstate(invalid="ignore"):
        if n and 0 < k <= COLUMNWISE_CLASSES:
            columns = [matrix[:, j] for j in range(k)]
            finite = np.ones(n, dtype=bool)
            sums = np.zeros(n, dtype=np.float64)
            best, argmax = columns[0].copy(), np.zeros(n, dtype=np.int64)
            for j, column in enumerate(columns):
                finite &= (column >= -1e-6) & (column <= 1 + 1e-6)
                sums += column
                if j:
                    larger = column > best  # strictly: the first of equal values wins, as argmax
                    argmax[larger] = j
                    np.maximum(best, column, out=best)
            return finite, sums, np.where(finite, argmax, -2)
        finite = ((matrix >= -1e-6) & (matrix <= 1 + 1e-6)).all(axis=1)
        sums = matrix.sum(axis=1, dtype=np.float64) if matrix.size else np.zeros(n)
    if not matrix.size:
        return finite, sums, np.where(finite, 0, -2)
    return finite, sums, np.where(finite, (matrix if finite.all() else np.nan_to_num(matrix, nan=-1.0)).argmax(axis=1),
                                  -2)


def _row_checks(*, id_ok: np.ndarray, label_ok: np.ndarray, probs_ok: np.ndarray, matrix: np.ndarray,
                codes: np.ndarray, sum_tol: float) -> list[tuple[str, np.ndarray]]:
    """(kind, rows failing it) in the order a record is checked; a row counts under its first failure."""
    finite, sums, argmax = _row_stats(matrix)
    order = [("id", ~id_ok), ("label", ~label_ok), ("length", ~probs_ok), ("range", ~finite),
             ("sum", np.abs(sums - 1.0) > sum_tol), ("argmax", argmax != codes)]
    failed = np.zeros(len(id_ok), dtype=bool)
    out = []
    for kind, bad in order:
        first = bad & ~failed
        out.append((kind, first))
        failed |= bad
    return out


def _message(kind: str, i: int, label: pa.Array, matrix: np.ndarray, k: int) -> str:
    if kind == "id":
        return "id must be a non-empty string"
    if kind == "label":
        return f"label {label[i].as_py()!r} is not one of the classes"
    if kind == "length":
        return f"probs must be a list of {k} numbers"
    if kind == "range":
        return "probs must be finite numbers in [0, 1]"
    if kind == "sum":
        return f"probs sum to {float(matrix[i].astype(np.float64).sum()):.6f}, not 1"
    return "label is not the most probable class"
