"""The project's one definition of a digest over a list of strings (C1), computed from Arrow buffers.

A list of strings is hashed as SHA-256 over its items in order, each item framed as

- its UTF-8 byte length as an 8-byte little-endian unsigned integer, then its UTF-8 bytes;
- an absent item (``None``, an Arrow null) as the eight bytes ``ff ff ff ff ff ff ff ff`` and nothing after.

So ``["ab", None]`` is ``sha256(b"\\x02\\x00\\x00\\x00\\x00\\x00\\x00\\x00" b"ab" b"\\xff" * 8)``. The framing makes
every list unambiguous (no separator or escaping to get wrong) and the digest independent of how the list is cut:
hashing it in one piece, in chunks, in record batches or from a slice of a larger array gives the same bytes.

The digests built on it: a corpus's ``order_hash`` (its ids in pass order) and a pass's (the ids it wrote, in
the order it wrote them); a corpus ``fingerprint`` (for each record in id order its id then its text: the list
``[id1, text1, id2, text2, ...]``); a lock's ``labels_sha256`` (the reference labels in id order, ``None`` for an
unlabelled record); and, for several datasets, the combined fingerprint (their fingerprints, sorted) and combined
order hash (their order hashes in declaration order).

The framed bytes of an Arrow array are made by Arrow (``binary_join_element_wise`` of the length prefixes and the
values) from the array's offsets and data buffers: no Python string per item.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: The frame of an absent item: a length no string can have.
ABSENT = b"\xff" * 8
#: Items framed per step: bounds the framed bytes held at once.
CHUNK = 1 << 16


def frame(value: str | None) -> bytes:
    """The bytes one item contributes to a digest (the definition above, for one item)."""
    if value is None:
        return ABSENT
    data = value.encode("utf-8")
    return len(data).to_bytes(8, "little") + data


def _binary_from(values: Sequence[str | None]) -> pa.Array:
    """Python strings as an Arrow binary array of their UTF-8 bytes (``None`` as null), from buffers (``pa.array``
    would import pandas). ASCII items take one ``str.join``; any other list is encoded item by item."""
    if not isinstance(values, (list, tuple)):
        values = list(values)
    absent = np.fromiter((v is None for v in values), dtype=bool, count=len(values)) if None in values else None
    present = [v for v in values if v is not None] if absent is not None else values
    joined = "".join(present)  # type: ignore[arg-type]
    data = joined.encode("utf-8")
    if len(data) == len(joined):  # every character ASCII: byte lengths are character lengths
        sizes = np.fromiter(map(len, present), dtype=np.int64, count=len(present))  # type: ignore[arg-type]
    else:
        encoded = [v.encode("utf-8") for v in present]  # type: ignore[union-attr]
        sizes = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    lengths = np.zeros(len(values), dtype=np.int64)
    if absent is None:
        lengths[:] = sizes
    else:
        lengths[~absent] = sizes
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    validity = pa.py_buffer(np.packbits(~absent, bitorder="little")) if absent is not None else None
    return pa.Array.from_buffers(pa.large_binary(), len(values),
                                 [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=int(absent.sum()) if absent is not None else 0)


def _as_binary(values: Any) -> pa.Array:
    """An Arrow string or binary array (large or not, any offset) or a Python sequence, as a large binary array."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if not isinstance(values, pa.Array):
        return _binary_from(values)
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)
            or pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type)):
        raise TypeError(f"a digest is taken over strings, not {values.type}")
    return values.cast(pa.large_binary())


def _prefixes(values: pa.Array) -> pa.Array:
    """The 8-byte length prefix of each item of a large binary array (``ABSENT`` for a null), as a binary array."""
    n = len(values)
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int64)[values.offset:values.offset + n + 1]
    lengths = np.diff(offsets).astype("<u8")
    if values.null_count:
        bits = np.frombuffer(values.buffers()[0], dtype=np.uint8)
        valid = np.unpackbits(bits, bitorder="little")[values.offset:values.offset + n].astype(bool)
        lengths[~valid] = np.frombuffer(ABSENT, dtype="<u8")[0]
    frames = np.arange(0, 8 * (n + 1), 8, dtype=np.int64)
    return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(frames), pa.py_buffer(lengths)])


_NOTHING = pa.Array.from_buffers(pa.large_binary(), 1, [None, pa.py_buffer(np.zeros(2, dtype=np.int64)),
                                                        pa.py_buffer(b"")])[0]


def _framed(*columns: pa.Array) -> memoryview:
    """The frames of the columns' items, row by row (``columns[0][i]``, ``columns[1][i]``, …), as one buffer."""
    parts: list[pa.Array] = []
    for column in columns:
        parts += [_prefixes(column), column]
    joined = pc.binary_join_element_wise(*parts, _NOTHING, null_handling="replace", null_replacement=b"")
    ends = np.frombuffer(joined.buffers()[1], dtype=np.int64)[[joined.offset, joined.offset + len(joined)]]
    return memoryview(joined.buffers()[2])[int(ends[0]):int(ends[1])]


class StringDigest:
    """SHA-256 over the frames of every item given to :meth:`update` (or of every pair given to
    :meth:`update_pairs`, first then second), in order: the definition in this module's docstring."""

    def __init__(self) -> None:
        self._sha = hashlib.sha256()

    def update(self, values: Any) -> None:
        """Items to append: an Arrow string/binary array (or chunked array), or a sequence of ``str``/``None``."""
        values = _as_binary(values)
        for start in range(0, len(values), CHUNK):
            self._sha.update(_framed(values.slice(start, CHUNK)))

    def update_pairs(self, first: Any, second: Any) -> None:
        """The items ``first[0], second[0], first[1], second[1], …`` appended (two columns of equal length)."""
        first, second = _as_binary(first), _as_binary(second)
        if len(first) != len(second):
            raise ValueError(f"pairs of unequal columns ({len(first)} and {len(second)} items)")
        for start in range(0, len(first), CHUNK):
            self._sha.update(_framed(first.slice(start, CHUNK), second.slice(start, CHUNK)))

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


def string_digest(values: Any) -> str:
    """The digest of one list of strings (an Arrow array or a Python sequence)."""
    digest = StringDigest()
    digest.update(values)
    return digest.hexdigest()


def pairs_digest(first: Any, second: Any) -> str:
    """The digest of the list ``[first[0], second[0], first[1], second[1], …]``."""
    digest = StringDigest()
    digest.update_pairs(first, second)
    return digest.hexdigest()


__all__ = ["ABSENT", "CHUNK", "StringDigest", "frame", "pairs_digest", "string_digest"]
