"""Arrow arrays built from buffers, and Arrow's unused memory handed back (:func:`release_unused`). ``pa.array``
and ``pa.scalar`` look for pandas objects first, which imports pandas: a quarter to half a second in every pass
worker that never uses it. These build the same arrays from their buffers, so a worker that handles only NumPy
and Arrow data never imports pandas."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa


def numpy_array(values: np.ndarray) -> pa.Array:
    """A 1-D NumPy array of numbers as an Arrow array, from its buffer."""
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


def string_array(values: list[str] | tuple[str, ...]) -> pa.Array:
    """A few strings (e.g. the class names) as an Arrow string array, from buffers."""
    data = [v.encode("utf-8") for v in values]
    offsets = np.zeros(len(data) + 1, dtype=np.int32)
    offsets[1:] = np.cumsum([len(d) for d in data], dtype=np.int64)
    return pa.Array.from_buffers(pa.string(), len(data), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))])


def string_scalars(*values: str) -> tuple[Any, ...]:
    """Arrow string scalars (arguments of a compute function), without ``pa.scalar``."""
    return tuple(string_array(list(values)))


def release_unused() -> None:
    """Hand the memory Arrow's allocator keeps after a whole-file read back to the system: the next read would
    otherwise start from the previous one's high-water mark."""
    pa.default_memory_pool().release_unused()
