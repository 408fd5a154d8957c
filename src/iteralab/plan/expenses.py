"""Other project expenses (K5): the protocol's ``[[expenses]]`` lines and its ``[budget]`` rule, locked with it.

A wider project budget records the other expenses that really apply (storage, data transfer, a licence …),
each with its justification, apart from the package fee. A line applies to every configuration
(``applies_to = "all"``) or to named variants only, and then says why it differs (``differs_because``), so
that an item counted for one variant is never an item forgotten for another. One budget holds one currency:
mixed currencies are refused, between the lines and against the catalog that prices the package fee.

By default the expenses are listed apart: the rule ranks the committed package fee and the cost per verified
corpus divides the package fee. ``[budget] include_expenses = true`` declares the other way: the rule ranks the
project total (package fee + the lines that apply) and the cost per verified corpus divides it; the decision
note says which in words.
"""

from __future__ import annotations

import difflib
import re
from decimal import Decimal
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from iteralab.errors import ProtocolError
from iteralab.plan.values import Flag, Number, Strict, Text, Whole, value_kind

__all__ = ["ALL", "DEFAULT_MAX_LOTS", "BudgetRule", "ExpenseFile", "ExpenseLine", "check_currency", "expense_problems",
           "keyed_error"]

#: ``applies_to`` value of a line that applies to every configuration.
ALL = "all"
ONE_CURRENCY = "one project budget holds one currency"


def _applies(value: Any) -> Any:
    if value == ALL:
        return ALL
    if isinstance(value, list):
        if not value:
            raise ValueError('an empty list applies to no variant: write "all" or name the variants')
        for item in value:
            if not isinstance(item, str):
                raise ValueError(f"expected variant names, got {value_kind(item)}")
        if len(set(value)) < len(value):
            raise ValueError("a variant is named twice")
        return tuple(value)
    raise ValueError(f'expected "all" or a list of variant names, got {value_kind(value)}')


Applies = Annotated[Any, BeforeValidator(_applies)]


class ExpenseLine(Strict):
    """One ``[[expenses]]`` line: what was paid for, how much, in which currency, why, and for which variants."""

    name: Text = Field(min_length=1, description="What was paid for.")
    amount: Number = Field(ge=0, description="Amount, 0 or more, to the cent.")
    currency: Text = Field(description="Currency code; one project budget holds one currency, the catalog's.")
    justification: Text = Field(description="Why the expense is needed (required).")
    applies_to: Applies = Field(description="\"all\", or the list of variant names this line applies to.")
    differs_because: Text | None = Field(default=None, description=(
        "Why only the listed variants pay it (required when applies_to lists names)."))

    @field_validator("currency")
    @classmethod
    def _code(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Z]{3}", value):
            raise ValueError(f"{value!r} is not a currency code like USD (ISO 4217, upper case)")
        return value

    @field_validator("justification")
    @classmethod
    def _justified(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("an expense needs a justification: say why the project needs it")
        return value

    @field_validator("amount")
    @classmethod
    def _cents(cls, value: float) -> float:
        if Decimal(str(value)).as_tuple().exponent < -2:  # type: ignore[operator]
            raise ValueError(f"{value} has more than two decimals; amounts are written to the cent")
        return value

    @model_validator(mode="after")
    def _differs(self) -> ExpenseLine:
        if self.applies_to == ALL and self.differs_because is not None:
            raise ValueError('differs_because is for a line that applies to some variants only, not to "all"')
        if self.applies_to != ALL and not (self.differs_because or "").strip():
            raise ValueError("a line that applies to some variants only must say why in differs_because")
        return self

    @property
    def variants(self) -> tuple[str, ...] | None:
        """The variants the line applies to; None for every configuration."""
        return None if self.applies_to == ALL else tuple(self.applies_to)


#: How many lots of one machine's package the rule may plan at most, where the protocol does not say.
DEFAULT_MAX_LOTS = 8


class BudgetRule(Strict):
    """``[budget]``: whether the expenses enter the ranking and the cost per verified corpus (default: no), and the
    most lots of one machine's package the rule may plan for the production job (default 8)."""

    include_expenses: Flag = Field(default=False, description=(
        "true: the ranking and the cost per verified corpus use the project total; false: the package fee alone, "
        "expenses listed apart."))
    max_lots: Whole = Field(default=DEFAULT_MAX_LOTS, ge=1, le=64, description=(
        "The most lots of one observed machine's package the rule plans: it tries 1 to max_lots, each lot a disjoint "
        "shard of the [job] at the rate observed on one lot, and keeps the cheapest that finishes before the "
        "deadline (a plan, never a result); decide --lots fixes the number instead."))


def keyed_error(key: str, problem: str) -> PydanticCustomError:
    """A validation error that names its own key (``expenses[1] (egress).currency``) rather than the table's."""
    return PydanticCustomError("keyed", "{problem}", {"at": key, "problem": problem})


def _at(index: int, line: ExpenseLine, key: str) -> str:
    return f"expenses[{index}] ({line.name}).{key}"


def expense_problems(lines: tuple[ExpenseLine, ...], variants: list[str]) -> list[tuple[str, str]]:
    """(key, problem) for every expense line that names an unknown variant, repeats a name, names every variant
    in a list, or mixes currencies."""
    problems: list[tuple[str, str]] = []
    seen: dict[str, int] = {}
    for i, line in enumerate(lines):
        if line.name in seen:
            problems.append((_at(i, line, "name"), f"{line.name!r} is already expenses[{seen[line.name]}]: one "
                                                    "line per expense"))
        seen.setdefault(line.name, i)
        for name in line.variants or ():
            if name not in variants:
                close = difflib.get_close_matches(name, variants, n=1)
                problems.append((_at(i, line, "applies_to"), f"unknown variant {name!r}"
                                 + (f" (did you mean {close[0]!r}?)" if close else "")
                                 + f"; declared: {', '.join(variants)}"))
        if line.variants is not None and set(line.variants) == set(variants):
            problems.append((_at(i, line, "applies_to"), 'names every declared variant: write applies_to = "all"'))
        if line.currency != lines[0].currency:
            problems.append((_at(i, line, "currency"), f"{line.currency} differs from {lines[0].currency} in "
                                                       f"expenses[0] ({lines[0].name}): {ONE_CURRENCY}"))
    return problems


def check_currency(lines: tuple[ExpenseLine, ...], currency: str, source: str) -> None:
    """Refuse expense lines in another currency than the catalog's, which prices the package fee (one line)."""
    for i, line in enumerate(lines):
        if line.currency != currency:
            raise ProtocolError(
                f"{source}: key '{_at(i, line, 'currency')}': {line.currency} differs from {currency}, the currency "
                f"of the catalog that prices the package fee: {ONE_CURRENCY}",
                hint=f"write every expense in {currency} (convert it and give the rate in its justification)")


class ExpenseFile(Strict):
    """A TOML file of ``[[expenses]]`` lines (and an optional ``[budget]`` rule) for ``iteralab price``."""

    expenses: tuple[ExpenseLine, ...] = Field(min_length=1)
    budget: BudgetRule = BudgetRule()

    @model_validator(mode="after")
    def _one_currency(self) -> ExpenseFile:
        # no variants are declared here: a line's variant names are taken as written (price --variant picks one)
        problems = [(k, p) for k, p in expense_problems(self.expenses, []) if not k.endswith(".applies_to")]
        if problems:
            raise keyed_error(*problems[0])
        return self
