"""Python-callable embedding models for tests: deterministic vectors made from the words of a text."""

from __future__ import annotations

import hashlib

import numpy as np

DIM = 16


def _word_vector(word: str) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(word.encode("utf-8")).digest()[:4], "little")
    return np.random.default_rng(seed).standard_normal(DIM)


def word_embedder(texts: list[str]) -> np.ndarray:
    """The normalised mean of fixed per-word vectors: the same text always gives the same vector."""
    rows = []
    for text in texts:
        words = text.lower().replace(",", " ").split() or [""]
        v = np.mean([_word_vector(w) for w in words], axis=0)
        rows.append(v / np.linalg.norm(v))
    return np.asarray(rows, dtype=np.float32)


def batch4_perturbed(texts: list[str]) -> np.ndarray:
    """``word_embedder``, except that a batch of 4 texts gets its vectors turned away from the exact ones (a fast
    configuration that damages the vectors): their cosines with the exact vectors fall to about 0.95."""
    vectors = word_embedder(texts)
    if len(texts) != 4:
        return vectors
    noise = np.stack([_word_vector(f"noise {t}") for t in texts])
    moved = vectors + 0.3 * noise / np.linalg.norm(noise, axis=1, keepdims=True)
    return (moved / np.linalg.norm(moved, axis=1, keepdims=True)).astype(np.float32)


def not_normalised(texts: list[str]) -> np.ndarray:
    return word_embedder(texts) * 2.0
