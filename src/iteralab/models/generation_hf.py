"""Hugging Face generators: ``kind = "hf_causal_lm"`` (``AutoModelForCausalLM``, prompts left-padded in a batch)
and ``kind = "hf_seq2seq"`` (``AutoModelForSeq2SeqLM``). They load, quantize, place and compile the model through
:class:`iteralab.models.hf.HFText`, the same code as the classifiers, and decode greedily with
``model.generate``; the finish reasons and token counts follow :mod:`iteralab.models.generation`.

Stop strings end a row's generation as soon as its decoded text holds one (a stopping criterion that decodes the
row's generated tokens at each step); the row is then cut before the stop string."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from iteralab.errors import WorkloadError
from iteralab.models.base import Settings, check_settings, text_list
from iteralab.models.generation import (GeneratedBatch, GenerationSettings, check_generation, empty_batch,
                                        finish_row, require_chat_template, stop_index)
from iteralab.models.hf import HFText, load_pretrained
from iteralab.models.prompts import count_prompt_tokens, render_prompts


class StopOnStrings(StoppingCriteria):
    """Marks a row done once the text of its generated tokens (from column ``start``) holds a stop string."""

    def __init__(self, tokenizer: Any, stops: Sequence[str], start: int) -> None:
        self.tokenizer, self.stops, self.start = tokenizer, tuple(stops), start

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        rows = input_ids[:, self.start:].tolist()
        done = [stop_index(self.tokenizer.decode(row, skip_special_tokens=True), self.stops) is not None
                for row in rows]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


class HFGenerator(HFText):
    """Shared handling of the two Hugging Face generator kinds (see the module docstring)."""

    padding_side = "right"

    def __init__(self, folder: Path, settings: Settings, generation: GenerationSettings, auto_cls: Any) -> None:
        check_settings(settings)
        check_generation(generation)
        model, _ = load_pretrained(auto_cls, folder, settings)
        self.generation = generation
        self.classes = ()
        self.check_positions(model.config, generation)
        super().__init__(folder, settings, model, [])
        self.tokenizer_folder = folder
        self.tokenizer.padding_side = self.padding_side
        if self.tokenizer.pad_token is None:
            if self.tokenizer.eos_token is None:
                raise WorkloadError(f"path: the tokenizer in {folder} has neither a pad nor an eos token",
                                    hint="save the tokenizer with a pad_token")
            self.tokenizer.pad_token = self.tokenizer.eos_token
            self.notes.append("the tokenizer has no pad token: its eos token pads the batches")
        if generation.chat_template:
            require_chat_template(self.tokenizer, folder)
        self.generation_config = self.greedy_config()
        self.eos_ids = frozenset(_ids(self.generation_config.eos_token_id))
        if settings.compile:
            self.model.forward = torch.compile(self.model.forward, **self.compile_options)
            self.notes.append("compile: each new prompt width and cache length may compile again")

    def check_positions(self, config: Any, generation: GenerationSettings) -> None:
        """Refuse limits beyond the model's positions (``max_position_embeddings`` when the config has one)."""
        limit = getattr(config, "max_position_embeddings", None)
        if isinstance(limit, int) and generation.prompt_max_length > limit:
            raise WorkloadError(f"prompt_max_length: {generation.prompt_max_length} exceeds the model's {limit} "
                                "positions", hint=f"use prompt_max_length ≤ {limit}")

    def greedy_config(self) -> Any:
        """The folder's generation config with greedy decoding, the declared limit and the pad/eos ids set."""
        config = copy.deepcopy(self.model.generation_config)
        eos = _ids(config.eos_token_id) or _ids(self.tokenizer.eos_token_id)
        config.update(do_sample=False, num_beams=1, max_new_tokens=self.generation.max_new_tokens,
                      temperature=None, top_p=None, top_k=None, pad_token_id=self.tokenizer.pad_token_id,
                      eos_token_id=eos or None)
        return config

    def forward_device(self, encoded_on_device: Any) -> torch.Tensor:
        raise WorkloadError("a generation model gives texts, not class probabilities", hint="call generate(prompts)")

    def prompt_token_counts(self, prompts: Sequence[str]) -> list[int]:
        return count_prompt_tokens(self.tokenizer, prompts, self.generation.chat_template)

    def encode(self, prompts: list[str]) -> dict[str, torch.Tensor]:
        """Host tensors of one batch of rendered prompts; a prompt over ``prompt_max_length`` is refused unless
        truncation is declared (then it is cut to that length on the tokenizer's truncation side)."""
        g = self.generation
        cap = {"truncation": True, "max_length": g.prompt_max_length} if g.allow_truncation else {}
        encoded = self.tokenizer(render_prompts(self.tokenizer, prompts, g.chat_template),
                                 add_special_tokens=not g.chat_template, padding="longest", return_tensors="pt",
                                 **cap)
        counts = encoded["attention_mask"].sum(dim=1).tolist()
        over = [i for i, n in enumerate(counts) if n > g.prompt_max_length]
        if over:
            more = f" ({len(over)} prompts of this batch are)" if len(over) > 1 else ""
            raise WorkloadError(f"prompts[{over[0]}]: {counts[over[0]]} tokens, over prompt_max_length "
                                f"{g.prompt_max_length}{more}", hint="a truncated prompt is another job: shorten "
                                "it, raise prompt_max_length or declare allow_truncation")
        return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}

    def prefix_width(self, encoded: dict[str, torch.Tensor]) -> int:
        """Columns of ``generate``'s output before the first generated token."""
        raise NotImplementedError

    def generate(self, prompts: Sequence[str]) -> GeneratedBatch:
        items = text_list(prompts)
        if not items:
            return empty_batch()
        encoded = self.encode(items)
        start = self.prefix_width(encoded)
        stops = self.generation.stop
        criteria = StoppingCriteriaList([StopOnStrings(self.tokenizer, stops, start)] if stops else [])
        with torch.inference_mode():
            out = self.model.generate(**self.to_device(encoded), generation_config=self.generation_config,
                                      stopping_criteria=criteria)
            rows = out[:, start:].cpu().tolist()
        return self.finish(rows)

    def finish(self, rows: list[list[int]]) -> GeneratedBatch:
        def decode(ids: Sequence[int]) -> str:
            return self.tokenizer.decode(list(ids), skip_special_tokens=True)

        done = [finish_row(decode, row, self.eos_ids, self.generation.stop) for row in rows]
        return GeneratedBatch([d[0] for d in done], np.array([d[1] for d in done], dtype=np.int32),
                              [d[2] for d in done])

    def warmup(self, prompts: Sequence[str]) -> None:
        self.generate(prompts)

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        g = self.generation
        info.update(classes=[], padding=f"longest ({self.padding_side})", max_length=g.prompt_max_length,
                    truncation=g.allow_truncation)
        info["generation"] = {**g.record(), "eos_token_ids": sorted(self.eos_ids),
                              "pad_token_id": self.tokenizer.pad_token_id,
                              "truncation_side": self.tokenizer.truncation_side if g.allow_truncation else None,
                              "generation_config": _jsonable(self.generation_config.to_diff_dict())}
        return info


class HFCausalLMWorkload(HFGenerator):
    """Any ``AutoModelForCausalLM`` in a local folder; batches are left-padded so every prompt ends where
    generation starts."""

    kind = "hf_causal_lm"
    padding_side = "left"

    def __init__(self, folder: Path, settings: Settings, generation: GenerationSettings) -> None:
        from transformers import AutoModelForCausalLM

        super().__init__(folder, settings, generation, AutoModelForCausalLM)

    def check_positions(self, config: Any, generation: GenerationSettings) -> None:
        """The prompt and the generated tokens share the positions of a decoder-only model."""
        super().check_positions(config, generation)
        limit = getattr(config, "max_position_embeddings", None)
        total = generation.prompt_max_length + generation.max_new_tokens
        if isinstance(limit, int) and total > limit:
            raise WorkloadError(f"max_new_tokens: prompt_max_length + max_new_tokens = {total} exceeds the model's "
                                f"{limit} positions", hint=f"keep their sum ≤ {limit}")

    def prefix_width(self, encoded: dict[str, torch.Tensor]) -> int:
        return int(encoded["input_ids"].shape[1])


class HFSeq2SeqWorkload(HFGenerator):
    """Any ``AutoModelForSeq2SeqLM`` (encoder-decoder) in a local folder; the decoder's start token is not a
    generated token."""

    kind = "hf_seq2seq"

    def __init__(self, folder: Path, settings: Settings, generation: GenerationSettings) -> None:
        from transformers import AutoModelForSeq2SeqLM

        super().__init__(folder, settings, generation, AutoModelForSeq2SeqLM)

    def prefix_width(self, encoded: dict[str, torch.Tensor]) -> int:
        return 1


def _ids(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
