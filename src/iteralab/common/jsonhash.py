"""SHA-256 of the JSON text of a list, fed chunk by chunk, without ``json.dumps`` when it is not needed.

The project's digests are SHA-256 over the ``json.dumps`` of a list: the ids in pass order (``order_hash``), the
(id, text) pairs in id order (a corpus fingerprint), the labels in id order. ``json.dumps`` builds a Python
string per item; for a million ids that is most of the hash's cost. A string with no character that JSON
escapes (no ``"``, no ``\\``, no control character; with ``ensure_ascii``, printable ASCII only) is written by
``json.dumps`` as itself between quotes, so a chunk of such strings is joined directly with ``str.join``; any
other chunk (or an item that is not a string) goes through ``json.dumps``. The bytes hashed are the same either
way.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

#: Bytes of a UTF-8 string that ``json.dumps(ensure_ascii=False)`` writes as themselves: every byte but control
#: characters, ``"`` and ``\\`` (a byte of a multi-byte character is never below 0x80), DEL included.
_KEPT_UTF8 = bytes(b for b in range(256) if b >= 0x20 and b not in (0x22, 0x5C))
#: The same with ``ensure_ascii``: printable ASCII (' ' to '~'; DEL is escaped too) but ``"`` and ``\\``.
_KEPT_ASCII = bytes(b for b in range(0x20, 0x7F) if b not in (0x22, 0x5C))


def _kept(data: bytes, ensure_ascii: bool) -> bool:
    """Every byte of ``data`` (UTF-8) is written by ``json.dumps`` as itself (``bytes.translate`` deletes the
    kept ones: nothing may be left)."""
    return not data.translate(None, _KEPT_ASCII if ensure_ascii else _KEPT_UTF8)


def _plain(strings: Sequence[Any], ensure_ascii: bool) -> bool:
    """Every item is a ``str`` that JSON writes as itself between quotes."""
    if set(map(type, strings)) != {str}:
        return False
    joined = "".join(strings)
    if ensure_ascii and not joined.isascii():  # escaped; and a lone surrogate must reach json.dumps, not encode
        return False
    return _kept(joined.encode("utf-8"), ensure_ascii)


class JsonListHash:
    """SHA-256 of ``json.dumps(items, ensure_ascii=ensure_ascii, separators=(item_separator, ":"))`` for the
    concatenation of every chunk given to :meth:`update` (or of every pair given to :meth:`update_pairs`)."""

    def __init__(self, *, ensure_ascii: bool = True, item_separator: str = ",") -> None:
        self.digest = hashlib.sha256(b"[")
        self.empty = True
        self.ensure_ascii = ensure_ascii
        self.sep = item_separator

    def _feed(self, part: str) -> None:
        self._feed_bytes(part.encode("utf-8"))

    def _feed_bytes(self, data: Any) -> None:
        if not self.empty:
            self.digest.update(self.sep.encode())
        self.digest.update(data)
        self.empty = False

    def _dumps(self, items: list[Any]) -> str:
        return json.dumps(items, ensure_ascii=self.ensure_ascii, separators=(self.sep, ":"))[1:-1]

    def update(self, items: Sequence[Any]) -> None:
        """Items to append to the list (strings take the fast path; anything JSON-able is accepted)."""
        if not len(items):
            return
        if _plain(items, self.ensure_ascii):
            self._feed('"' + f'"{self.sep}"'.join(items) + '"')
        else:
            self._feed(self._dumps(list(items)))

    def update_pairs(self, first: Sequence[Any], second: Sequence[Any]) -> None:
        """The pairs ``[first[i], second[i]]`` appended to the list."""
        if not len(first):
            return
        if _plain(first, self.ensure_ascii) and _plain(second, self.ensure_ascii):
            inner = f'"{self.sep}"'
            self._feed('["' + f'"]{self.sep}["'.join(map(inner.join, zip(first, second))) + '"]')
        else:
            self._feed(self._dumps(list(map(list, zip(first, second)))))

    def hexdigest(self) -> str:
        final = self.digest.copy()
        final.update(b"]")
        return final.hexdigest()


def string_array_hash(values: Any, *, ensure_ascii: bool = True, item_separator: str = ",",
                      chunk: int = 1 << 20) -> str:
    """:class:`JsonListHash` of an Arrow string array's values. A chunk whose bytes JSON writes as themselves
    is joined by Arrow (``binary_join_element_wise``) and hashed from its buffer, without a Python string per
    value; any other chunk (a null, an escaped character) goes through :meth:`JsonListHash.update`."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from iteralab.common.arrow import string_scalars

    digest = JsonListHash(ensure_ascii=ensure_ascii, item_separator=item_separator)
    if values.type != pa.string():
        values = values.cast(pa.string())
    quote, tail, nothing = string_scalars('"', f'"{item_separator}', "")
    for start in range(0, len(values), chunk):
        part = values.slice(start, chunk)
        offsets = np.frombuffer(part.buffers()[1], dtype=np.int32)[part.offset:part.offset + len(part) + 1]
        data = memoryview(part.buffers()[2] or b"")[int(offsets[0]):int(offsets[-1])]
        if part.null_count or not _kept(bytes(data), ensure_ascii):
            digest.update(part.to_pylist())
            continue
        joined = pc.binary_join_element_wise(quote, part, tail, nothing)
        ends = np.frombuffer(joined.buffers()[1], dtype=np.int32)[[joined.offset, joined.offset + len(joined)]]
        digest._feed_bytes(memoryview(joined.buffers()[2])[int(ends[0]):int(ends[1]) - len(item_separator)])
    return digest.hexdigest()
