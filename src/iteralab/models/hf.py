"""Hugging Face sequence classifiers as workloads (``kind = "hf_classifier"``), and the loading rules the
two Hugging Face kinds share: local folder, safetensors only, declared precision, optional dynamic int8."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
import torch

from iteralab.errors import WorkloadError
from iteralab.common.files import folder_hashes
from iteralab.models.base import (DTYPES, Settings, Workload, check_settings, text_list,
                                  hub_revision)


#: What ``compile = true`` hands to ``torch.compile`` (recorded as given, with whether a compiled graph ran).
COMPILE_BACKEND = "inductor"
COMPILE_MODE: str | None = None


def dynamo_graphs() -> int:
    """Graphs TorchDynamo has captured in this process so far (``torch._dynamo.utils.counters``)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


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


def load_pretrained(auto_cls: Any, folder: Path, settings: Settings, allowed_missing: tuple[str, ...] = ()
                     ) -> tuple[torch.nn.Module, list[str]]:
    quiet_transformers()
    try:
        model, info = auto_cls.from_pretrained(
            str(folder), local_files_only=True, use_safetensors=True, trust_remote_code=settings.trust_remote_code,
            dtype=DTYPES[settings.precision], output_loading_info=True)
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


class HFText(Workload):
    """Shared tokenizer/model handling for the two Hugging Face kinds."""

    def __init__(self, folder: Path, settings: Settings, model: torch.nn.Module, notes: list[str]) -> None:
        from transformers import AutoTokenizer

        check_settings(settings)
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
        self.compile_options: dict[str, Any] | None = None
        if settings.compile:
            self.compile_options = {"backend": COMPILE_BACKEND, "mode": COMPILE_MODE}
            self._graphs_before = dynamo_graphs()
            self._forward = torch.compile(self.model, **self.compile_options)
            if settings.padding == "longest":
                self.notes.append("compile with padding='longest': new batch shapes may recompile inside a "
                                  "measured pass; padding='max_length' keeps one shape")

    def tokenize(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        items = text_list(texts)
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

    def token_rows(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray] | None:
        """Every text's token ids as :meth:`tokenize` makes them, unpadded: one flat int32 array and each text's
        length (a bucketed pass sorts by these lengths and pads each batch with :meth:`pad_rows`, so each text is
        tokenized once). None, for every text, where ids alone do not make a batch: no pad token, or token types
        other than 0 for one text."""
        items = text_list(texts)
        pad_id = self.tokenizer.pad_token_id
        if not items or pad_id is None or any(self.tokenizer("a").get("token_type_ids") or ()):
            return None
        s = self.settings
        ids = self.tokenizer(items, padding=False, truncation=s.truncation,
                             max_length=s.max_length if s.truncation else None, return_attention_mask=False,
                             return_token_type_ids=False)["input_ids"]
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        return np.fromiter(chain.from_iterable(ids), dtype=np.int32, count=int(lengths.sum())), lengths

    def pad_rows(self, rows: Sequence[np.ndarray]) -> dict[str, torch.Tensor]:
        """One batch from :meth:`token_rows`' rows, padded as :meth:`tokenize` pads: the same tensors."""
        if not rows:
            raise WorkloadError("texts: empty batch")
        s = self.settings
        width = s.max_length if s.padding == "max_length" else max(len(r) for r in rows)
        if self.position_limit is not None and width > self.position_limit:
            raise WorkloadError(f"texts: a text has {width} tokens, more than the model's {self.position_limit} "
                                "positions, and truncation is off", hint="enable truncation or shorten the texts")
        ids = np.full((len(rows), width), self.tokenizer.pad_token_id, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        left = self.tokenizer.padding_side == "left"
        for i, row in enumerate(rows):
            place = slice(width - len(row), width) if left else slice(0, len(row))
            ids[i, place] = row
            mask[i, place] = 1
        encoded = {"input_ids": torch.from_numpy(ids)}
        if "token_type_ids" in self.tokenizer.model_input_names:
            encoded["token_type_ids"] = torch.zeros_like(encoded["input_ids"])
        encoded["attention_mask"] = torch.from_numpy(mask)
        return encoded

    def to_device(self, encoded: Mapping[str, Any]) -> dict[str, Any]:
        non_blocking = self.device.type == "cuda"
        return {k: v.to(self.device, non_blocking=non_blocking) for k, v in encoded.items()}

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        items = text_list(texts)
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
            "compile": self.compile_record(),
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


    def compile_record(self) -> dict[str, Any]:
        """What ``torch.compile`` was given (backend, mode) and the graphs TorchDynamo captured since this workload
        compiled its forward: ``compiled_graph_ran`` is False until a call ran through a compiled graph (before the
        first call, or when every frame fell back to eager)."""
        if self.compile_options is None:
            return {"enabled": False}
        graphs = dynamo_graphs() - self._graphs_before
        return {"enabled": True, **self.compile_options, "graphs_captured": graphs, "compiled_graph_ran": graphs > 0,
                "counter": "torch._dynamo.utils.counters['stats']['unique_graphs'], since the workload loaded"}


class HFClassifierWorkload(HFText):
    """Any ``AutoModelForSequenceClassification`` in a local folder; classes from ``config.id2label``."""

    kind = "hf_classifier"

    def __init__(self, folder: Path, settings: Settings, classes: Sequence[str] | None = None) -> None:
        from transformers import AutoModelForSequenceClassification

        check_settings(settings)
        model, _ = load_pretrained(AutoModelForSequenceClassification, folder, settings)
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
