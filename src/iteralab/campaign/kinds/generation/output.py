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
then, ``campaign.kinds.corpusorder``). :func:`read_texts` reads it in record batches of :data:`READ_ROWS` rows
and checks every row on Arrow and NumPy arrays: the texts stay an Arrow array, so a file of a million rows never
becomes a Python list of strings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from iteralab.campaign.kinds.output import (OutputFile, OutputReading, OutputSet, StreamWriter, file_metadata,
                                           read_output)
from iteralab.campaign.records import GENERATED_TEXTS

#: Why a generation ended; a row's ``finish`` is read as an index into this tuple.
FINISH_REASONS = ("stop", "eos", "length")
#: The writer keeps the batches it is handed until this many rows, then writes them as one record batch.
FLUSH_ROWS = 1 << 13
#: Rows per Parquet row group written: a reader decodes a row group at once.
GROUP_ROWS = 1 << 13
#: Rows per record batch read.
READ_ROWS = 1 << 12
COLUMNS = ("id", "text", "tokens", "finish")


def schema() -> pa.Schema:
    return pa.schema([("id", pa.string()), ("text", pa.string()), ("tokens", pa.int32()), ("finish", pa.string())],
                     metadata=file_metadata(GENERATED_TEXTS))


def _column(values: Any, type_: pa.DataType) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        return values if values.type == type_ else values.cast(type_)
    return pa.array(values, type=type_)


class TextWriter(StreamWriter):
    """Streams ``(ids, texts, tokens, finish)`` batches into a text file, held until :data:`FLUSH_ROWS` rows;
    :meth:`close` renames it into place and returns its sha256 (:class:`~iteralab.campaign.kinds.output.StreamWriter`)."""

    output_kind = GENERATED_TEXTS

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0

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
            self.flush()

    def write_block(self, block: Any) -> None:
        """Append a record batch or table of the file's columns (a shard's file read back, a Ray block)."""
        self.write(*(block.column(name) for name in COLUMNS))

    def flush(self) -> None:
        if not self._pending:
            return
        if self.parquet is None:
            self.open_parquet(schema(), compression="zstd", write_statistics=False, use_dictionary=["finish"])
        self.parquet.write_table(pa.Table.from_batches(self._pending, schema=schema()), row_group_size=GROUP_ROWS)
        self._pending, self._pending_rows = [], 0

    def close(self) -> str:
        """Finish the file (an empty one when nothing was written), fsync, rename; its sha256."""
        return self.publish(schema())


def text_batches(path: Path, rows: int = READ_ROWS) -> Any:
    """The record batches of a text file, in file order, as written (unchecked: a shard's file the pass itself
    wrote, merged into the pass's file)."""
    return pq.ParquetFile(path, pre_buffer=False).iter_batches(batch_size=rows, use_threads=False)


@dataclass(frozen=True)
class TextSet(OutputSet):
    """A text file as the checks read it (:class:`~iteralab.campaign.kinds.output.OutputSet`), for every row that
    has an id (file order): ``texts`` (Arrow, a missing text stays null), ``tokens`` (int32, -1 = not measured),
    ``finish`` (int8 codes into :data:`FINISH_REASONS`, -1 = missing or unknown)."""

    texts: pa.Array = field(default_factory=lambda: pa.array([], pa.string()))
    tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    finish: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))

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


class TextFile(OutputFile):
    """The facet of the generation kind's file: texts, checked against the protocol's ``[generation]`` rules
    (``max_new_tokens``, ``allow_empty``)."""

    output_kind = GENERATED_TEXTS
    columns = COLUMNS[1:]

    def read(self, path: Path, protocol: Any, like: pa.Array | None = None) -> TextSet:
        spec = protocol.generation
        return read_texts(path, max_new_tokens=spec.max_new_tokens, allow_empty=spec.allow_empty, like=like)


TEXT_FILE = TextFile()


def read_texts(path: Path, *, max_new_tokens: int, allow_empty: bool, like: pa.Array | None = None) -> TextSet:
    """Read and check a text file in record batches of :data:`READ_ROWS` rows: every row has an id, a text (empty
    only when ``allow_empty``), tokens null or within 0..``max_new_tokens`` and a finish reason of
    :data:`FINISH_REASONS`. A file that cannot be read is a problem, never an exception. ``like``: the expected
    ids in their order (shared by the set when the file holds exactly those)."""
    return cast(TextSet, read_output(path, TEXT_FILE, _TextReading(max_new_tokens, allow_empty), like))


class _TextReading(OutputReading):
    set_type: ClassVar[type[OutputSet]] = TextSet

    def __init__(self, max_new_tokens: int, allow_empty: bool) -> None:
        self.max_new_tokens, self.allow_empty = max_new_tokens, allow_empty
        self.texts: list[pa.Array] = []
        self.tokens: list[np.ndarray] = []
        self.finish: list[np.ndarray] = []

    def types_problem(self, file_schema: pa.Schema) -> str | None:
        types = [file_schema.field(name).type for name in COLUMNS]
        if pa.types.is_string(types[0]) and pa.types.is_string(types[1]) and pa.types.is_integer(types[2]) \
                and pa.types.is_string(types[3]):
            return None
        return (f"column types must be id: string, text: string, tokens: int32, finish: string (found "
                f"{', '.join(str(t) for t in types)})")

    def batches(self, handle: pq.ParquetFile) -> Iterator[pa.RecordBatch]:
        return handle.iter_batches(batch_size=READ_ROWS, use_threads=False)

    def check(self, start: int, batch: pa.RecordBatch, has_id: np.ndarray
              ) -> tuple[list[tuple[str, np.ndarray]], Callable[[str, int], str]]:
        codes = finish_codes(batch.column(3))
        checks, shown = _check_batch(batch, codes, self.max_new_tokens, self.allow_empty)
        every = bool(has_id.all())
        self.texts.append(batch.column(1) if every else batch.column(1).filter(pa.array(has_id)))
        counted = checked_tokens(batch.column(2))
        self.tokens.append(counted if every else counted[has_id])
        self.finish.append(codes if every else codes[has_id])
        return checks, lambda name, i: name.format(shown[name][i]) if name in shown else name

    def result(self, ids: pa.Array, records: int, problems: tuple[str, ...], count: int,
               kept: np.ndarray | None) -> OutputSet:
        texts = pa.concat_arrays(self.texts) if self.texts else pa.array([], pa.string())
        return TextSet(ids=ids, records=records, problems=problems, problem_count=count, texts=texts,
                       tokens=np.concatenate(self.tokens) if self.tokens else np.zeros(0, np.int32),
                       finish=np.concatenate(self.finish) if self.finish else np.zeros(0, np.int8))


def checked_tokens(column: pa.Array) -> np.ndarray:
    """A tokens column as int32 (null: -1, not measured; values outside int32 clipped)."""
    values = pc.fill_null(column.cast(pa.int64()), -1).to_numpy(zero_copy_only=False)
    return np.clip(values, np.iinfo(np.int32).min, np.iinfo(np.int32).max).astype(np.int32)


def finish_codes(column: pa.Array) -> np.ndarray:
    """A finish column as int8 codes into :data:`FINISH_REASONS` (-1: missing or unknown)."""
    codes = pc.index_in(column, value_set=pa.array(FINISH_REASONS, pa.string()))
    return pc.fill_null(codes, -1).to_numpy(zero_copy_only=False).astype(np.int8)


def _check_batch(batch: pa.RecordBatch, codes: np.ndarray, max_new_tokens: int,
                 allow_empty: bool) -> tuple[list[tuple[str, np.ndarray]], dict[str, Any]]:
    """The checks of a batch's rows after their id, as (message template, failing rows) in the order a row is
    checked, and the values each template shows, by template. ``codes``: the batch's finish codes
    (:func:`finish_codes`)."""
    _, texts, tokens, finish = batch.columns
    n = len(batch)
    present = pc.is_valid(texts).to_numpy(zero_copy_only=False)
    lengths = pc.fill_null(pc.binary_length(texts), 0).to_numpy(zero_copy_only=False)
    counted = pc.fill_null(tokens.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)
    negative, over = "tokens {} is negative", "tokens {} exceeds max_new_tokens = " + str(max_new_tokens)
    unknown = "finish reason {} is not one of " + ", ".join(FINISH_REASONS)
    checks = [
        ("text missing", ~present),
        ("text is empty (the protocol does not allow empty outputs)",
         present & (lengths == 0) if not allow_empty else np.zeros(n, bool)),
        (negative, counted < 0),
        (over, counted > max_new_tokens),
        (unknown, codes < 0),
    ]
    return checks, {negative: counted, over: counted, unknown: _FinishValues(finish)}


class _FinishValues:
    """A finish column's value at a row, read one row at a time (only the rows a problem shows)."""

    def __init__(self, column: pa.Array) -> None:
        self.column = column

    def __getitem__(self, row: Any) -> str:
        value = self.column[int(row)].as_py()
        return "null" if value is None else repr(value)
