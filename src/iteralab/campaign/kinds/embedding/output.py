"""The prediction file of an embedding pass (R7): its format, its one writer (streamed) and its one reader.

A vector file is Parquet with exactly two columns, one row per completed input in corpus order:

    id      string                       the corpus id
    vector  fixed_size_list<float32>[d]  the document's vector; ``d`` is also in the file's metadata

The pass writes it while it runs, one record batch of :data:`FLUSH_ROWS` rows at a time (a pass never holds a
corpus of vectors: 200,000 × 384 float32 is 307 MB), to a hidden temporary name that is renamed once the file is
complete (its sha256 is computed from the file, after the measured region); a bucketed pass's file, streamed in
length order, is rewritten in corpus order after the measured region (``campaign.kinds.corpusorder``).
:func:`read_vectors` reads it in record batches and checks each row: an id, a vector of the declared (or
observed) size, finite values, and a unit norm within :data:`NORM_TOLERANCE` when the protocol declares
``normalize = true``; the rows it reads go to a scratch file (:class:`RowStore`) that the checks read back a block
at a time, so a check never holds a corpus of vectors either.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterator, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from iteralab.campaign.kinds.output import (OutputFile, OutputReading, OutputSet, StreamWriter, file_metadata,
                                           read_output)
from iteralab.campaign.records import EMBEDDING_VECTORS

#: The columns after ``id``.
COLUMNS = ("vector",)
#: Rows per record batch written (and per row group): about 12.6 MB of vectors at d = 384.
FLUSH_ROWS = 1 << 13
#: Rows per Parquet row group written: a reader decodes a row group at once (its values, and the list levels of
#: every value), so a small group keeps a reader's memory small (3 MB of vectors at d = 384).
GROUP_ROWS = 1 << 11
#: Rows per record batch read.
READ_ROWS = 1 << 11
#: A normalised vector's norm may differ from 1 by this much (float32 arithmetic of the pooling).
NORM_TOLERANCE = 1e-3
#: A ``recall_at_k`` pass's query vectors, in the same format, are in ``<pass_id>.queries.parquet`` beside its file.
QUERIES_SUFFIX = ".queries.parquet"


def queries_file_name(pass_id: str) -> str:
    """The file name of a pass's query vectors (``predictions/<pass_id>.queries.parquet``)."""
    return f"{pass_id}{QUERIES_SUFFIX}"


def schema(dim: int) -> pa.Schema:
    return pa.schema([("id", pa.string()), ("vector", pa.list_(pa.float32(), dim))],
                     metadata=file_metadata(EMBEDDING_VECTORS, **{"iteralab.dim": str(dim)}))


def vector_column(vectors: np.ndarray) -> pa.FixedSizeListArray:
    """An ``[n, d]`` array as a FixedSizeList<float32>[d] column (no copy when already float32 and contiguous)."""
    flat = np.ascontiguousarray(vectors, dtype=np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), flat.shape[1] if flat.ndim == 2 else 0)


class VectorWriter(StreamWriter):
    """Streams ``(ids, vectors)`` record batches into a vector file, each written as it comes; :meth:`close`
    renames it into place and returns its sha256 (:class:`~iteralab.campaign.kinds.output.StreamWriter`)."""

    output_kind = EMBEDDING_VECTORS

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.dim: int | None = None

    def write(self, ids: pa.Array, vectors: np.ndarray) -> None:
        if not len(ids):
            return
        if self.parquet is None:
            self.dim = int(vectors.shape[1])
            self.open_parquet(schema(self.dim), compression={"id": "zstd", "vector": "none"}, write_statistics=False,
                              use_dictionary=False)
        ids = ids if ids.type == pa.string() else ids.cast(pa.string())
        self.parquet.write_batch(pa.record_batch([ids, vector_column(vectors)], schema=self.parquet.schema),
                                 row_group_size=GROUP_ROWS)
        self.rows += len(ids)

    def write_block(self, block: Any) -> None:
        """Append a table of (id, vector) columns (a Ray block)."""
        vectors = block.column("vector").combine_chunks()
        d = vectors.type.list_size
        flat = vectors.values.slice(vectors.offset * d, len(vectors) * d).to_numpy(zero_copy_only=False)
        self.write(block.column("id").combine_chunks(), flat.reshape(len(vectors), d))

    def close(self, dim: int | None = None) -> str:
        """Finish the file (an empty one when nothing was written: ``dim``, or 0), fsync, rename; its sha256."""
        return self.publish(schema(dim or 0))


class RowStore:
    """A vector file's rows ``[rows, d]`` float32 kept in an unnamed scratch file (deleted when closed), read back
    a block at a time: a check of a 200,000-document pass holds a few blocks, never the 307 MB of its vectors.
    Indexed like an array: ``store[a:b]`` (one read), ``store[rows]`` (an index array: the rows gathered through a
    map of the file that is let go at once, so the pages read never stay counted in this process's memory),
    ``np.asarray(store)`` (every row: small sets and tests)."""

    dtype = np.dtype(np.float32)

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.rows = 0
        self._file = tempfile.TemporaryFile(prefix="iteralab-vectors-")

    def append(self, block: np.ndarray) -> None:
        data = np.ascontiguousarray(block, dtype=np.float32)
        self._file.seek(0, os.SEEK_END)
        self._file.write(memoryview(data).cast("B"))
        self.rows += len(data)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.dim)

    @property
    def size(self) -> int:
        return self.rows * self.dim

    @property
    def nbytes(self) -> int:
        return self.size * 4

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, (int, np.integer)):
            return self[int(key) % max(self.rows, 1):int(key) % max(self.rows, 1) + 1][0]
        if isinstance(key, slice):
            start, stop, step = key.indices(self.rows)
            if step != 1:
                return self[np.arange(start, stop, step)]
            out = np.empty((max(stop - start, 0), self.dim), dtype=np.float32)
            if out.size:
                self._file.flush()
                os.preadv(self._file.fileno(), [memoryview(out).cast("B")], start * self.dim * 4)
            return out
        index = np.asarray(key)
        if index.dtype == bool:
            index = np.flatnonzero(index)
        if not len(index) or not self.rows:
            return np.empty((len(index), self.dim), dtype=np.float32)
        first = int(index[0])
        if int(index[-1]) - first + 1 == len(index) and (len(index) == 1 or bool((np.diff(index) == 1).all())):
            return self[first:first + len(index)]  # consecutive rows (a file in corpus order): one read
        self._file.flush()
        mapped = np.memmap(self._file, dtype=np.float32, mode="r", shape=(self.rows, self.dim))
        rows = np.array(mapped[index])
        del mapped  # unmapped now: the pages it read leave this process's resident memory
        return rows

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        whole = self[0:self.rows]
        return whole if dtype is None else whole.astype(dtype)

    def close(self) -> None:
        self._file.close()


@dataclass(frozen=True)
class VectorSet(OutputSet):
    """A vector file as the checks read it (:class:`~iteralab.campaign.kinds.output.OutputSet`): the ``vectors`` of
    the records that have an id (a :class:`RowStore` ``[rows, d]``, file order, kept on disk), whether each of
    those rows is ``finite``, and the file's ``dim``."""

    vectors: Any = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    dim: int | None = None
    finite: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    @property
    def nbytes(self) -> int:
        return int(self.vectors.nbytes)


class VectorFile(OutputFile):
    """The facet of the embedding kind's file: vectors, checked against the protocol's ``[embedding]`` rules
    (``dim``, ``normalize``)."""

    output_kind = EMBEDDING_VECTORS
    columns = COLUMNS

    def read(self, path: Path, protocol: Any, like: pa.Array | None = None) -> VectorSet:
        return read_vectors(path, normalize=protocol.embedding.normalize, dim=protocol.embedding.dim, like=like)


VECTOR_FILE = VectorFile()


def read_vectors(path: Path, *, normalize: bool, dim: int | None = None, like: pa.Array | None = None) -> VectorSet:
    """Read and check a vector file in record batches of :data:`READ_ROWS` rows (``dim``: the declared size); the
    rows with an id go to a :class:`RowStore`, one batch at a time. ``like``: the expected ids in their order
    (shared by the set when the file holds exactly those)."""
    return cast(VectorSet, read_output(path, VECTOR_FILE, _VectorReading(normalize, dim), like))


class _VectorReading(OutputReading):
    set_type: ClassVar[type[OutputSet]] = VectorSet

    def __init__(self, normalize: bool, dim: int | None) -> None:
        self.normalize, self.declared = normalize, dim
        self.d = 0
        self.store: RowStore | None = None
        self.finite: list[np.ndarray] = []

    def types_problem(self, file_schema: pa.Schema) -> str | None:
        vtype, id_type = file_schema.field("vector").type, file_schema.field("id").type
        if pa.types.is_fixed_size_list(vtype) and pa.types.is_floating(vtype.value_type) and pa.types.is_string(id_type):
            return None
        return f"column types must be id: string, vector: fixed_size_list<float32>[d] (found {id_type}, {vtype})"

    def begin(self, file_schema: pa.Schema, records: int) -> str | None:
        d, dim = file_schema.field("vector").type.list_size, self.declared
        if (dim is not None and d != dim) or (records and d < 1):
            return f"vectors have {d} values, the protocol declares {dim}" if dim is not None else \
                "vectors have no values"
        self.d, self.store = d, RowStore(d)
        return None

    def batches(self, handle: pq.ParquetFile) -> Iterator[pa.RecordBatch]:
        return handle.iter_batches(batch_size=READ_ROWS, use_threads=False)

    def check(self, start: int, batch: pa.RecordBatch, has_id: np.ndarray
              ) -> tuple[list[tuple[str, np.ndarray]], Callable[[str, int], str]]:
        matrix = np.empty((len(batch), self.d), dtype=np.float32)
        checks = _check_batch(batch.column(1), self.d, self.normalize, matrix)
        kept = matrix if has_id.all() else matrix[has_id]
        self.store.append(kept)  # type: ignore[union-attr]
        self.finite.append(np.isfinite(kept).all(axis=1))
        return checks, lambda name, i: name

    def result(self, ids: pa.Array, records: int, problems: tuple[str, ...], count: int,
               kept: np.ndarray | None) -> OutputSet:
        return VectorSet(ids=ids, records=records, problems=problems, problem_count=count, vectors=self.store,
                         dim=self.d, finite=np.concatenate(self.finite) if self.finite else np.zeros(0, dtype=bool))


def _check_batch(vectors: pa.Array, d: int, normalize: bool, matrix: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """Fill the batch's ``matrix``; return (problem, failing rows) of its vectors, in the order they are checked."""
    present = pc.is_valid(vectors).to_numpy(zero_copy_only=False) if vectors.null_count \
        else np.ones(len(vectors), bool)
    m = len(vectors)
    if m:
        values = vectors.values.slice(vectors.offset * d, m * d)
        if values.null_count:
            values = pc.fill_null(values, float("nan"))
        matrix[:] = values.to_numpy(zero_copy_only=False).reshape(m, d)
        matrix[~present] = np.nan
    finite = np.isfinite(matrix).all(axis=1)
    checks = [("vector missing", ~present), ("vector must hold finite numbers", ~finite)]
    if normalize:
        norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix, dtype=np.float64))
        with np.errstate(invalid="ignore"):
            checks.append((f"vector norm differs from 1 by more than {NORM_TOLERANCE:g} (normalize = true)",
                           finite & (np.abs(norms - 1.0) > NORM_TOLERANCE)))
    return checks


def vector_batches(path: Path, rows: int = READ_ROWS) -> Iterator[tuple[pa.Array, np.ndarray]]:
    """(ids, vectors ``[rows, d]`` float32) of a vector file already checked, in file order, streamed."""

    handle = pq.ParquetFile(path, pre_buffer=False)
    d = handle.schema_arrow.field("vector").type.list_size
    for batch in handle.iter_batches(batch_size=rows, use_threads=False):
        ids, vectors = batch.columns
        values = vectors.values.slice(vectors.offset * d, len(vectors) * d)
        if values.null_count:
            values = pc.fill_null(values, float("nan"))
        yield ids, values.to_numpy(zero_copy_only=False).reshape(len(vectors), d).astype(np.float32, copy=False)
