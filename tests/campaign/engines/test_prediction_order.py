"""Every prediction file is in the corpus copy's order (R7), whatever order its pass ran in: a bucketed pass of each
job kind (classification, embedding, generation) on the local engine and data-parallel, a Ray pass whose blocks
arrive out of order, and ``verify`` refusing a file whose rows are not in corpus order. A bucketed Ray variant is
refused when the protocol is read (the Ray engine does not bucket).

The passes run the Python-callable fakes of the other tests on the factory's twelve documents, whose token
lengths are far from the corpus order: a pass in length order can never pass for one in corpus order."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import fake_embedders
import fake_models
import iteralab
from campaign_factory import TEXTS, write_corpus_csv, write_tokenizer
from iteralab.campaign.kinds import corpusorder
from iteralab.campaign.engines.passes import execute_pass, order_hash
from iteralab.campaign.kinds.embedding.output import VectorWriter, read_vectors
from iteralab.campaign.kinds.generation.output import TextWriter, read_texts

TESTS = (Path(__file__).resolve().parents[2] / "support")
SRC = Path(iteralab.__file__).resolve().parents[1]
CORPUS_IDS = [f"d{i:02d}" for i in range(len(TEXTS))]
CALLABLES = {"classification": "fake_models:keyword_classifier", "embedding": "fake_embedders:word_embedder",
             "generation": "fake_generators:with_counts"}
KINDS = tuple(CALLABLES)


@pytest.fixture
def worker_path(monkeypatch):
    """Pass workers and Ray actors are fresh interpreters: they import this checkout and the tests' fakes."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), str(SRC)]))


def _spec(folder: Path, kind: str, *, bucketing: bool = True, workers: int = 1, fn: str | None = None) -> dict:
    """A pass of ``kind`` over the factory corpus, batches of 2, its prediction file in ``folder/predictions``.
    Classification and embedding callables count tokens with a tiny tokenizer folder (bucketing needs counts); a
    generation callable without one counts characters."""
    corpus = write_corpus_csv(folder)
    (folder / "predictions").mkdir(exist_ok=True)
    model = {"kind": "callable", "path": None if kind == "generation" else str(write_tokenizer(folder / "tok")),
             "head": None, "callable": fn or CALLABLES[kind], "max_length": 64, "truncation": True,
             "trust_remote_code": False}
    if kind == "embedding":
        model["embedding"] = {"task": "embedding", "pooling": "mean", "normalize": True, "dim": None}
    if kind == "generation":
        model["generation"] = {"task": "generation", "prompt": "{text}", "max_new_tokens": 64, "stop": [],
                               "chat_template": False, "allow_truncation": False, "allow_empty": False,
                               "reference_column": None}
    return {"pass_id": "p1", "kind": kind,
            "variant": {"name": "v", "batch_size": 2, "precision": "fp32", "bucketing": bucketing,
                        "padding": "longest", "resume": False, "compile": False, "device": "cpu",
                        "data_parallel": workers},
            "model": model, "classes": list(fake_models.CLASSES) if kind == "classification" else [],
            "corpus_path": str(corpus), "prediction_dir": str(folder / "predictions"),
            "warmup": {"inputs": 0, "passes": 0}, "pass_timeout_s": None, "device": "cpu", "seed": 0,
            "deterministic": False}


def _file_in_corpus_order(folder: Path, kind: str, result: dict, ids: list[str] = CORPUS_IDS) -> None:
    """The pass's file holds ``ids`` in corpus order, each with its own document's output."""
    path = folder / result["prediction_file"]
    texts = dict(zip(CORPUS_IDS, (t for t, _ in TEXTS)))
    table = pq.read_table(path)
    assert table.column("id").to_pylist() == ids
    mine = [texts[i] for i in ids]
    if kind == "classification":
        expected = np.asarray(fake_models.keyword_classifier(mine), dtype=np.float32)
        got = table.column("probs").combine_chunks().values.to_numpy().reshape(len(ids), -1)
        assert np.array_equal(got, expected)
    elif kind == "embedding":
        stored = read_vectors(path, normalize=True)
        assert stored.problem_count == 0
        assert np.allclose(np.asarray(stored.vectors), fake_embedders.word_embedder(mine), atol=1e-6)
    else:
        stored = read_texts(path, max_new_tokens=64, allow_empty=False)
        assert stored.problem_count == 0 and stored.texts.to_pylist() == [t.upper() for t in mine]
        assert stored.tokens.tolist() == [len(t.split()) + 1 for t in mine]


@pytest.mark.parametrize("kind", KINDS)
def test_a_bucketed_local_pass_writes_its_file_in_corpus_order(tmp_path, monkeypatch, kind):
    monkeypatch.setattr(corpusorder, "CHUNK_ROWS", 5)  # a streamed file is rewritten in several chunks
    result = execute_pass(_spec(tmp_path, kind))
    assert result["status"] == "ok", result.get("error")
    _file_in_corpus_order(tmp_path, kind, result)
    # the pass did run in length order: its order hash is not the corpus order's, and nothing is left behind
    assert result["order_hash"] != order_hash(pa.array(CORPUS_IDS))
    assert sorted(p.name for p in (tmp_path / "predictions").iterdir()) == ["p1.parquet"]


def test_a_bucketed_pass_that_fails_writes_its_completed_rows_in_corpus_order(tmp_path):
    # d11 ("weak script") fails its batch; the rows completed before it (in length order) are written
    result = execute_pass(_spec(tmp_path, "classification", fn="fake_models:fail_on_weak_script"))
    assert result["status"] != "ok" and 0 < result["completed"] < len(CORPUS_IDS)
    ids = pq.read_table(tmp_path / result["prediction_file"]).column("id").to_pylist()
    assert len(ids) == result["completed"] and ids == sorted(ids, key=CORPUS_IDS.index)
    assert ids != CORPUS_IDS[:len(ids)]  # not simply the first rows of the corpus: bucketing chose them


@pytest.mark.parametrize("kind", KINDS)
def test_a_bucketed_data_parallel_pass_writes_its_file_in_corpus_order(tmp_path, worker_path, kind):
    from iteralab.campaign.engines.parallel import run_data_parallel

    result = run_data_parallel(_spec(tmp_path, kind, workers=2))
    assert result["status"] == "ok", result.get("error")
    assert all(s["rows"][1] > s["rows"][0] for s in result["parallel"]["shards"])  # both shards hold documents
    _file_in_corpus_order(tmp_path, kind, result)


@pytest.mark.parametrize("writer", ["vectors", "texts"])
def test_a_streamed_file_is_rewritten_in_corpus_order_chunk_by_chunk(tmp_path, monkeypatch, writer):
    """The rewrite gathers each chunk from several record batches of the pass-order file, in any order."""
    monkeypatch.setattr(corpusorder, "CHUNK_ROWS", 4)
    rng = np.random.default_rng(3)
    n = 23
    positions = rng.permutation(n)
    ids = pa.array([f"r{p:02d}" for p in positions])
    sink = VectorWriter(tmp_path / "p.parquet") if writer == "vectors" else TextWriter(tmp_path / "p.parquet")
    for start in range(0, n, 3):  # written in small batches, in pass order
        part = positions[start:start + 3]
        if writer == "vectors":
            sink.write(ids.slice(start, 3), np.repeat(part[:, None], 2, axis=1).astype(np.float32))
        else:
            sink.write(ids.slice(start, 3), [f"t{p}" for p in part], part.astype(np.int32), ["stop"] * len(part))
    fresh = corpusorder.rewrite_in_corpus_order(sink, positions)
    fresh.close()
    table = pq.read_table(tmp_path / "p.parquet")
    assert table.column("id").to_pylist() == [f"r{p:02d}" for p in range(n)]
    if writer == "vectors":
        assert table.column("vector").combine_chunks().values.to_numpy().tolist() == [float(p) for p in range(n)
                                                                                      for _ in range(2)]
    else:
        assert table.column("text").to_pylist() == [f"t{p}" for p in range(n)]
    assert [p.name for p in tmp_path.iterdir()] == ["p.parquet"]  # the scratch files are gone


# ----------------------------------------------------------------------------------------------------- Ray


@pytest.mark.ray  # a local Ray of its own: CI's one-process step runs it (.ci/run); test_raypass keeps one in the default run
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed (pip install iteralab[ray])")
def test_a_ray_pass_of_every_kind_writes_its_file_in_corpus_order(tmp_path, worker_path, monkeypatch):
    """One local Ray, two actors, blocks of two documents; the actor that gets the first block holds it back until
    another block is answered, so a classification pass receives later blocks first (the order hash shows it) and
    still writes corpus order."""
    from iteralab.campaign.engines.raypass import RayEngine
    from iteralab.campaign.records import PassSpec
    from iteralab.plan.protocol import parse_protocol
    from protocol_factory import protocol_toml

    monkeypatch.setenv("FAKE_MODEL_SLOW_TEXT", TEXTS[0][0])
    monkeypatch.setenv("FAKE_MODEL_SIGNAL_DIR", str(tmp_path))
    protocol = parse_protocol(protocol_toml(variants="""ray_num_cpus = 2
ray_actors = 2
ray_cpus_per_actor = 0.5
ray_no_progress_timeout_s = 60

[[variants]]
name = "b2-ray"
batch_size = 2
engine = "ray"
""", reference="b2-ray"))
    engine = RayEngine(protocol)
    engine.start()
    try:
        results = {}
        for kind in KINDS:
            folder = tmp_path / kind
            folder.mkdir()
            fn = "fake_order_models:slow_on_one_text" if kind == "classification" else None
            spec = _spec(folder, kind, bucketing=False, fn=fn)
            spec["model"]["path"] = None  # no bucketing: no tokenizer needed in the actors
            results[kind] = engine.run_pass(PassSpec.from_json(spec))
            assert results[kind].status == "ok", results[kind].error
            _file_in_corpus_order(folder, kind, results[kind].to_json())
    finally:
        engine.stop()
    assert results["classification"].extra["order_hash"] != order_hash(pa.array(CORPUS_IDS))  # received out of order


def test_a_bucketed_ray_variant_is_refused_when_the_protocol_is_locked(tmp_path, capsys):
    from campaign_factory import callable_campaign

    from iteralab.cli import main

    path = callable_campaign(tmp_path, locked=False, variants="""ray_num_cpus = 2
ray_actors = 1
ray_cpus_per_actor = 1

[[variants]]
name = "b4-ray-sorted"
batch_size = 4
engine = "ray"
bucketing = true
""", reference="b4-ray-sorted")
    capsys.readouterr()
    assert main(["lock", str(path)]) != 0
    err = capsys.readouterr().err
    assert "b4-ray-sorted" in err and "engine 'ray' with bucketing = true" in err and "Traceback" not in err
    assert "declare bucketing = false for the Ray variant, or engine 'local'" in err


# --------------------------------------------------------------------------------------------------- verify


def test_verify_refuses_a_prediction_file_whose_rows_are_not_in_corpus_order(tmp_path, monkeypatch):
    """A campaign whose bucketed pass wrote its file in length order (as passes did before the order was restored),
    with every hash consistent: verify names the file and the first row out of order."""
    from campaign_factory import callable_campaign

    from iteralab.campaign.kinds.classification import sink as classification_sink
    from iteralab.evidence.run import run_campaign
    from iteralab.evidence.verify import audit_campaign

    variants = """
[[variants]]
name = "b4"
batch_size = 4

[[variants]]
name = "b4-sorted"
batch_size = 4
bucketing = true

[[series]]
name = "sorting"
factor = "bucketing"
variants = ["b4", "b4-sorted"]
"""
    model = 'kind = "callable"\ncallable = "fake_models:keyword_classifier"\npath = "tokenizer"'
    for name in ("fair", "shuffled"):
        write_tokenizer(tmp_path / name / "tokenizer")
    fair = callable_campaign(tmp_path / "fair", model=model, variants=variants, passes=1)
    run_campaign(fair, tmp_path / "fair" / "out")
    report = audit_campaign(tmp_path / "fair" / "out", require_seal=False)
    assert report.ok, report.differences

    monkeypatch.setattr(classification_sink, "in_corpus_order", lambda ids, probs, positions: (ids, probs))  # the old writer
    shuffled = callable_campaign(tmp_path / "shuffled", model=model, variants=variants, passes=1)
    run_campaign(shuffled, tmp_path / "shuffled" / "out")
    report = audit_campaign(tmp_path / "shuffled" / "out", require_seal=False)
    assert len(report.differences) == 1, report.differences
    [line] = report.differences
    assert line.startswith("predictions/") and "ids are not in the corpus copy's order: row " in line
    assert "a prediction file lists its ids in its corpus copy's order" in line


def test_the_order_check_names_the_first_row_out_of_order():
    from iteralab.evidence.verify import order_problem

    corpus = pa.array(["a", "b", "c", "d"])
    assert order_problem(corpus, corpus) is None
    assert order_problem(pa.array(["a", "c", "d"]), corpus) is None  # a missing id is the verdict's matter
    assert order_problem(pa.array(["a", "x", "b", "b"]), corpus) is None  # so are strangers and repeats
    problem = order_problem(pa.array(["a", "c", "b", "d"]), corpus)
    assert problem == ("ids are not in the corpus copy's order: row 3 holds id 'b' (corpus row 2) after id 'c' "
                       "(corpus row 3); 1 place(s) where the next row comes earlier in the corpus")
