"""An interrupted campaign is incomplete, not infeasible; decisions on it are explicit (--partial); a
difference between variants is never claimed from fewer than three counted passes each."""

import json

import pytest

from test_stats import build_campaign
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
