"""Scoring models (``[task] kind = "scoring"``): a Hugging Face sequence-classification folder read as a
cross-encoder (``hf_cross_encoder``, :mod:`iteralab.models.crossencoder`), or a Python callable returning one float per pair. Each takes a batch of
pairs (``tokenize_pairs(firsts, seconds)``) and ``infer`` gives one float32 score per pair on the host, as a
classifier's gives probabilities; the harness (batching, precision, bucketing, compile, device, timing) is the
same."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from iteralab.errors import WorkloadError
from iteralab.models.base import text_list
from iteralab.models.callable import CallableWorkload, check_callable_settings
from iteralab.models.pairs import count_pair_tokens


def pair_lists(firsts: Sequence[str], seconds: Sequence[str]) -> tuple[list[str], list[str]]:
    a, b = text_list(firsts), text_list(seconds)
    if len(a) != len(b):
        raise WorkloadError(f"pairs: {len(a)} first texts, {len(b)} second texts")
    return a, b


class CallableScorer(CallableWorkload):
    """A Python function ``(texts: list[str], text_pairs: list[str]) -> n floats`` (a list, an array ``[n]`` or
    ``[n, 1]``, a tensor). The function owns its model, device and precision; the prediction file's checks hold
    its scores (finite float32)."""

    kind = "callable"

    def __init__(self, ref: str, tokenizer_folder: Path | None = None) -> None:
        super().__init__(ref, ("score",), tokenizer_folder)
        self.classes = ()

    def tokenize_pairs(self, firsts: Sequence[str], seconds: Sequence[str]) -> dict[str, Any]:
        a, b = pair_lists(firsts, seconds)
        return {"texts": a, "pairs": b}

    def infer(self, encoded: Mapping[str, Any]) -> np.ndarray:
        texts, pairs = list(encoded["texts"]), list(encoded["pairs"])
        if not texts:
            return np.zeros(0, dtype=np.float32)
        return self.check_output(self.fn(texts, pairs), len(texts))

    def check_output(self, out: Any, n: int) -> np.ndarray:
        """Validate what the callable returned; return float32 scores ``[n]``."""
        loaded = sys.modules.get("torch")
        if loaded is not None and isinstance(out, loaded.Tensor):
            out = out.detach().float().cpu().numpy()
        try:
            arr = np.asarray(out, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise WorkloadError(f"callable: {self.ref} returned {type(out).__name__}, expected {n} scores") from exc
        if arr.ndim == 2 and arr.shape[1] == 1:
            arr = arr[:, 0]
        if arr.shape != (n,):
            raise WorkloadError(f"callable: {self.ref} returned shape {list(arr.shape)}, expected {n} scores "
                                "(one float per pair)")
        return arr

    def pair_token_lengths(self, firsts: Sequence[str], seconds: Sequence[str]) -> list[int]:
        if self.tokenizer is None:
            raise WorkloadError("path: a callable workload has no tokenizer for token counts",
                                hint="give path = the folder of the tokenizer the callable uses")
        return count_pair_tokens(self.tokenizer, *pair_lists(firsts, seconds))

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info["classes"] = []
        return info


def load_callable_scorer(callable_ref: str | None, path: str | Path | None, precision: str,
                         compile: bool) -> CallableScorer:
    """A callable scorer; the harness applies no precision or compilation to it."""
    callable_ref = check_callable_settings(callable_ref, precision, compile)
    return CallableScorer(callable_ref, Path(path) if path is not None else None)
