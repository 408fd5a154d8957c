"""Statistics per variant (T3–T5) from hand-written campaign folders with fixed times (no timing noise).

``build_campaign`` (tests/support/stats_campaigns.py, shared with the decision, economics and report tests) writes
a complete campaign folder (campaign.json, manifest.json, journal, locked protocol copy, corpus, prediction files,
raw table) without running anything, so the numbers are deterministic.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iteralab.campaign.journal import read_journal
from iteralab.cli import main
from iteralab.errors import IteraError
from iteralab.evidence.stats import NO_TAIL_PERCENTILE, campaign_stats, compare, render_stats
from iteralab.evidence.table import exclude_pass
from stats_campaigns import build_campaign, check_golden, normalised


# ------------------------------------------------------------------------------------------------ tests


def test_stats_text_matches_golden(tmp_path):
    folder = build_campaign(tmp_path / "camp")
    text = render_stats(campaign_stats(folder))
    check_golden("stats_cpu.txt", normalised(text, folder))


def test_every_pass_in_order_median_min_max_and_counts(tmp_path):
    stats = campaign_stats(build_campaign(tmp_path / "camp"))
    b1 = stats.times("b1")
    assert b1.times == (10.0, 10.4, 9.8)  # run order, never sorted, never only the best
    assert (b1.median, b1.minimum, b1.maximum) == (10.0, 9.8, 10.4)
    b16 = stats.times("b16")
    assert (b16.count("ok"), b16.count("failed"), b16.count("aborted")) == (2, 1, 0)
    assert [p.status for p in b16.passes] == ["ok", "failed", "ok"]
    text = render_stats(stats)
    assert NO_TAIL_PERCENTILE in text and "p95" not in text.replace(NO_TAIL_PERCENTILE, "")
    assert "OutOfMemoryError" in text


def test_three_passes_cannot_reach_the_default_level_and_say_how_many_would(tmp_path):
    stats = campaign_stats(build_campaign(tmp_path / "camp"))
    verdicts = {(c.a, c.b): c for c in stats.comparisons}
    far = verdicts[("b1", "b4")]  # every b4 pass faster than every b1 pass, but 3 against 3 passes
    assert far.verdict == "not distinguished" and far.faster == "b4" and far.needed == 4
    assert far.ratio == pytest.approx(2.5) and far.p_value == pytest.approx(0.1) and far.n == (3, 3)
    assert far.text.startswith("not distinguished: 3 against 3 counted passes cannot reach the declared level 0.05 "
                               "two-sided (the smallest p they can give is 0.1); 4 passes a variant can")
    assert "b4 is 2.50x faster than b1 by median (4.000 s vs 10.000 s" in far.text
    assert not verdicts[("b4", "b8")].distinguished
    assert "from 4 passes a variant" in render_stats(stats)


def test_single_pass_cannot_be_distinguished(tmp_path):
    variants = {"b1": {"batch_size": 1, "passes": [{"s": 10.0}]}, "b4": {"batch_size": 4, "passes": [{"s": 1.0}]}}
    series = {"batch": ("batch_size", ["b1", "b4"])}
    stats = campaign_stats(build_campaign(tmp_path / "camp", variants=variants, series=series))
    assert stats.comparisons[0].verdict == "not distinguished"
    assert "only 1 counted pass" in stats.comparisons[0].text


def test_exclusion_is_recorded_with_reason_and_leaves_the_statistics(tmp_path):
    folder = build_campaign(tmp_path / "camp")
    with pytest.raises(IteraError, match="needs a reason"):
        exclude_pass(folder, "r01-p01-b1-a1", "  ")
    with pytest.raises(IteraError, match="no pass 'nope'"):
        exclude_pass(folder, "nope", "incident")
    event = exclude_pass(folder, "r01-p01-b1-a1", "host backup ran during the pass")
    assert event.rule.startswith("a pass is excluded only for a documented external incident")
    assert read_journal(folder / "journal.jsonl").exclusions["r01-p01-b1-a1"]["reason"] == \
        "host backup ran during the pass"
    with pytest.raises(IteraError, match="already excluded"):
        exclude_pass(folder, "r01-p01-b1-a1", "again")
    stats = campaign_stats(folder)
    b1 = stats.times("b1")
    assert b1.times == (10.4, 9.8) and len(b1.excluded) == 1 and len(b1.passes) == 3
    text = render_stats(stats)
    assert "r01-p01-b1-a1 10.000 s [excluded]" in text
    assert "r01-p01-b1-a1 excluded: host backup ran during the pass" in text
    assert "the same rule applies to every variant" in text


def test_quality_marks_out_of_tolerance_variant(tmp_path):
    stats = campaign_stats(build_campaign(tmp_path / "camp"))
    q = stats.quality_of("b8-int8")
    assert q.tolerance_ok is False and not q.equivalent and q.threshold_ok is True
    assert "excluded from the equivalent-quality comparison" in q.mark
    assert stats.quality_of("b4").equivalent and stats.quality_of("b4").meets_quality
    text = render_stats(stats)
    assert "b8-int8 is outside the tolerance: kept in the table, MARKED" in text
    assert "reproduction target declared: acceptable; seeds 0" in text


def test_compare_with_no_successful_pass(tmp_path):
    variants = {"b1": {"batch_size": 1, "passes": [{"status": "failed", "error": "boom", "completed": 0}]},
                "b4": {"batch_size": 4, "passes": [{"s": 1.0}]}}
    stats = campaign_stats(build_campaign(tmp_path / "camp", variants=variants))
    c = compare(stats.times("b1"), stats.times("b4"))
    assert c.verdict == "no comparison" and "b1 has no counted successful pass (1 failed" in c.text


def test_cli_stats_json_and_exclude(tmp_path, capsys, monkeypatch):
    folder = build_campaign(tmp_path / "camp")
    assert main(["stats", str(folder), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema_version"] == 1
    assert [v["variant"] for v in data["variants"]] == ["b1", "b4", "b8", "b16", "b8-int8"]
    assert data["variants"][0]["times"] == [10.0, 10.4, 9.8]
    assert main(["exclude", str(folder), "r01-p01-b1-a1"]) == 2
    assert "Missing option '--reason'" in capsys.readouterr().err
    regenerated = []  # the table's own tests cover its regeneration; here: that exclude asks for it
    monkeypatch.setattr("iteralab.evidence.table.write_raw_table", lambda d: regenerated.append(Path(d)))
    assert main(["exclude", str(folder), "r01-p01-b1-a1", "--reason", "power cut"]) == 0
    assert "excluded r01-p01-b1-a1: power cut" in capsys.readouterr().out
    assert regenerated == [folder]
    assert read_journal(folder / "journal.jsonl").exclusions["r01-p01-b1-a1"]["reason"] == "power cut"
    assert main(["stats", str(folder)]) == 0
    assert "r01-p01-b1-a1 excluded: power cut" in capsys.readouterr().out
