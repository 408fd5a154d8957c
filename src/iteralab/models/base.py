"""The model under test (X5): a Hugging Face classifier, an encoder + trained linear head, or a Python callable
(and, for generation jobs, a causal LM or an encoder-decoder: :mod:`iteralab.models.generation`).

Every workload offers the same small interface (:class:`Workload`): ``tokenize`` → ``infer`` gives float32
probabilities ``[n, n_classes]`` on the host, ``describe`` and ``file_hashes`` feed the manifest (C3).

Rules kept here:
- Models come from a local folder only (``local_files_only=True``); nothing is downloaded.
- Weights are read from safetensors only; no pickle, no ``torch.load``. A folder without safetensors is refused.
- ``trust_remote_code`` is False unless the caller sets it.
- Precision: ``fp32``; ``bf16`` (CPU and GPUs that support it); ``fp16`` on GPU only — on CPU it is refused
  because most hosts emulate half-precision matmul, so its time says nothing about a rental; use ``bf16``
  there; ``int8-dynamic`` (dynamic int8 of every ``nn.Linear`` via ``torch.ao.quantization.quantize_dynamic``)
  on CPU only — PyTorch's dynamic int8 kernels are CPU kernels (fbgemm/x86/qnnpack).
- ``compile=True`` wraps the forward in ``torch.compile``; compilation happens at the first call, which the
  caller makes as a separate, timed warm-up (``warmup``).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from iteralab.models.lazy import torch  # imported on first use: a callable workload never loads it
from iteralab.errors import WorkloadError
from iteralab.kit.memoire import PRECISIONS, precision_refusal
from iteralab.common.files import PICKLE_SUFFIXES

KINDS = ("hf_classifier", "encoder_head", "callable", "encoder", "hf_causal_lm", "hf_seq2seq", "hf_cross_encoder")
PADDINGS = ("longest", "max_length")
HEAD_FORMAT = "iteralab-linear-head"
POOLING = "mean over real tokens (attention-mask weighted, padding excluded), float32"

class _Dtypes(dict):
    """precision -> torch dtype, resolved when read (so importing this module does not import torch)."""

    def __getitem__(self, precision: str) -> Any:
        return getattr(torch, dict.__getitem__(self, precision))


DTYPES = _Dtypes({"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "int8-dynamic": "float32"})
_REVISION = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class Settings:
    """How a text model is run; recorded verbatim in ``describe()``."""

    precision: str = "fp32"
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    max_length: int = 256
    truncation: bool = True
    padding: str = "longest"
    compile: bool = False
    trust_remote_code: bool = False


class Workload(ABC):
    """Common interface of every model under test. ``encoded`` batches are host-side mappings of tensors."""

    kind: str
    classes: tuple[str, ...]
    device: torch.device

    @abstractmethod
    def tokenize(self, texts: Sequence[str]) -> Mapping[str, Any]:
        """Host tensors for one batch, padded/truncated by the declared policy."""

    @abstractmethod
    def to_device(self, encoded: Mapping[str, Any]) -> Mapping[str, Any]:
        """The batch on the workload's device (non-blocking copies on GPU)."""

    @abstractmethod
    def forward_device(self, encoded_on_device: Mapping[str, Any]) -> torch.Tensor:
        """Forward + softmax on the device, no transfer: float32 probabilities [n, C] left on the device."""

    @abstractmethod
    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        """Tokenizer counts including special tokens, without truncation (C2 length strata)."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """JSON-ready facts for the manifest (C3)."""

    @abstractmethod
    def file_hashes(self) -> dict[str, str]:
        """sha256 of every file the workload reads, recomputed at each call (relative name → hex)."""

    def infer(self, encoded: Mapping[str, Any]) -> np.ndarray:
        """Probabilities [n, C] as float32 on the host (the copy back waits for the device)."""
        with torch.inference_mode():
            probs = self.forward_device(self.to_device(encoded))
            return probs.float().cpu().numpy()

    def predict(self, texts: Sequence[str]) -> np.ndarray:
        texts = text_list(texts)
        if not texts:
            return np.zeros((0, len(self.classes)), dtype=np.float32)
        return self.infer(self.tokenize(texts))

    def warmup(self, texts: Sequence[str]) -> None:
        """Run one batch so compilation and lazy initialisation happen here, in a call the caller times as
        warm-up/compilation, never inside a measured pass."""
        self.predict(texts)


# ----------------------------------------------------------------------------------------- helpers


def text_list(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise WorkloadError("texts: expected a sequence of strings, got one string",
                            hint="wrap a single text in a list")
    items = list(texts)
    if set(map(type, items)) <= {str}:
        return items
    for i, text in enumerate(items):
        if not isinstance(text, str):
            raise WorkloadError(f"texts[{i}]: expected a string, got {type(text).__name__}")
    return items


def model_folder(path: str | Path | None, kind: str) -> Path:
    if path is None:
        raise WorkloadError(f"path: a local model folder is required for kind {kind!r}")
    folder = Path(path)
    if not folder.is_dir():
        raise WorkloadError(f"path: model folder {folder} does not exist",
                            hint="give a local folder; hub ids are never downloaded")
    if not any(folder.glob("*.safetensors")):
        pickles = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
        found = f" (found {', '.join(pickles)}: pickled weights are refused)" if pickles else ""
        raise WorkloadError(f"path: {folder} has no safetensors weights{found}",
                            hint="save the model with save_pretrained(..., safe_serialization=True)")
    return folder


def hub_revision(folder: Path) -> str | None:
    """The hub commit a folder came from: an HF cache ``snapshots/<sha>`` folder, or the metadata that
    ``huggingface-cli download --local-dir`` leaves under ``.cache/huggingface/download``. None otherwise."""
    resolved = folder.resolve()
    if resolved.parent.name == "snapshots" and _REVISION.fullmatch(resolved.name):
        return resolved.name
    meta = folder / ".cache" / "huggingface" / "download"
    revisions = set()
    if meta.is_dir():
        for item in meta.rglob("*.metadata"):
            first = item.read_text(encoding="utf-8", errors="replace").split("\n", 1)[0].strip()
            if _REVISION.fullmatch(first):
                revisions.add(first)
    return ",".join(sorted(revisions)) or None


def check_settings(settings: Settings) -> None:
    precision, device = settings.precision, settings.device
    if precision not in PRECISIONS:
        raise WorkloadError(f"precision: {precision!r} is not one of {', '.join(PRECISIONS)}")
    if settings.padding not in PADDINGS:
        raise WorkloadError(f"padding: {settings.padding!r} is not one of {', '.join(PADDINGS)}")
    if isinstance(settings.max_length, bool) or not isinstance(settings.max_length, int) or settings.max_length < 2:
        raise WorkloadError(f"max_length: {settings.max_length!r} must be an integer ≥ 2")
    if settings.padding == "max_length" and not settings.truncation:
        raise WorkloadError("padding: 'max_length' needs truncation enabled (longer texts cannot be padded to it)",
                            hint="set truncation = true, or use padding = 'longest'")
    refused = precision_refusal(precision, str(device))
    if refused is not None:
        raise WorkloadError(f"precision: {refused[0]}", hint=refused[1])
