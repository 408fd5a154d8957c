"""Lots as a decision variable (K1, K6, W1–W4): the production job split into disjoint shards, one per lot.

An offline job splits into independent shards, so K lots of observed hardware can each process one of K disjoint
shards: each at the rate observed on one lot, plus the start-up observed on it. The plan's time is the slowest
shard's (the largest, ``ceil(documents / K)``), appended after the base window (planned, or projected) as one
planned task; the window must end before the deadline and be covered by a listed package, rented ``K`` times
(budget = price per lot x lots, K1; a short use is the whole package, K5). The rate is never extrapolated from a
card count that was not observed: every lot is assumed to run as the observed one, and the plan says so. A plan
is *planned from observed throughput*, never a result (K6).

The one planner here (:func:`plan_shards`) prices every plan: the rule's choice of lots, a mix of observed
machines (:mod:`iteralab.economics.mix`) and the rate an unobserved catalog row would have to reach. The window
and package arithmetic is the kit's (``quote_window``, ``package_budget``), never re-implemented.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Iterable

from iteralab.economics.pricing import Catalog, PackageBudget, format_amount, package_budget
from iteralab.economics.window import CalendarWindow, Task, WindowQuote, build_window, quote_window
from iteralab.kit.calcul_forfaits import format_hours, load_zone

__all__ = ["LABEL", "ASSUMPTION", "LotChoice", "LotPlan", "Rate", "best_plan", "cheapest_covering", "choose_lots",
           "job_seconds", "plan_shards", "shard_documents", "with_job"]

LABEL = "planned from observed throughput"
#: What every plan of several lots assumes, said wherever one is shown.
ASSUMPTION = ("a plan, not a result: each lot processes a disjoint shard and is assumed to run as the observed one "
              "(its measured rate and start-up); the rate is never extrapolated from a card count not observed")


def _s(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


@dataclass(frozen=True)
class Rate:
    """What one lot was observed to do: documents per second (the slowest counted pass's, the cautious figure) and
    the start-up before its first document (load, compilation, warm-up medians)."""

    docs_per_s: float
    startup_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.docs_per_s > 0 or not math.isfinite(self.docs_per_s):
            raise ValueError(f"a rate of {self.docs_per_s!r} documents/s cannot plan a job")


def shard_documents(documents: int, shards: int) -> int:
    """The largest of ``shards`` disjoint shards of ``documents``: the one the plan waits for."""
    return math.ceil(documents / shards)


def job_seconds(documents: int, shards: int, rate: Rate) -> int:
    """Whole seconds of the slowest shard, rounded up (a plan never shortens the work), at least one."""
    return max(1, math.ceil(shard_documents(documents, shards) / rate.docs_per_s + rate.startup_s))


def with_job(window: CalendarWindow, name: str, seconds: int) -> CalendarWindow:
    """The window with the production job appended after its end as a planned task (W4)."""
    task = Task(name, window.end, window.end + timedelta(seconds=seconds))
    return build_window([*window.tasks, task], "planned", window.timezone)


def cheapest_covering(catalog: Catalog, gpu_id: str, window: CalendarWindow,
                      lots: int) -> tuple[WindowQuote, PackageBudget | None]:
    """The kit's quote of ``window`` for ``lots`` lots of ``gpu_id`` and the cheapest listed package that covers it
    (None: none does; extra periods are never added automatically, W3)."""
    quote = quote_window(catalog, gpu_id, window.span_hours, lots, window.label, window.notes)
    covering = [o for o in quote.options if o.covers and o.in_catalog]
    if not covering:
        return quote, None
    best = min(covering, key=lambda o: (o.total, o.package_days))
    return quote, package_budget(catalog.entry(gpu_id, best.package_days), lots)


@dataclass(frozen=True)
class LotPlan:
    """``shards`` lots (x ``per_shard`` lots each, for a variant spread over several lots' cards) processing
    ``documents`` in disjoint shards after the base window; priced when a catalog row is given."""

    gpu_id: str | None
    documents: int
    shards: int
    per_shard: int
    rate: Rate
    seconds: int
    window: CalendarWindow
    deadline: datetime | None
    quote: WindowQuote | None = None
    budget: PackageBudget | None = None

    @property
    def lots(self) -> int:
        return self.shards * self.per_shard

    @property
    def shard(self) -> int:
        return shard_documents(self.documents, self.shards)

    @property
    def meets_deadline(self) -> bool | None:
        return None if self.deadline is None else self.window.end <= self.deadline

    @property
    def qualifies(self) -> bool:
        """Priced, and before the deadline where one is declared."""
        return self.budget is not None and self.meets_deadline is not False

    @property
    def total(self) -> Decimal | None:
        return None if self.budget is None else self.budget.total

    def failure(self) -> str | None:
        """Why this plan does not qualify, in words (None: it does)."""
        if self.meets_deadline is False:
            zone = load_zone(self.window.timezone) if self.window.timezone else timezone.utc
            deadline = self.deadline.astimezone(zone).isoformat()  # type: ignore[union-attr]
            return f"misses the deadline (the window ends {self.window.to_dict()['end']}, deadline {deadline})"
        if self.budget is None and self.gpu_id is not None:
            return (f"no listed package of {self.gpu_id} covers the {format_hours(self.window.span_hours)} h "
                    "window (extra periods are never added automatically)")
        if self.budget is None:
            return "no catalog row prices this hardware"
        return None

    def describe(self) -> str:
        """'2 lots: 2 shards of at most 12500 documents, job 2.49 h, window 98.49 h, rtx-4090 7-day package,
        220.00 USD committed'."""
        text = (f"{_s(self.lots, 'lot')}: {_s(self.shards, 'shard')} of at most {self.shard} documents, job "
                f"{self.seconds / 3600:.2f} h, window {format_hours(self.window.span_hours)} h")
        if self.budget is not None:
            b = self.budget
            text += f", {b.gpu_id} {b.package_days}-day package, {format_amount(b.total)} {b.currency} committed"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"gpu_id": self.gpu_id, "documents": self.documents, "lots": self.lots, "shards": self.shards,
                "lots_per_shard": self.per_shard, "shard_documents": self.shard,
                "docs_per_s_per_lot": self.rate.docs_per_s, "startup_s": self.rate.startup_s,
                "job_seconds": self.seconds, "window_hours": format_hours(self.window.span_hours),
                "window_end": self.window.to_dict()["end"], "meets_deadline": self.meets_deadline,
                "budget": None if self.budget is None else self.budget.to_dict(), "qualifies": self.qualifies,
                "failure": self.failure(), "label": LABEL}


def plan_shards(base: CalendarWindow, deadline: datetime | None, catalog: Catalog, gpu_id: str | None,
                documents: int, rate: Rate, shards: int, *, per_shard: int = 1,
                name: str = "production job") -> LotPlan:
    """The planner: ``documents`` in ``shards`` disjoint shards at ``rate`` per lot, appended after ``base``,
    checked against ``deadline`` and priced as the cheapest listed package of ``gpu_id`` that covers the window,
    ``shards x per_shard`` lots (unpriced without a row)."""
    if shards < 1 or documents < 1:
        raise ValueError("a plan needs at least one shard and one document")
    seconds = job_seconds(documents, shards, rate)
    task = (f"{name} ({LABEL}, slowest of {_s(shards, 'shard')})" if shards > 1 else f"{name} ({LABEL}, "
                                                                                        "slowest pass)")
    window = with_job(base, task, seconds)
    if gpu_id is None:
        return LotPlan(None, documents, shards, per_shard, rate, seconds, window, deadline)
    quote, budget = cheapest_covering(catalog, gpu_id, window, shards * per_shard)
    return LotPlan(gpu_id, documents, shards, per_shard, rate, seconds, window, deadline, quote, budget)


@dataclass(frozen=True)
class LotChoice:
    """Every number of lots tried and the cheapest that qualifies (None: none does)."""

    plans: tuple[LotPlan, ...]
    chosen: LotPlan | None
    fixed: bool = False

    @property
    def shown(self) -> LotPlan:
        """The chosen plan, else the last one tried (the most lots: the closest to the deadline)."""
        return self.chosen if self.chosen is not None else self.plans[-1]

    def lines(self) -> list[str]:
        """Why this number of lots: the chosen plan, why each fewer fails, why each more costs more."""
        best = self.chosen
        if best is None:
            tried = f"{self.plans[0].lots}" if len(self.plans) == 1 else \
                f"{self.plans[0].lots} to {self.plans[-1].lots}"
            return [f"no number of lots qualifies ({tried} tried): " + "; ".join(
                f"{_s(p.lots, 'lot')}: {p.failure()}" for p in self.plans)]
        how = "the number given with --lots" if self.fixed else "the cheapest that finishes before the deadline"
        out = [f"{best.describe()}: {how}; {ASSUMPTION}"]
        for p in self.plans:
            if p is best:
                continue
            if p.shards < best.shards:
                out.append(f"{_s(p.lots, 'lot')}: " + (p.failure() or f"commits more ({p.describe()})"))
            elif p.qualifies:
                assert p.total is not None and best.total is not None
                verb = "commits more" if p.total > best.total else "commits as much, with more lots"
                out.append(f"{_s(p.lots, 'lot')}: {verb} ({format_amount(p.total)} vs "
                           f"{format_amount(best.total)} {best.budget.currency})")  # type: ignore[union-attr]
            else:
                out.append(f"{_s(p.lots, 'lot')}: {p.failure()}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"chosen_lots": None if self.chosen is None else self.chosen.lots, "fixed_by_lots_option": self.fixed,
                "assumption": ASSUMPTION, "tried": [p.to_dict() for p in self.plans], "reasons": self.lines()}


def best_plan(plans: Iterable[LotPlan]) -> LotPlan | None:
    """The cheapest qualifying plan; ties go to fewer lots."""
    ok = [p for p in plans if p.qualifies]
    return min(ok, key=lambda p: (p.total, p.lots)) if ok else None


def choose_lots(base: CalendarWindow, deadline: datetime | None, catalog: Catalog, gpu_id: str | None,
                documents: int, rate: Rate, choices: Iterable[int], *, per_shard: int = 1, fixed: bool = False,
                name: str = "production job") -> LotChoice:
    """The planner over each number of shards in ``choices``; the cheapest qualifying plan is chosen."""
    plans = tuple(plan_shards(base, deadline, catalog, gpu_id, documents, rate, k, per_shard=per_shard, name=name)
                  for k in choices)
    if not plans:
        raise ValueError("no number of lots to try")
    return LotChoice(plans, best_plan(plans), fixed)
