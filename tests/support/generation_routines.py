"""Evaluation routines for a generation job's tests (``[metric] routine`` on texts)."""

from __future__ import annotations

import numpy as np


def last_word_match(*, ids: list[str], outputs: np.ndarray, references: np.ndarray | None) -> float:
    """The share of outputs whose words include the reference answer; refuses anything but the documented
    arguments (ids, a str array of texts, a str array of references, all of one length)."""
    if references is None or outputs.dtype.kind != "U" or references.dtype.kind != "U":
        raise TypeError(f"unexpected arguments: {outputs.dtype}, {None if references is None else references.dtype}")
    if not (len(ids) == len(outputs) == len(references)):
        raise ValueError("ids, outputs and references differ in length")
    return float(np.mean([ref in out.split() for out, ref in zip(outputs.tolist(), references.tolist())]))


def nan_score(*, ids: list[str], outputs: np.ndarray, references: np.ndarray | None) -> float:
    """Not a number, whatever the texts: no pass can be accepted."""
    return float("nan")
