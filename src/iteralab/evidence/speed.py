"""Pass times per variant (T3) and the T5 comparison of two variants' pass times: an exact rank test at the level the protocol declared before
timing (``[stats]``), and the speed-up with its interval.

The test is the exact Mann-Whitney (Wilcoxon rank-sum) test of the counted pass times: it asks only how the
passes of the two variants interleave, so one slow pass cannot overturn a complete ordering (every pass of one
variant faster than every pass of the other), whatever its size. Its null distribution is counted exactly, the
coefficients of a Gaussian binomial, so no approximation and no third-party import. The speed-up interval is the
test inverted (Hodges-Lehmann / Moses): the order statistics of the pairwise log ratios that the test at the
declared level cannot reject; it excludes 1 exactly when the test distinguishes the pair. Ties between pass times
(rare with timings) count half.

A pass set apart for concurrent load (``stats.loaded_passes = "apart"``) is not among the counted passes here; with
``"counted"`` the comparison says how many of its passes were loaded.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from iteralab.campaign.folder import PHASES
from iteralab.evidence.datasets import PassTime
from iteralab.evidence.table import CONCURRENT_NOTE
from iteralab.plan.tables import StatsSpec

INVESTIGATE = "add passes under the same protocol, or look at loading, input format, compilation, concurrent activity"
#: T5: "distinguished" is never claimed from fewer counted passes per variant than this.
MIN_PASSES_TO_DISTINGUISH = 3
TEST_NAME = "exact rank test"
#: Why a loaded pass is not counted under the default rule (its exclusion reason, T4).
LOADED_APART = (f"{CONCURRENT_NOTE}: an external incident (T4), kept in the raw table and not counted "
                "(stats.loaded_passes = \"apart\"); run a pass again on a quiet machine")


@dataclass(frozen=True)
class Comparison:
    """T5 verdict between two variants: ``distinguished``, ``not distinguished`` or ``no comparison``.

    ``ratio`` is the speed-up by median (slower median over faster); ``interval`` its bounds at 1 - level (a bound
    is None where the passes cannot reach the level); ``p_value`` the rank test's; ``needed`` the passes a variant
    that could reach the declared level when these cannot."""

    scope: str
    a: str
    b: str
    verdict: str
    text: str
    faster: str | None = None
    ratio: float | None = None
    interval: tuple[float | None, float | None] | None = None
    p_value: float | None = None
    n: tuple[int, int] = (0, 0)
    level: float | None = None
    sided: str | None = None
    needed: int | None = None

    @property
    def distinguished(self) -> bool:
        return self.verdict == "distinguished"

    def to_dict(self) -> dict[str, Any]:
        return {"scope": self.scope, "a": self.a, "b": self.b, "verdict": self.verdict, "text": self.text,
                "faster": self.faster, "ratio": self.ratio,
                "interval": list(self.interval) if self.interval else None, "p_value": self.p_value,
                "n": list(self.n), "level": self.level, "sided": self.sided, "test": TEST_NAME,
                "passes_needed": self.needed}


@dataclass(frozen=True)
class VariantTimes:
    """Every pass of one variant, round by round in the order rounds first ran, and the summary of the counted
    ones."""

    variant: str
    series: tuple[str, ...]
    passes: tuple[PassTime, ...]
    #: the attempts a stop signal interrupted (not in ``passes``: counted for nothing, their slot runs again)
    interrupted: tuple[str, ...] = ()
    #: the protocol's ``[stats]`` rule these times are compared under (T5)
    rule: StatsSpec = field(default_factory=StatsSpec)

    @property
    def times(self) -> tuple[float, ...]:
        return tuple(p.pass_s for p in self.passes if p.counted)  # type: ignore[misc]

    @property
    def slowest_concurrent(self) -> bool:
        """T5: the slowest counted pass (what a production plan is checked against) ran under concurrent load."""
        counted = [p for p in self.passes if p.counted]
        return bool(counted) and max(counted, key=lambda p: p.pass_s).concurrent  # type: ignore[arg-type,return-value]

    @property
    def median(self) -> float | None:
        return statistics.median(self.times) if self.times else None

    @property
    def minimum(self) -> float | None:
        return min(self.times) if self.times else None

    @property
    def maximum(self) -> float | None:
        return max(self.times) if self.times else None

    @property
    def spread(self) -> float | None:
        return None if not self.times else max(self.times) - min(self.times)

    def count(self, status: str) -> int:
        return sum(1 for p in self.passes if p.status == status and not p.excluded)

    @property
    def excluded(self) -> tuple[PassTime, ...]:
        return tuple(p for p in self.passes if p.excluded)

    def phase_median(self, phase: str) -> float | None:
        values = [p.phases.get(phase) for p in self.passes if p.status == "ok" and not p.excluded]
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None

    @property
    def total_median(self) -> float | None:
        """Median over counted passes of the sum of every measured phase (start-up included)."""
        totals = [sum(v for v in p.phases.values() if v is not None) for p in self.passes if p.counted]
        return statistics.median(totals) if totals else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "variant": self.variant, "series": list(self.series), "passes": [p.to_dict() for p in self.passes],
            "times": list(self.times), "median": self.median, "min": self.minimum, "max": self.maximum,
            "spread": self.spread, "n_ok": self.count("ok"), "n_failed": self.count("failed"),
            "n_aborted": self.count("aborted"), "n_excluded": len(self.excluded),
            "n_interrupted": len(self.interrupted), "interrupted": list(self.interrupted),
            "phase_medians": {p: self.phase_median(p) for p in PHASES},
        }


def set_apart(passes: tuple[PassTime, ...], rule: StatsSpec) -> tuple[PassTime, ...]:
    """T4 under ``stats.loaded_passes = "apart"``: a counted pass measured under concurrent load becomes an
    excluded one, its reason the rule (the same for every variant); under ``"counted"`` the passes as they are."""
    if rule.loaded_passes != "apart":
        return passes
    return tuple(replace(p, excluded=True, exclusion_reason=LOADED_APART) if p.counted and p.concurrent else p
                 for p in passes)


def loaded_only(times: VariantTimes) -> str | None:
    """Why a variant has no time to decide from when every pass it finished was set apart for concurrent load
    (T4), with what to do; None otherwise."""
    apart = sum(1 for p in times.passes if p.exclusion_reason == LOADED_APART)
    if times.times or not apart:
        return None
    return (f"no quiet pass: its {apart} finished pass{'es were' if apart != 1 else ' was'} {CONCURRENT_NOTE} and "
            "set apart (stats.loaded_passes = \"apart\", T4): run the campaign again on a quiet machine; never "
            "priced")


# ------------------------------------------------------------------------------------------ the rank test


@lru_cache(maxsize=256)
def rank_counts(n: int, m: int) -> tuple[int, ...]:
    """How many of the C(n+m, n) orderings of n and m passes give each value 0..n*m of the rank statistic U (the
    pairs where the second sample's pass is the faster): the Gaussian binomial [n+m choose n] in q."""
    counts = [1] + [0] * (n * m)
    for i in range(1, n + 1):  # multiply by (1 - q^(m+i)), divide by (1 - q^i)
        for k in range(n * m, m + i - 1, -1):
            counts[k] -= counts[k - m - i]
        for k in range(i, n * m + 1):
            counts[k] += counts[k - i]
    return tuple(counts)


def rank_cdf(n: int, m: int, u: float) -> float:
    """P(U <= u) for n and m passes of identical variants."""
    counts = rank_counts(n, m)
    top = math.floor(u)
    return 0.0 if top < 0 else sum(counts[:top + 1]) / math.comb(n + m, n)


def smallest_p(n: int, m: int, sided: str) -> float:
    """The smallest p-value n against m passes can give (a complete ordering)."""
    return min(1.0, (2 if sided == "two" else 1) / math.comb(n + m, n))


def passes_needed(level: float, sided: str) -> int:
    """The fewest passes a variant (as many for each) whose complete ordering reaches ``level``."""
    k = MIN_PASSES_TO_DISTINGUISH
    while smallest_p(k, k, sided) > level:
        k += 1
    return k


def rank_test(a: tuple[float, ...], b: tuple[float, ...], sided: str) -> tuple[float, bool]:
    """(p-value, b is the faster) of the exact rank test; one-sided tests the direction the passes show."""
    n, m = len(a), len(b)
    u = sum(1.0 if y < x else 0.5 if y == x else 0.0 for x in a for y in b)  # pairs where b's pass is faster
    b_faster = u > n * m / 2
    tail = rank_cdf(n, m, min(u, n * m - u))
    return min(1.0, (2 if sided == "two" else 1) * tail), b_faster


def speedup_interval(a: tuple[float, ...], b: tuple[float, ...], level: float,
                     sided: str) -> tuple[float | None, float | None]:
    """Bounds at 1 - level of the speed-up of b over a (the ratio a / b of their pass times): the k-th smallest
    and largest of the pairwise ratios, k the largest with P(U <= k-1) <= level (two-sided: level / 2 on each
    side). (None, None) when the passes cannot reach the level."""
    n, m = len(a), len(b)
    ratios = sorted(x / y for x in a for y in b)
    tail = level / 2 if sided == "two" else level
    k = 0
    while k < n * m and rank_cdf(n, m, k) <= tail:
        k += 1
    if k == 0:
        return None, None
    return ratios[k - 1], ratios[n * m - k]


# -------------------------------------------------------------------------------------------- comparison


def pct(fraction: float) -> str:
    """A fraction as a percentage, one decimal below 1 %."""
    value = 100 * fraction
    return f"{value:.0f} %" if value >= 1 or value == 0 else f"{value:.1f} %"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _declared(rule: StatsSpec) -> str:
    return f"{rule.level:g} {'two' if rule.sided == 'two' else 'one'}-sided"


def compare(a: VariantTimes, b: VariantTimes, scope: str = "", names: tuple[str, str] | None = None,
            rule: StatsSpec | None = None) -> Comparison:
    """The T5 comparison of two variants' counted pass times under ``rule`` (default: the one the first variant's
    times were read under); failed passes and loaded ones counted are named after the verdict."""
    c = _compare(a, b, scope, names or (a.variant, b.variant), rule or a.rule)
    failing = [(n, v.count("failed") + v.count("aborted")) for v, n in zip((a, b), (c.a, c.b))]
    notes = [f"{n} also has {k} failed or aborted pass{'es' if k != 1 else ''} (see feasibility)"
             for n, k in failing if k]
    loaded = sum(1 for v in (a, b) for p in v.passes if p.counted and p.concurrent)
    if loaded:
        notes.append(f"{loaded} of these counted passes were {CONCURRENT_NOTE} (stats.loaded_passes = "
                     "\"counted\"; see the raw table's notes): repeat them on a quiet machine before trusting this "
                     "comparison")
    if notes and c.verdict != "no comparison":
        return Comparison(**{**c.__dict__, "text": f"{c.text}; {'; '.join(notes)}"})
    return c


def _compare(a: VariantTimes, b: VariantTimes, scope: str, names: tuple[str, str], rule: StatsSpec) -> Comparison:
    na, nb = names
    for v, n in ((a, na), (b, nb)):
        if not v.times:
            apart = sum(1 for p in v.passes if p.exclusion_reason == LOADED_APART)
            loaded = f", {apart} of them {CONCURRENT_NOTE} and set apart: run them again on a quiet machine" \
                if apart else ""
            return Comparison(scope, na, nb, "no comparison",
                              f"no comparison: {n} has no counted successful pass "
                              f"({v.count('failed')} failed, {v.count('aborted')} aborted, {len(v.excluded)} "
                              f"excluded{loaded})")
    ta, tb = a.times, b.times
    base = dict(scope=scope, a=na, b=nb, n=(len(ta), len(tb)), level=rule.level, sided=rule.sided)
    for v, n in ((a, na), (b, nb)):
        if len(v.times) < MIN_PASSES_TO_DISTINGUISH:
            count = f"only {len(v.times)} counted pass{'es' if len(v.times) != 1 else ''}"
            return Comparison(**base, verdict="not distinguished",
                              text=f"not distinguished: {n} has {count}; a difference is never claimed from fewer "
                                   f"than {MIN_PASSES_TO_DISTINGUISH}: {INVESTIGATE}")
    p, b_faster = rank_test(ta, tb, rule.sided)
    fast, slow, fast_name, slow_name = (b, a, nb, na) if b_faster else (a, b, na, nb)
    ratio = slow.median / fast.median if fast.median else None  # type: ignore[operator]
    low, high = speedup_interval(slow.times, fast.times, rule.level, rule.sided)
    interval = (low, high if rule.sided == "two" else None)
    share = ("no speed-up interval at this level" if low is None else
             f"speed-up {_x(low)} to {_x(high)} at {pct(1 - rule.level)}" if rule.sided == "two" else
             f"speed-up at least {_x(low)} at {pct(1 - rule.level)}")
    speed = (f"{fast_name} is {'' if ratio is None else f'{ratio:.2f}x '}faster than {slow_name} by median "
             f"({fmt_s(fast.median)} s vs {fmt_s(slow.median)} s; {share})")
    base.update(faster=fast_name, ratio=ratio, interval=interval, p_value=p)
    floor = smallest_p(len(ta), len(tb), rule.sided)
    if floor > rule.level:
        need = passes_needed(rule.level, rule.sided)
        return Comparison(**base, verdict="not distinguished", needed=need, text=(
            f"not distinguished: {len(ta)} against {len(tb)} counted passes cannot reach the declared level "
            f"{_declared(rule)} (the smallest p they can give is {floor:.3g}); {need} passes a variant can, when "
            f"every pass of one is faster than every pass of the other; {speed}, {TEST_NAME} p = {p:.3g}"))
    if p <= rule.level:
        return Comparison(**base, verdict="distinguished", text=(
            f"distinguished at the declared level {_declared(rule)}: {speed}; {TEST_NAME} p = {p:.3g}, "
            f"{len(ta)} vs {len(tb)} passes"))
    return Comparison(**base, verdict="not distinguished", text=(
        f"not distinguished at the declared level {_declared(rule)}: {speed}; {TEST_NAME} p = {p:.3g}, "
        f"{len(ta)} vs {len(tb)} passes, their times overlap: {INVESTIGATE}"))


def speed_rule(rule: StatsSpec) -> dict[str, Any]:
    """The declared comparison rule as ``stats.json`` and ``decision.json`` record it."""
    return {"test": TEST_NAME, "level": rule.level, "sided": rule.sided, "confidence": 1 - rule.level,
            "loaded_passes": rule.loaded_passes, "passes_needed": passes_needed(rule.level, rule.sided)}


def speed_rule_line(rule: StatsSpec) -> str:
    """The declared comparison rule in words, above every list of comparisons."""
    loaded = ("passes measured under concurrent load set apart, not counted" if rule.loaded_passes == "apart" else
              "passes measured under concurrent load counted")
    return (f"{TEST_NAME} of the counted passes at the declared level {_declared(rule)} (speed-up intervals at "
            f"{pct(1 - rule.level)}); {loaded}; a complete ordering reaches this level from "
            f"{passes_needed(rule.level, rule.sided)} passes a variant")


def fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.3f}" if seconds >= 0.01 else f"{seconds:.5f}"


__all__ = ["Comparison", "INVESTIGATE", "LOADED_APART", "MIN_PASSES_TO_DISTINGUISH", "TEST_NAME", "VariantTimes",
           "compare", "fmt_s", "loaded_only", "passes_needed", "pct", "rank_cdf", "rank_counts", "rank_test",
           "set_apart", "smallest_p", "speed_rule", "speed_rule_line", "speedup_interval"]
