"""The interface every kind of job implements (:class:`JobKind`): what the rest of the product may ask a kind.

A kind is a stateless object, one per kind, found by its name in :mod:`iteralab.campaign.kinds.registry`. Code
outside the kinds' folders holds a ``JobKind`` and asks it; it never compares ``kind.name`` with a literal.
"""

from __future__ import annotations

from typing import ClassVar

from iteralab.campaign.kinds.verdictpart import QualitySeries, VerdictPart


class JobKind:
    """One kind of job: its name as ``[task] kind`` spells it, and its facets (each kind's folder defines them)."""

    #: ``[task] kind`` of the protocols this kind judges.
    name: ClassVar[str]
    #: Its verdict part: how its file is read and hashed, its metric cells, its comparison with the reference pass
    #: (``<kind>/verdict.py``; what it answers: :class:`~iteralab.campaign.kinds.verdictpart.VerdictPart`).
    verdict: ClassVar[VerdictPart]
    #: Its raw table's columns, in order: the common ones (``campaign.folder.COLUMNS``) and its own.
    table_columns: ClassVar[tuple[str, ...]]
    #: What the statistics, the decision and the report show of its quality beyond the metric (each a column of
    #: the raw table, one value per counted pass).
    quality_series: ClassVar[tuple[QualitySeries, ...]] = ()

    def __repr__(self) -> str:
        return f"JobKind({self.name!r})"
