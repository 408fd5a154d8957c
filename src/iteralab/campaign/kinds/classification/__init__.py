"""The classification job: its kind object (:data:`CLASSIFICATION`) and everything it owns.

Reads and writes: its prediction file (``output.py``), streamed or written by its pass sink (``sink.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from iteralab.campaign.kinds.base import JobKind
from iteralab.campaign.kinds.classification.sink import ProbabilitySink


class ClassificationKind(JobKind):
    name = "classification"

    def sink(self, target: Path, classes: Sequence[str]) -> ProbabilitySink:
        return ProbabilitySink(target, classes)


CLASSIFICATION = ClassificationKind()
