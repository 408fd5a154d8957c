"""The embedding job: its kind object (:data:`EMBEDDING`) and everything it owns.

Reads and writes: its prediction file (``output.py``); how its results are shown (``shown.py``).
"""

from __future__ import annotations

from iteralab.campaign.kinds.base import JobKind
from iteralab.campaign.kinds.embedding import shown
from iteralab.campaign.kinds.embedding.output import VECTOR_FILE


class EmbeddingKind(JobKind):
    name = "embedding"
    rerun_words = shown.RERUN_WORDS
    examples = shown.EXAMPLES
    output = VECTOR_FILE


EMBEDDING = EmbeddingKind()
