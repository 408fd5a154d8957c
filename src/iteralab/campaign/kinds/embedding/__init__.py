"""The embedding job: its kind object (:data:`EMBEDDING`) and everything it owns.

Reads and writes: its prediction file (``output.py``), streamed or written by its pass sink (``sink.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from iteralab.campaign.kinds.base import JobKind
from iteralab.campaign.kinds.embedding.sink import VectorSink, embedding_options, embedding_record


class EmbeddingKind(JobKind):
    name = "embedding"

    def sink(self, target: Path, classes: Sequence[str]) -> VectorSink:
        return VectorSink(target, classes)

    def model_record(self, protocol: Any, folder: Path | None) -> dict[str, Any]:
        return embedding_record(protocol, folder)

    def workload_options(self, model: Mapping[str, Any]) -> dict[str, Any]:
        return embedding_options(model)


EMBEDDING = EmbeddingKind()
