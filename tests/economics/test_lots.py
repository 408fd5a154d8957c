"""Lots as a decision variable, a mix of observed machines, break-even rates (issue 43): hand-worked cases.

Every expected figure below is worked out by hand in the comments, from the calendar, the catalog and the rates;
the planner is :func:`iteralab.economics.lots.plan_shards`, the same for all three questions.
"""

from __future__ import annotations

import json
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


# ------------------------------------------------------------------------------------ through decide and verify

from iteralab.cli import main  # noqa: E402
from iteralab.decision.audit import check_decision  # noqa: E402
from iteralab.evidence.verify import AuditReport  # noqa: E402
from iteralab.decision.note import render_decision  # noqa: E402
from iteralab.decision.rule import decide  # noqa: E402
from answer_inputs import with_job  # noqa: E402
from stats_campaigns import build_campaign  # noqa: E402

B4 = {"b4": {"batch_size": 4, "passes": [{"s": 4.0}, {"s": 4.3}, {"s": 3.9}]}}
FAST = {"b4": {"batch_size": 4, "passes": [{"s": 1.0}, {"s": 1.1}, {"s": 0.9}]}}


def _catalog_file(tmp_path):
    path = tmp_path / "rent.csv"
    path.write_text(HEADER + "\n".join(ROWS) + "\n", encoding="utf-8")
    return path


def test_decide_plans_two_lots_where_one_misses_the_deadline(tmp_path):
    # the hand-built campaign: 6 documents, slowest b4 pass 4.3 s, start-up 2.5 s (load 2.0 + warm-up 0.5);
    # the same figures as the first test: 25,000 documents on 2 lots of the 7-day rtx-4090 package, 220.00 USD
    folder = with_job(build_campaign(tmp_path / "rtx", hardware="rtx4090", variants=B4), 25_000)
    decision = decide([folder], catalog=_catalog_file(tmp_path))
    assert decision.chosen is not None and decision.lots is None and decision.lots_rented == 2
    assert decision.one_line.startswith("chosen: NVIDIA GeForce RTX 4090 / b4: rtx-4090 7-day package, 2 lots, "
                                        "220.00 USD committed") or \
        decision.one_line.startswith("chosen: b4: rtx-4090 7-day package, 2 lots, 220.00 USD committed")
    note = render_decision(decision)
    assert "## Rental plans: lots, machines, rates to reach (planned)" in note
    assert "- lots of b4: 1 lot: misses the deadline" in note and "- lots of b4: 3 lots: commits more (330.00" in note
    assert "assumed to run as the observed one" in note
    # the unobserved rows of the catalog get a bar; b200's cheapest package (2071.00) can never beat 220.00
    assert "b200 (NVIDIA B200), not observed: cannot beat the chosen plan at any rate" in note
    assert "l40s (NVIDIA L40S), not observed: rent it next only if you expect at least" in note
    # --lots 1 is a constraint: the job then misses the deadline and nothing qualifies
    assert decide([folder], catalog=_catalog_file(tmp_path), lots=1).chosen is None


def test_decide_over_two_machines_prints_every_part_and_verify_recomputes_it(tmp_path, capsys, monkeypatch):
    # the second machine's folder: the same protocol, recorded on another device (an H100, 1.1 s at the slowest)
    monkeypatch.chdir(tmp_path)
    rtx = with_job(build_campaign(tmp_path / "rtx", hardware="rtx4090", variants=B4), 70_000)
    h100 = with_job(build_campaign(tmp_path / "h100", hardware="h100", variants=FAST), 70_000)
    catalog = _catalog_file(tmp_path)
    decision = decide([rtx, h100], catalog=catalog)
    # the figures of the mix test above: rtx alone 5 lots (550), h100 alone 2 lots (600), the mix 1 + 1 (410)
    assert decision.chosen.key == "NVIDIA GeForce RTX 4090 / b4" and decision.chosen.committed == Decimal("550.00")
    assert decision.mix_chosen and decision.plans.mix.total == Decimal("410.00")
    assert decision.one_line.startswith("chosen: a mix of observed machines: NVIDIA GeForce RTX 4090 / b4: 14259 "
                                        "documents on 1 lot")
    assert main(["decide", "rtx", "h100", "--catalog", str(catalog), "--out", "rtx"]) == 0
    capsys.readouterr()
    note = (tmp_path / "rtx" / "decision.md").read_text(encoding="utf-8")
    for part in ("lots of NVIDIA GeForce RTX 4090 / b4: 5 lots", "lots of NVIDIA H100 80GB HBM3 / b4: 2 lots",
                 "mix of observed machines (chosen: strictly cheaper; best single-machine plan: NVIDIA GeForce RTX "
                 "4090 / b4, 550.00 USD)", "a corpus processed by two or more configurations",
                 "l40s (NVIDIA L40S), not observed: rent it next only if you expect at least"):
        assert part in note, part
    stored = json.loads((tmp_path / "rtx" / "decision.json").read_text(encoding="utf-8"))
    assert stored["rental_plans"]["mix"]["chosen"] is True and stored["lots"] is None
    assert [p["documents"] for p in stored["rental_plans"]["mix"]["parts"]] == [14_259, 55_741]
    report = AuditReport(tmp_path / "rtx")  # the hand-built folders hold no prediction files to re-verify:
    check_decision(tmp_path / "rtx", report)  # the decision's own check, on both folders
    assert report.differences == [] and report.notes == []
    # an edited pass time in the second machine's folder changes the recomputed decision: verify names it
    table = tmp_path / "h100" / "raw_table.csv"
    text = table.read_text(encoding="utf-8")
    table.write_text(text.replace(",1.100000,", ",3.300000,", 1), encoding="utf-8")
    assert text != table.read_text(encoding="utf-8")
    check_decision(tmp_path / "rtx", report)
    assert report.differences and report.differences[0].startswith("decision.json: differs from the decision "
                                                                    "recomputed from the folder's files at ")
    # the second folder moved out of reach: said in a note, never a silent pass
    (tmp_path / "h100").rename(tmp_path / "elsewhere")
    later = AuditReport(tmp_path / "rtx")
    check_decision(tmp_path / "rtx", later)
    assert later.differences == [] and "'h100' was not found" in later.notes[0]


def test_a_cpu_campaign_gets_the_rate_each_row_must_reach_to_finish_before_the_deadline(tmp_path):
    folder = with_job(build_campaign(tmp_path / "cpu", variants=B4), 6_000)
    decision = decide([folder])  # the shipped catalog: rtx-4090 and b200, neither observed
    assert decision.chosen is None
    rows = {r.gpu_id: r for r in decision.plans.rows}
    assert set(rows) == {"rtx-4090", "b200"} and rows["rtx-4090"].beat is None
    # 3 h = 10,800 s after the planned tasks, 1 lot of the 7-day package: 6,000 / 10,800 = 0.5556 -> 0.556
    assert rows["rtx-4090"].rate == Decimal("0.556") and rows["rtx-4090"].plan.lots == 1
    note = render_decision(decision)
    assert ("rtx-4090 (NVIDIA GeForce RTX 4090), not observed: rent it next only if you expect at least 0.556 "
            "documents/s per lot: 0.4x the fastest observed (b4, 1.40 documents/s per lot)") in note
    assert "would finish before the deadline (nothing was priced to beat)" in note
    assert "a bar to beat, never a price" in note


def test_verify_recomputes_a_two_machine_decision_from_the_sealed_folders(tmp_path, capsys, monkeypatch):
    """The same protocol run, its second folder recorded on another machine (the manifest's CPU model): decide over
    both prints every part, and verify recomputes the decision from both sealed folders."""
    import shutil

    from campaign_factory import callable_campaign
    from iteralab.evidence.reads import load_evidence
    from iteralab.evidence.run import run_campaign
    from protocol_factory import VARIANTS
    from stats_campaigns import CALENDAR

    root = tmp_path / "work"
    root.mkdir()
    run_campaign(callable_campaign(root, passes=1, variants=VARIANTS + CALENDAR, extra="[job]\ndocuments = 500\n"),
                 tmp_path / "box-a")
    shutil.copytree(tmp_path / "box-a", tmp_path / "box-b")
    manifest = tmp_path / "box-b" / "manifest.json"
    record = json.loads(manifest.read_text(encoding="utf-8"))
    record["environment"]["device_inventory"]["cpu"]["model"] = "Second Test CPU"
    manifest.write_text(json.dumps(record, indent=2, sort_keys=True), encoding="utf-8")
    hw = load_evidence(tmp_path / "box-a").hardware
    (tmp_path / "cpus.csv").write_text(
        HEADER.rstrip("\n") + ",device_match,cpu_cores\n"
        f"c1,2026-03-01,box-a,{hw.cpu},1,7,40.00,USD,,{hw.cpu_cores}\n"
        f"c1,2026-03-01,box-b,Second Test CPU,1,7,45.00,USD,,{hw.cpu_cores}\n"
        "c1,2026-03-01,rtx-4090,NVIDIA GeForce RTX 4090,1,7,110.00,USD,,\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["decide", "box-a", "box-b", "--catalog", "cpus.csv", "--out", "box-a"]) == 0
    note = (tmp_path / "box-a" / "decision.md").read_text(encoding="utf-8")
    assert "Second Test CPU" in note and "- lots of " in note
    assert "mix of observed machines (not chosen: not strictly cheaper" in note
    assert "rtx-4090 (NVIDIA GeForce RTX 4090), not observed: cannot beat the chosen plan at any rate" in note
    for folder in ("box-b", "box-a"):
        assert main(["bundle", "pack", folder]) == 0
    capsys.readouterr()
    assert main(["verify", "box-a"]) == 0
    out = capsys.readouterr().out
    assert "verified:" in out and "not recomputed" not in out
    # the second folder edited after sealing: verify of the first names its broken seal
    stats = tmp_path / "box-b" / "raw_table.csv"
    stats.write_text(stats.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    assert main(["verify", "box-a"]) == 1
    assert "decision.json: merged folder box-b: raw_table.csv: edited" in capsys.readouterr().out


def test_a_decision_written_before_lots_were_planned_still_verifies(tmp_path):
    """An older decision.json (one lot by default, no planned parts) is recomputed with one lot; the parts it does
    not hold are named in a note, not reported as differences."""
    from iteralab.decision.note import write_decision

    folder = with_job(build_campaign(tmp_path / "rtx", hardware="rtx4090", variants=B4), 6)
    write_decision(decide([folder], lots=1), folder)
    path = folder / "decision.json"
    old = json.loads(path.read_text(encoding="utf-8"))
    for key in ("max_lots", "rental_plans"):
        old.pop(key)
    old["rental"].pop("mix_chosen")
    for config in old["configurations"]:
        config.pop("lots_plan", None)
    path.write_text(json.dumps(old), encoding="utf-8")
    report = AuditReport(folder)
    check_decision(folder, report)
    assert report.differences == []
    assert any("written before decisions planned lots" in n for n in report.notes)
