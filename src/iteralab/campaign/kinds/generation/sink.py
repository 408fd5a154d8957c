"""A generation pass's sink (:class:`TextSink`) and model options: the model's generation settings, each
document's prompt rendered from the protocol's template as the corpus copy is read (its text, and the cells of
the other columns the template names, kept in the copy as ``prompt.<name>``), and the generated texts streamed to
the text file (``output.py``) while the pass runs, so that a pass never holds a corpus of texts. A
data-parallel pass (``engines.parallel``) streams its shards' text files into the pass's one file in shard order;
a Ray pass (``engines.raypass``) renders in its actors and streams the blocks to the file in corpus order.

The measured region runs from the first prompt read to the last decoded text on the host: rendering the prompts,
generating and decoding are inside it, as is streaming the texts to their file (the same work for every
generation variant; its seconds are said in a note of the pass). A bucketed pass orders the documents by their
rendered prompt's token count; its text file is rewritten in corpus order after the measured region
(``kinds.corpusorder``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from iteralab.campaign.kinds.generation.output import TextWriter, text_batches
from iteralab.campaign.kinds.sink import StreamingSink, pending_ids
from iteralab.campaign.records import GENERATED_TEXTS
from iteralab.models.generated import GeneratedBatch, GenerationSettings
from iteralab.plan.prompting import TEXT_FIELD, copy_column, render_prompts, template_fields


def generation_record(protocol: Any) -> dict[str, Any]:
    """A generation job's model record adds how its prompts are built and decoded (other jobs: unchanged)."""
    spec = protocol.generation
    if protocol.task.kind != "generation" or spec is None:
        return {}
    return {"generation": {"task": "generation", "prompt": spec.prompt, "max_new_tokens": spec.max_new_tokens,
                           "stop": list(spec.stop), "chat_template": spec.chat_template,
                           "allow_truncation": spec.allow_truncation, "allow_empty": spec.allow_empty,
                           "reference_column": protocol.corpus.reference_column}}


def generation_options(model: Any) -> dict[str, Any]:
    """The factory's keywords of a generation job's model: its task and generation settings."""
    spec = model["generation"]
    return {"task": "generation", "generation": GenerationSettings(
        max_new_tokens=int(spec["max_new_tokens"]), stop=tuple(spec["stop"]), chat_template=bool(spec["chat_template"]),
        allow_truncation=bool(spec["allow_truncation"]), prompt_max_length=int(model["max_length"]))}


class PromptRenderer:
    """A generation pass's prompts, rendered as the corpus copy is read: :attr:`columns` are what the pass reads
    (id, text and the copy's cells of each column the template names), and each record batch read becomes the
    record batch (id, text = the document's rendered prompt)."""

    def __init__(self, template: str, chat_template: bool = False) -> None:
        self.template = template
        #: whether the model reads each prompt through its tokenizer's chat template (what its token count is of)
        self.chat_template = chat_template
        self.names = [name for name in template_fields(template) if name != TEXT_FIELD]
        self.columns = ["id", "text", *(copy_column(name) for name in self.names)]

    def __call__(self, batch: Any) -> pa.RecordBatch:
        """A record batch (or a table: a Ray batch) of the columns read, as (id, text = the rendered prompt)."""
        cells = {name: batch.column(copy_column(name)).to_pylist() for name in self.names}
        prompts = render_prompts(self.template, batch.column("text").to_pylist(), cells)
        ids = batch.column("id")
        ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
        return pa.record_batch([ids, pa.array(prompts, pa.string())], names=["id", "text"])


class PromptWorkload:
    """A generator seen through the pass's workload interface. The pass hands it prompts already rendered
    (:class:`PromptRenderer`): ``tokenize`` passes them on, ``infer`` generates (greedy) and returns the batch's
    :class:`GeneratedBatch`, ``token_lengths`` counts them (bucketing); ``describe`` and ``file_hashes`` are the
    generator's."""

    def __init__(self, generator: Any, template: str) -> None:
        self.generator = generator
        self.template = template
        self.kind = generator.kind

    def tokenize(self, prompts: Sequence[str]) -> list[str]:
        return list(prompts)

    def infer(self, prompts: list[str]) -> GeneratedBatch:
        return self.generator.generate(prompts)

    def token_lengths(self, prompts: Sequence[str]) -> list[int]:
        if getattr(self.generator, "tokenizer", None) is None:  # a callable without a tokenizer: characters
            return [len(p) for p in prompts]
        return list(self.generator.prompt_token_counts(list(prompts)))

    def describe(self) -> dict[str, Any]:
        return {**self.generator.describe(), "prompt": self.template}

    def file_hashes(self) -> dict[str, str]:
        return self.generator.file_hashes()

    def __getattr__(self, name: str) -> Any:  # compile_record and the like: the generator's own
        return getattr(self.generator, name)


def generated_columns(batch: GeneratedBatch) -> dict[str, pa.Array]:
    """A batch's outputs as the text file's columns text, tokens (null: not measured) and finish (a Ray block)."""
    n = len(batch.texts)
    tokens = pa.nulls(n, pa.int32()) if batch.tokens is None else \
        pa.array(np.asarray(batch.tokens, dtype=np.int32))
    return {"text": pa.array(batch.texts, pa.string()), "tokens": tokens, "finish": pa.array(batch.finish, pa.string())}


class TextSink(StreamingSink):
    """Generated texts, handed to the text file as the pass runs (the file writes record batches of its own
    size; never a corpus of texts held)."""

    output_kind = GENERATED_TEXTS
    streamed_work = "rendering the prompts and streaming the texts to the prediction file"
    kind_word = "generation"

    def __init__(self, target: Path, classes: Any) -> None:
        super().__init__(target, classes)
        self.writer = TextWriter(self.target)

    def flush(self, pass_run: Any, final: bool = False) -> None:
        """The completed rows' texts handed to the text file, in pass order (a bucketed pass: its length order, the
        ids taken in that order)."""
        pending = pass_run.progress.completed - self.flushed
        if not pending:
            return
        t0 = time.perf_counter()
        batches: list[GeneratedBatch] = list(pass_run.outputs)
        pass_run.outputs.clear()
        texts = [t for b in batches for t in b.texts]
        finish = [f for b in batches for f in b.finish]
        tokens = None if any(b.tokens is None for b in batches) else np.concatenate(
            [np.asarray(b.tokens, dtype=np.int32) for b in batches]) if batches else None
        self.writer.write(pending_ids(pass_run, self.flushed, pending), texts, tokens, finish)
        self.flushed += pending
        self.stream_s += time.perf_counter() - t0

    def shard_batches(self, part: Path) -> Iterator[pa.RecordBatch]:
        return text_batches(part)

    def ray_columns(self, out: Any) -> dict[str, pa.Array]:
        return generated_columns(out)
