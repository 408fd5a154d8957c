"""A pass's verdict as one typed, frozen value (:class:`Verdict`): the cells every kind has (ids, format,
coverage, the metric against the threshold and the reference pass, the gating subgroups, reproduction, the
reasons) and the kind's own (``kind.verdict.cells``: a frozen dataclass per kind).

Its JSON form is the dict the journal holds (``pass_evaluated``'s ``intrinsic``) and the raw table is built from:
:meth:`Verdict.from_json` reads it, :meth:`Verdict.to_json` gives it back key for key, in the same order, a key
that was absent staying absent. A verdict is never changed: :meth:`Verdict.with_cells` returns a new one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from iteralab.campaign.kinds.base import JobKind

__all__ = ["Verdict"]


@dataclass(frozen=True)
class Verdict:
    """One pass's verdict. A cell its JSON form lacks reads None (``keys`` says which it holds)."""

    # the pass's own file, every kind alike
    expected_ids: int | None = None
    observed_ids: int | None = None
    unique_ids: int | None = None
    duplicates: int | None = None
    missing: int | None = None
    extra: int | None = None
    ids_match: bool | None = None
    format_ok: bool | None = None
    format_problems: tuple[str, ...] = ()
    n_format_problems: int | None = None
    coverage: float | None = None
    coverage_ok: bool | None = None
    metric_name: str | None = None
    metric: float | None = None
    threshold_ok: bool | None = None
    #: the planned subgroups' values, keyed ``<subgroup>:<group>``
    subgroups: Mapping[str, float | None] = field(default_factory=dict)
    #: per subgroup whose metric left some classes out: the classes it averaged over
    subgroup_classes: Mapping[str, list[str]] = field(default_factory=dict)
    routine_error: str | None = None
    #: the first few repeated, missing and unexpected ids
    examples: Mapping[str, list[str]] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    # against its recorded file and the reference pass (``judge``)
    hash_ok: bool | None = None
    complete: bool | None = None
    reference_pass: str | None = None
    metric_ref: float | None = None
    metric_delta: float | None = None
    #: the interval of ``metric_delta`` (``kinds.interval``): its bounds and the units resampled
    delta_low: float | None = None
    delta_high: float | None = None
    delta_units: int | None = None
    tolerance_ok: bool | None = None
    #: per gating group: the interval of its difference with the reference pass's, [low, high]
    subgroup_deltas: Mapping[str, list[float]] | None = None
    subgroups_ok: bool | None = None
    label_agreement: float | None = None
    max_abs_prob_diff: float | None = None
    reproduction_ok: bool | None = None
    corpus_accepted: bool | None = None
    reasons: tuple[str, ...] = ()
    #: the kind's own cells (``kind.verdict.cells``, a frozen dataclass)
    own: Any = None
    #: the keys of its JSON form, in order
    keys: tuple[str, ...] = ()
    #: what the quality interval resamples of the pass (the kind's, ``kind.verdict.quality_samples``): held in
    #: memory beside the verdict, never in its JSON form
    units: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, kind: JobKind, **cells: Any) -> Verdict:
        """A verdict of a pass of ``kind`` holding these cells (common or the kind's own), in this order."""
        return cls(own=kind.verdict.cells()).with_cells(**cells)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], kind: JobKind) -> Verdict:
        """The verdict of its JSON form (``kind``: the pass's kind, whose cells the form may hold)."""
        own_type = kind.verdict.cells
        own_names = {f.name for f in fields(own_type)}
        common, own = {}, {}
        for key, value in data.items():
            if key in own_names:
                own[key] = value
            elif key in COMMON:
                common[key] = tuple(value) if key in LISTS and value is not None else value
            else:
                raise KeyError(f"a {kind.name} verdict has no cell {key!r}")
        return cls(**common, own=own_type(**own), keys=tuple(data))

    def to_json(self) -> dict[str, Any]:
        """The JSON form: the keys it was read with and those added since, in order (lists as lists)."""
        return {key: _plain(self.cell(key)) for key in self.keys}

    def cell(self, key: str) -> Any:
        """A cell by its name, common or the kind's own (None when neither has it)."""
        if key in COMMON:
            return getattr(self, key)
        return getattr(self.own, key, None)

    def has(self, key: str) -> bool:
        """Whether its JSON form holds ``key``."""
        return key in self.keys

    def with_cells(self, **cells: Any) -> Verdict:
        """A new verdict with these cells set (common or the kind's own); a cell not held before is added."""
        own_names = {f.name for f in fields(self.own)} if self.own is not None else set()
        common = {k: tuple(v) if k in LISTS and v is not None else v for k, v in cells.items() if k in COMMON}
        own = {k: v for k, v in cells.items() if k not in COMMON}
        unknown = set(own) - own_names
        if unknown:
            raise KeyError(f"a verdict has no cell {sorted(unknown)[0]!r}")
        keys = self.keys + tuple(k for k in cells if k not in self.keys)
        return replace(self, **common, own=replace(self.own, **own) if own else self.own, keys=keys)

    def with_units(self, units: Any) -> Verdict:
        """A new verdict holding ``units`` (:attr:`units`; its cells unchanged)."""
        return replace(self, units=units)


#: The cells every kind has (the fields of :class:`Verdict` but its kind part and its keys).
COMMON = frozenset(f.name for f in fields(Verdict)) - {"own", "keys", "units"}
#: The cells held as tuples and written as lists.
LISTS = frozenset({"format_problems", "problems", "reasons"})


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value
