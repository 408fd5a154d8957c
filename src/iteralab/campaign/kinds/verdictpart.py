"""What a kind's verdict part answers (:class:`VerdictPart`): the metric cells of a pass's own verdict, and the
comparison with the reference pass (tolerance and reproduction rule). Its file is read by the kind's output file
(``kind.output.read_with_sha256``, the one reader of a kind's file).

``campaign.verdict`` holds what every kind shares (the id, format and coverage cells, the metric against the
threshold and the reference's value, the gating subgroups) and asks the pass's kind (``kind.verdict``) for the
rest; each kind's answer is its folder's ``verdict.py``. Reads and writes nothing itself.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Protocol

import pyarrow as pa

if TYPE_CHECKING:
    from iteralab.campaign.kinds.interval import Sample
    from iteralab.plan.protocol import Protocol


__all__ = ["Cells", "FileComparison", "KindComparison", "NoCells", "PassInputs", "QualitySeries", "VerdictPart"]


@dataclass(frozen=True)
class QualitySeries:
    """One series of values a kind shows for a variant's quality beside its metric: ``name`` in the statistics and
    ``decision.json`` (``min_cosines``), read from the raw table's ``column`` of each counted pass (``min_cosine``;
    a pass whose cell is empty adds no value)."""

    name: str
    column: str


@dataclass(frozen=True)
class PassInputs:
    """What a pass's own verdict may need beyond its file and the corpus: the campaign's metric routine, its
    queries (``metric.queries``), a generation source's reference answers, and where the pass's file is (a
    kind may read a file beside it)."""

    routine: Any = None
    queries: Any = None
    references: pa.Array | None = None
    path: Path | None = None


@dataclass(frozen=True)
class NoCells:
    """The cells of a kind that adds none to the common verdict."""


class Cells(Protocol):
    """What a kind's verdict part sees of a pass's verdict (``campaign.verdict.record.Verdict``, a room above the
    kinds): its cells by name, and a new verdict with some cells set (a name that is no cell of the verdict nor
    of the kind's :attr:`VerdictPart.cells` is refused)."""

    def cell(self, key: str) -> Any: ...

    def has(self, key: str) -> bool: ...

    def with_cells(self, **cells: Any) -> Cells: ...

    #: what the quality interval resamples of the pass (set by the kind's :meth:`VerdictPart.metric_cells`)
    units: Any

    def with_units(self, units: Any) -> Cells: ...


@dataclass(frozen=True)
class FileComparison:
    """How far two prediction files (or sets) of the same protocol agree over the ids both hold: how many,
    whether both hold the same ids, whether they are identical, the share of equal labels (a kind without labels:
    its own share, or None) and the largest absolute difference of its values (None: not comparable). A kind adds
    its own fields; the JSON form (``comparison.json``'s pairs) holds every field."""

    common_ids: int
    same_ids: bool
    identical: bool
    label_agreement: float | None = None
    max_abs_prob_diff: float | None = None

    def to_json(self) -> dict[str, int | float | bool | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def lowest_cosine(self) -> float | None:
        """The lowest cosine of a document's two vectors, for a kind whose outputs are vectors (else None)."""
        return None


@dataclass(frozen=True)
class KindComparison:
    """What a kind's comparison of a pass with the reference pass gives (:meth:`VerdictPart.compare`): the cells it
    sets (``cells``: a frozen dataclass of the kind, its fields common cells of the verdict or the kind's own, set
    in their order), the reasons the pass fails, and those of them that are failed subgroups."""

    cells: Any
    reasons: tuple[str, ...] = ()
    subgroup_reasons: tuple[str, ...] = ()

    def cell_values(self) -> dict[str, Any]:
        """The cells by name, in their order (what ``Verdict.with_cells`` takes)."""
        return {f.name: getattr(self.cells, f.name) for f in fields(self.cells)}


class VerdictPart:
    """A kind's verdict: the part of the checks that depends on what its prediction file holds."""

    #: The kind's own cells of a verdict (a frozen dataclass, every field defaulting to None: a cell its JSON
    #: form lacks), beside the common ones of ``campaign.verdict.record.Verdict``.
    cells: ClassVar[type] = NoCells

    #: The run compares each pass with the reference pass as it evaluates them (``CampaignReads``); a kind
    #: whose comparison needs both files whole leaves it to the campaign's verdict (``judge``).
    compares_while_running: ClassVar[bool] = False

    def metric_cells(self, v: Cells, found: Any, protocol: Protocol, expected: Any, match: Any,
                     inputs: PassInputs) -> Cells:
        """The pass's own verdict ``v`` (its id, format and coverage cells) with its metric cells set: its metric
        (``metric_name``, ``metric``, ``threshold_ok``), the planned subgroups' values (``subgroups``) and the
        kind's own."""
        raise NotImplementedError

    def side_file(self, path: Path) -> Path | None:
        """A file beside the pass's prediction file that its verdict also reads (its version is part of the
        memo's key); None when there is none."""
        return None

    def references(self, folder: Path, dataset: str | None) -> pa.Array | None:
        """The reference answers of a source's corpus copy, handed to :meth:`metric_cells` (None: not used)."""
        return None

    def subgroups_by_metric(self, protocol: Protocol) -> bool:
        """Whether the gating subgroups are judged by their metric values (else the kind judges them in
        :meth:`compare`)."""
        return True

    def running_comparison(self, found: Any, reference: Path | None, protocol: Protocol) -> FileComparison | None:
        """For a kind that :attr:`compares_while_running`: its comparison (``compare_files``' form) of a read set
        with the reference pass's file at ``reference``, streamed, both holding the corpus ids in its order (None:
        of the set with itself, the reference pass's own); None when they cannot be compared that way."""
        raise NotImplementedError

    def queries(self, folder: Path, protocol: Protocol, record: Any) -> Any:
        """The campaign's queries its verdict ranks (``metric.queries``; ``record``: campaign.json's), or None."""
        return None

    def compare(self, v: Cells, reference: Any, path: Path | None, protocol: Protocol,
                expected: Any) -> KindComparison:
        """The pass's verdict ``v`` (a ``campaign.verdict.record.Verdict``) against the reference pass
        (``reference``: the campaign verdict's reference, with its ``verdict``, ``paths``, ``reader`` and ``key``;
        ``path``: the pass's prediction file, None when it recorded none): the kind's comparison cells and
        ``reproduction_ok``, and the reasons."""
        raise NotImplementedError

    def quality_samples(self, v: Cells, reference: Cells, protocol: Protocol, expected: Any) -> Mapping[str, Sample]:
        """What the paired bootstrap of the quality difference resamples (``kinds.interval``: a ``MeanSample`` or
        a ``CellSample``), from the units the pass's verdict ``v`` and the reference pass's kept
        (``Cells.units``): the main metric's (key ``""``) and each gating group's (``<subgroup>:<group>``). A
        metric with no per-unit form (a routine, corpus chrF) gives none."""
        return {}

    def row_cells(self, row: dict[str, Any], v: Cells, notes: list[str]) -> None:
        """The kind's own raw-table cells of a pass (its ``table_columns`` beyond the common ones) from its
        verdict ``v``, and the notes they need."""

    def compare_files(self, a: Path, b: Path, protocol: Protocol, reader: Any) -> FileComparison:
        """How far two prediction files of the same protocol agree (``rerun``'s comparison)."""
        raise NotImplementedError
