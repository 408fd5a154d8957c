"""Every prediction file in the corpus copy's order, whatever order the pass ran in (R7).

A bucketed pass runs its documents sorted by token length, and a Ray classification pass receives its blocks as
they finish; both write their file in the corpus copy's order all the same, so a reader that lines the file up with
the corpus by row finds each id's own output. The order is restored after the measured region (the pass's
``writing_s``), never inside it: a bucketed pass streams its vectors or texts to its file in pass order, exactly as
an unbucketed one does, and only then is the file rewritten.

- Outputs held as arrays (a classifier's probabilities): one NumPy permutation, :func:`in_corpus_order`.
- A streamed file (vectors, texts), :func:`rewrite_in_corpus_order`, in two sequential passes over the data: the
  pass-order file is read a record batch at a time and each batch, given a column with each row's place in the
  file to write, is split by the output chunk of :data:`CHUNK_ROWS` rows its rows belong to, the pieces appended
  to one uncompressed Arrow IPC scratch file; then each output chunk reads its own pieces back (and nothing else),
  sorts them by that column and goes to a fresh writer of the same kind. Every byte is written and read once; what
  is held is one batch or one chunk of rows and one index per row, never the file (a random gather through a
  memory map would map most of the file for every chunk, the kernel reading ahead around each row).

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

#: Rows per record batch read, and per chunk written, when a streamed file is rewritten in corpus order.
CHUNK_ROWS = 1 << 13
#: The scratch file's column of each row's place in the rewritten file.
PLACE = "_iteralab_place"


def corpus_rank(positions: np.ndarray) -> np.ndarray:
    """The pass-order rows listed in corpus order: ``positions[i]`` is the corpus position of the pass's row ``i``
    (positions are distinct; the stable sort keeps a tie in pass order)."""
    return np.argsort(np.asarray(positions, dtype=np.int64), kind="stable")


def in_order(positions: np.ndarray) -> bool:
    """Whether rows at these corpus positions stand in corpus order already (nothing to restore)."""
    return bool((np.diff(positions) >= 0).all())


def received_positions(ids: pa.Array, corpus_ids: pa.Array) -> np.ndarray:
    """The corpus position of each id received (an id outside the corpus sorts after every corpus id)."""
    found = pc.index_in(ids, value_set=corpus_ids)
    return pc.fill_null(found, len(corpus_ids)).to_numpy(zero_copy_only=False).astype(np.int64)


def in_corpus_order(ids: pa.Array, outputs: np.ndarray, positions: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """``ids`` and their output rows (pass order) reordered into corpus order."""
    if not len(ids) or in_order(positions):
        return ids, outputs
    rank = corpus_rank(positions)
    return ids.take(numpy_array(rank)), outputs[rank]


def rewrite_in_corpus_order(sink: Any, positions: np.ndarray) -> Any:
    """A streamed writer (``campaign.kinds.embedding.output.VectorWriter`` or ``campaign.kinds.generation.output.TextWriter``) that wrote its rows in
    pass order, not yet closed: its rows rewritten in corpus order into a fresh writer of the same kind and target,
    returned not yet closed (the caller closes it as it would have closed ``sink``). ``positions``: the corpus
    position of each row written. A writer that wrote nothing, or in corpus order already, is returned as it is."""
    if not sink.rows or in_order(positions):
        return sink
    # the pass-order file leaves the writer's temporary name, which the fresh writer takes
    source = sink.path.with_name(f".tmp-{sink.path.name}.pass-order.parquet")
    os.replace(sink.finish_temporary(), source)
    scratch = source.with_suffix(".arrow")
    place = np.empty(len(positions), dtype=np.int64)  # the row of the rewritten file each pass-order row goes to
    place[corpus_rank(positions)] = np.arange(len(positions), dtype=np.int64)
    try:
        pieces = _route(source, scratch, place)
        source.unlink()
        fresh = type(sink)(sink.path)
        for block in _chunks(scratch, pieces):
            fresh.write_block(block)
    finally:
        source.unlink(missing_ok=True)
        scratch.unlink(missing_ok=True)
    return fresh


def restore_streamed(writer: Any, order: np.ndarray | None, rows: int) -> Any:
    """After the measured region, once its last ``rows`` are flushed: a bucketed pass's streamed file rewritten in
    corpus order (``order``: the corpus position of each row in pass order; None: file order already). Returns
    the writer that now holds the file."""
    return writer if order is None else rewrite_in_corpus_order(writer, order[:rows])


def _route(source: Path, scratch: Path, place: np.ndarray) -> list[list[int]]:
    """The first pass: each record batch of ``source``, with its rows' ``place`` as a column, split by output chunk
    into the IPC file ``scratch``; for each output chunk, the scratch batches that hold its rows."""
    handle = pq.ParquetFile(source, pre_buffer=False)
    schema = handle.schema_arrow.append(pa.field(PLACE, pa.int64()))
    pieces: list[list[int]] = [[] for _ in range(-(-len(place) // CHUNK_ROWS))]
    row = written = 0
    with pa.OSFile(os.fspath(scratch), "wb") as fh, pa.ipc.new_file(fh, schema) as writer:
        for batch in handle.iter_batches(batch_size=CHUNK_ROWS, use_threads=False):
            mine = place[row:row + batch.num_rows]
            row += batch.num_rows
            chunk = mine // CHUNK_ROWS
            order = np.argsort(chunk, kind="stable")
            batch = pa.RecordBatch.from_arrays([*batch.columns, numpy_array(mine)], schema=schema)
            batch = batch.take(numpy_array(order))
            targets, starts = np.unique(chunk[order], return_index=True)
            for target, a, b in zip(targets, starts, [*starts[1:], len(order)]):
                writer.write_batch(batch.slice(int(a), int(b - a)))
                pieces[int(target)].append(written)
                written += 1
    return pieces


def _chunks(scratch: Path, pieces: list[list[int]]) -> Any:
    """The second pass: each output chunk's pieces read back from ``scratch`` (only those), in file order, as a
    table of the file's columns."""
    with pa.OSFile(os.fspath(scratch), "rb") as fh:
        reader = pa.ipc.open_file(fh)
        for mine in pieces:
            table = pa.Table.from_batches([reader.get_batch(i) for i in mine], schema=reader.schema).combine_chunks()
            order = np.argsort(table.column(PLACE).to_numpy(), kind="stable")
            yield table.drop_columns([PLACE]).take(numpy_array(order))
