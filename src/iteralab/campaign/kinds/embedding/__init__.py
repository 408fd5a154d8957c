"""The embedding job: its kind object (:data:`EMBEDDING`) and everything it owns.

Reads and writes: its prediction file (``output.py``).
"""

from __future__ import annotations

from iteralab.campaign.kinds.base import JobKind


class EmbeddingKind(JobKind):
    name = "embedding"


EMBEDDING = EmbeddingKind()
