"""Package pricing: committed budget, cost per verified result, separate project expenses (K1, K4–K6).

The catalog reading and every number (budget = price per lot x lots, cost per result, formatting) come
from the kit's calculator, ``iteralab/kit/calcul_forfaits.py``, so the kit and the library give the
same answers (K8). This module adds what only the library needs: counting unique accepted results by
corpus fingerprint, project expenses kept apart from package costs, and a cost sheet per variant.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Iterable

from iteralab.kit.calcul_forfaits import (
    CATALOG_FILENAME,
    DEFAULT_CATALOG,
    Catalog,
    CatalogEntry,
    CatalogError,
    CostPerResult,
    KitError,
    PackageBudget,
    PriceQuote,
    PricingError,
    cost_per_result,
    format_amount,
    load_catalog,
    package_budget,
    parse_whole,
    quote_price,
    render_price,
)

__all__ = [
    "CATALOG_FILENAME",
    "DEFAULT_CATALOG",
    "Catalog",
    "CatalogEntry",
    "CatalogError",
    "CostPerResult",
    "CostSheet",
    "Expense",
    "KitError",
    "PackageBudget",
    "PriceQuote",
    "PricingError",
    "VariantCost",
    "accepted_fingerprints",
    "cost_per_result",
    "cost_sheet",
    "count_accepted_results",
    "format_amount",
    "load_catalog",
    "package_budget",
    "parse_whole",
    "price",
    "quote_price",
    "render_price",
]


def price(
    gpu_id: str,
    days: int,
    lots: int,
    accepted_results: int | None = None,
    catalog: str | Path | Catalog | None = None,
) -> PriceQuote:
    """Budget of ``lots`` lots of the ``days``-day package of ``gpu_id`` (and its cost per result if asked)."""
    cat = catalog if isinstance(catalog, Catalog) else load_catalog(catalog)
    return quote_price(cat, gpu_id, days, lots, accepted_results)


# ------------------------------------------------------------------------------- accepted results (K6)


def accepted_fingerprints(passes: Iterable[tuple[str, bool]]) -> frozenset[str]:
    """The distinct corpus fingerprints that have at least one accepted pass.

    ``passes`` holds ``(corpus_fingerprint, corpus_accepted)`` pairs, one per attempted pass. Five
    accepted passes over one corpus are one useful result, not five.
    """
    accepted: set[str] = set()
    for position, item in enumerate(passes, start=1):
        try:
            fingerprint, ok = item
        except (TypeError, ValueError):
            raise PricingError(
                f"pass {position}: expected (fingerprint, accepted), got {item!r}", hint="one pair per attempted pass"
            ) from None
        if not isinstance(fingerprint, str) or not fingerprint.strip():
            raise PricingError(f"pass {position}: corpus fingerprint {fingerprint!r} is empty or not text")
        if not isinstance(ok, bool):
            raise PricingError(f"pass {position}: accepted flag {ok!r} is not True or False")
        if ok:
            accepted.add(fingerprint)
    return frozenset(accepted)


def count_accepted_results(passes: Iterable[tuple[str, bool]]) -> int:
    """How many unique corpora were accepted (each fingerprint counts once)."""
    return len(accepted_fingerprints(passes))


# -------------------------------------------------------------------------------------- expenses (K5)


@dataclass(frozen=True)
class Expense:
    """A project expense outside the rental packages (storage, data transfer …), with its justification.

    Expenses are reported on their own lines; they never enter a variant's package cost or its cost per
    verified result.
    """

    label: str
    amount: Decimal
    currency: str
    justification: str

    def __post_init__(self) -> None:
        if not isinstance(self.label, str) or not self.label.strip():
            raise PricingError("expense without a label", hint="name what was paid for")
        try:
            amount = self.amount if isinstance(self.amount, Decimal) else Decimal(str(self.amount))
        except InvalidOperation:
            raise PricingError(f"expense {self.label!r}: amount {self.amount!r} is not a number") from None
        if not amount.is_finite() or amount < 0:
            raise PricingError(f"expense {self.label!r}: amount {self.amount!r} must be a number of 0 or more")
        object.__setattr__(self, "amount", amount)
        if not isinstance(self.currency, str) or not re.fullmatch(r"[A-Z]{3}", self.currency):
            raise PricingError(f"expense {self.label!r}: currency {self.currency!r} is not a code like USD")
        if not isinstance(self.justification, str) or not self.justification.strip():
            raise PricingError(
                f"expense {self.label!r} has no justification",
                hint="say why the project needs it; an unjustified expense is not recorded",
            )

    def to_dict(self) -> dict:
        return {
            "label": self.label,
            "amount": format_amount(self.amount),
            "currency": self.currency,
            "justification": self.justification,
        }


# ------------------------------------------------------------------------------------------ cost sheet


@dataclass(frozen=True)
class VariantCost:
    """One configuration's committed package budget and its cost per verified result."""

    variant: str
    budget: PackageBudget
    cost: CostPerResult

    def to_dict(self) -> dict:
        return {"variant": self.variant, "budget": self.budget.to_dict(), "cost_per_result": self.cost.to_dict()}


@dataclass(frozen=True)
class CostSheet:
    """Package costs per variant and project expenses, side by side and never mixed."""

    currency: str
    variants: tuple[VariantCost, ...]
    expenses: tuple[Expense, ...]

    @property
    def expenses_total(self) -> Decimal:
        return sum((e.amount for e in self.expenses), Decimal(0))

    def to_dict(self) -> dict:
        return {
            "currency": self.currency,
            "variants": [v.to_dict() for v in self.variants],
            "expenses": [e.to_dict() for e in self.expenses],
            "expenses_total": format_amount(self.expenses_total),
        }


def cost_sheet(
    variants: Iterable[tuple[str, PackageBudget, int]], expenses: Iterable[Expense] = ()
) -> CostSheet:
    """Build a cost sheet from ``(variant name, package budget, accepted results)`` and project expenses.

    All amounts must share one currency; variant names must be unique. A variant's cost per result is
    its own package total divided by its own accepted results: expenses are listed apart.
    """
    rows: list[VariantCost] = []
    currencies: set[str] = set()
    for name, budget, accepted in variants:
        if any(r.variant == name for r in rows):
            raise PricingError(f"variant {name!r} appears twice in the cost sheet", hint="one line per variant")
        rows.append(VariantCost(name, budget, cost_per_result(budget.total, accepted, budget.currency)))
        currencies.add(budget.currency)
    spent = tuple(expenses)
    currencies.update(e.currency for e in spent)
    if len(currencies) > 1:
        raise PricingError(
            f"cost sheet mixes currencies {', '.join(sorted(currencies))}", hint="convert to one currency first"
        )
    currency = currencies.pop() if currencies else ""
    return CostSheet(currency, tuple(rows), spent)
