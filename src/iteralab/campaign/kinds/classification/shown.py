"""How a classification job's results are shown: the rerun comparison's words for its probability tables, and the wrong
outputs the report lists."""

from __future__ import annotations

from iteralab.campaign.kinds.base import OutputWords

#: The rerun comparison's columns and words.
RERUN_WORDS = OutputWords("label agreement (min)", "max abs prob diff", "same ids, labels and probabilities",
                           "every probability within the protocol's declared bound", "min_label_agreement")
#: The report's examples: see :attr:`~iteralab.campaign.kinds.base.JobKind.examples`.
EXAMPLES = "labels"
