"""An encoder folder as an embedding model (``model.kind = "encoder"``): Hugging Face ``AutoModel`` + tokenizer
from a local folder, pooled in float32 (``mean`` over real tokens, or ``cls``: the first token) and L2-normalised
when declared — all-MiniLM-L6-v2 is exactly this with mean pooling, normalised."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from iteralab.errors import WorkloadError
from iteralab.models.base import Settings, check_settings
from iteralab.models.hf import HFText, load_pretrained
from iteralab.models.stfolder import POOLINGS, pooling_hashes


def pooling_of(pooling: str, normalize: bool) -> str:
    """The pooling in words, as the manifest records it."""
    how = ("mean over real tokens (attention-mask weighted, padding excluded)" if pooling == "mean"
           else "the first token's hidden state ([CLS])")
    return f"{how}, float32{', L2-normalised' if normalize else ''}"


class EncoderWorkload(HFText):
    """Vectors ``[n, d]`` float32 from an encoder folder. Pooling and normalisation run in float32 whatever the
    encoder's precision; int8-dynamic quantizes the encoder's Linear layers."""

    kind = "encoder"

    def __init__(self, folder: Path, settings: Settings, pooling: str = "mean", normalize: bool = True) -> None:
        from transformers import AutoModel

        check_settings(settings)
        if pooling not in POOLINGS:
            raise WorkloadError(f"pooling: {pooling!r} is not one of {', '.join(POOLINGS)}")
        model, ignored = load_pretrained(AutoModel, folder, settings, allowed_missing=("pooler.",))
        notes = [f"not in the folder and unused by the pooling: {', '.join(ignored)}"] if ignored else []
        self.classes = ()
        self.pooling, self.normalize = pooling, bool(normalize)
        self.dim = int(getattr(model.config, "hidden_size", 0)) or None
        super().__init__(folder, settings, model, notes)

    def forward_device(self, encoded_on_device: Mapping[str, Any]) -> torch.Tensor:
        with torch.inference_mode():
            hidden = self._forward(**encoded_on_device).last_hidden_state.to(torch.float32)
            if self.pooling == "cls":
                pooled = hidden[:, 0]
            else:
                mask = encoded_on_device["attention_mask"].to(torch.float32).unsqueeze(-1)
                pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
            return torch.nn.functional.normalize(pooled, dim=-1) if self.normalize else pooled

    def file_hashes(self) -> dict[str, str]:
        """The folder's files and, for a sentence-transformers folder, its Pooling config (``models.stfolder``)."""
        return {**super().file_hashes(), **pooling_hashes(self.folder)}

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info["embedding"] = {"pooling": pooling_of(self.pooling, self.normalize), "dim": self.dim}
        return info
