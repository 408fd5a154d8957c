"""How an embedding job's results are shown: the rerun comparison's words for its vectors, and the wrong outputs the
report lists."""

from __future__ import annotations

from iteralab.campaign.kinds.base import OutputWords

#: The rerun comparison's columns and words.
RERUN_WORDS = OutputWords("min cosine", "max abs vector component diff", "same ids and vectors",
                           "every vector component within the protocol's declared bound", "min_cosine")
#: The report's examples: see :attr:`~iteralab.campaign.kinds.base.JobKind.examples`.
EXAMPLES = "vectors"
