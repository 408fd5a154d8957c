"""The embedding job: its kind object (:data:`EMBEDDING`) and everything it owns.

Reads and writes: its prediction file (``output.py``). Its verdict part: ``verdict.py``.
"""

from __future__ import annotations

from iteralab.campaign.kinds.base import JobKind
from iteralab.campaign.kinds.embedding.verdict import EMBEDDING_VERDICT


class EmbeddingKind(JobKind):
    name = "embedding"
    verdict = EMBEDDING_VERDICT


EMBEDDING = EmbeddingKind()
