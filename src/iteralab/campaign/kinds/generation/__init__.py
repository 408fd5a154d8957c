"""The generation job: its kind object (:data:`GENERATION`) and everything it owns.

Reads and writes: its prediction file (``output.py``). Its verdict part: ``verdict.py``.
"""

from __future__ import annotations

from iteralab.campaign.kinds.base import JobKind
from iteralab.campaign.kinds.generation.verdict import GENERATION_VERDICT


class GenerationKind(JobKind):
    name = "generation"
    verdict = GENERATION_VERDICT


GENERATION = GenerationKind()
