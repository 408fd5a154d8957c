"""The embedding job: its kind object (:data:`EMBEDDING`) and everything it owns.

Reads and writes: its prediction file (``output.py``), streamed or written by its pass sink (``sink.py``). Its
verdict part: ``verdict.py``; how its results are shown: ``shown.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from iteralab.campaign.folder import COLUMNS, with_cosines
from iteralab.campaign.kinds.base import JobKind
from iteralab.campaign.kinds.embedding import shown
from iteralab.campaign.kinds.embedding.output import VECTOR_FILE
from iteralab.campaign.kinds.embedding.sink import VectorSink, embedding_options, embedding_record
from iteralab.campaign.kinds.embedding.verdict import EMBEDDING_VERDICT
from iteralab.campaign.kinds.verdictpart import QualitySeries


class EmbeddingKind(JobKind):
    name = "embedding"
    rerun_words = shown.RERUN_WORDS
    examples = shown.EXAMPLES
    output = VECTOR_FILE
    verdict = EMBEDDING_VERDICT
    #: the cosine columns after ``max_abs_prob_diff``
    table_columns = with_cosines(COLUMNS)
    #: each counted pass's minimum cosine with the reference pass's vectors
    quality_series = (QualitySeries("min_cosines", "min_cosine"),)

    def sink(self, target: Path, classes: Sequence[str]) -> VectorSink:
        return VectorSink(target, classes)

    def model_record(self, protocol: Any, folder: Path | None) -> dict[str, Any]:
        return embedding_record(protocol, folder)

    def workload_options(self, model: Mapping[str, Any]) -> dict[str, Any]:
        return embedding_options(model)


EMBEDDING = EmbeddingKind()
