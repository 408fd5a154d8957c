"""Data-parallel layout (X3): which devices the workers of a pass get, and which rows of the corpus each one runs.

Reads the campaign's corpus copy and the model's tokenizer; writes nothing. Used by
:mod:`iteralab.campaign.engines.parallel`.

Sharding. The corpus is cut into ``N`` *contiguous* row ranges whose token counts are as equal as the documents
allow: cut ``k`` is the row boundary whose cumulative token count is nearest to ``k × total / N``. Each shard
therefore differs from ``total / N`` by at most one document's tokens, and concatenating the shards in order
gives back the file order exactly, so the merged prediction file of a fixed-order pass is in the same order
(same order hash) as a single-device pass, and each worker streams its rows from the file. A longest-first
(LPT) assignment of sorted documents would balance a few very long documents slightly better but destroys the
pass order and needs every worker to read the whole corpus by index; with thousands of documents per shard
the contiguous cut is already within a fraction of a percent (``bench/bench_parallel.py`` prints it).

A document's cost is what the workload will run: its token count by the model's own tokenizer (special tokens
included), capped at ``max_length`` when the model truncates, and ``max_length`` for every document under
``padding = "max_length"``; for a generation job, its rendered prompt's (the template, the columns it names and
the chat template when declared), as the model reads it. A Python callable without a tokenizer folder has no
token count: its documents (a generation job's prompts) are weighed by their length in characters, and the unit
is recorded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow.compute as pc

from iteralab.campaign.folder import read_corpus_batches
from iteralab.campaign.kinds.registry import kind_named
from iteralab.campaign.records import PassSpec
from iteralab.errors import WorkloadError
from iteralab.models.cards import is_rocm, one_card_env, physical_ids
from iteralab.models.prompts import count_prompt_tokens
from iteralab.models.tokens import load_tokenizer, token_counter


def plan_shards(lengths: np.ndarray, n: int) -> np.ndarray:
    """Bounds ``b`` of ``n`` contiguous shards (shard ``k`` is rows ``b[k]:b[k+1]``) with token counts as equal
    as possible; a document of length 0 weighs 1. Fewer documents than shards leaves some shards empty."""
    if n < 1:
        raise ValueError("n must be at least 1")
    weights = np.maximum(np.asarray(lengths, dtype=np.int64), 1)
    m = len(weights)
    cum = np.concatenate([np.zeros(1, np.int64), np.cumsum(weights)])
    targets = cum[-1] * np.arange(1, n, dtype=np.float64) / n
    right = np.minimum(np.searchsorted(cum, targets, side="left"), m)
    left = np.maximum(right - 1, 0)
    nearest = np.where(np.abs(cum[left] - targets) <= np.abs(cum[right] - targets), left, right)
    bounds = np.concatenate([[0], nearest, [m]]).astype(np.int64)
    return np.maximum.accumulate(bounds)


def shard_tokens(lengths: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    weights = np.maximum(np.asarray(lengths, dtype=np.int64), 1)
    cum = np.concatenate([np.zeros(1, np.int64), np.cumsum(weights)])
    return cum[bounds[1:]] - cum[bounds[:-1]]


def imbalance(values: list[float] | np.ndarray) -> float | None:
    """Largest / smallest (1.0 = perfectly even); None when a value is missing or zero (an empty shard)."""
    vals = [v for v in values]
    if not vals or any(v is None for v in vals) or min(vals) <= 0:
        return None
    return float(max(vals)) / float(min(vals))


def corpus_lengths(spec: PassSpec) -> tuple[np.ndarray, str]:
    """Each document's cost (see the module docstring) in file order, and its unit ("tokens"/"characters")."""

    model, variant = spec.model, spec.variant
    max_length = int(model["max_length"])
    folder = model.get("path")
    prompts = kind_named(spec.kind).prompts(model)  # e.g. a generation job: each document's rendered prompt
    texts = (prompts(b).column("text") if prompts else b.column(0)  # streamed: one record batch at a time
             for b in read_corpus_batches(spec.corpus_path, prompts.columns if prompts else ["text"]))
    if model["kind"] == "callable" and not folder:
        chunks = [pc.utf8_length(t).to_numpy(zero_copy_only=False) for t in texts]
        return (np.concatenate(chunks).astype(np.int64) if chunks else np.zeros(0, np.int64)), "characters"
    if variant.get("padding") == "max_length":
        count = sum(len(t) for t in texts)
        return np.full(count, max_length, dtype=np.int64), "tokens"

    tokenizer = load_tokenizer(folder)
    chat = prompts.chat_template if prompts else False
    counter = (lambda items: count_prompt_tokens(tokenizer, items, chat)) if prompts else token_counter(tokenizer)
    chunks = [np.asarray(counter(t.to_pylist()), dtype=np.int64) for t in texts]
    lengths = np.concatenate(chunks) if chunks else np.zeros(0, np.int64)
    if model.get("truncation", True):
        lengths = np.minimum(lengths, max_length)
    return lengths, "tokens"


# ------------------------------------------------------------------------------------------- devices


@dataclass(frozen=True)
class Layout:
    """Where the ``n`` workers run: ``kind`` "gpu" (one card each) or "cpu" (processes sharing the cores)."""

    kind: str
    labels: tuple[str, ...]
    #: each worker's environment over the runner's (None: the variable is removed)
    envs: tuple[dict[str, str | None], ...]
    device: str  # the device name each worker resolves ("cuda": its one visible card; "cpu")
    threads: int | None = None
    #: on GPUs, the physical card of each worker (as the visibility variables name it)
    physical: tuple[str, ...] = ()

    @property
    def n(self) -> int:
        return len(self.labels)

    def describe(self) -> str:
        """'2 cards' or '2 CPU processes (1 torch thread each)': CPU processes are never called cards."""
        if self.kind == "gpu":
            return f"{self.n} card{'s' if self.n != 1 else ''}"
        return (f"{self.n} CPU process{'es' if self.n != 1 else ''} ({self.threads} torch thread"
                f"{'s' if self.threads != 1 else ''} each)")


def visible_gpu_count() -> int:
    """GPUs this machine's PyTorch sees. Counting does not create a CUDA context, and workers are fresh
    interpreters (never forked from this process), so it is safe before they start."""
    import torch

    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def worker_layout(device_name: str, n: int, gpu_count: Any = None, rocm: bool | None = None) -> Layout:
    """The devices of ``n`` workers for a variant's device name ("cpu", "auto", "cuda"). On GPUs each worker
    sees exactly one physical card (the visibility variable its runtime reads first, set before its interpreter
    starts: :mod:`iteralab.models.cards`); fewer cards than workers is refused, never run on fewer devices. On CPU
    the cores are split between the processes. ``rocm``: whether torch is a ROCm build (default: asked)."""
    text = str(device_name).strip().lower()
    count = 0
    if text != "cpu":
        count = (gpu_count or visible_gpu_count)()
        if count == 0 and text != "auto":
            raise WorkloadError(f"device: {device_name!r} requested for data_parallel = {n} but this machine's "
                                "PyTorch sees no GPU", hint="run on a machine with the cards, or use device 'cpu'")
    if count > 0:
        if count < n:
            raise WorkloadError(f"data_parallel = {n} needs {n} GPUs; this machine shows {count}",
                                hint="rent a machine (or more lots) with enough cards; a pass never runs on "
                                     "fewer devices than declared")

        rocm = is_rocm() if rocm is None else rocm
        ids = physical_ids(count, rocm)[:n]
        envs = tuple({**one_card_env(ids[k], rocm), "TOKENIZERS_PARALLELISM": "false"} for k in range(n))
        return Layout("gpu", tuple(f"cuda:{k}" for k in range(n)), envs, "cuda", physical=tuple(ids))
    threads = max(1, cpu_cores() // n)
    env = {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "TOKENIZERS_PARALLELISM": "false"}
    return Layout("cpu", tuple(f"cpu-process-{k}" for k in range(n)), tuple(dict(env) for _ in range(n)), "cpu",
                  threads)
