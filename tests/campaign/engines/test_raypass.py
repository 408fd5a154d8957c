"""The verified pass on Ray Data (X4), on a local Ray of 2 CPUs, with a tiny BERT or a Python-callable workload.

Few and short on purpose (each campaign starts its own Ray, a few seconds): one campaign lock → run → verify →
decide comparing the two engines, a failing batch, a SIGKILL of the runner during a Ray pass and its resume.
The refused actor layout and the missing-Ray error need no Ray."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from campaign_factory import callable_campaign
import fake_models
from iteralab.campaign.engines.raypass import ray_installed
from iteralab.campaign.journal import read_journal
from iteralab.cli import main
from iteralab.errors import ProtocolError
from iteralab.evidence.run import run_campaign
from iteralab.evidence.table import read_raw_table, write_raw_table
from iteralab.plan.engines import layout_problem
from iteralab.plan.protocol import parse_protocol
from protocol_factory import protocol_toml
from ray_jobs import RAY_ONLY, RAY_RUN, TESTS

needs_ray = pytest.mark.skipif(not ray_installed(), reason="Ray is not installed (pip install iteralab[ray])")

TWO_ENGINES = RAY_RUN + """
[[variants]]
name = "b4"
batch_size = 4

[[variants]]
name = "b4-ray"
batch_size = 4
engine = "ray"

[[series]]
name = "engine"
factor = "engine"
variants = ["b4", "b4-ray"]
"""


@pytest.fixture(autouse=True)
def _worker_path(monkeypatch):
    """Ray's workers import the callable (tests/support/fake_models.py) and this checkout's code from PYTHONPATH."""
    import iteralab

    src = str(Path(iteralab.__file__).parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), src]))
    fake_models.CALLS.clear()


def _events(out: Path, name: str) -> list[dict]:
    return [r for r in map(json.loads, (out / "journal.jsonl").read_text().splitlines()) if r["event"] == name]


@needs_ray
def test_ray_and_local_engines_in_one_campaign_lock_run_verify_decide(tmp_path, capsys, tiny_classifier_dir):
    import torch
    from campaign_factory import write_corpus_csv

    write_corpus_csv(tmp_path)
    # the actor runs as many torch threads as a fresh local worker, so the two passes' manifests agree
    variants = TWO_ENGINES.replace("ray_num_cpus = 2\n", f"ray_num_cpus = 2\nray_threads_per_actor = "
                                                           f"{torch.get_num_threads()}\n")
    protocol = tmp_path / "protocol.toml"
    protocol.write_text(protocol_toml(model=f'kind = "hf_classifier"\npath = "{tiny_classifier_dir}"', passes=1,
                                      variants=variants, reference="b4", threshold=0.0, tolerance=1.0,
                                      isolation="process"), encoding="utf-8")
    out = tmp_path / "out"
    assert main(["lock", str(protocol)]) == 0
    capsys.readouterr()
    assert main(["run", str(protocol), "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["passes_total"] == 2  # Ray's own messages stay off stdout
    rows = {r["variant"]: r for r in read_raw_table(out / "raw_table.csv")}
    ray_row, local_row = rows["b4-ray"], rows["b4"]
    for row in (ray_row, local_row):
        assert row["status"] == "ok" and row["ids_match"] == "true" and row["corpus_accepted"] == "true"
        assert row["completed"] == "12" and float(row["pass_s"]) > 0
        assert row["manifest_diff"] == ""  # same software, threads and determinism options in both engines
    assert "engine: ray" in ray_row["notes"] and "engine: ray" not in local_row["notes"]
    assert (ray_row["engine"], local_row["engine"]) == ("ray", "local")  # a column of its own, not only the notes
    assert ray_row["load_s"] != "" and ray_row["warmup_s"] != ""  # timed inside the actor, apart from pass_s
    # the Ray pass is compared with the reference (local) pass: a figure must be there, not an empty cell
    assert ray_row["max_abs_prob_diff"] != "" and float(ray_row["max_abs_prob_diff"]) < 1e-4
    assert ray_row["label_agreement"] != "" and float(ray_row["label_agreement"]) == 1.0
    ray_file, local_file = (pq.read_table(out / r["prediction_file"]) for r in (ray_row, local_row))
    by_id = lambda t: dict(zip(t.column("id").to_pylist(), t.column("label").to_pylist()))
    assert by_id(ray_file) == by_id(local_file) and ray_file.num_rows == 12
    # the file is in corpus order whatever order Ray returned the blocks in (the order hash records that order)
    assert ray_file.column("id").to_pylist() == local_file.column("id").to_pylist() == [f"d{i:02d}" for i in range(12)]
    assert "as received by the driver, the file in corpus order" in ray_row["notes"]
    # campaign start-up: Ray started and stopped once, journaled; the pass's actor start reported apart
    [started], [stopped] = _events(out, "engine_started"), _events(out, "engine_stopped")
    assert started["cpus"] == 2 and started["nodes"] == 1 and started["init_s"] > 0 and stopped["shutdown_s"] >= 0
    finished = read_journal(out / "journal.jsonl").finished[ray_row["pass_id"]]
    assert finished["startup"]["ray_actor_start_s"] > 0 and len(finished["startup"]["ray_actors"]) == 1
    # the actor ran like a local worker: at the runner's priority (not Ray's nice 15 for its workers) and with
    # OpenMP started for the declared torch threads (not Ray's OMP_NUM_THREADS = the actor's 1 CPU)
    [actor] = finished["startup"]["ray_actors"]
    assert actor["nice"] == os.nice(0) and actor["omp_num_threads"] == str(torch.get_num_threads())
    manifest = json.loads((out / "manifest.json").read_text())
    ray_facts = manifest["extra"]["ray"]
    import ray

    assert ray_facts["ray_version"] == ray.__version__ and ray_facts["gpus"] == 0
    assert ray_facts["layout"] == {"actors": 1, "cpus_per_actor": 1.0, "threads_per_actor": torch.get_num_threads(),
                                   "no_progress_timeout_s": 60.0, "gpus_per_actor_of_a_gpu_variant": 1.0}
    assert main(["verify", str(out), "--unsealed"]) == 0
    assert capsys.readouterr().out.startswith("verified: 2 passes, 2 accepted")
    assert main(["decide", str(out), "--json"]) == 0
    decision = json.loads(capsys.readouterr().out)
    [machine] = decision["configuration_per_machine"]
    assert machine["variant"] in ("b4", "b4-ray")


@pytest.mark.ray  # a local Ray of its own: CI's one-process step runs it (.ci/run); test_raypass keeps one in the default run
@needs_ray
def test_a_failing_batch_or_a_lost_actor_fails_the_ray_pass_with_the_inputs_received(tmp_path):
    # the lost actor's pass may end only by the no-progress timeout: a short one keeps the test short
    variants = RAY_RUN.replace("ray_no_progress_timeout_s = 60", "ray_no_progress_timeout_s = 20") + """
[[variants]]
name = "b4-ray"
batch_size = 4
engine = "ray"

[[variants]]
name = "b1-ray"
batch_size = 1
engine = "ray"
"""
    protocol = callable_campaign(tmp_path, fn="fake_models:fail_or_die", passes=1, variants=variants,
                                 reference="b4-ray", warmup="inputs = 0\npasses = 0")
    out = tmp_path / "out"
    run_campaign(protocol, out)
    rows = {r["variant"]: r for r in read_raw_table(out / "raw_table.csv")}
    for row in rows.values():
        assert row["status"] == "failed" and row["corpus_accepted"] == "false" and row["ids_match"] == "false"
        completed = int(row["completed"])
        assert 0 <= completed < 12
        assert f"failed after {completed} of 12 inputs" in row["notes"] and row["pass_s"] == ""
        assert pq.read_table(out / row["prediction_file"]).num_rows == completed  # exactly what was received
    assert rows["b4-ray"]["error"].startswith("ValueError: weak script is not supported")  # the workload's error
    # the lost actor is never replaced: Ray reports it dead, or (its tasks unfinished, no actor left) the pass
    # makes no progress and the protocol's no-progress timeout fails it
    assert rows["b1-ray"]["error"].startswith(("ActorDiedError", "ExecutionTimeoutError"))


def _run_cli(args, env):
    return subprocess.Popen([sys.executable, "-m", "iteralab.cli", *args], env={**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@needs_ray
def test_kill_9_during_a_ray_pass_leaves_an_aborted_row_and_resumes(tmp_path):
    protocol = callable_campaign(tmp_path, fn="fake_models:marking_slow_classifier", passes=1, variants=RAY_ONLY,
                                 reference="b4-ray", warmup="inputs = 0\npasses = 0")
    out, mark = tmp_path / "out", tmp_path / "batch-running"
    proc = _run_cli(["run", str(protocol), "--out", str(out), "--json"],
                    env={"FAKE_MODEL_DELAY": "0.5", "FAKE_MODEL_MARK": str(mark)})
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None and not mark.exists():
        time.sleep(0.1)
    assert proc.poll() is None and mark.exists(), proc.stderr.read()  # an actor is inside the Ray pass
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    state = read_journal(out / "journal.jsonl")
    [aborted] = state.aborted()
    assert not state.finished
    rows = {r["pass_id"]: r for r in read_raw_table(write_raw_table(out))}
    assert rows[aborted]["status"] == "aborted" and rows[aborted]["corpus_accepted"] == "false"
    assert not list((out / "predictions").iterdir())  # no prediction file, nothing partial counted
    proc = _run_cli(["run", str(protocol), "--out", str(out), "--json"], env={"FAKE_MODEL_DELAY": "0"})
    assert proc.wait(timeout=240) == 0, proc.stderr.read()
    rows = read_raw_table(out / "raw_table.csv")
    assert [(r["pass_id"], r["status"]) for r in rows] == [(aborted, "aborted"), (aborted.replace("-a1", "-a2"), "ok")]
    assert rows[1]["corpus_accepted"] == "true" and rows[1]["ids_match"] == "true"


def test_an_actor_layout_that_leaves_no_cpu_for_reads_is_refused(tmp_path, capsys):
    assert layout_problem(1, 1.0, 2) is None and layout_problem(2, 0.5, 2) is None
    assert layout_problem(2, 1.0, 2).startswith("the Ray actor layout 2 actors × 1 CPU holds 2 of the cluster's 2")
    text = protocol_toml(model='kind = "callable"\ncallable = "fake_models:keyword_classifier"',
                         variants=RAY_ONLY.replace("ray_actors = 1", "ray_actors = 2"), reference="b4-ray")
    with pytest.raises(ProtocolError, match=r"key 'run': the Ray actor layout 2 actors × 1 CPU .* leaves less than "
                                            r"1 CPU for Ray Data's read tasks"):
        parse_protocol(text, "p.toml")
    path = tmp_path / "protocol.toml"
    path.write_text(text, encoding="utf-8")
    assert main(["lock", str(path)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith(f"Error: {path}: key 'run': the Ray actor layout 2 actors") and "Traceback" not in err


def test_a_local_ray_without_declared_cpus_is_checked_against_this_machine(monkeypatch):
    from iteralab.campaign.engines import raypass
    from iteralab.errors import RunError

    variants = RAY_ONLY.replace("ray_num_cpus = 2\n", "").replace("ray_actors = 1", "ray_actors = 2")
    text = protocol_toml(model='kind = "callable"\ncallable = "fake_models:keyword_classifier"', variants=variants,
                         reference="b4-ray")
    protocol = parse_protocol(text, "p.toml")  # the cluster's CPUs are not known when the protocol is read
    monkeypatch.setattr(raypass, "ray_installed", lambda: True)
    monkeypatch.setattr(raypass.os, "cpu_count", lambda: 2)
    with pytest.raises(RunError, match=r"^p.toml: the Ray actor layout 2 actors × 1 CPU holds 2 of the cluster's 2"):
        raypass.require_ray(protocol, "p.toml")
    monkeypatch.setattr(raypass.os, "cpu_count", lambda: 4)
    raypass.require_ray(protocol, "p.toml")  # 2 × 1 CPU on 4 CPUs leaves 2 for the reads


def test_missing_ray_is_one_line_with_the_install_hint(tmp_path, monkeypatch, capsys):
    protocol = callable_campaign(tmp_path, passes=1, variants=RAY_ONLY, reference="b4-ray")
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` sees without the extra installed
    assert main(["run", str(protocol), "--out", str(tmp_path / "out")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == f"Error: {protocol}: variant 'b4-ray' runs on engine \"ray\" but Ray is not installed"
    assert "pip install iteralab[ray]" in err[1] and len(err) == 2
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_completeness_comes_from_the_ids_only():
    """What Ray returns without an error is checked against the corpus ids: order is free, each id exactly once
    (Ray dropped a whole block without an exception when allowed to: max_errored_blocks is forced to 0, and a
    short or repeated output is still a failed row)."""
    import pyarrow as pa

    from iteralab.campaign.engines.raypass import _completeness

    expected = pa.array(["a", "b", "c", "d"])
    assert _completeness(pa.array(["c", "a", "d", "b"]), expected) is None
    assert _completeness(pa.array([], pa.string()), expected) == (
        "Ray returned 0 of 4 inputs without an error (0 repeated, 0 not in the corpus); the pass is not counted")
    assert "(1 repeated, 0 not in the corpus)" in _completeness(pa.array(["a", "a", "b", "c"]), expected)
    assert "(0 repeated, 1 not in the corpus)" in _completeness(pa.array(["a", "b", "c", "x"]), expected)
