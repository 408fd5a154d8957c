"""Data-parallel passes (X3, R8, R9, K1): N CPU worker processes here (a GPU machine gives each worker one card,
checked with a faked card count), the merged prediction file holding exactly the corpus's ids, failures with
the inputs completed on every device, a kill and a resume, pricing by lots, and a whole campaign."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from campaign_factory import TEXTS, callable_campaign, write_corpus_csv
from iteralab.campaign.engines import shards
from iteralab.campaign.engines.parallel import run_data_parallel
from iteralab.campaign.engines.shards import plan_shards, shard_tokens, worker_layout
from iteralab.campaign.journal import read_journal
from iteralab.cli import main
from iteralab.errors import ProtocolError, WorkloadError
from iteralab.evidence.table import read_raw_table, write_raw_table
from iteralab.plan.protocol import parse_protocol, series_violations
from parallel_jobs import DP_VARIANTS, dp_workers, worker_pythonpath
from protocol_factory import protocol_toml

CLASSES = ["plot", "fresh", "rotten"]


@pytest.fixture
def worker_path(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", worker_pythonpath())


def _rows(n: int) -> list[tuple[str, str, str]]:
    return [(f"d{i:03d}", TEXTS[i % len(TEXTS)][0], TEXTS[i % len(TEXTS)][1]) for i in range(n)]


def _spec(folder: Path, workers: int, rows, fn: str = "fake_models:keyword_classifier", batch: int = 2,
          device: str = "cpu", model: dict | None = None, warmup: int = 0) -> dict:
    corpus = write_corpus_csv(folder, rows=rows)
    (folder / "predictions").mkdir(exist_ok=True)
    return {"pass_id": "p1",
            "variant": {"name": "v", "batch_size": batch, "precision": "fp32", "bucketing": False,
                        "padding": "longest", "resume": False, "compile": False, "device": device,
                        "data_parallel": workers},
            "model": model or {"kind": "callable", "path": None, "head": None, "callable": fn, "max_length": 32,
                               "truncation": True, "trust_remote_code": False},
            "classes": CLASSES, "corpus_path": str(corpus), "prediction_dir": str(folder / "predictions"),
            "warmup": {"inputs": warmup, "passes": 1 if warmup else 0}, "pass_timeout_s": None, "device": device,
            "seed": 0, "deterministic": False}


def _ids(folder: Path, result: dict) -> list[str]:
    return pq.read_table(folder / result["prediction_file"]).column("id").to_pylist()


# --------------------------------------------------------------------------------------------- sharding


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 400), max_size=60), st.integers(1, 9))
def test_shards_are_contiguous_cover_every_row_once_and_are_balanced_within_one_document(lengths, n):
    bounds = plan_shards(np.asarray(lengths, dtype=np.int64), n)
    assert len(bounds) == n + 1 and bounds[0] == 0 and bounds[-1] == len(lengths)
    assert all(a <= b for a, b in zip(bounds, bounds[1:]))  # contiguous, in file order, no row twice
    tokens = shard_tokens(np.asarray(lengths, dtype=np.int64), bounds)
    weights = np.maximum(np.asarray(lengths, dtype=np.int64), 1)
    assert tokens.sum() == weights.sum()
    if len(lengths):
        assert np.abs(tokens - weights.sum() / n).max() <= weights.max()  # within one document of an even split


def test_a_thousand_documents_shard_well_within_the_ten_percent_target():
    rng = np.random.default_rng(0)
    lengths = np.concatenate([rng.integers(8, 40, 600), rng.integers(40, 120, 300), rng.integers(120, 256, 100)])
    rng.shuffle(lengths)
    for n in (2, 3, 7):
        tokens = shard_tokens(lengths, plan_shards(lengths, n))
        assert tokens.max() / tokens.min() <= 1.03, (n, tokens)  # target: 1.10


# ------------------------------------------------------------------------------------------ the merged ids


@pytest.mark.parametrize("workers, documents", [(1, 5), (2, 11), (3, 10), (7, 5)])
def test_merged_file_holds_exactly_the_corpus_ids(tmp_path, worker_path, workers, documents):
    rows = _rows(documents)
    result = run_data_parallel(_spec(tmp_path, workers, rows))
    assert result["status"] == "ok", result["error"]
    assert _ids(tmp_path, result) == [r[0] for r in rows]  # every id once, none padded, none missing, file order
    assert result["completed"] == documents and result["phases"]["pass_s"] > 0
    parallel = result["parallel"]
    assert [d["device"] for d in parallel["devices"]] == [f"cpu-process-{k}" for k in range(workers)]
    assert parallel["label"].startswith(f"{workers} CPU process") and "card" not in parallel["label"]
    assert [d["completed"] for d in parallel["devices"]] == [b - a for a, b in (s["rows"] for s in parallel["shards"])]
    assert set(parallel["device_pass_s"]) == {d["device"] for d in parallel["devices"]}
    if workers > documents:  # fewer documents than workers: some workers have an empty shard, said so
        assert parallel["token_imbalance"] is None
        assert any("fewer documents than workers" in n for n in result["notes"])


def test_tiny_bert_in_two_processes_shards_by_tokens_and_predicts_like_one(tmp_path, worker_path,
                                                                            tiny_classifier_dir):
    from iteralab.models.factory import WorkloadSpec, load_workload
    from iteralab.models.tokens import load_tokenizer, token_counter

    rows = _rows(13)
    model = {"kind": "hf_classifier", "path": str(tiny_classifier_dir), "head": None, "callable": None,
             "max_length": 32, "truncation": True, "trust_remote_code": False}
    result = run_data_parallel(_spec(tmp_path, 2, rows, batch=4, model=model, warmup=2))
    assert result["status"] == "ok", result["error"]
    parallel = result["parallel"]
    assert parallel["length_unit"] == "tokens" and parallel["threads_per_worker"] >= 1
    counts = np.minimum(token_counter(load_tokenizer(tiny_classifier_dir))([r[1] for r in rows]), 32)
    assert sum(s["cost"] for s in parallel["shards"]) == counts.sum()
    table = pq.read_table(tmp_path / result["prediction_file"])
    assert table.column("id").to_pylist() == [r[0] for r in rows]
    merged = table.column("probs").combine_chunks().values.to_numpy().reshape(len(rows), 3)
    single = load_workload(WorkloadSpec("hf_classifier", path=tiny_classifier_dir, classes=CLASSES, max_length=32))
    np.testing.assert_allclose(merged, single.predict([r[1] for r in rows]), atol=1e-5)
    # memory: each device's peak on its own; the row's cell is the largest of them, never their sum
    peaks = [d["memory"]["cpu_peak_rss_bytes"] for d in parallel["devices"]]
    assert result["memory"]["cpu_peak_rss_bytes"] == max(peaks) < sum(peaks)
    assert "never summed" in result["memory"]["scope"]


# ------------------------------------------------------------------------------------------------ failures


def test_a_worker_out_of_memory_fails_the_pass_with_the_inputs_completed_on_every_device(tmp_path, worker_path):
    rows = _rows(9)
    rows[7] = ("d007", "boom", "rotten")
    result = run_data_parallel(_spec(tmp_path, 2, rows, fn="fake_parallel_models:failing_classifier"))
    assert result["status"] == "failed" and result["error_kind"] == "oom"
    assert result["error"].startswith("cpu-process-1: OutOfMemoryError")
    (a0, b0), (a1, b1) = (s["rows"] for s in result["parallel"]["shards"])
    assert a1 <= 7 < b1  # the failing text is in the second shard
    done_second = (7 - a1) // 2 * 2  # the batches before the failing one
    assert [d["completed"] for d in result["parallel"]["devices"]] == [b0 - a0, done_second]
    assert result["completed"] == b0 - a0 + done_second
    assert _ids(tmp_path, result) == [r[0] for r in rows[:b0]] + [r[0] for r in rows[a1:a1 + done_second]]
    assert result["phases"]["pass_s"] is None
    assert any("not re-run on fewer devices" in n for n in result["notes"])


def test_a_worker_that_dies_fails_the_pass_and_its_count_is_unknown(tmp_path, worker_path):
    rows = _rows(8)
    rows[6] = ("d006", "crash", "rotten")
    result = run_data_parallel(_spec(tmp_path, 2, rows, fn="fake_parallel_models:dying_classifier"))
    assert result["status"] == "failed" and result["error_kind"] == "crash"
    assert "worker process ended (exit code 9)" in result["error"]
    devices = result["parallel"]["devices"]
    assert devices[0]["completed"] == devices[0]["expected"] and devices[1]["completed"] is None
    assert result["completed"] is None and any("completed: unknown" in n for n in result["notes"])
    first = result["parallel"]["shards"][0]["rows"]
    assert _ids(tmp_path, result) == [r[0] for r in rows[first[0]:first[1]]]  # only what is known to be done


def test_a_worker_failing_to_load_stops_the_pass_before_it_is_measured(tmp_path, worker_path):
    result = run_data_parallel(_spec(tmp_path, 2, _rows(4), fn="fake_parallel_models:no_such_function"))
    assert result["status"] == "failed" and result["completed"] == 0
    assert result["phases"]["pass_s"] is None and result["prediction_file"] is None
    assert any("failed before the measured pass" in n for n in result["notes"])


# ------------------------------------------------------------------------------------------- GPU layout


def test_each_gpu_worker_sees_one_card_and_fewer_cards_are_refused(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    layout = worker_layout("cuda", 2, gpu_count=lambda: 2)
    assert layout.kind == "gpu" and layout.describe() == "2 cards"
    assert [e["CUDA_VISIBLE_DEVICES"] for e in layout.envs] == ["0", "1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert [e["CUDA_VISIBLE_DEVICES"] for e in worker_layout("auto", 2, gpu_count=lambda: 2).envs] == ["3", "5"]
    with pytest.raises(WorkloadError, match="data_parallel = 3 needs 3 GPUs; this machine shows 2"):
        worker_layout("cuda", 3, gpu_count=lambda: 2)
    with pytest.raises(WorkloadError, match="sees no GPU"):
        worker_layout("cuda", 2, gpu_count=lambda: 0)
    cpu = worker_layout("auto", 2, gpu_count=lambda: 0)
    assert cpu.kind == "cpu" and "CPU processes" in cpu.describe() and "card" not in cpu.describe()
    assert all(e["CUDA_VISIBLE_DEVICES"] == "" and e["OMP_NUM_THREADS"] == str(cpu.threads) for e in cpu.envs)


def test_two_faked_cards_give_each_worker_process_its_own_card_before_it_starts(tmp_path, worker_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(shards, "visible_gpu_count", lambda: 2)
    seen = tmp_path / "env"
    seen.mkdir()
    monkeypatch.setenv("DP_ENV_DIR", str(seen))
    result = run_data_parallel(_spec(tmp_path, 2, _rows(7), fn="fake_parallel_models:env_recording_classifier",
                                     device="cuda"))
    assert result["status"] == "ok" and result["parallel"]["label"] == "2 cards"
    cards = {f.read_text().split("\t")[0] for f in seen.iterdir()}
    assert len(list(seen.iterdir())) == 2 and cards == {"0", "1"}  # two processes, one card each
    assert result["workload"]["device"] == "cuda:0,cuda:1"


# --------------------------------------------------------------------------------------------- protocol


def test_data_parallel_is_a_factor_of_its_own_series():
    protocol = parse_protocol(protocol_toml(variants=DP_VARIANTS))
    assert series_violations(protocol) == [] and protocol.variant("b4-dp2").data_parallel == 2
    mixed = DP_VARIANTS.replace('factor = "data_parallel"', 'factor = "batch_size"').replace(
        "batch_size = 4\ndata_parallel = 2", "batch_size = 8\ndata_parallel = 2")
    assert "also differ in data_parallel" in series_violations(parse_protocol(protocol_toml(variants=mixed)))[0]
    with pytest.raises(ProtocolError, match=r"b4-dp2\)\.data_parallel': Input should be greater than or equal to 1"):
        parse_protocol(protocol_toml(variants=DP_VARIANTS.replace("data_parallel = 2", "data_parallel = 0")))
    with pytest.raises(ProtocolError, match="names one card but data_parallel = 2"):
        parse_protocol(protocol_toml(variants=DP_VARIANTS.replace("data_parallel = 2",
                                                                  'data_parallel = 2\ndevice = "cuda:1"')))


# --------------------------------------------------------------------------------------------- pricing


def test_a_lot_is_priced_once_and_more_cards_than_a_lot_holds_need_more_lots(tmp_path):
    from iteralab.decision.note import render_decision
    from iteralab.decision.rule import decide
    from stats_campaigns import build_campaign

    times = [{"s": 4.0}, {"s": 4.1}, {"s": 3.9}]
    variants = {"b4": {"batch_size": 4, "passes": times},
                "b4-dp2": {"batch_size": 4, "data_parallel": 2, "passes": [{"s": 2.1}, {"s": 2.0}, {"s": 2.2}]},
                "b4-dp4": {"batch_size": 4, "data_parallel": 4, "passes": [{"s": 1.1}, {"s": 1.0}, {"s": 1.2}]}}
    folder = build_campaign(tmp_path / "b200", hardware="b200", variants=variants,
                            series={"cards": ("data_parallel", list(variants))})
    decision = decide([folder])
    budgets = {c.variant: c.pricing.budget for c in decision.configs}
    assert (budgets["b4"].lots, str(budgets["b4"].total)) == (1, "2071.00")
    assert (budgets["b4-dp2"].lots, str(budgets["b4-dp2"].total)) == (1, "2071.00")  # both cards of one lot
    assert (budgets["b4-dp4"].lots, str(budgets["b4-dp4"].total)) == (2, "4142.00")
    note = render_decision(decision)
    assert "b4-dp4 runs data-parallel over 4 cards and a b200 lot holds 2 cards: it needs 2 lots" in note
    assert "b4-dp2 runs data-parallel over 2 cards and a b200 lot holds 2 cards: 1 lot priced once" in note


# ------------------------------------------------------------------------------------- whole campaigns


def test_campaign_lock_run_verify_decide_with_a_dp2_variant(tmp_path, worker_path, capsys):
    protocol = callable_campaign(tmp_path, passes=1, variants=DP_VARIANTS, locked=False)
    out = tmp_path / "out"
    assert main(["lock", str(protocol)]) == 0
    assert main(["run", str(protocol), "--out", str(out)]) == 0
    rows = {r["variant"]: r for r in read_raw_table(out / "raw_table.csv")}
    dp = rows["b4-dp2"]
    assert dp["status"] == "ok" and dp["ids_match"] == "true" and dp["corpus_accepted"] == "true"
    assert dp["data_parallel"] == "2" and rows["b4"]["data_parallel"] == "1" and rows["b4"]["shard_pass_s"] == ""
    assert set(json.loads(dp["shard_pass_s"])) == {"cpu-process-0", "cpu-process-1"}
    assert float(dp["shard_time_imbalance"]) >= 1.0 and float(dp["shard_token_imbalance"]) >= 1.0
    assert set(json.loads(dp["shard_memory"])) == {"cpu-process-0", "cpu-process-1"}
    assert "data-parallel over 2 CPU processes" in dp["notes"] and "card" not in dp["notes"]
    assert dp["order_hash"] == rows["b4"]["order_hash"]  # contiguous shards: the pass order is the file order
    assert main(["verify", str(out), "--unsealed"]) == 0
    capsys.readouterr()
    assert main(["decide", str(out), "--json"]) == 0
    configs = {c["variant"]: c for c in json.loads(capsys.readouterr().out)["configurations"]}
    assert configs["b4-dp2"]["accepted_deliveries"] == 1 and configs["b4-dp2"]["feasible"] is True


def _cli(args: list[str], **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "iteralab.cli", *args],
                            env=dict(os.environ, PYTHONPATH=worker_pythonpath(), **env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_sigkill_during_a_data_parallel_pass_leaves_an_aborted_row_and_resumes(tmp_path):
    protocol = callable_campaign(tmp_path, fn="fake_models:slow_classifier", passes=1, variants=DP_VARIANTS,
                                 warmup="inputs = 0\npasses = 0")
    out = tmp_path / "out"
    proc = _cli(["run", str(protocol), "--out", str(out), "--json"], FAKE_MODEL_DELAY="0.4")
    workers: list[psutil.Process] = []
    deadline = time.time() + 90
    while time.time() < deadline and proc.poll() is None:
        state = read_journal(out / "journal.jsonl") if (out / "journal.jsonl").exists() else None
        running = [p for p in (state.order if state else []) if p not in state.finished]
        workers = dp_workers(proc.pid)
        if running and "dp2" in running[0] and len(workers) == 2:
            break
        time.sleep(0.05)
    assert len(workers) == 2, "the data-parallel pass never started its workers"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    gone, alive = psutil.wait_procs(workers, timeout=20)
    assert not alive, "a worker outlived the killed runner"
    state = read_journal(out / "journal.jsonl")
    aborted = state.aborted()
    assert len(aborted) == 1 and "b4-dp2" in aborted[0]
    rows = {r["pass_id"]: r for r in read_raw_table(write_raw_table(out))}
    assert rows[aborted[0]]["status"] == "aborted" and rows[aborted[0]]["pass_s"] == ""
    assert not list((out / "predictions").glob(f"{aborted[0]}*"))  # no partial file, counted or not
    finished_before = {p: state.finished[p].get("prediction_sha256") for p in state.finished}
    again = _cli(["run", str(protocol), "--out", str(out), "--json"], FAKE_MODEL_DELAY="0")
    assert again.wait(timeout=120) == 0, again.stderr.read()
    state = read_journal(out / "journal.jsonl")
    rows = read_raw_table(out / "raw_table.csv")
    assert [r["status"] for r in rows].count("aborted") == 1 and len(rows) == 3
    assert sum(r["corpus_accepted"] == "true" for r in rows) == 2
    assert aborted[0].replace("-a1", "-a2") in state.finished
    assert all(state.finished[p].get("prediction_sha256") == h for p, h in finished_before.items())
