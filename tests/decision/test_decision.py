"""The decision (D1, D2, D4, K6, M1, W4) on hand-written campaign folders: golden notes and the rule."""

from __future__ import annotations

import json

import pytest

from iteralab.cli import main
from iteralab.decision.costing import CPU_ONLY
from iteralab.decision.note import render_decision, write_decision
from iteralab.decision.rule import decide
from iteralab.errors import IteraError
from stats_campaigns import CALENDAR, build_campaign, check_golden, normalised
from protocol_factory import LARGE_BATCH_EXPENSE


def _config(decision, key):
    return next(c for c in decision.configs if c.key == key)


@pytest.fixture
def merged(tmp_path):
    rtx = build_campaign(tmp_path / "rtx4090", hardware="rtx4090")
    b200 = build_campaign(tmp_path / "b200", hardware="b200")
    return rtx, b200


def test_cpu_decision_note_matches_golden(tmp_path):
    folder = build_campaign(tmp_path / "camp")
    decision = decide([folder])
    check_golden("decision_cpu.md", normalised(render_decision(decision), folder))


def test_merged_decision_note_matches_golden(merged):
    decision = decide(list(merged), rental_id="RENT-2026-0042")
    check_golden("decision_merged.md", normalised(render_decision(decision), *merged))


EXPENSES = """
[[expenses]]
name = "storage"
amount = 12.50
currency = "USD"
justification = "object storage for the outputs, one month"
applies_to = "all"
""" + LARGE_BATCH_EXPENSE


def test_decision_note_with_expenses_matches_golden(tmp_path):
    folders = [build_campaign(tmp_path / hw, hardware=hw, extra=EXPENSES) for hw in ("rtx4090", "b200")]
    decision = decide(folders)
    check_golden("decision_expenses.md", normalised(render_decision(decision), *folders))


def test_merging_rtx4090_and_b200_prices_observed_hardware_and_picks_the_cheapest(merged):
    decision = decide(list(merged))
    rtx = _config(decision, "NVIDIA GeForce RTX 4090 / b4")
    b200 = _config(decision, "NVIDIA B200 / b4")
    assert (rtx.pricing.budget.gpu_id, rtx.pricing.budget.package_days) == ("rtx-4090", 7)
    assert str(rtx.pricing.budget.total) == "110.00" and str(b200.pricing.budget.total) == "2071.00"
    assert b200.pricing.budget.cards == 2  # a B200 lot holds two cards, never multiplied in again
    assert rtx.window.label == "planned" and rtx.window.window.span_hours == 96
    assert decision.chosen.hardware == "NVIDIA GeForce RTX 4090"
    assert decision.one_line.startswith("chosen: NVIDIA GeForce RTX 4090 / b8: rtx-4090 7-day package, 1 lot, "
                                        "110.00 USD committed, 110.00 USD per verified corpus (1 accepted)")
    note = render_decision(decision)
    assert "`environment.device_inventory.gpus.0.name`" in note
    assert "the comparison concerns exactly the configurations tested" in note
    # b4 and b8 tie on cost and are not distinguished: said, not hidden
    assert any("NVIDIA GeForce RTX 4090 / b4 (tied on committed cost): not distinguished" in u
               for u in decision.uncertain)


def test_refuses_to_merge_different_protocol_versions(tmp_path, capsys):
    a = build_campaign(tmp_path / "v1")
    b = build_campaign(tmp_path / "v2", version=2)
    with pytest.raises(IteraError) as err:
        decide([a, b])
    message = str(err.value)
    assert "\n" not in message and str(a) in message and str(b) in message
    assert "version 1" in message and "version 2" in message
    assert main(["decide", str(a), str(b)]) == 2
    assert capsys.readouterr().err.startswith(f"Error: cannot merge {a} and {b}: protocol 'test-protocol' version 1")


def test_refuses_to_merge_different_corpora(tmp_path):
    a = build_campaign(tmp_path / "a")
    corpus = [("x1", "another text", "plot", "short"), ("x2", "good one", "fresh", "short")]
    b = build_campaign(tmp_path / "b", corpus=corpus)
    with pytest.raises(IteraError, match="corpus fingerprint"):
        decide([a, b])


def test_unfinished_variant_is_not_feasible_and_never_priced(merged):
    decision = decide(list(merged))
    b16 = _config(decision, "NVIDIA GeForce RTX 4090 / b16")
    assert not b16.feasible and not b16.pricing.priced and not b16.candidate
    assert b16.failures == ("pass r02-p03-b16-a1 failed after 3 of 6 documents: OutOfMemoryError: CUDA out of "
                            "memory (simulated)",)
    assert "never priced" in b16.exclusions[0]


def test_out_of_tolerance_variant_is_marked_and_leaves_the_comparison(merged):
    decision = decide(list(merged))
    int8 = _config(decision, "NVIDIA GeForce RTX 4090 / b8-int8")
    assert int8 in decision.configs and not int8.candidate  # kept in the table
    assert int8.times.median == pytest.approx(2.05)  # the fastest, yet not a cheap success
    assert int8.accepted == 0 and int8.pricing.cost.per_result is None
    assert any("excluded from the equivalent-quality comparison (Q2)" in e for e in int8.exclusions)
    assert "| NVIDIA GeForce RTX 4090 / b8-int8 | yes | MARKED: outside tolerance |" in render_decision(decision)


def test_cpu_only_campaign_is_unpriced_with_its_reason(tmp_path):
    decision = decide([build_campaign(tmp_path / "camp")])
    assert decision.chosen is None  # no rental is chosen …
    assert decision.one_line == f"configuration on CPU only (Test CPU 8-core): b8; rental not priced: {CPU_ONLY}"
    [machine] = decision.machines  # … but the configuration on the machine observed is (issue: both halves)
    assert machine.chosen.variant == "b8" and [c.variant for c in machine.inseparable] == ["b4", "b1"]
    assert "the series does not distinguish it from b4, b1" in machine.line
    assert decision.rental_line == f"not priced: {CPU_ONLY}"
    assert all(c.pricing.reason == CPU_ONLY for c in decision.configs if c.feasible)
    reasons = " ".join(decision.reasons)
    assert "decision-equivalent configurations (all documents, quality within the tolerance, deadline): b1, b4, b8" \
        in reasons
    assert "fastest by median on this CPU: b8 (3.800 s)" in reasons
    assert "the choice of rental cannot be made from CPU runs" in reasons


def test_gpu_not_in_catalog_is_unpriced_naming_the_available_ones(tmp_path):
    decision = decide([build_campaign(tmp_path / "h100", hardware="h100")])
    reason = _config(decision, "b4").pricing.reason
    assert reason.startswith("GPU 'NVIDIA H100 80GB HBM3' observed in the manifest is not in catalog")
    assert reason.endswith("available: b200 (NVIDIA B200), rtx-4090 (NVIDIA GeForce RTX 4090)")
    assert decision.chosen is None


def test_accepted_deliveries_count_once_per_corpus_and_lots_multiply_the_fee(tmp_path):
    decision = decide([build_campaign(tmp_path / "rtx", hardware="rtx4090")], lots=2)
    b4 = _config(decision, "b4")
    assert b4.accepted == 1  # three accepted passes of one corpus are one delivery (K6)
    assert str(b4.pricing.budget.total) == "220.00" and str(b4.pricing.cost.per_result) == "220.00"


def test_deadline_planned_vs_projected(tmp_path):
    tight = CALENDAR.replace('deadline = "2026-03-27T12:00"', 'deadline = "2026-03-27T09:00"')
    folder = build_campaign(tmp_path / "rtx", hardware="rtx4090", calendar=tight)
    planned = decide([folder])
    assert planned.chosen is not None and _config(planned, "b4").window.meets_deadline is True
    projected = decide([folder], project=True)
    b4 = _config(projected, "b4")
    assert b4.window.label == "projected" and b4.window.meets_deadline is False
    assert any(e.startswith("misses the deadline: projected window ends") for e in b4.exclusions)
    assert projected.chosen is None
    assert "the window is projected, not observed" in " ".join(projected.uncertain)


def test_window_longer_than_every_package_is_not_priced(tmp_path):
    long = CALENDAR.replace('end = "2026-03-27T09:00"', 'end = "2026-04-03T09:00"').replace(
        'deadline = "2026-03-27T12:00"', 'deadline = "2026-04-10T12:00"')
    decision = decide([build_campaign(tmp_path / "rtx", hardware="rtx4090", calendar=long)])
    reason = _config(decision, "b4").pricing.reason
    # 2026-03-23 09:00 to 2026-04-03 09:00 in Paris is 263 h, not 264 h: clocks go forward on 29 March
    assert reason.startswith("no listed package of rtx-4090 covers the planned window of 263 h")
    assert "never an automatic extension" in reason


def test_thresholds_tuned_on_final_corpus_is_flagged(tmp_path):
    folder = build_campaign(tmp_path / "camp", extra="thresholds_tuned_on_final = true")
    note = render_decision(decide([folder]))
    assert "needs a new independent evaluation corpus" in note
    assert "does not qualify an interactive service, training to convergence, or another dataset" in note


def test_decide_cli_json_and_out(merged, tmp_path, capsys):
    out = tmp_path / "decision"
    assert main(["decide", *map(str, merged), "--out", str(out), "--rental-id", "R-7"]) == 0
    printed = capsys.readouterr().out
    assert printed.strip().endswith("110.00 USD per verified corpus (1 accepted)")
    assert "rental id: R-7" in (out / "decision.md").read_text(encoding="utf-8")
    data = json.loads((out / "decision.json").read_text(encoding="utf-8"))
    assert data["schema_version"] == 1 and data["chosen"] == "NVIDIA GeForce RTX 4090 / b8"
    assert main(["decide", str(merged[0]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["configurations"][0]["pricing"]["budget"]["total"] == "110.00"
    assert main(["decide", str(merged[0]), "--lots", "0"]) == 2
    assert "Error: --lots must be a whole number of at least 1" in capsys.readouterr().err


def test_written_files_are_deterministic(merged, tmp_path):
    decision = decide(list(merged))
    first = write_decision(decision, tmp_path / "one")
    second = write_decision(decide(list(merged)), tmp_path / "two")
    for key in first:
        assert first[key].read_bytes() == second[key].read_bytes()


def test_a_calendar_without_tasks_is_the_headline_cause(tmp_path):
    from iteralab.decision.rule import NO_TASKS

    decision = decide([build_campaign(tmp_path / "rtx", hardware="rtx4090", calendar="")])
    assert decision.chosen is None
    assert decision.rental_line == (
        "not priced: the protocol's calendar has no tasks, so no window is planned: no package can be chosen and no "
        "deadline checked (add dated [[calendar.tasks]] to a new protocol version and run it)")
    assert decision.one_line == f"configuration on NVIDIA GeForce RTX 4090: b8; rental not priced: {NO_TASKS}"
    assert f"**Configuration on NVIDIA GeForce RTX 4090: b8; rental not priced: {NO_TASKS}.**" in \
        render_decision(decision)
