"""A scoring pass's sink (:class:`ScoreSink`) and model options: each document's pair read from the corpus copy (its
text and its ``prompt.<pair_column>`` cell), handed to the model as one string per document, and the scores
streamed to the score file (``output.py``) while the pass runs.

The pass reads (id, text) record batches and hands the model one string per document, whatever its kind
(``engines.passes``, ``engines.raypass``, ``engines.shards``). A scoring job's renderer (:class:`PairRenderer`,
asked as the kind's ``prompts``) therefore packs each pair into one string, its first text's length in characters,
a unit separator, then both texts (:func:`pack_pairs`: no text can be mistaken for another, whatever it holds), and
the kind's workload (:class:`PairWorkload`) unpacks each batch into its two lists before the model tokenizes them
together. Packing and unpacking are inside the measured region, the same work for every scoring variant: they cost
one string per pair, beside a model's forward pass (``bench/bench_score.py`` measures the ratio).

A data-parallel pass balances its shards by the packed strings' token counts (a few tokens more than the pair's
own: the length prefix); a bucketed pass orders the pairs by the model's own count of both texts
(:meth:`PairWorkload.token_lengths`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from iteralab.campaign.kinds.scoring.output import ScoreWriter, score_batches, score_column
from iteralab.campaign.kinds.sink import StreamingSink, pending_ids
from iteralab.campaign.records import PAIR_SCORES
from iteralab.models.pairs import folder_outputs, resolved_activation
from iteralab.plan.prompting import copy_column

#: Between a packed pair's length prefix and its texts.
SEPARATOR = "\x1f"


def scoring_record(protocol: Any, folder: Path | None = None) -> dict[str, dict[str, str | None]]:
    """A scoring job's model record adds its pair columns and how a cross-encoder's logits become a score: the
    protocol's activation, or the folder's declared one (``models.pairs``); a callable's scores are its own."""
    spec = protocol.scoring
    if spec is None:
        return {}
    folder = folder if protocol.model.kind == "hf_cross_encoder" else None
    activation = spec.activation if folder is None else resolved_activation(spec.activation, folder, folder_outputs(folder))
    return {"scoring": {"task": "scoring", "pair_column": spec.pair_column, "group_column": spec.group_column,
                        "relevance_column": spec.relevance_column, "activation": activation,
                        "positive_class": spec.positive_class}}


def scoring_options(model: Any) -> dict[str, str | None]:
    """The factory's keywords of a scoring job's model: its task and a cross-encoder's activation (as the model
    record resolved it) and positive class."""
    spec = model["scoring"]
    return {"task": "scoring", "activation": spec.get("activation"), "positive_class": spec.get("positive_class")}


def pack_pairs(firsts: pa.Array, seconds: pa.Array) -> pa.Array:
    """Each pair as one string: ``len(first)`` in characters, :data:`SEPARATOR`, the first text, the second."""
    firsts = pc.fill_null(firsts, "")
    seconds = pc.fill_null(seconds, "")
    lengths = pc.cast(pc.utf8_length(firsts), pa.string())
    return pc.binary_join_element_wise(pc.binary_join_element_wise(lengths, firsts, SEPARATOR), seconds, "")


def unpack_pairs(packed: Sequence[str]) -> tuple[list[str], list[str]]:
    """The (first texts, second texts) of packed pairs (:func:`pack_pairs`)."""
    firsts, seconds = [], []
    for item in packed:
        head, _, rest = item.partition(SEPARATOR)
        n = int(head)
        firsts.append(rest[:n])
        seconds.append(rest[n:])
    return firsts, seconds


class PairRenderer:
    """A scoring pass's documents as the corpus copy is read: :attr:`columns` are what the pass reads (id, text and
    the copy's pair column), and each record batch read becomes the record batch (id, text = the packed pair)."""

    #: a pair is never rendered through a chat template (what ``engines.shards`` asks of a renderer)
    chat_template = False

    def __init__(self, pair_column: str) -> None:
        self.pair = copy_column(pair_column)
        self.columns = ["id", "text", self.pair]

    def __call__(self, batch: Any) -> pa.RecordBatch:
        """A record batch (or a table: a Ray batch) of the columns read, as (id, text = the packed pair)."""
        def column(name: str) -> pa.Array:
            values = batch.column(name)
            values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
            return values if values.type == pa.string() else values.cast(pa.string())

        packed = pack_pairs(column("text"), column(self.pair))
        return pa.record_batch([column("id"), packed], names=["id", "text"])


class PairWorkload:
    """A scoring model seen through the pass's workload interface. The pass hands it packed pairs
    (:class:`PairRenderer`): ``tokenize`` unpacks them and tokenizes both texts together, ``infer`` scores them
    (float32 ``[n]``), ``token_lengths`` counts both texts as the model reads them (bucketing); ``describe`` and
    ``file_hashes`` are the model's."""

    def __init__(self, scorer: Any) -> None:
        self.scorer = scorer
        self.kind = scorer.kind

    def tokenize(self, packed: Sequence[str]) -> Any:
        return self.scorer.tokenize_pairs(*unpack_pairs(packed))

    def infer(self, encoded: Any) -> np.ndarray:
        return np.asarray(self.scorer.infer(encoded), dtype=np.float32).reshape(-1)

    def token_lengths(self, packed: Sequence[str]) -> list[int]:
        return list(self.scorer.pair_token_lengths(*unpack_pairs(packed)))

    def predict(self, packed: Sequence[str]) -> np.ndarray:
        return self.infer(self.tokenize(packed)) if packed else np.zeros(0, np.float32)

    def warmup(self, packed: Sequence[str]) -> None:
        self.predict(packed)

    def describe(self) -> dict[str, Any]:
        return self.scorer.describe()

    def file_hashes(self) -> dict[str, str]:
        return self.scorer.file_hashes()

    def __getattr__(self, name: str) -> Any:  # compile_record, device and the like: the model's own
        return getattr(self.scorer, name)


class ScoreSink(StreamingSink):
    """Pair scores, handed to the score file as the pass runs (the file writes record batches of its own size;
    never a corpus of scores held by the pass)."""

    output_kind = PAIR_SCORES
    streamed_work = "packing each pair and streaming the scores to the prediction file"
    kind_word = "scoring"

    def __init__(self, target: Path, classes: Any) -> None:
        super().__init__(target, classes)
        self.writer = ScoreWriter(self.target)

    def flush(self, pass_run: Any, final: bool = False) -> None:
        """The completed rows' scores handed to the score file, in pass order (a bucketed pass: its length order,
        the ids taken in that order)."""
        pending = pass_run.progress.completed - self.flushed
        if not pending:
            return
        t0 = time.perf_counter()
        scores = np.concatenate([np.asarray(o, dtype=np.float32).reshape(-1) for o in pass_run.outputs])
        pass_run.outputs.clear()
        self.writer.write(pending_ids(pass_run, self.flushed, pending), scores)
        self.flushed += pending
        self.stream_s += time.perf_counter() - t0

    def shard_batches(self, part: Path) -> Iterator[pa.RecordBatch]:
        return score_batches(part)

    def ray_columns(self, out: Any) -> dict[str, pa.Array]:
        return {"score": score_column(np.asarray(out, dtype=np.float32).reshape(-1))}
