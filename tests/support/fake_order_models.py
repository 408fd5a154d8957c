"""A Python-callable classifier that holds one text back: a Ray pass then receives its blocks out of order."""

from __future__ import annotations

import os
import time
from pathlib import Path

from fake_models import keyword_classifier


def slow_on_one_text(texts: list[str]) -> list[list[float]]:
    """``keyword_classifier`` that holds the batch with the text named by FAKE_MODEL_SLOW_TEXT back until another
    batch has been answered (a file in FAKE_MODEL_SIGNAL_DIR says so; at most 30 s), so that batch's block is
    received first whatever the actors' start-up takes."""
    signal = Path(os.environ["FAKE_MODEL_SIGNAL_DIR"]) / "answered"
    if os.environ.get("FAKE_MODEL_SLOW_TEXT") in texts:
        deadline = time.monotonic() + 30
        while not signal.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the other block's answer is on its way to the driver
    else:
        signal.touch()
    return keyword_classifier(texts)
