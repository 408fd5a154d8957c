"""What ``lock`` keeps of a corpus read in record batches (P2, K6): its per-id records and overlap keys.

Both are sinks of :func:`iteralab.plan.scan.scan_corpus`. :class:`LockRecords` keeps per document the id, the
16-hex digest of its text and its label as Arrow and NumPy arrays (bytes, not a Python object per document),
then writes the lock's compressed records (:data:`RECORDS_ENCODING`) in id order, chunk by chunk (the tests
compare them with a whole-read oracle, ``tests/support/oracles.py``). :class:`OverlapKeys`
keeps a 64-bit digest of each id and of each whitespace-normalised text (NumPy arrays), so that datasets are
checked disjoint by comparing sorted digests; the texts are read again only to name a collision the digests
point at.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from iteralab.plan.corpus import text_fingerprint
from iteralab.plan.scan import HASH_ROWS, Batch, CorpusScan

#: How a lock stores its per-id records: the JSON list of ``[id, text digest, label]`` sorted by id, zlib-compressed
#: and base64-encoded, so that a lock of a million documents is a few MB that parses into one string, not a
#: Python object per document.
RECORDS_ENCODING = "zlib+base64:json-list[id,text_sha256_16,label]"
#: zlib level of the lock's compressed records (as ``zlib.compress(rows, 6)``).
RECORDS_LEVEL = 6


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _encoded(values: list[str | None]) -> Any:
    """Strings as an Arrow binary array of their UTF-8 bytes (a lone surrogate kept, as the lock's JSON keeps
    it; byte order is then id order), ``None`` as null. Built from buffers: ``pa.array`` on a list would import
    pandas, tens of MB for nothing."""

    encoded = [b"" if v is None else v.encode("utf-8", "surrogatepass") for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
    absent = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
    nulls = int(absent.sum())
    validity = pa.py_buffer(np.packbits(~absent, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(pa.binary(), len(encoded), [validity, pa.py_buffer(offsets),
                                                             pa.py_buffer(b"".join(encoded))], null_count=nulls)


def _decoded(values: list[bytes | None]) -> list[str | None]:
    return [None if v is None else v.decode("utf-8", "surrogatepass") for v in values]


class LockRecords:
    """A sink keeping ``[id, text digest, label]`` per document, compactly; :meth:`fingerprint` makes the lock's
    record of the corpus from them and the scan's digests."""

    def __init__(self) -> None:
        self._start()

    def _start(self) -> None:
        self.ids: list[Any] = []
        self.hashes: list[Any] = []
        self.labels: list[Any] = []

    def __call__(self, batch: Batch | None) -> None:
        if batch is None:  # the scan starts again from the first record
            self._start()
            return
        self.ids.append(_encoded(batch.ids))
        self.hashes.append(np.array([_short_hash(t) for t in batch.texts], dtype="S16"))
        self.labels.append(_encoded(batch.labels))

    def records_data(self) -> str:
        """The JSON list of ``[id, text digest, label]`` sorted by id, zlib-compressed and base64-encoded,
        written ``HASH_ROWS`` records at a time."""

        ids = pa.chunked_array(self.ids, pa.binary())
        hashes = np.concatenate(self.hashes) if self.hashes else np.empty(0, "S16")
        labels = pa.chunked_array(self.labels, pa.binary())
        order = pc.sort_indices(ids)
        # the same indices as NumPy, from the buffer (``to_numpy`` would import pandas)
        positions = np.frombuffer(order.buffers()[1], dtype=np.uint64)[order.offset:order.offset + len(order)]
        packer = zlib.compressobj(RECORDS_LEVEL)
        parts = [packer.compress(b"[")]
        for start in range(0, len(order), HASH_ROWS):
            rows = order.slice(start, HASH_ROWS)
            chunk = list(zip(_decoded(ids.take(rows).to_pylist()),
                             hashes[positions[start:start + HASH_ROWS]].astype("U16").tolist(),
                             _decoded(labels.take(rows).to_pylist())))
            text = json.dumps([list(row) for row in chunk], ensure_ascii=False, separators=(",", ":"))[1:-1]
            parts.append(packer.compress(((",") if start else "").encode() + text.encode("utf-8", "surrogatepass")))
        parts.append(packer.compress(b"]"))
        parts.append(packer.flush())
        return base64.b64encode(b"".join(parts)).decode("ascii")

    def fingerprint(self, scan: CorpusScan) -> dict[str, Any]:
        """The lock's record of the scanned corpus: size, fingerprint, id origin, labels digest, per-id records."""
        return {"size": scan.size, "fingerprint": scan.fingerprint, "id_origin": scan.id_origin,
                "labels_sha256": scan.labels_sha256,
                "records": {"encoding": RECORDS_ENCODING, "data": self.records_data()}}


def id_key(value: str) -> int:
    """64-bit digest of an id."""
    return int.from_bytes(hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


def text_key(text: str) -> int:
    """64-bit digest of a whitespace-normalised text (the first 16 hex of its fingerprint)."""
    return int(text_fingerprint(text)[:16], 16)


def keys_of(values: list[str], key: Any) -> np.ndarray:
    """``key`` of each value, as a NumPy array of 64-bit digests."""
    return np.fromiter(map(key, values), dtype=np.uint64, count=len(values))


class OverlapKeys:
    """A sink keeping the 64-bit digests of each document's id and normalised text (8 bytes each)."""

    def __init__(self) -> None:
        self._start()

    def _start(self) -> None:
        self.id_parts: list[np.ndarray] = []
        self.text_parts: list[np.ndarray] = []

    def __call__(self, batch: Batch | None) -> None:
        if batch is None:
            self._start()
            return
        self.id_parts.append(keys_of(batch.ids, id_key))
        self.text_parts.append(keys_of(batch.texts, text_key))

    def ids(self) -> np.ndarray:
        """The distinct id digests, sorted."""
        return np.unique(np.concatenate(self.id_parts)) if self.id_parts else np.empty(0, np.uint64)

    def texts(self) -> np.ndarray:
        """The distinct text digests, sorted."""
        return np.unique(np.concatenate(self.text_parts)) if self.text_parts else np.empty(0, np.uint64)


def shared_keys(keys: list[np.ndarray]) -> np.ndarray:
    """The digests present in at least two of ``keys`` (each distinct, sorted), sorted."""
    if len(keys) < 2:
        return np.empty(0, np.uint64)
    values, counts = np.unique(np.concatenate(keys), return_counts=True)
    return values[counts > 1]


class Suspects:
    """A sink keeping, in file order, the ``(id, text)`` of the documents whose id or text digest is among the
    shared ones: what the exact overlap check needs to name a collision, and nothing else."""

    def __init__(self, ids: np.ndarray, texts: np.ndarray) -> None:
        self.id_keys, self.text_keys = ids, texts
        self.rows: list[tuple[str, str]] = []

    def __call__(self, batch: Batch | None) -> None:
        if batch is None:
            self.rows = []
            return
        hit = np.isin(keys_of(batch.ids, id_key), self.id_keys) | np.isin(keys_of(batch.texts, text_key),
                                                                          self.text_keys)
        self.rows.extend((batch.ids[i], batch.texts[i]) for i in np.flatnonzero(hit))


def corpus_fields(by_source: dict[str | None, Any]) -> dict[str, Any]:
    """The lock's inputs record of the corpus files, given each source's fingerprint by source name: ``corpus``
    for a one-corpus protocol (its one source is named None), or ``corpus`` null and ``datasets`` by name (K6).
    :func:`corpus_fingerprints` reads it back."""
    if list(by_source) == [None]:
        return {"corpus": by_source[None]}
    return {"corpus": None, "datasets": dict(by_source)}


def corpus_fingerprints(inputs: dict[str, Any]) -> dict[str | None, Any]:
    """Each corpus source's fingerprint in a lock's inputs record, by source name (None: the one corpus)."""
    datasets = inputs.get("datasets")
    return dict(datasets) if datasets else {None: inputs.get("corpus")}


__all__ = ["LockRecords", "OverlapKeys", "Suspects", "corpus_fields", "corpus_fingerprints", "id_key", "keys_of",
           "shared_keys", "text_key"]
