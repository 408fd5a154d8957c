"""What every kind's pass sink shares (each kind's ``sink.py``): where a pass's outputs go while it runs, how its
prediction file is finished and published, how a data-parallel pass's shard files become one file, and what a Ray
batch returns and how the driver makes the file of the blocks it receives.

An engine builds one sink per pass (``kind.sink(target, classes)``) and never asks which kind it holds:

- ``flush(pass_run)`` after every batch of the measured region (a streaming sink writes its completed rows, in
  record batches; a sink that holds its outputs does nothing), ``finish(pass_run, report)`` after it;
- ``merge(parts, report)``: a data-parallel pass's shard files, in shard order, into the pass's file;
- ``ray_columns(out)`` in a Ray actor (a batch's outputs as the columns of the block it returns), and on the driver
  ``receive(block)`` for every block and ``finish_received(report, ids, corpus_ids)`` after the last one;
- ``after_pass(spec, workload, clock, report)``: what a kind adds once the file is written (outside ``pass_s``).

Each of them fills a :class:`SinkReport` (the file, its hash and kind, set in one place, :meth:`PassSink.publish`;
a vector size; an embedding job's queries file; notes), which the engine adds to the pass's result
(:meth:`SinkReport.into`) with the keys the journal has always held.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa

from iteralab.campaign.folder import PREDICTIONS
from iteralab.campaign.kinds.corpusorder import restore_streamed
from iteralab.campaign.records import CLASS_PROBABILITIES, PassOutput


@dataclass
class SinkReport:
    """What a sink publishes after the measured region: its file (:class:`PassOutput`), the vector size of an
    embedding job, its queries' file (or why it has none), and notes for the pass's record. Fields left None are
    not written."""

    output: PassOutput | None = None
    vector_dim: int | None = None
    queries_file: str | None = None
    queries_sha256: str | None = None
    queries_error: str | None = None
    notes: list[str] = field(default_factory=list)

    def into(self, result: dict[str, Any]) -> None:
        """Adds what was published to a pass's result (its journal keys), the notes after the result's own."""
        if self.output is not None:
            result.update(self.output.to_json())
        for key in ("vector_dim", "queries_sha256", "queries_error", "queries_file"):
            if getattr(self, key) is not None:
                result[key] = getattr(self, key)
        result.setdefault("notes", []).extend(self.notes)


class PassSink:
    """The outputs of one pass, on their way to the prediction file ``target``."""

    #: what the prediction file holds (:data:`~iteralab.campaign.records.OUTPUT_KINDS`)
    output_kind: ClassVar[str] = CLASS_PROBABILITIES
    #: whether the outputs stream to the file while the pass runs, in the order they come (a Ray pass then keeps
    #: the corpus order, so that the streamed file is the one a local pass writes); else they are held, and the
    #: file written in corpus order after the measured region
    streams: ClassVar[bool] = False

    def __init__(self, target: Path, classes: Sequence[str]) -> None:
        self.target = Path(target)
        self.classes = list(classes)
        #: rows written to the file so far, and the seconds the writes took inside the measured region
        self.flushed = 0
        self.stream_s = 0.0

    def flush(self, pass_run: Any, final: bool = False) -> None:
        """After a batch of the measured region: the completed rows written (a sink that holds them: nothing)."""

    def finish(self, pass_run: Any, report: SinkReport) -> None:
        """After the measured region: the completed rows' file, in corpus order, published into ``report``."""
        raise NotImplementedError

    def merge(self, parts: list[Path], report: SinkReport) -> None:
        """A data-parallel pass: the shards' files (in shard order; a missing one adds nothing) into the pass's."""
        raise NotImplementedError

    def ray_columns(self, out: Any) -> dict[str, pa.Array]:
        """In a Ray actor: a batch's outputs as the columns of the block it returns (beside ``id``)."""
        raise NotImplementedError

    def receive(self, block: Any) -> None:
        """On the Ray driver, inside the measured region: one block as it arrives."""
        raise NotImplementedError

    def finish_received(self, report: SinkReport, ids: pa.Array, corpus_ids: pa.Array) -> None:
        """On the Ray driver, after the measured region: the file of the blocks received (``ids``, in the order
        received), in corpus order (``corpus_ids``), published into ``report``."""
        raise NotImplementedError

    def after_pass(self, spec: Any, workload: Any, clock: Any, report: SinkReport) -> None:
        """After a completed pass and its file: what the kind adds with the pass's model (default: nothing)."""

    def publish(self, report: SinkReport, sha256: str | None) -> None:
        """The one place a pass's output is recorded: its file (relative to the campaign), hash and kind."""
        report.output = PassOutput(self.output_kind, f"{PREDICTIONS}/{self.target.name}", sha256)


class StreamingSink(PassSink):
    """A sink whose rows stream to their file (``self.writer``, the kind's streamed writer) while the pass runs:
    finished by writing the last rows and putting a bucketed pass's file in corpus order, merged from the shards'
    files record batch by record batch, and on Ray written block by block as they arrive in corpus order."""

    streams = True
    #: what the measured pass does besides the model, for the pass's note ("rendering the prompts …")
    streamed_work: ClassVar[str] = ""
    #: the kind's name in the pass's note
    kind_word: ClassVar[str] = ""
    writer: Any

    def shard_batches(self, part: Path) -> Iterator[pa.RecordBatch]:
        """A shard's file, record batch by record batch."""
        raise NotImplementedError

    def finish(self, pass_run: Any, report: SinkReport) -> None:
        """After the measured region: the last rows written, the file put in corpus order (a bucketed pass),
        closed and renamed, its hash."""
        self.flush(pass_run, final=True)
        self.writer = restore_streamed(self.writer, pass_run.order, self.flushed)
        self.publish(report, self.writer.close())
        report.notes.append(f"pass_s includes {self.streamed_work} ({self.stream_s:.3f} s of writing), as every "
                            f"{self.kind_word} variant's pass does")

    def merge(self, parts: list[Path], report: SinkReport) -> None:
        """The shards' files, streamed record batch by record batch into the pass's one file."""
        for part in parts:
            if part.is_file():
                for batch in self.shard_batches(part):
                    self.writer.write_block(batch)
        self.publish(report, self.writer.close())

    def receive(self, block: Any) -> None:
        self.writer.write_block(block)

    def finish_received(self, report: SinkReport, ids: pa.Array, corpus_ids: pa.Array) -> None:
        self.publish(report, self.writer.close())  # streamed in corpus order (Ray's preserve_order)


def pending_ids(pass_run: Any, start: int, pending: int) -> pa.Array:
    """The ids of the ``pending`` rows a pass writes next, from row ``start`` of its pass order, in the order its
    outputs come (the corpus order, or the bucketed order ``pass_run.order``): one slice or one take of the pass's
    id chunks, shared by every streamed output."""
    chunks = pa.chunked_array([c.cast(pa.string()) for c in pass_run.id_chunks], pa.string())
    if pass_run.order is None:
        return chunks.slice(start, pending).combine_chunks()
    return chunks.take(pa.array(pass_run.order[start:start + pending])).combine_chunks()
