"""How a scoring job's results are shown: the rerun comparison's words for its scores, and the wrong outputs the
report lists."""

from __future__ import annotations

from iteralab.campaign.kinds.base import OutputWords

#: The rerun comparison's columns and words.
RERUN_WORDS = OutputWords("largest score difference", "—", "same ids and scores",
                           "scores within reproduction.bound", "max_abs_prob_diff")
#: The report's examples: see :attr:`~iteralab.campaign.kinds.base.JobKind.examples`.
EXAMPLES = "scores"
