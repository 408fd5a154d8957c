"""A scoring job's whole chain: lock → run → stats → decide (note, report) → seal, pack → verify → rerun, with a tiny
cross-encoder built from a config and with a callable scorer, on the local engine (two batch sizes and a
data-parallel variant over 2 CPU processes) and on Ray. Each ends with an answer: a configuration chosen, every
verdict recomputed by verify from the stored scores, and the rerun's scores compared with the earlier ones.
Slow (several campaigns, subprocess workers): behind the ``slow`` and ``ray`` markers."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from ray_jobs import RAY_RUN, TESTS
from scoring_jobs import CALLABLE, scoring_campaign, tiny_cross_encoder_dir

#: The data-parallel workers measure their own load, out of reach of the tests' quiet-machine patch: counted.
COUNTED = '[stats]\nloaded_passes = "counted"\n'
LOCAL_VARIANTS = """
[[variants]]
name = "b2"
batch_size = 2

[[variants]]
name = "b4"
batch_size = 4

[[variants]]
name = "dp2"
batch_size = 4
data_parallel = 2
"""
RAY_VARIANTS = """
[[variants]]
name = "b2"
batch_size = 2

[[variants]]
name = "ray"
batch_size = 4
engine = "ray"
"""


@pytest.fixture(autouse=True)
def _workers_import_this_checkout(monkeypatch):
    """Data-parallel and Ray workers are fresh interpreters: they import the callable (tests/support/fake_scorers.py)
    and this checkout's code from PYTHONPATH."""
    import iteralab

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), str(Path(iteralab.__file__).resolve().parents[1])]))


def chain(tmp_path: Path, model: str, variants: str, run: str = 'isolation = "inprocess"') -> tuple[Path, dict]:
    from iteralab.decision.report import finalize
    from iteralab.evidence.bundle import pack, seal
    from iteralab.evidence.rerun import rerun
    from iteralab.evidence.verify import audit_campaign

    out = scoring_campaign(tmp_path, model, variants=variants, extra=COUNTED, run=run,
                           reproduction='[reproduction]\ntarget = "bounded"\nbound = 1e-4\n')
    finalize([out])
    assert (out / "stats.txt").is_file() and (out / "decision.md").is_file() and (out / "report.html").is_file()
    seal(out)
    archive, _ = pack(out, tmp_path / "bundle.tar.gz")
    assert Path(archive).is_file()
    report = audit_campaign(out)
    assert not report.differences, report.differences
    return out, {"report": report, "rerun": rerun(out, tmp_path / "again")}


def assert_answered(out: Path, result: dict, names: set[str]) -> None:
    from iteralab.campaign.folder import CampaignFolder

    rows = CampaignFolder.open(out).raw_rows()
    assert {r.variant for r in rows} == names
    assert all(r.status == "ok" and r.corpus_accepted for r in rows), [(r.variant, r.notes) for r in rows]
    assert all(r.max_abs_score_diff is not None and r.max_abs_score_diff <= 1e-4 for r in rows)
    assert result["report"].accepted == len(rows)
    decision = json.loads((out / "decision.json").read_text(encoding="utf-8"))
    assert decision["configuration_per_machine"] and decision["decision"]
    assert "metric ndcg_at_k >=" in (out / "decision.md").read_text(encoding="utf-8")
    variants = result["rerun"]["comparison"]["variants"]
    assert set(variants) == names
    assert all(p["common_ids"] == 24 and p["max_abs_prob_diff"] <= 1e-4 for v in variants.values() for p in v["pairs"])


@pytest.mark.slow
def test_a_callable_scoring_job_end_to_end_on_the_local_engines(tmp_path):
    out, result = chain(tmp_path, CALLABLE, LOCAL_VARIANTS)
    assert_answered(out, result, {"b2", "b4", "dp2"})


@pytest.mark.slow
def test_a_cross_encoder_scoring_job_end_to_end_on_the_local_engines(tmp_path):
    folder = tiny_cross_encoder_dir(tmp_path / "cross-encoder")
    out, result = chain(tmp_path, f'kind = "hf_cross_encoder"\npath = "{folder}"\n', LOCAL_VARIANTS)
    assert_answered(out, result, {"b2", "b4", "dp2"})


@pytest.mark.ray
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed (pip install iteralab[ray])")
@pytest.mark.parametrize("scorer", ["callable", "cross-encoder"])
def test_a_scoring_job_end_to_end_on_ray(tmp_path, scorer):
    model = CALLABLE if scorer == "callable" else \
        f'kind = "hf_cross_encoder"\npath = "{tiny_cross_encoder_dir(tmp_path / "cross-encoder")}"\n'
    out, result = chain(tmp_path, model, RAY_VARIANTS, run=f'isolation = "inprocess"\n{RAY_RUN}')
    assert_answered(out, result, {"b2", "ray"})


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["bf16", "int8-dynamic"])
def test_a_cheaper_precision_moves_a_cross_encoders_scores_and_the_kind_measures_by_how_much(tmp_path, precision):
    from iteralab.campaign.folder import CampaignFolder

    folder = tiny_cross_encoder_dir(tmp_path / "cross-encoder")
    variants = f"""
[[variants]]
name = "b2"
batch_size = 2

[[variants]]
name = "cheap"
batch_size = 2
precision = "{precision}"
"""
    out = scoring_campaign(tmp_path, f'kind = "hf_cross_encoder"\npath = "{folder}"\n', variants=variants,
                           min_tau=-1.0, extra=COUNTED)
    rows = {r.variant: r for r in CampaignFolder.open(out).raw_rows()}
    assert all(r.status == "ok" for r in rows.values()), [r.error for r in rows.values()]
    assert rows["b2"].max_abs_score_diff == 0.0 and rows["b2"].min_kendall_tau == 1.0  # the reference itself
    cheap = rows["cheap"]
    assert cheap.max_abs_score_diff is not None and cheap.max_abs_score_diff > 0, cheap.notes
    assert cheap.score_diff_at_quantile <= cheap.max_abs_score_diff
    assert -1.0 <= cheap.min_kendall_tau <= cheap.median_kendall_tau <= 1.0
