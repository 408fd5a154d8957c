"""The prediction file of a generation pass: its format, its one writer (streamed) and its one reader.

A text file is Parquet with exactly four columns, one row per completed input in corpus order:

    id      string   the corpus id
    text    string   the generated text (decoded, stop string cut off)
    tokens  int32    generated tokens counted (up to and including the eos token; padding never; a callable's
                     text: the tokenizer's count of the stored text, or the callable's own); null = not
                     measured (a callable that returns texts only, without a tokenizer to count them)
    finish  string   why generation ended: ``stop`` (a stop string), ``eos`` (the model's end token) or ``length``
                     (``max_new_tokens`` tokens generated without either)

The file's metadata names the output kind (``generated_texts``). The pass hands the writer its batches as they
come; the writer keeps them as Arrow arrays and writes a record batch of at least :data:`FLUSH_ROWS` rows at a
time, to a hidden temporary name that is renamed once the file is complete (its sha256 is computed from the
file, after the measured region; a bucketed pass's file, written in length order, is rewritten in corpus order
then, ``campaign.engines.corpusorder``). :func:`read_texts` reads it in record batches of :data:`READ_ROWS` rows
and checks every row on Arrow and NumPy arrays: the texts stay an Arrow array, so a file of a million rows never
becomes a Python list of strings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from iteralab.campaign.records import GENERATED_TEXTS
from iteralab.common.files import publish_file

FORMAT_VERSION = "1"
#: Why a generation ended; a row's ``finish`` is read as an index into this tuple.
FINISH_REASONS = ("stop", "eos", "length")
#: The writer keeps the batches it is handed until this many rows, then writes them as one record batch.
FLUSH_ROWS = 1 << 13
#: Rows per Parquet row group written: a reader decodes a row group at once.
GROUP_ROWS = 1 << 13
#: Rows per record batch read.
READ_ROWS = 1 << 12
SHOWN_PROBLEMS = 5
COLUMNS = ("id", "text", "tokens", "finish")


def schema() -> pa.Schema:
    return pa.schema([("id", pa.string()), ("text", pa.string()), ("tokens", pa.int32()), ("finish", pa.string())],
                     metadata={"iteralab.predictions": FORMAT_VERSION, "iteralab.output": GENERATED_TEXTS})


def _column(values: Any, type_: pa.DataType) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        return values if values.type == type_ else values.cast(type_)
    return pa.array(values, type=type_)


class TextWriter:
    """Streams ``(ids, texts, tokens, finish)`` batches into a text file; :meth:`close` renames it into place and
    returns its sha256. The file exists under its own name only once it is complete."""

    output_kind = GENERATED_TEXTS

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.temporary = self.path.with_name(f".{self.path.name}.partial")
        self.rows = 0
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._writer: Any = None

    def write(self, ids: pa.Array, texts: Sequence[str], tokens: Sequence[int] | np.ndarray | None,
              finish: Sequence[str]) -> None:
        """Append one batch (``tokens`` None: not measured, stored as nulls)."""
        n = len(ids)
        if not n:
            return
        if tokens is None:
            token_column = pa.nulls(n, pa.int32())
        elif isinstance(tokens, np.ndarray):
            token_column = pa.array(tokens.astype(np.int32, copy=False))
        else:
            token_column = _column(tokens, pa.int32())
        columns = [_column(ids, pa.string()), _column(texts, pa.string()), token_column, _column(finish, pa.string())]
        lengths = {len(c) for c in columns}
        if len(lengths) != 1:
            raise ValueError(f"a text batch needs as many texts, token counts and finish reasons as ids "
                             f"(ids {n}, texts {len(columns[1])}, tokens {len(columns[2])}, finish {len(columns[3])})")
        self._pending.append(pa.record_batch(columns, schema=schema()))
        self._pending_rows += n
        self.rows += n
        if self._pending_rows >= FLUSH_ROWS:
            self._flush()

    def write_block(self, block: Any) -> None:
        """Append a record batch or table of the file's columns (a shard's file read back, a Ray block)."""
        self.write(*(block.column(name) for name in COLUMNS))

    def _flush(self) -> None:
        if not self._pending:
            return
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self.temporary, schema(), compression="zstd", write_statistics=False,
                                            use_dictionary=["finish"])
        self._writer.write_table(pa.Table.from_batches(self._pending, schema=schema()), row_group_size=GROUP_ROWS)
        self._pending, self._pending_rows = [], 0

    def finish_temporary(self) -> Path:
        """Finish the file under its temporary name without publishing it (a pass-order file that is rewritten in
        corpus order, ``campaign.engines.corpusorder``); its path."""
        self._flush()
        self._writer.close()
        self._writer = None
        return self.temporary

    def close(self) -> str:
        """Finish the file (an empty one when nothing was written), fsync, rename; its sha256."""
        self._flush()
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(schema().empty_table(), self.temporary)
        else:
            self._writer.close()
        return publish_file(self.temporary, self.path)


def text_batches(path: Path, rows: int = READ_ROWS) -> Any:
    """The record batches of a text file, in file order, as written (unchecked: a shard's file the pass itself
    wrote, merged into the pass's file)."""
    return pq.ParquetFile(path, pre_buffer=False).iter_batches(batch_size=rows, use_threads=False)


@dataclass(frozen=True)
class TextSet:
    """A text file as the checks read it, for every row that has an id (file order): ``ids``, ``texts`` (Arrow,
    a missing text stays null), ``tokens`` (int32, -1 = not measured), ``finish`` (int8 codes into
    :data:`FINISH_REASONS`, -1 = missing or unknown); ``records`` read and the file's format problems (the first
    :data:`SHOWN_PROBLEMS`, ``"row N: …"``, and how many rows have one)."""

    ids: pa.Array
    texts: pa.Array
    tokens: np.ndarray
    finish: np.ndarray
    records: int
    problems: tuple[str, ...]
    problem_count: int

    @property
    def tokens_measured(self) -> bool:
        """Whether every row's generated tokens were counted (a file with no rows: not measured)."""
        return bool(len(self.tokens)) and bool((self.tokens >= 0).all())

    @property
    def length_share(self) -> float:
        """The share of rows whose generation ended on ``length`` (NaN for a file without rows)."""
        if not len(self.finish):
            return float("nan")
        return float(np.count_nonzero(self.finish == FINISH_REASONS.index("length")) / len(self.finish))

    @property
    def mean_tokens(self) -> float | None:
        """Mean generated tokens per row; None when not measured."""
        return float(self.tokens.mean(dtype=np.float64)) if self.tokens_measured else None


def _empty(records: int, problem: str) -> TextSet:
    return TextSet(pa.array([], pa.string()), pa.array([], pa.string()), np.zeros(0, np.int32), np.zeros(0, np.int8),
                   records, (problem,), 1)


def _schema_problem(file_schema: pa.Schema) -> str | None:
    names = file_schema.names
    if names != list(COLUMNS):
        return f"columns must be exactly {', '.join(COLUMNS)} (found {', '.join(names)})"
    types = [file_schema.field(name).type for name in COLUMNS]
    if not (pa.types.is_string(types[0]) and pa.types.is_string(types[1]) and pa.types.is_integer(types[2])
            and pa.types.is_string(types[3])):
        return (f"column types must be id: string, text: string, tokens: int32, finish: string (found "
                f"{', '.join(str(t) for t in types)})")
    return None


def read_texts(path: Path, *, max_new_tokens: int, allow_empty: bool) -> TextSet:
    """Read and check a text file in record batches of :data:`READ_ROWS` rows: every row has an id, a text (empty
    only when ``allow_empty``), tokens null or within 0..``max_new_tokens`` and a finish reason of
    :data:`FINISH_REASONS`. A file that cannot be read is a problem, never an exception."""

    try:
        handle = pq.ParquetFile(path, pre_buffer=False)
        records = handle.metadata.num_rows
        problem = _schema_problem(handle.schema_arrow)
        if problem:
            return _empty(records, problem)
        ids, texts, tokens, finish = [], [], [], []
        problems: list[tuple[int, str]] = []
        total, start = 0, 0
        for batch in handle.iter_batches(batch_size=READ_ROWS, use_threads=False):
            codes = finish_codes(batch.column(3))
            has_id, checks = _check_batch(batch, codes, max_new_tokens, allow_empty)
            for kind, bad, values in checks:
                rows = np.flatnonzero(bad)
                total += len(rows)
                problems += [(start + int(i) + 1, kind.format(values[i] if values is not None else None))
                             for i in rows[:SHOWN_PROBLEMS]]
            every = bool(has_id.all())
            keep = None if every else pa.array(has_id)
            ids.append(batch.column(0) if every else batch.column(0).filter(keep))
            texts.append(batch.column(1) if every else batch.column(1).filter(keep))
            counted = checked_tokens(batch.column(2))
            tokens.append(counted if every else counted[has_id])
            finish.append(codes if every else codes[has_id])
            start += len(batch)
    except (pa.ArrowException, OSError, ValueError) as exc:
        return _empty(0, f"not a readable Parquet file ({str(exc).splitlines()[0][:120]})")
    shown = tuple(f"row {row}: {what}" for row, what in sorted(problems)[:SHOWN_PROBLEMS])
    return TextSet(_concat(ids), _concat(texts), np.concatenate(tokens) if tokens else np.zeros(0, np.int32),
                   np.concatenate(finish) if finish else np.zeros(0, np.int8), records, shown, total)


def _concat(parts: list[pa.Array]) -> pa.Array:
    return pa.concat_arrays(parts) if parts else pa.array([], pa.string())


def checked_tokens(column: pa.Array) -> np.ndarray:
    """A tokens column as int32 (null: -1, not measured; values outside int32 clipped)."""
    values = pc.fill_null(column.cast(pa.int64()), -1).to_numpy(zero_copy_only=False)
    return np.clip(values, np.iinfo(np.int32).min, np.iinfo(np.int32).max).astype(np.int32)


def finish_codes(column: pa.Array) -> np.ndarray:
    """A finish column as int8 codes into :data:`FINISH_REASONS` (-1: missing or unknown)."""
    codes = pc.index_in(column, value_set=pa.array(FINISH_REASONS, pa.string()))
    return pc.fill_null(codes, -1).to_numpy(zero_copy_only=False).astype(np.int8)


def _check_batch(batch: pa.RecordBatch, codes: np.ndarray, max_new_tokens: int,
                 allow_empty: bool) -> tuple[np.ndarray, list[tuple[str, np.ndarray, Any]]]:
    """Which rows have an id, and each check as (message template, failing rows, the values it shows): a row is
    counted under its first problem only. ``codes``: the batch's finish codes (:func:`finish_codes`)."""
    ids, texts, tokens, finish = batch.columns
    n = len(batch)
    has_id = pc.is_valid(ids).to_numpy(zero_copy_only=False)
    id_ok = has_id & (pc.fill_null(pc.binary_length(ids), 0).to_numpy(zero_copy_only=False) > 0)
    present = pc.is_valid(texts).to_numpy(zero_copy_only=False)
    lengths = pc.fill_null(pc.binary_length(texts), 0).to_numpy(zero_copy_only=False)
    counted = pc.fill_null(tokens.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)
    checks: list[tuple[str, np.ndarray, Any]] = [
        ("id must be a non-empty string", ~id_ok, None),
        ("text missing", ~present, None),
        ("text is empty (the protocol does not allow empty outputs)",
         present & (lengths == 0) if not allow_empty else np.zeros(n, bool), None),
        ("tokens {} is negative", counted < 0, counted),
        ("tokens {} exceeds max_new_tokens = " + str(max_new_tokens), counted > max_new_tokens, counted),
        ("finish reason {} is not one of " + ", ".join(FINISH_REASONS), codes < 0, _FinishValues(finish)),
    ]
    failed = np.zeros(n, dtype=bool)
    out = []
    for kind, bad, values in checks:
        out.append((kind, bad & ~failed, values))
        failed |= bad
    return has_id, out


class _FinishValues:
    """A finish column's value at a row, read one row at a time (only the rows a problem shows)."""

    def __init__(self, column: pa.Array) -> None:
        self.column = column

    def __getitem__(self, row: Any) -> str:
        value = self.column[int(row)].as_py()
        return "null" if value is None else repr(value)
