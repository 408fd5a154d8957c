"""The decision (D1, D2, D4, K6, M1, W4): which configuration to rent, from the stored evidence only.

For each configuration, keyed by (hardware observed, variant) so that folders run on different machines can
be merged, this brings together: feasibility first (a configuration that did not complete the corpus in
every counted pass is *not feasible* and is never priced, M1), the quality verdicts (Q1–Q3), the raw times
(T3), the campaign window (planned from the protocol's calendar tasks, or projected from measured times on
request: always labelled), the deadline, the committed package fee for the hardware *observed* in the manifest
(never from the configuration), and the accepted deliveries, counted once per corpus fingerprint (K6).

The rule (D1): all documents, minimum quality, before the deadline, lowest committed budget; ties are
separated by committed cost, then failures, then remaining uncertainty (T5). The pricing and window
arithmetic is the kit's (``iteralab.pricing``, ``iteralab.window``), never re-implemented here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from iteralab.errors import IteraError
from iteralab.fsutil import dumps_json, write_text_atomic
from iteralab.kit.calcul_forfaits import format_hours, load_zone, localize
from iteralab.manifest import diff_manifests
from iteralab.pricing import (Catalog, CatalogEntry, CostPerResult, PackageBudget, cost_per_result,
                              count_accepted_results, format_amount, load_catalog, package_budget)
from iteralab.protocol import resolve
from iteralab.stats import (MISSING_SUBGROUP, Q2_MARK, CampaignStats, Evidence, VariantQuality, VariantTimes,
                            campaign_stats, compare, fmt_s, load_evidence)
from iteralab.window import CalendarWindow, Task, WindowQuote, build_window, local_task, quote_calendar

SCHEMA_VERSION = 1
CPU_ONLY = "ran on CPU only: no rental GPU was observed, so no package can be priced from these runs"
SCOPE = ("offline batch inference only: this protocol does not qualify an interactive service, training to "
         "convergence, or another dataset; those need their useful unit and checks redefined first")
NOT_FEASIBLE = "not feasible: a configuration that did not complete the corpus is never priced"
RULE = ("processes all documents, meets the minimum quality, finishes before the deadline, lowest committed "
        "budget; ties separated by committed cost, then failures, then remaining uncertainty (T5)")


# ------------------------------------------------------------------------------------------- windows


@dataclass(frozen=True)
class WindowInfo:
    """A labelled window (planned / projected / observed) and the deadline check, or why there is none."""

    window: CalendarWindow | None
    reason: str | None
    deadline: datetime | None
    note: str | None = None

    @property
    def label(self) -> str:
        return self.window.label if self.window else "none"

    @property
    def meets_deadline(self) -> bool | None:
        if self.window is None or self.deadline is None:
            return None
        return self.window.end <= self.deadline

    def describe(self) -> str:
        if self.window is None:
            return f"no window: {self.reason}"
        d = self.window.to_dict()
        text = (f"{self.window.label}: {d['start']} to {d['end']}, span {d['span_hours']} h "
                f"(busy {d['busy_hours']} h)")
        return text + (f"; {self.note}" if self.note else "")

    def deadline_text(self) -> str:
        if self.deadline is None:
            return "no deadline declared in the protocol"
        shown = self.deadline.isoformat()
        if self.window is None:
            return f"deadline {shown}: not checked, no window"
        verdict = "met" if self.meets_deadline else "MISSED"
        return f"{self.window.label} window ends {self.window.to_dict()['end']}, deadline {shown}: {verdict}"

    def to_dict(self) -> dict[str, Any]:
        return {"window": self.window.to_dict() if self.window else None, "reason": self.reason,
                "note": self.note, "deadline": self.deadline.isoformat() if self.deadline else None,
                "meets_deadline": self.meets_deadline}


def _deadline(ev: Evidence) -> datetime | None:
    cal = ev.protocol.calendar
    if not cal.deadline:
        return None
    return localize(cal.deadline, load_zone(cal.timezone), "calendar deadline")[0]


def planned_window(ev: Evidence) -> WindowInfo:
    """The window from the protocol's calendar tasks (W1), labelled planned (W4)."""
    cal = ev.protocol.calendar
    if not cal.tasks:
        return WindowInfo(None, "the protocol's calendar has no tasks, so no window is planned", _deadline(ev))
    tasks = [local_task(t.name, t.start, t.end, cal.timezone, where="protocol calendar: ") for t in cal.tasks]
    return WindowInfo(build_window(tasks, "planned", cal.timezone), None, _deadline(ev))


def projected_window(ev: Evidence, planned: WindowInfo, times: VariantTimes) -> WindowInfo:
    """Planned window + the measured total of all phases x scheduled passes, appended after its end."""
    if planned.window is None:
        return planned
    total = times.total_median
    passes = ev.scheduled(times.variant) or len(times.passes)
    if total is None:
        return WindowInfo(planned.window, None, planned.deadline,
                          f"no projection for {times.variant}: no counted pass to measure (planned window kept)")
    seconds = math.ceil(total * passes)  # whole seconds, rounded up: a projection never shortens the work
    extra = Task(f"measured work of {times.variant} ({passes} x {fmt_s(total)} s, all phases)",
                 planned.window.end, planned.window.end + timedelta(seconds=max(seconds, 1)))
    window = build_window([*planned.window.tasks, extra], "projected", planned.window.timezone)
    return WindowInfo(window, None, planned.deadline,
                      f"planned tasks + {seconds} s of measured work ({passes} passes x median total of all "
                      f"phases) after the planned end")


def observed_span(ev: Evidence) -> WindowInfo | None:
    """When this campaign's passes actually ran (journal timestamps): observed, but not a full rental window."""
    import json

    stamps = []
    path = ev.folder / "journal.jsonl"
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if path.is_file() else []:
        try:
            record = json.loads(line)
            if record.get("event") in ("pass_started", "pass_finished", "pass_evaluated"):
                stamps.append(datetime.fromisoformat(record["at"]).replace(microsecond=0))
        except (ValueError, KeyError, TypeError):
            continue
    if len(stamps) < 2 or max(stamps) <= min(stamps):
        return None
    window = build_window([Task("campaign passes (journal)", min(stamps), max(stamps))], "observed",
                          ev.protocol.calendar.timezone)
    return WindowInfo(window, None, None,
                      "journal timestamps of the passes only: setup, waiting and export are not in it")


# ------------------------------------------------------------------------------------------- pricing


@dataclass(frozen=True)
class Pricing:
    gpu: CatalogEntry | None = None
    quote: WindowQuote | None = None
    budget: PackageBudget | None = None
    cost: CostPerResult | None = None
    reason: str | None = None

    @property
    def priced(self) -> bool:
        return self.budget is not None

    def describe(self) -> str:
        if self.budget is None:
            return f"not priced: {self.reason}"
        b = self.budget
        return (f"{b.gpu_id} {b.package_days}-day package, {b.lots} lot{'s' if b.lots != 1 else ''} "
                f"({b.cards} card{'s' if b.cards != 1 else ''}): {format_amount(b.total)} {b.currency} committed")

    def to_dict(self) -> dict[str, Any]:
        return {"gpu_id": self.gpu.gpu_id if self.gpu else None, "reason": self.reason,
                "quote": self.quote.to_dict() if self.quote else None,
                "budget": self.budget.to_dict() if self.budget else None,
                "cost_per_result": self.cost.to_dict() if self.cost else None}


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def match_gpu(name: str, catalog: Catalog) -> CatalogEntry | None:
    """The catalog GPU whose name (or id) matches an observed GPU name, e.g. 'NVIDIA GeForce RTX 4090'."""
    seen = _tokens(name)
    for e in catalog.entries:
        if _tokens(e.gpu_name) == seen:
            return e
    for e in catalog.entries:
        wanted = _tokens(e.gpu_id)
        if wanted and all(t in seen for t in wanted):
            return e
    return None


def _observed_gpu(ev: Evidence, times: VariantTimes) -> tuple[str | None, str | None]:
    """(observed GPU name, None) or (None, reason it cannot be priced)."""
    hw = ev.hardware
    if not hw.gpus:
        return None, CPU_ONLY
    devices = {r.get("device") or "" for r in ev.rows if r["variant"] == times.variant and r["status"] == "ok"}
    if devices and all(d == "cpu" for d in devices):
        return None, (f"ran on CPU although {hw.label} was visible: these times say nothing about the GPU, "
                      "so no package is priced from them")
    indexes = {int(d.split(":")[1]) for d in devices if re.fullmatch(r"cuda:\d+", d)}
    names = {hw.gpus[i] for i in indexes if i < len(hw.gpus)} or set(hw.gpus)
    if len(names) > 1:
        return None, f"several GPU models were visible ({', '.join(sorted(names))}) and the variant's device is unknown"
    return names.pop(), None


def price_config(ev: Evidence, times: VariantTimes, window: WindowInfo, accepted: int, catalog: Catalog,
                 lots: int) -> Pricing:
    """Cheapest listed package of the observed GPU that covers the window, via the kit's functions."""
    name, reason = _observed_gpu(ev, times)
    if name is None:
        return Pricing(reason=reason)
    entry = match_gpu(name, catalog)
    if entry is None:
        known = ", ".join(f"{g} ({catalog.entries_for(g)[0].gpu_name})" for g in catalog.gpu_ids())
        return Pricing(reason=f"GPU '{name}' observed in the manifest is not in catalog {catalog.path} "
                              f"(version {catalog.version}); available: {known}")
    if window.window is None:
        return Pricing(gpu=entry, reason=f"no window to cover: {window.reason}")
    quote = quote_calendar(window.window, catalog, entry.gpu_id, lots)
    covering = [o for o in quote.options if o.covers and o.in_catalog]
    if not covering:
        return Pricing(gpu=entry, quote=quote,
                       reason=f"no listed package of {entry.gpu_id} covers the {window.label} window of "
                              f"{format_hours(window.window.span_hours)} h: change the schedule, or price extra "
                              "periods explicitly (never an automatic extension)")
    best = min(covering, key=lambda o: (o.total, o.package_days))
    budget = package_budget(catalog.entry(entry.gpu_id, best.package_days), lots)
    return Pricing(entry, quote, budget, cost_per_result(budget.total, accepted, budget.currency))


# -------------------------------------------------------------------------------------- configurations


@dataclass(frozen=True)
class Config:
    """One configuration: a variant on the hardware observed in its campaign folder."""

    hardware: str
    variant: str
    folder: Path
    times: VariantTimes
    quality: VariantQuality
    accepted: int
    window: WindowInfo
    pricing: Pricing
    failures: tuple[str, ...]
    exclusions: tuple[str, ...]
    merged: bool = True

    @property
    def key(self) -> str:
        """(hardware, variant) when folders from several machines are merged; the variant alone otherwise."""
        return f"{self.hardware} / {self.variant}" if self.merged else self.variant

    @property
    def feasible(self) -> bool:
        return not self.failures

    @property
    def candidate(self) -> bool:
        return not self.exclusions and self.pricing.priced

    @property
    def n_failures(self) -> int:
        return self.times.count("failed") + self.times.count("aborted")

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key, "hardware": self.hardware, "variant": self.variant, "folder": str(self.folder),
            "feasible": self.feasible, "failures": list(self.failures), "quality": self.quality.to_dict(),
            "median_pass_s": self.times.median, "times": list(self.times.times), "accepted_deliveries": self.accepted,
            "window": self.window.to_dict(), "pricing": self.pricing.to_dict(), "exclusions": list(self.exclusions),
            "candidate": self.candidate,
        }


def _failures(ev: Evidence, times: VariantTimes) -> tuple[str, ...]:
    counted = [p for p in times.passes if not p.excluded]
    if not counted:
        return ("no counted pass: the corpus was never completed",)
    out = []
    for p in counted:
        row = next(r for r in ev.rows if r["pass_id"] == p.pass_id)
        if p.status != "ok":
            done = f" after {p.completed} of {ev.corpus_size} documents" if p.completed else ""
            why = f": {p.error}" if p.error else ""
            if not why and p.status == "aborted":
                why = ": the process ended during the pass"
            out.append(f"pass {p.pass_id} {p.status}{done}{why}")
        elif row.get("ids_match") != "true":
            out.append(f"pass {p.pass_id} did not deliver exactly the {ev.corpus_size} expected ids")
    return tuple(out)


def _quality_exclusions(q: VariantQuality, metric: str) -> list[str]:
    out = []
    if q.completed == 0:
        return out
    if q.format_ok is False:
        out.append("format problems in the predictions")
    if q.threshold_ok is False:
        out.append(f"{metric} below the threshold ({min(q.metrics):.4f})" if q.metrics else "below the threshold")
    if q.tolerance_ok is False:
        delta = f" ({metric} {min(q.metrics):.4f} vs reference {q.metric_ref:.4f})" if q.metrics and \
            q.metric_ref is not None else ""
        out.append(f"outside the tolerance{delta}: {Q2_MARK}")
    if q.subgroups_ok is False:
        out.append("a gating subgroup misses its threshold or tolerance")
    if q.reproduction_ok is False:
        out.append("the declared reproduction target does not hold")
    if not out and q.accepted < q.completed:
        out.append(f"only {q.accepted} of {q.completed} completed passes were accepted")
    return out


def _hardware_keys(evidence: list[Evidence]) -> list[str]:
    labels = [ev.hardware.label for ev in evidence]
    return [f"{label} [{ev.folder.name}]" if labels.count(label) > 1 else label for label, ev in zip(labels, evidence)]


def check_mergeable(evidence: list[Evidence]) -> None:
    """Refuse to merge campaigns of different protocol versions/content or different corpora."""
    first = evidence[0]
    p0 = first.campaign["protocol"]
    for ev in evidence[1:]:
        p = ev.campaign["protocol"]
        if (p["name"], p["version"], p["sha256"]) != (p0["name"], p0["version"], p0["sha256"]):
            raise IteraError(
                f"cannot merge {first.folder} and {ev.folder}: protocol {p0['name']!r} version {p0['version']} "
                f"(sha256 {p0['sha256'][:12]}) vs {p['name']!r} version {p['version']} (sha256 {p['sha256'][:12]})",
                hint="results of different protocol versions are never pooled: decide on each folder separately")
        if ev.fingerprint != first.fingerprint:
            raise IteraError(
                f"cannot merge {first.folder} and {ev.folder}: corpus fingerprint {first.fingerprint[:12]} vs "
                f"{ev.fingerprint[:12]}", hint="every configuration must process the same corpus (K6)")


def _catalog(ev: Evidence, path: str | Path | None) -> Catalog:
    if path is not None:
        return load_catalog(path)
    declared = ev.protocol.catalog.path
    if declared is None:
        return load_catalog(None)
    return load_catalog(resolve(ev.campaign["protocol"].get("source") or ev.folder / "inputs" / "protocol.toml",
                                declared))


# --------------------------------------------------------------------------------------------- decision


@dataclass(frozen=True)
class Decision:
    evidence: tuple[Evidence, ...]
    stats: tuple[CampaignStats, ...]
    configs: tuple[Config, ...]
    chosen: Config | None
    one_line: str
    reasons: tuple[str, ...]
    uncertain: tuple[str, ...]
    manifest_diffs: tuple[tuple[str, str, tuple[str, ...]], ...]
    planned: WindowInfo
    observed: tuple[WindowInfo | None, ...]
    catalog: Catalog
    rental_id: str | None = None
    project: bool = False
    lots: int = 1
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        ev = self.evidence[0]
        return {
            "schema_version": SCHEMA_VERSION, "decision": self.one_line,
            "chosen": self.chosen.key if self.chosen else None, "rule": RULE,
            "protocol": {k: ev.campaign["protocol"].get(k) for k in ("name", "version", "sha256", "locked_at")},
            "question": ev.protocol.question,
            "corpus": {"fingerprint": ev.fingerprint, "size": ev.corpus_size},
            "campaigns": [{"folder": str(e.folder), "hardware": e.hardware.to_dict()} for e in self.evidence],
            "catalog": self.catalog.to_dict(), "lots": self.lots, "project": self.project,
            "planned_window": self.planned.to_dict(),
            "observed_spans": [o.to_dict() if o else None for o in self.observed],
            "configurations": [c.to_dict() for c in self.configs],
            "reasons": list(self.reasons), "uncertain": list(self.uncertain),
            "manifest_differences": [{"a": a, "b": b, "fields": list(k)} for a, b, k in self.manifest_diffs],
            "scope": SCOPE, "rental_id": self.rental_id, "notes": list(self.notes),
        }


def decide(campaign_dirs: list[str | Path], *, rental_id: str | None = None, project: bool = False,
           catalog: str | Path | None = None, lots: int = 1) -> Decision:
    """Merge campaign folders and apply the rule (D1). Raises IteraError on folders that cannot be merged."""
    if not campaign_dirs:
        raise IteraError("no campaign folder given", hint="pass at least one folder written by 'iteralab run'")
    evidence = [load_evidence(d) for d in campaign_dirs]
    check_mergeable(evidence)
    cat = _catalog(evidence[0], catalog)
    stats = [campaign_stats(ev) for ev in evidence]
    planned = planned_window(evidence[0])
    metric = evidence[0].protocol.metric.name
    configs: list[Config] = []
    for hw, ev, st in zip(_hardware_keys(evidence), evidence, stats):
        for times in st.variants:
            quality = st.quality_of(times.variant)
            pairs = [(r["corpus_fingerprint"] or ev.fingerprint, r.get("corpus_accepted") == "true")
                     for r in ev.rows if r["variant"] == times.variant and r["pass_id"] not in ev.exclusions]
            accepted = count_accepted_results(pairs)
            window = projected_window(ev, planned, times) if project else planned
            failures = _failures(ev, times)
            exclusions = [f"not feasible (M1): {'; '.join(failures)}; never priced"] if failures else []
            exclusions += _quality_exclusions(quality, metric)
            if window.meets_deadline is False:
                exclusions.append(f"misses the deadline: {window.deadline_text()}")
            pricing = Pricing(reason=NOT_FEASIBLE) if failures else price_config(ev, times, window, accepted, cat, lots)
            configs.append(Config(hw, times.variant, ev.folder, times, quality, accepted, window, pricing, failures,
                                  tuple(exclusions), merged=len(evidence) > 1))
    chosen, one_line, reasons, uncertain = _apply_rule(configs, evidence[0])
    for st in stats:
        uncertain += [f"{st.evidence.hardware.label}, {c.scope}: {c.a} vs {c.b}: {c.text}"
                      for c in st.comparisons if not c.distinguished]
    gating = [s.name for s in evidence[0].protocol.subgroups if s.gating]
    for name in gating:
        lacking = [c.key for c in configs if name in c.quality.missing_subgroups(gating)]
        if lacking:
            uncertain.append(f"gating subgroup {name!r} has no value in the raw table for {', '.join(lacking)}: "
                             f"{MISSING_SUBGROUP}")
    if planned.window is not None:
        uncertain.append(f"the window is {'projected' if project else 'planned'}, not observed: a planning "
                         "assumption until the rental's real dates are known (W4)")
    if evidence[0].protocol.thresholds_tuned_on_final:
        uncertain.append("thresholds were tuned after seeing the final corpus (P4): the result needs a new "
                         "independent evaluation corpus")
    diffs = []
    for ev in evidence[1:]:
        if evidence[0].manifest is None or ev.manifest is None:
            diffs.append((str(evidence[0].folder), str(ev.folder), ("manifest.json missing in one folder",)))
        else:
            diffs.append((str(evidence[0].folder), str(ev.folder), tuple(diff_manifests(evidence[0].manifest,
                                                                                        ev.manifest))))
    notes = [n for st in stats for n in st.notes]
    for ev in evidence:
        for name in sorted(set(ev.hardware.gpus)):
            entry = match_gpu(name, cat)
            seen = ev.hardware.gpus.count(name)
            if entry is not None and seen != entry.cards_per_lot * lots:
                notes.append(f"{ev.folder}: the campaign saw {seen} x {name}; {lots} lot{'s' if lots != 1 else ''} "
                             f"of {entry.gpu_id} hold{'s' if lots == 1 else ''} {entry.cards_per_lot * lots} cards: "
                             "the times measure the cards seen, extra cards are never assumed to speed anything up")
    return Decision(tuple(evidence), tuple(stats), tuple(configs), chosen, one_line, tuple(reasons),
                    tuple(uncertain), tuple(diffs), planned, tuple(observed_span(ev) for ev in evidence), cat,
                    rental_id, project, lots, tuple(notes))


def _apply_rule(configs: list[Config], ev: Evidence) -> tuple[Config | None, str, list[str], list[str]]:
    reasons = [f"rule (D1): {RULE}"]
    uncertain: list[str] = []
    eligible = [c for c in configs if not c.exclusions]
    candidates = [c for c in eligible if c.pricing.priced]
    if not candidates:
        fastest = sorted((c for c in eligible if c.times.median is not None), key=lambda c: c.times.median)
        if eligible and all(c.pricing.reason == CPU_ONLY for c in eligible):
            line = f"no choice possible: {CPU_ONLY}"
            detail = (f"decision-equivalent configurations (all documents, quality within the tolerance, deadline): "
                      f"{', '.join(c.key for c in eligible)}")
            if fastest:
                detail += f"; fastest by median on this CPU: {fastest[0].key} ({fmt_s(fastest[0].times.median)} s)"
                if len(fastest) > 1:
                    first, second = fastest[0], fastest[1]
                    detail += f" ({compare(first.times, second.times, names=(first.key, second.key)).text})"
            reasons += [detail, "the choice of rental cannot be made from CPU runs: run the same protocol on the "
                                "rental GPUs and decide again"]
        elif eligible:
            line = "no choice possible: no configuration that meets every condition could be priced"
            reasons += [f"{c.key}: {c.pricing.reason}" for c in eligible]
        else:
            line = ("no choice possible: no configuration processes all documents at the minimum quality before "
                    "the deadline")
            reasons.append("every configuration is left out for a reason listed under 'Excluded and why'")
        return None, line, reasons, uncertain
    ranked = sorted(candidates, key=lambda c: (c.pricing.budget.total, c.n_failures,  # type: ignore[union-attr]
                                               c.times.median if c.times.median is not None else float("inf")))
    best = ranked[0]
    tied = [c for c in ranked[1:] if c.pricing.budget.total == best.pricing.budget.total  # type: ignore[union-attr]
            and c.n_failures == best.n_failures]
    budget = best.pricing.budget
    assert budget is not None and best.pricing.cost is not None
    line = f"chosen: {best.key}: {package_summary(best)}"
    reasons.append(f"{best.key}: all {ev.corpus_size} documents in every counted pass, quality within the "
                   f"tolerance, {best.window.deadline_text()}, {best.pricing.describe()}")
    for c in tied:
        verdict = compare(best.times, c.times, "tie", names=(best.key, c.key))
        if verdict.distinguished and verdict.faster == best.key:
            reasons.append(f"{c.key}: same committed cost and failures; the tie is settled by the evidence: "
                           f"{verdict.text}")
        else:
            reasons.append(f"{c.key}: same committed cost and failures, decision-equivalent; {best.key} is listed "
                           "first by median pass time only")
            uncertain.append(f"{best.key} vs {c.key} (tied on committed cost): {verdict.text}")
    for c in ranked[1:]:
        b = c.pricing.budget
        assert b is not None
        if c not in tied:
            reasons.append(f"{c.key}: also meets every condition but commits {format_amount(b.total)} {b.currency} "
                           f"({b.gpu_id} {b.package_days}-day) vs {format_amount(budget.total)} {budget.currency}")
    return best, line, reasons, uncertain


def package_summary(c: Config) -> str:
    """'7-day package, 1 lot, 110.00 USD committed, 110.00 USD per verified corpus (1 accepted)'."""
    b, cost = c.pricing.budget, c.pricing.cost
    assert b is not None and cost is not None
    per = (f"{format_amount(cost.per_result)} {b.currency} per verified corpus ({cost.accepted_results} accepted)"
           if cost.per_result is not None else "cost per verified corpus undefined (0 accepted)")
    return (f"{b.gpu_id} {b.package_days}-day package, {b.lots} lot{'s' if b.lots != 1 else ''}, "
            f"{format_amount(b.total)} {b.currency} committed, {per}")


# -------------------------------------------------------------------------------------------- the note


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _yes(value: bool | None, yes: str = "yes", no: str = "no") -> str:
    return "-" if value is None else yes if value else no


def _quality_cell(c: Config) -> str:
    q = c.quality
    if q.completed == 0:
        return "not evaluated"
    if q.meets_quality:
        return "ok"
    return "MARKED: outside tolerance" if q.tolerance_ok is False else "fails"


def cpu_only(d: Decision) -> bool:
    """True when every configuration that completed its passes is unpriced because no GPU was observed."""
    done = [c for c in d.configs if not c.failures]
    return bool(done) and all(c.pricing.reason == CPU_ONLY for c in done)


def exclusion_lines(d: Decision) -> list[tuple[str, str]]:
    """(who, why) for every configuration left out of the choice, and every excluded pass."""
    common = cpu_only(d)
    lines = [("every configuration", f"not priced, {CPU_ONLY}")] if common else []
    for c in d.configs:
        unpriced = not (c.pricing.priced or c.failures or common)
        why = list(c.exclusions) + ([f"not priced: {c.pricing.reason}"] if unpriced else [])
        if why:
            lines.append((c.key, "; ".join(why)))
    for c in d.configs:
        for pt in c.times.excluded:
            lines.append((f"pass {pt.pass_id} ({c.key})", f"excluded from the statistics: {pt.exclusion_reason}"))
    return lines


def render_decision(d: Decision) -> str:
    """The decision note (Markdown, D2): deterministic, so it can be compared with a golden file."""
    ev = d.evidence[0]
    proto = ev.campaign["protocol"]
    p = ev.protocol
    chosen = d.chosen
    out = [f"# Decision note: {proto['name']}, protocol version {proto['version']}", "",
           f"Question (locked protocol): {p.question}", "", "## Decision", ""]
    if chosen is not None:
        out.append(f"**Chosen setting: {chosen.key}**: {package_summary(chosen)}.")
        v = p.variant(chosen.variant)
        out.append(f"Setting: batch size {v.batch_size}, precision {v.precision}, bucketing "
                   f"{'on' if v.bucketing else 'off'}, padding {v.padding}, compile {'on' if v.compile else 'off'}, "
                   f"{d.lots} lot{'s' if d.lots != 1 else ''}.")
    else:
        out.append(f"**{d.one_line[0].upper()}{d.one_line[1:]}.**")
    out += ["", "## Covered load", "",
            f"- {ev.corpus_size} documents, corpus fingerprint `{ev.fingerprint}`",
            f"- accepted deliveries: {chosen.accepted if chosen else 'see the table'} (each corpus counted once by "
            "fingerprint, however many passes delivered it)",
            f"- protocol `{proto['name']}` version {proto['version']}, sha256 `{proto['sha256']}`, locked at "
            f"{proto.get('locked_at')}",
            f"- metric {p.metric.name} >= {p.metric.threshold:g}, within {p.metric.tolerance:g} of "
            f"{p.metric.reference_variant}; gating subgroups: "
            f"{', '.join(s.name for s in p.subgroups if s.gating) or 'none'}; reproduction target "
            f"{p.reproduction.target}",
            f"- catalog version {d.catalog.version} dated {d.catalog.date.isoformat()}",
            *(f"- campaign `{e.folder}`: hardware observed {e.hardware.label}" for e in d.evidence),
            "", "## Reasons", "", *(f"- {r}" for r in d.reasons), "",
            "## Configurations", "",
            "| configuration | feasible | quality | median pass (s) | counted passes | window | deadline | package "
            "| committed | accepted | cost per verified corpus |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in d.configs:
        b = c.pricing.budget
        cost = c.pricing.cost.describe() if c.pricing.cost else "-"
        win = f"{c.window.label} {format_hours(c.window.window.span_hours)} h" if c.window.window else "none"
        out.append("| " + " | ".join(_cell(x) for x in (
            c.key, _yes(c.feasible), _quality_cell(c), fmt_s(c.times.median), len(c.times.times), win,
            _yes(c.window.meets_deadline, "met", "MISSED"),
            f"{b.gpu_id} {b.package_days} days x {b.lots}" if b else "not priced",
            f"{format_amount(b.total)} {b.currency}" if b else "-", c.accepted, cost)) + " |")
    out += ["", "## Excluded and why", ""]
    out += [f"- {who}: {why}" for who, why in exclusion_lines(d)] or ["- nothing was excluded"]
    out += ["", "## Calendar window", "", f"- {d.planned.describe()}", f"- {d.planned.deadline_text()}"]
    if d.project:
        out += [f"- {c.key}: {c.window.describe()}; {c.window.deadline_text()}" for c in d.configs
                if c.window.window is not d.planned.window]
    for e, o in zip(d.evidence, d.observed):
        if o is not None:
            out.append(f"- {e.hardware.label}: {o.describe()}")
    shown_quotes: dict[str, Config] = {}
    for c in ([d.chosen] if d.chosen else d.configs):
        if c.pricing.quote is not None:
            shown_quotes.setdefault(f"{c.pricing.quote.gpu_id} {c.window.label}", c)
    for c in shown_quotes.values():
        quote = c.pricing.quote
        assert quote is not None
        listed = [f"{o.package_days} days ({o.package_hours} h) {'covers' if o.covers else 'does not cover'}, "
                  f"{'not in catalog' if o.total is None else format_amount(o.total) + ' ' + o.currency}"
                  for o in quote.options]
        out.append(f"- {quote.gpu_id} packages against the {c.window.label} window "
                   f"({format_hours(quote.hours)} h): " + "; ".join(listed))
    out += ["", "## What remains uncertain", "", *(f"- {u}" for u in d.uncertain or ["nothing flagged"])]
    out += ["", "## Manifest differences between merged campaigns (C5)", ""]
    if not d.manifest_diffs:
        out.append("- one campaign folder: nothing merged")
    for a, b, keys in d.manifest_diffs:
        shown = ", ".join(f"`{k}`" for k in keys[:40]) + (f" and {len(keys) - 40} more" if len(keys) > 40 else "")
        out.append(f"- `{a}` vs `{b}`: {shown or 'no difference'}")
    if d.manifest_diffs:
        out.append("- the comparison concerns exactly the configurations tested, on the stacks listed above")
    out += ["", "## Scope", "", f"- {SCOPE}.",
            "- the comparison concerns exactly the configurations tested; a capacity estimate never replaces "
            "observed accepted results", "", "## Rental record", "",
            f"- rental id: {d.rental_id}" if d.rental_id else "- rental id: none given"]
    if d.notes:
        out += ["", "## Notes", "", *(f"- {n}" for n in d.notes)]
    return "\n".join(out) + "\n"


def write_decision(d: Decision, out: str | Path) -> dict[str, Path]:
    """Write decision.md and decision.json (atomically) into ``out``."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"decision_md": folder / "decision.md", "decision_json": folder / "decision.json"}
    write_text_atomic(paths["decision_md"], render_decision(d))
    write_text_atomic(paths["decision_json"], decision_json(d))
    return paths


def decision_json(d: Decision) -> str:
    """The decision as deterministic JSON text (sorted keys, amounts as strings)."""
    return dumps_json(_jsonable(d.to_dict()))


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (Decimal, Path, datetime)):
        return str(obj)
    return obj
