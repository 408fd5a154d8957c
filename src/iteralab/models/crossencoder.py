"""A Hugging Face sequence-classification folder read as a cross-encoder (``kind = "hf_cross_encoder"``): each pair
tokenized together (the tokenizer's pair template: ``[CLS] a [SEP] b [SEP]`` for a BERT), and the score of a pair
is its one logit (raw, or through a sigmoid) or, for a folder of several outputs, the declared positive class's
probability (softmax) or logit. The loading rules (local folder, safetensors only, declared precision, optional
dynamic int8, compile) are the classifier's (:mod:`iteralab.models.hf`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from iteralab.errors import WorkloadError
from iteralab.models.base import Settings, check_settings
from iteralab.models.hf import HFText, load_pretrained
from iteralab.models.pairs import ACTIVATIONS, count_pair_tokens, resolved_activation
from iteralab.models.scoring import pair_lists


def positive_logit(folder: Path, id2label: Mapping[int, str], outputs: int, activation: str,
                   positive_class: str | None) -> int:
    """The logit a score is read from (refused in one line when the folder and the protocol disagree)."""
    if activation not in ACTIVATIONS:
        raise WorkloadError(f"scoring.activation: {activation!r} is not one of {', '.join(ACTIVATIONS)}")
    if outputs == 1:
        if positive_class is not None:
            raise WorkloadError(f"scoring.positive_class: {folder} gives one logit, there is no class to choose",
                                hint="remove scoring.positive_class")
        if activation == "softmax":
            raise WorkloadError("scoring.activation: the softmax of one logit is always 1",
                                hint="declare sigmoid or none")
        return 0
    labels = [id2label.get(i, str(i)) for i in range(outputs)]
    if positive_class not in labels:
        found = "" if positive_class is None else f" (not {positive_class!r})"
        raise WorkloadError(f"scoring.positive_class: {folder} gives {outputs} logits ({', '.join(labels)}): name "
                            f"the one whose score ranks the pairs{found}", hint=f"e.g. positive_class = {labels[-1]!r}")
    if activation == "sigmoid":
        raise WorkloadError(f"scoring.activation: sigmoid reads one logit; {folder} gives {outputs}",
                            hint="declare softmax or none")
    return labels.index(str(positive_class))


class HFCrossEncoderWorkload(HFText):
    """Any ``AutoModelForSequenceClassification`` in a local folder, scoring pairs: ``infer`` gives one float32
    score per pair."""

    kind = "hf_cross_encoder"

    def __init__(self, folder: Path, settings: Settings, activation: str | None = None,
                 positive_class: str | None = None) -> None:
        from transformers import AutoModelForSequenceClassification

        check_settings(settings)
        model, _ = load_pretrained(AutoModelForSequenceClassification, folder, settings)
        self.outputs = int(model.config.num_labels)
        self.activation = resolved_activation(activation, folder, self.outputs)
        id2label = {int(k): str(v) for k, v in model.config.id2label.items()}
        self.positive = positive_logit(folder, id2label, self.outputs, self.activation, positive_class)
        self.classes = ()
        super().__init__(folder, settings, model, [f"score: {self.activation} of logit {self.positive} of "
                                                   f"{self.outputs}"])

    def tokenize_pairs(self, firsts: Sequence[str], seconds: Sequence[str]) -> dict[str, torch.Tensor]:
        a, b = pair_lists(firsts, seconds)
        if not a:
            raise WorkloadError("texts: empty batch")
        s = self.settings
        cap = s.max_length if (s.truncation or s.padding == "max_length") else None
        encoded = self.tokenizer(a, b, padding=s.padding, truncation=s.truncation, max_length=cap,
                                 return_tensors="pt")
        width = encoded["input_ids"].shape[1]
        if self.position_limit is not None and width > self.position_limit:
            raise WorkloadError(f"texts: a pair has {width} tokens, more than the model's {self.position_limit} "
                                "positions, and truncation is off", hint="enable truncation or shorten the texts")
        return dict(encoded.items())

    def pair_token_lengths(self, firsts: Sequence[str], seconds: Sequence[str]) -> list[int]:
        return count_pair_tokens(self.tokenizer, *pair_lists(firsts, seconds))

    def forward_device(self, encoded_on_device: Mapping[str, Any]) -> torch.Tensor:
        with torch.inference_mode():
            logits = self._forward(**encoded_on_device).logits.float()
            if self.activation == "softmax":
                return torch.softmax(logits, dim=-1)[:, self.positive]
            column = logits[:, self.positive]
            return torch.sigmoid(column) if self.activation == "sigmoid" else column

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info["scoring"] = {"activation": self.activation, "positive_logit": self.positive, "outputs": self.outputs}
        return info
