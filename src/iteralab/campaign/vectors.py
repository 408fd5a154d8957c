"""The prediction file of an embedding pass (R7): its format, its one writer (streamed) and its one reader.

A vector file is Parquet with exactly two columns, one row per completed input in pass order:

    id      string                       the corpus id
    vector  fixed_size_list<float32>[d]  the document's vector; ``d`` is also in the file's metadata

The pass writes it while it runs, one record batch of :data:`FLUSH_ROWS` rows at a time (a pass never holds a
corpus of vectors: 200,000 × 384 float32 is 307 MB), to a hidden temporary name that is renamed once the file is
complete (its sha256 is computed from the file, after the measured region). :func:`read_vectors` reads it in
record batches and checks each row: an id, a vector of the declared (or observed) size, finite values, and a unit
norm within :data:`NORM_TOLERANCE` when the protocol declares ``normalize = true``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from iteralab.campaign.records import EMBEDDING_VECTORS
from iteralab.common.files import sha256_file

FORMAT_VERSION = "1"
#: Rows per record batch written (and per row group): about 12.6 MB of vectors at d = 384.
FLUSH_ROWS = 1 << 13
#: Rows per record batch read.
READ_ROWS = 1 << 13
#: A normalised vector's norm may differ from 1 by this much (float32 arithmetic of the pooling).
NORM_TOLERANCE = 1e-3
SHOWN_PROBLEMS = 5
#: A ``recall_at_k`` pass's query vectors, in the same format, are in ``<pass_id>.queries.parquet`` beside its file.
QUERIES_SUFFIX = ".queries.parquet"


def queries_file_name(pass_id: str) -> str:
    """The file name of a pass's query vectors (``predictions/<pass_id>.queries.parquet``)."""
    return f"{pass_id}{QUERIES_SUFFIX}"


def schema(dim: int) -> pa.Schema:
    return pa.schema([("id", pa.string()), ("vector", pa.list_(pa.float32(), dim))],
                     metadata={"iteralab.predictions": FORMAT_VERSION, "iteralab.output": EMBEDDING_VECTORS,
                               "iteralab.dim": str(dim)})


def vector_column(vectors: np.ndarray) -> pa.FixedSizeListArray:
    """An ``[n, d]`` array as a FixedSizeList<float32>[d] column (no copy when already float32 and contiguous)."""
    flat = np.ascontiguousarray(vectors, dtype=np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), flat.shape[1] if flat.ndim == 2 else 0)


class VectorWriter:
    """Streams ``(ids, vectors)`` record batches into a vector file; :meth:`close` renames it into place and
    returns its sha256. The file exists under its own name only once it is complete."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.temporary = self.path.with_name(f".{self.path.name}.partial")
        self.rows = 0
        self.dim: int | None = None
        self._writer: Any = None

    def write(self, ids: pa.Array, vectors: np.ndarray) -> None:
        if not len(ids):
            return
        if self._writer is None:
            self.dim = int(vectors.shape[1])
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self.temporary, schema(self.dim), compression={"id": "zstd",
                                            "vector": "none"}, write_statistics=False, use_dictionary=False)
        ids = ids if ids.type == pa.string() else ids.cast(pa.string())
        self._writer.write_batch(pa.record_batch([ids, vector_column(vectors)], schema=self._writer.schema))
        self.rows += len(ids)

    def close(self, dim: int | None = None) -> str:
        """Finish the file (an empty one when nothing was written: ``dim``, or 0), fsync, rename; its sha256."""

        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(schema(dim or 0).empty_table(), self.temporary)
        else:
            self._writer.close()
        with open(self.temporary, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(self.temporary, self.path)
        return sha256_file(self.path)


@dataclass(frozen=True)
class VectorSet:
    """A vector file as arrays: ``ids`` of every record that has one (file order), their ``vectors`` (``[rows,
    d]``, a row of NaN where a record has none), ``records`` read, the file's ``dim`` and its format problems."""

    ids: pa.Array
    vectors: np.ndarray
    records: int
    dim: int | None
    problems: tuple[str, ...]
    n_problems: int

    @property
    def nbytes(self) -> int:
        return int(self.vectors.nbytes)


def _empty(records: int, problem: str) -> VectorSet:
    return VectorSet(pa.array([], pa.string()), np.zeros((0, 0), np.float32), records, None, (problem,), 1)


def read_vectors(path: Path, *, normalize: bool, dim: int | None = None) -> VectorSet:
    """Read and check a vector file in record batches of :data:`READ_ROWS` rows (``dim``: the declared size)."""

    try:
        handle = pq.ParquetFile(path)
        names, n = handle.schema_arrow.names, handle.metadata.num_rows
        if names != ["id", "vector"]:
            return _empty(n, f"columns must be exactly id, vector (found {', '.join(names)})")
        vtype = handle.schema_arrow.field("vector").type
        if not (pa.types.is_fixed_size_list(vtype) and pa.types.is_floating(vtype.value_type)) or \
                not pa.types.is_string(handle.schema_arrow.field("id").type):
            return _empty(n, f"column types must be id: string, vector: fixed_size_list<float32>[d] (found "
                             f"{handle.schema_arrow.field('id').type}, {vtype})")
        d = vtype.list_size
        if (dim is not None and d != dim) or (n and d < 1):
            return _empty(n, f"vectors have {d} values, the protocol declares {dim}" if dim is not None else
                          "vectors have no values")
        matrix = np.empty((n, d), dtype=np.float32)
        has_id = np.empty(n, dtype=bool)
        parts: list[pa.Array] = []
        problems: list[str] = []
        total, start = 0, 0
        for batch in handle.iter_batches(batch_size=READ_ROWS, use_threads=False):
            ids, vectors = batch.columns
            stop = start + len(batch)
            found = _check_batch(ids, vectors, d, normalize, matrix[start:stop], has_id[start:stop])
            for kind, bad in found:
                total += int(bad.sum())
                problems += [f"row {start + int(i) + 1}: {kind}" for i in np.flatnonzero(bad)[:SHOWN_PROBLEMS]]
            parts.append(ids if has_id[start:stop].all() else ids.filter(pa.array(has_id[start:stop])))
            start = stop
    except (pa.ArrowException, OSError, ValueError) as exc:
        return _empty(0, f"not a readable Parquet file ({str(exc).splitlines()[0][:120]})")
    ids_all = pa.concat_arrays(parts) if parts else pa.array([], pa.string())
    if not has_id.all():
        matrix = matrix[has_id]
    return VectorSet(ids_all, matrix, n, d, tuple(sorted(problems, key=_row_number)[:SHOWN_PROBLEMS]), total)


def _row_number(problem: str) -> int:
    return int(problem.split(":", 1)[0].removeprefix("row "))


def _check_batch(ids: pa.Array, vectors: pa.Array, d: int, normalize: bool, matrix: np.ndarray,
                 has_id: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """Fill the batch's slice of ``matrix``/``has_id``; return (problem, failing rows), a row under its first."""
    has_id[:] = pc.is_valid(ids).to_numpy(zero_copy_only=False)
    id_ok = has_id & (pc.fill_null(pc.utf8_length(ids), 0).to_numpy(zero_copy_only=False) > 0)
    present = pc.is_valid(vectors).to_numpy(zero_copy_only=False) if vectors.null_count else np.ones(len(ids), bool)
    m = len(vectors)
    if m:
        values = vectors.values.slice(vectors.offset * d, m * d)
        if values.null_count:
            values = pc.fill_null(values, float("nan"))
        matrix[:] = values.to_numpy(zero_copy_only=False).reshape(m, d)
        matrix[~present] = np.nan
    finite = np.isfinite(matrix).all(axis=1)
    checks = [("id must be a non-empty string", ~id_ok), ("vector missing", ~present),
              ("vector must hold finite numbers", ~finite)]
    if normalize:
        norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix, dtype=np.float64))
        with np.errstate(invalid="ignore"):
            checks.append((f"vector norm differs from 1 by more than {NORM_TOLERANCE:g} (normalize = true)",
                           finite & (np.abs(norms - 1.0) > NORM_TOLERANCE)))
    failed = np.zeros(m, dtype=bool)
    out = []
    for kind, bad in checks:
        out.append((kind, bad & ~failed))
        failed |= bad
    return out


def vector_batches(path: Path, rows: int = READ_ROWS) -> Iterator[tuple[pa.Array, np.ndarray]]:
    """(ids, vectors ``[rows, d]`` float32) of a vector file already checked, in file order, streamed."""

    handle = pq.ParquetFile(path)
    d = handle.schema_arrow.field("vector").type.list_size
    for batch in handle.iter_batches(batch_size=rows, use_threads=False):
        ids, vectors = batch.columns
        values = vectors.values.slice(vectors.offset * d, len(vectors) * d)
        if values.null_count:
            values = pc.fill_null(values, float("nan"))
        yield ids, values.to_numpy(zero_copy_only=False).reshape(len(vectors), d).astype(np.float32, copy=False)
