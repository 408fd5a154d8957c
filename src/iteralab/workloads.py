"""The model under test (X5): a Hugging Face classifier, an encoder + trained linear head, or a Python callable.

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

import importlib
import json
import re
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from iteralab.device import resolve_device
from iteralab.errors import WorkloadError
from iteralab.fsutil import sha256_file, write_bytes_atomic

KINDS = ("hf_classifier", "encoder_head", "callable")
PRECISIONS = ("fp32", "bf16", "fp16", "int8-dynamic")
PADDINGS = ("longest", "max_length")
HEAD_FORMAT = "iteralab-linear-head"
POOLING = "mean over real tokens (attention-mask weighted, padding excluded), float32"

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "int8-dynamic": torch.float32}
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
# Files never read by a workload: documentation, other frameworks' weights. Everything else is hashed.
_UNUSED_SUFFIXES = (".md", ".png", ".jpg", ".jpeg", ".gif", ".h5", ".msgpack", ".onnx", ".ot") + _PICKLE_SUFFIXES
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
        texts = _text_list(texts)
        if not texts:
            return np.zeros((0, len(self.classes)), dtype=np.float32)
        return self.infer(self.tokenize(texts))

    def warmup(self, texts: Sequence[str]) -> None:
        """Run one batch so compilation and lazy initialisation happen here, in a call the caller times as
        warm-up/compilation, never inside a measured pass."""
        self.predict(texts)


# ----------------------------------------------------------------------------------------- helpers


def _text_list(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise WorkloadError("texts: expected a sequence of strings, got one string",
                            hint="wrap a single text in a list")
    items = list(texts)
    for i, text in enumerate(items):
        if not isinstance(text, str):
            raise WorkloadError(f"texts[{i}]: expected a string, got {type(text).__name__}")
    return items


def _model_folder(path: str | Path | None, kind: str) -> Path:
    if path is None:
        raise WorkloadError(f"path: a local model folder is required for kind {kind!r}")
    folder = Path(path)
    if not folder.is_dir():
        raise WorkloadError(f"path: model folder {folder} does not exist",
                            hint="give a local folder; hub ids are never downloaded")
    if not any(folder.glob("*.safetensors")):
        pickles = sorted(p.name for p in folder.iterdir() if p.suffix in _PICKLE_SUFFIXES)
        found = f" (found {', '.join(pickles)}: pickled weights are refused)" if pickles else ""
        raise WorkloadError(f"path: {folder} has no safetensors weights{found}",
                            hint="save the model with save_pretrained(..., safe_serialization=True)")
    return folder


def folder_hashes(folder: Path, prefix: str = "") -> dict[str, str]:
    """sha256 of the top-level files a model folder contributes (weights, config, tokenizer, code)."""
    hashes = {}
    for item in sorted(folder.iterdir()):
        name = item.name
        if not item.is_file() or name.startswith(".") or name.upper().startswith(("README", "LICENSE")):
            continue
        if item.suffix.lower() in _UNUSED_SUFFIXES:
            continue
        hashes[prefix + name] = sha256_file(item)
    return hashes


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


def _check_settings(settings: Settings) -> None:
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
    if precision == "fp16" and device.type == "cpu":
        raise WorkloadError("precision: fp16 is refused on CPU (half-precision matmul is emulated on most hosts, "
                            "so its time means nothing for a GPU rental)", hint="use bf16 or fp32 on CPU")
    if precision == "int8-dynamic" and device.type != "cpu":
        raise WorkloadError(f"precision: int8-dynamic runs on CPU only, not on {device}",
                            hint="dynamic int8 kernels in PyTorch are CPU kernels; use fp16/bf16 on a GPU")
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise WorkloadError(f"precision: bf16 is not supported by {torch.cuda.get_device_name(device)}",
                            hint="use fp16 or fp32 on this GPU")


def _quantize_dynamic(module: torch.nn.Module) -> tuple[torch.nn.Module, dict[str, Any]]:
    """Dynamic int8 of every nn.Linear; the warnings PyTorch emits (deprecations) are recorded, not hidden."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quantized = torch.ao.quantization.quantize_dynamic(module, {torch.nn.Linear}, dtype=torch.qint8)
    layers = sum(1 for m in quantized.modules() if type(m).__module__.startswith("torch.ao.nn.quantized.dynamic"))
    info = {
        "method": "torch.ao.quantization.quantize_dynamic",
        "dtype": "qint8",
        "modules": "torch.nn.Linear",
        "quantized_layers": layers,
        "engine": torch.backends.quantized.engine,
        "torch_warnings": sorted({str(w.message).strip().splitlines()[0] for w in caught}),
    }
    return quantized, info


def quiet_transformers() -> None:
    """Loading reports and progress bars would interleave with the campaign's own progress display; what
    the loader found (missing or mismatched keys) is checked below and refused when it matters."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def _load_pretrained(auto_cls: Any, folder: Path, settings: Settings, allowed_missing: tuple[str, ...] = ()
                     ) -> tuple[torch.nn.Module, list[str]]:
    quiet_transformers()
    try:
        model, info = auto_cls.from_pretrained(
            str(folder), local_files_only=True, use_safetensors=True, trust_remote_code=settings.trust_remote_code,
            dtype=_DTYPES[settings.precision], output_loading_info=True)
    except (OSError, ValueError, KeyError, ImportError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = ("the folder asks for custom code; set trust_remote_code = true only if you trust it"
                if "trust_remote_code" in str(exc) else "check the folder holds a Hugging Face model")
        raise WorkloadError(f"path: cannot load {auto_cls.__name__} from {folder}: {first}", hint=hint) from exc
    missing = sorted(k for k in info.get("missing_keys", ()) if not k.startswith(allowed_missing))
    mismatched = sorted(str(k) for k in info.get("mismatched_keys", ()))
    if missing or mismatched:
        raise WorkloadError(f"path: {folder} lacks trained weights for {', '.join((missing + mismatched)[:4])}"
                            f"{' …' if len(missing) + len(mismatched) > 4 else ''} (they would be random)",
                            hint="use a folder saved from the trained model")
    ignored = sorted(k for k in info.get("missing_keys", ()) if k.startswith(allowed_missing))
    return model, ignored


# ----------------------------------------------------------------------------------------- HF models


class _HFText(Workload):
    """Shared tokenizer/model handling for the two Hugging Face kinds."""

    def __init__(self, folder: Path, settings: Settings, model: torch.nn.Module, notes: list[str]) -> None:
        from transformers import AutoTokenizer

        _check_settings(settings)
        self.folder = folder
        self.settings = settings
        self.device = settings.device
        self.notes = list(notes)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(
                str(folder), local_files_only=True, trust_remote_code=settings.trust_remote_code)
        except (OSError, ValueError, KeyError, ImportError) as exc:
            raise WorkloadError(f"path: cannot load the tokenizer from {folder}: {str(exc).splitlines()[0]}",
                                hint="the folder must hold the tokenizer files saved with the model") from exc
        config = model.config
        limits = [getattr(config, "max_position_embeddings", None), getattr(self.tokenizer, "model_max_length", None)]
        limits = [int(v) for v in limits if isinstance(v, int) and 0 < v < 1_000_000]
        self.position_limit = min(limits) if limits else None
        if self.position_limit is not None and settings.max_length > self.position_limit:
            raise WorkloadError(f"max_length: {settings.max_length} exceeds the model's {self.position_limit} "
                                "positions", hint=f"use max_length ≤ {self.position_limit}")
        self.parameter_count = int(sum(p.numel() for p in model.parameters()))
        self.quantization: dict[str, Any] | None = None
        if settings.precision == "int8-dynamic":
            model, self.quantization = _quantize_dynamic(model)
        self.model = model.to(settings.device).eval()
        self.attn_implementation = getattr(config, "_attn_implementation", None)
        self._forward: Callable[..., Any] = self.model
        if settings.compile:
            self._forward = torch.compile(self.model)
            if settings.padding == "longest":
                self.notes.append("compile with padding='longest': new batch shapes may recompile inside a "
                                  "measured pass; padding='max_length' keeps one shape")

    def tokenize(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        items = _text_list(texts)
        if not items:
            raise WorkloadError("texts: empty batch")
        s = self.settings
        cap = s.max_length if (s.truncation or s.padding == "max_length") else None
        encoded = self.tokenizer(items, padding=s.padding, truncation=s.truncation, max_length=cap,
                                 return_tensors="pt")
        width = encoded["input_ids"].shape[1]
        if self.position_limit is not None and width > self.position_limit:
            raise WorkloadError(f"texts: a text has {width} tokens, more than the model's {self.position_limit} "
                                "positions, and truncation is off", hint="enable truncation or shorten the texts")
        return dict(encoded.items())

    def to_device(self, encoded: Mapping[str, Any]) -> dict[str, Any]:
        non_blocking = self.device.type == "cuda"
        return {k: v.to(self.device, non_blocking=non_blocking) for k, v in encoded.items()}

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        items = _text_list(texts)
        if not items:
            return []
        ids = self.tokenizer(items, add_special_tokens=True, truncation=False, padding=False,
                             return_attention_mask=False, return_token_type_ids=False)["input_ids"]
        return [len(row) for row in ids]

    def file_hashes(self) -> dict[str, str]:
        return folder_hashes(self.folder)

    def describe(self) -> dict[str, Any]:
        s = self.settings
        return {
            "kind": self.kind,
            "model_path": str(self.folder.resolve()),
            "model_class": type(self.model).__name__,
            "model_type": getattr(self.model.config, "model_type", None),
            "classes": list(self.classes),
            "precision": s.precision,
            "param_dtypes": sorted({str(p.dtype).replace("torch.", "") for p in self.model.parameters()}),
            "quantization": self.quantization,
            "compile": {"enabled": True, "backend": "inductor"} if s.compile else {"enabled": False},
            "attn_implementation": self.attn_implementation,
            "padding": s.padding,
            "max_length": s.max_length,
            "truncation": s.truncation,
            "device": str(self.device),
            "parameter_count": self.parameter_count,
            "trust_remote_code": s.trust_remote_code,
            "hub_revision": hub_revision(self.folder),
            "tokenizer_class": type(self.tokenizer).__name__,
            "head": None,
            "callable": None,
            "notes": list(self.notes),
        }


class HFClassifierWorkload(_HFText):
    """Any ``AutoModelForSequenceClassification`` in a local folder; classes from ``config.id2label``."""

    kind = "hf_classifier"

    def __init__(self, folder: Path, settings: Settings, classes: Sequence[str] | None = None) -> None:
        from transformers import AutoModelForSequenceClassification

        _check_settings(settings)
        model, _ = _load_pretrained(AutoModelForSequenceClassification, folder, settings)
        id2label = {int(k): str(v) for k, v in model.config.id2label.items()}
        if sorted(id2label) != list(range(len(id2label))):
            raise WorkloadError(f"path: {folder}/config.json id2label keys are not 0…{len(id2label) - 1}")
        self.classes = tuple(id2label[i] for i in range(len(id2label)))
        if classes is not None and tuple(classes) != self.classes:
            raise WorkloadError(f"classes: the protocol declares {list(classes)} but the model's id2label is "
                                f"{list(self.classes)}", hint="declare the classes in the model's order")
        super().__init__(folder, settings, model, [])

    def forward_device(self, encoded_on_device: Mapping[str, Any]) -> torch.Tensor:
        with torch.inference_mode():
            logits = self._forward(**encoded_on_device).logits
            return torch.softmax(logits.float(), dim=-1)


# ----------------------------------------------------------------------------------------- encoder + head


@dataclass(frozen=True)
class LinearHead:
    """A trained linear head: ``weight`` [C, H], ``bias`` [C] (float32), class names in order."""

    weight: np.ndarray
    bias: np.ndarray
    classes: tuple[str, ...]
    normalize: bool
    metadata: dict[str, str]


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean of the hidden states over real tokens only (padding has mask 0), computed in float32."""
    mask = attention_mask.to(torch.float32).unsqueeze(-1)
    summed = (hidden.to(torch.float32) * mask).sum(dim=1)
    return summed / mask.sum(dim=1).clamp(min=1.0)


class EncoderHeadWorkload(_HFText):
    """An ``AutoModel`` encoder, mean pooling over real tokens, optional L2 normalisation, a linear head.

    Pooling, normalisation and the head run in float32 whatever the encoder's precision; int8-dynamic
    quantizes the encoder's Linear layers, the (tiny) head stays float32. Without a head (see
    :func:`load_encoder`) only ``embed`` is usable.
    """

    kind = "encoder_head"

    def __init__(self, folder: Path, settings: Settings, head_path: Path | None = None,
                 classes: Sequence[str] | None = None) -> None:
        from transformers import AutoModel

        _check_settings(settings)
        self.head_path = head_path
        self.head = load_head(head_path) if head_path is not None else None
        model, ignored = _load_pretrained(AutoModel, folder, settings, allowed_missing=("pooler.",))
        notes = [f"not in the folder and unused by mean pooling: {', '.join(ignored)}"] if ignored else []
        self.classes = self.head.classes if self.head else ()
        if self.head is not None:
            hidden = getattr(model.config, "hidden_size", None)
            if hidden is not None and self.head.weight.shape[1] != hidden:
                raise WorkloadError(f"head: {head_path} expects {self.head.weight.shape[1]}-dim embeddings, "
                                    f"the encoder gives {hidden}", hint="train the head on this encoder")
            if classes is not None and tuple(classes) != self.classes:
                raise WorkloadError(f"classes: the protocol declares {list(classes)} but the head {head_path} "
                                    f"holds {list(self.classes)}", hint="declare the classes in the head's order")
        super().__init__(folder, settings, model, notes)
        if self.head is not None:
            self._weight = torch.from_numpy(self.head.weight).to(self.device)
            self._bias = torch.from_numpy(self.head.bias).to(self.device)

    def _pooled(self, encoded_on_device: Mapping[str, Any], normalize: bool) -> torch.Tensor:
        hidden = self._forward(**encoded_on_device).last_hidden_state
        pooled = mean_pool(hidden, encoded_on_device["attention_mask"])
        return torch.nn.functional.normalize(pooled, dim=-1) if normalize else pooled

    def forward_device(self, encoded_on_device: Mapping[str, Any]) -> torch.Tensor:
        if self.head is None:
            raise WorkloadError("head: this encoder was loaded without a head; only embed() is available")
        with torch.inference_mode():
            pooled = self._pooled(encoded_on_device, self.head.normalize)
            return torch.softmax(pooled @ self._weight.T + self._bias, dim=-1)

    def embed(self, texts: Sequence[str], batch_size: int = 32, *, normalize: bool | None = None) -> np.ndarray:
        """Pooled embeddings [n, H] float32, as fed to the head (normalised if the head says so, or if asked)."""
        items = _text_list(texts)
        if batch_size < 1:
            raise WorkloadError(f"batch_size: {batch_size} must be ≥ 1")
        norm = normalize if normalize is not None else bool(self.head and self.head.normalize)
        hidden = int(getattr(self.model.config, "hidden_size", 0))
        chunks = [np.zeros((0, hidden), dtype=np.float32)]
        with torch.inference_mode():
            for start in range(0, len(items), batch_size):
                encoded = self.to_device(self.tokenize(items[start:start + batch_size]))
                chunks.append(self._pooled(encoded, norm).float().cpu().numpy())
        return np.concatenate(chunks, axis=0)

    def file_hashes(self) -> dict[str, str]:
        hashes = folder_hashes(self.folder)
        if self.head_path is not None:
            hashes[f"head/{self.head_path.name}"] = sha256_file(self.head_path)
        return hashes

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        if self.quantization is not None:
            info["quantization"] = {**self.quantization, "scope": "encoder nn.Linear layers; head kept float32"}
        if self.head is not None:
            info["head"] = {"file": self.head_path.name if self.head_path else None,
                            "normalize": self.head.normalize, "pooling": POOLING,
                            "shape": list(self.head.weight.shape), "dtype": "float32"}
        return info


def train_linear_head(embeddings: np.ndarray, labels: Sequence[str], classes: Sequence[str], *, seed: int = 0,
                      C: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Fit a multinomial logistic regression (lbfgs, deterministic); return ``weight`` [C, H], ``bias`` [C].

    With two classes scikit-learn fits one logit; it is returned as two rows (0 and w) whose softmax equals
    the fitted sigmoid, so every head has one row per class, in the order of ``classes``.
    """
    from sklearn.linear_model import LogisticRegression

    x = np.asarray(embeddings, dtype=np.float64)
    names = tuple(classes)
    if x.ndim != 2 or x.shape[0] != len(labels):
        raise WorkloadError(f"embeddings: shape {list(x.shape)} does not match {len(labels)} labels")
    if len(set(names)) != len(names) or len(names) < 2:
        raise WorkloadError(f"classes: {list(names)} must be at least two distinct names")
    index = {name: i for i, name in enumerate(names)}
    unknown = sorted({str(label) for label in labels if label not in index})
    if unknown:
        raise WorkloadError(f"labels: {unknown[:5]} are not among the classes {list(names)}")
    seen = set(labels)
    absent = [name for name in names if name not in seen]
    if absent:
        raise WorkloadError(f"labels: no training example for class(es) {absent}",
                            hint="every class needs at least one labelled example")
    y = np.array([index[label] for label in labels])
    model = LogisticRegression(C=C, max_iter=2000, random_state=seed).fit(x, y)
    coef, intercept = model.coef_, model.intercept_
    if len(names) == 2:
        coef = np.vstack([np.zeros_like(coef[0]), coef[0]])
        intercept = np.array([0.0, intercept[0]])
    return coef.astype(np.float32), intercept.astype(np.float32)


def save_head(path: str | Path, weight: np.ndarray, bias: np.ndarray, classes: Sequence[str], *,
              normalize: bool, extra_metadata: Mapping[str, Any] | None = None) -> Path:
    """Write a head as safetensors (``weight``, ``bias``; classes and normalize in the metadata), atomically."""
    from safetensors.numpy import save

    w = np.ascontiguousarray(weight, dtype=np.float32)
    b = np.ascontiguousarray(bias, dtype=np.float32)
    names = [str(c) for c in classes]
    if w.ndim != 2 or b.shape != (w.shape[0],) or len(names) != w.shape[0] or len(set(names)) != len(names):
        raise WorkloadError(f"head: weight {list(w.shape)}, bias {list(b.shape)} and {len(names)} distinct "
                            "classes do not agree", hint="weight is [C, H], bias is [C], one name per class")
    metadata = {"format": HEAD_FORMAT, "schema_version": "1", "classes": json.dumps(names, ensure_ascii=False),
                "normalize": "true" if normalize else "false"}
    for key, value in sorted((extra_metadata or {}).items()):
        if key in metadata:
            raise WorkloadError(f"extra_metadata: key {key!r} is reserved")
        metadata[str(key)] = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    target = Path(path)
    write_bytes_atomic(target, save({"weight": w, "bias": b}, metadata=metadata))
    return target


def load_head(path: str | Path) -> LinearHead:
    """Read and validate a head written by :func:`save_head` (safetensors only, never pickle)."""
    from safetensors import SafetensorError, safe_open

    source = Path(path)
    if not source.is_file():
        raise WorkloadError(f"head: {source} does not exist", hint="train one with train_linear_head/save_head")
    try:
        with safe_open(str(source), framework="numpy") as fh:
            metadata = dict(fh.metadata() or {})
            keys = set(fh.keys())
            if not {"weight", "bias"} <= keys:
                raise WorkloadError(f"head: {source} must hold tensors 'weight' and 'bias', has {sorted(keys)}")
            weight, bias = fh.get_tensor("weight"), fh.get_tensor("bias")
    except (SafetensorError, OSError) as exc:
        raise WorkloadError(f"head: {source} is not a readable safetensors file ({exc})") from exc
    try:
        classes = json.loads(metadata["classes"])
    except (KeyError, json.JSONDecodeError) as exc:
        raise WorkloadError(f"head: {source} metadata has no valid 'classes' list",
                            hint="write heads with save_head(...)") from exc
    if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes) or len(set(classes)) != len(classes):
        raise WorkloadError(f"head: {source} metadata 'classes' must be a list of distinct names")
    if weight.ndim != 2 or weight.shape[0] != len(classes) or bias.shape != (len(classes),):
        raise WorkloadError(f"head: {source} weight {list(weight.shape)} / bias {list(bias.shape)} do not match "
                            f"{len(classes)} classes")
    normalize = metadata.get("normalize", "false").lower()
    if normalize not in ("true", "false"):
        raise WorkloadError(f"head: {source} metadata 'normalize' must be 'true' or 'false', not {normalize!r}")
    return LinearHead(weight=weight.astype(np.float32), bias=bias.astype(np.float32), classes=tuple(classes),
                      normalize=normalize == "true", metadata=metadata)


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
        self.device = torch.device("cpu")
        self.tokenizer_folder = tokenizer_folder
        self.tokenizer = None
        if tokenizer_folder is not None:
            from transformers import AutoTokenizer

            try:
                self.tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_folder), local_files_only=True)
            except (OSError, ValueError) as exc:
                raise WorkloadError(f"path: cannot load a tokenizer from {tokenizer_folder}") from exc

    def tokenize(self, texts: Sequence[str]) -> dict[str, Any]:
        return {"texts": _text_list(texts)}

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
        if isinstance(out, torch.Tensor):
            out = out.detach().float().cpu().numpy()
        if isinstance(out, np.ndarray) and out.dtype.kind in "USO":
            out = out.tolist()
        if isinstance(out, (list, tuple)) and out and all(isinstance(x, str) for x in out):
            if len(out) != n:
                raise WorkloadError(f"callable: {ref} returned {len(out)} labels for {n} texts")
            unknown = sorted({x for x in out if x not in self.classes})
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
        items = _text_list(texts)
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


# ----------------------------------------------------------------------------------------- factory


def load_workload(kind: str, *, path: str | Path | None = None, head: str | Path | None = None,
                  callable_ref: str | None = None, classes: Sequence[str] | None = None, precision: str = "fp32",
                  device: str | torch.device = "cpu", max_length: int = 256, truncation: bool = True,
                  padding: str = "longest", compile: bool = False, trust_remote_code: bool = False) -> Workload:
    """Build the declared workload. Every refusal is a :class:`WorkloadError` naming the field."""
    if kind not in KINDS:
        raise WorkloadError(f"kind: {kind!r} is not one of {', '.join(KINDS)}")
    if kind == "callable":
        if callable_ref is None:
            raise WorkloadError("callable: required for kind 'callable' ('package.module:function')")
        if classes is None:
            raise WorkloadError("classes: required for a callable workload (the order of its probability columns)")
        if precision != "fp32" or compile:
            raise WorkloadError(f"precision/compile: {precision!r}/{compile} cannot be applied to a callable",
                                hint="the callable owns its model; declare precision 'fp32' and compile false")
        return CallableWorkload(callable_ref, classes, Path(path) if path is not None else None)
    settings = Settings(precision=precision, device=resolve_device(device), max_length=max_length,
                        truncation=bool(truncation), padding=padding, compile=bool(compile),
                        trust_remote_code=bool(trust_remote_code))
    _check_settings(settings)
    folder = _model_folder(path, kind)
    if kind == "hf_classifier":
        return HFClassifierWorkload(folder, settings, classes)
    if head is None:
        raise WorkloadError("head: required for kind 'encoder_head' (a safetensors head file)",
                            hint="train one with train_linear_head and save_head")
    return EncoderHeadWorkload(folder, settings, Path(head), classes)


def load_encoder(path: str | Path, *, precision: str = "fp32", device: str | torch.device = "cpu",
                 max_length: int = 256, truncation: bool = True, padding: str = "longest",
                 trust_remote_code: bool = False) -> EncoderHeadWorkload:
    """An encoder without a head, for ``embed`` (training a head on tuning data, P4)."""
    settings = Settings(precision=precision, device=resolve_device(device), max_length=max_length,
                        truncation=bool(truncation), padding=padding, trust_remote_code=bool(trust_remote_code))
    _check_settings(settings)
    return EncoderHeadWorkload(_model_folder(path, "encoder_head"), settings)


def embed_texts(path: str | Path, texts: Sequence[str], *, batch_size: int = 32, max_length: int = 256,
                normalize: bool = True, precision: str = "fp32", device: str | torch.device = "cpu") -> np.ndarray:
    """Mean-pooled embeddings [n, H] float32 of ``texts`` by the encoder in ``path``.

    ``normalize`` defaults to True (the L2-normalised sentence embedding, as sentence-transformers defines it
    for MiniLM): train a head on these and save it with ``normalize=True`` so inference pools the same way.
    """
    encoder = load_encoder(path, precision=precision, device=device, max_length=max_length)
    return encoder.embed(texts, batch_size, normalize=normalize)
