"""What a generation pass adds to a measured pass (``engines.passes``): the model's generation settings, each
document's prompt rendered from the protocol's template, and the generated texts streamed to the text file
(``campaign.texts``) while the pass runs, so that a pass never holds a corpus of texts.

The measured region runs from the first prompt read to the last decoded text on the host: rendering the prompts,
generating and decoding are inside it, as is streaming the texts to their file (the same work for every
generation variant; its seconds are said in a note of the pass). A bucketed pass orders the documents by their
rendered prompt's token count.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from iteralab.campaign.engines.embedpass import pending_ids
from iteralab.campaign.folder import PREDICTIONS
from iteralab.campaign.records import GENERATED_TEXTS
from iteralab.models.generation import GeneratedBatch, GenerationSettings


def generation_record(protocol: Any) -> dict[str, Any]:
    """A generation job's model record adds how its prompts are built and decoded (other jobs: unchanged)."""
    spec = protocol.generation
    if protocol.task.kind != "generation" or spec is None:
        return {}
    return {"generation": {"task": "generation", "prompt": spec.prompt, "max_new_tokens": spec.max_new_tokens,
                           "stop": list(spec.stop), "chat_template": spec.chat_template,
                           "allow_truncation": spec.allow_truncation, "allow_empty": spec.allow_empty,
                           "reference_column": protocol.corpus.reference_column}}


def is_generation(model: Any) -> bool:
    """Whether the campaign's model record (``campaign.json``'s ``model``) is a generation job's."""
    return (model.get("generation") or {}).get("task") == "generation"


def generation_options(model: Any) -> dict[str, Any]:
    """The factory's keywords of a generation job's model (none for another job)."""
    if not is_generation(model):
        return {}
    spec = model["generation"]
    return {"task": "generation", "generation": GenerationSettings(
        max_new_tokens=int(spec["max_new_tokens"]), stop=tuple(spec["stop"]), chat_template=bool(spec["chat_template"]),
        allow_truncation=bool(spec["allow_truncation"]), prompt_max_length=int(model["max_length"]))}


class PromptWorkload:
    """A generator seen through the pass's workload interface: ``tokenize`` renders the documents' prompts,
    ``infer`` generates (greedy) and returns the batch's :class:`GeneratedBatch`, ``token_lengths`` counts the
    rendered prompts (bucketing); ``describe`` and ``file_hashes`` are the generator's."""

    def __init__(self, generator: Any, template: str) -> None:
        self.generator = generator
        self.template = template
        self.kind = generator.kind

    def tokenize(self, texts: Sequence[str]) -> list[str]:
        return [self.template.format(text=t) for t in texts]

    def infer(self, prompts: list[str]) -> GeneratedBatch:
        return self.generator.generate(prompts)

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        prompts = self.tokenize(texts)
        if getattr(self.generator, "tokenizer", None) is None:  # a callable without a tokenizer: characters
            return [len(p) for p in prompts]
        return list(self.generator.prompt_token_counts(prompts))

    def describe(self) -> dict[str, Any]:
        return {**self.generator.describe(), "prompt": self.template}

    def file_hashes(self) -> dict[str, str]:
        return self.generator.file_hashes()

    def __getattr__(self, name: str) -> Any:  # compile_record and the like: the generator's own
        return getattr(self.generator, name)


def flush_texts(pass_run: Any, final: bool = False) -> None:
    """The completed rows' texts handed to the text file (which writes record batches of its own size), in pass
    order (a bucketed pass: its length order, the ids taken in that order)."""
    pending = pass_run.progress.completed - pass_run.flushed
    if not pending:
        return
    t0 = time.perf_counter()
    batches: list[GeneratedBatch] = list(pass_run.outputs)
    pass_run.outputs.clear()
    texts = [t for b in batches for t in b.texts]
    finish = [f for b in batches for f in b.finish]
    tokens = None if any(b.tokens is None for b in batches) else np.concatenate(
        [np.asarray(b.tokens, dtype=np.int32) for b in batches]) if batches else None
    ids = pending_ids(pass_run, pending)
    pass_run.sink.write(ids, texts, tokens, finish)
    pass_run.flushed += pending
    pass_run.stream_s += time.perf_counter() - t0


def finish_texts(pass_run: Any, result: dict[str, Any]) -> None:
    """After the measured region: the last rows written, the file closed and renamed, its hash."""
    flush_texts(pass_run, final=True)
    sink = pass_run.sink
    result["output_kind"] = GENERATED_TEXTS
    result["prediction_sha256"] = sink.close()
    result["prediction_file"] = f"{PREDICTIONS}/{sink.path.name}"
    result["notes"].append(f"pass_s includes rendering the prompts and streaming the texts to the prediction file "
                           f"({pass_run.stream_s:.3f} s of writing), as every generation variant's pass does")
