"""The calendar window of a rental (W1–W4): dated tasks, merged on the real calendar, against packages.

A window is made of tasks (setup, checks, warm-up, comparisons, planned retries, evaluation, export,
waiting periods during which the rental is held). Each task is an interval of aware datetimes in a
``zoneinfo`` zone. Overlapping or touching tasks are merged (a union), so no hour is counted twice.

Two durations are reported:

* ``busy_hours``: the length of the union of the tasks;
* ``span_hours``: from the first task's start to the last task's end. A package is a run of consecutive
  days that cannot be paused, so this is what a package must cover; the gaps between tasks are listed.

All durations are real elapsed time, computed in UTC: across a DST change a Monday-09:00-to-Friday-09:00
window lasts 95 h or 97 h, not 96 h. Local times are read with the kit's rules: a time skipped when
clocks go forward is refused; a time that occurs twice when clocks go back takes its first occurrence
(``fold=0``) and the window carries a note saying so.

The arithmetic (elapsed hours, package coverage, extra periods) is the kit calculator's (K8).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Iterable

from iteralab.kit.calcul_forfaits import (
    STANDARD_PACKAGE_DAYS,
    WINDOW_LABELS,
    Catalog,
    ExtraPeriods,
    PackageOption,
    WindowError,
    WindowQuote,
    check_label,
    elapsed,
    format_hours,
    hours_of,
    load_zone,
    localize,
    parse_hours,
    quote_window,
    render_window,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = [
    "STANDARD_PACKAGE_DAYS",
    "WINDOW_LABELS",
    "CalendarWindow",
    "ExtraPeriods",
    "PackageOption",
    "Task",
    "WindowError",
    "WindowQuote",
    "build_window",
    "elapsed",
    "hours_of",
    "load_tasks",
    "local_task",
    "merge_intervals",
    "parse_hours",
    "quote_calendar",
    "quote_from_options",
    "render",
    "quote_window",
    "render_calendar",
    "render_window",
    "window_between",
]

Interval = tuple[datetime, datetime]


@dataclass(frozen=True)
class Task:
    """A named, dated interval; ``start`` and ``end`` are aware datetimes and ``end`` is after ``start``."""

    name: str
    start: datetime
    end: datetime
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise WindowError("a task has no name", hint="name each task (setup, warm-up, export ...)")
        try:
            elapsed(self.start, self.end)
        except WindowError as exc:
            raise WindowError(f"task {self.name!r}: {exc.message}", hint=exc.hint) from None

    @property
    def hours(self) -> Decimal:
        return hours_of(elapsed(self.start, self.end))


def local_task(name: str, start: str | datetime, end: str | datetime, tz: str, where: str = "") -> Task:
    """A task from local wall-clock times in zone ``tz`` (ISO text or naive datetimes)."""
    zone = load_zone(tz)
    prefix = f"{where}task {name!r} "
    begin, note_start = localize(start, zone, prefix + "start")
    finish, note_end = localize(end, zone, prefix + "end")
    return Task(name, begin, finish, tuple(n for n in (note_start, note_end) if n))


def merge_intervals(intervals: Iterable[Interval]) -> list[Interval]:
    """The union of intervals on the real calendar: sorted, disjoint, in UTC.

    Overlapping and touching intervals become one; an interval whose end is not after its start is refused.
    """
    spans = []
    for start, end in intervals:
        elapsed(start, end)
        spans.append((start.astimezone(timezone.utc), end.astimezone(timezone.utc)))
    spans.sort()
    merged: list[Interval] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _total(intervals: Iterable[Interval]) -> timedelta:
    return sum((end - start for start, end in intervals), timedelta(0))


@dataclass(frozen=True)
class CalendarWindow:
    """Tasks merged into busy intervals; ``span_hours`` is what a package must cover."""

    label: str
    tasks: tuple[Task, ...]
    busy: tuple[Interval, ...]
    timezone: str | None = None

    @property
    def start(self) -> datetime:
        return self.busy[0][0]

    @property
    def end(self) -> datetime:
        return self.busy[-1][1]

    @property
    def span_hours(self) -> Decimal:
        return hours_of(self.end - self.start)

    @property
    def busy_hours(self) -> Decimal:
        return hours_of(_total(self.busy))

    @property
    def gaps(self) -> tuple[Interval, ...]:
        return tuple((a[1], b[0]) for a, b in zip(self.busy, self.busy[1:]))

    @property
    def notes(self) -> tuple[str, ...]:
        return tuple(n for t in self.tasks for n in t.notes)

    def _local(self, moment: datetime) -> str:
        zone = load_zone(self.timezone) if self.timezone else timezone.utc
        return moment.astimezone(zone).isoformat()

    def to_dict(self) -> dict:
        def interval(a: datetime, b: datetime) -> dict:
            return {"start": self._local(a), "end": self._local(b), "hours": format_hours(hours_of(b - a))}

        return {
            "label": self.label,
            "timezone": self.timezone,
            "start": self._local(self.start),
            "end": self._local(self.end),
            "span_hours": format_hours(self.span_hours),
            "busy_hours": format_hours(self.busy_hours),
            "tasks": [{"name": t.name, **interval(t.start, t.end)} for t in self.tasks],
            "merged": [interval(a, b) for a, b in self.busy],
            "gaps": [interval(a, b) for a, b in self.gaps],
            "notes": list(self.notes),
        }


def build_window(tasks: Iterable[Task], label: str = "planned", timezone: str | None = None) -> CalendarWindow:
    """Merge tasks (union, never summed twice) into a labelled window."""
    check_label(label)
    listed = tuple(tasks)
    if not listed:
        raise WindowError("a window needs at least one task", hint="add [[task]] entries with name, start, end")
    busy = merge_intervals((t.start, t.end) for t in listed)
    return CalendarWindow(label, listed, tuple(busy), timezone)


def window_between(start: str | datetime, end: str | datetime, tz: str, label: str = "planned") -> CalendarWindow:
    """A window of one interval given as local times in zone ``tz``."""
    return build_window([local_task("window", start, end, tz)], label, tz)


def load_tasks(path: str | Path, default_label: str = "planned") -> CalendarWindow:
    """Read a TOML task file and merge its tasks.

    Format: top-level ``timezone = "Europe/Paris"`` (required) and ``label = "planned"`` (optional:
    planned, projected or observed; ``default_label`` otherwise), then one ``[[task]]`` table per task
    with ``name``, ``start`` and ``end`` as local date-times (TOML local date-times or ISO strings,
    without UTC offsets).
    """
    shown = str(path)
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise WindowError(f"{shown}: task file not found", hint="check the --tasks path") from None
    except OSError as exc:
        raise WindowError(f"{shown}: cannot read the task file ({exc.strerror or exc})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise WindowError(f"{shown}: not valid TOML ({exc})", hint="see the task file format in --help") from None
    except RecursionError:
        raise WindowError(f"{shown}: not valid TOML (nested too deeply)",
                          hint="see the task file format in --help") from None
    tz = data.get("timezone")
    if not isinstance(tz, str):
        raise WindowError(f"{shown}: missing top-level timezone", hint='add e.g. timezone = "Europe/Paris"')
    label = data.get("label", default_label)
    if not isinstance(label, str):
        raise WindowError(f"{shown}: label {label!r} is not text", hint=f"one of {', '.join(WINDOW_LABELS)}")
    entries = data.get("task")
    if not isinstance(entries, list) or not entries:
        raise WindowError(f"{shown}: no [[task]] entries", hint="add [[task]] tables with name, start, end")
    tasks = []
    seen: set[str] = set()
    for number, entry in enumerate(entries, start=1):
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name.strip():
            raise WindowError(f"{shown}: task {number} has no name", hint="give each [[task]] a name")
        if name in seen:
            raise WindowError(f"{shown}: task name {name!r} appears twice", hint="give each task its own name")
        seen.add(name)
        for key in ("start", "end"):
            value = entry.get(key)
            if not isinstance(value, (str, datetime)) or (isinstance(value, date) and not isinstance(value, datetime)):
                raise WindowError(
                    f"{shown}: task {name!r} field {key}: {value!r} is not a local date-time",
                    hint="write it as 2026-03-23T09:00:00",
                )
        tasks.append(local_task(name, entry["start"], entry["end"], tz, where=f"{shown}: "))
    return build_window(tasks, label, tz)


def quote_calendar(window: CalendarWindow, catalog: Catalog, gpu_id: str, lots: int = 1) -> WindowQuote:
    """The window's span against the GPU's 3-, 7- and 30-day packages (and any other listed length)."""
    return quote_window(catalog, gpu_id, window.span_hours, lots, window.label, window.notes)


def render_calendar(window: CalendarWindow) -> list[str]:
    """Lines describing the tasks, the merged busy time and the span a package must cover."""
    d = window.to_dict()
    lines = [
        f"tasks ({d['timezone']}): {len(window.tasks)}, merged into {len(window.busy)} busy "
        f"interval{'s' if len(window.busy) != 1 else ''} of {d['busy_hours']} h in all",
        f"span: {d['start']} to {d['end']} = {d['span_hours']} h (what a package must cover)",
    ]
    lines += [f"  gap: {g['start']} to {g['end']} ({g['hours']} h, the rental is still held)" for g in d["gaps"]]
    return lines


def quote_from_options(
    catalog: Catalog,
    gpu_id: str,
    lots: int = 1,
    label: str = "planned",
    *,
    hours: str | None = None,
    start: str | None = None,
    end: str | None = None,
    tz: str | None = None,
    tasks: str | Path | None = None,
) -> tuple[WindowQuote, CalendarWindow | None]:
    """Quote exactly one window: ``hours``, or ``start``/``end``/``tz``, or a ``tasks`` TOML file.

    Returns the quote and the calendar window it came from (None for a bare number of hours).
    """
    given = [hours is not None, start is not None or end is not None or tz is not None, tasks is not None]
    if sum(given) != 1:
        raise WindowError(
            "give exactly one window: --hours, or --start/--end/--tz, or --tasks",
            hint="e.g. --hours 96, or --start 2026-03-23T09:00 --end 2026-03-27T09:00 --tz Europe/Paris",
        )
    if hours is not None:
        return quote_window(catalog, gpu_id, parse_hours(hours), lots, label), None
    if tasks is not None:
        calendar = load_tasks(tasks, default_label=label)
    else:
        if start is None or end is None or tz is None:
            raise WindowError("--start, --end and --tz go together", hint="give all three")
        calendar = window_between(start, end, tz, label)
    return quote_calendar(calendar, catalog, gpu_id, lots), calendar


def render(quote: WindowQuote, calendar: CalendarWindow | None = None) -> list[str]:
    """The text output of a window quote, with the task summary when the window came from a calendar."""
    lines = render_window(quote)
    if calendar is None:
        return lines
    return lines[:2] + render_calendar(calendar) + lines[2:]
