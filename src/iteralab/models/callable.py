"""A Python function as the model under test (``kind = "callable"``): it owns its model, device and
precision; the harness checks what it returns."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import sys

import numpy as np

from iteralab.common.files import folder_hashes, sha256_file
from iteralab.errors import WorkloadError
from iteralab.models.base import Workload, text_list
from iteralab.models.device import HOST
from iteralab.models.lazy import torch


# ----------------------------------------------------------------------------------------- callable


def _import_callable(ref: str) -> tuple[Callable[[list[str]], Any], str | None]:
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise WorkloadError(f"callable: {ref!r} is not of the form 'package.module:function'")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise WorkloadError(f"callable: cannot import module {module_name!r}: {exc}",
                            hint="install the package or add its folder to PYTHONPATH") from exc
    source = getattr(target, "__file__", None)
    for part in attr.split("."):
        if not hasattr(target, part):
            raise WorkloadError(f"callable: {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise WorkloadError(f"callable: {ref!r} is not callable")
    return target, source


def check_callable_settings(callable_ref: str | None, precision: str, compile: bool) -> str:
    """The callable's reference, refused in one line when absent or when the protocol asks the harness for a precision
    or a compilation it cannot apply (the callable owns its model): one rule for every kind of job."""
    if callable_ref is None:
        raise WorkloadError("callable: required for kind 'callable' ('package.module:function')")
    if precision != "fp32" or compile:
        raise WorkloadError(f"precision/compile: {precision!r}/{compile} cannot be applied to a callable",
                            hint="the callable owns its model; declare precision 'fp32' and compile false")
    return callable_ref


class CallableWorkload(Workload):
    """A Python function ``list[str] -> probabilities [n, C] | list of labels`` (labels become one-hot).

    The function owns its model, device and precision; the encoded batch simply carries the texts. An
    optional tokenizer folder (``path``) gives token counts for length strata.
    """

    kind = "callable"

    def __init__(self, ref: str, classes: Sequence[str], tokenizer_folder: Path | None = None) -> None:
        self.ref = ref
        self.fn, source = _import_callable(ref)
        self.source = Path(source) if source else None
        self.classes = tuple(str(c) for c in classes)
        if len(self.classes) < 1 or len(set(self.classes)) != len(self.classes):
            raise WorkloadError(f"classes: {list(classes)} must be distinct names")
        self.device = HOST  # the callable owns its device; the harness runs on the host, without torch
        self.tokenizer_folder = tokenizer_folder
        self.tokenizer = None
        if tokenizer_folder is not None:
            from transformers import AutoTokenizer

            try:
                self.tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_folder), local_files_only=True)
            except (OSError, ValueError) as exc:
                raise WorkloadError(f"path: cannot load a tokenizer from {tokenizer_folder}") from exc

    def tokenize(self, texts: Sequence[str]) -> dict[str, Any]:
        return {"texts": text_list(texts)}

    def to_device(self, encoded: Mapping[str, Any]) -> Mapping[str, Any]:
        return encoded

    def forward_device(self, encoded_on_device: Mapping[str, Any]) -> torch.Tensor:
        return torch.from_numpy(self._call(list(encoded_on_device["texts"])))

    def infer(self, encoded: Mapping[str, Any]) -> np.ndarray:
        return self._call(list(encoded["texts"]))

    def _call(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, len(self.classes)), dtype=np.float32)
        return self.check_output(self.fn(texts), len(texts))

    def check_output(self, out: Any, n: int) -> np.ndarray:
        """Validate what the callable returned; return float32 probabilities [n, C]."""
        ref, width = self.ref, len(self.classes)
        if out is None:
            raise WorkloadError(f"callable: {ref} returned None, expected probability rows [{n}, {width}] "
                                f"or {n} labels")
        loaded = sys.modules.get("torch")  # a tensor can only come from a torch the callable imported
        if loaded is not None and isinstance(out, loaded.Tensor):
            out = out.detach().float().cpu().numpy()
        if isinstance(out, np.ndarray) and out.dtype.kind in "USO":
            out = out.tolist()
        if isinstance(out, (list, tuple)) and out and all(isinstance(x, str) for x in out):
            if len(out) != n:
                raise WorkloadError(f"callable: {ref} returned {len(out)} labels for {n} texts")
            unknown = list(dict.fromkeys(x for x in out if x not in self.classes))  # as first returned
            if unknown:
                raise WorkloadError(f"callable: {ref} returned unknown labels {unknown[:5]}",
                                    hint=f"labels must be among {list(self.classes)}")
            probs = np.zeros((n, width), dtype=np.float32)
            probs[np.arange(n), [self.classes.index(x) for x in out]] = 1.0
            return probs
        try:
            arr = np.asarray(out, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise WorkloadError(f"callable: {ref} returned {type(out).__name__}, expected probability rows "
                                f"[{n}, {width}] or {n} labels") from exc
        if arr.shape != (n, width):
            raise WorkloadError(f"callable: {ref} returned shape {list(arr.shape)}, expected probability rows "
                                f"[{n}, {width}] or a list of {n} labels")
        if not np.all(np.isfinite(arr)) or arr.min() < -1e-6:
            raise WorkloadError(f"callable: {ref} returned non-finite or negative probabilities")
        sums = arr.sum(axis=1)
        if np.max(np.abs(sums - 1.0)) > 1e-3:
            raise WorkloadError(f"callable: {ref} returned rows that do not sum to 1 (e.g. {sums[0]:.4f})",
                                hint="return softmax probabilities, or labels")
        return arr.astype(np.float32)

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        if self.tokenizer is None:
            raise WorkloadError("path: a callable workload has no tokenizer for token counts",
                                hint="give path = the folder of the tokenizer the callable uses")
        items = text_list(texts)
        if not items:
            return []
        return [len(r) for r in self.tokenizer(items, add_special_tokens=True, truncation=False)["input_ids"]]

    def file_hashes(self) -> dict[str, str]:
        hashes = {}
        if self.source is not None and self.source.is_file():
            hashes[f"callable/{self.source.name}"] = sha256_file(self.source)
        if self.tokenizer_folder is not None:
            hashes.update(folder_hashes(self.tokenizer_folder, prefix="tokenizer/"))
        return hashes

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "model_path": None, "model_class": None, "model_type": None,
            "classes": list(self.classes), "precision": None, "param_dtypes": None, "quantization": None,
            "compile": {"enabled": False}, "attn_implementation": None, "padding": None, "max_length": None,
            "truncation": None, "device": None, "parameter_count": None, "trust_remote_code": False,
            "hub_revision": None, "tokenizer_class": type(self.tokenizer).__name__ if self.tokenizer else None,
            "head": None, "callable": self.ref,
            "notes": ["the callable chooses its own model, device and precision; none is controlled here"],
        }
