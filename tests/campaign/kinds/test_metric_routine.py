"""The user's own evaluation routine (``[metric] routine``) for a classification protocol.

The verdict tests use the golden raw-table campaign (``test_golden_raw_table.build_folder``: prediction files with
a wrong label, a duplicate, missing ids …, judged by the real code, nothing run), its metric replaced by a routine
of ``tests/support/metric_routines.py`` carried into the folder as ``run`` carries it. The lock, verify and rerun tests
run small callable campaigns in process.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

import golden_table as golden
from campaign_factory import callable_campaign
from iteralab.cli import main
from iteralab.common.files import sha256_file
from iteralab.errors import ProtocolError
from iteralab.evidence.bundle import seal
from iteralab.evidence.rerun import rerun
from iteralab.evidence.run import run_campaign
from iteralab.evidence.stats import campaign_stats, render_stats
from iteralab.evidence.table import build_rows
from iteralab.evidence.verify import audit_campaign
from iteralab.lock.inputs import check_inputs, lock
from iteralab.lock.usercode import ROUTINE_DIR
from iteralab.plan.protocol import parse_protocol
from metric_routines import CALLS_VARIABLE

ROUTINES = (Path(__file__).resolve().parents[2] / "support") / "metric_routines.py"
BUILT_IN = 'name = "macro_f1"\nthreshold = 0.5\ntolerance = 0.05'
#: the golden campaign's passes whose own prediction file has a wrong label (d03) and the passes without one
WRONG, RIGHT = "r01-p02-b4-int8-a1", "r03-p02-b4-int8-a1"


def _golden(tmp_path: Path, monkeypatch, metric: str | None = None) -> dict[str, dict]:
    """The golden campaign's rows, its metric lines replaced by ``metric`` (carrying the routine as run does)."""
    if metric is not None:
        monkeypatch.setattr(golden, "PROTOCOL", golden.PROTOCOL.replace(BUILT_IN, metric))
    folder = golden.build_folder(tmp_path / ("routine" if metric else "built-in"))
    if metric is not None:
        ref = parse_protocol(golden.PROTOCOL).metric.routine
        copy = folder / ROUTINE_DIR / ROUTINES.name
        copy.parent.mkdir(parents=True)
        shutil.copyfile(ROUTINES, copy)
        campaign = json.loads((folder / "campaign.json").read_text(encoding="utf-8"))
        campaign["routine"] = {"ref": ref, "file": f"{ROUTINE_DIR}/{ROUTINES.name}", "sha256": sha256_file(copy)}
        (folder / "campaign.json").write_text(json.dumps(campaign), encoding="utf-8")
    return {row["pass_id"]: row for row in build_rows(folder)}


def test_a_numpy_macro_f1_routine_gives_the_built_in_verdicts_across_passes_and_subgroups(tmp_path, monkeypatch):
    built_in = _golden(tmp_path, monkeypatch)
    mine = _golden(tmp_path, monkeypatch, 'routine = "metric_routines:macro_f1"\nthreshold = 0.5\ntolerance = 0.05')
    assert mine.keys() == built_in.keys()
    evaluated = [p for p, row in built_in.items() if row.get("metric") is not None]
    assert len(evaluated) >= 6  # the reference, a wrong label, a duplicate, 4 of 6 ids, the later passes
    values = {round(v, 6) for p in evaluated for v in [built_in[p]["metric"], *built_in[p]["subgroup_metrics"].values()]
              if v is not None}
    assert len(values) >= 3  # values that differ between passes and groups
    for pass_id in evaluated:
        a, b = built_in[pass_id], mine[pass_id]
        assert b["metric_name"] == "metric_routines:macro_f1" and a["metric_name"] == "macro_f1"
        assert b["metric"] == pytest.approx(a["metric"], abs=1e-9)
        assert b["metric_ref"] == pytest.approx(a["metric_ref"], abs=1e-9)
        stratum = {k: v for k, v in a["subgroup_metrics"].items() if k.startswith("length:")}
        assert len(stratum) == 2 and {k: b["subgroup_metrics"][k] for k in stratum} == pytest.approx(stratum,
                                                                                                   abs=1e-9)
        for key in ("threshold_ok", "tolerance_ok", "subgroups_ok", "corpus_accepted"):
            assert b[key] == a[key], (pass_id, key)
    assert mine[WRONG]["corpus_accepted"] is False and mine[RIGHT]["corpus_accepted"] is True


@pytest.mark.parametrize("threshold, above", [(3.0, False), (1.0, True)])
def test_lower_is_better_makes_the_threshold_a_maximum_and_the_tolerance_an_upward_bound(tmp_path, monkeypatch,
                                                                                         threshold, above):
    rows = _golden(tmp_path, monkeypatch, f'routine = "metric_routines:cost"\nhigher_is_better = false\n'
                                          f'threshold = {threshold}\ntolerance = 0.5')
    wrong, right = rows[WRONG], rows[RIGHT]
    # one wrong label of six documents: 10 / 6 per document, risen from the reference's 0 by more than 0.5
    assert wrong["metric"] == pytest.approx(10 / 6) and wrong["metric_ref"] == 0.0
    assert wrong["metric_delta"] == pytest.approx(10 / 6)
    assert wrong["tolerance_ok"] is False and wrong["threshold_ok"] is (not above)
    assert wrong["subgroup_metrics"]["length:long"] == pytest.approx(10 / 3)
    assert "outside tolerance" in wrong["notes"] and "subgroup length:long" in wrong["notes"]
    assert ("above threshold" in wrong["notes"]) is above
    assert wrong["corpus_accepted"] is False
    assert right["metric"] == 0.0 and right["corpus_accepted"] is True
    lines = render_stats(campaign_stats(tmp_path / "routine"))
    assert f"Quality: metric_routines:cost <= {threshold:g}, within 0.5 of reference b4" in lines
    assert "above 0.5000 (reference b4 0.0000 + tolerance 0.5)" in lines  # the failing stratum group, said up


@pytest.mark.parametrize("fn, line", [
    ("picky", "metric routine metric_routines:picky raised ValueError: 1 wrong label(s)"),
    ("not_a_number", "metric routine metric_routines:not_a_number returned nan, not a finite number"),
])
def test_a_failing_routine_fails_only_that_pass_with_one_line(tmp_path, monkeypatch, fn, line):
    rows = _golden(tmp_path, monkeypatch, f'routine = "metric_routines:{fn}"\nthreshold = 0.5\ntolerance = 0.05')
    wrong = rows[WRONG]
    assert wrong["metric"] is None and wrong["corpus_accepted"] is False
    # the error is the metric's one reason: no threshold, tolerance or subgroup said to fail without a value
    assert wrong["notes"].startswith(f"not accepted: {line}, reproduction target 'bounded' | ")
    assert wrong["threshold_ok"] is None and wrong["tolerance_ok"] is None and wrong["subgroups_ok"] is None
    text = render_stats(campaign_stats(tmp_path / "routine"))  # stats name the same one reason
    assert f"passes have a metric_routines:{fn} value; the others NO VALUE: {line}" in text
    assert "second line" not in wrong["notes"] and "Traceback" not in wrong["notes"]
    for pass_id in ("r01-p01-b4-a1", RIGHT, "r04-p02-b4-a1"):  # the reference and the other good passes
        assert rows[pass_id]["metric"] == 1.0 and rows[pass_id]["corpus_accepted"] is True
        assert "metric routine" not in rows[pass_id]["notes"]


def test_a_class_subgroup_under_a_routine_declares_its_own_recall_tolerance():
    text = golden.PROTOCOL.replace(BUILT_IN, 'routine = "metric_routines:cost"\nhigher_is_better = false\n'
                                             'threshold = 3.0\ntolerance = 0.5').replace("gating = false",
                                                                                        "gating = true")
    with pytest.raises(ProtocolError, match=r"key 'subgroups\[1\] \(class\)\.tolerance': a class subgroup is judged"):
        parse_protocol(text, "p.toml")
    with pytest.raises(ProtocolError, match="metric.higher_is_better = false: the built-in 'macro_f1'"):
        parse_protocol(golden.PROTOCOL.replace(BUILT_IN, BUILT_IN + "\nhigher_is_better = false"), "p.toml")


# ------------------------------------------------------------------------------------ lock, verify, rerun


def _routine_campaign(folder: Path, module: str = "metric_routines", fn: str = "macro_f1", **kwargs) -> Path:
    path = callable_campaign(folder, locked=False, passes=1, **kwargs)
    path.write_text(path.read_text(encoding="utf-8").replace('name = "macro_f1"', f'routine = "{module}:{fn}"'),
                    encoding="utf-8")
    return path


@pytest.mark.parametrize("module, source, line", [
    ("no_such_routines", None, "metric.routine: module 'no_such_routines' cannot be found"),
    ("gpu_routines", "raise RuntimeError('needs a GPU')\n",
     "metric.routine: metric routine gpu_routines:macro_f1 cannot be imported: RuntimeError: needs a GPU"),
    ("empty_routines", "X = 1\n",
     "metric.routine: metric routine empty_routines:macro_f1 cannot be imported: module empty_routines.py has no "
     "'macro_f1'"),
])
def test_lock_refuses_a_routine_that_cannot_be_imported_in_one_line(tmp_path, monkeypatch, capsys, module, source,
                                                                    line):
    if source is not None:
        (tmp_path / f"{module}.py").write_text(source, encoding="utf-8")
        monkeypatch.syspath_prepend(str(tmp_path))
    path = _routine_campaign(tmp_path, module)
    assert main(["lock", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"Error: {path}: {line}"
    assert not any("Traceback" in e for e in err)
    assert not Path(f"{path}.lock.json").exists()


@pytest.fixture
def own_routines(tmp_path, monkeypatch) -> Path:
    """A copy of the routines module in a folder of its own, on the path (and leaving it at the end)."""
    folder = tmp_path / "mine"
    folder.mkdir()
    shutil.copyfile(ROUTINES, folder / "own_routines.py")
    monkeypatch.syspath_prepend(str(folder))
    yield folder / "own_routines.py"
    sys.modules.pop("own_routines", None)


def test_editing_the_routine_after_lock_is_caught_like_an_edited_input(tmp_path, own_routines):
    path = _routine_campaign(tmp_path, "own_routines")
    entry = lock(path)
    assert entry.inputs["routine"] == {"ref": "own_routines:macro_f1", "file": "own_routines.py",
                                          "sha256": sha256_file(own_routines)}
    check_inputs(path)  # unchanged: accepted
    own_routines.write_text(own_routines.read_text() + "\n# tuned after seeing the results\n", encoding="utf-8")
    with pytest.raises(ProtocolError, match=r"metric routine: own_routines:macro_f1 in own_routines.py \(sha256 "
                                            r"\w{12}…\) is now own_routines:macro_f1 in own_routines.py .* since the "
                                            "lock at"):
        check_inputs(path)
    with pytest.raises(ProtocolError, match="metric routine: "):
        run_campaign(path, tmp_path / "campaign")
    assert not (tmp_path / "campaign" / "campaign.json").exists()


def test_verify_and_rerun_call_the_carried_copy(tmp_path, own_routines, monkeypatch):
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv(CALLS_VARIABLE, str(calls))
    path = _routine_campaign(tmp_path, "own_routines")
    lock(path)
    campaign = tmp_path / "campaign"
    run_campaign(path, campaign)
    record = json.loads((campaign / "campaign.json").read_text())["routine"]
    assert record == {"ref": "own_routines:macro_f1", "file": "inputs/routine/own_routines.py",
                      "sha256": sha256_file(own_routines)}
    ran = calls.read_text().splitlines()
    assert ran.count("12") == 2  # once per pass on the 12 documents (no gating stratum subgroup)
    assert [r["metric"] for r in build_rows(campaign)] == [1.0, 1.0]
    seal(campaign)
    own_routines.unlink()  # the module is gone from this machine: only the carried copy remains
    sys.modules.pop("own_routines", None)
    calls.unlink()
    report = audit_campaign(campaign)
    assert report.ok, report.differences
    assert calls.read_text().splitlines().count("12") >= 2  # verify called the routine again, from the copy
    result = rerun(campaign, tmp_path / "again")
    again = json.loads((tmp_path / "again" / "campaign.json").read_text())
    assert again["routine"] == record
    assert result["comparison"]["same_verdicts"] is True
    assert [r["metric"] for r in build_rows(tmp_path / "again")] == [1.0, 1.0]
    # a carried copy edited after the run: every pass's verdict fails with one line, and verify says so
    copy = campaign / record["file"]
    copy.write_text(copy.read_text() + "\n# edited\n", encoding="utf-8")
    rows = build_rows(campaign)
    # (a row's notes may begin with a note of concurrent load on a busy machine: the verdict is its own part)
    assert all(any(part.startswith("not accepted: metric routine own_routines:macro_f1: the carried copy "
                                   "inputs/routine/own_routines.py is missing or differs from its recorded sha256")
                   for part in r["notes"].split(" | ")) for r in rows)
    assert not audit_campaign(campaign).ok
