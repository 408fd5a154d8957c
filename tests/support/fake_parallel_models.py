"""Python-callable workloads for the data-parallel tests: they fail, die or record their environment in a worker."""

from __future__ import annotations

import os
from pathlib import Path

from fake_models import keyword_classifier


class OutOfMemoryError(RuntimeError):
    """Named like torch's allocator error, so the pass records it as an out-of-memory failure."""


def failing_classifier(texts: list[str]) -> list[list[float]]:
    """Fails like a card running out of memory on the batch that holds the text 'boom'."""
    if any("boom" in t for t in texts):
        raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")
    return keyword_classifier(texts)


def dying_classifier(texts: list[str]) -> list[list[float]]:
    """The worker process vanishes (as if the kernel killed it) on the batch that holds the text 'crash'."""
    if any("crash" in t for t in texts):
        os._exit(9)
    return keyword_classifier(texts)


def env_recording_classifier(texts: list[str]) -> list[list[float]]:
    """Notes which card(s) and threads its process was given, one line per call, in $DP_ENV_DIR/<pid>."""
    folder = Path(os.environ["DP_ENV_DIR"])
    with open(folder / str(os.getpid()), "a", encoding="utf-8") as fh:
        fh.write(f"{os.environ.get('CUDA_VISIBLE_DEVICES')}\t{os.environ.get('OMP_NUM_THREADS')}\t{len(texts)}\n")
    return keyword_classifier(texts)
