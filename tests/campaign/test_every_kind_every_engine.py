"""Every job kind on every engine, through the public entry points alone: for each kind (classification, embedding,
generation, scoring) one campaign on a tiny model built from a config, whose variants are the three engines — the reference
on the local engine, one data-parallel over 2 CPU processes, one on a local Ray — locked, run and verified with the
CLI, then judged from the campaign folder: every pass ok, each variant's outputs accepted against the reference's by
the kind's own verdict (the same labels, cosines at least ``min_cosine``, identical texts, scores within a bound), every prediction file
holding the corpus's ids in corpus order, and ``iteralab verify`` passing.

The module knows nothing of the engines' or the verdict's code: it writes a protocol, calls ``iteralab.cli.main``
and reads the stored files (the raw table through the campaign folder layer, the prediction files as Parquet).
Kept cheap: 10 documents, one pass per variant, no warm-up, and one local Ray of 2 CPUs (one actor) started once
for the module, which each campaign joins by ``run.ray_address`` instead of starting a Ray of its own."""

from __future__ import annotations

import csv
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import iteralab
from iteralab.campaign.folder import CampaignFolder
from iteralab.cli import main

pytestmark = [pytest.mark.ray,
              pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                 reason="Ray is not installed (pip install iteralab[ray])")]

TESTS = (Path(__file__).resolve().parents[1] / "support")
SRC = Path(iteralab.__file__).resolve().parents[1]
#: Words both tiny tokenizers know (tests/conftest.py's WordPiece, tests/support/tiny_generators.py's word level).
TEXTS = ("the cat sat on the mat", "what is the answer", "a good movie", "the dog and the cat", "one two three",
         "a short story of a day", "a bad film", "the red cat and the blue dog", "a great story", "why the night")
CLASSES = ("plot", "fresh", "rotten")
IDS = [f"d{i:02d}" for i in range(len(TEXTS))]
REFERENCE, ENGINES = "local", ("local", "dp2", "ray")
VARIANTS = """
[[variants]]
name = "local"
batch_size = 4

[[variants]]
name = "dp2"
batch_size = 4
data_parallel = 2

[[variants]]
name = "ray"
batch_size = 4
engine = "ray"
"""
RUN = """[run]
passes = 1
isolation = "inprocess"
device = "cpu"
ray_address = "{address}"
ray_actors = 1
ray_cpus_per_actor = 1
ray_no_progress_timeout_s = 120
"""
#: What each kind's section says, its model and metric, and how a variant must reproduce the reference.
KINDS = {
    "classification": {
        "task": "",
        "metric": 'name = "macro_f1"\nthreshold = 0.0\ntolerance = 1.0',
        # fp32 on one CPU: the probabilities move by float rounding at most, the labels not at all
        "reproduction": 'target = "bounded"\nbound = 1e-4',
    },
    "embedding": {
        "task": '[task]\nkind = "embedding"\n\n[embedding]\npooling = "mean"\nnormalize = true\nmin_cosine = 0.999\n',
        "metric": 'name = "knn_accuracy"\nk = 3\nthreshold = 0.0\ntolerance = 1.0',
        "reproduction": 'target = "acceptable"',
    },
    "generation": {
        "task": '[task]\nkind = "generation"\n\n[generation]\nmax_new_tokens = 4\n',
        "metric": 'name = "token_f1"\nthreshold = 0.0\nrelative_tolerance = 0.99',
        # greedy fp32 decoding: the same texts whatever the engine
        "reproduction": 'target = "identical"',
    },
    "scoring": {
        "task": '[task]\nkind = "scoring"\n\n[scoring]\nrelevance_column = "relevance"\nactivation = "sigmoid"\n'
                "min_kendall_tau = 0.99\n",
        "metric": 'name = "ndcg_at_k"\nk = 3\nthreshold = 0.0\ntolerance = 1.0',
        # fp32 on one CPU: a pair's score moves by float rounding at most, whatever the batch it was padded in
        "reproduction": 'target = "bounded"\nbound = 1e-4',
    },
}


def _protocol(kind: str, model: str, address: str) -> str:
    spec = KINDS[kind]
    columns = ('classes = []\nreference_column = "answer"' if kind == "generation" else "classes = []"
               if kind == "scoring" else f"classes = [{', '.join(f'{c!r}' for c in CLASSES)}]".replace("'", '"'))
    return f"""schema_version = 1
name = "{kind}-on-every-engine"
question = "Does every engine give the reference's outputs for this {kind} job?"

{spec["task"]}
[corpus]
path = "corpus.csv"
{columns}
stratum_column = ""

[model]
{model}
max_length = 40

[metric]
{spec["metric"]}
reference_variant = "{REFERENCE}"

[reproduction]
{spec["reproduction"]}

[warmup]
inputs = 0
passes = 0

# the data-parallel workers and the Ray actor measure their own passes' load, out of reach of the tests' quiet-
# machine patch: what this test checks is the engines' outputs, so a pass a neighbour loads is counted, and said so
[stats]
loaded_passes = "counted"

{RUN.format(address=address)}
{VARIANTS}
"""


def _write_corpus(folder: Path, kind: str) -> None:
    """Labels for the kinds judged by them; a reference answer (the text's last word) for generation; for scoring,
    each text paired with the next one, in three groups, every other pair relevant."""
    if kind == "scoring":
        with open(folder / "corpus.csv", "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(["id", "text", "text_pair", "group", "relevance"])
            for i, (doc, text) in enumerate(zip(IDS, TEXTS)):
                writer.writerow([doc, TEXTS[i % 3], text, f"g{i % 3}", i % 2])
        return
    labelled = kind != "generation"
    with open(folder / "corpus.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "text", "label" if labelled else "answer"])
        for i, (doc, text) in enumerate(zip(IDS, TEXTS)):
            writer.writerow([doc, text, CLASSES[i % len(CLASSES)] if labelled else text.split()[-1]])


def _worker_path() -> str:
    """The data-parallel workers and Ray's workers are fresh interpreters: they import this checkout's code."""
    return os.pathsep.join(p for p in (str(SRC), str(TESTS), os.environ.get("PYTHONPATH", "")) if p)


#: The module's Ray and its driver (the runner) agree on no token: Ray 2.5x turns token authentication on for a
#: cluster started where a token file exists (~/.ray/auth_token) and the driver would need that token.
NO_TOKEN = {"RAY_AUTH_MODE": "disabled"}


@pytest.fixture(autouse=True)
def _workers_import_this_checkout(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", _worker_path())
    for name, value in NO_TOKEN.items():
        monkeypatch.setenv(name, value)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """One local Ray of 2 CPUs for the module's campaigns (each connects to it by ``run.ray_address``), instead of
    a Ray started and stopped by every campaign: ``ray start --head --block`` in a process group of its own, on free
    ports (other Rays may run on the machine), stopped by signalling that group (killed when it is still draining
    after a few seconds: nothing of it is kept)."""
    port, log = _free_port(), tmp_path_factory.mktemp("ray") / "head.log"
    command = [str(Path(sys.executable).with_name("ray")), "start", "--head", "--block", "--num-cpus=2",
               "--num-gpus=0", f"--port={port}", f"--dashboard-agent-listen-port={_free_port()}",
               "--include-dashboard=false", "--disable-usage-stats"]
    with open(log, "w") as out:
        head = subprocess.Popen(command, env=dict(os.environ, PYTHONPATH=_worker_path(), **NO_TOKEN), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while "Ray runtime started" not in log.read_text() and head.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert "Ray runtime started" in log.read_text(), log.read_text()[-3000:]
        yield f"127.0.0.1:{port}"
    finally:
        _signal_group(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=3)
        except subprocess.TimeoutExpired:
            _signal_group(head.pid, signal.SIGKILL)
            head.wait()


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:  # the group has ended already
        pass


def _campaign(folder: Path, kind: str, model: str, address: str, capsys) -> CampaignFolder:
    """lock → run → verify through the CLI; the campaign folder it wrote."""
    _write_corpus(folder, kind)
    protocol = folder / "protocol.toml"
    protocol.write_text(_protocol(kind, model, address), encoding="utf-8")
    out = folder / "out"
    assert main(["lock", str(protocol)]) == 0, capsys.readouterr()
    assert main(["run", str(protocol), "--out", str(out)]) == 0, capsys.readouterr()
    capsys.readouterr()
    assert main(["verify", str(out), "--unsealed"]) == 0, capsys.readouterr()
    assert capsys.readouterr().out.startswith(f"verified: {len(ENGINES)} passes, {len(ENGINES)} accepted")
    return CampaignFolder.open(out)


def _judged(campaign: CampaignFolder) -> dict[str, object]:
    """The one row of each engine's variant, each ok, complete and accepted; each prediction file in corpus order."""
    table = campaign.raw_rows()
    rows = {r.variant: r for r in table}
    assert sorted(rows) == sorted(ENGINES) and len(table) == len(ENGINES)
    assert (rows["local"].engine, rows["dp2"].engine, rows["ray"].engine) == ("local", "local", "ray")
    assert (rows["local"].data_parallel, rows["dp2"].data_parallel) == (1, 2)
    for name, row in rows.items():
        assert row.status == "ok", (name, row.error)
        assert row.ids_match and row.format_ok and row.completed == len(IDS), (name, row.notes)
        assert (row.duplicates, row.missing, row.extra) == (0, 0, 0), name
        assert row.threshold_ok and row.tolerance_ok and row.reproduction_ok, (name, row.notes)
        assert row.corpus_accepted, (name, row.notes)
        ids = pq.read_table(campaign.prediction_path(row.prediction_file), columns=["id"]).column("id").to_pylist()
        assert ids == IDS, name
    return rows


def _column(campaign: CampaignFolder, row, name: str) -> list:
    return pq.read_table(campaign.prediction_path(row.prediction_file), columns=[name]).column(name).to_pylist()


def test_classification_on_every_engine_gives_the_reference_labels(tmp_path, capsys, ray_cluster, tiny_classifier_dir):
    campaign = _campaign(tmp_path, "classification", f'kind = "hf_classifier"\npath = "{tiny_classifier_dir}"',
                         ray_cluster, capsys)
    rows = _judged(campaign)
    labels = {name: _column(campaign, row, "label") for name, row in rows.items()}
    for name in ("dp2", "ray"):
        assert rows[name].label_agreement == 1.0 and rows[name].max_abs_prob_diff <= 1e-4, rows[name].notes
        assert labels[name] == labels[REFERENCE], name


def test_embedding_on_every_engine_stays_within_min_cosine_of_the_reference(tmp_path, capsys, ray_cluster,
                                                                           tiny_encoder_dir):
    import numpy as np

    campaign = _campaign(tmp_path, "embedding", f'kind = "encoder"\npath = "{tiny_encoder_dir}"', ray_cluster,
                         capsys)
    rows = _judged(campaign)
    vectors = {name: np.asarray(_column(campaign, row, "vector"), dtype=np.float64) for name, row in rows.items()}
    for name in ("dp2", "ray"):
        assert rows[name].min_cosine is not None and rows[name].min_cosine >= 0.999, rows[name].notes
        cosines = (vectors[name] * vectors[REFERENCE]).sum(axis=1)  # stored normalised (normalize = true)
        assert cosines.min() >= 0.999 and cosines.min() == pytest.approx(rows[name].min_cosine, abs=1e-5), name


def test_generation_on_every_engine_gives_the_reference_texts(tmp_path, capsys, ray_cluster, tiny_causal_lm):
    campaign = _campaign(tmp_path, "generation", f'kind = "hf_causal_lm"\npath = "{tiny_causal_lm}"', ray_cluster,
                         capsys)
    rows = _judged(campaign)
    texts = {name: _column(campaign, row, "text") for name, row in rows.items()}
    assert any(texts[REFERENCE]), "the tiny model generated nothing: the comparison would prove nothing"
    for name in ("dp2", "ray"):
        assert rows[name].identical_share == 1.0, rows[name].notes
        assert texts[name] == texts[REFERENCE], name


def test_scoring_on_every_engine_gives_the_reference_scores(tmp_path, capsys, ray_cluster):
    from scoring_jobs import tiny_cross_encoder_dir

    folder = tiny_cross_encoder_dir(tmp_path / "cross-encoder")
    campaign = _campaign(tmp_path, "scoring", f'kind = "hf_cross_encoder"\npath = "{folder}"', ray_cluster, capsys)
    rows = _judged(campaign)
    scores = {name: _column(campaign, row, "score") for name, row in rows.items()}
    assert len(set(scores[REFERENCE])) > 1, "the tiny cross-encoder gave one score: the comparison would prove nothing"
    for name in ("dp2", "ray"):
        assert rows[name].max_abs_score_diff <= 1e-4 and rows[name].min_kendall_tau >= 0.99, rows[name].notes
        assert max(abs(a - b) for a, b in zip(scores[name], scores[REFERENCE])) <= 1e-4, name
