"""The rental plans beyond one machine and one lot (K1, K6, W4): the number of lots each configuration is planned
on, the cheapest mix of observed machines, and the rate an unobserved catalog row would have to reach.

Reads the evidence (the counted pass times, the start-up phases, the observed hardware), the window the rule
plans and the catalog; the arithmetic is :mod:`iteralab.economics.lots` and :mod:`iteralab.economics.mix`
(one planner). Nothing here is a result: every plan is *planned from observed throughput* (K6), and a row whose
hardware was not observed is never priced, only given a bar to beat.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Iterable

from iteralab.decision.costing import Pricing, cpu_entry, lots_for_cards, match_gpu, price_config
from iteralab.decision.job import JobPlan, plan_job
from iteralab.decision.windows import WindowInfo
from iteralab.economics.lots import ASSUMPTION, LABEL, LotChoice, Rate, choose_lots, plan_shards
from iteralab.economics.mix import BreakEven, Machine, MixPlan, break_even, cheapest_mix
from iteralab.economics.pricing import Catalog
from iteralab.evidence.reads import Evidence
from iteralab.evidence.stats import VariantTimes

#: The rule's configuration (``decision.rule.Config``, which imports this module): read by its attributes here.
Config = Any

__all__ = ["BAR", "MIX_NOTE", "RentalPlans", "lot_choices", "mix_line", "plan_config", "plan_jobs", "plan_lines",
           "plan_rental", "rate_of", "startup_of"]

#: What a mix of observed machines is, said wherever one is shown.
MIX_NOTE = ("a mix is a corpus processed by two or more configurations, each part verified on the machine that "
            "processes it (each met the quality bar on its own machine); " + ASSUMPTION)
BAR = ("a bar to beat, never a price: the hardware was not observed, so nothing of it is priced; start-up is not "
       "counted (each second of it raises the bar)")


def startup_of(times: VariantTimes) -> float:
    """Median start-up phases of a variant's passes (load, compilation, warm-up), 0 where not measured."""
    return sum(times.phase_median(ph) or 0.0 for ph in ("load_s", "compile_s", "warmup_s"))


def rate_of(times: VariantTimes, corpus_size: int) -> Rate | None:
    """One lot's observed rate: the slowest counted pass's documents per second (the cautious figure), and its
    start-up; None without a counted pass."""
    if not times.times or corpus_size <= 0:
        return None
    return Rate(corpus_size / max(times.times), startup_of(times))


def lot_choices(lots: int | None, max_lots: int) -> tuple[int, ...]:
    """The numbers of shards the rule tries: the one given with ``--lots``, else 1 … ``max_lots``."""
    return (lots,) if lots is not None else tuple(range(1, max_lots + 1))


def _per_shard(ev: Evidence, variant: str, pricing: Pricing) -> int:
    """Lots one shard needs: a variant spread over several cards needs the lots that hold them (K1), else one."""
    entry = pricing.gpu
    if entry is None or entry.is_cpu:
        return 1
    try:
        workers = ev.protocol.variant(variant).data_parallel
    except KeyError:
        return 1
    return lots_for_cards(workers, entry) if workers > 1 else 1


def _window(choice_plan: Any, base: WindowInfo) -> WindowInfo:
    shards = choice_plan.shards
    hours = choice_plan.seconds / 3600
    note = (f"planned tasks + the production job, {hours:.1f} h planned from the slowest counted pass" if shards == 1
            else f"planned tasks + the production job on {choice_plan.lots} lots ({shards} disjoint shards of at "
                 f"most {choice_plan.shard} documents, each at one lot's observed rate), {hours:.1f} h for the "
                 "slowest shard, planned from the slowest counted pass")
    return WindowInfo(choice_plan.window, None, base.deadline, note)


def plan_config(ev: Evidence, times: VariantTimes, base: WindowInfo, accepted: int, catalog: Catalog,
                lots: int | None) -> tuple[WindowInfo, Pricing, LotChoice | None]:
    """The window a configuration needs and its pricing: with a production job, over 1 … ``max_lots`` lots (or the
    ``--lots`` given), the cheapest plan that finishes before the deadline; without one, the base window."""
    job = ev.protocol.job
    rate = rate_of(times, ev.corpus_size)
    if job is None or base.window is None or rate is None:
        return base, price_config(ev, times, base, accepted, catalog, lots or 1), None
    name = f"production job of {times.variant}"
    one = plan_shards(base.window, base.deadline, catalog, None, job.documents, rate, 1, name=name)
    first = price_config(ev, times, _window(one, base), accepted, catalog, lots or 1)
    if first.gpu is None:  # nothing to rent: the job planned on the one machine observed
        return _window(one, base), first, None
    per = _per_shard(ev, times.variant, first)
    choices = lot_choices(None if lots is None else max(1, lots // per), ev.protocol.budget.max_lots)
    choice = choose_lots(base.window, base.deadline, catalog, first.gpu.gpu_id, job.documents, rate, choices,
                         per_shard=per, fixed=lots is not None, name=name)
    window = _window(choice.shown, base)
    return window, price_config(ev, times, window, accepted, catalog, choice.shown.lots), choice


def plan_jobs(configs: list[Config], ev: Evidence, catalog: Catalog) -> tuple[JobPlan, ...]:
    """The production job table (one lot each, the throughput it was planned from) of every qualifying
    configuration; nothing without a ``[job]``."""
    job = ev.protocol.job
    if job is None:
        return ()
    plans = (plan_job(c.key, job.documents, ev.corpus_size, c.times.times, startup_of(c.times), c.pricing.gpu,
                      catalog, slowest_concurrent=c.times.slowest_concurrent) for c in configs if not c.exclusions)
    return tuple(p for p in plans if p is not None)


# ------------------------------------------------------------------------------------- across machines


@dataclass(frozen=True)
class RentalPlans:
    """The mix of observed machines (shown beside the best single-machine plan, chosen only when strictly cheaper)
    and the break-even rates of the catalog rows whose hardware was not observed."""

    single: Any = None
    mix: MixPlan | None = None
    mix_chosen: bool = False
    rows: tuple[BreakEven, ...] = ()
    fastest: tuple[str, float] | None = None
    why_none: str | None = None
    notes: tuple[str, ...] = field(default=())

    def mix_lines(self) -> list[str]:
        if self.mix is None:
            return list(self.notes)
        single = self.single
        beside = ("no single-machine plan qualifies" if single is None else
                  f"best single-machine plan: {single.key}, {single.committed_text()}")
        verdict = "chosen: strictly cheaper" if self.mix_chosen else "not chosen: not strictly cheaper"
        return [f"mix of observed machines ({verdict}; {beside}): {self.mix.describe()}", MIX_NOTE]

    def bar_lines(self) -> list[str]:
        if self.why_none is not None:
            return [self.why_none]
        out = []
        for row in self.rows:
            head = f"{row.gpu_id} ({row.gpu_name}), not observed"
            if row.rate is None:
                out.append(f"{head}: {row.reason}")
                continue
            plan = row.plan
            assert plan is not None and plan.budget is not None
            ratio = ""
            if self.fastest is not None:
                key, fast = self.fastest
                ratio = f": {float(row.rate) / fast:.1f}x the fastest observed ({key}, {fast:.2f} documents/s per lot)"
            goal = ("would beat the chosen plan's committed budget before the deadline" if row.beat is not None else
                    "would finish before the deadline (nothing was priced to beat)")
            out.append(f"{head}: rent it next only if you expect at least {row.rate} documents/s per lot{ratio}; "
                       f"at that rate its cheapest plan ({plan.lots} lot{'s' if plan.lots != 1 else ''} of its "
                       f"{plan.budget.package_days}-day package, window {plan.window.to_dict()['span_hours']} h) "
                       f"{goal}")
        return out + ([BAR] if self.rows else [])

    def to_dict(self) -> dict[str, Any]:
        return {"label": LABEL,
                "mix": None if self.mix is None else {**self.mix.to_dict(), "chosen": self.mix_chosen,
                                                      "note": MIX_NOTE},
                "break_even": [r.to_dict() for r in self.rows], "break_even_note": self.why_none or BAR,
                "fastest_observed": None if self.fastest is None else
                {"configuration": self.fastest[0], "docs_per_s_per_lot": self.fastest[1]}}


def _part(configs: list[Config], chosen: Config | None) -> Config | None:
    """A machine's part of a mix: its chosen configuration, else the fastest whose only exclusion is the deadline
    (a smaller share may then meet it); priced on a catalog row, never for a remote service."""
    if chosen is not None:
        return chosen if chosen.pricing.gpu is not None else None
    late = [c for c in configs if c.exclusions and c.pricing.gpu is not None and c.times.times and _deadline_only(c)]
    return min(late, key=lambda c: max(c.times.times)) if late else None


def _observed_rows(evidence: Iterable[Evidence], configs: list[Config], catalog: Catalog) -> set[str]:
    seen = {c.pricing.gpu.gpu_id for c in configs if c.pricing.gpu is not None}
    for ev in evidence:
        seen |= {e.gpu_id for name in ev.hardware.gpus if (e := match_gpu(name, catalog)) is not None}
        if ev.hardware.cpu and (e := cpu_entry(catalog, ev.hardware.cpu, ev.hardware.cpu_cores)) is not None:
            seen.add(e.gpu_id)
    return seen


def _deadline_only(c: Config) -> bool:
    """Qualifies but for the deadline (which more lots, or a smaller share, may meet)."""
    return all(e.startswith("misses the deadline") for e in c.exclusions)


def _fastest(configs: list[Config], size: int) -> tuple[str, float] | None:
    """The fastest observed rate per lot among the configurations that qualify but for the deadline (else among
    those that completed their passes): what an unobserved row's bar is compared with."""
    done = [c for c in configs if not c.failures]
    rated = [(c.key, r.docs_per_s) for c in ([c for c in done if _deadline_only(c)] or done)
             if (r := rate_of(c.times, size)) is not None]
    return max(rated, key=lambda kr: kr[1]) if rated else None


def _distinct(parts: list[Config], size: int) -> list[Config]:
    """One part per catalog row (two folders of the same hardware are more lots of one package, not a mix): the
    fastest."""
    best: dict[str, Config] = {}
    for c in parts:
        gpu = c.pricing.gpu.gpu_id
        if gpu not in best or rate_of(c.times, size).docs_per_s > rate_of(best[gpu].times, size).docs_per_s:
            best[gpu] = c
    return list(best.values())


def plan_rental(evidence: list[Evidence], configs: list[Config], machines: Iterable[Any], chosen: Config | None,
                base: WindowInfo, catalog: Catalog, lots: int | None) -> RentalPlans:
    """The mix across the observed machines and the break-even rate of every unobserved catalog row, both planned
    on the protocol's planned window (``base``) with the production job after it."""
    ev = evidence[0]
    job = ev.protocol.job
    if job is None or base.window is None:
        why = ("no production job ([job]) is declared: the window does not depend on throughput, so no rate is "
               "asked of an unobserved row" if job is None else
               "no window is planned (the calendar has no tasks): no rate is asked of an unobserved row")
        return RentalPlans(chosen, why_none=why)
    choices = lot_choices(lots, ev.protocol.budget.max_lots)
    parts = _distinct([p for m in machines if (p := _part([c for c in configs if c.hardware == m.hardware],
                                                          m.chosen))], ev.corpus_size)
    mix, notes = None, ()
    if len(parts) > 1 and any(c.project is not None and c.project.counted for c in parts):
        notes = ("no mix of machines is planned: the protocol counts the other expenses ([budget] include_expenses "
                 "= true), which a mix would share between its parts",)
    elif len(parts) > 1:
        mix = cheapest_mix(base.window, base.deadline, catalog, job.documents,
                           [Machine(c.key, c.pricing.gpu.gpu_id, rate_of(c.times, ev.corpus_size),  # type: ignore
                                    _per_shard(ev, c.variant, c.pricing)) for c in parts], choices)
    single = chosen.committed if chosen is not None else None
    mix_chosen = mix is not None and (single is None or mix.total < single)
    beat: Decimal | None = mix.total if mix_chosen else (  # type: ignore[union-attr]
        chosen.pricing.budget.total if chosen is not None and chosen.pricing.budget is not None else None)
    seen = _observed_rows(evidence, configs, catalog)
    rows = tuple(break_even(base.window, base.deadline, catalog, gpu, job.documents, beat, choices)
                 for gpu in catalog.gpu_ids() if gpu not in seen)
    return RentalPlans(chosen, mix, mix_chosen, rows, _fastest(configs, ev.corpus_size), notes=notes)


def plan_lines(chosen: Config | None, machines: Iterable[Any], plans: RentalPlans | None) -> list[str]:
    """The lines the note and the report show: the lots of the chosen plan (each number tried), the lots of each
    machine's configuration, the mix beside the best single-machine plan, the bar each unobserved row must reach."""
    if plans is None or plans.why_none is not None:
        return [] if plans is None else [plans.why_none]  # type: ignore[list-item]
    out = []
    if chosen is not None and chosen.lots_choice is not None:
        out += [f"lots of {chosen.key}: {line}" for line in chosen.lots_choice.lines()]
    for m in machines:
        c = m.chosen
        if c is not None and c is not chosen and c.lots_choice is not None:
            out.append(f"lots of {c.key}: {c.lots_choice.lines()[0]}")
    return out + plans.mix_lines() + plans.bar_lines()


def mix_line(plans: RentalPlans) -> str:
    """The rental half of the answer when a mix is chosen."""
    assert plans.mix is not None
    return f"chosen: a mix of observed machines: {plans.mix.describe()}"
