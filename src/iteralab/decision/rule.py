"""The decision (D1, D2, D4, K6, M1, W4): which configuration to rent, from the stored evidence only.

For each configuration, keyed by (hardware observed, variant) so that folders run on different machines can
be merged, this brings together: feasibility first (a configuration that did not complete the corpus in
every counted pass is *not feasible* and is never priced, M1), the quality verdicts (Q1–Q3), the raw times
(T3), the campaign window (planned from the protocol's calendar tasks, or projected from measured times on
request: always labelled), the deadline, the committed package fee for the hardware *observed* in the manifest
(never from the configuration), and the accepted deliveries, counted once per corpus fingerprint (K6).

The rule (D1): all documents, minimum quality, before the deadline, lowest committed budget; ties are
separated by committed cost, then failures, then remaining uncertainty (T5). The pricing and window
arithmetic is the kit's (``iteralab.economics.pricing``, ``iteralab.economics.window``), never re-implemented here.
"""


from __future__ import annotations

from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

from iteralab.common.files import sha256_file
from iteralab.errors import IteraError
from iteralab.campaign.folder import PROTOCOL
from iteralab.campaign.manifest import diff_manifests
from iteralab.economics.pricing import (EXPENSES_APART, EXPENSES_COUNTED, Catalog, CostSheet, VariantCost, cost_sheet,
                                        count_accepted_results, expenses_of, format_amount)
from iteralab.plan.expenses import check_currency
from iteralab.evidence.reads import Evidence, load_evidence
from iteralab.evidence.speed import Comparison, loaded_only, speed_rule
from iteralab.evidence.stats import (MISSING_SUBGROUP, CampaignStats, VariantQuality, VariantTimes, quality_record,
                                     campaign_stats, compare, fmt_s)
from iteralab.decision.job import JobPlan
from iteralab.evidence.datasets import DatasetVerdict, dataset_verdicts, feasibility_by_source
from iteralab.evidence.feasibility import feasibility
from iteralab.decision.costing import (CPU_ONLY, Pricing, match_gpu, observed_label, pricing_catalog,
                                      remote_work)
from iteralab.decision.exclusions import quality_exclusions
from iteralab.decision.windows import WindowInfo, observed_span, planned_window, projected_window
from iteralab.decision.planning import RentalPlans, mix_line, plan_config, plan_jobs, plan_rental
from iteralab.economics.lots import LotChoice


SCHEMA_VERSION = 1
SCOPE = ("offline batch inference only: this protocol does not qualify an interactive service, training to "
         "convergence, or another dataset; those need their useful unit and checks redefined first")
NOT_FEASIBLE = "not feasible: a configuration that did not complete the corpus is never priced"
#: The headline when the protocol's calendar has no tasks: no window, so no package is chosen (W1, W3).
NO_TASKS = ("the protocol's calendar has no tasks, so no window is planned: no package can be chosen and no deadline "
            "checked (add dated [[calendar.tasks]] to a new protocol version and run it)")
#: How a reason about the ranking with the other basis (package fee vs project total) starts (K5).
OTHER_BASIS = "ranked by the "
RULE = ("processes all documents, meets the minimum quality, finishes before the deadline, lowest committed "
        "budget; ties separated by committed cost, then failures, then remaining uncertainty (T5)")



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
    #: K6: the verdict of each dataset of a several-dataset campaign (empty for one corpus).
    datasets: tuple[DatasetVerdict, ...] = ()
    #: K5: the package fee with the other expenses that apply to this variant (None: no expenses, or not priced).
    project: VariantCost | None = None
    #: the numbers of lots tried for the production job and the one chosen (None: no job, or nothing to rent)
    lots_choice: LotChoice | None = None

    @property
    def key(self) -> str:
        """(hardware, variant) when folders from several machines are merged; the variant alone otherwise."""
        return f"{self.hardware} / {self.variant}" if self.merged else self.variant

    @property
    def feasible(self) -> bool:
        return not self.failures and bool(self.times.passes)

    @property
    def candidate(self) -> bool:
        return not self.exclusions and self.pricing.priced

    @property
    def committed(self) -> Decimal | None:
        """What the rule ranks: the committed package fee, or the project total where the protocol counts the
        other expenses (K5); None when not priced."""
        if self.project is not None:
            return self.project.ranked_total
        return self.pricing.budget.total if self.pricing.budget is not None else None

    def committed_text(self) -> str:
        """'110.00 USD', or '152.50 USD project total' where the expenses are counted."""
        b = self.pricing.budget
        assert b is not None and self.committed is not None
        counted = self.project is not None and self.project.counted
        return f"{format_amount(self.committed)} {b.currency}" + (" project total" if counted else "")

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
            **({"datasets": [d.to_dict() for d in self.datasets]} if self.datasets else {}),
            "project_budget": None if self.project is None else
            {k: v for k, v in self.project.to_dict().items() if k not in ("variant", "budget")},
            **({"lots_plan": self.lots_choice.to_dict()} if self.lots_choice is not None else {}),
        }


def _failures(ev: Evidence, times: VariantTimes) -> tuple[str, ...]:
    rows = [r for r in ev.rows if r.variant == times.variant]
    if not rows:
        return feasibility(rows, ev.corpus_size, ev.exclusions).failures()
    return feasibility_by_source(ev.campaign, rows, ev.exclusions)  # K6: each pass against its own dataset's size


def _hardware_keys(evidence: list[Evidence]) -> list[str]:
    labels = [observed_label(ev) for ev in evidence]
    return [f"{label} [{ev.folder.name}]" if labels.count(label) > 1 else label for label, ev in zip(labels, evidence)]


def check_mergeable(evidence: list[Evidence]) -> None:
    """Refuse to merge campaigns of different protocol versions/content or different corpora."""
    first = evidence[0]
    p0 = first.campaign.protocol
    for ev in evidence[1:]:
        p = ev.campaign.protocol
        if (p.name, p.version, p.sha256) != (p0.name, p0.version, p0.sha256):
            raise IteraError(
                f"cannot merge {first.folder} and {ev.folder}: protocol {p0.name!r} version {p0.version} "
                f"(sha256 {p0.sha256[:12]}) vs {p.name!r} version {p.version} (sha256 {p.sha256[:12]})",
                hint="results of different protocol versions are never pooled: decide on each folder separately")
        if ev.fingerprint != first.fingerprint:
            raise IteraError(
                f"cannot merge {first.folder} and {ev.folder}: corpus fingerprint {first.fingerprint[:12]} vs "
                f"{ev.fingerprint[:12]}", hint="every configuration must process the same corpus (K6)")




# --------------------------------------------------------------------------------------------- decision


@dataclass(frozen=True)
class MachineChoice:
    """The configuration answer on one observed machine (D1 applied without needing a price)."""

    hardware: str
    chosen: Config | None
    inseparable: tuple[Config, ...]
    line: str
    reasons: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"hardware": self.hardware, "chosen": self.chosen.key if self.chosen else None,
                "variant": self.chosen.variant if self.chosen else None,
                "not_distinguished_from": [c.variant for c in self.inseparable], "answer": self.line,
                "reasons": list(self.reasons)}


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
    catalog_source: str = ""
    rental_id: str | None = None
    project: bool = False
    #: the number of lots given with --lots; None: the rule chose 1 … [budget] max_lots
    lots: int | None = None
    notes: tuple[str, ...] = field(default=())
    machines: tuple[MachineChoice, ...] = field(default=())
    rental_line: str = ""
    jobs: tuple[JobPlan, ...] = field(default=())
    costs: CostSheet | None = None
    #: the catalog file the decision priced from (copied beside decision.json when it is not the folder's own)
    catalog_file: Path | None = None
    #: the mix of observed machines and the break-even rates of the unobserved catalog rows
    plans: RentalPlans | None = None

    @property
    def lots_rented(self) -> int:
        """The lots of the chosen plan (the rule's choice, or --lots), else the lots given, else one."""
        b = self.chosen.pricing.budget if self.chosen is not None else None
        return b.lots if b is not None else (self.lots or 1)

    @property
    def mix_chosen(self) -> bool:
        return self.plans is not None and self.plans.mix_chosen

    @property
    def catalog_sha256(self) -> str | None:
        return sha256_file(self.catalog_file) if self.catalog_file is not None else None

    @property
    def expense_ranking(self) -> tuple[str, ...]:
        """The reasons that say how variant-specific expenses would move the winner under the other basis."""
        return tuple(r for r in self.reasons if r.startswith(OTHER_BASIS))

    def speed_comparisons(self) -> list[tuple[str, Comparison]]:
        """Every series comparison (T5) with the observed machine it was made on."""
        return [(observed_label(st.evidence), c) for st in self.stats for c in st.comparisons]

    def speed_record(self) -> dict[str, Any]:
        """The declared rule (n needed, level, sidedness, loaded passes) and every comparison, the established
        ones listed apart."""
        return {**speed_rule(self.evidence[0].protocol.stats),
                "comparisons": [{"hardware": hw, **c.to_dict()} for hw, c in self.speed_comparisons()],
                "established": [f"{hw}, {c.scope}: {c.a} vs {c.b}" for hw, c in self.speed_comparisons()
                                if c.distinguished]}

    def to_dict(self) -> dict[str, Any]:
        ev = self.evidence[0]
        return {
            "schema_version": SCHEMA_VERSION, "decision": self.one_line,
            "configuration_per_machine": [m.to_dict() for m in self.machines],
            "rental": {"chosen": self.chosen.key if self.chosen else None, "answer": self.rental_line,
                       "mix_chosen": self.mix_chosen},
            "production_job": [j.to_dict() for j in self.jobs],
            "chosen": self.chosen.key if self.chosen else None, "rule": RULE,
            "protocol": ev.campaign.protocol.identity(),
            "question": ev.protocol.question,
            "corpus": {"fingerprint": ev.fingerprint, "size": ev.corpus_size,
                       **({"datasets": [{"name": d.name, "fingerprint": d.fingerprint, "size": d.size}
                                        for d in ev.campaign.datasets]} if ev.campaign.datasets else {})},
            "campaigns": [{"folder": str(e.folder), "hardware": e.hardware.to_dict(),
                           "work_ran_on": {"runs_on": e.protocol.model.runs_on,
                                           "service": e.protocol.model.remote_service}} for e in self.evidence],
            "catalog": {**self.catalog.to_dict(), "source": self.catalog_source, "sha256": self.catalog_sha256},
            "lots": self.lots, "max_lots": ev.protocol.budget.max_lots, "project": self.project,
            "rental_plans": None if self.plans is None else self.plans.to_dict(),
            "planned_window": self.planned.to_dict(),
            "observed_spans": [o.to_dict() if o else None for o in self.observed],
            "configurations": [c.to_dict() for c in self.configs],
            "reasons": list(self.reasons), "uncertain": list(self.uncertain), "speed": self.speed_record(),
            "quality": quality_record(ev.protocol.metric, [(observed_label(st.evidence), st) for st in self.stats]),
            "manifest_differences": [{"a": a, "b": b, "fields": list(k)} for a, b, k in self.manifest_diffs],
            "scope": SCOPE, "rental_id": self.rental_id, "notes": list(self.notes),
            "other_expenses": None if self.costs is None else
            {"counted": self.costs.counted, "rule": EXPENSES_COUNTED if self.costs.counted else EXPENSES_APART,
             "lines": [e.to_dict() for e in self.costs.expenses], "currency": self.costs.currency},
        }


def decide(campaign_dirs: list[str | Path], *, rental_id: str | None = None, project: bool = False,
           catalog: str | Path | None = None, lots: int | None = None, partial: bool = False) -> Decision:
    """Merge campaign folders and apply the rule (D1). Raises IteraError on folders that cannot be merged,
    and on an incomplete campaign unless ``partial`` (then the note records it). ``lots`` fixes the number of lots;
    None lets the rule plan 1 … ``[budget] max_lots`` of each machine's package for the production job."""
    if not campaign_dirs:
        raise IteraError("no campaign folder given", hint="pass at least one folder written by 'iteralab run'")
    evidence = [load_evidence(d) for d in campaign_dirs]
    incomplete = [ev.incomplete_line() for ev in evidence if ev.not_attempted]
    if incomplete and not partial:
        raise IteraError(f"{incomplete[0]}", hint="finish the schedule first, or decide on what exists with "
                                                  "--partial (the note records it)")
    check_mergeable(evidence)
    cat, cat_source, cat_file = pricing_catalog(evidence[0], catalog)
    stats = [campaign_stats(ev) for ev in evidence]
    planned = planned_window(evidence[0])
    configs = [_config(hw, ev, st, times, planned, cat, project=project, lots=lots, merged=len(evidence) > 1)
               for hw, ev, st in zip(_hardware_keys(evidence), evidence, stats) for times in st.variants]
    configs, costs = _with_expenses(configs, evidence[0], cat)
    chosen, rental_line, reasons, uncertain = _apply_rule(configs, evidence[0], costs)
    machines = tuple(choose_on_machine([c for c in configs if c.hardware == hw], evidence[0])
                     for hw in dict.fromkeys(c.hardware for c in configs))
    plans = plan_rental(evidence, configs, machines, chosen, planned, cat, lots)
    if plans.mix_chosen:
        rental_line = mix_line(plans)
    if chosen is not None and chosen.lots_choice is not None and len(chosen.lots_choice.plans) > 1:
        reasons += [f"lots of {chosen.key}: {line}" for line in chosen.lots_choice.lines()]
    one_line = _one_line(machines, chosen, rental_line)
    jobs = plan_jobs(configs, evidence[0], cat)
    uncertain += _uncertainties(evidence[0], stats, configs, planned, project)
    notes = _decision_notes(evidence, stats, configs, incomplete, cat, lots)
    return Decision(tuple(evidence), tuple(stats), tuple(configs), chosen, one_line, tuple(reasons),
                    tuple(uncertain), tuple(_manifest_diffs(evidence)), planned,
                    tuple(observed_span(ev) for ev in evidence), cat, cat_source, rental_id, project, lots,
                    tuple(notes), machines, rental_line, jobs, costs, cat_file, plans)


def _config(hw: str, ev: Evidence, st: CampaignStats, times: VariantTimes, planned: WindowInfo, cat: Catalog, *,
            project: bool, lots: int | None, merged: bool) -> Config:
    """One variant on one machine: accepted deliveries, window, failures, exclusions, pricing."""
    metric = ev.protocol.metric
    quality = st.quality_of(times.variant)
    pairs = [(r.corpus_fingerprint or ev.fingerprint, r.accepted)
             for r in ev.rows if r.variant == times.variant and r.pass_id not in ev.exclusions]
    accepted = count_accepted_results(pairs)
    base = projected_window(ev, planned, times) if project else planned
    # the rental must cover the production job too, on the lots planned for it, and the deadline allow it
    window, priced, lot_choice = plan_config(ev, times, base, accepted, cat, lots)
    failures = _failures(ev, times)
    if not times.passes and ev.not_attempted:
        failures = ()  # never attempted: not a failure of the configuration
        yet = (f"no pass finished yet (attempt {', '.join(times.interrupted)} interrupted by a signal)"
               if times.interrupted else "not attempted yet")
        exclusions = [f"{yet}: the campaign is incomplete (decided with --partial); never priced"]
    else:
        exclusions = [f"not feasible (M1): {'; '.join(failures)}; never priced"] if failures else []
    exclusions += quality_exclusions(quality, metric, ev.protocol.metric.reference_variant)
    exclusions += [loaded_only(times)] if loaded_only(times) else []
    verdicts = dataset_verdicts(ev.campaign, [r for r in ev.rows if r.variant == times.variant],
                                ev.exclusions)
    exclusions += [f"dataset {d.name!r} not verified: {'; '.join(d.reasons) or 'no counted pass'} "
                   "(a configuration is accepted only when every dataset is verified, K6)"
                   for d in verdicts if not d.verified and times.passes]
    if window.meets_deadline is False:
        exclusions.append(f"misses the deadline: {window.deadline_text()}")
    pricing = (Pricing(reason=NOT_FEASIBLE) if failures else
               Pricing(reason="not attempted yet") if not times.passes else
               priced)
    return Config(hw, times.variant, ev.folder, times, quality, accepted, window, pricing, failures,
                  tuple(exclusions), merged=merged, datasets=verdicts,
                  lots_choice=lot_choice if pricing is priced else None)


def _uncertainties(ev: Evidence, stats: list[CampaignStats], configs: list[Config], planned: WindowInfo,
                   project: bool) -> list[str]:
    """What the decision cannot tell apart or rests on: close comparisons, zero recalls, missing gating subgroups,
    a planned window, thresholds tuned on the final corpus."""
    uncertain: list[str] = []
    for st in stats:
        uncertain += [f"{observed_label(st.evidence)}, {c.scope}: {c.a} vs {c.b}: {c.text}"
                      for c in st.comparisons if not c.distinguished]
    for st in stats:
        uncertain += [f"{observed_label(st.evidence)}: {line}" if len(stats) > 1 else line
                      for line in st.zero_recall()]
    gating = [s.name for s in ev.protocol.subgroups if s.gating]
    for name in gating:
        lacking = [c.key for c in configs if name in c.quality.missing_subgroups(gating)]
        if lacking:
            uncertain.append(f"gating subgroup {name!r} has no value in the raw table for {', '.join(lacking)}: "
                             f"{MISSING_SUBGROUP}")
    if planned.window is not None:
        uncertain.append(f"the window is {'projected' if project else 'planned'}, not observed: a planning "
                         "assumption until the rental's real dates are known (W4)")
    if ev.protocol.thresholds_tuned_on_final:
        uncertain.append("thresholds were tuned after seeing the final corpus (P4): the result needs a new "
                         "independent evaluation corpus")
    return uncertain


def _manifest_diffs(evidence: list[Evidence]) -> list[tuple[str, str, tuple[str, ...]]]:
    """Each merged campaign's manifest against the first one's (C5)."""
    diffs = []
    for ev in evidence[1:]:
        if evidence[0].manifest is None or ev.manifest is None:
            diffs.append((str(evidence[0].folder), str(ev.folder), ("manifest.json missing in one folder",)))
        else:
            diffs.append((str(evidence[0].folder), str(ev.folder), tuple(diff_manifests(evidence[0].manifest.to_json(),
                                                                                        ev.manifest.to_json()))))
    return diffs


def _decision_notes(evidence: list[Evidence], stats: list[CampaignStats], configs: list[Config], incomplete: list[str],
                    cat: Catalog, lots: int | None) -> list[str]:
    """The statistics' notes, the pricing notes (X3), a partial decision, and cards seen against cards rented."""
    notes = [n for st in stats for n in st.notes]
    notes += list(dict.fromkeys(c.pricing.note for c in configs if c.pricing.note))  # X3: cards and lots
    notes += [f"PARTIAL DECISION (--partial): {line}" for line in incomplete]
    for ev in evidence:
        if ev.protocol.model.remote_service is not None:
            continue  # the cards seen here did not do the work: nothing to compare with a lot
        for name in sorted(set(ev.hardware.gpus)):
            entry = match_gpu(name, cat)
            seen = ev.hardware.gpus.count(name)
            if entry is not None and seen != entry.cards_per_lot * (lots or 1):
                held = lots or 1
                notes.append(f"{ev.folder}: the campaign saw {seen} x {name}; {held} lot{'s' if held != 1 else ''} "
                             f"of {entry.gpu_id} hold{'s' if held == 1 else ''} {entry.cards_per_lot * held} cards: "
                             "the times measure the cards seen, extra cards are never assumed to speed anything up")
    return notes


def _with_expenses(configs: list[Config], ev: Evidence, catalog: Catalog) -> tuple[list[Config], CostSheet | None]:
    """K5: the protocol's other expenses on each priced configuration they apply to (named as not applicable on
    the others); where the protocol counts them, its cost per verified corpus divides the project total."""
    protocol = ev.protocol
    if not protocol.expenses:
        return configs, None
    check_currency(protocol.expenses, catalog.currency, str(ev.folder / PROTOCOL))
    priced = [c for c in configs if c.pricing.budget is not None]
    sheet = cost_sheet([(c.key, c.pricing.budget, c.accepted) for c in priced],  # type: ignore[misc]
                       expenses_of(protocol.expenses), counted=protocol.budget.include_expenses,
                       variant_of={c.key: c.variant for c in priced})
    out = []
    for c in configs:
        row = sheet.variant(c.key) if c.pricing.budget is not None else None
        if row is None:
            out.append(c)
            continue
        out.append(replace(c, project=row, pricing=replace(c.pricing, cost=row.cost) if sheet.counted else c.pricing))
    return out, sheet


def _one_line(machines: tuple[MachineChoice, ...], chosen: Config | None, rental_line: str) -> str:
    """Both halves of the answer in one line; 'no choice possible' only when no configuration qualifies."""
    if chosen is not None:
        return rental_line
    answered = [m for m in machines if m.chosen is not None]
    if not answered:
        return rental_line
    configs = "; ".join(f"on {m.hardware}: {m.chosen.variant}" for m in answered)  # type: ignore[union-attr]
    return f"configuration {configs}; rental {rental_line}"


def choose_on_machine(configs: list[Config], ev: Evidence) -> MachineChoice:
    """Among one machine's configurations that process all documents at the quality bar before the deadline:
    committed cost where priced, then failures, then the evidence (T5) — the median decides only what the
    series distinguishes; the set it cannot separate is named, never hidden."""
    hw = configs[0].hardware if configs else "unknown hardware"
    eligible = [c for c in configs if not c.exclusions and c.times.median is not None]
    if not eligible:
        return MachineChoice(hw, None, (), f"no configuration on {hw} processes all documents at the minimum "
                             f"quality before the deadline{_load_cause(configs)}", ())

    def cost(c: Config) -> tuple[int, Decimal]:
        return (0, c.committed) if c.committed is not None else (1, Decimal(0))

    ranked = sorted(eligible, key=lambda c: (cost(c), c.n_failures, c.times.median))
    best = ranked[0]
    peers = [c for c in ranked[1:] if cost(c) == cost(best) and c.n_failures == best.n_failures]
    reasons = [f"{best.key}: all {ev.corpus_size} documents in every counted pass, quality within the tolerance, "
               f"{best.window.deadline_text()}; median pass {fmt_s(best.times.median)} s"]
    inseparable = []
    for c in peers:
        verdict = compare(best.times, c.times, "choice", names=(best.variant, c.variant))
        if verdict.distinguished and verdict.faster == best.variant:
            reasons.append(f"{c.variant}: same committed cost and failures, slower: {verdict.text}")
        else:
            inseparable.append(c)
            reasons.append(f"{c.variant}: same committed cost and failures, not separable yet: {verdict.text}")
    for c in ranked[1:]:
        if c not in peers:
            reasons.append(f"{c.variant}: commits more or failed more ({c.pricing.describe()}; "
                           f"{c.n_failures} failure(s))")
    line = f"on {hw}: {best.variant}"
    if inseparable:
        names = ", ".join(c.variant for c in inseparable)
        line += (f" (first by median; the series does not distinguish it from {names}: any of them is "
                 "decision-equivalent until more passes separate them)")
    else:
        line += " (distinguished from every other qualifying configuration)" if peers else \
            " (the only qualifying configuration)"
    return MachineChoice(hw, best, tuple(inseparable), line, tuple(reasons))


def _load_cause(configs: list[Config]) -> str:
    """When configurations are left out because every pass they finished was measured under concurrent load (T4):
    how many, and what to do (the headline names the cause, not only its consequence)."""
    loaded = sum(1 for c in configs if loaded_only(c.times))
    if not loaded:
        return ""
    return (f" ({loaded} of {len(configs)} configuration(s) have no quiet pass: every pass they finished was measured "
            "under concurrent load and set apart, T4; run the campaign again on a quiet machine)")


def _apply_rule(configs: list[Config], ev: Evidence,
                costs: CostSheet | None = None) -> tuple[Config | None, str, list[str], list[str]]:
    reasons = [f"rule (D1): {RULE}"]
    if costs is not None:
        reasons.append(f"other expenses (K5): {EXPENSES_COUNTED if costs.counted else EXPENSES_APART}")
    uncertain: list[str] = []
    eligible = [c for c in configs if not c.exclusions]
    candidates = [c for c in eligible if c.pricing.priced]
    if not candidates:
        fastest = sorted((c for c in eligible if c.times.median is not None), key=lambda c: c.times.median)
        if eligible and all(c.pricing.reason == CPU_ONLY for c in eligible):
            line = f"not priced: {CPU_ONLY}"
            detail = (f"decision-equivalent configurations (all documents, quality within the tolerance, deadline): "
                      f"{', '.join(c.key for c in eligible)}")
            if fastest:
                detail += f"; fastest by median on this CPU: {fastest[0].key} ({fmt_s(fastest[0].times.median)} s)"
                if len(fastest) > 1:
                    first, second = fastest[0], fastest[1]
                    detail += f" ({compare(first.times, second.times, names=(first.key, second.key)).text})"
            reasons += [detail, "the choice of rental cannot be made from CPU runs: run the same protocol on the "
                                "rental GPUs and decide again"]
        elif eligible and ev.protocol.model.remote_service is not None:
            line = f"not priced: {remote_work(ev.protocol.model.remote_service)}"
            reasons.append(f"decision-equivalent configurations (all documents, quality within the tolerance, "
                           f"deadline): {', '.join(c.key for c in eligible)}; to choose a rental, run the model on "
                           "the rental's hardware itself (model.runs_on = 'local') and decide again")
        elif eligible and not ev.protocol.calendar.tasks:
            line = f"not priced: {NO_TASKS}"  # the cause, not its consequence on each configuration
            reasons += [f"{c.key}: {c.pricing.reason}" for c in eligible]
        elif eligible:
            line = "not priced: no configuration that meets every condition could be priced"
            reasons += [f"{c.key}: {c.pricing.reason}" for c in eligible]
        else:
            line = ("no choice possible: no configuration processes all documents at the minimum quality before "
                    f"the deadline{_load_cause(configs)}")
            reasons.append("every configuration is left out for a reason listed under 'Excluded and why'")
        return None, line, reasons, uncertain
    ranked = sorted(candidates, key=lambda c: (c.committed, c.n_failures,
                                               c.times.median if c.times.median is not None else float("inf")))
    best = ranked[0]
    tied = [c for c in ranked[1:] if c.committed == best.committed and c.n_failures == best.n_failures]
    assert best.pricing.budget is not None and best.pricing.cost is not None
    line = f"chosen: {best.key}: {package_summary(best)}"
    reasons.append(f"{best.key}: all {ev.corpus_size} documents in every counted pass, quality within the "
                   f"tolerance, {best.window.deadline_text()}, {best.pricing.describe()}"
                   + (f"; {best.committed_text()} with the other expenses" if best.project and best.project.counted
                      else ""))
    if costs is not None:
        reasons += _other_ranking(candidates, best, costs)
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
            reasons.append(f"{c.key}: also meets every condition but commits {c.committed_text()} "
                           f"({b.gpu_id} {b.package_days}-day) vs {best.committed_text()}")
    return best, line, reasons, uncertain


def _other_ranking(candidates: list[Config], best: Config, costs: CostSheet) -> list[str]:
    """Where the expenses for some variants only would change the winner under the other basis (package fee vs
    project total), say so: a variant-specific expense never changes, or leaves, the winner silently."""
    specific = [e.name for e in costs.expenses if e.applies_to is not None]
    if not specific or best.project is None:
        return []

    def other(c: Config) -> Decimal:
        assert c.project is not None
        return c.project.budget.total if costs.counted else c.project.project_total

    cheaper = sorted((c for c in candidates if c.project is not None and other(c) < other(best)),
                     key=lambda c: (other(c), c.n_failures,
                                    c.times.median if c.times.median is not None else float("inf")))
    if not cheaper:
        return []
    alt, cur = cheaper[0], best.project.budget.currency
    amounts = f"{format_amount(other(alt))} {cur} vs {format_amount(other(best))} {cur}"
    lines = ", ".join(specific)
    if costs.counted:
        return [f"{OTHER_BASIS}package fee alone, {alt.key} would come first ({amounts}); the protocol counts the "
                f"other expenses, and the lines for some variants only ({lines}) make {best.key} the cheaper project"]
    return [f"{OTHER_BASIS}project total instead, {alt.key} would come first ({amounts}): the lines for some "
            f"variants only ({lines}) weigh on that ranking; the protocol ranks the committed package fee, so "
            f"{best.key} stays chosen (declare [budget] include_expenses = true to rank the project total)"]


def package_summary(c: Config) -> str:
    """'7-day package, 1 lot, 110.00 USD committed, 110.00 USD per verified corpus (1 accepted)', and the project
    total with the other expenses where the protocol declares some (K5)."""
    b, cost = c.pricing.budget, c.pricing.cost
    assert b is not None and cost is not None
    counted = c.project is not None and c.project.counted
    per = (f"{format_amount(cost.per_result)} {b.currency} per verified corpus"
           + (" of the project total" if counted else "") + f" ({cost.accepted_results} accepted)"
           if cost.per_result is not None else "cost per verified corpus undefined (0 accepted)")
    project = ""
    if c.project is not None:
        project = (f", project total {format_amount(c.project.project_total)} {b.currency} with the other expenses"
                   + (" (counted)" if counted else " (listed apart)"))
    return (f"{b.gpu_id} {b.package_days}-day package, {b.lots} lot{'s' if b.lots != 1 else ''}, "
            f"{format_amount(b.total)} {b.currency} committed{project}, {per}")
