"""A Python-callable classifier that is slow on one text: a Ray pass then receives its blocks out of order."""

from __future__ import annotations

import os
import time

from fake_models import keyword_classifier


def slow_on_one_text(texts: list[str]) -> list[list[float]]:
    """``keyword_classifier`` that sleeps 1.5 s on the batch holding the text named by FAKE_MODEL_SLOW_TEXT."""
    if os.environ.get("FAKE_MODEL_SLOW_TEXT") in texts:
        time.sleep(1.5)
    return keyword_classifier(texts)
