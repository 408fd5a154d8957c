"""The classification job: its kind object (:data:`CLASSIFICATION`) and everything it owns.

Reads and writes: its prediction file (``output.py``).
"""

from __future__ import annotations

from iteralab.campaign.kinds.base import JobKind


class ClassificationKind(JobKind):
    name = "classification"


CLASSIFICATION = ClassificationKind()
