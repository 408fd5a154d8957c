"""The quality difference variant − reference with its interval (Q2): a paired bootstrap over the units a metric
averages (documents; the queries of a ranking metric), within strata when the corpus is stratified, seeded from the
locked protocol's sha256 and the pass, so that ``verify`` recomputes every bound bit for bit.

What is resampled is a kind's to say (``kind.verdict.quality_samples``); how, this module's. A kind hands one of two
forms per metric (the main one, keyed ``""``, and each gating group, keyed ``<subgroup>:<group>``):

- :class:`MeanSample`: a metric that is the mean of per-unit values (a generation job's document scores, kNN
  accuracy's per-document hits, a ranking metric's per-query values): the paired per-unit differences. A replicate's
  difference is the mean of a resample of them, drawn as the counts of their distinct values (multinomial: exact,
  at the cost of the distinct values); differences with more distinct values than :data:`FEW_VALUES` (continuous
  scores) are counted in that many groups of equal size of their sorted values, each draw at its group's mean,
  and the spread inside the groups is added as a normal term whose variance the counts give (its share of the
  variance is that of the groups' widths, negligible beside the difference's own).
- :class:`CellSample`: a metric of counts (a classifier's confusion matrix): each unit's cell (for a classifier the
  triple true label, variant's label, reference's label), and the function of a replicate's cell counts that gives
  the difference. A replicate is one multinomial draw of the distinct cells' counts: the same law as resampling the
  documents, at the cost of the cells (at most k·(k+1)² for k classes), whatever the corpus size.

The interval is the percentile interval of :data:`REPLICATES` replicates at the declared level (``metric.confidence``;
absent: :data:`DEFAULT_LEVEL`, reported beside the point estimate). :func:`standing` says what it establishes against
the tolerance. Reads and writes nothing.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

import numpy as np

if TYPE_CHECKING:
    from iteralab.plan.protocol import Protocol as ProtocolSpec

__all__ = ["DEFAULT_LEVEL", "NOT_ESTABLISHED", "OUTSIDE", "REPLICATES", "WITHIN", "CellSample", "Interval",
           "MeanSample", "Sample", "UnitValues", "mean_samples", "paired_interval", "pass_intervals", "quality_intervals", "seed_of", "standing"]

#: Bootstrap replicates per interval (the Monte-Carlo error of a 95 % bound is about a tenth of the difference's
#: standard error).
REPLICATES = 2000
#: The level of the interval reported beside the point estimate when the protocol declares none.
DEFAULT_LEVEL = 0.95
#: Differences with at most this many distinct values are resampled by their counts (multinomial); more are
#: counted in this many groups.
FEW_VALUES = 512
#: Cells of replicates computed at once (memory bound of a chunk: 8 bytes each).
CHUNK_DRAWS = 1 << 22

WITHIN = "within tolerance, established"
OUTSIDE = "outside tolerance, established"
NOT_ESTABLISHED = "not established at this corpus size"


class Sample(Protocol):
    """What the bootstrap resamples for one metric: its unit count and ``count`` replicate differences."""

    @property
    def units(self) -> int: ...

    def replicates(self, rng: np.random.Generator, count: int) -> np.ndarray: ...


def _strata_of(strata: np.ndarray | None, n: int) -> list[np.ndarray]:
    """The rows of each stratum (one stratum, every row, when the corpus has none)."""
    if strata is None:
        return [np.arange(n)]
    order = np.argsort(strata, kind="stable")
    _, starts = np.unique(strata[order], return_index=True)
    return np.split(order, starts[1:])


@dataclass(frozen=True)
class MeanSample:
    """The paired per-unit differences (variant − reference) of a mean metric, and each unit's stratum (None:
    unstratified)."""

    differences: np.ndarray
    strata: np.ndarray | None = None

    @property
    def units(self) -> int:
        return len(self.differences)

    def replicates(self, rng: np.random.Generator, count: int) -> np.ndarray:
        total = np.zeros(count)
        for rows in _strata_of(self.strata, self.units):
            total += _stratum_sums(self.differences[rows], rng, count)
        return total / max(self.units, 1)


def _stratum_sums(d: np.ndarray, rng: np.random.Generator, count: int) -> np.ndarray:
    """``count`` sums of a resample (with replacement, ``len(d)`` draws) of ``d``: by the counts of its distinct
    values when it has few (exact), else by the counts of :data:`FEW_VALUES` groups of equal size of its sorted
    values, each draw counted at its group's mean, plus the spread inside the groups as a normal term (its
    variance given the counts: each group's count times the variance of its values)."""
    n = len(d)
    values, freq = np.unique(d, return_counts=True)
    if len(values) <= FEW_VALUES:
        return rng.multinomial(n, freq / n, size=count) @ values
    groups = np.array_split(np.sort(d), FEW_VALUES)
    size = np.array([len(g) for g in groups], dtype=np.float64)
    means = np.array([g.mean() for g in groups])
    spread = np.array([g.var() for g in groups])
    counts = rng.multinomial(n, size / n, size=count)
    return counts @ means + np.sqrt(counts @ spread) * rng.standard_normal(count)


@dataclass(frozen=True)
class CellSample:
    """Each unit's cell (an integer), its stratum (None: unstratified) and the difference of a replicate's counts
    (``statistic(counts, cells)``: ``counts`` ``[replicates, m]`` of the distinct ``cells`` ``[m]``)."""

    cells: np.ndarray
    statistic: Callable[[np.ndarray, np.ndarray], np.ndarray]
    strata: np.ndarray | None = None

    @property
    def units(self) -> int:
        return len(self.cells)

    def point(self) -> float:
        """The difference on the sample itself."""
        keys, counts = np.unique(self.cells, return_counts=True)
        return float(self.statistic(counts[None, :].astype(np.float64), keys)[0])

    def replicates(self, rng: np.random.Generator, count: int) -> np.ndarray:
        keys = np.unique(self.cells)
        counts = np.zeros((count, len(keys)))
        for rows in _strata_of(self.strata, self.units):
            mine, freq = np.unique(self.cells[rows], return_counts=True)
            at = np.searchsorted(keys, mine)
            counts[:, at] += rng.multinomial(len(rows), freq / len(rows), size=count)
        step = max(1, CHUNK_DRAWS // max(len(keys), 1))
        return np.concatenate([self.statistic(counts[i:i + step], keys) for i in range(0, count, step)])


@dataclass(frozen=True)
class Interval:
    """The interval of a difference at ``level`` over ``units`` resampled units (``low`` ≤ ``high``)."""

    low: float
    high: float
    units: int
    level: float

    def worse(self, higher_is_better: bool = True) -> float:
        """The bound on the metric's worse side (the lower one when higher is better)."""
        return self.low if higher_is_better else self.high

    def better(self, higher_is_better: bool = True) -> float:
        return self.high if higher_is_better else self.low


@dataclass(frozen=True)
class UnitValues:
    """A pass's per-unit values of a mean metric, as its verdict keeps them for the interval (NaN: a unit it has no
    value for)."""

    values: np.ndarray


def mean_samples(mine: object, reference: object, strata: np.ndarray | None = None,
                 groups: Mapping[str, np.ndarray] | None = None) -> dict[str, Sample]:
    """The :class:`MeanSample` of a mean metric (``""``, within ``strata`` when given) and of each group (its rows,
    a boolean mask per unit) from two passes' :class:`UnitValues`, over the units both have a value for."""
    if not isinstance(mine, UnitValues) or not isinstance(reference, UnitValues) or \
            len(mine.values) != len(reference.values):
        return {}
    d = mine.values - reference.values
    both = np.isfinite(d)
    out: dict[str, Sample] = {"": MeanSample(d[both], None if strata is None else strata[both])}
    for key, rows in (groups or {}).items():
        if (rows & both).any():
            out[key] = MeanSample(d[rows & both])
    return out


def seed_of(*parts: str) -> int:
    """A bootstrap's seed: the first 8 bytes of the sha256 of ``parts`` (the protocol's sha256, the pass, the
    group), the same on every machine."""
    return int.from_bytes(hashlib.sha256("\x1f".join(parts).encode()).digest()[:8], "big")


def paired_interval(sample: Sample, level: float, seed: int, replicates: int = REPLICATES) -> Interval | None:
    """The percentile interval of the sample's difference at ``level`` (None without a unit)."""
    if sample.units == 0:
        return None
    draws = sample.replicates(np.random.Generator(np.random.PCG64(seed)), replicates)
    draws = draws[np.isfinite(draws)]
    if not len(draws):
        return None
    low, high = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return Interval(float(low), float(high), sample.units, level)


def quality_intervals(samples: Mapping[str, Sample], level: float, *seed_parts: str) -> dict[str, Interval]:
    """:func:`paired_interval` of each sample (``""``: the main metric), each seeded by ``seed_parts`` and its key."""
    out = {}
    for key, sample in samples.items():
        found = paired_interval(sample, level, seed_of(*seed_parts, key))
        if found is not None:
            out[key] = found
    return out


def pass_intervals(part: Any, v: Any, reference: Any, protocol: ProtocolSpec, expected: Any,
                   *seed_parts: str) -> dict[str, Interval]:
    """The intervals of one pass's quality differences with the reference pass: what its kind's verdict part
    (``part``: a ``kinds.verdictpart.VerdictPart``; ``v``, ``reference``: the two verdicts) resamples of them
    (``quality_samples``), at the protocol's level (``metric.interval_level``), seeded by ``seed_parts``."""
    samples = part.quality_samples(v, reference, protocol, expected)
    return quality_intervals(samples, protocol.metric.interval_level, *seed_parts)


def standing(low: float | None, high: float | None, allowed: float, higher_is_better: bool = True,
             tol: float = 1e-12) -> str | None:
    """What an interval of the difference establishes against the tolerance ``allowed``: :data:`WITHIN` (its worse
    bound within it), :data:`OUTSIDE` (its better bound beyond it) or :data:`NOT_ESTABLISHED`; None without one."""
    if low is None or high is None:
        return None
    worse, better = (low, high) if higher_is_better else (-high, -low)
    if -worse <= allowed + tol:
        return WITHIN
    if -better > allowed + tol:
        return OUTSIDE
    return NOT_ESTABLISHED
