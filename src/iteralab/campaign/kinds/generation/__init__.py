"""The generation job: its kind object (:data:`GENERATION`) and everything it owns.

Reads and writes: its prediction file (``output.py``); how its results are shown (``shown.py``).
"""

from __future__ import annotations

from iteralab.campaign.kinds.base import JobKind
from iteralab.campaign.kinds.generation import shown
from iteralab.campaign.kinds.generation.output import TEXT_FILE


class GenerationKind(JobKind):
    name = "generation"
    rerun_words = shown.RERUN_WORDS
    examples = shown.EXAMPLES
    kv_cache = True  # a generator's attention keeps keys and values of every position of the prompt and text
    output = TEXT_FILE


GENERATION = GenerationKind()
