#!/usr/bin/env python3
"""Package calculator: what a GPU rental package costs, and whether it covers a calendar window.

Run it with nothing but Python >= 3.10, next to ``tarifs-forfaits.csv``::

    python calcul_forfaits.py --gpu rtx-4090 --days 7 --lots 2
    python calcul_forfaits.py --gpu rtx-4090 --days 7 --lots 2 --accepted-results 1
    python calcul_forfaits.py --gpu b200 --hours 96
    python calcul_forfaits.py --gpu b200 --start 2026-03-23T09:00 --end 2026-03-27T09:00 --tz Europe/Paris

Rules it applies (and nothing else):

* Budget = price of one lot x number of lots. A lot may hold several cards; the card count is reported
  but never multiplied in again.
* A package is paid in full however short the use: there is no hourly proration anywhere.
* Cost per verified result = budget / number of accepted results. With 0 accepted results the ratio is
  undefined (said in words) and the committed spend remains.
* A package covers a window when its length (days x 24 h of real elapsed time) is at least the
  window. When no listed package covers it, the cost of consecutive extra periods is shown as the
  user's choice, never as an automatic extension.
* Prices that the catalog does not list are "not in catalog", never invented.

This file is also the implementation that the ``iteralab`` package imports, so the kit and the library
give the same numbers. It uses the standard library only.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import re
import sys
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Iterable, Iterator, NoReturn, Sequence

if sys.version_info < (3, 10):  # pragma: no cover - stated once, before the imports that would fail
    sys.exit("calcul_forfaits.py needs Python 3.10 or newer")

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # noqa: E402

CATALOG_FILENAME = "tarifs-forfaits.csv"
DEFAULT_CATALOG = Path(__file__).resolve().with_name(CATALOG_FILENAME)
COLUMNS = (
    "catalog_version",
    "catalog_date",
    "gpu_id",
    "gpu_name",
    "cards_per_lot",
    "package_days",
    "price_per_lot",
    "currency",
)
#: Optional columns: ``device_match`` (exact runtime names or ``re:`` patterns, ``;``-separated) and
#: ``cpu_cores`` (a CPU server package: its logical cores; matched with the observed CPU model and count).
OPTIONAL_COLUMNS = ("device_match", "cpu_cores")
STANDARD_PACKAGE_DAYS = (3, 7, 30)
WINDOW_LABELS = ("planned", "projected", "observed")
CENT = Decimal("0.01")
HOUR = timedelta(hours=1)
_GPU_ID = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_CURRENCY = re.compile(r"^[A-Z]{3}$")


# --------------------------------------------------------------------------------------------- errors


class KitError(ValueError):
    """A user mistake (bad input, bad catalog): one line, an optional hint, exit code 2."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message

    def one_line(self) -> str:
        """The message and its hint on a single line."""
        return f"{self.message}; hint: {self.hint}" if self.hint else self.message


class CatalogError(KitError):
    """The catalog file is unreadable or malformed, or lacks the requested entry."""


class PricingError(KitError):
    """A budget or per-result figure was asked for with impossible inputs."""


class WindowError(KitError):
    """A calendar window cannot be built (bad time, unknown zone, end not after start)."""


# ------------------------------------------------------------------------------------------- money


def format_amount(amount: Decimal) -> str:
    """Two decimals, half-up, no thousands separator: ``Decimal('20710') -> '20710.00'``."""
    return f"{amount.quantize(CENT, rounding=ROUND_HALF_UP):f}"


def format_hours(hours: Decimal) -> str:
    """``96`` for whole hours, otherwise at most two decimals (``95.5``, ``0.33``)."""
    if hours == hours.to_integral_value():
        return f"{hours.to_integral_value():f}"
    return f"{hours.quantize(CENT, rounding=ROUND_HALF_UP):f}".rstrip("0").rstrip(".")


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


# ----------------------------------------------------------------------------------------- catalog


@dataclass(frozen=True)
class CatalogEntry:
    """One priced package: a lot of ``cards_per_lot`` cards of one GPU for ``package_days`` days."""

    gpu_id: str
    gpu_name: str
    cards_per_lot: int
    package_days: int
    price_per_lot: Decimal
    currency: str
    line: int
    #: Exact device names as the runtime reports them, or ``re:<pattern>`` (full match); empty: the
    #: observed name must equal ``gpu_name`` after whitespace and case normalisation.
    device_match: tuple[str, ...] = ()
    #: For a CPU server package (no GPU): the logical cores it provides; None for a GPU package.
    cpu_cores: int | None = None

    @property
    def package_hours(self) -> int:
        return self.package_days * 24

    @property
    def is_cpu(self) -> bool:
        return self.cpu_cores is not None

    def matches(self, observed_name: str, logical_cores: int | None = None) -> bool:
        """Whether this row prices the device observed: exactly (never by shared words), and for a CPU
        package only with the same number of logical cores (a 2-core measurement never prices 16 cores)."""
        if self.is_cpu and logical_cores != self.cpu_cores:
            return False
        if self.device_match:
            for pattern in self.device_match:
                if pattern.startswith("re:"):
                    if re.fullmatch(pattern[3:], observed_name.strip()):
                        return True
                elif pattern.strip() == observed_name.strip():
                    return True
            return False
        return _normal_name(self.gpu_name) == _normal_name(observed_name)

    def to_dict(self) -> dict:
        return {
            "gpu_id": self.gpu_id,
            "gpu_name": self.gpu_name,
            "cards_per_lot": self.cards_per_lot,
            "package_days": self.package_days,
            "package_hours": self.package_hours,
            "price_per_lot": format_amount(self.price_per_lot),
            "currency": self.currency,
            "device_match": list(self.device_match),
            "cpu_cores": self.cpu_cores,
        }


@dataclass(frozen=True)
class Catalog:
    """A validated catalog snapshot: one version, one date, one currency."""

    path: str
    version: str
    date: date
    currency: str
    entries: tuple[CatalogEntry, ...]

    def gpu_ids(self) -> list[str]:
        return sorted({e.gpu_id for e in self.entries})

    def entries_for(self, gpu_id: str) -> list[CatalogEntry]:
        """The packages of a known GPU, shortest first; an unknown GPU is an error listing the known ones."""
        found = sorted((e for e in self.entries if e.gpu_id == gpu_id), key=lambda e: e.package_days)
        if not found:
            raise CatalogError(
                f"unknown GPU '{gpu_id}' in catalog {self.path}; known GPUs: {', '.join(self.gpu_ids())}",
                hint="pass one of the known GPU ids, or --catalog with your own price list",
            )
        return found

    def entry(self, gpu_id: str, days: int) -> CatalogEntry:
        """The package of ``days`` days for ``gpu_id``, or an error naming the days that are available."""
        entries = self.entries_for(gpu_id)
        for e in entries:
            if e.package_days == days:
                return e
        available = ", ".join(str(e.package_days) for e in entries)
        raise CatalogError(
            f"no {days}-day package for '{gpu_id}' in catalog {self.path}; available days: {available}",
            hint="prices that are not in the catalog are never invented",
        )

    def to_dict(self) -> dict:
        return {"path": self.path, "version": self.version, "date": self.date.isoformat(), "currency": self.currency}


def _normal_name(name: str) -> str:
    return " ".join(name.split()).casefold()


def find_entry(catalog: Catalog, observed_name: str, logical_cores: int | None = None) -> CatalogEntry | None:
    """The catalog device that prices an observed device (see :meth:`CatalogEntry.matches`), or None."""
    for entry in catalog.entries:
        if entry.matches(observed_name, logical_cores):
            return entry
    return None


def _device_match(path: str, line: int, text: str) -> tuple[str, ...]:
    patterns = tuple(p.strip() for p in text.split(";") if p.strip())
    for p in patterns:
        if p.startswith("re:"):
            try:
                re.compile(p[3:])
            except re.error as exc:
                raise _field_error(path, line, "device_match", p, f"is not a regular expression ({exc})",
                                   "write re: followed by a Python regular expression, or an exact name") from None
    return patterns


def _field_error(path: str, line: int, name: str, value: str, problem: str, hint: str) -> CatalogError:
    return CatalogError(f"{path} line {line}, field {name}: {value!r} {problem}", hint=hint)


def _positive_int(path: str, line: int, name: str, text: str) -> int:
    if not text.isascii() or not text.isdigit() or int(text) <= 0:
        raise _field_error(path, line, name, text, "is not a positive whole number", f"write {name} as 1, 2, 3 ...")
    return int(text)


def _price(path: str, line: int, text: str) -> Decimal:
    hint = "write the price of one lot with a dot and at most two decimals, no thousands separator"
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise _field_error(path, line, "price_per_lot", text, "is not a number", hint) from None
    if not value.is_finite():
        raise _field_error(path, line, "price_per_lot", text, "is not a finite number", hint)
    if value < 0:
        raise _field_error(path, line, "price_per_lot", text, "is negative", "a price per lot is 0 or more")
    if value.as_tuple().exponent < -2:  # type: ignore[operator]
        raise _field_error(path, line, "price_per_lot", text, "has more than two decimals", hint)
    return value


def _read_text(path: Path, shown: str) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise CatalogError(f"{shown}: catalog file not found", hint="check the --catalog path") from None
    except UnicodeDecodeError as exc:
        raise CatalogError(f"{shown}: not UTF-8 text ({exc.reason})", hint="save the catalog as UTF-8 CSV") from None
    except OSError as exc:
        raise CatalogError(f"{shown}: cannot read the catalog ({exc.strerror or exc})", hint="check the file") from None


class CsvRecordError(csv.Error):
    """A record the CSV reader cannot parse, with the file line where that record starts."""

    def __init__(self, line: int, error: csv.Error) -> None:
        super().__init__(str(error))
        self.line, self.error = line, error


def numbered_records(reader: Any) -> Iterator[tuple[int, int, list[str]]]:
    """Each record of a ``csv.reader`` with the file lines where it starts and where it ends, as a person counts
    the lines of the file (the first is 1): a record whose quoted text spans several lines is numbered by its
    first. A blank line is a record without fields. Every CSV reader of the kit and of the package numbers its
    records so (one rule for every error line); a parse error is raised as :class:`CsvRecordError`, which
    carries the line where the unreadable record starts."""
    end = 0
    while True:
        start = end + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise CsvRecordError(start, exc) from None
        end = reader.line_num
        yield start, end, row


def load_catalog(path: str | Path | None = None) -> Catalog:
    """Read and validate a catalog CSV (the shipped ``tarifs-forfaits.csv`` when ``path`` is None).

    Every problem raises :class:`CatalogError` with one line naming the file, the line and the field.
    """
    file = DEFAULT_CATALOG if path is None else Path(path)
    shown = CATALOG_FILENAME if path is None else str(path)
    text = _read_text(file, shown)
    if not text.strip():
        raise CatalogError(f"{shown}: empty file", hint=f"the first line names the columns: {','.join(COLUMNS)}")
    records = numbered_records(csv.reader(io.StringIO(text, newline="")))
    try:
        header = [h.strip() for h in next(records)[2]]
        index = {name: header.index(name) for name in COLUMNS if name in header}
        missing = [name for name in COLUMNS if name not in index]
        if missing:
            raise CatalogError(
                f"{shown} line 1: missing column {', '.join(missing)}",
                hint=f"the columns are: {','.join(COLUMNS)}",
            )
        optional = {name: header.index(name) for name in OPTIONAL_COLUMNS if name in header}
        duplicated = sorted({h for h in header if header.count(h) > 1 and h in COLUMNS + OPTIONAL_COLUMNS})
        if duplicated:
            raise CatalogError(f"{shown} line 1: column {', '.join(duplicated)} appears twice", hint="keep one")
        entries: list[CatalogEntry] = []
        first: dict[str, tuple[str, int]] = {}
        names: dict[str, tuple[str, int]] = {}
        keys: dict[tuple[str, int], int] = {}
        for line, _, row in records:  # a record's line: where it starts (a quoted text may span lines)
            if not row or all(not cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                raise CatalogError(
                    f"{shown} line {line}: {len(row)} fields where the header has {len(header)}",
                    hint="one value per column, commas only between values",
                )
            cells = {name: row[i].strip() for name, i in index.items()}
            for name in ("catalog_version", "gpu_id", "gpu_name"):
                if not cells[name]:
                    raise _field_error(shown, line, name, "", "is empty", f"fill in {name}")
            try:
                day = date.fromisoformat(cells["catalog_date"])
            except ValueError:
                raise _field_error(
                    shown, line, "catalog_date", cells["catalog_date"], "is not a date", "write it as YYYY-MM-DD"
                ) from None
            if not _GPU_ID.match(cells["gpu_id"]):
                raise _field_error(
                    shown, line, "gpu_id", cells["gpu_id"], "is not a valid id",
                    "use lower-case letters, digits, '.', '_' or '-' (e.g. rtx-4090)",
                )
            if not _CURRENCY.match(cells["currency"]):
                raise _field_error(
                    shown, line, "currency", cells["currency"], "is not a currency code", "use ISO 4217, e.g. USD"
                )
            for name in ("catalog_version", "catalog_date", "currency"):
                seen = first.setdefault(name, (cells[name], line))
                if seen[0] != cells[name]:
                    raise _field_error(
                        shown, line, name, cells[name], f"differs from {seen[0]!r} on line {seen[1]}",
                        "one catalog file holds one snapshot (one version, one date) in one currency",
                    )
            seen_name = names.setdefault(cells["gpu_id"], (cells["gpu_name"], line))
            if seen_name[0] != cells["gpu_name"]:
                raise _field_error(
                    shown, line, "gpu_name", cells["gpu_name"],
                    f"differs from {seen_name[0]!r} on line {seen_name[1]} for gpu_id {cells['gpu_id']!r}",
                    "one GPU id has one name",
                )
            cards = _positive_int(shown, line, "cards_per_lot", cells["cards_per_lot"])
            days = _positive_int(shown, line, "package_days", cells["package_days"])
            price = _price(shown, line, cells["price_per_lot"])
            key = (cells["gpu_id"], days)
            if key in keys:
                raise CatalogError(
                    f"{shown} line {line}: duplicate entry for gpu_id {key[0]!r} and package_days {days} "
                    f"(first on line {keys[key]})",
                    hint="keep one price per GPU and package length",
                )
            keys[key] = line
            extra = {name: row[i].strip() for name, i in optional.items()}
            cores = (_positive_int(shown, line, "cpu_cores", extra["cpu_cores"])
                     if extra.get("cpu_cores") else None)
            if cores is not None and cards != 1:
                raise _field_error(shown, line, "cards_per_lot", cells["cards_per_lot"],
                                   "must be 1 for a CPU server package (cpu_cores given)", "one server per lot")
            entries.append(
                CatalogEntry(cells["gpu_id"], cells["gpu_name"], cards, days, price, cells["currency"], line,
                             _device_match(shown, line, extra.get("device_match", "")), cores)
            )
    except CsvRecordError as exc:
        raise CatalogError(f"{shown} line {exc.line}: not valid CSV ({exc.error})", hint="check the quotes") from None
    if not entries:
        raise CatalogError(f"{shown}: no price rows after the header", hint="add one row per GPU and package length")
    return Catalog(
        path=shown,
        version=first["catalog_version"][0],
        date=date.fromisoformat(first["catalog_date"][0]),
        currency=first["currency"][0],
        entries=tuple(entries),
    )


# ----------------------------------------------------------------------------------------- pricing


def parse_whole(text: str, option: str, minimum: int) -> int:
    """A whole number typed by a user (``--lots``, ``--days``, ``--accepted-results``), at least ``minimum``."""
    if not re.fullmatch(r"-?[0-9]+", text.strip()) or int(text) < minimum:
        raise PricingError(f"{option} must be a whole number of at least {minimum}, got {text!r}", hint="see --help")
    return int(text)


def check_lots(lots: int) -> int:
    if isinstance(lots, bool) or not isinstance(lots, int) or lots <= 0:
        raise PricingError(f"lots must be a whole number of at least 1, got {lots!r}", hint="e.g. --lots 2")
    return lots


def check_accepted_results(count: int) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise PricingError(
            f"accepted results must be a whole number of 0 or more, got {count!r}",
            hint="count unique, completed and verified corpora (five passes of one corpus are one result)",
        )
    return count


@dataclass(frozen=True)
class PackageBudget:
    """The committed spend for ``lots`` lots of one package: price per lot x lots, paid in full."""

    gpu_id: str
    gpu_name: str
    package_days: int
    lots: int
    cards_per_lot: int
    price_per_lot: Decimal
    currency: str
    #: What one unit of a lot is: a GPU card, or a CPU server (a catalog row with cpu_cores).
    unit: str = "GPU"

    @property
    def cards(self) -> int:
        return self.cards_per_lot * self.lots

    @property
    def total(self) -> Decimal:
        return self.price_per_lot * self.lots

    def to_dict(self) -> dict:
        return {
            "gpu_id": self.gpu_id,
            "gpu_name": self.gpu_name,
            "package_days": self.package_days,
            "package_hours": self.package_days * 24,
            "lots": self.lots,
            "cards_per_lot": self.cards_per_lot,
            "cards": self.cards,
            "price_per_lot": format_amount(self.price_per_lot),
            "total": format_amount(self.total),
            "currency": self.currency,
        }


def package_budget(entry: CatalogEntry, lots: int) -> PackageBudget:
    """Budget of ``lots`` lots of a catalog package (K1, K5): no card multiplication, no proration."""
    check_lots(lots)
    return PackageBudget(
        entry.gpu_id, entry.gpu_name, entry.package_days, lots, entry.cards_per_lot, entry.price_per_lot, entry.currency,
        "CPU server" if entry.is_cpu else "GPU",
    )


@dataclass(frozen=True)
class CostPerResult:
    """Total committed spend divided by accepted results; ``per_result`` is None when undefined (0 results)."""

    total: Decimal
    accepted_results: int
    currency: str
    per_result: Decimal | None

    @property
    def defined(self) -> bool:
        return self.per_result is not None

    def describe(self) -> str:
        if self.per_result is None:
            return (
                f"undefined: 0 accepted results; the committed spend of "
                f"{format_amount(self.total)} {self.currency} remains"
            )
        return (
            f"{format_amount(self.per_result)} {self.currency} "
            f"({format_amount(self.total)} {self.currency} / {_plural(self.accepted_results, 'accepted result')})"
        )

    def to_dict(self) -> dict:
        return {
            "accepted_results": self.accepted_results,
            "total": format_amount(self.total),
            "currency": self.currency,
            "per_result": None if self.per_result is None else format_amount(self.per_result),
            "statement": self.describe(),
        }


def cost_per_result(total: Decimal, accepted_results: int, currency: str) -> CostPerResult:
    """Cost per verified result, rounded half-up to the cent; undefined (None) for 0 accepted results."""
    check_accepted_results(accepted_results)
    if accepted_results == 0:
        return CostPerResult(total, 0, currency, None)
    per = (total / accepted_results).quantize(CENT, rounding=ROUND_HALF_UP)
    return CostPerResult(total, accepted_results, currency, per)


@dataclass(frozen=True)
class PriceQuote:
    """What ``--gpu --days --lots [--accepted-results]`` answers."""

    catalog: Catalog
    budget: PackageBudget
    cost: CostPerResult | None = None

    def to_dict(self) -> dict:
        return {
            "catalog": self.catalog.to_dict(),
            "budget": self.budget.to_dict(),
            "cost_per_result": None if self.cost is None else self.cost.to_dict(),
        }


def quote_price(catalog: Catalog, gpu_id: str, days: int, lots: int, accepted_results: int | None = None) -> PriceQuote:
    budget = package_budget(catalog.entry(gpu_id, days), lots)
    cost = None if accepted_results is None else cost_per_result(budget.total, accepted_results, budget.currency)
    return PriceQuote(catalog, budget, cost)


# ------------------------------------------------------------------------------------ calendar time


def load_zone(name: str) -> ZoneInfo:
    """A ``zoneinfo`` time zone by IANA name, or a WindowError saying it is unknown."""
    try:
        if not name or name != name.strip():
            raise ValueError(name)
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise WindowError(
            f"unknown time zone {name!r}", hint="use an IANA zone name such as Europe/Paris or America/New_York"
        ) from None


def localize(value: str | datetime, zone: ZoneInfo, what: str = "time") -> tuple[datetime, str | None]:
    """Attach ``zone`` to a local wall-clock time given as ISO text or a naive datetime.

    A time that does not exist (skipped when clocks go forward) is refused. A time that occurs twice
    (clocks go back) takes its first occurrence (``fold=0``, the offset before the change); the second
    element of the result is then a note saying so, otherwise None. Times that carry their own UTC
    offset are refused: the zone alone decides the offset.
    """
    if isinstance(value, str):
        try:
            local = datetime.fromisoformat(value.strip())
        except ValueError:
            raise WindowError(
                f"{what} {value!r} is not an ISO date-time", hint="write it as YYYY-MM-DDTHH:MM"
            ) from None
    elif isinstance(value, datetime):
        local = value
    else:
        raise WindowError(f"{what} {value!r} is not a date-time", hint="write it as YYYY-MM-DDTHH:MM")
    if local.tzinfo is not None:
        raise WindowError(
            f"{what} {value!s} carries its own UTC offset",
            hint="give the local wall-clock time and the zone separately",
        )
    first = local.replace(tzinfo=zone, fold=0)
    second = local.replace(tzinfo=zone, fold=1)
    try:
        round_trip = first.astimezone(timezone.utc).astimezone(zone).replace(tzinfo=None)
    except OverflowError:  # year 1 or 9999 pushed past the calendar's range by the zone's offset
        raise WindowError(f"{what} {local.isoformat()} is out of range in {zone.key}",
                          hint="write a date between the years 2 and 9998") from None
    if round_trip != local:
        raise WindowError(
            f"{what} {local.isoformat()} does not exist in {zone.key} (clocks go forward then)",
            hint="pick a time outside the skipped hour",
        )
    note = None
    if first.utcoffset() != second.utcoffset():
        note = (
            f"{what} {local.isoformat()} occurs twice in {zone.key} (clocks go back); "
            f"its first occurrence (UTC{first.strftime('%z')[:3]}:{first.strftime('%z')[3:]}) was used"
        )
    return first, note


def elapsed(start: datetime, end: datetime) -> timedelta:
    """Real elapsed time between two aware datetimes, computed in UTC (DST changes count as they happen).

    Python subtracts two datetimes that share a tzinfo as wall-clock times, so both are converted to UTC
    first. Naive datetimes and an end that is not after the start are refused.
    """
    for what, value in (("start", start), ("end", end)):
        if value.tzinfo is None or value.utcoffset() is None:
            raise WindowError(f"{what} {value.isoformat()} has no time zone", hint="attach a zoneinfo zone")
    span = end.astimezone(timezone.utc) - start.astimezone(timezone.utc)
    if span <= timedelta(0):
        raise WindowError(
            f"end {end.isoformat()} is not after start {start.isoformat()}", hint="swap them or fix the dates"
        )
    return span


def hours_of(span: timedelta) -> Decimal:
    """A duration in hours as a Decimal (exact for whole seconds)."""
    micro = (span.days * 86400 + span.seconds) * 1_000_000 + span.microseconds
    return Decimal(micro) / Decimal(3_600_000_000)


def parse_hours(text: str) -> Decimal:
    """A window length in hours from text: a positive, finite number."""
    try:
        hours = Decimal(text.strip())
    except (InvalidOperation, AttributeError):
        raise WindowError(f"window hours {text!r} is not a number", hint="e.g. --hours 96") from None
    if not hours.is_finite() or hours <= 0:
        raise WindowError(f"window hours {text!r} must be a positive number", hint="e.g. --hours 96")
    return hours


def check_label(label: str) -> str:
    if label not in WINDOW_LABELS:
        raise WindowError(f"window label {label!r} is not one of {', '.join(WINDOW_LABELS)}", hint="e.g. planned")
    return label


# ------------------------------------------------------------------------------------------ coverage


@dataclass(frozen=True)
class PackageOption:
    """One package length for a GPU against a window: does it cover it, and its price if listed."""

    package_days: int
    covers: bool
    lots: int
    price_per_lot: Decimal | None
    currency: str

    @property
    def package_hours(self) -> int:
        return self.package_days * 24

    @property
    def in_catalog(self) -> bool:
        return self.price_per_lot is not None

    @property
    def total(self) -> Decimal | None:
        return None if self.price_per_lot is None else self.price_per_lot * self.lots

    def to_dict(self) -> dict:
        return {
            "package_days": self.package_days,
            "package_hours": self.package_hours,
            "covers": self.covers,
            "in_catalog": self.in_catalog,
            "lots": self.lots,
            "price_per_lot": None if self.price_per_lot is None else format_amount(self.price_per_lot),
            "total": None if self.total is None else format_amount(self.total),
            "currency": self.currency,
        }


@dataclass(frozen=True)
class ExtraPeriods:
    """The user's choice when no listed package covers a window: ``periods`` consecutive packages."""

    package_days: int
    periods: int
    lots: int
    price_per_lot: Decimal
    currency: str

    @property
    def covered_hours(self) -> int:
        return self.package_days * 24 * self.periods

    @property
    def total(self) -> Decimal:
        return self.price_per_lot * self.periods * self.lots

    def to_dict(self) -> dict:
        return {
            "package_days": self.package_days,
            "periods": self.periods,
            "covered_hours": self.covered_hours,
            "lots": self.lots,
            "price_per_lot": format_amount(self.price_per_lot),
            "total": format_amount(self.total),
            "currency": self.currency,
            "choice": "user's choice, not an automatic extension",
        }


def package_options(catalog: Catalog, gpu_id: str, window_hours: Decimal, lots: int = 1) -> tuple[PackageOption, ...]:
    """The 3-, 7- and 30-day packages (plus any other length the catalog lists) against a window."""
    check_lots(lots)
    listed = {e.package_days: e for e in catalog.entries_for(gpu_id)}
    options = []
    for days in sorted(set(STANDARD_PACKAGE_DAYS) | set(listed)):
        entry = listed.get(days)
        options.append(
            PackageOption(
                days, days * 24 >= window_hours, lots, None if entry is None else entry.price_per_lot, catalog.currency
            )
        )
    return tuple(options)


def extra_periods(catalog: Catalog, gpu_id: str, window_hours: Decimal, lots: int = 1) -> tuple[ExtraPeriods, ...]:
    """Consecutive periods of each listed package needed for a window; empty when a listed package covers it."""
    check_lots(lots)
    entries = catalog.entries_for(gpu_id)
    if any(e.package_hours >= window_hours for e in entries):
        return ()
    return tuple(
        ExtraPeriods(e.package_days, math.ceil(window_hours / e.package_hours), lots, e.price_per_lot, catalog.currency)
        for e in entries
    )


@dataclass(frozen=True)
class WindowQuote:
    """A window (labelled planned / projected / observed) against a GPU's packages."""

    catalog: Catalog
    gpu_id: str
    gpu_name: str
    label: str
    hours: Decimal
    options: tuple[PackageOption, ...]
    extra: tuple[ExtraPeriods, ...]
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        return {
            "catalog": self.catalog.to_dict(),
            "gpu_id": self.gpu_id,
            "gpu_name": self.gpu_name,
            "label": self.label,
            "window_hours": format_hours(self.hours),
            "packages": [o.to_dict() for o in self.options],
            "extra_periods": [x.to_dict() for x in self.extra],
            "notes": list(self.notes),
        }


def quote_window(
    catalog: Catalog,
    gpu_id: str,
    window_hours: Decimal,
    lots: int = 1,
    label: str = "planned",
    notes: Iterable[str] = (),
) -> WindowQuote:
    check_label(label)
    if not window_hours > 0:
        raise WindowError(f"window of {window_hours} h is empty", hint="a window lasts more than 0 h")
    name = catalog.entries_for(gpu_id)[0].gpu_name
    return WindowQuote(
        catalog,
        gpu_id,
        name,
        label,
        window_hours,
        package_options(catalog, gpu_id, window_hours, lots),
        extra_periods(catalog, gpu_id, window_hours, lots),
        tuple(notes),
    )


# ------------------------------------------------------------------------------------------- output


def _catalog_line(catalog: Catalog) -> str:
    return f"catalog: version {catalog.version}, dated {catalog.date.isoformat()} ({Path(catalog.path).name})"


def render_price(quote: PriceQuote) -> list[str]:
    b = quote.budget
    lines = [
        _catalog_line(quote.catalog),
        f"gpu: {b.gpu_id} ({b.gpu_name})",
        f"package: {b.package_days} days, {format_amount(b.price_per_lot)} {b.currency} per lot of "
        f"{_plural(b.cards_per_lot, 'card')}, full price however short the use",
        f"lots: {b.lots} ({_plural(b.cards, 'card')})",
        f"package price: {format_amount(b.total)} {b.currency} for {_plural(b.cards, b.unit)} "
        f"({_plural(b.lots, 'lot')} x {format_amount(b.price_per_lot)} {b.currency})",
    ]
    if quote.cost is not None:
        lines.append(f"accepted results: {quote.cost.accepted_results}")
        lines.append(f"cost per verified result: {quote.cost.describe()}")
    return lines


def render_window(quote: WindowQuote, header: bool = True) -> list[str]:
    """The window lines; ``header=False`` leaves out the catalog and GPU lines (already printed)."""
    lines = [_catalog_line(quote.catalog), f"gpu: {quote.gpu_id} ({quote.gpu_name})"] if header else []
    lots = quote.options[0].lots if quote.options else 1
    lines += [
        f"window ({quote.label}): {format_hours(quote.hours)} h",
        f"packages for {_plural(lots, 'lot')}:",
    ]
    for o in quote.options:
        price = "not in catalog" if o.total is None else f"{format_amount(o.total)} {o.currency}"
        covers = "covers the window" if o.covers else "does not cover the window"
        lines.append(f"  {o.package_days} days ({o.package_hours} h): {covers}, {price}")
    if quote.extra:
        lines.append(f"no listed package covers {format_hours(quote.hours)} h: change the schedule, or price extra periods")
        lines.append("extra periods (your choice, never an automatic extension):")
        for x in quote.extra:
            lines.append(
                f"  {x.periods} consecutive {x.package_days}-day packages ({x.covered_hours} h) x "
                f"{_plural(x.lots, 'lot')}: {format_amount(x.total)} {x.currency}"
            )
    lines += [f"note: {n}" for n in quote.notes]
    return lines


# ---------------------------------------------------------------------------------------------- CLI


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise KitError(message, hint="see --help")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="calcul_forfaits.py",
        description="Price GPU rental packages (full price per lot, never hourly) and check which package "
        "length covers a calendar window.",
    )
    p.add_argument("--gpu", required=True, help="GPU id from the catalog, e.g. rtx-4090 or b200")
    p.add_argument("--days", help="package length in days (must be listed for the GPU)")
    p.add_argument("--lots", default="1", help="number of lots rented (default 1)")
    p.add_argument(
        "--accepted-results",
        metavar="N",
        help="unique verified corpora delivered; adds the cost per verified result",
    )
    p.add_argument("--hours", help="window length in real elapsed hours")
    p.add_argument("--start", help="window start, local ISO date-time (with --end and --tz)")
    p.add_argument("--end", help="window end, local ISO date-time")
    p.add_argument("--tz", help="IANA time zone of --start/--end, e.g. Europe/Paris")
    p.add_argument("--label", default="planned", help="planned, projected or observed (default planned)")
    p.add_argument("--catalog", help=f"catalog CSV (default: {CATALOG_FILENAME} next to this script)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    return p


def window_hours_from_args(
    hours: str | None, start: str | None, end: str | None, tz: str | None
) -> tuple[Decimal, tuple[str, ...]] | None:
    """The window of ``--hours`` or ``--start/--end/--tz`` (None when neither is given) and its notes."""
    if hours is not None:
        if start is not None or end is not None or tz is not None:
            raise WindowError("give either --hours or --start/--end/--tz, not both", hint="one window at a time")
        return parse_hours(hours), ()
    if start is None and end is None:
        return None
    if start is None or end is None or tz is None:
        raise WindowError(
            "--start, --end and --tz go together", hint="e.g. --start 2026-03-23T09:00 --end ... --tz UTC"
        )
    zone = load_zone(tz)
    begin, note_start = localize(start, zone, "start")
    finish, note_end = localize(end, zone, "end")
    notes = tuple(n for n in (note_start, note_end) if n)
    return hours_of(elapsed(begin, finish)), notes


def run(argv: Sequence[str] | None = None) -> dict:
    """Parse arguments, compute, and return the result as a JSON-able dict plus its text lines."""
    args = build_parser().parse_args(argv)
    days = None if args.days is None else parse_whole(args.days, "--days", 1)
    lots = parse_whole(args.lots, "--lots", 1)
    accepted = None if args.accepted_results is None else parse_whole(args.accepted_results, "--accepted-results", 0)
    window = window_hours_from_args(args.hours, args.start, args.end, args.tz)
    if days is None and window is None:
        raise KitError(
            "nothing to compute", hint="give --days for a package price, or a window (--hours, or --start/--end/--tz)"
        )
    if accepted is not None and days is None:
        raise KitError("--accepted-results needs --days", hint="the cost per result divides a package price")
    catalog = load_catalog(args.catalog)
    out: dict = {"data": {}, "lines": []}
    if days is not None:
        price = quote_price(catalog, args.gpu, days, lots, accepted)
        out["data"].update(price.to_dict())
        out["lines"] += render_price(price)
    if window is not None:
        win = quote_window(catalog, args.gpu, window[0], lots, args.label, window[1])
        data = win.to_dict()
        out["data"]["catalog"] = data.pop("catalog")
        out["data"]["window"] = data
        out["lines"] += render_window(win, header=days is None)
    out["json"] = args.json
    return out


def main(argv: Sequence[str] | None = None) -> int:
    try:
        result = run(argv)
    except KitError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    if result["json"]:
        print(json.dumps(result["data"], indent=2, sort_keys=True))
    else:
        print("\n".join(result["lines"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
