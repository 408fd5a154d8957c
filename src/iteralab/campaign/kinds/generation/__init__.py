"""The generation job: its kind object (:data:`GENERATION`) and everything it owns.

Reads and writes: its prediction file (``output.py``).
"""

from __future__ import annotations

from iteralab.campaign.kinds.base import JobKind
from iteralab.campaign.kinds.generation.output import TEXT_FILE


class GenerationKind(JobKind):
    name = "generation"
    output = TEXT_FILE


GENERATION = GenerationKind()
