"""How far a scoring pass's scores move from the reference pass's: the absolute differences of each pair's scores
(the largest and a high quantile) and, within each group, Kendall's tau between the two orderings
(``scipy.stats.kendalltau``'s tau-b: ties counted as the two passes' scores tie; groups of at most
:data:`SMALL_GROUP` pairs counted together on NumPy arrays, the same counts, a test compares both), its minimum and
median over the groups, overall and inside each group of each gating stratum subgroup. Reads nothing itself.

The tie rule of a group whose scores all tie in one pass (scipy then has no tau): 1.0 when both passes tie every
pair of the group (the same, empty, ordering), 0.0 when only one does (none of the other's order kept). A group
of fewer than two pairs both passes scored orders nothing and is left out (counted in ``groups_unordered``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["ScoreAgreement", "TauSummary", "group_taus", "score_agreement", "tau_summary"]


@dataclass(frozen=True)
class TauSummary:
    """Kendall's tau over a set of groups: its minimum and median (None: no group orders two pairs), the groups
    that do and those left out."""

    min_tau: float | None
    median_tau: float | None
    groups: int
    groups_unordered: int

    def to_json(self) -> dict[str, float | int | None]:
        return {"min_kendall_tau": self.min_tau, "median_kendall_tau": self.median_tau, "groups": self.groups,
                "groups_unordered": self.groups_unordered}


#: Groups of at most this many pairs are judged together, on NumPy arrays (their tau-b counted pair by pair); a
#: larger group is handed to ``scipy.stats.kendalltau`` alone (one call per group costs about a millisecond, too
#: much for 20,000 groups of 10).
SMALL_GROUP = 64
#: Small groups judged per block (a block holds three int8 arrays of groups × SMALL_GROUP² values).
GROUP_BLOCK = 1024


def group_taus(a: np.ndarray, b: np.ndarray, groups: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, int]:
    """Kendall's tau of ``a`` against ``b`` within each group (``groups``: a code per pair, corpus order) over the
    pairs ``rows`` (a mask: those both passes scored, in the subset judged); (the taus, the groups left out)."""
    codes = groups[rows]
    x, y = a[rows].astype(np.float64), b[rows].astype(np.float64)
    order = np.argsort(codes, kind="stable")
    codes, x, y = codes[order], x[order], y[order]
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]]) if len(codes) else np.zeros(0, np.int64)
    stops = np.r_[starts[1:], len(codes)].astype(np.int64)
    sizes = stops - starts
    unordered = int(np.count_nonzero(sizes < 2))
    small = np.flatnonzero((sizes >= 2) & (sizes <= SMALL_GROUP))
    taus = [_small_taus(x, y, starts[small[i:i + GROUP_BLOCK]], sizes[small[i:i + GROUP_BLOCK]])
            for i in range(0, len(small), GROUP_BLOCK)]
    for start, stop in zip(starts[sizes > SMALL_GROUP].tolist(), stops[sizes > SMALL_GROUP].tolist()):
        taus.append(np.asarray([_tau(x[start:stop], y[start:stop])]))
    return (np.concatenate(taus) if taus else np.zeros(0, np.float64)), unordered


def _tau(gx: np.ndarray, gy: np.ndarray) -> float:
    """One group's tau-b by ``scipy.stats.kendalltau`` (the module docstring's rule where scores all tie)."""
    flat_x, flat_y = bool((gx == gx[0]).all()), bool((gy == gy[0]).all())
    if flat_x or flat_y:
        return 1.0 if flat_x and flat_y else 0.0
    from scipy.stats import kendalltau  # after a run's corpus scan (tests/house/test_layout.py LAZY_IMPORTS)

    return float(kendalltau(gx, gy)[0])  # tau-b (its first field in every scipy)


def _small_taus(x: np.ndarray, y: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The tau-b of a block of small groups at once: over every two pairs of a group, the product of the signs of
    their two score differences, summed (concordant minus discordant), over the square root of the numbers of
    untied differences of each pass: ``scipy.stats.kendalltau``'s tau-b, the same counts."""
    width = int(sizes.max())
    at = starts[:, None] + np.arange(width)[None, :]
    valid = np.arange(width)[None, :] < sizes[:, None]
    at = np.where(valid, at, 0)
    gx, gy = np.where(valid, x[at], np.nan), np.where(valid, y[at], np.nan)
    sx = np.nan_to_num(np.sign(gx[:, :, None] - gx[:, None, :])).astype(np.int8)
    sy = np.nan_to_num(np.sign(gy[:, :, None] - gy[:, None, :])).astype(np.int8)
    both = (sx.astype(np.int32) * sy).sum(axis=(1, 2), dtype=np.int64)
    untied_x = np.count_nonzero(sx, axis=(1, 2)).astype(np.float64)
    untied_y = np.count_nonzero(sy, axis=(1, 2)).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = both / np.sqrt(untied_x * untied_y)
    flat_x, flat_y = untied_x == 0, untied_y == 0
    return np.where(flat_x & flat_y, 1.0, np.where(flat_x | flat_y, 0.0, tau))


def tau_summary(taus: np.ndarray, unordered: int) -> TauSummary:
    if not len(taus):
        return TauSummary(None, None, 0, unordered)
    return TauSummary(float(taus.min()), float(np.median(taus)), len(taus), unordered)


@dataclass(frozen=True)
class ScoreAgreement:
    """A pass's scores against the reference pass's over the pairs both scored: how many, the largest and the
    ``quantile`` quantile of the absolute differences, Kendall's tau overall and per stratum group
    (``<subgroup>:<group>``)."""

    common: int
    max_abs_diff: float | None
    diff_at_quantile: float | None
    overall: TauSummary
    by_group: dict[str, TauSummary]


def score_agreement(mine: np.ndarray, reference: np.ndarray, groups: np.ndarray, quantile: float,
                    strata: dict[str, np.ndarray] | None = None) -> ScoreAgreement:
    """``mine`` and ``reference``: each pair's score in corpus order (NaN: none); ``groups``: each pair's group code;
    ``strata``: the pairs of each gating stratum group, by ``<subgroup>:<group>``."""
    both = np.isfinite(mine) & np.isfinite(reference)
    diff = np.abs(mine[both].astype(np.float64) - reference[both].astype(np.float64))
    overall = tau_summary(*group_taus(mine, reference, groups, both))
    by_group = {key: tau_summary(*group_taus(mine, reference, groups, both & member))
                for key, member in (strata or {}).items()}
    return ScoreAgreement(int(both.sum()), float(diff.max()) if len(diff) else None,
                          float(np.quantile(diff, quantile)) if len(diff) else None, overall, by_group)


def bounds_reasons(agreement: ScoreAgreement, spec: Any
                   ) -> tuple[list[str], dict[str, dict[str, float | int | bool | None]]]:
    """The reasons the scores fail the ``[scoring]`` bounds (``spec``), and each gating stratum group's cells."""
    reasons: list[str] = []
    tol = 1e-9
    o = agreement.overall
    if o.min_tau is not None and o.min_tau < spec.min_kendall_tau - tol:
        reasons.append(f"Kendall's tau {o.min_tau:.4f} in a group, below scoring.min_kendall_tau "
                       f"{spec.min_kendall_tau:g}")
    if spec.min_median_kendall_tau is not None and o.median_tau is not None \
            and o.median_tau < spec.min_median_kendall_tau - tol:
        reasons.append(f"median Kendall's tau {o.median_tau:.4f}, below scoring.min_median_kendall_tau "
                       f"{spec.min_median_kendall_tau:g}")
    if spec.max_abs_diff is not None and agreement.max_abs_diff is not None \
            and agreement.max_abs_diff > spec.max_abs_diff + tol:
        reasons.append(f"largest score difference {agreement.max_abs_diff:.4g}, above scoring.max_abs_diff "
                       f"{spec.max_abs_diff:g}")
    if spec.max_diff_at_quantile is not None and agreement.diff_at_quantile is not None \
            and agreement.diff_at_quantile > spec.max_diff_at_quantile + tol:
        reasons.append(f"score difference at quantile {spec.diff_quantile:g} {agreement.diff_at_quantile:.4g}, "
                       f"above scoring.max_diff_at_quantile {spec.max_diff_at_quantile:g}")
    cells: dict[str, dict[str, float | int | bool | None]] = {}
    for key, summary in agreement.by_group.items():
        ok = summary.min_tau is None or summary.min_tau >= spec.min_kendall_tau - tol
        if spec.min_median_kendall_tau is not None and summary.median_tau is not None:
            ok = ok and summary.median_tau >= spec.min_median_kendall_tau - tol
        cells[key] = {**summary.to_json(), "ok": ok}
        if not ok:
            reasons.append(f"subgroup {key}: Kendall's tau {summary.min_tau:.4f} (min), "
                           f"{summary.median_tau:.4f} (median)")
    return reasons, cells
