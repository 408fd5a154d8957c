"""The prediction file of a scoring pass: its format, its one writer (streamed) and its one reader.

A score file is Parquet with exactly two columns, one row per completed pair in corpus order:

    id     string    the corpus id of the pair
    score  float32   the pair's score (finite; higher ranks first within its group)

The file's metadata names the output kind (``pair_scores``). The pass hands the writer its batches as they come; the
writer keeps them as arrays and writes a record batch of at least :data:`FLUSH_ROWS` rows at a time, to a hidden
temporary name that is renamed once the file is complete (its sha256 is computed from the file, after the measured
region; a bucketed pass's file, written in length order, is rewritten in corpus order then,
``campaign.kinds.corpusorder``). :func:`read_scores` reads it in record batches of :data:`READ_ROWS` rows and
checks every row on NumPy arrays: a score present and finite. 200,000 scores are 0.8 MB: the set holds them whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from iteralab.campaign.kinds.output import (OutputFile, OutputReading, OutputSet, StreamWriter, file_metadata,
                                           read_output)
from iteralab.campaign.records import PAIR_SCORES

#: The columns after ``id``.
COLUMNS = ("score",)
#: The writer keeps the batches it is handed until this many rows, then writes them as one record batch.
FLUSH_ROWS = 1 << 13
#: Rows per Parquet row group written.
GROUP_ROWS = 1 << 15
#: Rows per record batch read.
READ_ROWS = 1 << 15


def schema() -> pa.Schema:
    return pa.schema([("id", pa.string()), ("score", pa.float32())], metadata=file_metadata(PAIR_SCORES))


def score_column(scores: Any) -> pa.Array:
    """Scores as a float32 column (an array, a list, an Arrow array)."""
    if isinstance(scores, pa.ChunkedArray):
        scores = scores.combine_chunks()
    if isinstance(scores, pa.Array):
        return scores if scores.type == pa.float32() else scores.cast(pa.float32())
    return pa.array(np.ascontiguousarray(scores, dtype=np.float32).reshape(-1))


class ScoreWriter(StreamWriter):
    """Streams ``(ids, scores)`` batches into a score file, held until :data:`FLUSH_ROWS` rows; :meth:`close`
    renames it into place and returns its sha256 (:class:`~iteralab.campaign.kinds.output.StreamWriter`)."""

    output_kind = PAIR_SCORES

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0

    def write(self, ids: pa.Array, scores: Any) -> None:
        n = len(ids)
        if not n:
            return
        ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
        column = score_column(scores)
        if len(column) != n:
            raise ValueError(f"a score batch needs one score per id (ids {n}, scores {len(column)})")
        self._pending.append(pa.record_batch([ids if ids.type == pa.string() else ids.cast(pa.string()), column],
                                             schema=schema()))
        self._pending_rows += n
        self.rows += n
        if self._pending_rows >= FLUSH_ROWS:
            self.flush()

    def write_block(self, block: Any) -> None:
        """Append a record batch or table of (id, score) columns (a shard's file read back, a Ray block)."""
        self.write(block.column("id"), block.column("score"))

    def flush(self) -> None:
        if not self._pending:
            return
        if self.parquet is None:
            self.open_parquet(schema(), compression={"id": "zstd", "score": "none"}, write_statistics=False,
                              use_dictionary=False)
        self.parquet.write_table(pa.Table.from_batches(self._pending, schema=schema()), row_group_size=GROUP_ROWS)
        self._pending, self._pending_rows = [], 0

    def close(self) -> str:
        """Finish the file (an empty one when nothing was written), fsync, rename; its sha256."""
        return self.publish(schema())


def score_batches(path: Path, rows: int = READ_ROWS) -> Any:
    """The record batches of a score file, in file order, as written (unchecked: a shard's own file)."""
    return pq.ParquetFile(path, pre_buffer=False).iter_batches(batch_size=rows, use_threads=False)


@dataclass(frozen=True)
class ScoreSet(OutputSet):
    """A score file as the checks read it (:class:`~iteralab.campaign.kinds.output.OutputSet`): the ``scores`` of
    the records that have an id (float32, file order; NaN where missing) and whether each is ``finite``."""

    scores: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    finite: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))


class ScoreFile(OutputFile):
    """The facet of the scoring kind's file: one finite float32 score per pair."""

    output_kind = PAIR_SCORES
    columns = COLUMNS

    def read(self, path: Path, protocol: Any, like: pa.Array | None = None) -> ScoreSet:
        return read_scores(path, like=like)


SCORE_FILE = ScoreFile()


def read_scores(path: Path, like: pa.Array | None = None) -> ScoreSet:
    """Read and check a score file in record batches of :data:`READ_ROWS` rows: every row has an id and a finite
    score. A file that cannot be read is a problem, never an exception. ``like``: the expected ids in their order
    (shared by the set when the file holds exactly those)."""
    return cast(ScoreSet, read_output(path, SCORE_FILE, _ScoreReading(), like))


class _ScoreReading(OutputReading):
    set_type: ClassVar[type[OutputSet]] = ScoreSet

    def __init__(self) -> None:
        self.scores: list[np.ndarray] = []

    def types_problem(self, file_schema: pa.Schema) -> str | None:
        id_type, score_type = file_schema.field("id").type, file_schema.field("score").type
        if pa.types.is_string(id_type) and pa.types.is_floating(score_type):
            return None
        return f"column types must be id: string, score: float32 (found {id_type}, {score_type})"

    def batches(self, handle: pq.ParquetFile) -> Iterator[pa.RecordBatch]:
        return handle.iter_batches(batch_size=READ_ROWS, use_threads=False)

    def check(self, start: int, batch: pa.RecordBatch, has_id: np.ndarray
              ) -> tuple[list[tuple[str, np.ndarray]], Callable[[str, int], str]]:
        column = batch.column(1)
        present = pc.is_valid(column).to_numpy(zero_copy_only=False) if column.null_count \
            else np.ones(len(column), bool)
        values = pc.fill_null(column, float("nan")) if column.null_count else column
        scores = values.to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
        finite = np.isfinite(scores)
        self.scores.append(scores if has_id.all() else scores[has_id])
        return [("score missing", ~present), ("score must be a finite number", present & ~finite)], \
            lambda name, i: name

    def result(self, ids: pa.Array, records: int, problems: tuple[str, ...], count: int,
               kept: np.ndarray | None) -> OutputSet:
        scores = np.concatenate(self.scores) if self.scores else np.zeros(0, np.float32)
        return ScoreSet(ids=ids, records=records, problems=problems, problem_count=count, scores=scores,
                        finite=np.isfinite(scores))
