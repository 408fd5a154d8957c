"""How large a final corpus the tolerance needs: the paired disagreement of the reference
variant and a candidate variant measured on the tuning split, and the corpus size at which a candidate that truly
differs from the reference by the measured difference is established within the tolerance at the declared
confidence, with the declared power.

The figure is the non-inferiority sample size of a paired difference (``docs/concepts.md``) for the worse bound of
the two-sided interval at ``confidence`` (the quality interval's), a one-sided bound at (1 + confidence) / 2::

    n = ((z_{(1 + confidence) / 2} + z_{power}) * sd / (tolerance - |difference|))**2

``sd`` is the standard deviation of the per-unit paired difference (candidate − reference, one unit a document,
or a query for a ranking metric); for a metric that is not a mean of per-unit values (macro-F1, weighted F1,
balanced accuracy) it is the standard error of the difference from a paired bootstrap on the tuning split,
times √(tuning size). ``iteralab threshold`` measures it (it runs the model; ``lock`` must not) and writes
:class:`SizeRecord` beside the protocol (``<protocol>.samplesize.json``); ``lock`` reads that record and warns
when the final corpus is smaller than the size the locked tolerance needs.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from iteralab.common.files import write_bytes_atomic

__all__ = ["bound_level", "DEFAULT_CONFIDENCE", "Disagreement", "SIZE_SCHEMA", "SizeRecord", "required_size", "record_path",
           "size_lines"]

#: The confidence of the figure when the protocol declares no ``metric.confidence``.
DEFAULT_CONFIDENCE = 0.95
SIZE_SCHEMA = 1
#: The tolerances the figure is printed for while a draft's tolerance is still "CHOOSE".
DRAFT_TOLERANCES = (0.005, 0.01, 0.02, 0.05)


def bound_level(confidence: float) -> float:
    """The one-sided level of the worse bound of a two-sided interval at ``confidence`` (the quality interval's,
    :mod:`iteralab.campaign.kinds.interval`)."""
    return (1 + confidence) / 2


def required_size(sd: float, tolerance: float, difference: float, confidence: float, power: float) -> int | None:
    """The smallest number of units at which the worse bound of the two-sided ``confidence`` interval of the paired
    difference (the bound the gate reads: one-sided at (1 + confidence) / 2) lies within ``tolerance`` with
    probability ``power``, when the true difference is ``-|difference|`` and the per-unit
    standard deviation ``sd``; None when ``|difference|`` is not below the tolerance (no size establishes it)."""
    gap = tolerance - abs(difference)
    if gap <= 0:
        return None
    if sd <= 0:
        return 1
    from scipy.stats import norm  # scipy on first use: a run imports this module before its corpus scan

    z = float(norm.ppf(bound_level(confidence)) + norm.ppf(power))
    return max(1, math.ceil(round((z * sd / gap) ** 2, 9)))


@dataclass(frozen=True)
class Disagreement:
    """A candidate variant against the reference on the tuning split: the difference of the metric (candidate −
    reference), the standard deviation of the per-unit paired difference, how many units it was measured on and
    how, and (a classifier) the share of documents whose label the two variants give differently."""

    variant: str
    difference: float
    sd: float
    units: int
    unit: str
    how: str
    discordant: float | None = None

    @classmethod
    def of_values(cls, variant: str, reference: np.ndarray, candidate: np.ndarray, unit: str,
                  discordant: float | None = None) -> Disagreement:
        """From each unit's metric value under both variants (the metric is their mean)."""
        d = np.asarray(candidate, dtype=np.float64) - np.asarray(reference, dtype=np.float64)
        sd = float(d.std(ddof=1)) if len(d) > 1 else 0.0
        return cls(variant, float(d.mean()) if len(d) else 0.0, sd, len(d), unit,
                   f"standard deviation of the {len(d)} paired per-{unit[:-1]} differences", discordant)

    @classmethod
    def of_bootstrap(cls, variant: str, difference: float, draws: np.ndarray, units: int, unit: str,
                     discordant: float | None = None) -> Disagreement:
        """From a paired bootstrap's draws of the difference on ``units`` units: sd = their spread × √units."""
        sd = float(np.std(draws, ddof=1) * math.sqrt(units)) if len(draws) > 1 else 0.0
        return cls(variant, float(difference), sd, units, unit,
                   f"paired bootstrap on the tuning split ({len(draws)} resamples of its {units} {unit}, seed 0): "
                   "standard error × √size", discordant)

    def size(self, tolerance: float, confidence: float, power: float) -> int | None:
        return required_size(self.sd, tolerance, self.difference, confidence, power)


@dataclass(frozen=True)
class SizeRecord:
    """What ``iteralab threshold`` measured for the sample-size figure, beside the protocol for ``lock``."""

    metric: str
    tuning: str
    tuning_sha256: str
    reference_value: float
    candidates: tuple[Disagreement, ...]
    schema_version: int = SIZE_SCHEMA

    def to_json(self) -> str:
        data = asdict(self)
        data["candidates"] = [asdict(c) for c in self.candidates]
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> SizeRecord | None:
        """The record at ``path``; None when there is none or it is not one this version reads."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            if data.get("schema_version") != SIZE_SCHEMA:
                return None
            return cls(data["metric"], data["tuning"], data["tuning_sha256"], float(data["reference_value"]),
                       tuple(Disagreement(**c) for c in data["candidates"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write(self, path: str | os.PathLike[str]) -> None:
        write_bytes_atomic(path, self.to_json().encode("utf-8"))

    def largest(self, tolerance: float, confidence: float, power: float) -> tuple[Disagreement, int | None] | None:
        """The candidate that needs the largest corpus and its size (None: no size establishes it); None without
        a candidate."""
        if not self.candidates:
            return None
        sizes = [(c, c.size(tolerance, confidence, power)) for c in self.candidates]
        return max(sizes, key=lambda cs: math.inf if cs[1] is None else cs[1])


def record_path(protocol_path: str | os.PathLike[str]) -> Path:
    """Where ``threshold`` writes, and ``lock`` reads, the record: ``<protocol file name>.samplesize.json``."""
    path = Path(protocol_path)
    return path.with_name(path.name + ".samplesize.json")


def size_lines(record: SizeRecord, tolerance: float | None, confidence: float | None, power: float) -> list[str]:
    """The lines ``threshold`` prints: per candidate its disagreement, then the final corpus size the tolerance
    needs (for a few tolerances while the draft's is not chosen)."""
    level = DEFAULT_CONFIDENCE if confidence is None else confidence
    if not record.candidates:
        return ["corpus size the tolerance needs: not measured (no variant beside the reference with another "
                "precision, padding or batch size to compare it with)"]
    out = []
    for c in record.candidates:
        labels = "" if c.discordant is None else f", {c.discordant:.1%} of the labels differ"
        out.append(f"{c.variant} against the reference: difference {c.difference:+.4f}{labels}, sd {c.sd:.4f} per "
                   f"{c.unit[:-1]} ({c.how})")
    unit = record.candidates[0].unit
    if all(c.sd == 0 and c.difference == 0 for c in record.candidates):
        return [*out, f"corpus size the tolerance needs: not bounded by the tuning split (no variant disagrees with "
                      f"the reference on its {record.candidates[0].units} {unit})"]
    said = f"{level:g} confidence{'' if confidence is not None else ' (metric.confidence absent)'}, power {power:g}"
    tolerances: Sequence[float] = DRAFT_TOLERANCES if tolerance is None else (tolerance,)
    sizes = []
    for value in tolerances:
        found = record.largest(value, level, power)
        assert found is not None
        worst, n = found
        sizes.append((value, worst, n))
    if tolerance is None:
        each = ", ".join(f"{value:g}: {'none' if n is None else n}" for value, _, n in sizes)
        out.append(f"final {unit} the tolerance needs at {said} (tolerance not chosen yet): {each} "
                   f"({sizes[-1][1].variant} needs most; none: its difference is not within that tolerance)")
    else:
        _, worst, n = sizes[0]
        need = (f"{n} {unit}" if n is not None else
                f"no size establishes it ({worst.variant}'s difference {worst.difference:+.4f} is not within it)")
        out.append(f"final corpus the tolerance {tolerance:g} needs at {said}: {need} ({worst.variant} needs most)")
    return out
