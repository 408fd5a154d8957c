"""Pairs of texts as a scoring model reads them, free of the model classes: each pair's tokens counted the way a
cross-encoder tokenizes it (both texts, special tokens included, no truncation), and how a cross-encoder folder
declares the activation of its logits (sentence-transformers' ``config.json`` keys). ``lock``, the strata and the
kinds' model record use them without loading a model."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from iteralab.errors import WorkloadError

#: Pairs counted per tokenizer call.
COUNT_CHUNK = 1024
#: The activations a score may be read through: the one logit's sigmoid, the positive class's softmax probability,
#: or the raw logit.
ACTIVATIONS = ("sigmoid", "softmax", "none")
#: How sentence-transformers names an activation module in a cross-encoder's ``config.json``.
DECLARED = {"Sigmoid": "sigmoid", "Identity": "none", "Softmax": "softmax"}


def count_pair_tokens(tokenizer: Any, firsts: Sequence[str], seconds: Sequence[str]) -> list[int]:
    """Tokens of each pair as the model reads it (first and second text joined by the tokenizer's pair template,
    special tokens included), without truncation."""
    if len(firsts) != len(seconds):
        raise WorkloadError(f"pairs: {len(firsts)} first texts, {len(seconds)} second texts")
    counts: list[int] = []
    for start in range(0, len(firsts), COUNT_CHUNK):
        a = [t or "" for t in firsts[start:start + COUNT_CHUNK]]
        b = [t or "" for t in seconds[start:start + COUNT_CHUNK]]
        ids = tokenizer(a, b, add_special_tokens=True, truncation=False, padding=False,
                        return_attention_mask=False, return_token_type_ids=False)["input_ids"]
        counts.extend(len(row) for row in ids)
    return counts


def declared_activation(folder: Path | None) -> str | None:
    """The activation a cross-encoder folder declares in its ``config.json`` (sentence-transformers'
    ``sentence_transformers.activation_fn``, or the older ``sbert_ce_default_activation_function``); None when it
    declares none (or there is no folder)."""
    if folder is None or not (Path(folder) / "config.json").is_file():
        return None
    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    named = (config.get("sentence_transformers") or {}).get("activation_fn") \
        or config.get("sbert_ce_default_activation_function")
    if not named:
        return None
    return DECLARED.get(str(named).rsplit(".", 1)[-1])


def resolved_activation(protocol_activation: str | None, folder: Path | None, outputs: int | None) -> str:
    """The activation a score is read through: the protocol's, else the folder's declared one, else ``none`` for
    one logit and ``softmax`` for several (``outputs``: the folder's logits, None when not known yet)."""
    if protocol_activation is not None:
        return protocol_activation
    declared = declared_activation(folder)
    if declared is not None:
        return declared
    return "softmax" if outputs is not None and outputs > 1 else "none"


def folder_outputs(folder: Path | None) -> int | None:
    """How many logits a sequence-classification folder gives (``num_labels`` or ``id2label``), None if unknown."""
    if folder is None or not (Path(folder) / "config.json").is_file():
        return None
    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(config.get("id2label"), dict):
        return len(config["id2label"])
    return int(config["num_labels"]) if isinstance(config.get("num_labels"), int) else None
