"""An encoder + a trained linear head (``kind = "encoder_head"``): mean pooling, the head's file format
(safetensors with metadata) and its training on the tuning split (P4)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score
from sklearn.model_selection import StratifiedKFold, cross_val_predict

from iteralab.common.files import folder_hashes, sha256_file, write_bytes_atomic
from iteralab.errors import WorkloadError
from iteralab.models.base import HEAD_FORMAT, POOLING, Settings, check_settings, model_folder, text_list
from iteralab.models.device import resolve_device
from iteralab.models.hf import HFText, load_pretrained
from iteralab.plan.corpus import check_disjoint_from_file, load_corpus
from iteralab.plan.prepare import record_suggestion, suggest_threshold


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


class EncoderHeadWorkload(HFText):
    """An ``AutoModel`` encoder, mean pooling over real tokens, optional L2 normalisation, a linear head.

    Pooling, normalisation and the head run in float32 whatever the encoder's precision; int8-dynamic
    quantizes the encoder's Linear layers, the (tiny) head stays float32. Without a head (see
    :func:`load_encoder`) only ``embed`` is usable.
    """

    kind = "encoder_head"

    def __init__(self, folder: Path, settings: Settings, head_path: Path | None = None,
                 classes: Sequence[str] | None = None) -> None:
        from transformers import AutoModel

        check_settings(settings)
        self.head_path = head_path
        self.head = load_head(head_path) if head_path is not None else None
        model, ignored = load_pretrained(AutoModel, folder, settings, allowed_missing=("pooler.",))
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
        items = text_list(texts)
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

    x = np.asarray(embeddings, dtype=np.float64)
    names = tuple(classes)
    if x.ndim != 2 or x.shape[0] != len(labels):
        raise WorkloadError(f"embeddings: shape {list(x.shape)} does not match {len(labels)} labels")
    if len(set(names)) != len(names) or len(names) < 2:
        raise WorkloadError(f"classes: {list(names)} must be at least two distinct names")
    index = {name: i for i, name in enumerate(names)}
    unknown = list(dict.fromkeys(str(label) for label in labels if label not in index))  # as first seen
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


def load_encoder(path: str | Path, *, precision: str = "fp32", device: str | torch.device = "cpu",
                 max_length: int = 256, truncation: bool = True, padding: str = "longest",
                 trust_remote_code: bool = False) -> EncoderHeadWorkload:
    """An encoder without a head, for ``embed`` (training a head on tuning data, P4)."""
    settings = Settings(precision=precision, device=resolve_device(device), max_length=max_length,
                        truncation=bool(truncation), padding=padding, trust_remote_code=bool(trust_remote_code))
    check_settings(settings)
    return EncoderHeadWorkload(model_folder(path, "encoder_head"), settings)


def embed_texts(path: str | Path, texts: Sequence[str], *, batch_size: int = 32, max_length: int = 256,
                normalize: bool = True, precision: str = "fp32", device: str | torch.device = "cpu") -> np.ndarray:
    """Mean-pooled embeddings [n, H] float32 of ``texts`` by the encoder in ``path``.

    ``normalize`` defaults to True (the L2-normalised sentence embedding, as sentence-transformers defines it
    for MiniLM): train a head on these and save it with ``normalize=True`` so inference pools the same way.
    """
    encoder = load_encoder(path, precision=precision, device=device, max_length=max_length)
    return encoder.embed(texts, batch_size, normalize=normalize)


CV_FOLDS = 5


def cross_validated_macro_f1(embeddings: np.ndarray, labels: Sequence[str], classes: Sequence[str], *,
                             seed: int = 0, folds: int = CV_FOLDS) -> float:
    """Macro-F1 of the same logistic regression, k-fold cross-validated (stratified, seeded) on the tuning split."""

    smallest = min(list(labels).count(c) for c in set(labels))
    if smallest < 2:
        raise WorkloadError(f"tuning: a class has {smallest} example; {folds}-fold cross-validation needs at least "
                            "2 per class", hint="use a larger tuning split")
    splitter = StratifiedKFold(n_splits=min(folds, smallest), shuffle=True, random_state=seed)
    predicted = cross_val_predict(LogisticRegression(max_iter=2000, C=1.0), embeddings, list(labels), cv=splitter)
    return float(f1_score(list(labels), predicted, labels=list(classes), average="macro", zero_division=0))


def train_head(encoder: str | Path, tuning: str | Path, out: str | Path, *, final: str | Path | None = None,
               classes: Sequence[str] | None = None, seed: int = 0, max_length: int = 256,
               metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``iteralab head train``: embeddings of the tuning split only (P4), a linear head, and the k-fold
    cross-validated macro-F1 on that split with the threshold it suggests. A tuning file that shares ids or texts
    with ``final`` (default: ``final.csv`` beside it) is refused. Returns what was done (also written, when the
    tuning file sits in a ``prepare`` folder, into its prepare.json and draft protocol)."""

    tuning = Path(tuning)
    split = load_corpus(tuning)
    final_path = Path(final) if final is not None else tuning.with_name("final.csv")
    if final is not None or final_path.is_file():
        check_disjoint_from_file(split, final_path)
    names = tuple(classes) if classes else tuple(sorted({str(label) for label in split.labels}))
    labels = [str(label) for label in split.labels]
    embeddings = embed_texts(encoder, list(split.texts), batch_size=32, max_length=max_length)
    tuned = cross_validated_macro_f1(embeddings, labels, names, seed=seed)
    weight, bias = train_linear_head(embeddings, labels, names, seed=seed)
    suggested, how = suggest_threshold(tuned, f"{CV_FOLDS}-fold cross-validated macro-F1",
                                       f"{tuning.name} ({len(split)} texts)")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    save_head(out, weight, bias, names, normalize=True,
              extra_metadata={"trained_on": tuning.name, "tuning_cv_macro_f1": f"{tuned:.4f}", **(metadata or {})})
    result = {"head": str(out), "classes": list(names), "tuning": str(tuning), "tuning_size": len(split),
              "tuning_fingerprint": split.fingerprint(), "cv_macro_f1": round(tuned, 4),
              "suggested_threshold": suggested, "how": how, "head_sha256": sha256_file(out)}
    record_suggestion(tuning.parent, result)
    return result
