"""Plans across machines (K1, K6, W4): a mix of observed machines, and the rate an unobserved row must reach.

* A mix: packages of several observed machines, the production job split between them by their measured rates
  (each machine's share proportional to its lots x its observed rate per lot), each part planned by
  :func:`~iteralab.economics.lots.plan_shards` on its own machine; it qualifies when every part does.
* A break-even rate: for a catalog row whose hardware was not observed nothing is priced, but the least
  documents per second per lot at which its cheapest package plan would beat a committed budget before the
  deadline is found with the same planner (a search over the rate, the planner deciding each step): a bar to
  beat, never a price. Start-up is not counted for hardware never observed (each second of it raises the bar).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_CEILING, Decimal
from typing import Any, Sequence

from iteralab.economics.lots import LotPlan, Rate, best_plan, plan_shards
from iteralab.economics.pricing import Catalog, format_amount
from iteralab.economics.window import CalendarWindow

__all__ = ["BreakEven", "Machine", "MixPlan", "break_even", "cheapest_mix", "split_by_rates"]

#: Significant digits a break-even rate is shown with, rounded up (the shown bar is always enough).
DIGITS = 3
_FASTEST = 1e12  # documents/s: a rate at which any job takes one second


@dataclass(frozen=True)
class Machine:
    """One observed machine's chosen configuration: its name, catalog row, rate per lot, lots per shard."""

    name: str
    gpu_id: str
    rate: Rate
    per_shard: int = 1


def split_by_rates(documents: int, weights: Sequence[float]) -> list[int]:
    """``documents`` in parts proportional to ``weights`` (cumulative rounding: the parts sum to the whole)."""
    total = sum(weights)
    bounds = [0] + [round(documents * sum(weights[:i + 1]) / total) for i in range(len(weights))]
    bounds[-1] = documents
    return [b - a for a, b in zip(bounds, bounds[1:])]


@dataclass(frozen=True)
class MixPlan:
    """One plan per machine, each on its share of the job."""

    machines: tuple[Machine, ...]
    parts: tuple[LotPlan, ...]

    @property
    def qualifies(self) -> bool:
        return all(p.qualifies for p in self.parts)

    @property
    def total(self) -> Decimal:
        return sum((p.total or Decimal(0) for p in self.parts), Decimal(0))

    @property
    def lots(self) -> int:
        return sum(p.lots for p in self.parts)

    def describe(self) -> str:
        cur = self.parts[0].budget.currency if self.parts[0].budget else ""
        parts = " + ".join(f"{m.name}: {p.documents} documents on {p.describe()}"
                           for m, p in zip(self.machines, self.parts))
        return f"{parts}; {format_amount(self.total)} {cur} committed in all"

    def to_dict(self) -> dict[str, Any]:
        return {"total": format_amount(self.total), "lots": self.lots, "qualifies": self.qualifies,
                "parts": [{"machine": m.name, **p.to_dict()} for m, p in zip(self.machines, self.parts)]}


def _mix(base: CalendarWindow, deadline: datetime | None, catalog: Catalog, documents: int,
         machines: Sequence[Machine], shards: Sequence[int]) -> MixPlan | None:
    shares = split_by_rates(documents, [k * m.rate.docs_per_s for k, m in zip(shards, machines)])
    if min(shares) < 1:
        return None
    parts = tuple(plan_shards(base, deadline, catalog, m.gpu_id, d, m.rate, k, per_shard=m.per_shard,
                              name=f"production job, {m.name} part")
                  for m, d, k in zip(machines, shares, shards))
    return MixPlan(tuple(machines), parts)


def cheapest_mix(base: CalendarWindow, deadline: datetime | None, catalog: Catalog, documents: int,
                 machines: Sequence[Machine], choices: Sequence[int]) -> MixPlan | None:
    """The cheapest qualifying mix using every machine, 1 … max lots each (``choices``); ties: fewer lots."""
    if len(machines) < 2:
        return None
    best: MixPlan | None = None
    for shards in itertools.product(choices, repeat=len(machines)):
        plan = _mix(base, deadline, catalog, documents, machines, shards)
        if plan is None or not plan.qualifies:
            continue
        if best is None or (plan.total, plan.lots) < (best.total, best.lots):
            best = plan
    return best


# -------------------------------------------------------------------------------------------- break-even


@dataclass(frozen=True)
class BreakEven:
    """The least rate per lot at which a row's cheapest package plan beats ``beat`` (or, with nothing to beat,
    finishes before the deadline); ``rate`` None with ``reason`` when no rate does."""

    gpu_id: str
    gpu_name: str
    beat: Decimal | None
    rate: Decimal | None
    plan: LotPlan | None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"gpu_id": self.gpu_id, "gpu_name": self.gpu_name,
                "to_beat": None if self.beat is None else format_amount(self.beat),
                "least_docs_per_s_per_lot": None if self.rate is None else str(self.rate),
                "plan": None if self.plan is None else self.plan.to_dict(), "never": self.reason}


def _round_up(value: float) -> Decimal:
    exact = Decimal(repr(value))
    quantum = Decimal(1).scaleb(exact.adjusted() - DIGITS + 1)
    return exact.quantize(quantum, rounding=ROUND_CEILING)


def break_even(base: CalendarWindow, deadline: datetime | None, catalog: Catalog, gpu_id: str, documents: int,
               beat: Decimal | None, choices: Sequence[int]) -> BreakEven:
    """The least documents/s per lot (no start-up counted) at which the planner finds a plan of ``gpu_id``,
    ``choices`` lots, that qualifies and commits less than ``beat`` (None: any qualifying plan, then the cheapest
    such plan's own least rate)."""
    name = catalog.entries_for(gpu_id)[0].gpu_name
    limit = beat

    def plan_at(rate: float) -> LotPlan | None:
        plans = [plan_shards(base, deadline, catalog, gpu_id, documents, Rate(rate), k) for k in choices]
        return best_plan(p for p in plans if limit is None or (p.total is not None and p.total < limit))

    top = plan_at(_FASTEST)
    if top is None:
        cheapest = min(e.price_per_lot for e in catalog.entries_for(gpu_id)) * min(choices)
        if beat is not None and cheapest >= beat:
            why = (f"cannot beat the chosen plan at any rate: its cheapest package already costs "
                   f"{format_amount(cheapest)} {catalog.currency}, not less than {format_amount(beat)}")
        else:
            why = "no listed package of it covers the planned window before the deadline, at any rate"
        return BreakEven(gpu_id, name, beat, None, None, why)
    if beat is None:  # nothing to beat: the cheapest plan that can finish at all, and the least rate it needs
        assert top.total is not None
        limit = top.total + Decimal("0.001")
    low, high = 0.0, 1.0
    while plan_at(high) is None:
        low, high = high, high * 2
    for _ in range(200):
        if high - low <= high * 1e-9:
            break
        middle = (low + high) / 2
        low, high = (low, middle) if plan_at(middle) is not None else (middle, high)
    shown = _round_up(high)
    plan = plan_at(float(shown))
    assert plan is not None  # the planner is monotone in the rate: a higher rate never loses a plan
    return BreakEven(gpu_id, name, beat, shown, plan)
