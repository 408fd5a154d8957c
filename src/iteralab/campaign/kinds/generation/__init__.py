"""The generation job: its kind object (:data:`GENERATION`) and everything it owns.

Reads and writes: its prediction file (``output.py``), streamed or written by its pass sink (``sink.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from iteralab.campaign.kinds.base import JobKind
from iteralab.campaign.kinds.generation.sink import (PromptRenderer, PromptWorkload, TextSink,
                                                    generation_options, generation_record)


class GenerationKind(JobKind):
    name = "generation"

    def sink(self, target: Path, classes: Sequence[str]) -> TextSink:
        return TextSink(target, classes)

    def model_record(self, protocol: Any, folder: Path | None) -> dict[str, Any]:
        return generation_record(protocol)

    def workload_options(self, model: Mapping[str, Any]) -> dict[str, Any]:
        return generation_options(model)

    def prompts(self, model: Mapping[str, Any]) -> PromptRenderer:
        return PromptRenderer(model["generation"]["prompt"], bool(model["generation"]["chat_template"]))

    def pass_workload(self, workload: Any, model: Mapping[str, Any]) -> PromptWorkload:
        return PromptWorkload(workload, model["generation"]["prompt"])  # prompts rendered, generated greedily


GENERATION = GenerationKind()
