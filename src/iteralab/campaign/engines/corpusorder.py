"""Every prediction file in the corpus copy's order, whatever order the pass ran in (R7).

A bucketed pass runs its documents sorted by token length, and a Ray classification pass receives its blocks as
they finish; both write their file in the corpus copy's order all the same, so a reader that lines the file up with
the corpus by row finds each id's own output. The order is restored after the measured region (the pass's
``writing_s``), never inside it: a bucketed pass streams its vectors or texts to its file in pass order, exactly as
an unbucketed one does, and only then is the file rewritten.

- Outputs held as arrays (a classifier's probabilities): one NumPy permutation, :func:`in_corpus_order`.
- A streamed file (vectors, texts), :func:`rewrite_in_corpus_order`: the pass-order file is copied once into an
  uncompressed Arrow IPC scratch file, which is memory-mapped and read back :data:`CHUNK_ROWS` rows at a time in
  corpus order (each chunk gathered from the scratch file's record batches, the map let go after each chunk) into a
  fresh writer of the same kind. What is held is a chunk of rows and one index per row, never the file.

The pass's ``order_hash`` still records the order it ran in (C1): the processing order is a fact of the pass; the
file's order is always the corpus's (``evidence.verify`` checks it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from iteralab.common.arrow import numpy_array

#: Rows gathered at a time when a streamed file is rewritten in corpus order.
CHUNK_ROWS = 1 << 13


def corpus_rank(positions: np.ndarray) -> np.ndarray:
    """The pass-order rows listed in corpus order: ``positions[i]`` is the corpus position of the pass's row ``i``
    (positions are distinct; the stable sort keeps a tie in pass order)."""
    return np.argsort(np.asarray(positions, dtype=np.int64), kind="stable")


def received_positions(ids: pa.Array, corpus_ids: pa.Array) -> np.ndarray:
    """The corpus position of each id received (an id outside the corpus sorts after every corpus id)."""
    found = pc.index_in(ids, value_set=corpus_ids)
    return pc.fill_null(found, len(corpus_ids)).to_numpy(zero_copy_only=False).astype(np.int64)


def in_corpus_order(ids: pa.Array, outputs: np.ndarray, positions: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """``ids`` and their output rows (pass order) reordered into corpus order."""
    if not len(ids) or bool((np.diff(positions) >= 0).all()):
        return ids, outputs
    rank = corpus_rank(positions)
    return ids.take(numpy_array(rank)), outputs[rank]


def rewrite_in_corpus_order(sink: Any, positions: np.ndarray) -> Any:
    """A streamed writer (``campaign.vectors.VectorWriter`` or ``campaign.texts.TextWriter``) that wrote its rows in
    pass order, not yet closed: its rows rewritten in corpus order into a fresh writer of the same kind and target,
    returned not yet closed (the caller closes it as it would have closed ``sink``). ``positions``: the corpus
    position of each row written. A writer that wrote nothing, or in corpus order already, is returned as it is."""
    if not sink.rows or bool((np.diff(positions) >= 0).all()):
        return sink
    # the pass-order file leaves the writer's temporary name, which the fresh writer takes
    source = sink.path.with_name(f".tmp-{sink.path.name}.pass-order.parquet")
    os.replace(sink.finish_temporary(), source)
    scratch = source.with_suffix(".arrow")
    try:
        _to_ipc(source, scratch)
        source.unlink()
        fresh = type(sink)(sink.path)
        for block in _gather(scratch, corpus_rank(positions)):
            fresh.write_block(block)
    finally:
        source.unlink(missing_ok=True)
        scratch.unlink(missing_ok=True)
    return fresh


def restore_streamed(pass_run: Any) -> None:
    """After the measured region, once its last rows are flushed: a bucketed pass's streamed file rewritten in
    corpus order (``pass_run.order``: the corpus position of each row in pass order; None: file order already)."""
    if pass_run.order is not None:
        pass_run.sink = rewrite_in_corpus_order(pass_run.sink, pass_run.order[:pass_run.flushed])


def _to_ipc(source: Path, scratch: Path) -> None:
    """The Parquet file ``source`` copied into an uncompressed Arrow IPC file, record batch by record batch."""
    handle = pq.ParquetFile(source, pre_buffer=False)
    with pa.OSFile(os.fspath(scratch), "wb") as fh, pa.ipc.new_file(fh, handle.schema_arrow) as writer:
        for batch in handle.iter_batches(batch_size=CHUNK_ROWS, use_threads=False):
            writer.write_batch(batch)


def _gather(scratch: Path, rank: np.ndarray) -> Any:
    """The rows ``rank`` of the IPC file, in that order, :data:`CHUNK_ROWS` at a time (as tables): each chunk's rows
    taken from the record batches that hold them (no batch is concatenated with another)."""
    for start in range(0, len(rank), CHUNK_ROWS):
        wanted = rank[start:start + CHUNK_ROWS]
        with pa.memory_map(os.fspath(scratch)) as mapped:
            reader = pa.ipc.open_file(mapped)
            lengths = [reader.get_batch(b).num_rows for b in range(reader.num_record_batches)]
            offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
            which = np.searchsorted(offsets, wanted, side="right") - 1
            grouped = np.argsort(which, kind="stable")  # the chunk's rows grouped by the batch that holds them
            batches, starts = np.unique(which[grouped], return_index=True)
            pieces = [reader.get_batch(int(b)).take(numpy_array(wanted[rows] - offsets[b]))
                      for b, rows in zip(batches, np.split(grouped, starts[1:]))]
            table = pa.Table.from_batches(pieces, schema=reader.schema).combine_chunks()
            block = table.take(numpy_array(np.argsort(grouped, kind="stable")))
            del table, pieces, reader  # the map is let go with them: its pages leave this process's memory
        yield block
