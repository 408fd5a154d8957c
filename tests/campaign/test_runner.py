import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import fake_models
from campaign_factory import callable_campaign, write_corpus_csv
from iteralab.errors import CorpusError, ProtocolError

STRATUM_SUBGROUP = '[[subgroups]]\nname = "length"\nby = "stratum"\ngating = true\n'
from iteralab.campaign.journal import read_journal
from iteralab.lock.inputs import lock
from iteralab.evidence.run import run_campaign
from iteralab.evidence.table import COLUMNS, read_raw_table, write_raw_table
from iteralab.campaign.kinds.expected import load_expected
from iteralab.campaign.verdict.evaluate import campaign_protocol, evaluate_file
from iteralab.campaign.kinds.classification.output import encode, schema
from protocol_factory import VARIANTS, protocol_toml, write_protocol

TESTS = (Path(__file__).resolve().parents[1] / "support")


@pytest.fixture(autouse=True)
def _reset_calls():
    fake_models.CALLS.clear()


def test_campaign_rows_verdicts_and_files(tmp_path):
    protocol = callable_campaign(tmp_path, subgroups='[[subgroups]]\nname = "length"\nby = "stratum"\ngating = true\n')
    out = tmp_path / "out"
    summary = run_campaign(protocol, out)
    rows = read_raw_table(out / "raw_table.csv")
    assert list(rows[0]) == list(COLUMNS)
    assert len(rows) == 4 and summary["passes_total"] == 4
    # rotated order: b1 first in round 1, b4 first in round 2
    assert [(r["round"], r["position"], r["variant"]) for r in rows] == [
        ("1", "1", "b1"), ("1", "2", "b4"), ("2", "1", "b4"), ("2", "2", "b1")]
    for r in rows:
        assert r["status"] == "ok"
        assert r["expected_ids"] == "12" and r["observed_ids"] == "12"
        assert r["ids_match"] == "true" and r["corpus_accepted"] == "true"
        assert float(r["metric"]) == pytest.approx(1.0)
        assert r["compile_s"] == "" and "compile_s: empty" in r["notes"]
        assert float(r["pass_s"]) > 0 and float(r["load_s"]) >= 0
        pred = out / r["prediction_file"]
        assert set(pq.read_table(pred).column("id").to_pylist()) == {f"d{i:02d}" for i in range(12)}
    # batch 4 -> 3 calls per pass, batch 1 -> 12 calls per pass (+ warm-up calls of 2 inputs)
    assert sorted(set(fake_models.CALLS)) == [1, 2, 4]
    assert not list((out / "predictions").glob(".tmp-*"))


def test_run_refuses_unlocked_and_changed_protocol(tmp_path):
    protocol = callable_campaign(tmp_path, locked=False)
    with pytest.raises(ProtocolError, match="not locked"):
        run_campaign(protocol, tmp_path / "out")
    lock(protocol)
    protocol.write_text(protocol.read_text().replace("threshold = 0.0", "threshold = 0.5"))
    with pytest.raises(ProtocolError, match="changed after it was locked"):
        run_campaign(protocol, tmp_path / "out")
    assert not (tmp_path / "out" / "journal.jsonl").exists()


def test_run_refuses_series_with_two_factors(tmp_path, monkeypatch):
    import iteralab.plan.lockfile as lockfile_module

    variants = VARIANTS.replace("batch_size = 4", 'batch_size = 4\nbucketing = true')
    with pytest.raises(ProtocolError, match="also differ in bucketing"):
        callable_campaign(tmp_path, variants=variants)  # lock() itself checks the series now
    assert not (tmp_path / "protocol.toml.lock.json").exists()
    # a lock written without that check (an older lock file): run still refuses
    monkeypatch.setattr(lockfile_module, "check_series", lambda *a, **k: None)
    protocol = callable_campaign(tmp_path, variants=variants)
    monkeypatch.undo()
    with pytest.raises(ProtocolError, match="also differ in bucketing"):
        run_campaign(protocol, tmp_path / "out")


def test_run_refuses_other_protocol_version_in_same_folder(tmp_path):
    protocol = callable_campaign(tmp_path, passes=1)
    run_campaign(protocol, tmp_path / "out")
    protocol.write_text(protocol_toml(model='kind = "callable"\ncallable = "fake_models:keyword_classifier"',
                                      passes=1, version=2))
    lock(protocol)
    from iteralab.errors import RunError

    with pytest.raises(RunError, match="holds a campaign of protocol 'test-protocol' version 1") as err:
        run_campaign(protocol, tmp_path / "out")
    assert "never pooled" in err.value.hint


def _write_pred(path: Path, ids):
    """Every id labelled 'plot': a Parquet file as a pass writes it."""
    probs = np.tile(np.asarray([0.8, 0.1, 0.1], dtype=np.float32), (len(ids), 1))
    path.write_bytes(encode(pa.array(ids, pa.string()), ["plot", "fresh", "rotten"], probs))


@pytest.mark.parametrize("mutate, field", [
    (lambda ids: ids + [ids[0]], "duplicates"),
    (lambda ids: ids[1:], "missing"),
    (lambda ids: ids + ["zz"], "extra"),
])
def test_ids_mismatch_is_not_accepted(tmp_path, mutate, field):
    protocol = callable_campaign(tmp_path, passes=1)
    out = tmp_path / "out"
    run_campaign(protocol, out)
    expected = load_expected(out, campaign_protocol(out).corpus.classes)
    pred = tmp_path / "p.parquet"
    _write_pred(pred, mutate(expected.ids.to_pylist()))
    v = evaluate_file(pred, campaign_protocol(out), expected).to_json()
    assert v["ids_match"] is False and v[field] == 1
    # The same through the table: edit a stored prediction file -> its row is no longer accepted.
    state = read_journal(out / "journal.jsonl")
    first = state.order[0]
    _write_pred(out / "predictions" / f"{first}.parquet", mutate(expected.ids.to_pylist()))
    rows = {r["pass_id"]: r for r in read_raw_table(write_raw_table(out))}
    assert rows[first]["ids_match"] == "false" and rows[first]["corpus_accepted"] == "false"
    assert "sha256" in rows[first]["notes"]


def test_format_problems_are_named(tmp_path):
    protocol = callable_campaign(tmp_path, passes=1)
    out = tmp_path / "out"
    run_campaign(protocol, out)
    expected = load_expected(out, campaign_protocol(out).corpus.classes)
    ids = expected.ids.to_pylist()
    # A label that is no class and probabilities that do not sum to 1, named by row (the labels plain strings,
    # which the reader takes as it takes the writer's dictionary codes).
    labels = ["plot"] * len(ids)
    labels[3] = "meh"
    probs = np.tile(np.asarray([0.8, 0.1, 0.1], dtype=np.float32), (len(ids), 1))
    probs[5] = [0.5, 0.1, 0.1]
    table = pa.Table.from_arrays([pa.array(ids), pa.array(labels),
                                  pa.FixedSizeListArray.from_arrays(pa.array(probs.reshape(-1)), 3)],
                                 schema=schema(3).set(1, pa.field("label", pa.string())))
    pq.write_table(table, tmp_path / "p.parquet")
    v = evaluate_file(tmp_path / "p.parquet", campaign_protocol(out), expected).to_json()
    assert v["format_ok"] is False and v["n_format_problems"] == 2
    assert v["format_problems"] == ["row 4: label 'meh' is not one of the classes", "row 6: probs sum to 0.700000, not 1"]


def test_simulated_oom_keeps_failure_row_without_smaller_batch_retry(tmp_path):
    variants = VARIANTS
    protocol = callable_campaign(tmp_path, fn="fake_models:oom_on_third_call", passes=1,
                                 warmup="inputs = 0\npasses = 0", variants=variants.replace('"b1", "b4"', '"b4", "b1"'))
    out = tmp_path / "out"
    run_campaign(protocol, out)
    rows = read_raw_table(out / "raw_table.csv")
    failed = [r for r in rows if r["status"] == "failed"]
    assert len(failed) == 1
    row = failed[0]
    assert row["variant"] == "b1"  # round 1 runs b1 first: calls 1, 2 succeed, the third raises
    assert row["completed"] == "2" and row["expected_ids"] == "12"
    assert "OutOfMemoryError" in row["error"] and "no retry with a smaller batch" in row["notes"]
    assert row["pass_s"] == "" and row["corpus_accepted"] == "false" and row["ids_match"] == "false"
    assert row["retries"] == "0"
    # no smaller-batch retry: every call after the failure used the variant's own batch size
    assert fake_models.CALLS[:3] == [1, 1, 1]
    assert all(n == 4 for n in fake_models.CALLS[3:])
    # the partial prediction file holds the two completed inputs, and is kept as evidence
    assert pq.read_table(out / row["prediction_file"]).num_rows == 2


def test_resume_variant_retries_in_halves_and_counts(tmp_path):
    variants = """
[[variants]]
name = "b4"
batch_size = 4
resume = true
"""
    protocol = callable_campaign(tmp_path, fn="fake_models:oom_on_third_call", passes=1, reference="b4",
                                 warmup="inputs = 0\npasses = 0", variants=variants)
    out = tmp_path / "out"
    run_campaign(protocol, out)
    row = read_raw_table(out / "raw_table.csv")[0]
    assert row["status"] == "ok" and row["retries"] == "1" and row["completed"] == "12"
    assert "retried in halves" in row["notes"]


def _with_tests_path():
    """The tests folder first, then the caller's own path (so child processes run the code under test)."""
    path = os.environ.get("PYTHONPATH", "")
    return str(TESTS) + (os.pathsep + path if path else "")


def _run_cli(args, env=None):
    env = dict(os.environ, PYTHONPATH=_with_tests_path(), **(env or {}))
    return subprocess.Popen([sys.executable, "-m", "iteralab.cli", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_kill_9_mid_pass_leaves_aborted_row_and_resumes(tmp_path):
    protocol = callable_campaign(tmp_path, fn="fake_models:slow_classifier", passes=2,
                                 warmup="inputs = 0\npasses = 0")
    out = tmp_path / "out"
    proc = _run_cli(["run", str(protocol), "--out", str(out), "--json"], env={"FAKE_MODEL_DELAY": "0.1"})
    journal = out / "journal.jsonl"
    deadline = time.time() + 60
    while time.time() < deadline:
        state = read_journal(journal)
        if len(state.finished) >= 1 and len(state.order) >= 2:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    state = read_journal(journal)
    finished_before = set(state.finished)
    assert finished_before and state.aborted()
    aborted = state.aborted()[0]
    rows = {r["pass_id"]: r for r in read_raw_table(write_raw_table(out))}
    assert rows[aborted]["status"] == "aborted" and rows[aborted]["corpus_accepted"] == "false"
    assert rows[aborted]["pass_s"] == "" and "aborted" in rows[aborted]["notes"]
    assert not (out / "predictions" / f"{aborted}.parquet").exists()
    # resume: finished passes are kept as they were, the interrupted slot gets a new attempt
    proc = _run_cli(["run", str(protocol), "--out", str(out), "--json"], env={"FAKE_MODEL_DELAY": "0"})
    assert proc.wait(timeout=120) == 0, proc.stderr.read()
    state = read_journal(journal)
    rows = read_raw_table(out / "raw_table.csv")
    assert len(rows) == 5  # 4 slots + the aborted attempt
    assert [r["status"] for r in rows].count("aborted") == 1
    assert sum(r["corpus_accepted"] == "true" for r in rows) == 4
    assert finished_before <= set(state.finished)
    retry = aborted.replace("-a1", "-a2")
    assert retry in state.finished


def test_worker_process_isolation(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", _with_tests_path())
    protocol = callable_campaign(tmp_path, passes=1, isolation="process")
    out = tmp_path / "out"
    run_campaign(protocol, out)
    rows = read_raw_table(out / "raw_table.csv")
    assert [r["corpus_accepted"] for r in rows] == ["true", "true"]
    assert all(r["cpu_peak_rss_bytes"] for r in rows)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["schema_version"] == 1


def test_tiny_hf_model_campaign(tmp_path, tiny_classifier_dir):
    write_corpus_csv(tmp_path)
    protocol = write_protocol(tmp_path, model=f'kind = "hf_classifier"\npath = "{tiny_classifier_dir}"',
                              threshold=0.0, tolerance=1.0)
    lock(protocol)
    out = tmp_path / "out"
    run_campaign(protocol, out)
    rows = read_raw_table(out / "raw_table.csv")
    assert len(rows) == 4 and all(r["ids_match"] == "true" for r in rows)
    assert all(r["precision"] == "fp32" for r in rows)
    manifest = json.loads((out / "manifest.json").read_text())
    text = json.dumps(manifest)
    assert "model.safetensors" in text


def test_stratum_subgroup_is_evaluated_and_gates(tmp_path):
    protocol = callable_campaign(tmp_path, passes=1,
                                 subgroups='[[subgroups]]\nname = "length"\nby = "stratum"\ngating = true\n')
    out = tmp_path / "out"
    run_campaign(protocol, out)
    row = read_raw_table(out / "raw_table.csv")[0]
    assert set(json.loads(row["subgroup_metrics"])) == {"length:long", "length:short"}
    assert row["subgroups_ok"] == "true"


def test_empty_or_undeclared_stratum_cells_are_refused_at_lock(tmp_path):
    protocol = callable_campaign(tmp_path, passes=1, locked=False, subgroups=STRATUM_SUBGROUP)
    csv_path = tmp_path / "corpus.csv"
    original = csv_path.read_text()
    lines = original.splitlines()
    lines[3] = lines[3].rsplit(",", 1)[0] + ","
    csv_path.write_text("\n".join(lines) + "\n")
    with pytest.raises(CorpusError) as err:
        lock(protocol)
    assert str(err.value) == f"{csv_path} line 4, id 'd02': empty stratum cell (declared: short 0-8, long 9+)"
    lines[3] = lines[3] + "medium"
    csv_path.write_text("\n".join(lines) + "\n")
    with pytest.raises(CorpusError) as err:
        lock(protocol)
    assert str(err.value) == (f"{csv_path} line 4, id 'd02': stratum 'medium' is not declared in corpus.strata "
                              "(short 0-8, long 9+)")
    assert not (tmp_path / "protocol.toml.lock.json").exists()


def test_stratum_disagreeing_with_the_tokenizer_is_refused_by_run(tmp_path):
    protocol = callable_campaign(tmp_path, passes=1, subgroups=STRATUM_SUBGROUP)
    csv_path = tmp_path / "corpus.csv"
    text = csv_path.read_text()
    assert '"d01",' not in text and "d01,good fun,fresh,short" in text
    lock_file = tmp_path / "protocol.toml.lock.json"
    before = lock_file.read_bytes()
    csv_path.write_text(text.replace("d01,good fun,fresh,short", "d01,good fun,fresh,long"))
    with pytest.raises(CorpusError) as err:
        run_campaign(protocol, tmp_path / "out")
    assert str(err.value) == (f"{csv_path} line 3, id 'd01': stratum 'long' (9+ tokens) but the model's tokenizer "
                              "counts 4 tokens ('short')")
    assert lock_file.read_bytes() == before and not (tmp_path / "out" / "journal.jsonl").exists()


def test_missing_prediction_file_is_named_not_crashing(tmp_path):
    protocol = callable_campaign(tmp_path, passes=1)
    out = tmp_path / "out"
    run_campaign(protocol, out)
    first = read_journal(out / "journal.jsonl").order[0]
    (out / "predictions" / f"{first}.parquet").unlink()
    rows = {r["pass_id"]: r for r in read_raw_table(write_raw_table(out))}
    assert rows[first]["corpus_accepted"] == "false"
    assert f"prediction file {first}.parquet is missing" in rows[first]["notes"]


def test_the_runner_leaves_scikit_learn_to_after_the_corpus_scan():
    """Importing the run orchestrator loads neither scikit-learn nor the scipy and pandas it brings: the runner
    imports them before its first worker, after the corpus scan, so that they reuse the heap the scan's batches
    gave back. Loaded with the runner, they raised a 200,000-document run's peak RSS by the scan's batches
    (bench/bench_scale.py's growth per document, 95 -> 131 bytes)."""
    code = ("import sys, iteralab.evidence.run, iteralab.campaign.runner; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'sklearn', 'scipy', 'pandas'}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=_with_tests_path()))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_a_callable_pass_never_imports_torch_and_reports_its_start_up(tmp_path):
    """The fixed cost of a pass: a worker running a Python callable imports neither torch nor sklearn (nor pandas,
    which ``pa.array``/``pa.scalar`` would import: half a second per worker), nor pydantic and the protocol's models
    (a pass reads its spec, not the protocol: with them a worker held 70 more modules and 10 MB more), and its
    start-up phases (process start, imports, environment record, runtime) are in its result (R2)."""
    from iteralab.campaign.runner import Slot, pass_spec, prepare
    from iteralab.plan.protocol import load_protocol

    protocol_path = callable_campaign(tmp_path, passes=1)
    out = tmp_path / "out"
    campaign = prepare(protocol_path, out)
    spec = pass_spec(campaign, load_protocol(protocol_path), out, Slot(1, 1, "b4", 0), "r01-p01-b4-a1")
    spec_path, result_path = tmp_path / "spec.json", tmp_path / "result.json"
    spec_path.write_text(json.dumps(spec.with_changes(spawned_at=time.time()).to_json()))
    code = ("import sys\nfrom iteralab.campaign.engines.passes import worker_main\nworker_main(sys.argv[1:])\n"
            "print(sorted(m for m in ('torch', 'sklearn', 'transformers', 'pandas', 'pydantic',\n"
            "                         'iteralab.plan.protocol') if m in sys.modules))\n")
    env = dict(os.environ, PYTHONPATH=_with_tests_path())
    proc = subprocess.run([sys.executable, "-c", code, str(spec_path), str(result_path)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stderr
    result = json.loads(result_path.read_text())
    assert result["status"] == "ok" and result["completed"] == 12
    assert set(result["startup"]) == {"process_start_s", "imports_s", "environment_s", "runtime_s"}
    assert all(v is not None and v >= 0 for v in result["startup"].values())
    assert result["environment"]["device_inventory"]["torch"] is None
    assert "callable" in result["environment"]["device_inventory"]["runtime_reason"]


def test_sigterm_to_run_kills_its_pass_worker(tmp_path):
    """SIGTERM (what a scheduler or `kill` sends) ends the runner and its worker: no orphan writes later."""
    import reliability_support as rs

    protocol = callable_campaign(tmp_path, fn="fake_models:slow_classifier", passes=1, isolation="process")
    out = tmp_path / "out"
    proc = _run_cli(["run", str(protocol), "--out", str(out)], env={"FAKE_MODEL_DELAY": "2"})
    deadline = time.monotonic() + 60
    worker = None
    while worker is None and time.monotonic() < deadline:
        worker = rs.worker_of(proc.pid)
        time.sleep(0.1)
    assert worker is not None, proc.stderr.read()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143
    for _ in range(100):
        if not rs.alive(worker[0]):
            break
        time.sleep(0.1)
    assert not rs.alive(worker[0])  # killed with its runner, not left to write into the campaign
    assert not list((out / "predictions").glob("*.parquet"))


def test_a_pass_spec_names_its_files_by_absolute_paths(tmp_path, monkeypatch):
    """A campaign folder given relative (``run … --out camp``) still gives a pass absolute file paths: a Ray
    cluster's workers do not run in the runner's working directory (measured: its read of camp/inputs/corpus.csv
    failed with 'No such file or directory')."""
    from iteralab.campaign.runner import Slot, pass_spec, prepare
    from iteralab.plan.protocol import load_protocol

    protocol_path = callable_campaign(tmp_path, passes=1)
    monkeypatch.chdir(tmp_path)
    campaign = prepare(protocol_path, Path("camp"))
    spec = pass_spec(campaign, load_protocol(protocol_path), Path("camp"), Slot(1, 1, "b4", 0),
                      "r01-p01-b4-a1").to_json()
    for key in ("corpus_path", "prediction_dir", "scratch_dir"):
        assert Path(spec[key]).is_absolute() and Path(spec[key]).is_relative_to(tmp_path / "camp"), (key, spec[key])
    assert Path(spec["corpus_path"]).is_file()


def test_the_raw_table_reuses_the_reference_comparisons_made_as_passes_were_evaluated(tmp_path, monkeypatch):
    """Each pass is compared with the reference pass while the run evaluates it, so the raw table written at the
    end reads again only the passes evaluated before the reference pass existed; its rows equal those of a
    fresh read of the folder."""
    from iteralab.campaign.kinds.classification import output as classification_output
    from iteralab.campaign.verdict import evaluate
    from iteralab.campaign.runner import run_passes
    from iteralab.evidence.table import build_rows

    protocol = callable_campaign(tmp_path, passes=3, isolation="inprocess")
    out = tmp_path / "out"
    reads = evaluate.CampaignReads(out)
    run_passes(protocol, out, shared=reads)
    state = read_journal(out / "journal.jsonl")
    order = [state.started[pid]["variant"] for pid in state.order]
    reference = campaign_protocol(out).metric.reference_variant
    before_reference = order.index(reference)
    files: list[str] = []
    real = classification_output.read_predictions
    monkeypatch.setattr(classification_output, "read_predictions",
                        lambda path, *a, **kw: files.append(path.name) or real(path, *a, **kw))
    shared_rows = build_rows(out, reads.reader, reads.context)
    # the passes before the reference, and the reference itself to compare them with (the last file is cached)
    assert len(files) <= before_reference + 1 < len(order)
    monkeypatch.setattr(classification_output, "read_predictions", real)
    fresh_rows = build_rows(out)
    assert shared_rows == fresh_rows
    assert all(r["label_agreement"] is not None for r in fresh_rows if r["status"] == "ok")
