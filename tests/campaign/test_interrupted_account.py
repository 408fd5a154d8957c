"""One account of an attempt a stop signal interrupted (docs/running.md): the raw table keeps it as
``interrupted``; stats, the decision note and report.html list it as such (counted for nothing, its slot runs
again), before and after the campaign is resumed. The interrupt is written into the journal as ``run`` writes it
(a real Ctrl-C is tests/campaign/test_interrupt.py's), so the test needs no subprocess."""

from __future__ import annotations

import json
from pathlib import Path

from campaign_factory import callable_campaign
from iteralab.campaign.journal import Journal
from iteralab.decision.note import render_decision
from iteralab.decision.rule import decide
from iteralab.evidence.run import run_campaign
from iteralab.evidence.stats import INTERRUPTED_LINE, campaign_stats, render_stats
from iteralab.evidence.table import read_raw_table, write_raw_table

STOPPED = "r01-p01-b1-a1"


def _interrupted_campaign(tmp_path: Path) -> tuple[Path, Path]:
    """A campaign of two passes (b1, b4) whose first pass was stopped by Ctrl-C: its start, then the interrupt."""
    protocol = callable_campaign(tmp_path, passes=1)
    out = tmp_path / "camp"
    run_campaign(protocol, out)
    journal = out / "journal.jsonl"
    lines = journal.read_text(encoding="utf-8").splitlines()
    keep = lines[:next(i for i, line in enumerate(lines) if json.loads(line)["event"] == "pass_started") + 1]
    journal.write_text("\n".join(keep) + "\n", encoding="utf-8")
    Journal(journal).append("run_interrupted", signal="SIGINT", pass_id=STOPPED, passes_done=0, passes_total=2)
    for stale in (out / "predictions").glob("*.parquet"):
        stale.unlink()
    write_raw_table(out)
    return protocol, out


def test_an_interrupted_attempt_is_one_account_before_the_resume(tmp_path):
    _, out = _interrupted_campaign(tmp_path)
    assert [(r["pass_id"], r["status"]) for r in read_raw_table(out / "raw_table.csv")] == [(STOPPED, "interrupted")]
    text = render_stats(campaign_stats(out))
    # never "0 attempted … 2 of 2 not attempted": one slot attempted and interrupted, one not attempted
    assert text.splitlines()[1].startswith(f"campaign incomplete: 1 of 2 scheduled passes not attempted and 1 "
                                           f"interrupted ({STOPPED}: stopped by a signal, counted for nothing")
    assert "b1 (series batch): 1 attempted, 0 ok, 0 failed, 0 aborted, 1 interrupted, 0 excluded\n  every pass, in run order: none finished" in text
    assert f"  {STOPPED} {INTERRUPTED_LINE}" in text
    assert "b4 (series batch): 0 attempted" in text
    decision = decide([out], partial=True)
    b1 = next(c for c in decision.configs if c.variant == "b1")
    assert b1.failures == () and b1.exclusions[0].startswith(
        f"no pass finished yet (attempt {STOPPED} interrupted by a signal): the campaign is incomplete")
    note = render_decision(decision)
    assert f"- pass {STOPPED} (b1): {INTERRUPTED_LINE}" in note
    assert "1 of 2 scheduled passes not attempted and 1 interrupted" in note


def test_an_interrupted_attempt_stays_listed_after_the_resume_and_counts_for_nothing(tmp_path):
    from iteralab.decision.report import finalize

    protocol, out = _interrupted_campaign(tmp_path)
    run_campaign(protocol, out)  # the resume runs the slot again as attempt 2
    rows = read_raw_table(out / "raw_table.csv")
    assert [(r["pass_id"], r["status"]) for r in rows] == [(STOPPED, "interrupted"), ("r01-p01-b1-a2", "ok"),
                                                           ("r01-p02-b4-a1", "ok")]
    stats = campaign_stats(out)
    b1 = stats.times("b1")
    assert [p.pass_id for p in b1.passes] == ["r01-p01-b1-a2"] and b1.interrupted == (STOPPED,)
    text = render_stats(stats)
    assert "campaign incomplete" not in text
    assert "b1 (series batch): 2 attempted, 1 ok, 0 failed, 0 aborted, 1 interrupted, 0 excluded" in text
    assert f"  {STOPPED} {INTERRUPTED_LINE}" in text
    finalize([out])
    decision = decide([out])
    assert all(c.feasible and not c.failures and not c.exclusions for c in decision.configs)
    assert f"- pass {STOPPED} (b1): {INTERRUPTED_LINE}" in (out / "decision.md").read_text(encoding="utf-8")
    html = (out / "report.html").read_text(encoding="utf-8")
    raw = html[html.index("<h2>Raw table</h2>"):]
    assert f"<td>{STOPPED}</td>" in raw and "<td>interrupted</td>" in raw  # the report's raw table keeps the row
    excluded = html[html.index("<h2>Excluded and why</h2>"):html.index("<h2>What remains uncertain</h2>")]
    assert STOPPED in excluded and "counted for" in excluded
