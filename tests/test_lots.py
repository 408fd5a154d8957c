"""Lots as a decision variable, a mix of observed machines, break-even rates (issue 43): hand-worked cases.

Every expected figure below is worked out by hand in the comments, from the calendar, the catalog and the rates;
the planner is :func:`iteralab.economics.lots.plan_shards`, the same for all three questions.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from iteralab.economics.lots import Rate, choose_lots, job_seconds, plan_shards
from iteralab.economics.mix import Machine, break_even, cheapest_mix, split_by_rates
from iteralab.economics.pricing import load_catalog
from iteralab.economics.window import window_between

HEADER = "catalog_version,catalog_date,gpu_id,gpu_name,cards_per_lot,package_days,price_per_lot,currency\n"
ROWS = ["t1,2026-03-01,rtx-4090,NVIDIA GeForce RTX 4090,1,7,110.00,USD",
        "t1,2026-03-01,h100,NVIDIA H100 80GB HBM3,1,7,300.00,USD",
        "t1,2026-03-01,l40s,NVIDIA L40S,1,3,70.00,USD",
        "t1,2026-03-01,l40s,NVIDIA L40S,1,7,150.00,USD",
        "t1,2026-03-01,l40s,NVIDIA L40S,1,30,500.00,USD",
        "t1,2026-03-01,b200,NVIDIA B200,2,7,2071.00,USD"]


@pytest.fixture
def catalog(tmp_path):
    path = tmp_path / "catalog.csv"
    path.write_text(HEADER + "\n".join(ROWS) + "\n", encoding="utf-8")
    return load_catalog(path)


def _base(deadline: str):
    """Planned tasks Monday 2026-03-23 09:00 to Friday 2026-03-27 09:00, Paris (96 h, before the DST change of
    Sunday 29 March), and the deadline as an aware time."""
    base = window_between("2026-03-23T09:00", "2026-03-27T09:00", "Europe/Paris")
    return base, window_between("2026-03-23T09:00", deadline, "Europe/Paris").end


# rtx-4090 as the hand-built campaigns measure it: 6 documents in 4.3 s at the slowest, 2.5 s of start-up
RTX = Rate(6 / 4.3, 2.5)
H100 = Rate(6 / 1.1, 2.5)


def test_two_lots_where_one_misses_the_deadline_and_three_cost_more(catalog):
    base, deadline = _base("2026-03-27T12:00")  # 3 h = 10,800 s after the planned tasks
    # 1 lot: 25,000 / (6 / 4.3) + 2.5 = 17,919.2 s -> 17,920 s > 10,800 s: misses
    # 2 lots: 12,500 / (6 / 4.3) + 2.5 = 8,960.8 s -> 8,961 s: met; 96 h + 2.49 h fits 7 days: 2 x 110 = 220
    # 3 lots: 3 x 110 = 330 > 220
    assert job_seconds(25_000, 1, RTX) == 17_920 and job_seconds(25_000, 2, RTX) == 8_961
    choice = choose_lots(base, deadline, catalog, "rtx-4090", 25_000, RTX, range(1, 9))
    assert choice.chosen is not None and choice.chosen.lots == 2
    assert choice.chosen.total == Decimal("220.00") and choice.chosen.budget.package_days == 7
    lines = choice.lines()
    assert lines[1] == ("1 lot: misses the deadline (the window ends 2026-03-27T13:58:40+01:00, deadline "
                        "2026-03-27T12:00:00+01:00)")
    assert lines[2] == "3 lots: commits more (330.00 vs 220.00 USD)"
    assert "assumed to run as the observed one" in lines[0]
    fixed = choose_lots(base, deadline, catalog, "rtx-4090", 25_000, RTX, [1], fixed=True)
    assert fixed.chosen is None and "no number of lots qualifies (1 tried)" in fixed.lines()[0]


def test_a_mix_of_two_observed_machines_is_cheaper_than_either_alone(catalog):
    base, deadline = _base("2026-03-27T12:00")
    # per lot in 10,800 - 2.5 s: rtx 15,065 documents, h100 58,895 documents; 70,000 documents:
    # rtx alone: 5 lots (4 lots: 17,500 / 1.395 = 12,541 s > 10,800) = 550; h100 alone: 2 lots = 600
    # mix 1 + 1: split 5.4545 : 1.3953 -> h100 55,741, rtx 14,259 documents, both within a lot: 300 + 110 = 410
    rtx = choose_lots(base, deadline, catalog, "rtx-4090", 70_000, RTX, range(1, 9)).chosen
    h100 = choose_lots(base, deadline, catalog, "h100", 70_000, H100, range(1, 9)).chosen
    assert (rtx.lots, rtx.total) == (5, Decimal("550.00")) and (h100.lots, h100.total) == (2, Decimal("600.00"))
    mix = cheapest_mix(base, deadline, catalog, 70_000, [Machine("H100", "h100", H100),
                                                        Machine("RTX 4090", "rtx-4090", RTX)], range(1, 9))
    assert mix is not None and mix.total == Decimal("410.00") and mix.lots == 2
    assert [p.documents for p in mix.parts] == [55_741, 14_259] == split_by_rates(70_000, [6 / 1.1, 6 / 4.3])
    assert all(p.meets_deadline for p in mix.parts)


def test_break_even_rate_worked_by_hand_for_a_seven_day_package_across_a_dst_change(catalog):
    # deadline Monday 30 March 09:00 Paris, after clocks go forward on Sunday 29: from Friday 09:00 CET (08:00 UTC)
    # to Monday 09:00 CEST (07:00 UTC) is 71 h, not 72 h; the 7-day package leaves 168 - 96 = 72 h: 71 h bind.
    # to beat 400.00: 1 lot of 7 days (150) or 2 (300); 3 x 150 = 450 and the 30-day package (500) cost more;
    # the 3-day package (72 h) never covers the 96 h of planned tasks.
    # 2 lots: 500,000 documents per shard in 255,600 s: 1.9562 documents/s per lot, shown rounded up: 1.96
    # (1 lot would need 1,000,000 / 255,600 = 3.91)
    base, deadline = _base("2026-03-30T09:00")
    result = break_even(base, deadline, catalog, "l40s", 1_000_000, Decimal("400.00"), range(1, 9))
    assert result.rate == Decimal("1.96")
    assert result.plan.lots == 2 and result.plan.budget.package_days == 7 and result.plan.total == Decimal("300.00")
    assert plan_shards(base, deadline, catalog, "l40s", 1_000_000, Rate(1.95), 2).meets_deadline is False
    assert plan_shards(base, deadline, catalog, "l40s", 1_000_000, Rate(1.96), 2).meets_deadline is True
    # without the DST hour (a deadline at 10:00) the bar would be 1,000,000 / 2 / 259,200 = 1.929 -> 1.93
    base, later = _base("2026-03-30T10:00")
    assert break_even(base, later, catalog, "l40s", 1_000_000, Decimal("400.00"), range(1, 9)).rate == \
        Decimal("1.93")


def test_a_row_that_can_never_win_says_so(catalog):
    base, deadline = _base("2026-03-30T09:00")
    result = break_even(base, deadline, catalog, "b200", 1_000_000, Decimal("400.00"), range(1, 9))
    assert result.rate is None and result.plan is None
    assert result.reason == ("cannot beat the chosen plan at any rate: its cheapest package already costs "
                             "2071.00 USD, not less than 400.00")


def test_with_nothing_to_beat_the_bar_is_the_cheapest_plan_finishing_before_the_deadline(catalog):
    base, deadline = _base("2026-03-30T09:00")
    # the cheapest plan that can finish: 1 lot of 7 days (150); 1,000,000 documents in 255,600 s: 3.9124 -> 3.92
    result = break_even(base, deadline, catalog, "l40s", 1_000_000, None, range(1, 9))
    assert result.rate == Decimal("3.92") and result.plan.lots == 1 and result.plan.total == Decimal("150.00")
