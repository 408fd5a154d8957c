"""Why a variant's passes do not count for the decision, in the note's words: its quality verdicts (Q1–Q3, a
metric with no value, a gating subgroup, the reproduction target) and a generation job's output lengths. Reads a
variant's quality from the statistics (:class:`iteralab.evidence.stats.VariantQuality`)."""

from __future__ import annotations

from iteralab.evidence.stats import Q2_MARK, VariantQuality
from iteralab.plan.metric import MetricSpec

__all__ = ["generation_exclusions", "quality_exclusions"]


def generation_exclusions(q: VariantQuality, metric: MetricSpec) -> list[str]:
    """A generation job's passes not accepted for their outputs' lengths (the raw table's notes say which bound)."""
    mean_tokens, length_shares = q.values_of("mean_tokens"), q.values_of("length_shares")
    if not (mean_tokens or length_shares) or q.accepted == q.completed or q.no_value:
        return []
    tokens = f"mean generated tokens {min(mean_tokens):.2f}–{max(mean_tokens):.2f}" if mean_tokens else ""
    shares = f"; share ended on length up to {max(length_shares):.3f}" if length_shares else ""
    return [f"{q.completed - q.accepted} of {q.completed} passes not accepted ({tokens}{shares}; the raw "
            "table's notes name the bound)"]


def quality_exclusions(q: VariantQuality, metric: MetricSpec, reference: str = "") -> list[str]:
    out = []
    if q.completed == 0:
        return out
    if q.format_ok is False:
        out.append("format problems in the predictions")
    if q.no_value:  # its one reason: no threshold or tolerance is said to fail without a value
        out.append(f"no {metric.label} value: {q.no_value}")
    side = "below" if metric.higher_is_better else "above"
    worst = (min(q.metrics) if metric.higher_is_better else max(q.metrics)) if q.metrics else None
    if q.threshold_ok is False:
        out.append(f"{metric.label} {side} the threshold ({worst:.4f})" if worst is not None
                   else f"{side} the threshold")
    if q.tolerance_ok is False:
        delta = f" ({metric.label} {worst:.4f} vs reference {q.metric_ref:.4f})" if worst is not None and \
            q.metric_ref is not None else ""
        if q.values_of("min_cosines"):  # an embedding job: the vectors' own tolerance
            delta += f" (min cosine with the reference vectors {min(q.values_of('min_cosines')):.4f})"
        out.append(f"outside the tolerance{delta}: {Q2_MARK}")
    out += generation_exclusions(q, metric)
    if q.subgroups_ok is False:
        failing = q.failing_subgroups(reference)
        out += [f"gating subgroup {line}" for line in failing] or \
            ["a gating subgroup misses its threshold or tolerance (see the raw table's notes)"]
    if q.reproduction_ok is False:
        out.append("the declared reproduction target does not hold")
    if not out and q.accepted < q.completed:
        out.append(f"only {q.accepted} of {q.completed} completed passes were accepted")
    return out
