"""Embedding models (``[task] kind = "embedding"``): an encoder folder pooled as declared, or a Python callable
that returns one vector per text. ``infer`` gives float32 vectors ``[n, d]`` on the host, as a classifier's gives
probabilities; the harness (batching, precision, bucketing, compile, device, timing) is the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sys

import numpy as np

from iteralab.errors import WorkloadError
from iteralab.models.callable import CallableWorkload, check_callable_settings

class CallableEmbedding(CallableWorkload):
    """A Python function ``list[str] -> [n, d]`` floats (an array, a tensor or nested lists). The function owns
    its model, device, precision and normalisation; the prediction file's checks hold it to the protocol's."""

    kind = "callable"

    def __init__(self, ref: str, tokenizer_folder: Path | None = None) -> None:
        super().__init__(ref, ("vector",), tokenizer_folder)
        self.classes = ()
        self.dim: int | None = None

    def _call(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        return self.check_output(self.fn(texts), len(texts))

    def check_output(self, out: Any, n: int) -> np.ndarray:
        """Validate what the callable returned; return float32 vectors [n, d], d the same for every call."""
        loaded = sys.modules.get("torch")
        if loaded is not None and isinstance(out, loaded.Tensor):
            out = out.detach().float().cpu().numpy()
        try:
            arr = np.asarray(out, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise WorkloadError(f"callable: {self.ref} returned {type(out).__name__}, expected vectors [{n}, d]") \
                from exc
        if arr.ndim != 2 or arr.shape[0] != n or arr.shape[1] < 1:
            raise WorkloadError(f"callable: {self.ref} returned shape {list(arr.shape)}, expected vectors [{n}, d]")
        if self.dim is not None and arr.shape[1] != self.dim:
            raise WorkloadError(f"callable: {self.ref} returned {arr.shape[1]}-dim vectors after {self.dim}-dim ones")
        self.dim = arr.shape[1]
        return arr

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info["classes"] = []
        info["embedding"] = {"pooling": None, "dim": self.dim}
        return info


def load_callable_embedding(callable_ref: str | None, path: str | Path | None, precision: str,
                            compile: bool) -> CallableEmbedding:
    """A callable embedding model; the harness applies no precision or compilation to it."""
    callable_ref = check_callable_settings(callable_ref, precision, compile)
    return CallableEmbedding(callable_ref, Path(path) if path is not None else None)
