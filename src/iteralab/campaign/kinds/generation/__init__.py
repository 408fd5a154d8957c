"""The generation job: its kind object (:data:`GENERATION`) and everything it owns.

Reads and writes: its prediction file (``output.py``), streamed or written by its pass sink (``sink.py``). Its
verdict part: ``verdict.py``; how its results are shown: ``shown.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from iteralab.campaign.folder import COLUMNS, with_generation
from iteralab.campaign.kinds.base import JobKind
from iteralab.campaign.kinds.generation import shown
from iteralab.campaign.kinds.generation.output import TEXT_FILE
from iteralab.campaign.kinds.generation.sink import (PromptRenderer, PromptWorkload, TextSink,
                                                    generation_options, generation_record)
from iteralab.campaign.kinds.generation.verdict import GENERATION_VERDICT
from iteralab.campaign.kinds.verdictpart import QualitySeries


class GenerationKind(JobKind):
    name = "generation"
    rerun_words = shown.RERUN_WORDS
    examples = shown.EXAMPLES
    kv_cache = True  # a generator's attention keeps keys and values of every position of the prompt and text
    output = TEXT_FILE
    verdict = GENERATION_VERDICT
    #: tokens per second after ``docs_per_s``; mean tokens, length share, identical share after ``max_abs_prob_diff``
    table_columns = with_generation(COLUMNS)
    #: each counted pass's mean generated tokens, share ended on ``length`` and share of texts identical to the
    #: reference pass's (the measured ones)
    quality_series = (QualitySeries("mean_tokens", "mean_tokens"), QualitySeries("length_shares", "length_share"),
                      QualitySeries("identical_shares", "identical_share"))

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
