"""How a generation job's results are shown: the rerun comparison's words for its texts, and the wrong outputs the
report lists."""

from __future__ import annotations

from iteralab.campaign.kinds.base import OutputWords

#: The rerun comparison's columns and words.
RERUN_WORDS = OutputWords("identical texts (min share)", "—", "same ids and texts",
                           "not applicable to texts (a text is identical or not)", "min_label_agreement")
#: The report's examples: see :attr:`~iteralab.campaign.kinds.base.JobKind.examples`.
EXAMPLES = "texts"
