"""The full verdict of a campaign's passes (Q2, Q3): each pass's own checks (``evaluate``) joined with its
comparison with the reference variant's first complete pass — the metric within tolerance, overall and in each
gating subgroup, and the declared reproduction target (label agreement, largest probability difference).

Reads the stored files only, through an ``evaluate.PredictionReader`` shared with the other checks of the same
folder: a comparison the run already made while it evaluated the passes is not made again.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from iteralab.campaign.kinds.interval import Interval, pass_intervals
from iteralab.campaign.kinds.output import prediction_path
from iteralab.campaign.kinds.verdictpart import FileComparison
from iteralab.campaign.verdict.evaluate import EvaluationContext, PredictionReader, missing_verdict
from iteralab.campaign.verdict.record import Verdict
from iteralab.plan.metric import TOL
from iteralab.plan.protocol import Protocol

#: The problem a pass gets when its file is not the one the journal recorded (read back by stats).
HASH_PROBLEM = "prediction file does not match its recorded sha256"
#: A pass's own file checks and the reason each gives when it fails.
FILE_CHECKS = (("ids_match", "ids do not match"), ("format_ok", "format"), ("hash_ok", "hash"),
               ("coverage_ok", "coverage"))


@dataclass(frozen=True)
class FinishedPass:
    """A finished pass as the verdict reads it from the journal: its id and variant, how it ended, its prediction
    file and the sha256s recorded for it (``queries_sha256``: its query vector file's, metric.queries), its dataset
    (K6) and seed (Q3)."""

    pass_id: str
    variant: str
    status: str | None
    prediction_file: str | None
    prediction_sha256: str | None
    queries_sha256: str | None = None
    dataset: str | None = None
    seed: int | None = None


@dataclass(frozen=True)
class SubgroupCheck:
    """One gating group of one pass against its bounds: the protocol's subgroup threshold (if any) and the
    reference pass's value minus the tolerance. The one rule for the verdict (:func:`judge_campaign`) and for
    every text that explains it (stats, decision note, report)."""

    key: str
    metric: str
    value: float | None
    reference: float | None
    threshold: float | None
    tolerance: float
    #: a complete pass of the reference variant exists (without one, no group can pass)
    has_reference: bool = True
    pass_id: str | None = None
    #: False for a lower-is-better metric routine's stratum group: the threshold is a maximum and the bound the
    #: reference plus the tolerance
    higher_is_better: bool = True
    #: ``metric.confidence`` declared: the worse bound of the interval of the group's difference with the reference
    #: (``kinds.interval``), which must lie within the tolerance too (None: the point estimate alone gates)
    delta_bound: float | None = None

    @property
    def below_threshold(self) -> bool:
        """The value is on the wrong side of the subgroup threshold (below it, or above it when lower is better)."""
        return self.value is not None and self.threshold is not None and (
            self.value + TOL < self.threshold if self.higher_is_better else self.value - TOL > self.threshold)

    @property
    def bound(self) -> float | None:
        """The worst value within the tolerance of the reference (None without a reference value)."""
        if self.reference is None:
            return None
        return self.reference - self.tolerance if self.higher_is_better else self.reference + self.tolerance

    @property
    def outside_tolerance(self) -> bool:
        if self.value is None or self.reference is None:
            return False
        worse = self.reference - self.value if self.higher_is_better else self.value - self.reference
        if self.delta_bound is not None:
            worse = max(worse, -self.delta_bound if self.higher_is_better else self.delta_bound)
        return worse > self.tolerance + TOL

    @property
    def failed(self) -> bool:
        return self.value is None or not self.has_reference or self.below_threshold or self.outside_tolerance

    def why(self, reference_variant: str) -> str:
        """'below 0.7500 (reference b4 0.8000 - tolerance 0.05)', 'below the subgroup threshold 0.6000', both
        joined by 'and', or why there is nothing to compare."""
        if self.value is None:
            return "no value (no covered document in the group)"
        parts = []
        side, sign = ("below", "-") if self.higher_is_better else ("above", "+")
        if self.below_threshold:
            parts.append(f"{side} the subgroup threshold {self.threshold:.4f}")
        if self.outside_tolerance:
            parts.append(f"{side} {self.bound:.4f} (reference {reference_variant} {self.reference:.4f} {sign} "
                         f"tolerance {self.tolerance:g})" if self.delta_bound is None else
                         f"the interval's bound {self.delta_bound:+.4f} of the difference with reference "
                         f"{reference_variant} {self.reference:.4f} is beyond the tolerance {self.tolerance:g}")
        if not self.has_reference:
            parts.append(f"no complete pass of reference variant {reference_variant!r} to compare with")
        return " and ".join(parts) or "within its bounds"

    def to_dict(self) -> dict[str, Any]:
        return {"subgroup": self.key, "metric": self.metric, "value": self.value, "reference": self.reference,
                "threshold": self.threshold, "tolerance": self.tolerance, "bound": self.bound,
                "has_reference": self.has_reference, "pass_id": self.pass_id,
                "below_threshold": self.below_threshold, "outside_tolerance": self.outside_tolerance,
                **({} if self.higher_is_better else {"higher_is_better": False}),
                **({} if self.delta_bound is None else {"delta_bound": self.delta_bound})}


def subgroup_check(protocol: Protocol, key: str, value: float | None, reference: float | None,
                   has_reference: bool, pass_id: str | None = None,
                   interval: Sequence[float] | None = None) -> SubgroupCheck | None:
    """The check of group ``key`` (``<subgroup>:<group>``) of a pass; None when its subgroup is not gating.
    ``interval``: the group's difference interval [low, high], gating when the protocol declares
    ``metric.confidence``."""
    sg = next((s for s in protocol.subgroups if s.gating and s.name == key.split(":", 1)[0]), None)
    if sg is None:
        return None
    by_metric = sg.by == "stratum"  # a class group is judged by its class's recall, whatever the metric
    up = protocol.metric.higher_is_better if by_metric else True
    bound = None
    if protocol.metric.confidence is not None and interval is not None:
        bound = float(interval[0] if up else interval[1])
    return SubgroupCheck(key, protocol.metric.label if by_metric else "recall", value, reference,
                         sg.threshold, sg.tolerance if sg.tolerance is not None
                         else protocol.metric.allowed_drop(reference if reference is not None else 0.0),
                         has_reference, pass_id, up, bound)


def compare_predictions(a: Path, b: Path, protocol: Protocol) -> FileComparison:
    """How far two prediction files agree, as their kind compares them (``kind.verdict.compare_files``: a
    classification job's labels and probabilities, an embedding job's vectors, a generation job's texts)."""
    reader = PredictionReader(protocol)
    return reader.kind.verdict.compare_files(a, b, protocol, reader)


def judge_campaign(campaign_dir: str | Path, passes: list[FinishedPass], reader: PredictionReader | None = None,
                   context: EvaluationContext | None = None) -> dict[str, Verdict]:
    """Full verdict of each finished pass, including the comparisons with the reference variant.

    ``passes`` are the finished passes in journal order, each with ``pass_id``, ``variant``, ``status`` and
    ``prediction_file``/``prediction_sha256`` as recorded (and ``dataset``, ``seed``: each dataset and each seed has
    its own reference pass). A file whose hash differs from the recorded one is not counted. Each file is read once (``reader``, shareable with other checks of the same folder).
    """
    campaign_dir = Path(campaign_dir)
    context = context or EvaluationContext.of(campaign_dir)
    groups = list(dict.fromkeys(p.dataset for p in passes))
    if groups != [None] and passes:  # K6: each dataset's passes judged against it, with its own reference pass
        judged: dict[str, Verdict] = {}
        for name in groups:
            mine = [replace(p, dataset=None) for p in passes if p.dataset == name]
            judged.update(judge_campaign(campaign_dir, mine, reader, context.of_dataset(name)))
        return judged
    seeds = list(dict.fromkeys(p.seed for p in passes))
    if len(seeds) > 1:  # Q3: several seeds kept apart, each seed's passes judged against its own reference pass
        judged = {}
        for seed in seeds:
            judged.update(judge_campaign(campaign_dir, [replace(p, seed=None) for p in passes if p.seed == seed],
                                         reader, context))
        return judged
    protocol = context.protocol
    reader = reader or PredictionReader(protocol)
    verdicts, paths = _own_verdicts(campaign_dir, passes, reader, context)
    ref = ReferencePass(passes, verdicts, paths, reader, context)
    return {p.pass_id: _judged(verdicts[p.pass_id], p, ref, context, context.protocol_sha256) for p in passes}


#: The cells that hold why a pass's metric could not be computed (the first one present is its reason).
ERROR_CELLS = ("routine_error", "queries_error", "reference_error")


def _judged(v: Verdict, p: FinishedPass, ref: ReferencePass, context: EvaluationContext, seed: str) -> Verdict:
    """A pass's own verdict ``v`` judged against the reference pass: the metric, the subgroups, the kind's
    comparison (``kind.verdict.compare``), the reproduction target, and the reasons it is not accepted. ``seed``:
    the locked protocol's sha256 (campaign.json's), which seeds the quality intervals (with the pass's id)."""
    protocol, part = context.protocol, ref.reader.kind.verdict
    gating = {sg.name: sg for sg in protocol.subgroups if sg.gating}
    v = v.with_cells(reference_pass=ref.pass_id)
    # Each reason is a cause, said once: what follows from one (a metric that has no value is neither below
    # the threshold nor outside the tolerance; a failed pass's missing ids) is not listed beside it.
    reasons = [label for key, label in FILE_CHECKS if not v.cell(key)]
    errors = [v.cell(key) for key in ERROR_CELLS if v.cell(key)]
    reasons += errors[:1]
    intervals = _intervals(v, ref, protocol, seed, p.pass_id)
    main = intervals.pop("", None)
    against = _against_reference(v, ref.verdict, protocol, main)
    v = v.with_cells(metric_ref=against.metric_ref, metric_delta=against.metric_delta,
                     delta_low=main.low if main else None, delta_high=main.high if main else None,
                     delta_units=main.units if main else None, tolerance_ok=against.tolerance_ok,
                     subgroup_deltas={k: [i.low, i.high] for k, i in intervals.items()} if intervals else None)
    if v.metric is None:
        v = v.with_cells(threshold_ok=None, tolerance_ok=None)  # not evaluated: nothing to compare
        if not reasons:
            reasons.append(f"no {protocol.metric.label} value")
    else:
        if not v.threshold_ok:
            reasons.append(f"{'below' if protocol.metric.higher_is_better else 'above'} threshold")
        reasons += against.reasons
    # a group whose value the same error prevented is not evaluated, not a second reason
    unvalued = {k for k, value in v.subgroups.items() if value is None} if errors else set()
    failed_subgroups = _subgroup_reasons(v, ref.verdict, protocol,
                                         gating if part.subgroups_by_metric(protocol) else {}, unvalued,
                                         v.subgroup_deltas or {})
    reasons += failed_subgroups
    compared = part.compare(v, ref, ref.paths[p.pass_id] if p.prediction_file else None, protocol,
                            context.expected)
    v = v.with_cells(**compared.cell_values())
    reasons += compared.reasons
    failed_subgroups += compared.subgroup_reasons
    gated = any(subgroup_check(protocol, k, None, None, True) is not None for k in unvalued)
    v = v.with_cells(subgroups_ok=False if failed_subgroups else None if gated else True)
    if not v.reproduction_ok:
        reasons.append(f"reproduction target '{protocol.reproduction.target}'")
    if p.status != "ok":  # the first cause: whatever else fails follows from it
        reasons = [f"pass {p.status or 'failed'}"]
    return v.with_cells(corpus_accepted=not reasons, reasons=reasons)


def _intervals(v: Verdict, ref: ReferencePass, protocol: Protocol, seed: str, pass_id: str) -> dict[str, Interval]:
    """The intervals of the pass's quality differences with the reference pass (``kinds.interval``): the main
    metric's (key ``""``) and each gating group's, at the protocol's level, seeded by ``seed`` and the pass."""
    if ref.verdict is None or v.metric is None or ref.verdict.metric is None:
        return {}
    return pass_intervals(ref.reader.kind.verdict, v, ref.verdict, protocol, ref.expected, seed, pass_id)


def _own_verdicts(campaign_dir: Path, passes: list[FinishedPass], reader: PredictionReader,
                  context: EvaluationContext) -> tuple[dict[str, Verdict], dict[str, Path]]:
    """Each pass's verdict on its own prediction file (ids, format, hash, metric), and the file's path."""
    protocol, expected = context.protocol, context.expected
    verdicts: dict[str, Verdict] = {}
    paths: dict[str, Path] = {}
    for p in passes:
        path = paths[p.pass_id] = (campaign_dir / p.prediction_file if p.prediction_file
                                   else prediction_path(campaign_dir, p.pass_id))
        digest = reader.sha256(path, expected.ids)
        v = reader.verdict(path, protocol, expected, context.routine, context.queries, context.references) \
            if digest else None
        v = v or missing_verdict(path.name, protocol, expected)
        v = v.with_cells(hash_ok=digest is not None and p.prediction_sha256 == digest and (
            not v.has("queries_sha256") or v.cell("queries_sha256") == p.queries_sha256))  # the query file
        if digest is not None and not v.hash_ok:
            v = v.with_cells(problems=(*v.problems, HASH_PROBLEM))
        v = v.with_cells(complete=p.status == "ok" and v.ids_match and v.format_ok and v.hash_ok)
        verdicts[p.pass_id] = v
    return verdicts, paths


class ReferencePass:
    """The reference variant's first complete pass and its verdict: what a kind's comparison
    (``kind.verdict.compare``) reads it through (``paths``, ``reader``, ``key``, ``held``); its outputs are read
    (once) only when a comparison was not made as the passes were evaluated."""

    def __init__(self, passes: list[FinishedPass], verdicts: dict[str, Verdict], paths: dict[str, Path],
                 reader: PredictionReader, context: EvaluationContext) -> None:
        self.name = context.protocol.metric.reference_variant
        self.pass_id = next((p.pass_id for p in passes if p.variant == self.name and verdicts[p.pass_id].complete),
                            None)
        self.verdict = verdicts.get(self.pass_id) if self.pass_id else None
        self.paths, self.reader, self.ids = paths, reader, context.expected.ids
        self.expected = context.expected
        self.protocol = context.protocol
        self.key = ((paths[self.pass_id].resolve(), reader.sha256(paths[self.pass_id], self.ids))
                    if self.pass_id else None)
        #: what the kind's comparison reads of the reference pass once and holds (its predictions, its texts)
        self.held: dict[str, Any] = {}


@dataclass(frozen=True)
class AgainstReference:
    """A pass's metric against the reference pass's: the reference's value, the difference (None: either has
    none), whether it is within the tolerance, and the reasons it is not."""

    metric_ref: float | None
    metric_delta: float | None
    tolerance_ok: bool
    reasons: tuple[str, ...] = ()


def _against_reference(v: Verdict, ref_v: Verdict | None, protocol: Protocol,
                       interval: Interval | None = None) -> AgainstReference:
    """The metric against the reference pass's (the cells ``metric_ref``, ``metric_delta``, ``tolerance_ok``);
    with ``metric.confidence`` declared, the worse bound of the difference's ``interval`` must be within the
    tolerance too."""
    if ref_v is None:
        return AgainstReference(None, None, False,
                                (f"no complete pass of reference variant {protocol.metric.reference_variant!r}",))
    if ref_v.metric is None:  # a routine that failed on the reference pass: nothing to compare with
        return AgainstReference(None, None, False, (f"reference pass has no {protocol.metric.label} value",))
    allowed = protocol.metric.allowed_drop(ref_v.metric)  # absolute, or relative to the reference's value
    ok = v.metric is not None and protocol.metric.within(v.metric, ref_v.metric, allowed)
    reasons = () if ok else ("outside tolerance",)
    if ok and protocol.metric.confidence is not None:
        up = protocol.metric.higher_is_better
        ok = interval is not None and protocol.metric.within(ref_v.metric + interval.worse(up), ref_v.metric, allowed)
        if not ok:
            reasons = (f"within tolerance not established at {protocol.metric.interval_level:.0%}",)
    return AgainstReference(ref_v.metric, None if v.metric is None else v.metric - ref_v.metric, ok, reasons)


def _subgroup_reasons(v: Verdict, ref_v: Verdict | None, protocol: Protocol,
                      gating: Mapping[str, Any], unvalued: Collection[str] = (),
                      intervals: Mapping[str, Sequence[float]] | None = None) -> list[str]:
    """A gating subgroup with no group to evaluate, and each subgroup whose check fails (but the ``unvalued``
    groups, whose value the pass's metric error prevented: that error is their reason)."""
    reasons = []
    for name in gating:
        if not any(key.split(":", 1)[0] == name for key in v.subgroups):
            reasons.append(f"gating subgroup {name!r} has no groups to evaluate (empty column?)")
    for key, value in v.subgroups.items():
        if key in unvalued:
            continue
        check = subgroup_check(protocol, key, value, ref_v.subgroups.get(key) if ref_v else None,
                               ref_v is not None, interval=(intervals or {}).get(key))
        if check is not None and check.failed:
            reasons.append(f"subgroup {key}")
    return reasons
