"""The classification job: its kind object (:data:`CLASSIFICATION`) and everything it owns.

Reads and writes: its prediction file (``output.py``), streamed or written by its pass sink (``sink.py``). Its
verdict part: ``verdict.py``; how its results are shown: ``shown.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from iteralab.campaign.folder import COLUMNS
from iteralab.campaign.kinds.base import JobKind
from iteralab.campaign.kinds.classification import shown
from iteralab.campaign.kinds.classification.output import PROBABILITY_FILE
from iteralab.campaign.kinds.classification.sink import ProbabilitySink
from iteralab.campaign.kinds.classification.verdict import CLASSIFICATION_VERDICT


class ClassificationKind(JobKind):
    name = "classification"
    rerun_words = shown.RERUN_WORDS
    examples = shown.EXAMPLES
    output = PROBABILITY_FILE
    verdict = CLASSIFICATION_VERDICT
    table_columns = COLUMNS

    def sink(self, target: Path, classes: Sequence[str]) -> ProbabilitySink:
        return ProbabilitySink(target, classes)


CLASSIFICATION = ClassificationKind()
