"""Subgroup quality (Q1, Q2): what a subgroup's metric averages over, which gating group failed and by how much,
and a class no variant ever finds.

The unit tests call the metric on class codes; the others use the golden raw-table campaign
(``test_golden_raw_table.build_folder``: prediction files judged by the real code, nothing run), varied through
its module constants.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import golden_table as golden
from iteralab.campaign.kinds.classification.verdict import metric_of_codes, subgroup_metrics
from iteralab.campaign.kinds.expected import Expected
from iteralab.decision.note import decision_json, render_decision
from iteralab.decision.report import render_report
from iteralab.decision.rule import decide
from iteralab.evidence.stats import campaign_stats, render_stats
from iteralab.evidence.table import COLUMNS, build_rows, render_csv
from iteralab.plan.protocol import parse_protocol

CLASSES = ("plot", "fresh", "rotten")
#: a short stratum without plot summaries (as the demo's), and a long one with every class
IDS = ["s0", "s1", "s2", "s3", "l0", "l1", "l2"]
LABELS = dict(zip(IDS, ["fresh", "fresh", "rotten", "rotten", "plot", "fresh", "rotten"]))
STRATA = {i: "short" if i.startswith("s") else "long" for i in IDS}


def _protocol(metric: str = "macro_f1"):
    text = golden.PROTOCOL.replace('name = "macro_f1"', f'name = "{metric}"')
    return parse_protocol(text)


def _predicted(labels: list[str | None]) -> np.ndarray:
    return np.asarray([CLASSES.index(x) if x else -1 for x in labels], dtype=np.int8)


def _subgroups(metric: str, predicted: list[str | None]) -> tuple[dict, dict]:
    expected = Expected.of(IDS, LABELS, STRATA, CLASSES)
    counted: dict[str, list[str]] = {}
    values = subgroup_metrics(_protocol(metric), expected, np.ones(len(IDS), dtype=bool), _predicted(predicted),
                              counted)
    return values, counted


# s1 (fresh) has no valid label (the no-class code), l1 (fresh) is predicted plot
PREDICTED = ["fresh", None, "rotten", "rotten", "plot", "plot", "rotten"]


def test_a_stratum_macro_f1_averages_the_classes_it_has_and_never_the_no_class_code():
    values, counted = _subgroups("macro_f1", PREDICTED)
    # short: fresh F1 2/3 (precision 1, recall 1/2), rotten F1 1; plot is in neither its references nor its
    # predictions, and the missing label of s1 is no class: (2/3 + 1) / 2, where the old figure was / 3
    assert values["length:short"] == pytest.approx(5 / 6)
    assert counted == {"length:long": ["plot", "fresh", "rotten"], "length:short": ["fresh", "rotten"]}
    truth = np.asarray([CLASSES.index(LABELS[i]) for i in IDS[:4]], dtype=np.int8)
    assert metric_of_codes("macro_f1", truth, _predicted(PREDICTED[:4]), 3) == pytest.approx(5 / 9)  # the old one
    # a class present only among the predictions is counted (its F1 is 0): scikit-learn's default label set
    values, counted = _subgroups("macro_f1", ["plot", "fresh", "rotten", "rotten", "plot", "fresh", "rotten"])
    assert counted["length:short"] == ["plot", "fresh", "rotten"]
    assert values["length:short"] == pytest.approx((0 + 2 / 3 + 1) / 3)


@pytest.mark.parametrize("metric", ["weighted_f1", "balanced_accuracy"])
def test_weighted_f1_and_balanced_accuracy_keep_their_values(metric):
    """A class with no reference has no weight in weighted F1, and balanced accuracy already averaged the
    recalls of the classes present in the references: both values are the ones of the old label set."""
    values, counted = _subgroups(metric, PREDICTED)
    truth = np.asarray([CLASSES.index(LABELS[i]) for i in IDS[:4]], dtype=np.int8)
    assert values["length:short"] == pytest.approx(metric_of_codes(metric, truth, _predicted(PREDICTED[:4]), 3))
    assert values["length:short"] == pytest.approx(5 / 6 if metric == "weighted_f1" else 3 / 4)
    assert counted["length:short"] == ["fresh", "rotten"]


def test_the_whole_corpus_metric_still_averages_every_class():
    truth = np.asarray([CLASSES.index(LABELS[i]) for i in IDS[:4]], dtype=np.int8)  # no plot in this corpus
    value = metric_of_codes("macro_f1", truth, _predicted(PREDICTED[:4]), 3)
    assert value == pytest.approx(5 / 9)


# --------------------------------------------------------------------------- the golden campaign, varied


def _without_short_plot(monkeypatch):
    """d00 becomes a fresh text: the short stratum holds no plot summary."""
    corpus = [("d00", "a story about a bank", "fresh", "short"), *golden.CORPUS[1:]]
    monkeypatch.setattr(golden, "CORPUS", corpus)


def test_the_raw_table_and_stats_say_which_classes_a_subgroup_averaged(tmp_path, monkeypatch):
    _without_short_plot(monkeypatch)
    folder = golden.build_folder(tmp_path / "camp")
    rows = build_rows(folder)
    note = ('subgroup classes averaged (a class absent from the subgroup is left out of its macro_f1): '
            '{"length:short": ["fresh", "rotten"]}')
    assert note in rows[0]["notes"]
    assert rows[0]["subgroup_metrics"]["length:short"] == 1.0
    assert all(note in r["notes"] for r in rows if r["status"] == "ok")
    # the pass that failed after 4 inputs covered one long text (a plot summary): its long stratum's macro-F1
    # averages that one class, no longer two absent classes as zeros (1/3 before)
    failed = next(r for r in rows if r["pass_id"] == "r02-p02-b4-a1")
    assert failed["subgroup_metrics"]["length:long"] == 1.0
    assert ('{"length:long": ["plot"], "length:short": ["fresh", "rotten"]}' in failed["notes"])
    (folder / "raw_table.csv").write_text(render_csv(rows, COLUMNS), encoding="utf-8")
    text = render_stats(campaign_stats(folder))
    assert ("    subgroup classes averaged (a class absent from a subgroup is left out of its metric; the groups not "
            "listed averaged every class): length:short fresh, rotten\n") in text


def test_no_classes_are_listed_when_every_stratum_has_every_class(tmp_path):
    rows = build_rows(golden.build_folder(tmp_path / "camp"))
    assert not any("subgroup classes averaged" in r["notes"] for r in rows if r["status"] == "ok")


def test_the_failing_gating_subgroup_is_named_with_its_value_bound_and_reference(tmp_path):
    folder = golden.build_folder(tmp_path / "camp")
    stats = campaign_stats(folder)
    line = ("length:long macro_f1 0.5556 in 1 of 3 passes: below 0.9500 (reference b4 1.0000 - tolerance 0.05)")
    assert f"    GATING SUBGROUP FAILS: {line}\n" in render_stats(stats)
    decision = decide([folder])
    note = render_decision(decision)
    assert f"gating subgroup {line}" in note
    assert "a gating subgroup misses its threshold or tolerance" not in note
    data = json.loads(decision_json(decision))
    int8 = next(c for c in data["configurations"] if c["variant"] == "b4-int8")
    assert int8["quality"]["subgroup_failures"] == [
        {"subgroup": "length:long", "metric": "macro_f1", "value": pytest.approx(5 / 9), "reference": 1.0,
         "threshold": None, "tolerance": 0.05, "bound": 0.95, "has_reference": True,
         "pass_id": "r01-p02-b4-int8-a1", "below_threshold": False, "outside_tolerance": True}]
    assert f"gating subgroup {line}" in int8["exclusions"]
    from iteralab.decision.report import subgroup_points

    points = subgroup_points(decision)
    assert sorted(points) == ["length:long", "length:short"]
    assert [(e["config"], e["failed"], e["reference"], e["bound"]) for e in points["length:long"]] == [
        ("b4", False, 1.0, 0.95), ("b4-int8", True, 1.0, 0.95)]
    html = render_report(decision)
    assert "each gating subgroup per configuration against its reference and tolerance" in html
    assert f"b4-int8: gating subgroup {line}" in html


def test_a_class_no_variant_finds_is_said(tmp_path, monkeypatch):
    """plot is never predicted, in the reference either: its gate compares 0 with 0 and passes."""
    monkeypatch.setattr(golden, "PROTOCOL", golden.PROTOCOL.replace("gating = false", "gating = true"))
    perfect, shifted = golden.perfect_predictions, golden.shifted_predictions
    monkeypatch.setattr(golden, "perfect_predictions", lambda: [(i, "fresh", golden.label_probs("fresh")) if label == "plot"
                                                     else (i, label, p) for i, label, p in perfect()])
    monkeypatch.setattr(golden, "shifted_predictions", lambda: [(i, "fresh", [0.1, 0.79, 0.11]) if label == "plot"
                                                     else (i, label, p) for i, label, p in shifted()])
    folder = golden.build_folder(tmp_path / "camp")
    stats = campaign_stats(folder)
    assert stats.quality_of("b4").subgroups["class:plot"] == (0.0, 0.0)
    text = render_stats(stats)
    assert ("  WARNING: class plot: recall 0 in every variant, the reference included: no variant finds this "
            "class, so its gate compares 0 with 0\n") in text
    assert "class fresh: recall 0" not in text
    decision = decide([folder])
    assert "- class plot: recall 0 in every variant, the reference included\n" in render_decision(decision)
    assert "class plot: recall 0 in every variant, the reference included" in json.loads(
        decision_json(decision))["uncertain"]
