"""Statistics per variant (T3–T5) and quality per variant (Q1–Q3), recomputed from the stored evidence.

Everything here re-reads the campaign folder: ``raw_table.csv`` (one row per attempted pass), the journal
(exclusions are ``pass_excluded`` events, the source of truth), the locked ``inputs/protocol.toml`` and
``manifest.json``. Nothing comes from the runner's memory.

Per variant: every measured pass time in run order, the median, minimum and maximum of the counted passes,
and the counts of successes, failures and aborts (separately) and of excluded passes with their reasons.
Every pass is shown; a variant is never summarised by its best pass.

There is deliberately no p95 (nor any other tail percentile). A handful of corpus times is not a latency
distribution: five corpus pass times and one thousand per-request latencies are different populations. A
latency study needs individual request times under an arrival scenario with a stated concurrency, which an
offline campaign does not measure. A tail percentile of five values would be the maximum under another name.

Two variants of a series are *distinguished* only by the exact rank test at the level the protocol declared
(:mod:`iteralab.evidence.speed`); otherwise the comparison says the series does not distinguish them and what to
do (T5). Under ``stats.loaded_passes = "apart"`` (the default) a pass measured under concurrent load is an
external incident (T4): shown, marked, and not counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from iteralab.campaign.folder import PHASES, RawRow
from iteralab.campaign.kinds.interval import NOT_ESTABLISHED, OUTSIDE, REPLICATES, WITHIN, standing
from iteralab.campaign.kinds.registry import kind_of
from iteralab.campaign.verdict.judge import HASH_PROBLEM, SubgroupCheck, subgroup_check
from iteralab.evidence.datasets import JOB_TIME_RULE, PassTime, job_rounds
from iteralab.evidence.reads import Evidence, load_evidence
from iteralab.evidence.speed import (Comparison, VariantTimes, compare, fmt_s, pct, set_apart, speed_rule,
                                     speed_rule_line)
from iteralab.evidence.table import CONCURRENT_NOTE, SUBGROUP_CLASSES_NOTE, rejection_of, subgroup_classes_of
from iteralab.plan.metric import MetricSpec
from iteralab.plan.protocol import Protocol
from iteralab.plan.tables import StatsSpec

SCHEMA_VERSION = 1
NO_TAIL_PERCENTILE = (
    "no p95 or other tail percentile: a few corpus pass times and per-request latencies are different "
    "populations; a latency study needs individual request times under an arrival scenario and concurrency"
)
#: The declared reproduction target, named in every verdict (Q3): "held" never reads as "the same result".
TARGET_NAMES = {"identical": "identical-output", "bounded": "bounded-difference", "acceptable": "acceptable-quality"}
MISSING_SUBGROUP = "its check was not actually made (look at the stratum column of inputs/corpus.csv)"
Q2_MARK = "kept in the table, MARKED, excluded from the equivalent-quality comparison (Q2)"
#: What an attempt a stop signal interrupted is, wherever it is listed (stats, decision, report).
INTERRUPTED_LINE = ("interrupted: the run was stopped by a signal during this pass; not a failure and counted for "
                    "nothing (no time, no quality, no feasibility evidence); its slot runs again on resume")
#: Said of a class no variant ever finds: its gate compares 0 with 0 and passes.
ZERO_RECALL = "recall 0 in every variant, the reference included"


# ---------------------------------------------------------------------------------------------- times


# -------------------------------------------------------------------------------------------- quality


class IntervalJSON(TypedDict, total=False):
    """A variant's quality interval as ``decision.json`` holds it (:meth:`QualityInterval.to_dict`; a variant
    without one: its ``hardware``, ``variant``, ``standing`` None and ``established`` false)."""

    hardware: str
    variant: str
    delta: float | None
    low: float
    high: float
    n: int
    level: float
    standing: str | None
    established: bool
    subgroups: dict[str, list[float]]


class QualityRecordJSON(TypedDict):
    """``decision.json``'s ``quality`` (:func:`quality_record`)."""

    metric: str
    level: float
    gate: str
    replicates: int
    variants: list[IntervalJSON]
    established: list[str]


@dataclass(frozen=True)
class QualityInterval:
    """A variant's quality difference with the reference pass: that of its worst counted pass (``delta``, its
    interval ``low``..``high`` at ``level`` over ``units`` resampled units: documents, or a ranking metric's
    queries), what its passes' intervals establish against the tolerance (``standing``: ``kinds.interval``'s
    words, established within only when every pass's is, outside when one pass's is) and each gating group's worst
    interval."""

    delta: float | None
    low: float
    high: float
    units: int
    level: float
    standing: str
    subgroups: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """'delta -0.0042, 95 % interval [-0.0101, +0.0015] over 1000 units: within tolerance, established'."""
        delta = "" if self.delta is None else f"delta {self.delta:+.4f}, "
        return (f"{delta}{self.level:.0%} interval [{self.low:+.4f}, {self.high:+.4f}] over {self.units} units: "
                f"{self.standing}")

    def to_dict(self) -> IntervalJSON:
        return {"delta": self.delta, "low": self.low, "high": self.high, "n": self.units, "level": self.level,
                "standing": self.standing, "established": self.standing != NOT_ESTABLISHED,
                "subgroups": {k: list(v) for k, v in self.subgroups.items()}}


def quality_interval(protocol: Protocol, done: list[RawRow]) -> QualityInterval | None:
    """:class:`QualityInterval` of a variant's counted passes (None when no pass has an interval)."""
    up = protocol.metric.higher_is_better
    judged = [r for r in done if r.delta_low is not None and r.delta_high is not None and r.metric_ref is not None]
    if not judged:
        return None
    standings = [standing(r.delta_low, r.delta_high, protocol.metric.allowed_drop(r.metric_ref or 0.0), up)
                 for r in judged]
    verdict = OUTSIDE if OUTSIDE in standings else WITHIN if all(x == WITHIN for x in standings) \
        else NOT_ESTABLISHED
    worst = min(judged, key=lambda r: (r.delta_low if up else -(r.delta_high or 0.0)) or 0.0)
    groups: dict[str, tuple[float, float]] = {}
    for r in judged:
        for key, (low, high) in (r.subgroup_deltas or {}).items():
            old = groups.get(key)
            if old is None or (low < old[0] if up else high > old[1]):
                groups[key] = (float(low), float(high))
    return QualityInterval(worst.metric_delta, float(worst.delta_low or 0.0), float(worst.delta_high or 0.0),
                           int(worst.delta_units or 0), protocol.metric.interval_level, str(verdict),
                           dict(sorted(groups.items())))


def quality_record(metric: MetricSpec, stats: list[tuple[str, CampaignStats]]) -> QualityRecordJSON:
    """``decision.json``'s ``quality``: the intervals' rule (level, whether the gate uses the interval, replicates)
    and each variant's quality difference with its interval on each observed machine (``stats``: each machine's
    label and statistics), the established ones listed apart."""
    rows: list[IntervalJSON] = []
    for hw, st in stats:
        for q in st.quality:
            row: IntervalJSON = q.interval.to_dict() if q.interval else {"standing": None, "established": False}
            rows.append({"hardware": hw, "variant": q.variant, **row})
    return {"metric": metric.label, "level": metric.interval_level,
            "gate": "interval" if metric.confidence is not None else "point estimate", "replicates": REPLICATES,
            "variants": rows,
            "established": [f"{r.get('hardware')}: {r.get('variant')} {r.get('standing')}" for r in rows
                            if r.get("established")]}


@dataclass(frozen=True)
class VariantQuality:
    """Quality verdicts of one variant over its completed, counted passes (Q1–Q3)."""

    variant: str
    completed: int
    accepted: int
    format_ok: bool | None
    ids_ok: bool | None
    metrics: tuple[float, ...]
    metric_ref: float | None
    threshold_ok: bool | None
    tolerance_ok: bool | None
    subgroups_ok: bool | None
    subgroups: dict[str, tuple[float | None, ...]]
    reproduction_ok: bool | None
    label_agreement: float | None
    max_abs_prob_diff: float | None
    #: every failed gating group of every counted pass, with its value, bounds and the reference value
    subgroup_failures: tuple[SubgroupCheck, ...] = ()
    #: per group whose metric left some classes out: each distinct set of classes it averaged over
    subgroup_classes: dict[str, tuple[tuple[str, ...], ...]] = field(default_factory=dict)
    #: the kind's quality series (``kind.quality_series``), by name: each counted pass's value of its column
    #: (an embedding job: ``min_cosines``; a generation job: ``mean_tokens``, ``length_shares``,
    #: ``identical_shares``), the measured ones only
    series: dict[str, tuple[float, ...]] = field(default_factory=dict)
    #: why a counted pass has no metric value (its one reason, as the raw table's notes give it); None when every
    #: counted pass has one
    no_value: str | None = None
    #: the quality difference with the reference pass of its worst counted pass (point, interval at the protocol's
    #: level, units resampled) and what the intervals of all its counted passes establish (``QualityInterval``)
    interval: QualityInterval | None = None

    def values_of(self, name: str) -> tuple[float, ...]:
        """The series ``name`` (empty when the kind shows no such series or no pass measured it)."""
        return self.series.get(name, ())

    def failing_subgroups(self, reference_variant: str) -> list[str]:
        """One line per failing gating group: 'length:long macro_f1 0.7000 in 3 of 3 passes: below 0.7500
        (reference b4 0.8000 - tolerance 0.05)'."""
        grouped: dict[tuple[str, str, str], list[float | None]] = {}
        for check in self.subgroup_failures:
            grouped.setdefault((check.key, check.metric, check.why(reference_variant)), []).append(check.value)
        return [f"{key} {metric} {_values(tuple(values))} in {len(values)} of {self.completed} "
                f"pass{'es' if self.completed != 1 else ''}: {why}" for (key, metric, why), values in grouped.items()]

    @property
    def equivalent(self) -> bool:
        """Inside the equivalent-quality comparison: evaluated and within the tolerance of the reference."""
        return self.tolerance_ok is True

    @property
    def meets_quality(self) -> bool:
        return all(x is True for x in (self.format_ok, self.ids_ok, self.threshold_ok, self.tolerance_ok,
                                       self.subgroups_ok, self.reproduction_ok)) and self.accepted == self.completed

    def missing_subgroups(self, gating: list[str]) -> list[str]:
        """Gating subgroups declared by the protocol for which the evidence holds no value at all."""
        if self.completed == 0:
            return []
        return [name for name in gating if not any(k.split(":", 1)[0] == name for k in self.subgroups)]

    @property
    def mark(self) -> str | None:
        if self.tolerance_ok is False:
            return f"outside the tolerance: {Q2_MARK}"
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "variant": self.variant, "completed_passes": self.completed, "accepted_passes": self.accepted,
            "format_ok": self.format_ok, "ids_ok": self.ids_ok, "metrics": list(self.metrics),
            "metric_ref": self.metric_ref, "threshold_ok": self.threshold_ok, "tolerance_ok": self.tolerance_ok,
            "subgroups_ok": self.subgroups_ok, "subgroups": {k: list(v) for k, v in self.subgroups.items()},
            "reproduction_ok": self.reproduction_ok, "label_agreement_min": self.label_agreement,
            "max_abs_prob_diff": self.max_abs_prob_diff, "equivalent": self.equivalent,
            "meets_quality": self.meets_quality, "mark": self.mark,
            "subgroup_failures": [c.to_dict() for c in self.subgroup_failures],
            "subgroup_classes": {k: [list(c) for c in v] for k, v in self.subgroup_classes.items()},
            **({"no_value": self.no_value} if self.no_value else {}),
            "quality_interval": self.interval.to_dict() if self.interval else None,
            **({name: list(values) for name, values in self.series.items()} if any(self.series.values())
               else {}),  # the kind's own series, when some pass has a value
        }


def _all(values: list[bool | None]) -> bool | None:
    if any(v is False for v in values):
        return False
    return True if values and all(v is True for v in values) else None


def seed_reference_rows(ev: Evidence) -> dict[tuple[str | None, int | None], RawRow]:
    """Per dataset (None: the one corpus) and seed, the row of the pass every pass's quality was compared with:
    the first pass of the reference variant, in journal order, that completed with the expected ids, the declared
    format and its recorded file (``campaign.verdict.judge``'s rule; several seeds are judged apart, Q3)."""
    ref = ev.protocol.metric.reference_variant
    out: dict[tuple[str | None, int | None], RawRow] = {}
    for r in ev.rows:
        if r.variant == ref and r.ok and r.ids_match and r.format_ok and HASH_PROBLEM not in (r.notes or ""):
            out.setdefault((r.dataset, r.seed), r)
    return out


def reference_rows(ev: Evidence) -> dict[str | None, RawRow]:
    """Per dataset, the first of :func:`seed_reference_rows` (the reference of the first seed)."""
    out: dict[str | None, RawRow] = {}
    for (dataset, _), row in seed_reference_rows(ev).items():
        out.setdefault(dataset, row)
    return out


def _failures(protocol: Protocol, done: list[RawRow], refs: dict[tuple[str | None, int | None], RawRow]
              ) -> tuple[SubgroupCheck, ...]:
    """The failed gating groups of the passes whose verdict says a gating subgroup fails."""
    out = []
    for r in done:
        if r.subgroups_ok is not False:
            continue
        ref = refs.get((r.dataset, r.seed))
        for key, value in (r.subgroup_metrics or {}).items():
            check = subgroup_check(protocol, key, value, (ref.subgroup_metrics or {}).get(key) if ref else None,
                                   ref is not None, r.pass_id, (r.subgroup_deltas or {}).get(key))
            if check is not None and check.failed:
                out.append(check)
    return tuple(out)


def _classes_averaged(protocol: Protocol, done: list[RawRow]) -> dict[str, tuple[tuple[str, ...], ...]]:
    """Per group whose metric left a class out in some pass: the distinct sets of classes averaged (a pass that
    lists nothing for the group averaged over every class)."""
    every = tuple(protocol.corpus.classes)
    listed = [subgroup_classes_of(r.notes) for r in done]
    keys = sorted({k for one in listed for k in one})
    return {k: tuple(dict.fromkeys(tuple(one.get(k, every)) for one in listed)) for k in keys}


def _quality(variant: str, rows: list[RawRow], excluded: dict[str, str], protocol: Protocol,
             reference: dict[tuple[str | None, int | None], RawRow]) -> VariantQuality:
    done = [r for r in rows if r.ok and r.pass_id not in excluded]
    metrics = tuple(r.metric for r in done if r.metric is not None)
    refs = [r.metric_ref for r in done if r.metric_ref is not None]
    groups: dict[str, list[float | None]] = {}
    for r in done:
        for key, value in (r.subgroup_metrics or {}).items():
            groups.setdefault(key, []).append(value)
    agreements = [r.label_agreement for r in done if r.label_agreement is not None]
    diffs = [r.max_abs_prob_diff for r in done if r.max_abs_prob_diff is not None]
    return VariantQuality(
        variant=variant, completed=len(done), accepted=sum(r.accepted for r in done),
        format_ok=_all([r.format_ok for r in done]),
        ids_ok=_all([r.ids_match for r in done]),
        metrics=metrics, metric_ref=refs[0] if refs else None,
        threshold_ok=_all([r.threshold_ok for r in done]),
        tolerance_ok=_all([r.tolerance_ok for r in done]),
        subgroups_ok=_all([r.subgroups_ok for r in done]),
        subgroups={k: tuple(v) for k, v in sorted(groups.items())},
        reproduction_ok=_all([r.reproduction_ok for r in done]),
        label_agreement=min(agreements) if agreements else None, max_abs_prob_diff=max(diffs) if diffs else None,
        subgroup_failures=_failures(protocol, done, reference), subgroup_classes=_classes_averaged(protocol, done),
        series={s.name: tuple(getattr(r, s.column) for r in done if getattr(r, s.column) is not None)
                for s in kind_of(protocol).quality_series},
        no_value=next((rejection_of(r.notes) for r in done if r.metric is None and rejection_of(r.notes)), None),
        interval=quality_interval(protocol, done))


# -------------------------------------------------------------------------------------------- summary


@dataclass(frozen=True)
class CampaignStats:
    evidence: Evidence
    variants: tuple[VariantTimes, ...]
    comparisons: tuple[Comparison, ...]
    quality: tuple[VariantQuality, ...]
    notes: tuple[str, ...] = field(default=())

    def times(self, variant: str) -> VariantTimes:
        return next(v for v in self.variants if v.variant == variant)

    def quality_of(self, variant: str) -> VariantQuality:
        return next(q for q in self.quality if q.variant == variant)

    def zero_recall(self) -> list[str]:
        """'class plot: recall 0 in every variant, the reference included' for each class that every variant
        with a counted pass, the reference variant among them, found in no pass: a gate that compares 0 with 0
        passes and would otherwise say nothing."""
        p = self.evidence.protocol
        evaluated = [q for q in self.quality if q.completed]
        if not any(q.variant == p.metric.reference_variant for q in evaluated):
            return []
        out = []
        for sg in (s for s in p.subgroups if s.by != "stratum"):
            for name in p.corpus.classes:
                values = [q.subgroups.get(f"{sg.name}:{name}") for q in evaluated]
                if all(v and all(x == 0 for x in v) for v in values):
                    out.append(f"class {name}: {ZERO_RECALL}")
        return list(dict.fromkeys(out))

    def to_dict(self) -> dict[str, Any]:
        ev, p = self.evidence, self.evidence.protocol
        return {
            "schema_version": SCHEMA_VERSION, "campaign": str(ev.folder),
            "protocol": ev.campaign.protocol.identity(),
            "corpus": {"fingerprint": ev.fingerprint, "size": ev.corpus_size},
            "hardware": ev.hardware.to_dict(), "tail_percentiles": NO_TAIL_PERCENTILE,
            "exclusion_rule": p.run.exclusion_rule, "speed_rule": speed_rule(p.stats),
            "variants": [v.to_dict() for v in self.variants],
            "comparisons": [c.to_dict() for c in self.comparisons],
            "quality": {"metric": p.metric.label, "threshold": p.metric.threshold, "tolerance": p.metric.tolerance,
                        "relative_tolerance": p.metric.relative_tolerance,
                        "reference_variant": p.metric.reference_variant,
                        "gating_subgroups": [s.name for s in p.subgroups if s.gating],
                        "reproduction": p.reproduction.model_dump(mode="json"),
                        "variants": [q.to_dict() for q in self.quality]},
            "notes": list(self.notes),
        }


def campaign_stats(campaign_dir: str | Path | Evidence) -> CampaignStats:
    """Statistics and quality per variant of one campaign folder, from its stored files."""
    ev = campaign_dir if isinstance(campaign_dir, Evidence) else load_evidence(campaign_dir)
    declared = [v["name"] for v in ev.campaign.variants]
    by_variant: dict[str, list[RawRow]] = {name: [] for name in declared}
    for row in ev.rows:
        by_variant.setdefault(row.variant, []).append(row)
    series_of: dict[str, list[str]] = {}
    for s in ev.campaign.series:
        for name in s["variants"]:
            series_of.setdefault(name, []).append(s["name"])
    variants = []
    rule = ev.protocol.stats
    for name, rows in by_variant.items():  # K6: job times per round, never pooled passes of datasets
        passes = set_apart(job_rounds(ev.campaign, rows, ev.exclusions, CONCURRENT_NOTE), rule)
        stopped = tuple(r.pass_id for r in ev.interrupted if r.variant == name)
        variants.append(VariantTimes(name, tuple(series_of.get(name, [])), passes, stopped, rule))
    index = {v.variant: v for v in variants}
    comparisons = []
    for s in ev.campaign.series:
        members = [index[n] for n in s["variants"] if n in index]
        for i, a in enumerate(members):
            for b in members[i + 1:]:
                comparisons.append(compare(a, b, f"series {s['name']}"))
    refs = seed_reference_rows(ev)
    quality = tuple(_quality(name, rows, ev.exclusions, ev.protocol, refs) for name, rows in by_variant.items())
    notes = []
    excluded_in = sorted({v.variant for v in variants if v.excluded})
    if ev.campaign.datasets:
        notes.append(JOB_TIME_RULE)
    if excluded_in:
        notes.append(f"exclusions recorded in {', '.join(excluded_in)}; the same rule applies to every variant: "
                     f"{ev.protocol.run.exclusion_rule}")
    return CampaignStats(ev, tuple(variants), tuple(comparisons), quality, tuple(notes))


# ------------------------------------------------------------------------------------------ rendering


def _flag(value: bool | None, yes: str, no: str, unknown: str = "not evaluated") -> str:
    return unknown if value is None else yes if value else no


def _values(values: tuple[float | None, ...] | tuple[float, ...]) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "-"
    if min(known) == max(known):
        return f"{known[0]:.4f}"
    return f"{min(known):.4f}-{max(known):.4f} (per pass {', '.join(f'{v:.4f}' for v in known)})"


def render_quality(stats: CampaignStats) -> list[str]:
    p = stats.evidence.protocol
    rep = p.reproduction
    target = f"{rep.target} (bound {rep.bound:g})" if rep.target == "bounded" and rep.bound else rep.target
    manifest = stats.evidence.manifest
    determinism = (manifest.environment if manifest else {}).get("determinism") or {}
    torch_det = determinism.get("torch_deterministic_algorithms")
    gating = [s.name for s in p.subgroups if s.gating]
    lines = [
        f"Quality: {p.metric.label} {p.metric.relation} {p.metric.threshold:g}, within {p.metric.tolerance_text} of "
        f"reference {p.metric.reference_variant}; gating subgroups: {', '.join(gating) or 'none'}",
        f"reproduction target declared: {target}; seeds {', '.join(str(s) for s in rep.seeds)}; deterministic "
        f"options requested: {'yes' if rep.deterministic else 'no'}"
        + ("" if torch_det is None else f" (torch deterministic algorithms observed: {torch_det})"),
    ]
    for q in stats.quality:
        if q.completed == 0:
            lines.append(f"  {q.variant}: not evaluated, no completed pass")
            continue
        delta = ""
        if q.metrics and q.metric_ref is not None:
            worst = min(q.metrics) if p.metric.higher_is_better else max(q.metrics)
            delta = f" (reference {q.metric_ref:.4f}, delta {worst - q.metric_ref:+.4f})"
        parts = [
            f"{q.completed} completed pass{'es' if q.completed != 1 else ''}, {q.accepted} accepted",
            _flag(q.format_ok, "format ok", "FORMAT PROBLEMS"),
            _flag(q.ids_ok, "ids match", "IDS DO NOT MATCH"),
            f"{p.metric.label} {_values(q.metrics)}{delta}" if q.metrics or not q.no_value else
            f"{p.metric.label} NO VALUE: {q.no_value}",
            _flag(q.threshold_ok, "threshold met", "BELOW THRESHOLD" if p.metric.higher_is_better else
                  "ABOVE THRESHOLD", "threshold not evaluated"),
            _flag(q.tolerance_ok, "within tolerance", "OUTSIDE TOLERANCE", "tolerance not evaluated"),
            _flag(q.subgroups_ok, "gating subgroups ok", "GATING SUBGROUP FAILS"),
            f"{TARGET_NAMES.get(rep.target, rep.target)} target {_flag(q.reproduction_ok, 'held', 'NOT HELD')}"
            + ("" if q.label_agreement is None else
               f" (up to {pct(1 - q.label_agreement)} of labels differ from the reference in a pass, max |prob diff| "
               f"{q.max_abs_prob_diff:.2e})"),
        ]
        lines.append(f"  {q.variant}: " + "; ".join(parts))
        if q.interval is not None:
            lines.append(f"    quality difference with the reference: {q.interval.text}")
        if q.no_value and q.metrics:  # some passes have a value, some not: the others' one reason
            lines.append(f"    {len(q.metrics)} of {q.completed} passes have a {p.metric.label} value; the others "
                         f"NO VALUE: {q.no_value}")
        if q.subgroups:
            metric_of = {s.name: (p.metric.label if s.by == "stratum" else "recall") for s in p.subgroups}
            lines.append("    subgroups: " + ", ".join(f"{k} {metric_of.get(k.split(':')[0], '')} {_values(v)}"
                                                      for k, v in q.subgroups.items()))
        for line in q.failing_subgroups(p.metric.reference_variant):
            lines.append(f"    GATING SUBGROUP FAILS: {line}")
        if q.subgroup_classes:
            lines.append(f"    {SUBGROUP_CLASSES_NOTE} (a class absent from a subgroup is left out of its metric; "
                         "the groups not listed averaged every class): " + "; ".join(
                             f"{k} {' or '.join(', '.join(c) for c in sets)}"
                             + (" (per pass)" if len(sets) > 1 else "") for k, sets in q.subgroup_classes.items()))
        for name in q.missing_subgroups(gating):
            lines.append(f"    WARNING: gating subgroup {name!r} has no value in the raw table: {MISSING_SUBGROUP}")
        if q.mark:
            lines.append(f"    {q.variant} is {q.mark}")
    for line in stats.zero_recall():
        lines.append(f"  WARNING: {line}: no variant finds this class, so its gate compares 0 with 0")
    return lines


def render_stats(stats: CampaignStats) -> str:
    """The text a person reads: every pass time, median/min/max, counts, exclusions, T5 verdicts, quality."""
    ev = stats.evidence
    proto = ev.campaign.protocol
    lines = [
        f"Statistics: {ev.folder}",
        f"protocol {proto.name} version {proto.version} (sha256 {proto.sha256[:12]}), corpus "
        f"{ev.fingerprint[:12]} ({ev.corpus_size} documents), hardware observed: {ev.hardware.label}",
        "pass time = the measured pass (reading, tokenization, transfers, inference, predictions on the host); "
        "start-up phases are listed apart",
        NO_TAIL_PERCENTILE,
        "",
    ]
    incomplete = ev.incomplete_line()
    if incomplete:
        lines.insert(1, incomplete)
    for v in stats.variants:
        series = f" (series {', '.join(v.series)})" if v.series else ""
        stopped = f", {len(v.interrupted)} interrupted" if v.interrupted else ""
        lines.append(f"{v.variant}{series}: {len(v.passes) + len(v.interrupted)} attempted, {v.count('ok')} ok, "
                     f"{v.count('failed')} failed, {v.count('aborted')} aborted{stopped}, {len(v.excluded)} excluded")
        shown = []
        for p in v.passes:
            value = f"{fmt_s(p.pass_s)} s" if p.pass_s is not None else "no time"
            tag = "" if p.status == "ok" else f" [{p.status}]"
            tag += " [excluded]" if p.excluded else ""
            tag += " [concurrent load]" if p.concurrent else ""
            shown.append(f"{p.pass_id} {value}{tag}")
        lines.append("  every pass, in run order: " + ("; ".join(shown) or ("none finished" if v.interrupted else "none attempted")))
        if v.times:
            spread = f", spread {pct(v.spread / v.median)} of median" if v.median else ""  # type: ignore[operator]
            lines.append(f"  median {fmt_s(v.median)} s, min {fmt_s(v.minimum)} s, max {fmt_s(v.maximum)} s over "
                         f"{len(v.times)} counted pass{'es' if len(v.times) != 1 else ''}{spread}")
            lines.append("  start-up and other phases (median s): " + ", ".join(
                f"{ph[:-2]} {fmt_s(v.phase_median(ph))}" for ph in PHASES if ph != "pass_s"))
        else:
            lines.append("  no counted pass: no median")
        for p in v.passes:
            if p.status != "ok" and p.error:
                done = "unknown" if p.completed is None else p.completed
                lines.append(f"  {p.pass_id} {p.status}: {p.error} (completed {done})")
            elif p.status == "aborted":
                lines.append(f"  {p.pass_id} aborted: the process ended during the pass")
        for p in v.excluded:
            lines.append(f"  {p.pass_id} excluded: {p.exclusion_reason}")
        for pass_id in v.interrupted:
            lines.append(f"  {pass_id} {INTERRUPTED_LINE}")
    lines += ["", f"Comparisons within each series (T5): {speed_rule_line(ev.protocol.stats)}"]
    lines += [f"  {c.scope}: {c.a} vs {c.b}: {c.text}" for c in stats.comparisons] or ["  no series declared"]
    lines += ["", *render_quality(stats)]
    if stats.notes:
        lines += ["", *(f"note: {n}" for n in stats.notes)]
    return "\n".join(lines) + "\n"
