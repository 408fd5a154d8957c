"""The scoring job (pairs of texts in, one score per pair out: a reranker): its kind object (:data:`SCORING`) and
everything it owns.

Reads and writes: its prediction file (``output.py``), streamed by its pass sink (``sink.py``, which also packs
each pair for the pass and unpacks it for the model). Its verdict part: ``verdict.py`` (the metric) and
``agreement.py`` (against the reference pass); how its results are shown: ``shown.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from iteralab.campaign.folder import COLUMNS, with_scores
from iteralab.campaign.kinds.base import JobKind
from iteralab.campaign.kinds.scoring import shown
from iteralab.campaign.kinds.scoring.output import SCORE_FILE
from iteralab.campaign.kinds.scoring.sink import (PairRenderer, PairWorkload, ScoreSink, scoring_options,
                                                 scoring_record)
from iteralab.campaign.kinds.scoring.verdict import SCORING_VERDICT
from iteralab.campaign.kinds.verdictpart import QualitySeries


class ScoringKind(JobKind):
    name = "scoring"
    rerun_words = shown.RERUN_WORDS
    examples = shown.EXAMPLES
    output = SCORE_FILE
    verdict = SCORING_VERDICT
    #: the score columns after ``max_abs_prob_diff``
    table_columns = with_scores(COLUMNS)
    #: each counted pass's minimum Kendall's tau within a group against the reference pass, and its largest
    #: score difference
    quality_series = (QualitySeries("min_kendall_taus", "min_kendall_tau"),
                      QualitySeries("max_abs_score_diffs", "max_abs_score_diff"))

    def sink(self, target: Path, classes: Sequence[str]) -> ScoreSink:
        return ScoreSink(target, classes)

    def model_record(self, protocol: Any, folder: Path | None) -> dict[str, Any]:
        return scoring_record(protocol, folder)

    def workload_options(self, model: Mapping[str, Any]) -> dict[str, Any]:
        return scoring_options(model)

    def prompts(self, model: Mapping[str, Any]) -> PairRenderer:
        return PairRenderer(model["scoring"]["pair_column"])

    def pass_workload(self, workload: Any, model: Mapping[str, Any]) -> PairWorkload:
        return PairWorkload(workload)  # each batch's packed pairs unpacked, tokenized together, scored


SCORING = ScoringKind()
