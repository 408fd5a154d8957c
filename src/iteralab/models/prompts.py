"""Prompts as a language model reads them: rendered through the tokenizer's chat template when asked, and counted
with special tokens and without truncation. Apart from the models themselves, so that ``lock`` and the strata
count prompts without loading any model class."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from iteralab.errors import WorkloadError

#: Prompts counted per tokenizer call.
COUNT_CHUNK = 1024


def _not_text(i: int, value: Any) -> str:
    raise WorkloadError(f"prompts[{i}]: expected a string, got {type(value).__name__}")


def render_prompts(tokenizer: Any, prompts: list[str], chat_template: bool) -> list[str]:
    """The prompts as the model reads them: each as one user message through the tokenizer's chat template
    (with the generation prompt) when ``chat_template``, else unchanged."""
    if not chat_template:
        return prompts
    return [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                          add_generation_prompt=True) for p in prompts]


def count_prompt_tokens(tokenizer: Any, prompts: Sequence[str], chat_template: bool) -> list[int]:
    """Tokens of each rendered prompt, special tokens included (a chat template writes its own, so the
    tokenizer adds none then), without truncation."""
    if isinstance(prompts, str):
        raise WorkloadError("prompts: expected a sequence of strings, got one string", hint="wrap it in a list")
    items = [p if isinstance(p, str) else _not_text(i, p) for i, p in enumerate(prompts)]
    counts: list[int] = []
    for start in range(0, len(items), COUNT_CHUNK):
        rendered = render_prompts(tokenizer, items[start:start + COUNT_CHUNK], chat_template)
        ids = tokenizer(rendered, add_special_tokens=not chat_template, truncation=False, padding=False,
                        return_attention_mask=False)["input_ids"]
        counts.extend(len(row) for row in ids)
    return counts
