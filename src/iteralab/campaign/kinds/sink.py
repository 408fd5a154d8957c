"""What every kind's pass sink shares (each kind's ``sink.py``): where a pass's outputs go while it runs, how its
prediction file is finished and published, how a data-parallel pass's shard files become one file, and what a Ray
batch returns and how the driver makes the file of the blocks it receives.

An engine builds one sink per pass (``kind.sink(target, classes)``) and never asks which kind it holds:

- ``flush(pass_run)`` after every batch of the measured region (a streaming sink writes its completed rows, in
  record batches; a sink that holds its outputs does nothing), ``finish(pass_run, result)`` after it;
- ``merge(parts, result)``: a data-parallel pass's shard files, in shard order, into the pass's file;
- ``ray_columns(out)`` in a Ray actor (a batch's outputs as the columns of the block it returns), and on the driver
  ``receive(block)`` for every block and ``finish_received(result, ids, corpus_ids)`` after the last one;
- ``after_pass(spec, workload, clock, result)``: what a kind adds once the file is written (outside ``pass_s``).

The output fields of a result (``prediction_file``, ``prediction_sha256``, ``output_kind``) are set in one place,
:meth:`PassSink.publish`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa

from iteralab.campaign.folder import PREDICTIONS
from iteralab.campaign.records import CLASS_PROBABILITIES, PassOutput


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

    def finish(self, pass_run: Any, result: dict[str, Any]) -> None:
        """After the measured region: the completed rows' file, in corpus order, published into ``result``."""
        raise NotImplementedError

    def merge(self, parts: list[Path], result: dict[str, Any]) -> None:
        """A data-parallel pass: the shards' files (in shard order; a missing one adds nothing) into the pass's."""
        raise NotImplementedError

    def ray_columns(self, out: Any) -> dict[str, pa.Array]:
        """In a Ray actor: a batch's outputs as the columns of the block it returns (beside ``id``)."""
        raise NotImplementedError

    def receive(self, block: Any) -> None:
        """On the Ray driver, inside the measured region: one block as it arrives."""
        raise NotImplementedError

    def finish_received(self, result: dict[str, Any], ids: pa.Array, corpus_ids: pa.Array) -> None:
        """On the Ray driver, after the measured region: the file of the blocks received (``ids``, in the order
        received), in corpus order (``corpus_ids``), published into ``result``."""
        raise NotImplementedError

    def after_pass(self, spec: Any, workload: Any, clock: Any, result: dict[str, Any]) -> None:
        """After a completed pass and its file: what the kind adds with the pass's model (default: nothing)."""

    def publish(self, result: dict[str, Any], sha256: str | None) -> None:
        """The one place a pass's output is recorded: its file (relative to the campaign), hash and kind."""
        output = PassOutput(self.output_kind, f"{PREDICTIONS}/{self.target.name}", sha256)
        result.update(output.to_json())


def pending_ids(pass_run: Any, start: int, pending: int) -> pa.Array:
    """The ids of the ``pending`` rows a pass writes next, from row ``start`` of its pass order, in the order its
    outputs come (the corpus order, or the bucketed order ``pass_run.order``): one slice or one take of the pass's
    id chunks, shared by every streamed output."""
    chunks = pa.chunked_array([c.cast(pa.string()) for c in pass_run.id_chunks], pa.string())
    if pass_run.order is None:
        return chunks.slice(start, pending).combine_chunks()
    return chunks.take(pa.array(pass_run.order[start:start + pending])).combine_chunks()
