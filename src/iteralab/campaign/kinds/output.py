"""What every kind's prediction file shares: its name in ``predictions/``, its ``id`` column and the checks of
that column, the format version in its metadata, the list of its format problems, the result of a file that
cannot be read, its coverage of the expected ids, and the streamed writer's plumbing.

Each kind's own file (the columns after ``id``, its writer, its row checks) is the ``output`` module of the kind's
folder, built on this one: ``classification.output`` (labels and probabilities), ``embedding.output`` (vectors),
``generation.output`` (texts). Every one holds ``id`` first, one row per completed input, in corpus order, and
``iteralab.predictions`` (:data:`FORMAT_VERSION`) in its Parquet metadata.

A kind's reader is one :class:`OutputReading` (its hooks) driven by :func:`read_output`: the file is read in
record batches and every check runs on Arrow and NumPy arrays, never on a Python object per row. The result is an
:class:`OutputSet` (the kind's subclass adds its columns), with its format problems counted (``problem_count``)
and the first :data:`SHOWN_PROBLEMS` spelled out. The kind object exposes its file as an :class:`OutputFile`
(``kind.output``): what code outside the kinds asks, without knowing the kind.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from iteralab.campaign.folder import PREDICTIONS
from iteralab.common import files

SUFFIX = ".parquet"
#: The version of every kind's file format, in its metadata under :data:`FORMAT_KEY`.
FORMAT_VERSION = "1"
FORMAT_KEY = "iteralab.predictions"
#: The metadata key that names a file's output kind (``records.OUTPUT_KINDS``; the embedding and generation
#: files write it, a classification file does not).
OUTPUT_KEY = "iteralab.output"
#: How many format problems are spelled out (all are counted).
SHOWN_PROBLEMS = 5
ID_PROBLEM = "id must be a non-empty string"


def file_name(pass_id: str) -> str:
    return f"{pass_id}{SUFFIX}"


def is_prediction_name(name: str) -> bool:
    return name.endswith(SUFFIX)


def pass_of(name: str) -> str:
    """The pass id a prediction file name belongs to."""
    return name.removesuffix(SUFFIX)


def prediction_path(campaign_dir: Path, pass_id: str) -> Path:
    """Where a pass's file is: ``predictions/<pass_id>.parquet``."""
    return campaign_dir / PREDICTIONS / file_name(pass_id)


def file_metadata(output_kind: str | None = None, **extra: str) -> dict[str, str]:
    """A file's Parquet metadata: the format version, the output kind when given, then ``extra`` (in this order)."""
    named = {OUTPUT_KEY: output_kind} if output_kind is not None else {}
    return {FORMAT_KEY: FORMAT_VERSION, **named, **extra}


# ---------------------------------------------------------------------------------------------- the sets


@dataclass(frozen=True)
class IdMatch:
    """How a file's ids meet the expected ids: which expected rows are ``covered``, the file row of each (``last``:
    a repeated id's last record; -1 where uncovered; None when the file holds the expected ids in their order),
    the repeated ids and the ids that are not expected."""

    covered: np.ndarray
    last: np.ndarray | None
    repeated: pa.Array
    extra_unique: pa.Array


def coverage_of(ids: pa.Array, expected_ids: pa.Array) -> IdMatch:
    """One hash lookup of every record's id among the expected ids (none when the file is in their order)."""
    n_expected, rows = len(expected_ids), len(ids)
    if rows == n_expected and ids.equals(expected_ids):  # a fixed-order pass: the corpus order, no lookup
        empty = pa.array([], pa.string())
        return IdMatch(np.ones(n_expected, dtype=bool), None, empty, empty)
    where = pc.fill_null(pc.index_in(ids, value_set=expected_ids), -1).to_numpy(zero_copy_only=False)
    known = where >= 0
    per_expected = np.bincount(where[known], minlength=n_expected)
    last = np.full(n_expected, -1, dtype=np.int64)
    if per_expected.max(initial=0) <= 1:
        last[where[known]] = np.flatnonzero(known)
    else:
        np.maximum.at(last, where[known], np.arange(rows, dtype=np.int64)[known])
    extra_ids = ids.filter(pa.array(~known)) if not known.all() else pa.array([], pa.string())
    extra_counts = pc.value_counts(extra_ids) if len(extra_ids) else None
    extra_unique = extra_counts.field("values") if extra_counts is not None else extra_ids
    extra_repeated = extra_unique.filter(pc.greater(extra_counts.field("counts"), 1)) \
        if extra_counts is not None else extra_ids
    repeated = pa.concat_arrays([expected_ids.filter(pa.array(per_expected > 1)), extra_repeated])
    return IdMatch(per_expected > 0, last, repeated, extra_unique)


@dataclass(frozen=True)
class OutputSet:
    """A prediction file as its checks read it: ``ids`` of every record that has one (file order; a record without
    one is counted in ``records`` only), ``records`` read, and its format problems: the first
    :data:`SHOWN_PROBLEMS` (``"row N: …"``, or the one problem of a file that could not be read) and how many
    (``problem_count``). Each kind's subclass adds its columns, one entry per id, each with the default of a set
without rows."""

    ids: pa.Array
    records: int
    problems: tuple[str, ...]
    problem_count: int

    @classmethod
    def unreadable(cls, records: int, problem: str) -> OutputSet:
        """The set of a file refused whole (``records`` declared, 0 when it could not be read): no rows, one
        problem."""
        return cls(ids=pa.array([], pa.string()), records=records, problems=(problem,), problem_count=1)

    @property
    def format_ok(self) -> bool:
        return not self.problem_count

    def coverage(self, expected_ids: pa.Array) -> IdMatch:
        """How the set's ids meet ``expected_ids`` (:func:`coverage_of`): repeated, missing and unexpected ids."""
        return coverage_of(self.ids, expected_ids)

    def by_id(self) -> tuple[pa.Array, np.ndarray, np.ndarray]:
        """(distinct ids in order of first appearance, records per id, row of each id's last record — a repeated
        id's last record is the one that counts)."""
        encoded = pc.dictionary_encode(self.ids)
        codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        m = len(encoded.dictionary)
        last = np.full(m, -1, dtype=np.int64)
        np.maximum.at(last, codes, np.arange(len(codes), dtype=np.int64))
        return encoded.dictionary, np.bincount(codes, minlength=m), last


class Problems:
    """The first :data:`SHOWN_PROBLEMS` failing rows of each check (a row counts under its first failure) and
    the count of all, gathered batch by batch."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, str]] = []
        self.per_check: dict[str, int] = {}
        self.total = 0

    def add(self, start: int, checks: Sequence[tuple[str, np.ndarray]], describe: Callable[[str, int], str]) -> None:
        """``checks``: (name, failing rows of the batch that starts at row ``start``); ``describe(name, i)``: the
        problem of the batch's row ``i``."""
        for name, bad in checks:
            count = int(np.count_nonzero(bad))
            if not count:
                continue
            self.total += count
            room = SHOWN_PROBLEMS - self.per_check.get(name, 0)
            for i in np.flatnonzero(bad)[:max(room, 0)]:
                self.rows.append((start + int(i), f"row {start + int(i) + 1}: {describe(name, int(i))}"))
            self.per_check[name] = self.per_check.get(name, 0) + count

    def result(self) -> tuple[tuple[str, ...], int]:
        return tuple(text for _, text in sorted(self.rows)[:SHOWN_PROBLEMS]), self.total


def first_failures(checks: Sequence[tuple[str, np.ndarray]]) -> list[tuple[str, np.ndarray]]:
    """(name, failing rows) in the order a record is checked, each row kept under its first failure only."""
    failed: np.ndarray | None = None
    out = []
    for name, bad in checks:
        out.append((name, bad if failed is None else bad & ~failed))
        failed = bad.copy() if failed is None else failed | bad
    return out


def id_flags(ids: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Per record: whether it has an id (kept in the set), and whether that id is a non-empty string."""
    has_id = pc.is_valid(ids).to_numpy(zero_copy_only=False)
    return has_id, has_id & (pc.fill_null(pc.binary_length(ids), 0).to_numpy(zero_copy_only=False) > 0)


class IdColumn:
    """The ids of the records that have one, gathered batch by batch. ``like``: the ids the file is expected to
    hold in this order; while the file holds exactly those, nothing is kept and the result is ``like`` itself."""

    def __init__(self, records: int, like: pa.Array | None) -> None:
        self.like = like
        self.shared = like is not None and len(like) == records  # the ids read so far are like[:start]
        self.parts: list[pa.Array] = []
        self.has_id = np.empty(records, dtype=bool)
        self.start = 0

    def add(self, ids: pa.Array, has_id: np.ndarray) -> None:
        start, stop = self.start, self.start + len(ids)
        self.has_id[start:stop] = has_id
        self.start = stop
        every = bool(has_id.all())
        if self.shared and every and ids.equals(self.like.slice(start, stop - start)):  # type: ignore[union-attr]
            return
        if self.shared:  # the first record that differs from like: the ids before it are like's
            self.parts.append(self.like.slice(0, start))  # type: ignore[union-attr]
            self.shared = False
        self.parts.append(ids if every else ids.filter(pa.array(has_id)))

    def result(self) -> pa.Array:
        if self.shared:
            return self.like
        if len(self.parts) == 1:
            return self.parts[0]
        return pa.concat_arrays(self.parts) if self.parts else pa.array([], pa.string())

    def kept(self) -> np.ndarray | None:
        """The rows read that have an id, None when every one has."""
        return None if self.has_id.all() else np.flatnonzero(self.has_id)


# ---------------------------------------------------------------------------------------------- reading


class OutputReading:
    """One read of one kind's file: the hooks :func:`read_output` calls. A kind's subclass holds what the protocol
    says about its rows and the arrays it fills while the batches come."""

    #: The set this reading returns.
    set_type: ClassVar[type[OutputSet]] = OutputSet

    def open(self, path: Path) -> pq.ParquetFile:
        return pq.ParquetFile(path, pre_buffer=False)  # pre-buffering would keep every row group read

    def types_problem(self, file_schema: pa.Schema) -> str | None:
        """The problem of the columns' types (their names already checked), or None."""
        raise NotImplementedError

    def begin(self, file_schema: pa.Schema, records: int) -> str | None:
        """Before the first batch (the schema accepted): a problem that refuses the file whole, or None."""
        return None

    def batches(self, handle: pq.ParquetFile) -> Iterator[pa.RecordBatch]:
        raise NotImplementedError

    def check(self, start: int, batch: pa.RecordBatch, has_id: np.ndarray
              ) -> tuple[list[tuple[str, np.ndarray]], Callable[[str, int], str]]:
        """Keep the batch's rows that have an id (``has_id``) and return its checks after the id's: (name, failing
        rows) in the order a record is checked, and how a failing row is described."""
        raise NotImplementedError

    def result(self, ids: pa.Array, records: int, problems: tuple[str, ...], count: int,
               kept: np.ndarray | None) -> OutputSet:
        """The set (``kept``: the rows read that have an id, None when all have)."""
        raise NotImplementedError


def columns_problem(file_schema: pa.Schema, columns: tuple[str, ...]) -> str | None:
    names, wanted = file_schema.names, ["id", *columns]
    return None if names == wanted else f"columns must be exactly {', '.join(wanted)} (found {', '.join(names)})"


def metadata_problem(file_schema: pa.Schema, output_kind: str) -> str | None:
    """A file whose metadata names another format version, or another output kind, than this reader's. A file
    that names none (written by hand or by another tool) is read as this version's."""
    metadata = file_schema.metadata or {}
    version = metadata.get(FORMAT_KEY.encode())
    if version is not None and version.decode(errors="replace") != FORMAT_VERSION:
        return (f"format version {version.decode(errors='replace')!r} ({FORMAT_KEY} in the file's metadata); this "
                f"iteralab reads version {FORMAT_VERSION}")
    named = metadata.get(OUTPUT_KEY.encode())
    if named is not None and named.decode(errors="replace") != output_kind:
        return f"the file holds {named.decode(errors='replace')} outputs, not {output_kind}"
    return None


def unreadable_problem(exc: BaseException) -> str:
    return f"not a readable Parquet file ({str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__})"


def read_output(path: Path, file: OutputFile, reading: OutputReading, like: pa.Array | None = None) -> OutputSet:
    """Read and check a kind's file in record batches: the shared checks here (columns, format version, ids), the
    kind's in ``reading``. A file that cannot be read is a problem, never an exception. ``like``: the ids the file
    is expected to hold in this order (:class:`IdColumn`)."""

    make = reading.set_type
    try:
        handle = reading.open(path)
        file_schema, records = handle.schema_arrow, handle.metadata.num_rows
        problem = metadata_problem(file_schema, file.output_kind) or columns_problem(file_schema, file.columns) \
            or reading.types_problem(file_schema) or reading.begin(file_schema, records)
        if problem:
            return make.unreadable(records, problem)
        ids = IdColumn(records, like)
        found = Problems()
        for batch in reading.batches(handle):
            id_column = batch.column(0)
            if pa.types.is_dictionary(id_column.type):
                id_column = id_column.dictionary_decode()
            has_id, id_ok = id_flags(id_column)
            start = ids.start
            own, describe = reading.check(start, batch, has_id)
            found.add(start, first_failures([(ID_PROBLEM, ~id_ok), *own]),
                      lambda name, i: name if name == ID_PROBLEM else describe(name, i))
            ids.add(id_column, has_id)
    except (pa.ArrowException, OSError, ValueError) as exc:
        return make.unreadable(0, unreadable_problem(exc))
    if ids.start != records:
        return make.unreadable(0, f"not a readable Parquet file ({ids.start} rows read, {records} declared)")
    problems, count = found.result()
    return reading.result(ids.result(), records, problems, count, ids.kept())


_END = object()


def read_ahead(batches: Iterator[Any]) -> Iterator[Any]:
    """The record batches of ``batches``, the next one decoded on a second thread while the caller checks the
    current one (Parquet decoding releases the GIL). At most two batches are held; the decoder's error is raised
    where its batch would have been; a caller that stops early waits for the batch in progress only."""

    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(next, batches, _END)
        while True:
            batch = pending.result()
            if batch is _END:
                return
            pending = pool.submit(next, batches, _END)
            yield batch


class OutputFile:
    """A kind's prediction file as code outside the kinds asks for it (``kind.output``): its output kind, its
    columns after ``id``, and its reader given the locked protocol's rules."""

    #: ``records.OUTPUT_KINDS``: the kind of output the file holds (``PassOutput.kind``).
    output_kind: ClassVar[str]
    #: The columns after ``id``, in file order.
    columns: ClassVar[tuple[str, ...]]

    def read(self, path: Path, protocol: Any, like: pa.Array | None = None) -> OutputSet:
        """The file read and checked by what ``protocol`` (:class:`~iteralab.plan.protocol.Protocol`) declares;
        ``like``: the expected ids, shared by the set when the file holds exactly those in that order."""
        raise NotImplementedError

    def read_with_sha256(self, path: Path, protocol: Any, like: pa.Array | None = None) -> tuple[str, OutputSet]:
        """(sha256 of the file, :meth:`read`). A streamed file is hashed in pieces, never held as bytes."""
        return files.sha256_file(path), self.read(path, protocol, like)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.output_kind!r})"


# ---------------------------------------------------------------------------------------------- writing


def write_whole(path: Path, data: Any) -> str:
    """A file's bytes (``bytes`` or an Arrow buffer) written atomically; their sha256."""
    # looked up at call time: one atomic writer for every evidence file; it takes any object with the buffer protocol
    files.write_bytes_atomic(path, data)
    return hashlib.sha256(data).hexdigest()


class StreamWriter:
    """A file written while a pass runs, to a hidden temporary name (``.<name>.partial``) that is fsynced and
    renamed once the file is complete: the file exists under its own name only then. :meth:`publish` returns its
    sha256, computed from the file after the measured region. A kind's writer opens its Parquet writer with
    :meth:`open_parquet` and may hold rows until :meth:`flush`."""

    #: ``records.OUTPUT_KINDS``: the kind of output this writer stores.
    output_kind: ClassVar[str]

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.temporary = self.path.with_name(f".{self.path.name}.partial")
        self.rows = 0
        self.parquet: Any = None

    def open_parquet(self, file_schema: pa.Schema, **options: Any) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.parquet = pq.ParquetWriter(self.temporary, file_schema, **options)

    def flush(self) -> None:
        """Write the rows held (none: a writer that writes each batch as it comes)."""

    def finish_temporary(self) -> Path:
        """Finish the file under its temporary name without publishing it (a pass-order file that is rewritten in
        corpus order, ``campaign.kinds.corpusorder``); its path."""
        self.flush()
        self.parquet.close()
        self.parquet = None
        return self.temporary

    def publish(self, empty_schema: pa.Schema) -> str:
        """Finish the file (an empty one of ``empty_schema`` when nothing was written), fsync, rename; its sha256."""
        self.flush()
        if self.parquet is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(empty_schema.empty_table(), self.temporary)
        else:
            self.parquet.close()
            self.parquet = None
        return files.publish_file(self.temporary, self.path)
