"""The prediction file of one pass (R7): its format, its one writer and its one reader.

A prediction file is Parquet with exactly three columns, one row per completed input in corpus order:

    id     string                          the corpus id
    label  dictionary<int8, string>        the most probable class (the class names, an index per row; files
                                           of earlier versions hold plain strings: read alike)
    probs  fixed_size_list<float32>[k]     one probability per class, in the protocol's class order

The columns after ``id`` are the pass's output, of one kind (:class:`~iteralab.campaign.records.PassOutput`,
:data:`OUTPUT_COLUMNS`): class labels and probabilities; the other kinds (embedding vectors, generated texts) keep
``id`` and the corpus order, and bring their own columns, writer and checks.

It is serialised whole from Arrow/NumPy arrays (no Python object per row), written atomically (temporary name,
fsync, rename) and its sha256 is computed from the same bytes. :func:`read_predictions` returns the file as
arrays (:class:`PredictionSet`) with its format problems; every check of ``evaluate`` runs on those arrays. What
every kind's file shares (the ``id`` column and its checks, the format version, the problem list, the batch
reader's loop) is :mod:`iteralab.campaign.kinds.output`; the kind object's facet is :data:`PROBABILITY_FILE`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from iteralab.campaign.kinds.output import (OutputFile, OutputReading, OutputSet, file_metadata,
                                           read_ahead, read_output, write_whole)
from iteralab.campaign.records import CLASS_PROBABILITIES
from iteralab.common.arrow import numpy_array, string_array

ROW_GROUP = 1 << 15
#: The columns after ``id`` of each output kind a prediction file can hold.
OUTPUT_COLUMNS = {CLASS_PROBABILITIES: ("label", "probs")}


def schema(n_classes: int) -> pa.Schema:
    label = pa.dictionary(pa.from_numpy_dtype(code_dtype(n_classes)), pa.string())
    label_column, probs_column = OUTPUT_COLUMNS[CLASS_PROBABILITIES]
    return pa.schema([("id", pa.string()), (label_column, label), (probs_column, pa.list_(pa.float32(), n_classes))],
                     metadata=file_metadata())


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
    return write_whole(path, encode_buffer(ids, classes, probs))


# ---------------------------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class PredictionSet(OutputSet):
    """A prediction file as arrays (:class:`~iteralab.campaign.kinds.output.OutputSet`): ``labels`` is the class
    index of each record's label (-1: not a class); ``probs`` their probabilities (a row of NaN where they are not
    ``k`` numbers)."""

    labels: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))
    probs: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))


def code_dtype(n: int) -> type:
    """The smallest signed integer type that holds the indices 0..n-1 and -1 (a class or stratum code)."""
    return np.int8 if n < 127 else np.int16 if n < 32767 else np.int32


def _class_codes(values: pa.Array, classes: tuple[str, ...]) -> np.ndarray:
    codes = pc.index_in(values, value_set=pa.array(list(classes), pa.string()))
    return pc.fill_null(codes, -1).to_numpy(zero_copy_only=False).astype(code_dtype(len(classes)))


#: Rows checked at a time when a prediction file is read: what a read holds beyond its result is bounded by
#: this, not by the file's size.
READ_BATCH = 1 << 15


class ProbabilityFile(OutputFile):
    """The facet of the classification kind's file: labels and probabilities, checked against the protocol's
    classes and ``[checks] probability_sum_tolerance``."""

    output_kind = CLASS_PROBABILITIES
    columns = OUTPUT_COLUMNS[CLASS_PROBABILITIES]

    def read(self, path: Path, protocol: Any, like: pa.Array | None = None) -> PredictionSet:
        return read_predictions(path, tuple(protocol.corpus.classes), protocol.checks.probability_sum_tolerance,
                                like=like)

    def read_with_sha256(self, path: Path, protocol: Any, like: pa.Array | None = None) -> tuple[str, OutputSet]:
        """Read once: the bytes give the sha256 and the arrays."""
        data = Path(path).read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        return digest, read_predictions(path, tuple(protocol.corpus.classes),
                                        protocol.checks.probability_sum_tolerance, data, like)


PROBABILITY_FILE = ProbabilityFile()


def read_predictions(path: Path, classes: tuple[str, ...], sum_tol: float, data: bytes | None = None,
                     like: pa.Array | None = None) -> PredictionSet:
    """Read a prediction file with its format problems, in record batches of :data:`READ_BATCH` rows, each checked
    as it comes: what is kept is the ids (none while they are those of ``like``, in its order), one class code
    and ``k`` float32 per record. ``like``: the ids the file is expected to hold in this order (the corpus's);
    when it holds exactly those, its set shares that array instead of keeping a copy of the ids."""
    return cast(PredictionSet, read_output(path, PROBABILITY_FILE, _ProbabilityReading(classes, sum_tol, data), like))


class _ProbabilityReading(OutputReading):
    set_type: ClassVar[type[OutputSet]] = PredictionSet

    def __init__(self, classes: tuple[str, ...], sum_tol: float, data: bytes | None) -> None:
        self.classes, self.k, self.sum_tol, self.data = classes, len(classes), sum_tol, data
        self.labels = _LabelCodes(classes)
        self.codes = np.zeros(0, dtype=code_dtype(self.k))
        self.matrix = np.zeros((0, self.k), dtype=np.float32)

    def open(self, path: Path) -> pq.ParquetFile:
        # labels as dictionary codes (the writer's encoding): never decoded into strings
        return pq.ParquetFile(pa.BufferReader(self.data) if self.data is not None else path, read_dictionary=["label"])

    def types_problem(self, file_schema: pa.Schema) -> str | None:
        types = [file_schema.field(c).type for c in file_schema.names]
        id_type, label_type, probs_type = (t.value_type if pa.types.is_dictionary(t) else t for t in types)
        k = self.k
        if pa.types.is_string(id_type) and pa.types.is_string(label_type) and (
                pa.types.is_fixed_size_list(probs_type) and probs_type.list_size == k
                and pa.types.is_floating(probs_type.value_type)):
            return None
        return (f"column types must be id: string, label: string, probs: fixed_size_list<float>[{k}] "
                f"(found {id_type}, {label_type}, {probs_type})")

    def begin(self, file_schema: pa.Schema, records: int) -> str | None:
        self.codes = np.empty(records, dtype=code_dtype(self.k))
        self.matrix = np.empty((records, self.k), dtype=np.float32)
        return None

    def batches(self, handle: pq.ParquetFile) -> Iterator[pa.RecordBatch]:
        return read_ahead(handle.iter_batches(batch_size=READ_BATCH, use_threads=False))

    def check(self, start: int, batch: pa.RecordBatch, has_id: np.ndarray
              ) -> tuple[list[tuple[str, np.ndarray]], Callable[[str, int], str]]:
        _, label, probs = batch.columns
        stop = start + len(batch)
        codes, matrix = self.codes[start:stop], self.matrix[start:stop]
        probs_ok = _fill_matrix(probs, self.k, matrix)
        codes[:] = self.labels(label)
        checks = _row_checks(label_ok=codes >= 0, probs_ok=probs_ok, matrix=matrix, codes=codes, sum_tol=self.sum_tol)
        return checks, lambda kind, i: _message(kind, i, label, matrix, self.k)

    def result(self, ids: pa.Array, records: int, problems: tuple[str, ...], count: int,
               kept: np.ndarray | None) -> OutputSet:
        codes, matrix = (self.codes, self.matrix) if kept is None else (self.codes[kept], self.matrix[kept])
        return PredictionSet(ids=ids, records=records, problems=problems, problem_count=count, labels=codes,
                             probs=matrix)


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
    for batch in read_ahead(handle.iter_batches(batch_size=rows, columns=["label", "probs"], use_threads=False)):
        label, probs = batch.columns
        matrix = np.empty((len(batch), k), dtype=np.float32)
        _fill_matrix(probs, k, matrix)
        yield labels(label), matrix


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


def _row_checks(*, label_ok: np.ndarray, probs_ok: np.ndarray, matrix: np.ndarray, codes: np.ndarray,
                sum_tol: float) -> list[tuple[str, np.ndarray]]:
    """(kind, rows failing it) in the order a record's output is checked (after its id)."""
    finite, sums, argmax = _row_stats(matrix)
    return [("label", ~label_ok), ("length", ~probs_ok), ("range", ~finite), ("sum", np.abs(sums - 1.0) > sum_tol),
            ("argmax", argmax != codes)]


def _message(kind: str, i: int, label: pa.Array, matrix: np.ndarray, k: int) -> str:
    if kind == "label":
        return f"label {label[i].as_py()!r} is not one of the classes"
    if kind == "length":
        return f"probs must be a list of {k} numbers"
    if kind == "range":
        return "probs must be finite numbers in [0, 1]"
    if kind == "sum":
        return f"probs sum to {float(matrix[i].astype(np.float64).sum()):.6f}, not 1"
    return "label is not the most probable class"
