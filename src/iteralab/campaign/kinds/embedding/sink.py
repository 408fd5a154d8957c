"""An embedding pass's sink (:class:`VectorSink`) and model options: the model's embedding options, and its
vectors streamed to the vector file (``output.py``) one record batch at a time while the pass runs, so
that a pass never holds a corpus of vectors. The same for every embedding variant, so the writes inside the
measured region are the same work for each (their seconds are said in a note of the pass).

A ``recall_at_k`` campaign's pass then embeds the queries file with the same loaded model, in file order and in
batches of the variant's size, into its sibling file ``predictions/<pass_id>.queries.parquet`` (the same vector
format, streamed batch by batch), **after** the measured region and the corpus's file: ``pass_s`` stays the
corpus job alone, the cost being priced (queries are the evaluation's, not the batch job's; a search system
embeds them online, one at a time). Their seconds are recorded in a note of the pass.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from iteralab.campaign.folder import PREDICTIONS
from iteralab.campaign.kinds.corpusorder import restore_streamed
from iteralab.campaign.kinds.embedding.output import (FLUSH_ROWS, VectorWriter, queries_file_name, vector_batches,
                                                      vector_column)
from iteralab.campaign.kinds.sink import PassSink, SinkReport, pending_ids
from iteralab.campaign.records import EMBEDDING_VECTORS
from iteralab.errors import one_line
from iteralab.models.stfolder import resolved_pooling
from iteralab.plan.queries import load_queries


def embedding_record(protocol: Any, folder: Path | None = None) -> dict[str, Any]:
    """An embedding job's model record adds how its vectors are made (a classifier's record is unchanged): the
    pooling is the protocol's, or, where it names none, the model ``folder``'s own (``models.stfolder``)."""
    spec = protocol.embedding
    if protocol.task.kind != "embedding" or spec is None:
        return {}
    encoder = folder if protocol.model.kind == "encoder" else None  # a callable makes its own vectors
    return {"embedding": {"task": "embedding", "pooling": resolved_pooling(spec, encoder), "normalize": spec.normalize,
                          "dim": spec.dim}}


def embedding_options(model: Any) -> dict[str, Any]:
    """The factory's keywords of an embedding job's model: its task, pooling and normalization."""
    return {"task": "embedding", "pooling": model["embedding"]["pooling"],
            "normalize": model["embedding"]["normalize"]}


class VectorSink(PassSink):
    """Embedding vectors, streamed to the vector file one record batch at a time (never a corpus of vectors)."""

    output_kind = EMBEDDING_VECTORS
    streams = True

    def __init__(self, target: Path, classes: Any) -> None:
        super().__init__(target, classes)
        self.writer = VectorWriter(self.target)

    def flush(self, pass_run: Any, final: bool = False) -> None:
        """The completed rows' vectors streamed to the vector file once a record batch is full (``final``: whatever
        is left), in pass order (a bucketed pass: its length order, the ids taken in that order; the file is put
        in corpus order after the measured region, :meth:`finish`)."""

        pending = pass_run.progress.completed - self.flushed
        if not pending or (pending < FLUSH_ROWS and not final):
            return
        t0 = time.perf_counter()
        vectors = np.concatenate([np.asarray(o, dtype=np.float32) for o in pass_run.outputs])
        pass_run.outputs.clear()
        self.writer.write(pending_ids(pass_run, self.flushed, pending), vectors)
        self.flushed += pending
        self.stream_s += time.perf_counter() - t0

    def finish(self, pass_run: Any, report: SinkReport) -> None:
        """After the measured region: the last rows flushed, the file put in corpus order (a bucketed pass),
        closed and renamed, its hash and dimension."""
        self.flush(pass_run, final=True)
        # a bucketed pass's file, streamed in length order, rewritten in corpus order
        self.writer = restore_streamed(self.writer, pass_run.order, self.flushed)
        self.publish(report, self.writer.close())
        report.vector_dim = self.writer.dim
        report.notes.append(f"pass_s includes streaming the vectors to the prediction file in record batches "
                            f"({self.stream_s:.3f} s of it), as every embedding variant's pass does")

    def merge(self, parts: list[Path], report: SinkReport) -> None:
        """The shards' vector files, streamed record batch by record batch into the pass's one vector file."""
        dim = None
        for part in parts:
            if not part.is_file():
                continue
            dim = pq.ParquetFile(part).schema_arrow.field("vector").type.list_size
            for ids, vectors in vector_batches(part):
                self.writer.write(ids, vectors)
        self.publish(report, self.writer.close(dim))
        report.vector_dim = self.writer.dim or dim

    def ray_columns(self, out: Any) -> dict[str, pa.Array]:
        return {"vector": vector_column(np.asarray(out, dtype=np.float32))}

    def receive(self, block: Any) -> None:
        self.writer.write_block(block)

    def finish_received(self, report: SinkReport, ids: pa.Array, corpus_ids: pa.Array) -> None:
        self.publish(report, self.writer.close())  # streamed in corpus order (Ray's preserve_order)
        report.vector_dim = self.writer.dim

    def after_pass(self, spec: Any, workload: Any, clock: Any, report: SinkReport) -> None:
        embed_queries(spec, workload, clock, report)


def embed_queries(spec: Any, workload: Any, clock: Any, report: SinkReport) -> None:
    """recall_at_k, after a completed measured pass: the campaign's queries embedded by the pass's model (file
    order, the variant's batch size) and streamed to the pass's query vector file; its name and sha256 go into
    the report (``queries_file``, ``queries_sha256``). A failure is recorded (``queries_error`` and a note): the
    pass's verdict then has no recall to compute and fails, the measured pass stays as measured."""
    if not spec.queries_path:
        return
    t0 = clock.now()
    sink = VectorWriter(Path(spec.prediction_dir) / queries_file_name(spec.pass_id))
    try:
        queries = load_queries(spec.queries_path, **(spec.queries_columns or {}))
        ids = pa.array(list(queries.ids), pa.string())
        size = max(1, int(spec.variant["batch_size"]))
        for start in range(0, len(queries), size):
            vectors = workload.infer(workload.tokenize(list(queries.texts[start:start + size])))
            sink.write(ids.slice(start, size), np.asarray(vectors, dtype=np.float32))
        report.queries_sha256 = sink.close()
    except Exception as exc:  # the pass's own model or data: said in the row, judged as a missing recall
        report.queries_error = one_line(exc)
        sink.temporary.unlink(missing_ok=True)
        report.notes.append(f"queries not embedded: {report.queries_error}")
        return
    report.queries_file = f"{PREDICTIONS}/{sink.path.name}"
    report.notes.append(f"queries: {sink.rows} embedded after the measured pass, outside pass_s, with the "
                        f"variant's model and batch size ({clock.now() - t0:.3f} s)")
