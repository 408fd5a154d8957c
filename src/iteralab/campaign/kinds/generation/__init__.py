"""The generation job: its kind object (:data:`GENERATION`) and everything it owns.

Reads and writes: its prediction file (``output.py``).
"""

from __future__ import annotations

from iteralab.campaign.kinds.base import JobKind


class GenerationKind(JobKind):
    name = "generation"


GENERATION = GenerationKind()
