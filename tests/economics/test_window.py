"""The calendar window: real elapsed hours across DST, tasks merged by union, package coverage (W1–W4)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iteralab.economics import window
from iteralab.cli import main
from iteralab.kit.calcul_forfaits import load_catalog

PARIS = "Europe/Paris"
NEW_YORK = "America/New_York"


def span(start: str, end: str, tz: str) -> Decimal:
    return window.window_between(start, end, tz).span_hours


# ----------------------------------------------------------------------------------- elapsed hours (W2)


def test_monday_to_friday_without_dst_change_is_96_hours():
    assert span("2026-03-23T09:00", "2026-03-27T09:00", PARIS) == 96  # Mon -> Fri
    assert span("2026-06-01T09:00", "2026-06-05T09:00", NEW_YORK) == 96


@pytest.mark.parametrize(
    "start,end,tz,hours",
    [
        ("2026-03-26T09:00", "2026-03-30T09:00", PARIS, 95),  # Thu -> Mon over Sun 29 March (clocks forward)
        ("2026-10-22T09:00", "2026-10-26T09:00", PARIS, 97),  # Thu -> Mon over Sun 25 October (clocks back)
        ("2026-03-05T09:00", "2026-03-09T09:00", NEW_YORK, 95),  # over Sun 8 March
        ("2026-10-29T09:00", "2026-11-02T09:00", NEW_YORK, 97),  # over Sun 1 November
        ("2026-03-23T09:00", "2026-03-27T09:00", "Asia/Jerusalem", 95),  # Mon -> Fri over Fri 27 March 02:00
    ],
)
def test_four_calendar_days_across_a_dst_change_are_95_or_97_hours(start, end, tz, hours):
    assert span(start, end, tz) == hours


def test_elapsed_converts_to_utc_rather_than_subtracting_wall_clocks():
    zone = ZoneInfo(PARIS)
    start = datetime(2026, 3, 26, 9, tzinfo=zone)
    end = datetime(2026, 3, 30, 9, tzinfo=zone)
    assert end - start == timedelta(hours=96)  # what plain Python subtraction says (wall clock)
    assert window.elapsed(start, end) == timedelta(hours=95)


def test_non_existent_local_time_is_refused():
    with pytest.raises(window.WindowError) as err:
        window.window_between("2026-03-29T02:30", "2026-03-30T09:00", PARIS)
    assert str(err.value) == (
        "task 'window' start 2026-03-29T02:30:00 does not exist in Europe/Paris (clocks go forward then)"
    )
    with pytest.raises(window.WindowError, match="does not exist in America/New_York"):
        window.window_between("2026-03-01T09:00", "2026-03-08T02:15", NEW_YORK)


def test_ambiguous_local_time_takes_the_first_occurrence_and_says_so():
    win = window.window_between("2026-10-25T00:00", "2026-10-25T02:30", PARIS)
    # 00:00 CEST -> 02:30 CEST (first occurrence, before clocks go back at 03:00 CEST) = 2.5 h
    assert win.span_hours == Decimal("2.5")
    assert win.notes == (
        "task 'window' end 2026-10-25T02:30:00 occurs twice in Europe/Paris (clocks go back); "
        "its first occurrence (UTC+02:00) was used",
    )


@pytest.mark.parametrize(
    "start,end,tz,message",
    [
        ("2026-03-27T09:00", "2026-03-23T09:00", PARIS, "task 'window': end 2026-03-23T09:00:00+01:00 is not after start"),
        ("2026-03-23T09:00", "2026-03-23T09:00", PARIS, "task 'window': end 2026-03-23T09:00:00+01:00 is not after start"),
        ("2026-03-23T09:00", "2026-03-27T09:00", "Europe/Atlantis", "unknown time zone 'Europe/Atlantis'"),
        ("2026-03-23T09:00", "2026-03-27T09:00", "", "unknown time zone ''"),
        ("2026-03-23T09:00", "2026-03-27T09:00", "../etc/passwd", "unknown time zone '../etc/passwd'"),
        ("Monday", "2026-03-27T09:00", PARIS, "task 'window' start 'Monday' is not an ISO date-time"),
    ],
)
def test_bad_windows_are_refused(start, end, tz, message):
    with pytest.raises(window.WindowError) as err:
        window.window_between(start, end, tz)
    assert str(err.value).startswith(message)


def test_naive_datetimes_are_refused_by_elapsed():
    with pytest.raises(window.WindowError, match="has no time zone"):
        window.elapsed(datetime(2026, 1, 1), datetime(2026, 1, 2, tzinfo=timezone.utc))


# ------------------------------------------------------------------------------- merging tasks (W1)


def test_overlapping_tasks_are_merged_not_summed():
    tasks = [
        window.local_task("setup", "2026-03-23T09:00", "2026-03-23T13:00", PARIS),
        window.local_task("checks", "2026-03-23T12:00", "2026-03-23T15:00", PARIS),  # overlaps setup by 1 h
        window.local_task("warm-up", "2026-03-23T15:00", "2026-03-23T16:00", PARIS),  # touches checks
        window.local_task("export", "2026-03-24T09:00", "2026-03-24T10:00", PARIS),
    ]
    win = window.build_window(tasks)
    assert sum(t.hours for t in tasks) == 9
    assert win.busy_hours == 8
    assert len(win.busy) == 2
    assert win.span_hours == 25
    assert [window.hours_of(b - a) for a, b in win.gaps] == [17]


def test_task_file_is_merged_by_union_and_keeps_its_label(tmp_path):
    path = tmp_path / "tasks.toml"
    path.write_text(
        'timezone = "Europe/Paris"\n'
        'label = "projected"\n'
        "[[task]]\nname = \"setup\"\nstart = 2026-03-26T09:00:00\nend = \"2026-03-26T12:00\"\n"
        "[[task]]\nname = \"comparisons\"\nstart = \"2026-03-26T11:00\"\nend = \"2026-03-27T18:00\"\n"
        "[[task]]\nname = \"export\"\nstart = \"2026-03-30T08:00\"\nend = \"2026-03-30T09:00\"\n",
        encoding="utf-8",
    )
    win = window.load_tasks(path)
    assert win.label == "projected"
    assert win.busy_hours == 34  # 09:00 Thu -> 18:00 Fri (33 h) + 1 h on Monday
    assert win.span_hours == 95  # Thu 09:00 -> Mon 09:00 across the spring change
    data = win.to_dict()
    assert data["start"] == "2026-03-26T09:00:00+01:00" and data["end"] == "2026-03-30T09:00:00+02:00"
    assert [t["name"] for t in data["tasks"]] == ["setup", "comparisons", "export"]


@pytest.mark.parametrize(
    "content,message",
    [
        ("[[task]]\nname='a'\nstart='2026-01-01T09:00'\nend='2026-01-01T10:00'\n", "{f}: missing top-level timezone"),
        ("timezone='UTC'\n", "{f}: no [[task]] entries"),
        ("timezone='UTC'\n[[task]]\nstart='2026-01-01T09:00'\nend='2026-01-01T10:00'\n", "{f}: task 1 has no name"),
        (
            "timezone='UTC'\n[[task]]\nname='a'\nstart=2026-01-01\nend='2026-01-01T10:00'\n",
            "{f}: task 'a' field start: datetime.date(2026, 1, 1) is not a local date-time",
        ),
        (
            "timezone='UTC'\n[[task]]\nname='a'\nstart=2026-01-01T09:00:00+01:00\nend='2026-01-02T10:00'\n",
            "{f}: task 'a' start 2026-01-01 09:00:00+01:00 carries its own UTC offset",
        ),
        (
            "timezone='UTC'\nlabel='guessed'\n[[task]]\nname='a'\nstart='2026-01-01T09:00'\nend='2026-01-01T10:00'\n",
            "window label 'guessed' is not one of planned, projected, observed",
        ),
        (
            "timezone='UTC'\n[[task]]\nname='a'\nstart='2026-01-01T09:00'\nend='2026-01-01T08:00'\n",
            "task 'a': end 2026-01-01T08:00:00+00:00 is not after start 2026-01-01T09:00:00+00:00",
        ),
        (
            "timezone='UTC'\n[[task]]\nname='a'\nstart='2026-01-01T09:00'\nend='2026-01-01T10:00'\n"
            "[[task]]\nname='a'\nstart='2026-01-01T09:00'\nend='2026-01-01T10:00'\n",
            "{f}: task name 'a' appears twice",
        ),
        ("timezone = \n", "{f}: not valid TOML"),
    ],
)
def test_bad_task_files_are_refused(content, message, tmp_path):
    path = tmp_path / "tasks.toml"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(window.WindowError) as err:
        window.load_tasks(path)
    assert str(err.value).startswith(message.format(f=path))
    assert "\n" not in str(err.value)


def test_missing_task_file(tmp_path):
    with pytest.raises(window.WindowError, match="task file not found"):
        window.load_tasks(tmp_path / "none.toml")


# ----------------------------------------------------------------------------- interval union (property)

BASE = datetime(2026, 1, 1, tzinfo=timezone.utc)
intervals = st.lists(
    st.tuples(st.integers(0, 2_000), st.integers(1, 300)).map(
        lambda p: (BASE + timedelta(minutes=p[0]), BASE + timedelta(minutes=p[0] + p[1]))
    ),
    min_size=1,
    max_size=25,
)


@given(intervals, st.integers(0, 2_300))
def test_union_is_sorted_disjoint_no_longer_than_the_sum_and_covers_every_point(spans, minute):
    merged = window.merge_intervals(spans)
    for (a1, b1), (a2, b2) in zip(merged, merged[1:]):
        assert b1 < a2  # sorted and disjoint (touching intervals were joined)
    assert all(a < b for a, b in merged)
    total = sum((b - a for a, b in merged), timedelta(0))
    assert total <= sum((b - a for a, b in spans), timedelta(0))
    point = BASE + timedelta(minutes=minute)
    inside_input = any(a <= point <= b for a, b in spans)
    inside_union = any(a <= point <= b for a, b in merged)
    assert inside_input == inside_union
    assert window.merge_intervals(merged) == merged  # idempotent
    assert window.merge_intervals(reversed(spans)) == merged  # order does not matter


def test_union_works_across_zones():
    paris = datetime(2026, 3, 23, 10, tzinfo=ZoneInfo(PARIS))  # 09:00 UTC
    york = datetime(2026, 3, 23, 4, tzinfo=ZoneInfo(NEW_YORK))  # 08:00 UTC
    merged = window.merge_intervals([(paris, paris + timedelta(hours=2)), (york, york + timedelta(hours=2))])
    assert merged == [(datetime(2026, 3, 23, 8, tzinfo=timezone.utc), datetime(2026, 3, 23, 11, tzinfo=timezone.utc))]


# ------------------------------------------------------------------------------- package coverage (W3)


def test_96_hours_exceeds_3_days_and_fits_7_days():
    quote = window.quote_calendar(window.window_between("2026-03-23T09:00", "2026-03-27T09:00", PARIS), load_catalog(), "rtx-4090")
    assert [(o.package_days, o.covers, o.price_per_lot) for o in quote.options] == [
        (3, False, None),
        (7, True, Decimal("110.00")),
        (30, True, None),
    ]
    assert quote.extra == ()
    assert quote.label == "planned"


def test_no_covering_package_prices_extra_periods_as_the_users_choice():
    quote = window.quote_window(load_catalog(), "b200", Decimal(200), lots=2)
    assert not any(o.covers and o.in_catalog for o in quote.options)
    assert len(quote.extra) == 1
    extra = quote.extra[0]
    assert (extra.package_days, extra.periods, extra.covered_hours, extra.total) == (7, 2, 336, Decimal("8284.00"))
    assert extra.to_dict()["choice"] == "user's choice, not an automatic extension"


@pytest.mark.parametrize("label", ["planned", "projected", "observed"])
def test_label_is_carried_through(label):
    quote = window.quote_window(load_catalog(), "b200", Decimal(10), label=label)
    assert quote.to_dict()["label"] == label
    assert f"window ({label}): 10 h" in window.render_window(quote)


# ------------------------------------------------------------------------------------------------ CLI


def test_cli_window_hours(capsys):
    assert main(["window", "--gpu", "rtx-4090", "--hours", "96"]) == 0
    assert capsys.readouterr().out.splitlines()[2:] == [
        "window (planned): 96 h",
        "packages for 1 lot:",
        "  3 days (72 h): does not cover the window, not in catalog",
        "  7 days (168 h): covers the window, 110.00 USD",
        "  30 days (720 h): covers the window, not in catalog",
    ]


def test_cli_window_start_end_across_dst_json(capsys):
    argv = ["window", "--gpu", "b200", "--start", "2026-10-22T09:00", "--end", "2026-10-26T09:00", "--tz", PARIS]
    assert main([*argv, "--label", "observed", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["window_hours"] == "97"
    assert data["label"] == "observed" and data["calendar"]["label"] == "observed"
    assert data["calendar"]["span_hours"] == "97"


def test_cli_window_tasks(tmp_path, capsys):
    path = tmp_path / "tasks.toml"
    path.write_text(
        'timezone = "America/New_York"\n'
        "[[task]]\nname = \"setup\"\nstart = \"2026-03-05T09:00\"\nend = \"2026-03-06T09:00\"\n"
        "[[task]]\nname = \"runs\"\nstart = \"2026-03-05T12:00\"\nend = \"2026-03-09T09:00\"\n",
        encoding="utf-8",
    )
    assert main(["window", "--gpu", "rtx-4090", "--tasks", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2] == "tasks (America/New_York): 2, merged into 1 busy interval of 95 h in all"
    assert "window (planned): 95 h" in out


@pytest.mark.parametrize(
    "argv,lines",
    [
        (
            ["--gpu", "rtx-4090"],
            [
                "Error: give exactly one window: --hours, or --start/--end/--tz, or --tasks",
                "Hint: e.g. --hours 96, or --start 2026-03-23T09:00 --end 2026-03-27T09:00 --tz Europe/Paris",
            ],
        ),
        (
            ["--gpu", "rtx-4090", "--start", "2026-03-23T09:00", "--end", "2026-03-27T09:00", "--tz", "Nowhere/Land"],
            [
                "Error: unknown time zone 'Nowhere/Land'",
                "Hint: use an IANA zone name such as Europe/Paris or America/New_York",
            ],
        ),
        (
            ["--gpu", "rtx-4090", "--start", "2026-03-27T09:00", "--end", "2026-03-23T09:00", "--tz", "UTC"],
            [
                "Error: task 'window': end 2026-03-23T09:00:00+00:00 is not after start 2026-03-27T09:00:00+00:00",
                "Hint: swap them or fix the dates",
            ],
        ),
        (
            ["--gpu", "a100", "--hours", "5"],
            [
                "Error: unknown GPU 'a100' in catalog tarifs-forfaits.csv; known GPUs: b200, rtx-4090",
                "Hint: pass one of the known GPU ids, or --catalog with your own price list",
            ],
        ),
    ],
)
def test_cli_window_errors(argv, lines, capsys):
    assert main(["window", *argv]) == 2
    assert capsys.readouterr().err.splitlines() == lines


def test_cli_window_has_help(capsys):
    assert main(["window", "--help"]) == 0
    assert "3-, 7- and 30-day packages" in capsys.readouterr().out
