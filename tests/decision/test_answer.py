"""Every campaign ends in an answer: the configuration on each observed machine, and the rental wherever a
catalog row prices the observed device exactly (a GPU, or a CPU server package of the same CPU and cores)."""

import json

import pytest
from stats_campaigns import build_campaign

from answer_inputs import with_job, write_catalog
from iteralab.cli import main
from iteralab.decision.note import render_decision
from iteralab.decision.rule import decide
from iteralab.kit.calcul_forfaits import CatalogError, find_entry, load_catalog


def test_names_match_exactly_never_by_shared_words(tmp_path):
    cat = load_catalog(write_catalog(tmp_path, ["u1,2026-12-01,rtx-4090,NVIDIA GeForce RTX 4090,1,7,110.00,USD"]))
    assert find_entry(cat, "NVIDIA GeForce RTX 4090").gpu_id == "rtx-4090"
    assert find_entry(cat, "  nvidia geforce   RTX 4090 ").gpu_id == "rtx-4090"  # whitespace and case only
    assert find_entry(cat, "NVIDIA GeForce RTX 4090 D") is None  # contains the words, is another card
    assert find_entry(cat, "RTX 4090") is None


def test_device_match_names_and_patterns(tmp_path):
    cat = load_catalog(write_catalog(tmp_path, [
        'u1,2026-12-01,rtx-4090,RTX 4090,1,7,110.00,USD,NVIDIA GeForce RTX 4090;re:NVIDIA GeForce RTX 4090 Laptop GPU,'],
        ",device_match,cpu_cores"))
    assert find_entry(cat, "NVIDIA GeForce RTX 4090").gpu_id == "rtx-4090"
    assert find_entry(cat, "NVIDIA GeForce RTX 4090 Laptop GPU").gpu_id == "rtx-4090"
    assert find_entry(cat, "RTX 4090") is None  # with device_match, gpu_name alone no longer matches
    assert find_entry(cat, "NVIDIA GeForce RTX 4090 D") is None


def test_catalog_refuses_bad_optional_cells(tmp_path):
    with pytest.raises(CatalogError, match=r"line 2, field device_match: 're:\(' is not a regular expression"):
        load_catalog(write_catalog(tmp_path, ["u1,2026-12-01,x,X,1,7,1.00,USD,re:(,"], ",device_match,cpu_cores"))
    with pytest.raises(CatalogError, match="line 2, field cards_per_lot: '2' must be 1 for a CPU server package"):
        load_catalog(write_catalog(tmp_path, ["u1,2026-12-01,cpu-x,X,2,7,1.00,USD,,16"], ",device_match,cpu_cores"))


def _set_cores(folder, cores):
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    env = manifest["environment"]
    inventory = env.get("device_inventory") or env.get("devices")
    inventory["cpu"]["logical_cores"] = cores
    path.write_text(json.dumps(manifest), encoding="utf-8")


CPU_ROW = "u1,2026-12-01,cpu-test-8c,Test CPU 8-core,1,7,50.00,USD,,8"


def test_a_cpu_server_package_prices_the_observed_cpu_and_cores(tmp_path):
    folder = build_campaign(tmp_path / "camp")
    _set_cores(folder, 8)
    catalog = write_catalog(tmp_path, [CPU_ROW], ",device_match,cpu_cores")
    decision = decide([folder], catalog=catalog)
    assert decision.chosen is not None and decision.chosen.variant == "b8"
    assert decision.one_line == ("chosen: b8: cpu-test-8c 7-day package, 1 lot, 50.00 USD committed, 50.00 USD per "
                                 "verified corpus (1 accepted)")  # budget / 1 verified corpus
    note = render_decision(decision)
    assert "- **Rental**: chosen: b8: cpu-test-8c 7-day package" in note
    assert "  - on CPU only (Test CPU 8-core, 8 logical cores): b8 (first by median" in note
    assert f"priced from `{catalog}`, given with --catalog" in note


def test_a_two_core_measurement_never_prices_a_sixteen_core_package(tmp_path):
    folder = build_campaign(tmp_path / "camp")
    _set_cores(folder, 2)
    catalog = write_catalog(tmp_path, ["u1,2026-12-01,cpu-test-16c,Test CPU 8-core,1,7,50.00,USD,,16"],
                            ",device_match,cpu_cores")
    decision = decide([folder], catalog=catalog)
    assert decision.chosen is None
    assert decision.one_line.startswith("configuration on CPU only (Test CPU 8-core, 2 logical cores): b8; "
                                        "rental not priced: ran on CPU only")


def test_gpu_row_whose_name_only_shares_words_is_not_used(tmp_path):
    folder = build_campaign(tmp_path / "h100", hardware="h100")
    catalog = write_catalog(tmp_path, ["u1,2026-12-01,h100,NVIDIA H100,1,7,900.00,USD"])
    decision = decide([folder], catalog=catalog)
    assert decision.chosen is None
    reason = next(c for c in decision.configs if c.variant == "b8").pricing.reason
    assert reason.startswith("GPU 'NVIDIA H100 80GB HBM3' observed in the manifest is not in catalog")
    assert "never by shared words" in reason
    assert decision.one_line.startswith("configuration on NVIDIA H100 80GB HBM3: b8; rental not priced:")


def test_decide_json_states_both_halves(tmp_path, capsys):
    folder = build_campaign(tmp_path / "camp")
    assert main(["decide", str(folder), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    [machine] = data["configuration_per_machine"]
    assert machine["variant"] == "b8" and machine["not_distinguished_from"] == ["b4", "b1"]
    assert data["rental"]["chosen"] is None and data["rental"]["answer"].startswith("not priced: ran on CPU only")


def test_no_choice_only_when_nothing_qualifies(tmp_path):
    variants = {"b1": {"batch_size": 1, "passes": [{"s": 1.0, "metric": 0.1}, {"s": 1.1, "metric": 0.1}]},
                "b4": {"batch_size": 4, "passes": [{"s": 1.0, "metric": 0.1}, {"s": 1.1, "metric": 0.1}]}}
    folder = build_campaign(tmp_path / "camp", variants=variants, series={"batch": ("batch_size", ["b1", "b4"])})
    decision = decide([folder])
    assert decision.one_line.startswith("no choice possible: no configuration processes all documents")
    assert decision.machines[0].chosen is None


def test_a_pass_over_the_time_limit_is_a_failed_row_with_its_completed_count(tmp_path, monkeypatch):
    """run.pass_timeout_s: b1 (12 calls of 0.05 s) exceeds 0.3 s and is stopped; b4 (3 calls) is not."""
    from campaign_factory import callable_campaign
    from iteralab.campaign.folder import CampaignFolder
    from iteralab.evidence.run import run_campaign
    from protocol_factory import VARIANTS

    monkeypatch.setenv("FAKE_MODEL_DELAY", "0.05")
    protocol = callable_campaign(tmp_path, fn="fake_models:slow_classifier", passes=1, warmup="inputs = 0\npasses = 0",
                                 variants="pass_timeout_s = 0.3\n" + VARIANTS)
    out = tmp_path / "out"
    run_campaign(protocol, out)
    rows = {r.variant: r for r in CampaignFolder.open(out).raw_rows()}
    slow, fast = rows["b1"], rows["b4"]
    assert slow.status == "failed" and slow.pass_s is None and slow.accepted is False
    assert slow.error == "PassTimeout: exceeded the pass time limit of 0.3 s"
    assert 1 <= slow.completed < 12  # the inputs it completed are kept (R8)
    assert fast.ok and fast.completed == 12
    decision = decide([out])
    b1 = next(c for c in decision.configs if c.variant == "b1")
    assert any(f"failed after {slow.completed} of 12 documents: PassTimeout: exceeded the pass time limit of 0.3 s"
               in e for e in b1.exclusions)


def test_production_job_is_planned_for_every_qualifying_configuration(tmp_path):
    from campaign_factory import callable_campaign
    from iteralab.evidence.run import run_campaign

    protocol = callable_campaign(tmp_path, passes=2, extra="[job]\ndocuments = 2000000\n")
    out = tmp_path / "out"
    run_campaign(protocol, out)
    decision = decide([out])
    assert {j.key for j in decision.jobs} == {c.key for c in decision.configs if not c.exclusions} == {"b1", "b4"}
    for plan in decision.jobs:
        times = next(c for c in decision.configs if c.key == plan.key).times.times
        assert plan.docs_per_s_slowest == pytest.approx(12 / max(times))
        assert plan.hours_slowest == pytest.approx((2_000_000 / plan.docs_per_s_slowest + plan.startup_s) / 3600)
        assert plan.hours_median <= plan.hours_slowest
        assert plan.packages == () and plan.reason == "no catalog row prices this hardware"
    note = render_decision(decision)
    assert "## Production job (planned)" in note and "planned from observed throughput" in note
    assert "never counted as accepted results (K6)" in note
    assert all(c.accepted <= 1 for c in decision.configs)  # the plan adds no accepted result


def test_job_packages_that_cover_the_plan(tmp_path):
    from iteralab.decision.job import plan_job, render_job

    cat = load_catalog(write_catalog(tmp_path, ["u1,2026-12-01,cpu-8c,Test CPU,1,3,20.00,USD,,8",
                                           "u1,2026-12-01,cpu-8c,Test CPU,1,7,40.00,USD,,8"],
                                     ",device_match,cpu_cores"))
    entry = cat.entries[0]
    # 1,000 documents in 10 s (slowest): 100 docs/s; 30,000,000 documents = 300,000 s = 83.3 h > 72 h
    plan = plan_job("b8", 30_000_000, 1000, (8.0, 10.0), 0.0, entry, cat)
    assert plan.hours_slowest == pytest.approx(83.333, abs=0.01)
    assert plan.packages == ("cpu-8c 7-day package, 1 lot: 40.00 USD",)
    plan = plan_job("b8", 10**9, 1000, (10.0,), 0.0, entry, cat)
    assert plan.packages == () and plan.reason.startswith("no listed package covers 2778 h (longest: 7 days)")
    # T5: a plan built on a pass measured under concurrent load says so; a loaded pass that is not the slowest
    # leaves the slowest figure unmarked
    marked = plan_job("b8", 30_000_000, 1000, (8.0, 10.0), 0.0, entry, cat, slowest_concurrent=True)
    assert marked.slowest_concurrent is True and marked.to_dict()["slowest_pass_under_concurrent_load"] is True
    assert "(slowest pass measured under concurrent load)" in "\n".join(render_job([marked], 30_000_000))
    quiet = plan_job("b8", 30_000_000, 1000, (8.0, 10.0), 0.0, entry, cat)
    assert quiet.slowest_concurrent is False
    assert "concurrent" not in "\n".join(render_job([quiet], 30_000_000))


def test_a_plan_is_marked_only_when_its_slowest_counted_pass_ran_under_load():
    from iteralab.evidence.datasets import PassTime
    from iteralab.evidence.stats import VariantTimes

    def times(*passes):
        return VariantTimes("b8", (), tuple(PassTime(f"p{i}", status, s, {}, excluded, None, None, None, loaded)
                                            for i, (status, s, excluded, loaded) in enumerate(passes)))

    assert times(("ok", 8.0, False, False), ("ok", 10.0, False, True)).slowest_concurrent is True
    assert times(("ok", 8.0, False, True), ("ok", 10.0, False, False)).slowest_concurrent is False
    # an excluded or failed pass is not counted, loaded or not: the slowest *counted* pass decides
    assert times(("ok", 8.0, False, False), ("ok", 12.0, True, True)).slowest_concurrent is False
    assert times(("failed", None, False, True)).slowest_concurrent is False


def test_a_variant_stopped_by_the_limit_is_not_run_again_and_says_so(tmp_path, monkeypatch):
    from campaign_factory import callable_campaign
    from iteralab.campaign.folder import CampaignFolder
    from iteralab.evidence.run import run_campaign
    from protocol_factory import VARIANTS

    monkeypatch.setenv("FAKE_MODEL_DELAY", "0.05")
    protocol = callable_campaign(tmp_path, fn="fake_models:slow_classifier", passes=3, warmup="inputs = 0\npasses = 0",
                                 variants="pass_timeout_s = 0.3\n" + VARIANTS)
    out = tmp_path / "out"
    run_campaign(protocol, out)
    rows = [r for r in CampaignFolder.open(out).raw_rows() if r.variant == "b1"]
    assert len(rows) == 3 and all(r.status == "failed" for r in rows)
    first, later = rows[0], rows[1:]
    assert first.error == "PassTimeout: exceeded the pass time limit of 0.3 s" and first.completed >= 1
    for r in later:
        assert r.error == f"not run: b1 exceeded the pass time limit of 0.3 s in {first.pass_id}"
        assert r.completed == 0 and r.pass_s is None and r.load_s is None
        # a slot not run observed no environment: nothing to compare with the campaign's manifest
        assert not r.manifest_diff and "manifest differs" not in r.notes, r.notes
    assert all(r.ok for r in CampaignFolder.open(out).raw_rows() if r.variant == "b4")
    from iteralab.evidence.bundle import seal
    from iteralab.evidence.verify import audit_campaign

    seal(out)
    report = audit_campaign(out)
    assert report.ok, report.differences


def test_the_production_job_enters_the_window_the_deadline_and_the_package(tmp_path):
    # 6 documents in ~10 s (b1) vs ~3.8 s (b8): 50,000 documents = ~23 h for b1 and ~9 h for b8 after the
    # planned tasks; the hand-built calendar leaves 3 h before the deadline, so every configuration misses it
    folder = with_job(build_campaign(tmp_path / "camp"), 50_000)
    decision = decide([folder])
    b1 = next(c for c in decision.configs if c.variant == "b1")
    assert b1.window.window is not None and "production job of b1" in " ".join(t.name for t in b1.window.window.tasks)
    assert any(e.startswith("misses the deadline") for e in b1.exclusions)
    assert decision.one_line.startswith("no choice possible")
    small = decide([with_job(build_campaign(tmp_path / "small"), 6)])  # a job of one corpus fits
    assert small.machines[0].chosen is not None


def test_a_row_without_cpu_cores_never_prices_a_cpu_run(tmp_path):
    """Named exactly as the observed CPU, but no core count: it could be a 64-core server (issue 24, item 3)."""
    folder = build_campaign(tmp_path / "camp")
    _set_cores(folder, 2)
    catalog = write_catalog(tmp_path, ["u1,2026-12-01,epyc,Test CPU 8-core,1,7,50.00,USD"])
    decision = decide([folder], catalog=catalog)
    assert decision.chosen is None
    assert decision.rental_line.startswith("not priced: ran on CPU only")
    line = ("catalog row epyc: names the observed CPU but gives no cpu_cores; a CPU run is priced only by a row with "
            "the same model and core count")
    assert line in decision.notes and f"- {line}" in render_decision(decision)
    # the same row beside an exact CPU server row: only that one prices the run
    both = write_catalog(tmp_path, ["u1,2026-12-01,epyc,Test CPU 8-core,1,7,50.00,USD,,",
                               "u1,2026-12-01,cpu-test-2c,Test CPU 8-core,1,7,20.00,USD,,2"], ",device_match,cpu_cores")
    assert decide([folder], catalog=both).one_line.startswith("chosen: b8: cpu-test-2c 7-day package, 1 lot, 20.00 USD")
