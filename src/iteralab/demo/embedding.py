"""The embedding demo: all-MiniLM-L6-v2's own vectors (mean pooling, L2-normalised) of the classification demo's
1,000 texts, judged by their cosine with the fp32 batch-8 reference's vectors (``embedding.min_cosine``) and by
leave-one-out kNN label accuracy, whose threshold is chosen on the tuning split only.

Reads the demo's data and model (``demo.data``); writes ``data/`` and ``protocol.toml`` (rendered from
``embedding.toml.tmpl``), not yet locked. ``demo.run`` locks it and runs the campaign.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from iteralab.campaign.kinds.embedding.knn import knn_correct
from iteralab.demo import DEFAULT_DOCS, DEFAULT_PASSES
from iteralab.demo.data import DEMO_STRATA, write_demo_data
from iteralab.demo.protocol import (CLASS_TOLERANCE, CLASSES, JOB_DOCUMENTS, MAX_LENGTH, MODEL_REF, PASS_TIMEOUT,
                                    STRATUM_TOLERANCE, TOLERANCE, quick_note, render, toml_str)
from iteralab.plan.prepare import suggest_threshold

#: Every document's cosine with the reference vector must reach this (fixed before any pass). Measured on the
#: 60-text quick try (2-core Xeon with avx512_bf16): dynamic int8 0.888 (an earlier measurement over the 1,000
#: texts: near 0.81), bf16 0.99994, the fp32 batch variants 1.0000.
MIN_COSINE = 0.99
#: Neighbours of the kNN label vote (leave-one-out, by cosine).
KNN_K = 10
#: Seeded draws of the tuning split at the final corpus's size whose mean kNN accuracy sets the threshold.
DRAWS = 20
#: The reference variant's settings, used to embed the tuning split.
REFERENCE_BATCH = 8
#: The embedding demo's protocol with ``$name`` placeholders, filled by :func:`embedding_protocol_text`.
EMBEDDING_TEMPLATE = Path(__file__).with_name("embedding.toml.tmpl")


def draw_counts(available: Mapping[str, int], wanted: Mapping[str, int]) -> dict[str, int]:
    """``wanted`` rows per stratum, all scaled down by one factor where a stratum holds fewer (``available``)."""
    scale = min([1.0] + [available.get(name, 0) / n for name, n in wanted.items() if n])
    return {name: math.floor(round(n * scale, 9)) for name, n in wanted.items()}


def knn_accuracy_at_size(vectors: np.ndarray, labels: np.ndarray, strata: Sequence[str], wanted: Mapping[str, int],
                         k: int, *, draws: int = DRAWS, seed: int = 0) -> tuple[float, int]:
    """Mean leave-one-out ``k``-NN label accuracy over ``draws`` seeded samples of the rows holding ``wanted`` rows
    of each stratum (:func:`draw_counts`), and the rows per sample. A kNN accuracy depends on how many neighbours
    the pool holds and on its length mix: measured on the whole tuning split, it would not be the figure the final
    corpus can reach (on the 60-document quick try, 0.60 on 200 tuning texts against 0.55 on the final 60)."""
    names = np.asarray(strata)
    take = draw_counts({name: int((names == name).sum()) for name in wanted}, wanted)
    rng = np.random.default_rng(seed)
    scores = []
    for _ in range(draws):
        rows = np.concatenate([rng.choice(np.flatnonzero(names == name), n, replace=False)
                               for name, n in take.items() if n])
        scores.append(float(knn_correct(vectors[rows], labels[rows], k).mean()))
    return float(np.mean(scores)), sum(take.values())


def embedding_protocol_text(*, model_ref: str, threshold: float, how: str, passes: int, docs: int,
                            full: bool) -> str:
    """The embedding demo's protocol, fixed before any timed pass (P1)."""
    return render(
        EMBEDDING_TEMPLATE, note=quick_note(docs, passes, full), docs=docs, min_cosine=MIN_COSINE, k=KNN_K,
        threshold=f"{threshold:.2f}", how=how, passes=passes, tolerance=TOLERANCE,
        stratum_tolerance=STRATUM_TOLERANCE, class_tolerance=CLASS_TOLERANCE, model_ref=toml_str(model_ref),
        max_length=MAX_LENGTH, job_documents=JOB_DOCUMENTS, pass_timeout=PASS_TIMEOUT)


def build_embedding_inputs(out: Path, *, docs: int, passes: int, tuning_size: int, seed: int,
                           emit: Callable[[str], None]) -> Path:
    """Data splits (the classification demo's), the threshold from the tuning split's vectors, the protocol file;
    returns the protocol path (not yet locked)."""
    from iteralab.models.head import embed_texts

    model_dir, splits = write_demo_data(out, docs=docs, tuning_size=tuning_size, seed=seed, emit=emit)
    tuning = splits.tuning
    emit(f"embedding the {len(tuning)} tuning texts with MiniLM (fp32, batch {REFERENCE_BATCH}, mean pooling, "
         "L2-normalised)")
    vectors = embed_texts(model_dir, list(tuning.texts), batch_size=REFERENCE_BATCH, max_length=MAX_LENGTH)
    labels = np.array([CLASSES.index(str(label)) for label in tuning.labels], dtype=np.int64)
    final_strata = [splits.strata[i] for i in splits.final.ids]
    wanted = {name: final_strata.count(name) for name in DEMO_STRATA}
    measured, size = knn_accuracy_at_size(vectors, labels, [splits.strata[i] for i in tuning.ids], wanted, KNN_K,
                                          seed=seed)
    threshold, how = suggest_threshold(
        measured, f"leave-one-out {KNN_K}-NN label accuracy (mean of {DRAWS} seeded draws of {size} texts in the "
                  "final corpus's length mix)", f"tuning.csv ({len(tuning)} texts)")
    emit(f"quality bar from the tuning split: {how} → threshold {threshold:.2f}")
    protocol = out / "protocol.toml"
    protocol.write_text(embedding_protocol_text(model_ref=MODEL_REF, threshold=threshold, how=how, passes=passes,
                                                docs=docs, full=docs == DEFAULT_DOCS and passes == DEFAULT_PASSES),
                        encoding="utf-8")
    return protocol
