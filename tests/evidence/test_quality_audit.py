"""The quality intervals in a real campaign folder: written beside ``metric_delta`` in the raw table, gating under
``metric.confidence``, reported by the statistics, and recomputed by ``verify`` bit for bit (a tampered bound is
named)."""

import csv
import shutil
from pathlib import Path

import pytest

from campaign_factory import callable_campaign
from iteralab.campaign.folder import read_raw_rows
from iteralab.campaign.kinds.interval import NOT_ESTABLISHED
from iteralab.evidence.bundle import seal
from iteralab.evidence.run import run_campaign
from iteralab.evidence.stats import campaign_stats, render_stats
from iteralab.evidence.verify import audit_campaign

SUBGROUPS = '[[subgroups]]\nname = "length"\nby = "stratum"\ngating = true\ntolerance = 1.0\n'
COUNTED = '[stats]\nloaded_passes = "counted"\n'


def _campaign(root: Path, confidence: str) -> Path:
    protocol = callable_campaign(root, fn="fake_models:batch_shifted_classifier", passes=1, threshold=0.0,
                                 tolerance=0.4, subgroups=confidence + SUBGROUPS, extra=COUNTED)
    run_campaign(protocol, root / "campaign")
    return root / "campaign"


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("quality")
    (root / "point").mkdir()
    (root / "declared").mkdir()
    return {"point": _campaign(root / "point", ""), "declared": _campaign(root / "declared", "confidence = 0.95\n")}


def test_intervals_are_in_the_table_and_the_gate_follows_the_declared_rule(folders):
    point = {r.variant: r for r in read_raw_rows(folders["point"] / "raw_table.csv")}
    declared = {r.variant: r for r in read_raw_rows(folders["declared"] / "raw_table.csv")}
    b1 = point["b1"]
    assert b1.delta_low < b1.metric_delta < b1.delta_high and b1.delta_units == b1.expected_ids
    assert point["b4"].delta_low == point["b4"].delta_high == 0.0  # the reference pass against itself
    assert set(b1.subgroup_deltas) == set(b1.subgroup_metrics)
    # the same files, the same seed (the protocols differ by the confidence line: the bounds may differ)
    assert b1.metric_delta == declared["b1"].metric_delta
    # point estimate within the 0.4 tolerance; the small corpus cannot establish it at 95 %
    assert b1.tolerance_ok is True and b1.corpus_accepted is True
    assert declared["b1"].tolerance_ok is False and declared["b1"].corpus_accepted is False
    assert "within tolerance not established at 95%" in declared["b1"].notes
    st = campaign_stats(folders["declared"])
    q = next(q for q in st.quality if q.variant == "b1")
    assert q.interval.standing == NOT_ESTABLISHED and q.interval.units == b1.expected_ids
    assert "quality difference with the reference: delta" in render_stats(st)


def test_verify_recomputes_the_bounds_and_names_a_tampered_one(folders, tmp_path):
    campaign = tmp_path / "campaign"
    shutil.copytree(folders["declared"], campaign)
    seal(campaign)
    assert audit_campaign(campaign).ok
    path = campaign / "raw_table.csv"
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    column = rows[0].index("delta_high")
    line = next(i for i, r in enumerate(rows) if i and r[rows[0].index("variant")] == "b1")
    rows[line][column] = f"{float(rows[line][column]) + 0.001:.6f}"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh, lineterminator="\n").writerows(rows)
    seal(campaign)
    differences = audit_campaign(campaign).differences
    assert any("column 'delta_high' stored" in d for d in differences), differences
