"""A classification pass's sink: its probabilities are held (one float32 row per document, O(classes) bytes) and
the file (``output.py``) is written once, in corpus order, after the measured region; a data-parallel pass's shard
files are concatenated, a Ray pass's blocks taken in the order they arrive and put in corpus order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from iteralab.campaign.kinds.classification.output import write_predictions
from iteralab.campaign.kinds.corpusorder import in_corpus_order, received_positions
from iteralab.campaign.kinds.sink import PassSink, SinkReport


class ProbabilitySink(PassSink):
    """Class probabilities, held until the pass ends."""

    def __init__(self, target: Path, classes: Any) -> None:
        super().__init__(target, classes)
        self.received: list[Any] = []  # a Ray pass: the probability columns of the blocks received

    def finish(self, pass_run: Any, report: SinkReport) -> None:
        probs = pass_run.probs
        pass_run.outputs.clear()  # the batches' rows now live in `probs` only: one copy per document, not two
        done = pass_run.ordered_ids().slice(0, pass_run.progress.completed)
        if pass_run.order is not None:  # bucketed: the file in corpus order (kinds.corpusorder)
            done, probs = in_corpus_order(done, probs, pass_run.order[:len(done)])
        sha256 = write_predictions(self.target, done, self.classes, probs)
        del probs
        self.publish(report, sha256)

    def merge(self, parts: list[Path], report: SinkReport) -> None:
        ids, probs = [], []
        for part in parts:
            if part.is_file():
                table = pq.read_table(part)
                ids.append(table.column("id").combine_chunks())
                values = table.column("probs").combine_chunks().values.to_numpy(zero_copy_only=False)
                probs.append(values.reshape(table.num_rows, len(self.classes)))
        merged_ids = pa.concat_arrays(ids) if ids else pa.array([], pa.string())
        merged = np.concatenate(probs) if probs else np.zeros((0, len(self.classes)), np.float32)
        self.publish(report, write_predictions(self.target, merged_ids, self.classes, merged))

    def ray_columns(self, out: Any) -> dict[str, pa.Array]:
        k = len(self.classes)
        probs = np.asarray(out, dtype=np.float32).reshape(-1, k)
        return {"probs": pa.FixedSizeListArray.from_arrays(pa.array(probs.reshape(-1)), k)}

    def receive(self, block: Any) -> None:
        self.received.append(block.column("probs"))

    def finish_received(self, report: SinkReport, ids: pa.Array, corpus_ids: pa.Array) -> None:
        k = len(self.classes)
        probs = (np.concatenate([c.combine_chunks().flatten().to_numpy(zero_copy_only=False) for c in self.received])
                 .reshape(-1, k) if self.received else np.zeros((0, k), np.float32))
        in_order, probs = in_corpus_order(ids, probs, received_positions(ids, corpus_ids))
        self.publish(report, write_predictions(self.target, in_order, self.classes, probs))
