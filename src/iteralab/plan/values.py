"""Protocol values taken as written (P1): the strict value types and base model every protocol table uses.

"0.8" is not a number, 1 is not true, NaN is not a threshold, and an unknown key is refused. The protocol
(:mod:`iteralab.plan.protocol`) and its expense lines (:mod:`iteralab.plan.expenses`) share these.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict

__all__ = ["Flag", "Number", "Strict", "Text", "Whole", "value_kind"]


def value_kind(value: Any) -> str:
    """What a refused value is, in the words of an error line: ``the string '0.8'``, ``an array`` …"""
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    return {list: "an array", dict: "a table"}.get(type(value), type(value).__name__)


def _number(value: Any) -> Any:
    """A TOML number as written: no string or boolean coerced into one; NaN and infinities refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number, got {value_kind(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value} is not a finite number")
    return value


def _whole(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{value} is not a finite number")
        raise ValueError(f"expected a whole number, got {value_kind(value) if not isinstance(value, float) else value}")
    return value


def _boolean(value: Any) -> Any:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value_kind(value)}")
    return value


def _string(value: Any) -> Any:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value_kind(value)}")
    return value


#: Protocol values are taken as written (P1): "0.8" is not a number, 1 is not true, NaN is not a threshold.
Number = Annotated[float, BeforeValidator(_number)]
Whole = Annotated[int, BeforeValidator(_whole)]
Flag = Annotated[bool, BeforeValidator(_boolean)]
Text = Annotated[str, BeforeValidator(_string)]


class Strict(BaseModel):
    """A protocol table: frozen, and every unknown key refused so that nothing is silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)
