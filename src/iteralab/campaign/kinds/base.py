"""The interface every kind of job implements (:class:`JobKind`): what the rest of the product may ask a kind.

A kind is a stateless object, one per kind, found by its name in :mod:`iteralab.campaign.kinds.registry`. Code
outside the kinds' folders holds a ``JobKind`` and asks it; it never compares ``kind.name`` with a literal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa

from iteralab.campaign.kinds.output import OutputFile, OutputSet


class JobKind:
    """One kind of job: its name as ``[task] kind`` spells it, and its facets (each kind's folder defines them)."""

    #: ``[task] kind`` of the protocols this kind judges.
    name: ClassVar[str]
    #: Its prediction file (``<kind>/output.py``): ``output.output_kind`` (``records.OUTPUT_KINDS``),
    #: ``output.columns`` (after ``id``), ``output.read`` / ``output.read_with_sha256`` (the checked set).
    output: ClassVar[OutputFile]

    def read_output(self, path: Path, protocol: Any, like: pa.Array | None = None) -> OutputSet:
        """A pass's prediction file read and checked by what ``protocol`` declares for this kind (its classes and
        sum tolerance, its ``[embedding]`` or ``[generation]`` rules): the kind's
        :class:`~iteralab.campaign.kinds.output.OutputSet`, with the shared ``ids``, ``records``, ``problems`` and
        ``problem_count``. ``like``: the expected ids, shared by the set when the file holds exactly those."""
        return self.output.read(path, protocol, like)

    def __repr__(self) -> str:
        return f"JobKind({self.name!r})"
