"""What an embedding pass adds to a measured pass (``engines.passes``): the model's embedding options, and its
vectors streamed to the vector file (``campaign.kinds.embedding.output``) one record batch at a time while the pass runs, so
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

from iteralab.campaign.engines.corpusorder import restore_streamed
from iteralab.campaign.folder import PREDICTIONS
from iteralab.campaign.records import EMBEDDING_VECTORS
from iteralab.campaign.kinds.embedding.output import FLUSH_ROWS, VectorWriter, queries_file_name, vector_batches
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


def is_embedding(model: Any) -> bool:
    """Whether the campaign's model record (``campaign.json``'s ``model``) is an embedding job's."""
    return (model.get("embedding") or {}).get("task") == "embedding"


def embedding_options(model: Any) -> dict[str, Any]:
    """The factory's keywords of an embedding job's model (none for a classifier: its call is unchanged)."""
    if not is_embedding(model):
        return {}
    return {"task": "embedding", "pooling": model["embedding"]["pooling"],
            "normalize": model["embedding"]["normalize"]}


def pending_ids(pass_run: Any, pending: int) -> pa.Array:
    """The ids of the ``pending`` rows a pass writes next, in the order its outputs come (the corpus order, or the
    bucketed order ``pass_run.order``): one slice or one take of the pass's id chunks, shared by every kind of
    streamed output."""
    chunks = pa.chunked_array([c.cast(pa.string()) for c in pass_run.id_chunks], pa.string())
    if pass_run.order is None:
        return chunks.slice(pass_run.flushed, pending).combine_chunks()
    return chunks.take(pa.array(pass_run.order[pass_run.flushed:pass_run.flushed + pending])).combine_chunks()


def flush_vectors(pass_run: Any, final: bool = False) -> None:
    """The completed rows' vectors streamed to the vector file once a record batch is full (``final``: whatever
    is left), in pass order (a bucketed pass: its length order, the ids taken in that order; the file is put in
    corpus order after the measured region, :func:`finish_vectors`)."""

    pending = pass_run.progress.completed - pass_run.flushed
    if not pending or (pending < FLUSH_ROWS and not final):
        return
    t0 = time.perf_counter()
    vectors = np.concatenate([np.asarray(o, dtype=np.float32) for o in pass_run.outputs])
    pass_run.outputs.clear()
    ids = pending_ids(pass_run, pending)
    pass_run.sink.write(ids, vectors)
    pass_run.flushed += pending
    pass_run.stream_s += time.perf_counter() - t0


def finish_vectors(pass_run: Any, result: dict[str, Any]) -> None:
    """After the measured region: the last rows flushed, the file put in corpus order (a bucketed pass), closed and
    renamed, its hash and dimension."""
    flush_vectors(pass_run, final=True)
    restore_streamed(pass_run)  # a bucketed pass's file, streamed in length order, rewritten in corpus order
    sink = pass_run.sink
    result["output_kind"] = EMBEDDING_VECTORS
    result["prediction_sha256"] = sink.close()
    result["prediction_file"] = f"{PREDICTIONS}/{sink.path.name}"
    result["vector_dim"] = sink.dim
    result["notes"].append(f"pass_s includes streaming the vectors to the prediction file in record batches "
                           f"({pass_run.stream_s:.3f} s of it), as every embedding variant's pass does")


def embed_queries(spec: Any, workload: Any, clock: Any, result: dict[str, Any]) -> None:
    """recall_at_k, after a completed measured pass: the campaign's queries embedded by the pass's model (file
    order, the variant's batch size) and streamed to the pass's query vector file; its name and sha256 go into
    the result (``queries_file``, ``queries_sha256``). A failure is recorded (``queries_error`` and a note): the
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
        result["queries_sha256"] = sink.close()
    except Exception as exc:  # the pass's own model or data: said in the row, judged as a missing recall
        result["queries_error"] = one_line(exc)
        sink.temporary.unlink(missing_ok=True)
        result["notes"].append(f"queries not embedded: {result['queries_error']}")
        return
    result["queries_file"] = f"{PREDICTIONS}/{sink.path.name}"
    result["notes"].append(f"queries: {sink.rows} embedded after the measured pass, outside pass_s, with the "
                           f"variant's model and batch size ({clock.now() - t0:.3f} s)")


def merge_vector_files(parts: list[Path], target: Path, result: dict[str, Any]) -> None:
    """A data-parallel pass's file (``campaign.engines.parallel``): the shards' vector files, in shard order,
    streamed record batch by record batch into the pass's one vector file (a missing shard file adds nothing);
    the file, its hash and dimension go into ``result``."""
    sink = VectorWriter(target)
    dim = None
    for part in parts:
        if not part.is_file():
            continue
        dim = pq.ParquetFile(part).schema_arrow.field("vector").type.list_size
        for ids, vectors in vector_batches(part):
            sink.write(ids, vectors)
    result["output_kind"] = EMBEDDING_VECTORS
    result["prediction_sha256"] = sink.close(dim)
    result["prediction_file"] = f"{PREDICTIONS}/{target.name}"
    result["vector_dim"] = sink.dim or dim
