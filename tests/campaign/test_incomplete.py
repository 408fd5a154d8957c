"""An interrupted campaign is incomplete, not infeasible; decisions on it are explicit (--partial); a
difference between variants is never claimed from fewer than three counted passes each."""

import itertools
import json

import pytest

from stats_campaigns import build_campaign
from iteralab.cli import main
from iteralab.decision.note import render_decision
from iteralab.decision.rule import decide
from iteralab.errors import IteraError
from iteralab.evidence.stats import campaign_stats, compare, render_stats


def _drop_variant(folder, variant):
    """As if the run was interrupted before ``variant``'s passes: its journal events never happened."""
    journal = folder / "journal.jsonl"
    kept = [line for line in journal.read_text(encoding="utf-8").splitlines()
            if json.loads(line).get("variant") != variant and f"-{variant}-" not in line]
    journal.write_text("\n".join(kept) + "\n", encoding="utf-8")
    (folder / "raw_table.csv").unlink()  # decide regenerates it, never asks


def test_decide_refuses_an_incomplete_campaign_and_says_how_to_resume(tmp_path, capsys):
    folder = build_campaign(tmp_path / "camp")
    _drop_variant(folder, "b16")
    with pytest.raises(IteraError) as err:
        decide([folder])
    assert str(err.value) == (f"campaign incomplete: 3 of 15 scheduled passes not attempted — resume with "
                              f"`iteralab run PROTOCOL --out {folder}`")
    assert main(["decide", str(folder)]) == 2
    assert "--partial" in capsys.readouterr().err


def test_partial_decision_is_recorded_and_never_calls_unattempted_infeasible(tmp_path):
    folder = build_campaign(tmp_path / "camp")
    _drop_variant(folder, "b16")
    decision = decide([folder], partial=True)
    b16 = next(c for c in decision.configs if c.variant == "b16")
    assert not b16.feasible and b16.failures == ()
    assert b16.exclusions == ("not attempted yet: the campaign is incomplete (decided with --partial); never priced",)
    note = render_decision(decision)
    assert "- **PARTIAL DECISION (--partial): campaign incomplete: 3 of 15 scheduled passes not attempted" in note
    assert "not feasible (M1)" not in "".join(b16.exclusions)
    assert (folder / "raw_table.csv").is_file()


def test_stats_state_an_incomplete_campaign(tmp_path):
    folder = build_campaign(tmp_path / "camp")
    _drop_variant(folder, "b16")
    text = render_stats(campaign_stats(folder))
    assert text.splitlines()[1].startswith("campaign incomplete: 3 of 15 scheduled passes not attempted")


def test_never_distinguished_from_fewer_than_three_counted_passes(tmp_path):
    variants = {"b1": {"batch_size": 1, "passes": [{"s": 10.0, "metric": 0.9}, {"s": 10.1, "metric": 0.9}]},
                "b4": {"batch_size": 4, "passes": [{"s": 2.0, "metric": 0.9}, {"s": 2.1, "metric": 0.9}]}}
    stats = campaign_stats(build_campaign(tmp_path / "two", variants=variants,
                                          series={"batch": ("batch_size", ["b1", "b4"])}))
    c = compare(stats.times("b1"), stats.times("b4"))
    assert not c.distinguished  # 5x apart, tight spreads: still only two passes each
    assert "b1 has only 2 counted passes; a difference is never claimed from fewer than 3" in c.text


def _real_campaign(tmp_path):
    from campaign_factory import callable_campaign
    from iteralab.evidence.run import run_campaign

    out = tmp_path / "out"
    run_campaign(callable_campaign(tmp_path, passes=1), out)
    return out


def test_verify_on_a_never_sealed_folder_says_so(tmp_path, capsys):
    folder = _real_campaign(tmp_path)
    assert main(["verify", str(folder)]) == 1
    err = capsys.readouterr().err
    assert f"Error: {folder}: the folder was never sealed (no SHA256SUMS)" in err
    assert f"iteralab bundle seal {folder}" in err and f"iteralab verify --unsealed {folder}" in err
    assert "restore the original bundle" not in err
    assert main(["verify", "--unsealed", str(folder)]) == 0


def test_commands_that_would_change_a_sealed_folder_refuse(tmp_path, capsys):
    from iteralab.evidence.bundle import seal
    from iteralab.evidence.verify import audit_campaign

    folder = _real_campaign(tmp_path)
    assert main(["report", str(folder)]) == 0  # unsealed: written into the folder
    seal(folder)
    assert audit_campaign(folder).ok
    capsys.readouterr()
    assert main(["report", str(folder)]) != 0
    err = capsys.readouterr().err
    assert f"Error: {folder}: the folder is sealed (SHA256SUMS); writing stats, decision and report.html into it " \
           "would change it and break the seal" in err
    assert main(["decide", str(folder), "--out", str(folder)]) != 0
    pass_id = folder.joinpath("raw_table.csv").read_text().splitlines()[1].split(",")[0]
    assert main(["exclude", str(folder), pass_id, "--reason", "backup"]) != 0
    assert main(["table", str(folder)]) == 0  # byte-identical: nothing written, the seal holds
    assert main(["report", str(folder), "--out", str(tmp_path / "elsewhere")]) == 0
    assert audit_campaign(folder).ok  # nothing in the sealed folder changed


@pytest.mark.real_load
def test_a_pass_measured_under_concurrent_load_is_flagged_and_set_apart(tmp_path, monkeypatch):
    import iteralab.models.device as dev
    from campaign_factory import callable_campaign
    from iteralab.campaign.folder import CampaignFolder
    from iteralab.evidence.run import run_campaign

    readings = itertools.cycle([{"busy_s": 100.0, "steal_s": 0.0, "own_s": 10.0},
                                {"busy_s": 300.0, "steal_s": 1.0, "own_s": 10.5}])
    monkeypatch.setattr(dev, "load_snapshot", lambda: next(readings))
    out = tmp_path / "out"
    run_campaign(callable_campaign(tmp_path, passes=2), out)
    rows = CampaignFolder.open(out).raw_rows()
    assert all("measured under concurrent load: other processes used 199.50 CPU-s" in r.notes for r in rows)
    stats = campaign_stats(out)
    assert all(p.concurrent for v in stats.variants for p in v.passes)
    assert "[concurrent load]" in render_stats(stats)
    # by default (stats.loaded_passes = "apart") a loaded pass is an external incident (T4): shown, not counted
    assert all(p.excluded and not p.counted for v in stats.variants for p in v.passes)
    c = compare(stats.times("b1"), stats.times("b4"))
    assert c.verdict == "no comparison" and "2 of them measured under concurrent load and set apart" in c.text
    # the report marks each such pass where its time is shown
    from iteralab.decision.report import render_report

    decision = decide([out])
    assert all(any(e.startswith("no quiet pass") for e in c.exclusions) for c in decision.configs)
    html = render_report(decision)
    assert html.count("(under concurrent load), set apart") == 4  # 2 variants x 2 passes, in the configurations
    (tmp_path / "c").mkdir()
    counted = tmp_path / "counted"  # the other rule, declared before timing: counted, and said
    run_campaign(callable_campaign(tmp_path / "c", passes=2, extra='[stats]\nloaded_passes = "counted"\n'), counted)
    c = compare(*(campaign_stats(counted).times(v) for v in ("b1", "b4")))
    assert "4 of these counted passes were measured under concurrent load" in c.text


def test_a_quiet_pass_is_not_flagged(tmp_path):
    from iteralab.models.device import concurrent_load

    quiet = concurrent_load({"busy_s": 10.0, "steal_s": 0.0, "own_s": 1.0},
                            {"busy_s": 12.0, "steal_s": 0.0, "own_s": 2.9}, 2.0)
    assert quiet["other_cpu_s"] == 0.1 and quiet["flagged"] is False
    assert concurrent_load(None, None, 2.0) is None
