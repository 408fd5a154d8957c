"""T5 speed comparisons (evidence/speed.py): the exact rank test at the declared level, its interval, the passes a
level needs, and the rule for passes measured under concurrent load (T4), from hand-written times."""

from __future__ import annotations

import math

import pytest

from iteralab.decision.note import render_decision
from iteralab.decision.rule import decide
from iteralab.evidence.datasets import PassTime
from iteralab.evidence.speed import (LOADED_APART, VariantTimes, compare, passes_needed, rank_counts, rank_test,
                                     set_apart, smallest_p, speedup_interval)
from iteralab.evidence.stats import campaign_stats, render_stats
from iteralab.plan.tables import StatsSpec
from stats_campaigns import build_campaign

# The new user's campaign: a shared 2-core machine, 3 passes a variant (issue 42)
B1_FP32 = (106.6, 202.1, 112.1)
B8_FP32 = (34.8, 46.5, 34.3)


def times(name: str, values: tuple[float, ...], *, loaded: tuple[int, ...] = (),
          rule: StatsSpec | None = None) -> VariantTimes:
    passes = tuple(PassTime(f"{name}-p{i}", "ok", s, {}, False, None, None, 10, i in loaded)
                   for i, s in enumerate(values))
    return VariantTimes(name, (), passes, rule=rule or StatsSpec())


def test_rank_distribution_is_exact():
    for n, m in ((3, 3), (5, 5), (4, 7), (1, 6)):
        counts = rank_counts(n, m)
        assert sum(counts) == math.comb(n + m, n) and len(counts) == n * m + 1
        assert counts == counts[::-1] and counts[0] == 1  # symmetric; one complete ordering each way
    assert rank_counts(3, 3) == (1, 1, 2, 3, 3, 3, 3, 2, 1, 1)
    assert smallest_p(3, 3, "one") == pytest.approx(0.05) and smallest_p(3, 3, "two") == pytest.approx(0.10)
    assert smallest_p(5, 5, "one") == pytest.approx(1 / 252)  # 0.004
    assert (passes_needed(0.05, "two"), passes_needed(0.05, "one"), passes_needed(0.01, "two")) == (4, 3, 5)


def test_one_outlier_inside_a_complete_ordering_is_distinguished():
    # b's last pass is slow enough that its spread (15 s) exceeds the 10 s gap between medians, yet every pass of
    # a is faster than every pass of b: a spread-versus-gap rule would call it undecided, the rank test does not
    a = times("a", (10.0, 10.2, 10.1, 10.3, 19.0))
    b = times("b", (20.0, 20.5, 20.2, 20.1, 35.0))
    c = compare(a, b, "series batch")
    assert c.verdict == "distinguished" and c.faster == "a" and c.n == (5, 5)
    assert c.p_value == pytest.approx(2 / 252)
    assert c.ratio == pytest.approx(20.2 / 10.2)
    low, high = c.interval  # type: ignore[misc]
    assert 1 < low < c.ratio < high  # type: ignore[operator]
    assert c.text.startswith("distinguished at the declared level 0.05 two-sided: a is 1.98x faster than b by median")
    assert "speed-up 1.06x to 3.43x at 95 %" in c.text and "5 vs 5 passes" in c.text
    assert c.to_dict()["interval"] == [low, high] and c.to_dict()["level"] == 0.05


def test_overlapping_orderings_are_not_distinguished():
    a = times("a", (10.0, 11.0, 9.5, 12.0, 10.5))
    b = times("b", (10.8, 9.8, 11.5, 10.2, 12.5))
    c = compare(a, b)
    assert c.verdict == "not distinguished" and c.needed is None and c.p_value > 0.05  # type: ignore[operator]
    low, high = c.interval  # type: ignore[misc]
    assert low < 1 < high  # type: ignore[operator]
    assert c.text.startswith("not distinguished at the declared level 0.05 two-sided") and "overlap" in c.text


def test_the_new_users_three_passes_give_what_the_level_allows():
    b1, b8 = times("b1-fp32", B1_FP32), times("b8-fp32", B8_FP32)
    two = compare(b1, b8)  # default: 0.05 two-sided cannot be reached from 3 against 3
    assert two.verdict == "not distinguished" and two.faster == "b8-fp32" and two.needed == 4
    assert "3 against 3 counted passes cannot reach the declared level 0.05 two-sided" in two.text
    assert "4 passes a variant can" in two.text and "b8-fp32 is 3.22x faster than b1-fp32" in two.text
    one = StatsSpec(sided="one")
    c = compare(b1, b8, rule=one)  # 0.05 one-sided is exactly the smallest p 3 against 3 passes can give
    assert c.verdict == "distinguished" and c.p_value == pytest.approx(0.05) and c.interval[1] is None  # type: ignore[index]
    assert c.interval[0] == pytest.approx(106.6 / 46.5)  # type: ignore[index]
    assert "speed-up at least 2.29x at 95 %" in c.text
    # one loaded pass of b1 slower than the rest: the verdict rests on the ordering, not on the spread
    assert rank_test(B1_FP32, B8_FP32, "one") == rank_test((106.6, 1e6, 112.1), B8_FP32, "one")


def test_interval_excludes_one_exactly_when_the_test_distinguishes():
    cases = [((1.0, 1.1, 1.2, 1.3), (1.25, 1.4, 1.5, 1.6)), ((3.0, 3.1, 2.9, 3.3, 3.2), (3.4, 3.5, 3.6, 3.7, 3.05)),
             ((5.0, 5.1, 5.2, 5.3, 5.4, 5.5), (6.0, 6.1, 6.2, 6.3, 6.4, 6.5))]
    for a, b in cases:
        for sided in ("two", "one"):
            p, _ = rank_test(a, b, sided)
            low, high = speedup_interval(b, a, 0.05, sided)
            assert (p <= 0.05) == (low is not None and low > 1), (a, b, sided)


def test_loaded_passes_are_set_apart_by_default_and_the_same_for_every_variant(tmp_path):
    variants = {"b1": {"batch_size": 1, "passes": [{"s": 10.0}, {"s": 30.0, "loaded": True}, {"s": 10.2},
                                                   {"s": 10.1}, {"s": 10.3}]},
                "b4": {"batch_size": 4, "passes": [{"s": 4.0}, {"s": 4.1}, {"s": 12.0, "loaded": True}, {"s": 4.2},
                                                   {"s": 3.9}]}}
    series = {"batch": ("batch_size", ["b1", "b4"])}
    stats = campaign_stats(build_campaign(tmp_path / "apart", variants=variants, series=series))
    b1 = stats.times("b1")
    assert b1.times == (10.0, 10.2, 10.1, 10.3) and len(b1.passes) == 5
    assert [p.exclusion_reason for p in b1.excluded] == [LOADED_APART]
    c = stats.comparisons[0]
    assert c.n == (4, 4) and c.distinguished  # 4 quiet passes a variant reach 0.05 two-sided
    text = render_stats(stats)
    assert "30.000 s [excluded] [concurrent load]" in text and "passes measured under concurrent load set apart" in text
    counted = build_campaign(tmp_path / "counted", variants=variants, series=series,
                             extra='[stats]\nloaded_passes = "counted"\n')
    stats = campaign_stats(counted)
    assert stats.times("b1").times == (10.0, 30.0, 10.2, 10.1, 10.3)
    c = stats.comparisons[0]
    assert c.n == (5, 5) and "2 of these counted passes were measured under concurrent load" in c.text
    assert stats.to_dict()["speed_rule"]["loaded_passes"] == "counted"


def test_a_variant_with_only_loaded_passes_is_not_compared():
    quiet = times("b8", (3.0, 3.1, 3.2))
    loaded = VariantTimes("b1", (), set_apart(times("b1", (9.0, 9.5, 9.2), loaded=(0, 1, 2)).passes, StatsSpec()))
    c = compare(loaded, quiet)
    assert c.verdict == "no comparison" and "3 of them measured under concurrent load and set apart" in c.text


FIVE = {"b1": {"batch_size": 1, "passes": [{"s": 10.0}, {"s": 10.4}, {"s": 9.8}, {"s": 10.1}, {"s": 19.0}]},
        "b4": {"batch_size": 4, "passes": [{"s": 4.0}, {"s": 4.3}, {"s": 3.9}, {"s": 4.1}, {"s": 4.2}]}}


def test_decision_states_the_rule_and_the_established_comparisons(tmp_path):
    decision = decide([build_campaign(tmp_path / "camp", variants=FIVE, series={"batch": ("batch_size",
                                                                                          ["b1", "b4"])})])
    record = decision.to_dict()["speed"]
    assert (record["level"], record["sided"], record["confidence"], record["loaded_passes"]) == \
        (0.05, "two", 0.95, "apart")
    assert record["passes_needed"] == 4 and record["established"] == [f"{record['comparisons'][0]['hardware']}, "
                                                                      "series batch: b1 vs b4"]
    [c] = record["comparisons"]
    assert c["verdict"] == "distinguished" and c["n"] == [5, 5] and c["interval"][0] > 1
    note = render_decision(decision)
    section = note.split("## Speed comparisons (T5)")[1].split("##")[0]
    assert "exact rank test of the counted passes at the declared level 0.05 two-sided" in section
    assert "series batch: b1 vs b4: distinguished at the declared level 0.05 two-sided: b4 is 2.46x faster" in section
    assert "5 vs 5 passes" in section


def test_a_configuration_whose_every_pass_was_loaded_is_left_out_with_what_to_do(tmp_path):
    variants = {"b1": {"batch_size": 1, "passes": [{"s": 10.0, "loaded": True}, {"s": 10.4, "loaded": True},
                                                   {"s": 9.8, "loaded": True}]},
                "b4": {"batch_size": 4, "passes": [{"s": 4.0}, {"s": 4.3}, {"s": 3.9}]}}
    decision = decide([build_campaign(tmp_path / "camp", variants=variants, reference="b4",
                                      series={"batch": ("batch_size", ["b1", "b4"])})])
    b1 = next(c for c in decision.configs if c.variant == "b1")
    assert any(e.startswith("no quiet pass: its 3 finished passes were measured under concurrent load and set "
                            "apart") for e in b1.exclusions)
    assert decision.machines[0].chosen.variant == "b4"  # type: ignore[union-attr]


def test_the_chart_draws_the_interval_against_the_machines_fastest(tmp_path):
    from iteralab.decision.report import speedups

    decision = decide([build_campaign(tmp_path / "camp", variants=FIVE, series={"batch": ("batch_size",
                                                                                          ["b1", "b4"])})])
    pairs = speedups(list(decision.configs))  # what the chart draws: b1 against the machine's fastest, b4
    [(best, c)] = [pair for pair in pairs.values() if pair[1].b == "b1"]
    assert best.variant == "b4" and c.distinguished and c.interval[0] > 1  # type: ignore[index,operator]
