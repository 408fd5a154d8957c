"""What an embedding pass adds to a measured pass (``engines.passes``): the model's embedding options, and its
vectors streamed to the vector file (``campaign.vectors``) one record batch at a time while the pass runs, so
that a pass never holds a corpus of vectors. The same for every embedding variant, so the writes inside the
measured region are the same work for each (their seconds are said in a note of the pass)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from iteralab.campaign.folder import PREDICTIONS
from iteralab.campaign.records import EMBEDDING_VECTORS
from iteralab.campaign.vectors import FLUSH_ROWS, VectorWriter, vector_batches


def embedding_record(protocol: Any) -> dict[str, Any]:
    """An embedding job's model record adds how its vectors are made (a classifier's record is unchanged)."""
    spec = protocol.embedding
    if protocol.task.kind != "embedding" or spec is None:
        return {}
    return {"embedding": {"task": "embedding", "pooling": spec.pooling, "normalize": spec.normalize,
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


def flush_vectors(pass_run: Any, final: bool = False) -> None:
    """The completed rows' vectors streamed to the vector file once a record batch is full (``final``: whatever
    is left), in pass order (a bucketed pass: its length order, the ids taken in that order)."""

    pending = pass_run.progress.completed - pass_run.flushed
    if not pending or (pending < FLUSH_ROWS and not final):
        return
    t0 = time.perf_counter()
    vectors = np.concatenate([np.asarray(o, dtype=np.float32) for o in pass_run.outputs])
    pass_run.outputs.clear()
    chunks = pa.chunked_array([c.cast(pa.string()) for c in pass_run.id_chunks], pa.string())
    if pass_run.order is None:
        ids = chunks.slice(pass_run.flushed, pending).combine_chunks()
    else:
        ids = chunks.take(pa.array(pass_run.order[pass_run.flushed:pass_run.flushed + pending])).combine_chunks()
    pass_run.sink.write(ids, vectors)
    pass_run.flushed += pending
    pass_run.stream_s += time.perf_counter() - t0


def finish_vectors(pass_run: Any, result: dict[str, Any]) -> None:
    """After the measured region: the last rows flushed, the file closed and renamed, its hash and dimension."""
    flush_vectors(pass_run, final=True)
    sink = pass_run.sink
    result["output_kind"] = EMBEDDING_VECTORS
    result["prediction_sha256"] = sink.close()
    result["prediction_file"] = f"{PREDICTIONS}/{sink.path.name}"
    result["vector_dim"] = sink.dim
    result["notes"].append(f"pass_s includes streaming the vectors to the prediction file in record batches "
                           f"({pass_run.stream_s:.3f} s of it), as every embedding variant's pass does")


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
