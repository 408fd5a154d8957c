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
from typing import Iterable, Mapping

from iteralab.kit.calcul_forfaits import (
    CATALOG_FILENAME, DEFAULT_CATALOG, Catalog, CatalogEntry, CatalogError, CostPerResult, KitError, PackageBudget,
    PriceQuote, PricingError, cost_per_result, format_amount, load_catalog, package_budget, parse_whole, quote_price,
    render_price)
from iteralab.plan.expenses import ExpenseLine, check_currency
from iteralab.plan.protocol import load_expenses

__all__ = [
    "CATALOG_FILENAME",
    "DEFAULT_CATALOG",
    "Catalog",
    "CatalogEntry",
    "CatalogError",
    "CostPerResult",
    "CostSheet",
    "EXPENSES_APART",
    "EXPENSES_COUNTED",
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
    "expenses_of",
    "format_amount",
    "load_catalog",
    "package_budget",
    "parse_whole",
    "price",
    "price_project",
    "project_quote",
    "render_project",
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

    It applies to every configuration (``applies_to`` None) or to the named variants only, and then
    ``differs_because`` says why. Expenses are reported on their own lines; they enter a configuration's
    ranked amount and its cost per verified result only where the protocol declares it
    (``[budget] include_expenses = true``, see :func:`cost_sheet`).
    """

    name: str
    amount: Decimal
    currency: str
    justification: str
    applies_to: tuple[str, ...] | None = None
    differs_because: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise PricingError("expense without a name", hint="name what was paid for")
        try:
            amount = self.amount if isinstance(self.amount, Decimal) else Decimal(str(self.amount))
        except InvalidOperation:
            raise PricingError(f"expense {self.name!r}: amount {self.amount!r} is not a number") from None
        if not amount.is_finite() or amount < 0:
            raise PricingError(f"expense {self.name!r}: amount {self.amount!r} must be a number of 0 or more")
        object.__setattr__(self, "amount", amount)
        if not isinstance(self.currency, str) or not re.fullmatch(r"[A-Z]{3}", self.currency):
            raise PricingError(f"expense {self.name!r}: currency {self.currency!r} is not a code like USD")
        if not isinstance(self.justification, str) or not self.justification.strip():
            raise PricingError(
                f"expense {self.name!r} has no justification",
                hint="say why the project needs it; an unjustified expense is not recorded",
            )
        if self.applies_to is not None:
            object.__setattr__(self, "applies_to", tuple(self.applies_to))
            if not self.applies_to or not (self.differs_because or "").strip():
                raise PricingError(
                    f"expense {self.name!r} applies to some variants only without saying why",
                    hint="name the variants and say why in differs_because, or make it apply to all",
                )

    @classmethod
    def from_line(cls, line: ExpenseLine) -> Expense:
        """The priced form of a validated ``[[expenses]]`` line (its TOML number read to the cent)."""
        return cls(line.name, Decimal(str(line.amount)), line.currency, line.justification, line.variants,
                   line.differs_because)

    def applies(self, variant: str) -> bool:
        return self.applies_to is None or variant in self.applies_to

    @property
    def scope(self) -> str:
        """'every configuration', or 'b8-int8 only, because …'."""
        if self.applies_to is None:
            return "every configuration"
        return f"{', '.join(self.applies_to)} only, because {self.differs_because}"

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "amount": format_amount(self.amount),
            "currency": self.currency,
            "justification": self.justification,
            "applies_to": "all" if self.applies_to is None else list(self.applies_to),
            "differs_because": self.differs_because,
        }


def expenses_of(lines: Iterable[ExpenseLine]) -> tuple[Expense, ...]:
    return tuple(Expense.from_line(line) for line in lines)


# ------------------------------------------------------------------------------------------ cost sheet

#: How the note and ``price`` say the rule in words (K5).
EXPENSES_APART = ("the other expenses are listed apart: the rule ranks the committed package fee and the cost per "
                  "verified corpus divides the package fee alone (the protocol's [budget] include_expenses is false)")
EXPENSES_COUNTED = ("the protocol counts the other expenses ([budget] include_expenses = true): the rule ranks the "
                    "project total (package fee + the expenses that apply) and the cost per verified corpus divides "
                    "that project total")


@dataclass(frozen=True)
class VariantCost:
    """One configuration's committed package budget, the expenses that apply to it (and those that do not, with
    the reason), its project total and its cost per verified result."""

    variant: str
    budget: PackageBudget
    cost: CostPerResult
    expenses: tuple[Expense, ...] = ()
    not_applicable: tuple[Expense, ...] = ()
    counted: bool = False

    @property
    def expenses_total(self) -> Decimal:
        return sum((e.amount for e in self.expenses), Decimal(0))

    @property
    def project_total(self) -> Decimal:
        return self.budget.total + self.expenses_total

    @property
    def ranked_total(self) -> Decimal:
        """What the rule ranks: the project total where the protocol counts the expenses, else the package fee."""
        return self.project_total if self.counted else self.budget.total

    def lines(self) -> list[str]:
        """Package fee, then each expense line with its justification, then the project total."""
        b, cur = self.budget, self.budget.currency
        out = [f"committed package fee: {format_amount(b.total)} {cur} ({b.gpu_id} {b.package_days}-day package, "
               f"{b.lots} lot{'s' if b.lots != 1 else ''})"]
        out += [f"{e.name}: {format_amount(e.amount)} {e.currency}: {e.justification}"
                + ("" if e.applies_to is None else f" (applies to {e.scope})") for e in self.expenses]
        out += [f"{e.name}: not applicable (applies to {e.scope})" for e in self.not_applicable]
        out.append(f"project total: {format_amount(self.project_total)} {cur} (package fee {format_amount(b.total)} "
                   f"{cur} + other expenses {format_amount(self.expenses_total)} {cur})")
        return out

    def to_dict(self) -> dict:
        return {"variant": self.variant, "budget": self.budget.to_dict(), "cost_per_result": self.cost.to_dict(),
                "expenses": [e.to_dict() for e in self.expenses],
                "not_applicable": [{"name": e.name, "reason": f"applies to {e.scope}"} for e in self.not_applicable],
                "expenses_total": format_amount(self.expenses_total),
                "project_total": format_amount(self.project_total), "expenses_counted": self.counted}


@dataclass(frozen=True)
class CostSheet:
    """Package costs per variant and project expenses, side by side, each line on the variants it applies to."""

    currency: str
    variants: tuple[VariantCost, ...]
    expenses: tuple[Expense, ...]
    counted: bool = False

    @property
    def expenses_total(self) -> Decimal:
        """Every expense line once (what the project pays, whichever variant is rented)."""
        return sum((e.amount for e in self.expenses), Decimal(0))

    def variant(self, name: str) -> VariantCost | None:
        return next((v for v in self.variants if v.variant == name), None)

    def to_dict(self) -> dict:
        return {
            "currency": self.currency,
            "variants": [v.to_dict() for v in self.variants],
            "expenses": [e.to_dict() for e in self.expenses],
            "expenses_total": format_amount(self.expenses_total),
            "expenses_counted": self.counted,
            "rule": EXPENSES_COUNTED if self.counted else EXPENSES_APART,
        }


def cost_sheet(
    variants: Iterable[tuple[str, PackageBudget, int]], expenses: Iterable[Expense] = (), *, counted: bool = False,
    variant_of: Mapping[str, str] | None = None,
) -> CostSheet:
    """Build a cost sheet from ``(name, package budget, accepted results)`` and project expenses.

    All amounts must share one currency; names must be unique. An expense applies to a row when it applies to
    all, or names the row's variant (``variant_of[name]``, else the name itself). A row's cost per result is its
    own package total ÷ its own accepted results, or, when ``counted`` (the protocol's declared switch), its
    project total ÷ its accepted results.
    """
    spent = tuple(expenses)
    rows: list[VariantCost] = []
    currencies: set[str] = {e.currency for e in spent}
    for name, budget, accepted in variants:
        if any(r.variant == name for r in rows):
            raise PricingError(f"variant {name!r} appears twice in the cost sheet", hint="one line per variant")
        variant = (variant_of or {}).get(name, name)
        applies = tuple(e for e in spent if e.applies(variant))
        others = tuple(e for e in spent if not e.applies(variant))
        total = budget.total + sum((e.amount for e in applies), Decimal(0)) if counted else budget.total
        rows.append(VariantCost(name, budget, cost_per_result(total, accepted, budget.currency), applies, others,
                                counted))
        currencies.add(budget.currency)
    if len(currencies) > 1:
        raise PricingError(
            f"cost sheet mixes currencies {', '.join(sorted(currencies))}", hint="convert to one currency first"
        )
    currency = currencies.pop() if currencies else ""
    return CostSheet(currency, tuple(rows), spent, counted)


def price_project(quote: PriceQuote, expenses: Iterable[Expense], *, counted: bool = False,
                  variant: str | None = None) -> VariantCost:
    """The kit-style calculation with the project's other expenses: the quote's package fee, the lines that apply
    to ``variant`` (without one, only the lines that apply to every configuration), and the project total."""
    accepted = quote.cost.accepted_results if quote.cost is not None else 0
    sheet = cost_sheet([(variant or "", quote.budget, accepted)], expenses, counted=counted)
    return sheet.variants[0]


def render_project(quote: PriceQuote, row: VariantCost) -> list[str]:
    """``render_price``'s lines, then each expense line with its justification, then the project total, then the
    cost per verified result (of the package fee, or of the project total where the expenses are counted)."""
    cur = row.budget.currency
    lines = render_price(PriceQuote(quote.catalog, quote.budget, None))
    lines.append("other expenses (K5): " + ("counted in the cost per verified result ([budget] include_expenses = "
                                            "true)" if row.counted else "listed apart from the package fee"))
    lines += [f"  {line}" for line in row.lines()[1:-1]]
    if not row.variant and row.not_applicable:
        lines.append("  (lines for some variants only are counted with --variant NAME)")
    lines.append(row.lines()[-1])
    if quote.cost is not None:
        lines.append(f"accepted results: {row.cost.accepted_results}")
        what = ("of the project total" if row.counted else
                f"of the package fee alone (project total {format_amount(row.project_total)} {cur})")
        lines.append(f"cost per verified result: {row.cost.describe()}, {what}")
    return lines


def project_quote(quote: PriceQuote, path: str | Path, variant: str | None = None) -> VariantCost:
    """``price --expenses FILE``: read the file (the protocol's own model), refuse another currency than the
    catalog's in one line naming the key, and price the project."""

    spec = load_expenses(path)
    check_currency(spec.expenses, quote.catalog.currency, str(path))
    return price_project(quote, expenses_of(spec.expenses), counted=spec.budget.include_expenses, variant=variant)
