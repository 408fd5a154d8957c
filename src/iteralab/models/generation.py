"""Generation models (``[task] kind = "generation"``): a prompt in, a generated text out, with the number of tokens
generated and why the generation ended.

The interface every generator offers (the Hugging Face ones live in :mod:`iteralab.models.generation_hf`):

- ``generate(prompts) -> GeneratedBatch``: greedy decoding (``do_sample=False``, ``num_beams=1``); a prompt
  longer than ``prompt_max_length`` tokens is refused, never truncated silently (unless ``allow_truncation``);
- ``warmup(prompts)``: one call outside any measured pass;
- ``prompt_token_counts(prompts)``: tokens of each prompt as the model sees it (chat template applied when
  asked, special tokens included); :func:`check_prompts` gives the rows over the limit, so a lock can refuse
  them before any pass;
- ``describe()``, ``file_hashes()``: the manifest's facts, as every workload's; ``tokenizer_folder``: the folder
  whose tokenizer counts tokens (None: no tokenizer, counts are "not measured").

Finish reasons: ``"eos"`` when the model emitted its end-of-sequence token, ``"stop"`` when a stop string
ended the text (the text is cut before it), ``"length"`` when ``max_new_tokens`` tokens were generated without
either. Tokens counted: the generated tokens up to and including the eos token, or up to the token that completed
the stop string; padding is never counted.

This module does not import torch: a callable generator's worker never loads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from iteralab.errors import RowError, WorkloadError
from iteralab.models.base import text_list
from iteralab.models.callable import CallableWorkload, check_callable_settings
from iteralab.models.generated import FINISH_REASONS, GeneratedBatch, GenerationSettings, check_generation, empty_batch
from iteralab.models.prompts import count_prompt_tokens

# ----------------------------------------------------------------------------------------- finish reasons


def stop_index(text: str, stops: Sequence[str]) -> int | None:
    """Where the earliest stop string starts in ``text``; None when none occurs."""
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(found) if found else None


def finish_row(decode: Any, ids: Sequence[int], eos_ids: frozenset[int], stops: Sequence[str]
               ) -> tuple[str, int, str]:
    """(text, tokens, finish) of one row of generated token ids (the prompt and decoder start removed).

    ``decode(ids) -> str`` drops special tokens. A stop string found in the text before the first eos wins:
    the text is cut before it and the tokens are counted up to the one that completed it. Otherwise the first
    eos gives ``"eos"`` (counted with it), and a row without either ran to ``max_new_tokens``: ``"length"``."""
    ids = list(ids)
    end = next((i for i, t in enumerate(ids) if t in eos_ids), None)
    body = ids if end is None else ids[:end]
    if stops and stop_index(decode(body), stops) is not None:
        for k in range(1, len(body) + 1):
            text = decode(body[:k])
            cut = stop_index(text, stops)
            if cut is not None:
                return text[:cut], k, "stop"
    if end is not None:
        return decode(body), end + 1, "eos"
    return decode(body), len(body), "length"


def require_chat_template(tokenizer: Any, where: Path | str | None) -> None:
    if not getattr(tokenizer, "chat_template", None):
        raise WorkloadError(f"chat_template: the tokenizer in {where} has no chat template",
                            hint="set chat_template = false, or use a folder whose tokenizer has one")


def check_prompts(workload: Any, prompts: Sequence[str]) -> list[int]:
    """Row indexes (into ``prompts``) of the prompts over ``prompt_max_length`` tokens, counted as the model sees
    them. A generator without a tokenizer (a callable without ``path``) cannot count and returns ``[]``: it owns
    its prompt limit. Whether rows over the limit are refused (``allow_truncation`` false) is the caller's call."""
    if getattr(workload, "tokenizer", None) is None:
        return []
    limit = workload.generation.prompt_max_length
    return [i for i, n in enumerate(workload.prompt_token_counts(prompts)) if n > limit]


# ----------------------------------------------------------------------------------------- callable


class CallableGenerator(CallableWorkload):
    """A Python function ``list[str] -> list[str]``, or ``-> (texts, tokens, finish)`` (``tokens``: one count per
    text or None; ``finish``: one of ``stop``/``eos``/``length`` per text or None) — how vLLM, SGLang or a served
    endpoint is brought. The function owns its model and decoding.

    Stop strings: when it returns no finish reasons, a text holding a stop string is cut before it and finishes
    ``"stop"``. Token counts: when it returns none, the tokenizer of ``model.path`` counts the tokens of each
    *stored* text (after the stop-string cut; special tokens not added); without that folder the counts are None,
    "not measured". A re-tokenised count is the tokenizer's count of the text, which may differ slightly from the
    tokens the model generated. A text the tokenizer counts over ``max_new_tokens`` is cut after its first
    ``max_new_tokens`` tokens (at the end of the last kept token, so the kept characters are the callable's own)
    and finishes ``"length"``, as a model the harness runs stops at the limit: the protocol's
    ``max_length_share`` judges how often that happened. Counts the callable returns are kept as given and must lie
    within 0…``max_new_tokens`` (a count beyond the limit is refused, naming the document: without the tokenizer
    the harness cannot cut the text).

    Finish reasons, when it returns none: ``"stop"`` for a text cut at a stop string; ``"length"`` for a text cut
    at the limit or whose count reaches ``max_new_tokens``; otherwise ``"eos"`` (the text ended before any limit:
    the model's end token, as far as the harness can tell; without counts every text not cut at a stop string is
    ``"eos"``, and the length share is not measured). Returned finish reasons are kept, but for a text cut at the
    limit."""

    kind = "callable"

    def __init__(self, ref: str, generation: GenerationSettings, tokenizer_folder: Path | None = None) -> None:
        check_generation(generation)
        super().__init__(ref, ("text",), tokenizer_folder)
        self.classes = ()
        self.generation = generation
        if generation.chat_template and self.tokenizer is not None:
            require_chat_template(self.tokenizer, tokenizer_folder)

    def _call(self, texts: list[str]) -> np.ndarray:
        raise WorkloadError("callable: a generation callable gives texts, not probabilities",
                            hint="call generate(prompts)")

    def generate(self, prompts: Sequence[str]) -> GeneratedBatch:
        items = text_list(prompts)
        if not items:
            return empty_batch()
        return self.check_generated(self.fn(items), len(items))

    def warmup(self, prompts: Sequence[str]) -> None:
        self.generate(prompts)

    def prompt_token_counts(self, prompts: Sequence[str]) -> list[int]:
        if self.tokenizer is None:
            raise WorkloadError("path: a callable generator has no tokenizer for token counts",
                                hint="give path = the folder of the tokenizer the callable uses")
        return count_prompt_tokens(self.tokenizer, prompts, self.generation.chat_template)

    def check_generated(self, out: Any, n: int) -> GeneratedBatch:
        """Validate what the callable returned for ``n`` prompts (one-line errors naming the callable; an error
        about one text is a :class:`~iteralab.errors.RowError`, which the pass turns into the document's id), then
        cut, count and give the finish reasons as the class docstring says."""
        texts_out, tokens_out, finish_out = out, None, None
        if isinstance(out, tuple) and len(out) == 3 and not isinstance(out[0], str):
            texts_out, tokens_out, finish_out = out
        texts = self._texts(texts_out, n)
        given = self._finish(finish_out, n) if finish_out is not None else None
        finish = list(given) if given is not None else ["eos"] * n
        if given is None and self.generation.stop:
            for i, text in enumerate(texts):
                cut = stop_index(text, self.generation.stop)
                if cut is not None:
                    texts[i], finish[i] = text[:cut], "stop"
        tokens = self._tokens(tokens_out, n) if tokens_out is not None else self._count_and_cut(texts, finish)
        if given is None and tokens is not None:
            limit = self.generation.max_new_tokens
            finish = ["length" if f == "eos" and int(t) >= limit else f for f, t in zip(finish, tokens)]
        return GeneratedBatch(texts, tokens, finish)

    def _texts(self, out: Any, n: int) -> list[str]:
        if isinstance(out, np.ndarray) and out.ndim == 1:
            out = out.tolist()
        if out is None or isinstance(out, (str, bytes, dict)) or not isinstance(out, Sequence):
            raise WorkloadError(f"callable: {self.ref} returned {type(out).__name__}, expected {n} texts or "
                                "(texts, tokens, finish)")
        if len(out) != n:
            raise WorkloadError(f"callable: {self.ref} returned {len(out)} texts for {n} prompts",
                                hint="return one text per prompt, in the prompts' order")
        bad = next((i for i, t in enumerate(out) if not isinstance(t, str)), None)
        if bad is not None:
            raise RowError(f"callable: {self.ref} returned {type(out[bad]).__name__} for {{document}}, "
                           "expected a string", bad)
        return list(out)

    def _tokens(self, out: Any, n: int) -> np.ndarray:
        try:
            arr = np.asarray(out)
        except (TypeError, ValueError):
            arr = np.asarray([], dtype=object)
        if arr.shape != (n,) or arr.dtype.kind not in "iu":
            raise WorkloadError(f"callable: {self.ref} returned token counts {type(out).__name__} of shape "
                                f"{list(arr.shape)}, expected {n} integers")
        counts = arr.astype(np.int64)
        limit = self.generation.max_new_tokens
        bad = np.flatnonzero((counts < 0) | (counts > limit))
        if bad.size:
            raise RowError(f"callable: {self.ref} returned {int(counts[bad[0]])} generated tokens for {{document}}, "
                           f"outside 0…max_new_tokens {limit}", int(bad[0]),
                           hint="stop the generation at the protocol's max_new_tokens, or return texts only with "
                                "model.path naming the tokenizer: the harness then cuts a text at the limit")
        return counts.astype(np.int32)

    def _count_and_cut(self, texts: list[str], finish: list[str]) -> np.ndarray | None:
        """The tokenizer's count of each stored text; a text over ``max_new_tokens`` is cut at the limit (in place,
        its finish set to ``length``). None without a tokenizer."""
        if self.tokenizer is None:
            return None
        limit = self.generation.max_new_tokens
        fast = bool(getattr(self.tokenizer, "is_fast", False))
        encoded = self.tokenizer(texts, add_special_tokens=False, truncation=False, padding=False,
                                 return_attention_mask=False, return_offsets_mapping=fast)
        counts = np.array([len(row) for row in encoded["input_ids"]], dtype=np.int64)
        for i in np.flatnonzero(counts > limit):
            offsets = encoded["offset_mapping"][i] if fast else None
            texts[i], counts[i] = self._cut(texts[i], encoded["input_ids"][i], offsets, limit)
            finish[i] = "length"
        return counts.astype(np.int32)

    def _cut(self, text: str, ids: Sequence[int], offsets: Sequence[Any] | None, limit: int) -> tuple[str, int]:
        """``text`` cut after its first ``limit`` tokens, and the tokenizer's count of what is kept (a cut that
        counts more, where tokens merge across the cut, keeps one token less)."""
        for keep in range(limit, 0, -1):
            kept = text[:offsets[keep - 1][1]] if offsets is not None else \
                self.tokenizer.decode(list(ids[:keep]), skip_special_tokens=True)
            count = len(self.tokenizer(kept, add_special_tokens=False)["input_ids"])
            if count <= limit:
                return kept, count
        return "", 0

    def _finish(self, out: Any, n: int) -> list[str]:
        items = list(out) if isinstance(out, Sequence) and not isinstance(out, str) else None
        if items is None or len(items) != n:
            raise WorkloadError(f"callable: {self.ref} returned finish reasons {type(out).__name__}, "
                                f"expected {n} of {', '.join(FINISH_REASONS)}")
        bad = next((i for i, f in enumerate(items) if f not in FINISH_REASONS), None)
        if bad is not None:
            raise RowError(f"callable: {self.ref} returned finish reason {items[bad]!r} for {{document}}, "
                           f"expected one of {', '.join(FINISH_REASONS)}", bad)
        return [str(f) for f in items]

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info["classes"] = []
        info["generation"] = {**self.generation.record(), "decoding": "the callable's own",
                              "tokens": "counted by the tokenizer of path" if self.tokenizer is not None
                              else "not measured unless the callable returns them"}
        return info


def load_callable_generator(callable_ref: str | None, path: str | Path | None, precision: str, compile: bool,
                            generation: GenerationSettings) -> CallableGenerator:
    """A callable generator; the harness applies no precision or compilation to it."""
    callable_ref = check_callable_settings(callable_ref, precision, compile)
    return CallableGenerator(callable_ref, generation, Path(path) if path is not None else None)
