"""Evaluation routines for an embedding job's tests (``[metric] routine`` on vectors): NumPy only, whole arrays.

``knn_accuracy`` re-implements the built-in leave-one-out kNN label accuracy (``embedding.knn``) independently: a full
cosine matrix, neighbours by a stable sort, the same vote (one per neighbour, ties to the more similar side)."""

from __future__ import annotations

import numpy as np

K = 3


def knn_accuracy_of(vectors: np.ndarray, labels: np.ndarray, k: int = K) -> np.ndarray:
    """Per document: whether its k most cosine-similar other documents vote for its own label."""
    unit = vectors.astype(np.float64)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    sims = unit @ unit.T
    np.fill_diagonal(sims, -np.inf)
    k = min(k, len(vectors) - 1)
    classes = sorted(set(labels.tolist()))
    out = np.zeros(len(vectors), dtype=bool)
    for i in range(len(vectors)):
        near = np.argsort(-sims[i], kind="stable")[:k]
        votes = {c: 0.0 for c in classes}
        for j in near:
            votes[labels[j]] += 1.0 + (sims[i, j] + 1.0) / (2.0 * k + 3.0)
        out[i] = max(classes, key=lambda c: (votes[c], -classes.index(c))) == labels[i]
    return out


def knn_accuracy(*, ids, outputs, references):
    """Leave-one-out kNN label accuracy of the vectors handed (documents without a label left out)."""
    assert outputs.dtype == np.float32 and outputs.shape[0] == len(ids)
    labelled = references != ""
    return float(knn_accuracy_of(outputs[labelled], references[labelled]).mean())


def mean_norm(*, ids, outputs, references):
    """The mean vector norm (1.0 for normalised vectors): a corpus without labels is handed references None."""
    assert references is None
    return float(np.linalg.norm(outputs, axis=1).mean())


def spread(*, ids, outputs, references):
    """Lower is better: one minus the mean cosine with the first document (not in [0, 1] bounds by design)."""
    unit = outputs / np.linalg.norm(outputs, axis=1, keepdims=True)
    return float(10.0 * (1.0 - (unit @ unit[0]).mean()))


def raises_on_batch4(*, ids, outputs, references):
    """Raises on a pass of ``fake_embedders.batch4_perturbed`` whose vectors moved (the b4 variant)."""
    import fake_embedders
    from embedding_jobs import corpus_rows

    texts = {i: t for i, t, _ in corpus_rows()}
    exact = fake_embedders.word_embedder([texts[i] for i in ids])
    worst = float(np.min(np.sum(exact * outputs, axis=1)))
    if worst < 0.999:
        raise ValueError(f"vectors moved (min cosine {worst:.3f})\nsecond line never shown")
    return 1.0


def mrr_at_3(*, ids, outputs, references, queries):
    """MRR@3 of the queries handed (``metric.queries``), by a full stable sort of the cosines: no shared code with
    the built-in ranking. Checks what it is handed: the query ids in file order, one vector per query."""
    assert queries.vectors.dtype == np.float32 and queries.vectors.shape == (len(queries.ids), outputs.shape[1])
    assert len(queries.relevant) == len(queries.ids) and queries.grades is None
    docs = outputs.astype(np.float64)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    total = 0.0
    for vector, relevant in zip(queries.vectors.astype(np.float64), queries.relevant):
        order = np.argsort(-(docs @ (vector / np.linalg.norm(vector))), kind="stable")[:3]
        ranks = [r for r, j in enumerate(order, start=1) if ids[j] in relevant]
        total += 1.0 / ranks[0] if ranks else 0.0
    return total / len(queries.ids)
